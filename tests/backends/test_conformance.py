"""Device conformance: every backend passes the same tests against a real peer.

(a) kernel frames arrive exact, with complete checksums; (b) frames we build
leave exact and the kernel accepts them; (c) bursts of 1000 each way through
small buffers (recycling); (d) close() and reopen; plus: no loopback of our
own transmissions, and the Device protocol's bookkeeping rules.
"""

from __future__ import annotations

import errno
import socket
import struct
import time

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw, raw

from tests.backends.link import (
    collect,
    drain_udp,
    ipv4_udp_frame,
    l4_checksum_ok,
    parse_ipv4_l4,
    random_payload,
    transmit,
    udp_dport,
    wait_readable,
)
from ustack.device import Device, DeviceError

pytestmark = pytest.mark.privileged

BROADCAST = b"\xff" * 6


def test_device_implements_protocol(link):
    dev = link.device
    assert isinstance(dev, Device)
    caps = dev.capabilities
    assert caps.mac == link.stack_mac
    assert caps.mtu == 1500
    assert caps.frame_size >= caps.mtu + 14
    assert caps.max_burst >= 1
    assert dev.fileno() >= 0


@pytest.mark.parametrize("cast", ["unicast", "broadcast"])
def test_kernel_udp_arrives_exact(link, cast):
    peer = link.peer_udp(9000)
    payload = random_payload(333)
    dst = link.stack_ip if cast == "unicast" else "198.18.0.255"
    peer.sendto(payload, (dst, 7777))
    frames = collect(link.device, lambda f: udp_dport(f, 7777), 1)
    assert len(frames) == 1
    frame = frames[0]
    assert frame[0:6] == (link.stack_mac if cast == "unicast" else BROADCAST)
    assert frame[6:12] == link.peer_mac
    src, dst_ip, proto, sport, dport, l4 = parse_ipv4_l4(frame)
    assert (src, dst_ip, proto, sport, dport) == (link.peer_ip, dst, 17, 9000, 7777)
    assert l4[8:] == payload
    assert len(frame) == 14 + 20 + 8 + len(payload)
    # complete checksum, not the CHECKSUM_PARTIAL pseudo-header sum, unless the device marks it partial
    # (a TAP that offered the kernel checksum offload); then exactly the pseudo-header sum
    assert struct.unpack_from("!H", l4, 6)[0] != 0
    assert l4_checksum_ok(frame)
    if frame.mark & 0x8:
        assert link.device.gso  # only a device that offered checksum offload may be handed partial sums
        return
    # scapy as the independent oracle
    pkt = Ether(frame)
    sent_sum = pkt[UDP].chksum
    del pkt[UDP].chksum
    assert Ether(raw(pkt))[UDP].chksum == sent_sum


def test_kernel_tcp_syn_has_complete_checksum(link):
    peer = link.peer_tcp()
    assert peer.connect_ex((link.stack_ip, 8080)) == errno.EINPROGRESS

    def is_syn(f):
        parsed = parse_ipv4_l4(f)
        return parsed is not None and parsed[2] == 6 and parsed[4] == 8080

    frames = collect(link.device, is_syn, 1)
    assert len(frames) == 1
    pkt = Ether(frames[0])
    assert pkt[TCP].flags == "S"
    assert l4_checksum_ok(frames[0])


def test_our_frame_leaves_exact_and_kernel_accepts_it(link):
    peer = link.peer_udp(9001)
    capture = link.peer_capture()
    payload = random_payload(200)
    frame = raw(
        Ether(src=link.stack_mac, dst=link.peer_mac)
        / IP(src=link.stack_ip, dst=link.peer_ip, id=4242)
        / UDP(sport=5555, dport=9001)
        / Raw(payload)
    )
    slots = link.device.tx_reserve(1)
    assert len(slots) == 1
    assert len(slots[0]) >= len(frame)
    slots[0][: len(frame)] = frame
    link.device.tx_commit([len(frame)])
    got = drain_udp(peer, 1)
    assert got == [(payload, (link.stack_ip, 5555))]
    # byte-exact on the wire as the peer's interface saw it
    deadline = time.monotonic() + 5
    seen = None
    while seen is None and wait_readable(capture.fileno(), deadline):
        while True:
            try:
                data = capture.recv(65536)
            except BlockingIOError:
                break
            if udp_dport(data, 9001):
                seen = data
                break
    assert seen == frame


def test_own_transmissions_are_not_received(link):
    peer = link.peer_udp(9002)
    frame = ipv4_udp_frame(link.stack_mac, link.peer_mac, link.stack_ip, link.peer_ip, 5556, 9002, b"mine")
    assert transmit(link.device, [frame]) == 1
    assert drain_udp(peer, 1) == [(b"mine", (link.stack_ip, 5556))]
    # the peer answers after it has our frame: anything looped back would come first
    peer.sendto(b"marker", (link.stack_ip, 7778))
    seen = collect(link.device, lambda f: False, 0, until=lambda f: udp_dport(f, 7778))
    assert seen and udp_dport(seen[-1], 7778)
    assert frame not in seen


