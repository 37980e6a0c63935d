"""The packet backend keeps the kernel's own IP input off the frames to ustack's addresses.

``ustack serve --backend packet`` (``backends.claim.AddressClaim``, on by
default): the packet socket still receives every frame, the kernel of the
stack's namespace runs IP input on none of those to ustack's address (its
``Ip InReceives`` stays put), frames to another address still reach it, and
the nftables table goes with the stack. ``--no-claim`` leaves the kernel
seeing them all.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest

from tests.interop.harness import Served, echoed_exactly
from ustack.backends.claim import AddressClaim, ClaimError


def _stack_ns_run(topo, *argv) -> str:
    return subprocess.run(["ip", "netns", "exec", topo.stack_ns, *argv], check=True, capture_output=True,
                          text=True, timeout=30).stdout


def ip_in_receives(topo) -> int:
    """The stack namespace kernel's ``Ip: InReceives`` (every IPv4 packet its IP input saw)."""
    lines = [l.split() for l in _stack_ns_run(topo, "cat", "/proc/net/snmp").splitlines() if l.startswith("Ip:")]
    return int(lines[1][lines[0].index("InReceives")])


def claim_tables(topo) -> list[str]:
    listing = json.loads(_stack_ns_run(topo, "nft", "-j", "list", "tables") or '{"nftables": []}')
    return [t["table"]["name"] for t in listing["nftables"] if "table" in t and
            t["table"]["name"].startswith("ustack_claim_")]


@pytest.fixture
def served_packet(tmp_path, request):
    from tests.conftest import privilege_problem, require_privileged, require_tool

    if privilege_problem() is not None:
        require_privileged()
    require_tool("nft")
    s = Served("packet", tmp_path, ["--tcp-echo", "7", *request.param])
    try:
        yield s
    finally:
        s.close()


def _echo_1mb(served) -> None:
    from ustack.tools.netns import peer_socket

    with peer_socket(served.topo, type=socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect((served.topo.stack_addr, 7))
        assert echoed_exactly(s, os.urandom(1_000_000))


@pytest.mark.privileged
@pytest.mark.parametrize("served_packet", [[]], indirect=True)
def test_kernel_input_never_sees_ustack_traffic_and_the_table_goes_with_the_stack(served_packet):
    topo = served_packet.topo
    assert len(claim_tables(topo)) == 1
    before = ip_in_receives(topo)
    _echo_1mb(served_packet)  # ~700 segments in, their ACKs: all to ustack's address
    assert ip_in_receives(topo) == before
    # An address the stack does not own still reaches the kernel: give the kernel one and ping it.
    other = topo.stack_addr.rsplit(".", 1)[0] + ".250"
    _stack_ns_run(topo, "ip", "addr", "add", f"{other}/{topo.prefixlen}", "dev", topo.stack_ifname)
    topo.peer_run(["ip", "neigh", "replace", other, "lladdr", served_packet.mac, "dev", topo.peer_ifname],
                  check=True)
    ping = topo.peer_run(["ping", "-c", "1", "-W", "5", other], capture_output=True, text=True)
    assert ping.returncode == 0, ping.stdout + ping.stderr
    assert ip_in_receives(topo) > before
    served_packet.stop()
    assert claim_tables(topo) == []


@pytest.mark.privileged
@pytest.mark.parametrize("served_packet", [["--no-claim"]], indirect=True)
def test_without_the_claim_the_kernel_runs_ip_input_on_every_frame(served_packet):
    topo = served_packet.topo
    assert claim_tables(topo) == []
    before = ip_in_receives(topo)
    _echo_1mb(served_packet)
    assert ip_in_receives(topo) - before >= 700  # at least the data segments of 1 MB at MSS 1448


@pytest.mark.parametrize("bad", ["not-an-address", "198.18.0.2; flush ruleset", "fd00::1 } drop", ""])
def test_a_claim_takes_addresses_only(bad):
    with pytest.raises(ValueError):
        AddressClaim("lo", [bad])


def test_a_claim_of_nothing_or_an_unquotable_interface_is_refused():
    with pytest.raises(ValueError):
        AddressClaim("lo", [])
    with pytest.raises(ClaimError):
        AddressClaim('x"y', ["198.18.0.2"])
