"""ustack.backends.registry: opening backends by kind, and refusing clearly."""

from __future__ import annotations

import errno
import os
import sys
import types

import pytest

from ustack.backends import registry
from ustack.backends.packet_ring import PacketRingDevice
from ustack.backends.tap import TapDevice
from ustack.tools.netns import Topology
from ustack.device import DeviceError


def test_pipe_is_not_opened_by_name():
    with pytest.raises(DeviceError) as info:
        registry.open_device("pipe", "eth0")
    assert "PipeLink" in str(info.value)


def test_unknown_kind():
    with pytest.raises(DeviceError) as info:
        registry.open_device("netmap", "eth0")
    assert info.value.errno == errno.EINVAL
    assert "unknown backend kind 'netmap'" in str(info.value)


def test_afxdp_without_its_device_class_is_a_device_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ustack.backends.afxdp", types.ModuleType("ustack.backends.afxdp"))
    with pytest.raises(DeviceError) as info:
        registry.open_device("afxdp", "eth0")
    assert "afxdp backend cannot be imported" in str(info.value)
    assert "afxdp" not in registry.available_backends()


def test_afxdp_that_fails_to_import_is_a_device_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ustack.backends.afxdp", None)  # import raises ImportError
    with pytest.raises(DeviceError) as info:
        registry.open_device("afxdp", "eth0")
    assert "cannot be imported" in str(info.value)


def test_afxdp_device_class_is_used(monkeypatch):
    module = types.ModuleType("ustack.backends.afxdp")
    module.AfXdpDevice = lambda ifname, **opts: ("afxdp", ifname, opts)
    monkeypatch.setitem(sys.modules, "ustack.backends.afxdp", module)
    assert registry.open_device("afxdp", "eth0", queue=0) == ("afxdp", "eth0", {"queue": 0})
    assert "afxdp" in registry.available_backends()


def test_available_backends_lists_tap_and_packet():
    kinds = registry.available_backends()
    assert "packet" in kinds
    assert ("tap" in kinds) == os.path.exists("/dev/net/tun")
    assert "pipe" not in kinds


@pytest.mark.privileged
def test_open_device_builds_the_right_backend(privileged):
    with Topology.veth(tag="b") as topo, topo.in_stack_ns():
        dev = registry.open_device("packet", topo.stack_ifname, block_count=4)
        try:
            assert isinstance(dev, PacketRingDevice)
            assert dev.capabilities.extra["rx_ring"][0] == 4
        finally:
            dev.close()
    with Topology.tap(tag="b") as topo, topo.in_stack_ns():
        dev = registry.open_device("tap", topo.stack_ifname, create=False)
        try:
            assert isinstance(dev, TapDevice)
        finally:
            dev.close()