def test_rx_burst_of_1000_through_small_buffers(small_link):
    link = small_link
    assert link.small_capacity < 1000
    peer = link.peer_udp(9003)
    received: dict[int, bytes] = {}
    batch = 50
    for start in range(0, 1000, batch):
        for seq in range(start, start + batch):
            peer.sendto(struct.pack("!I", seq) + b"x" * 20, (link.stack_ip, 7779))
        frames = collect(link.device, lambda f: udp_dport(f, 7779), batch)
        for f in frames:
            l4 = parse_ipv4_l4(f)[5]
            assert l4_checksum_ok(f)
            received[struct.unpack_from("!I", l4, 8)[0]] = f
        assert len(received) == start + batch, f"lost frames in batch at {start}"
    assert sorted(received) == list(range(1000))
    # still healthy after recycling its buffers many times over
    peer.sendto(b"after", (link.stack_ip, 7780))
    assert len(collect(link.device, lambda f: udp_dport(f, 7780), 1)) == 1


def test_tx_burst_of_1000_through_small_buffers(small_link):
    link = small_link
    peer = link.peer_udp(9004)
    got = []
    batch = 50
    for start in range(0, 1000, batch):
        frames = [
            ipv4_udp_frame(link.stack_mac, link.peer_mac, link.stack_ip, link.peer_ip, 5557, 9004,
                           struct.pack("!I", seq) + b"y" * 20, ident=seq)
            for seq in range(start, start + batch)
        ]
        assert transmit(link.device, frames) == batch
        got += drain_udp(peer, batch)
        assert len(got) == start + batch, f"lost frames in batch at {start}"
    seqs = [struct.unpack_from("!I", data)[0] for data, addr in got]
    assert sorted(seqs) == list(range(1000))
    assert all(addr == (link.stack_ip, 5557) for _, addr in got)


def test_unreleased_frames_are_returned_by_release(small_link):
    """Frames held across bursts stay intact until released (no early reuse)."""
    link = small_link
    peer = link.peer_udp(9005)
    for seq in range(10):
        peer.sendto(struct.pack("!I", seq) * 4, (link.stack_ip, 7781))
    held, copies = [], []
    deadline = time.monotonic() + 5
    while len(held) < 10 and time.monotonic() < deadline:
        frames = link.device.rx_burst(3)
        keep = [f for f in frames if udp_dport(f, 7781)]
        link.device.rx_release([f for f in frames if not udp_dport(f, 7781)])
        held += keep
        copies += [bytes(f) for f in keep]
        if not frames:
            wait_readable(link.device.fileno(), deadline)
    assert len(held) == 10
    # more traffic while we hold them must not overwrite them
    for seq in range(20):
        peer.sendto(b"z" * 64, (link.stack_ip, 7782))
    more = collect(link.device, lambda f: udp_dport(f, 7782), 20)
    assert len(more) == 20
    assert [bytes(f) for f in held] == copies
    link.device.rx_release(held)


def test_tx_commit_rules(link):
    dev = link.device
    slots = dev.tx_reserve(2)
    assert len(slots) == 2
    assert all(len(s) == dev.capabilities.frame_size for s in slots)
    with pytest.raises(ValueError):
        dev.tx_commit([60, 60, 60])  # more than reserved
    slots = dev.tx_reserve(1)
    with pytest.raises(ValueError):
        dev.tx_commit([dev.capabilities.frame_size + 1])
    slots = dev.tx_reserve(1)
    dev.tx_commit([])  # nothing posted, reservation dropped
    with pytest.raises(ValueError):
        dev.tx_commit([60])


def test_close_leaves_interface_usable_and_reopen_works(link):
    dev = link.device
    dev.close()
    dev.close()  # idempotent
    assert dev.fileno() == -1
    with pytest.raises(DeviceError):
        dev.rx_burst(1)
    with pytest.raises(DeviceError):
        dev.tx_reserve(1)
    with link.topo.in_stack_ns():
        assert socket.if_nametoindex(link.topo.stack_ifname) > 0
    link.reopen()
    peer = link.peer_udp(9006)
    peer.sendto(b"again", (link.stack_ip, 7783))
    frames = collect(link.device, lambda f: udp_dport(f, 7783), 1)
    assert len(frames) == 1 and parse_ipv4_l4(frames[0])[5][8:] == b"again"
    frame = ipv4_udp_frame(link.stack_mac, link.peer_mac, link.stack_ip, link.peer_ip, 5558, 9006, b"back")
    assert transmit(link.device, [frame]) == 1
    assert drain_udp(peer, 1) == [(b"back", (link.stack_ip, 5558))]
