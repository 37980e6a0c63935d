"""TapDevice specifics: attach/create rules and the error messages."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ustack.backends.tap import TapDevice
from ustack.tools.netns import Topology
from ustack.device import DeviceError

pytestmark = pytest.mark.privileged

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def topo(privileged):
    with Topology.tap(tag="b") as made:
        yield made


def test_second_attach_is_busy(topo):
    with topo.in_stack_ns():
        first = TapDevice(topo.stack_ifname, create=False)
        try:
            with pytest.raises(DeviceError) as info:
                TapDevice(topo.stack_ifname, create=False)
        finally:
            first.close()
        assert info.value.errno == errno.EBUSY
        assert "busy" in str(info.value)
        TapDevice(topo.stack_ifname, create=False).close()  # free again after close


def test_missing_device_without_create(topo):
    with topo.in_stack_ns():
        with pytest.raises(DeviceError) as info:
            TapDevice("usnotap0", create=False)
    assert info.value.errno == errno.ENODEV
    assert "no network device named 'usnotap0'" in str(info.value)


def test_a_device_that_is_not_a_tap(topo):
    with topo.in_stack_ns():
        with pytest.raises(DeviceError) as info:
            TapDevice("lo")
    assert info.value.errno == errno.EINVAL
    assert "not a single-queue TAP" in str(info.value)


def test_create_makes_a_transient_tap_in_the_current_namespace(topo):
    name = topo.name + "x"
    with topo.in_stack_ns():
        dev = TapDevice(name, mtu=1400)
        try:
            assert socket.if_nametoindex(name) > 0
            assert dev.capabilities.mtu == 1400
            assert dev.capabilities.frame_size == 1400 + 18
            assert dev.capabilities.mac[0] & 0x03 == 0x02  # locally administered unicast
        finally:
            dev.close()
        with pytest.raises(OSError):
            socket.if_nametoindex(name)  # not persistent: gone with its last fd


def test_bad_arguments():
    with pytest.raises(DeviceError):
        TapDevice("x" * 16)
    with pytest.raises(DeviceError):
        TapDevice("tap0", mac=b"\x02\x00")


def test_unprivileged_open_explains_itself():
    """Without CAP_NET_ADMIN / CAP_NET_RAW both backends say what is missing."""
    script = textwrap.dedent(
        """
        import os
        from ustack.backends.tap import TapDevice
        from ustack.backends.packet_ring import PacketRingDevice
        from ustack.device import DeviceError
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
        for opener in (lambda: TapDevice("usnopriv0"), lambda: PacketRingDevice("lo")):
            try:
                opener()
            except DeviceError as exc:
                print(exc.errno, exc.strerror)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, cwd=REPO)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2
    tap_errno, tap_msg = lines[0].split(" ", 1)
    assert int(tap_errno) == errno.EPERM and "CAP_NET_ADMIN" in tap_msg
    pkt_errno, pkt_msg = lines[1].split(" ", 1)
    assert int(pkt_errno) == errno.EPERM and "CAP_NET_RAW" in pkt_msg
