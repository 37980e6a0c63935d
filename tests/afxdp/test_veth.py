"""AfXdpDevice on a real veth pair, native and generic XDP, against the peer's kernel."""

from __future__ import annotations

import os
import select
import socket
import struct
import subprocess
import threading
import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import raw

from tests.afxdp.helpers import (
    collect,
    open_device,
    peer_capture,
    peer_udp,
    transmit,
    udp_dport,
    udp_frame,
    xdp_prog_id,
)
from ustack.device import Device

pytestmark = pytest.mark.privileged


def test_capabilities_report_the_mode_obtained(topo, xdp_mode):
    with open_device(topo, xdp_mode=xdp_mode) as dev:
        caps = dev.capabilities
        assert isinstance(dev, Device)
        assert caps.mac == topo.stack_mac
        assert caps.mtu == 1500
        assert caps.frame_size >= caps.mtu + 14
        assert caps.max_burst == 256
        # veth has no zero-copy: auto falls back to copy mode
        assert caps.mode == f"afxdp {xdp_mode} copy need_wakeup sg gso"  # noqueue veth: gso auto is on
        assert caps.zero_copy is False
        extra = caps.extra
        assert {k: extra[k] for k in ("xdp_mode", "zerocopy", "need_wakeup", "sg", "queue")} == {
            "xdp_mode": xdp_mode, "zerocopy": False, "need_wakeup": True, "sg": True, "queue": 0,
        }
        assert xdp_prog_id(topo) == extra["xdp_prog_id"] != 0
        assert dev.fileno() >= 0


def test_kernel_udp_arrives_byte_exact(topo, xdp_mode):
    payload = os.urandom(333)
    with open_device(topo, xdp_mode=xdp_mode) as dev, peer_udp(topo, 9000) as peer:
        peer.sendto(payload, (topo.stack_addr, 7777))
        frames = collect(dev, lambda f: udp_dport(f) == 7777, 1)
    assert len(frames) == 1
    frame = frames[0]
    pkt = Ether(frame)
    assert (pkt.dst, pkt.src) == (_mac(topo.stack_mac), _mac(topo.peer_mac))
    assert (pkt[IP].src, pkt[IP].dst, pkt[UDP].sport, pkt[UDP].dport) == (topo.peer_addr, topo.stack_addr, 9000, 7777)
    assert bytes(pkt[UDP].payload) == payload
    assert len(frame) == 14 + 20 + 8 + len(payload)
    # every byte as a wire would carry it: scapy rebuilds the same frame with
    # freshly computed checksums
    sent_ip, sent_udp = pkt[IP].chksum, pkt[UDP].chksum
    del pkt[IP].chksum
    del pkt[UDP].chksum
    assert raw(pkt) == frame
    assert (Ether(raw(pkt))[IP].chksum, Ether(raw(pkt))[UDP].chksum) == (sent_ip, sent_udp)


def test_transmitted_frame_arrives_byte_exact(topo, xdp_mode):
    payload = os.urandom(200)
    frame = udp_frame(topo, payload, 5555, 9001)
    with open_device(topo, xdp_mode=xdp_mode) as dev, peer_udp(topo, 9001) as peer, peer_capture(topo) as cap:
        transmit(dev, [frame])
        data, addr = peer.recvfrom(65536)
        assert data == payload
        assert addr == (topo.stack_addr, 5555)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            seen = cap.recv(65536)
            if udp_dport(seen) == 9001:
                break
        assert seen == frame


