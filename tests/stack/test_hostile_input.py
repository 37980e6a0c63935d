"""Hostile input against a whole stack: random and mutated frames never crash it, every
rejected frame is a named, counted drop, and it keeps answering correctly afterwards."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import ARP, Ether

from ustack.net.addr import ANY4, parse as ip_addr

from .netsim import Net

A_MAC, B_MAC = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
E = Ether(src=B_MAC, dst=A_MAC)
IPH = IP(src="198.18.0.2", dst="198.18.0.1")

SEEDS = [bytes(p) for p in (
    E / IPH / UDP(sport=5000, dport=7) / b"payload",
    E / IPH / UDP(sport=5000, dport=9) / b"closed port",
    E / IPH / TCP(sport=4000, dport=80, flags="S", options=[("MSS", 1460), ("WScale", 7), ("SAckOK", b""),
                                                             ("Timestamp", (1, 0))]),
    E / IPH / TCP(sport=4000, dport=81, flags="PA", seq=1, ack=1) / b"data",
    E / IPH / ICMP(type=8, id=1, seq=1) / b"ping",
    E / IPH / ICMP(type=3, code=3) / bytes(IP(src="198.18.0.1", dst="198.18.0.2") / UDP(sport=7, dport=5000)),
    E / IP(src="198.18.0.2", dst="198.18.0.1", flags="MF", id=9, proto=17) / (b"f" * 64),
    E / IP(src="198.18.0.2", dst="198.18.0.1", frag=8, id=9, proto=17) / (b"g" * 64),
    E / IP(src="198.18.0.2", dst="198.18.0.1", options=[b"\x07\x07\x04\x00\x00\x00\x00\x00"]) / UDP(dport=7),
    E / ARP(op=1, psrc="198.18.0.2", pdst="198.18.0.1", hwsrc=B_MAC),
    E / ARP(op=2, psrc="198.18.0.9", pdst="198.18.0.1", hwsrc=B_MAC),
)]


def fresh():
    net = Net()
    ep = net.a.udp.endpoint()
    net.a.udp.bind(ep, ANY4, 7)
    lst = net.a.tcp.listen((b"\0\0\0\0", 80), 4)
    return net, ep, lst


def inject(net, frames):
    for f in frames:
        net.link.a._deliver(net.clock.now, bytes(f))
    net.a.poll(net.clock.now)


def still_works(net):
    got = []
    net.b.icmp.echo_handlers[99] = lambda seq, i, data, src, now, ttl: got.append(data)
    net.b.icmp.ping(ip_addr("198.18.0.1"), 99, 1, net.clock.now, b"after the storm")
    net.run(lambda: got, 5)
    assert got == [b"after the storm"]


mutation = st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=8)


@given(st.lists(st.tuples(st.sampled_from(SEEDS), mutation, st.integers(0, 120)), min_size=1, max_size=30))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_frames_never_crash_and_every_frame_is_accounted(batch):
    net, ep, lst = fresh()
    frames = []
    for seed, flips, cut in batch:
        buf = bytearray(seed)
        for pos, val in flips:
            buf[pos % len(buf)] = val
        if cut:
            buf = buf[:max(0, len(buf) - cut % (len(buf) + 1))]
        frames.append(bytes(buf))
    with net:
        before = net.a.stats["eth.frames_received"]
        inject(net, [f for f in frames if f])  # the pipe carries no empty frames
        assert net.a.stats["eth.frames_received"] - before == len([f for f in frames if f])
        net.run(max_time=35)  # let reassembly and TCP timers run out
        still_works(net)
        assert net.a.ipv4.reassembler.held == 0


@given(st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=40))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_bytes_never_crash(frames):
    net, ep, lst = fresh()
    with net:
        inject(net, frames)
        inject(net, [bytes.fromhex("02000000000a02000000000b0800") + f for f in frames])
        drops = sum(net.a.stats.drops().values())
        assert drops >= 1
        still_works(net)


def test_syn_flood_is_bounded_by_cookies_and_real_clients_still_connect():
    net, ep, lst = fresh()
    flood = [bytes(E / IP(src=f"198.18.0.{2 + i % 200}", dst="198.18.0.1") /
                   TCP(sport=10000 + i, dport=80, flags="S", seq=i * 7919)) for i in range(2000)]
    for i in range(0, len(flood), 64):
        inject(net, flood[i:i + 64])
    assert lst.half_open <= lst.syn_backlog
    assert lst.cookies_sent > 0
    # A real client still gets in.
    conn = net.b.tcp.connect(None, (b"\xc6\x12\x00\x01", 80), net.clock.now)
    net.run(lambda: conn.connected and lst.readable, 10)
    assert conn.connected and lst.accept() is not None
