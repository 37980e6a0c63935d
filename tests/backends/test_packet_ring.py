"""PacketRingDevice specifics: ring recycling, checksum status flags, geometry and errors."""

from __future__ import annotations

import errno
import select
import struct
import time

import pytest

from backends.packet_ring import PacketRingDevice
from tests.backends.link import (
    KernelLink,
    collect,
    drain_udp,
    ipv4_udp_frame,
    l4_checksum_ok,
    parse_ipv4_l4,
    transmit,
    udp_dport,
)
from ustack import _fastpath as fp
from ustack.device import DeviceError

pytestmark = pytest.mark.privileged


def hold_first(dev, want, timeout=5.0):
    """Receive until a frame satisfies ``want``; keep it lent, release the rest.

    Returns (frame view, its rx_status entry) or None at the deadline.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frames = dev.rx_burst(64)
        statuses = list(dev.rx_status)
        found = None
        for f, st in zip(frames, statuses):
            if found is None and want(f):
                found = (f, st)
        dev.rx_release([f for f in frames if found is None or f is not found[0]])
        if found is not None:
            return found
        if not frames:
            select.select([dev.fileno()], [], [], max(0.0, deadline - time.monotonic()))
    return None


@pytest.fixture
def plink(privileged):
    made = KernelLink("packet", small=True)
    try:
        yield made
    finally:
        made.close()


def test_blocks_are_recycled_many_times(plink):
    peer = plink.peer_udp(9100)
    for start in range(0, 600, 50):
        for seq in range(start, start + 50):
            peer.sendto(struct.pack("!I", seq), (plink.stack_ip, 7100))
        assert len(collect(plink.device, lambda f: udp_dport(f, 7100), 50)) == 50
    stats = plink.device.stats
    assert stats["packet_ring.rx_frames"] >= 600
    # 4 blocks in the ring, so each went round many times
    assert stats["packet_ring.rx_blocks_returned"] >= 12
    assert stats["packet_ring.rx_blocks_returned"] == stats["packet_ring.rx_blocks"]
    assert plink.device.kernel_stats()["drops"] == 0
    assert stats.drops() == {}


def test_checksum_flags_absent_with_offloads_off_and_counted_when_on(plink):
    peer = plink.peer_udp(9101)
    peer.sendto(b"complete", (plink.stack_ip, 7101))
    frames = collect(plink.device, lambda f: udp_dport(f, 7101), 1)
    assert l4_checksum_ok(frames[0])
    assert plink.device.stats["packet_ring.rx_csum_notready"] == 0
    # Negative control: with tx checksum offload on, the veth hands over
    # CHECKSUM_PARTIAL frames (FACTS.md), flagged TP_STATUS_CSUMNOTREADY.
    state = plink.topo.set_offloads("peer", tx_checksum_ip_generic=True)
    assert state == {"tx-checksum-ip-generic": True}
    peer.sendto(b"partial", (plink.stack_ip, 7102))
    dev = plink.device
    found = hold_first(dev, lambda f: udp_dport(f, 7102))
    assert found is not None
    frame, status = bytes(found[0]), found[1]
    dev.rx_release([found[0]])
    assert status & 0x8  # TP_STATUS_CSUMNOTREADY, surfaced per frame in rx_status
    assert not l4_checksum_ok(frame)  # only the pseudo-header sum is in it
    assert dev.stats["packet_ring.rx_csum_notready"] == 1


def test_capabilities_describe_the_rings(plink):
    caps = plink.device.capabilities
    assert caps.mode.startswith("packet_ring tpacket_v3 rx / tpacket_v3 tx")
    assert caps.frame_size == 1514
    assert caps.extra["rx_ring"] == (4, 4096)
    assert caps.extra["tx_ring"] == (32, 2048)
    assert caps.extra["retire_tov_ms"] == 1
    assert caps.zero_copy is False


def test_tx_ring_full_returns_fewer_slots(plink):
    dev = plink.device
    # reserve everything without committing: all 32 slots are offered
    assert len(dev.tx_reserve(1000)) == 32
    dev.tx_commit([])


def test_no_such_interface(plink):
    with plink.topo.in_stack_ns():
        with pytest.raises(DeviceError) as info:
            PacketRingDevice("usnosuchif0")
    assert info.value.errno == errno.ENODEV
    assert "no such interface 'usnosuchif0'" in str(info.value)


@pytest.mark.parametrize(
    "opts, words",
    [
        ({"block_size": 5000}, "multiple of the page size"),
        ({"block_size": 0}, "multiple of the page size"),
        ({"block_count": 1}, "block_count"),
        ({"frame_size": 1000}, "multiple of 16"),
        ({"retire_tov_ms": 0}, "retire_tov_ms"),
    ],
)
def test_bad_geometry_is_refused_clearly(plink, opts, words):
    with plink.topo.in_stack_ns():
        with pytest.raises(DeviceError) as info:
            PacketRingDevice(plink.topo.stack_ifname, **opts)
    assert info.value.errno == errno.EINVAL
    assert words in str(info.value)


def test_fanout_group_splits_nothing_with_one_member(plink):
    with plink.topo.in_stack_ns():
        dev = PacketRingDevice(plink.topo.stack_ifname, fanout=(4242 % 65536, 0))
    try:
        peer = plink.peer_udp(9103)
        peer.sendto(b"fan", (plink.stack_ip, 7103))
        frames = collect(dev, lambda f: udp_dport(f, 7103), 1)
        assert parse_ipv4_l4(frames[0])[5][8:] == b"fan"
    finally:
        dev.close()


def test_close_with_frames_still_held_defers_the_unmap(plink):
    peer = plink.peer_udp(9104)
    peer.sendto(b"held", (plink.stack_ip, 7104))
    dev = plink.device
    found = hold_first(dev, lambda f: udp_dport(f, 7104))
    assert found is not None
    held = found[0]
    dev.close()
    assert dev.stats["packet_ring.close_deferred_unmap"] == 1
    assert bytes(held[-4:]) == b"held"  # still mapped while referenced


class StallingSocket:
    """Stands in for the device's socket: the first ``stalls`` kicks send nothing,
    as the kernel does when the send buffer is full."""

    def __init__(self, sock, stalls: int):
        self.sock = sock
        self.stalls = stalls

    def send(self, data, flags=0):
        if self.stalls:
            self.stalls -= 1
            return 0
        return self.sock.send(data, flags)

    def __getattr__(self, name):
        return getattr(self.sock, name)


def test_slots_left_behind_by_a_kick_go_out_on_the_next_poll(plink):
    dev = plink.device
    peer = plink.peer_udp(9105)
    dev._sock = StallingSocket(dev._sock, stalls=1)
    frames = [
        ipv4_udp_frame(plink.stack_mac, plink.peer_mac, plink.stack_ip, plink.peer_ip, 5600, 9105, struct.pack("!I", i))
        for i in range(5)
    ]
    assert transmit(dev, frames) == 5
    assert dev.stats["packet_ring.tx_kick_incomplete"] == 1
    # nothing went: all five slots still wait for the kernel
    assert [fp.tpv3_tx_status(dev._mv, dev._tx_off, 2048, 32, i) for i in range(5)] == [fp.TP_STATUS_SEND_REQUEST] * 5
    dev.rx_release(dev.rx_burst(64))  # the stack's next poll round
    got = drain_udp(peer, 5)
    assert [data for data, _ in got] == [struct.pack("!I", i) for i in range(5)]
    assert dev.stats["packet_ring.tx_kick_incomplete"] == 1
