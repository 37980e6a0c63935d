"""Fixtures for the AF_XDP backend tests: veth topologies from ustack.tools.netns."""

from __future__ import annotations

import pytest

from ustack.tools.netns import Topology


def _veth(mtu: int):
    topo = Topology.veth(mtu=mtu, tag="x")
    try:
        topo.add_peer_neighbour()  # the peer's kernel can send to us without ARP
    except BaseException:
        topo.close()
        raise
    return topo


@pytest.fixture
def topo(privileged):
    topo = _veth(1500)
    try:
        yield topo
    finally:
        topo.close()


@pytest.fixture
def jumbo_topo(privileged):
    topo = _veth(9000)
    try:
        yield topo
    finally:
        topo.close()


@pytest.fixture(params=["native", "generic"])
def xdp_mode(request):
    return request.param