def test_ten_thousand_frames_round_trip_without_loss(topo, xdp_mode):
    """We send numbered datagrams to a kernel echo socket and get every one back once."""
    total, window = 10_000, 64
    echo = peer_udp(topo, 9002, timeout=0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                data, addr = echo.recvfrom(2048)
            except socket.timeout:
                continue
            echo.sendto(data, addr)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        with open_device(topo, xdp_mode=xdp_mode) as dev:
            seen = bytearray(total)
            sent = received = 0
            deadline = time.monotonic() + 30
            while received < total:
                assert time.monotonic() < deadline, f"only {received} of {total} frames came back"
                if sent < total and sent - received < window:
                    n = min(16, total - sent, window - (sent - received))
                    transmit(dev, [udp_frame(topo, struct.pack("!I", sent + k) + b"r" * 60, 6000, 9002)
                                   for k in range(n)])
                    sent += n
                frames = dev.rx_burst(64)
                if not frames:
                    select.select([dev.fileno()], [], [], 0.05)
                    continue
                for f in frames:
                    if udp_dport(f) == 6000:
                        seq = struct.unpack_from("!I", f, 42)[0]
                        assert bytes(f[46:]) == b"r" * 60
                        assert seen[seq] == 0, f"frame {seq} twice"
                        seen[seq] = 1
                        received += 1
                dev.rx_release(frames)
            assert sum(seen) == total
            stats = dev.stats()
            assert stats["rx_bad_desc"] == stats["tx_bad_completion"] == 0
            assert stats["kernel.rx_dropped"] == stats["kernel.rx_ring_full"] == 0
    finally:
        stop.set()
        server.join(timeout=5)
        echo.close()


def test_jumbo_datagrams_both_ways_via_multi_buffer(jumbo_topo, xdp_mode):
    topo = jumbo_topo
    payload_in, payload_out = os.urandom(8000), os.urandom(8000)
    with open_device(topo, xdp_mode=xdp_mode) as dev, peer_udp(topo, 9003) as peer:
        assert dev.capabilities.mtu == 9000
        assert dev.capabilities.extra["sg"] is True
        assert dev.capabilities.frame_size >= 9014
        # in: one 8042-byte frame, not IP fragments
        peer.sendto(payload_in, (topo.stack_addr, 7003))
        (frame,) = collect(dev, lambda f: udp_dport(f) == 7003, 1)
        pkt = Ether(frame)
        assert len(frame) == 14 + 20 + 8 + 8000
        assert pkt[IP].frag == 0 and not pkt[IP].flags.MF
        assert bytes(pkt[UDP].payload) == payload_in
        assert dev.stats()["rx_multi_buffer"] >= 1
        # out: a frame longer than a UMEM frame leaves as several descriptors
        transmit(dev, [udp_frame(topo, payload_out, 5003, 9003)])
        data, addr = peer.recvfrom(65536)
        assert data == payload_out and addr == (topo.stack_addr, 5003)
        assert dev.stats()["tx_descs"] == 2  # 8042 bytes: 4096 + 3946


def test_arp_request_from_the_kernel_reaches_us(topo, xdp_mode):
    target = "198.18.0.3"  # no neighbour entry: the peer's kernel must ask
    with open_device(topo, xdp_mode=xdp_mode) as dev, peer_udp(topo, 9004) as peer:
        peer.sendto(b"x", (target, 9))

        def is_arp(f):
            return len(f) >= 42 and f[12:14] == b"\x08\x06"

        frames = collect(dev, is_arp, 1)
    assert frames
    arp = Ether(frames[0])
    assert arp.dst == "ff:ff:ff:ff:ff:ff" and arp.src == _mac(topo.peer_mac)
    assert (arp[ARP].op, arp[ARP].psrc, arp[ARP].pdst, arp[ARP].hwsrc) == (1, topo.peer_addr, target, _mac(topo.peer_mac))


def test_close_detaches_and_the_queue_can_be_bound_again(topo, xdp_mode):
    dev = open_device(topo, xdp_mode=xdp_mode)
    assert xdp_prog_id(topo) != 0
    dev.close()
    dev.close()  # idempotent
    assert dev.fileno() == -1
    assert xdp_prog_id(topo) == 0
    with open_device(topo, xdp_mode=xdp_mode) as again:
        assert xdp_prog_id(topo) != 0
        with peer_udp(topo, 9005) as peer:
            peer.sendto(b"after reopen", (topo.stack_addr, 7005))
            assert collect(again, lambda f: udp_dport(f) == 7005, 1)
    assert xdp_prog_id(topo) == 0


def test_close_with_frames_still_lent(topo):
    dev = open_device(topo)
    with peer_udp(topo, 9006) as peer:
        peer.sendto(b"held", (topo.stack_addr, 7006))
        deadline = time.monotonic() + 5
        held = []
        while not held and time.monotonic() < deadline:
            select.select([dev.fileno()], [], [], 0.1)
            held = dev.rx_burst(8)
    dev.tx_reserve(4)
    dev.close()  # frames still lent, slots still reserved: close anyway
    assert xdp_prog_id(topo) == 0
    dev.rx_release(held)  # harmless after close
    with open_device(topo) as again:
        assert again.fileno() >= 0


def test_without_need_wakeup_and_small_frames(topo):
    payload = os.urandom(1400)
    with open_device(topo, need_wakeup=False, frame_size=2048, num_frames=64, ring_size=32) as dev, \
            peer_udp(topo, 9007) as peer:
        assert dev.capabilities.mode.startswith("afxdp native copy")
        assert "need_wakeup" not in dev.capabilities.mode
        assert dev.capabilities.frame_size == 2048
        transmit(dev, [udp_frame(topo, payload, 5007, 9007)] * 100)
        for _ in range(100):
            assert peer.recvfrom(65536)[0] == payload
        peer.sendto(payload, (topo.stack_addr, 7007))
        (frame,) = collect(dev, lambda f: udp_dport(f) == 7007, 1)
        assert frame[42:] == payload


def test_second_queue_socket_shares_our_program(topo):
    """A device opened while ours is attached reuses it and leaves it to the owner."""
    # veth allocates 2 RX queues but activates 1 (FACTS.md): activate the second
    ethtool = topo.stack_popen(["ethtool", "-L", topo.stack_ifname, "rx", "2"], stderr=subprocess.PIPE)
    assert ethtool.wait(timeout=10) == 0, ethtool.stderr.read()
    with open_device(topo, queue=0) as first:
        prog = xdp_prog_id(topo)
        with open_device(topo, queue=1) as second:
            assert second.capabilities.extra["xdp_prog_id"] == prog
            assert second.capabilities.extra["xdp_prog_owned"] is False
        assert xdp_prog_id(topo) == prog
    assert xdp_prog_id(topo) == 0


def _mac(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)
