"""ACK storms and ACK reflection (issue 25 item 1): the ACK an unacceptable segment draws is rate-limited
per connection (Linux's tcp_invalid_ratelimit, 500 ms), so two stacks that one forged segment each has
desynchronized fall quiet, and off-path forgeries are not each reflected."""

from __future__ import annotations

import random

from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from ustack.net.addr import ANY4, parse
from ustack.transport.tcp import State, TcpConfig

from tests.stack.netsim import Net

A_MAC, B_MAC = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
A_IP, B_IP = "198.18.0.1", "198.18.0.2"


def _pair(**cfg):
    """Stacks A (listening on 80) and B connected to it over a 1 ms pipe, timestamps off: (net, a_conn, b_conn)."""
    kw = {"tcp_config": TcpConfig(timestamps=False, **cfg)}
    net = Net(delay=0.001, a_kw=kw, b_kw=kw)
    lst = net.a.tcp.listen((ANY4, 80), 4)
    b_conn = net.b.tcp.connect(None, (parse(A_IP), 80), net.clock.now)
    assert net.run(lambda: b_conn.state == State.ESTABLISHED and lst.pending > 0, max_time=5.0)
    a_conn = lst.accept()
    net.run(max_time=1.0)  # every handshake and announcement frame delivered, every timer quiet
    return net, a_conn, b_conn


def _forged(src_mac, dst_mac, src, dst, sport, dport, seq, ack, payload=b"", flags="A"):
    seg = TCP(sport=sport, dport=dport, seq=seq & 0xFFFFFFFF, ack=ack & 0xFFFFFFFF, flags=flags, window=65535)
    return bytes(Ether(src=src_mac, dst=dst_mac) / IP(src=src, dst=dst) / seg / payload)


def _sent(net):
    return net.link.a.counters["tx"] + net.link.b.counters["tx"]


def test_one_forged_segment_each_way_ends_quiet():
    """A forged in-window data segment into each side: each accepts it, so each side's ACKs now lie left of the
    other's RCV.NXT, and every ACK drew another ACK for ever (one per round trip each way: ~5,000 in 10 s on
    this 1 ms pipe). Rate-limited, the exchange dies within one 500 ms interval."""
    net, a_conn, b_conn = _pair()
    at, bt = a_conn.tcb, b_conn.tcb
    a_port, b_port = a_conn.key[1], b_conn.key[1]
    into_a = _forged(B_MAC, A_MAC, B_IP, A_IP, b_port, a_port, bt.snd_nxt, bt.rcv_nxt, b"forged-to-a")
    into_b = _forged(A_MAC, B_MAC, A_IP, B_IP, a_port, b_port, at.snd_nxt, at.rcv_nxt, b"forged-to-b")
    before = _sent(net)
    net.link.a._deliver(net.clock.now, into_a)
    net.link.b._deliver(net.clock.now, into_b)
    net.run(max_time=1.0)
    first = _sent(net) - before
    net.run(max_time=9.0)
    assert _sent(net) - before == first, "still exchanging ACKs 1 s after the forgeries"
    assert first <= 8, first
    limited = net.a.stats["tcp.invalid_ack_ratelimited"] + net.b.stats["tcp.invalid_ack_ratelimited"]
    assert limited >= 1


def test_off_path_forgeries_are_not_each_reflected():
    """200 spoofed segments (pure ACKs and data, sequence numbers far outside the window) over 1 s draw at
    most one ACK per 500 ms; the others are counted."""
    net, a_conn, b_conn = _pair()
    rnd = random.Random(25)
    at = a_conn.tcb
    a_port, b_port = a_conn.key[1], b_conn.key[1]
    before = net.link.a.counters["tx"]
    for i in range(200):
        seq = (at.rcv_nxt + 0x40000000 + rnd.randrange(0x80000000)) & 0xFFFFFFFF  # a quarter turn away or more
        payload = b"x" * rnd.choice((0, 0, 1, 100))
        net.link.a._deliver(net.clock.now, _forged(B_MAC, A_MAC, B_IP, A_IP, b_port, a_port, seq,
                                                    rnd.randrange(1 << 32), payload))
        net.a.poll(net.clock.now)
        net.clock.set(net.clock.now + 0.005)
    sent = net.link.a.counters["tx"] - before
    assert 1 <= sent <= 3, sent
    assert net.a.stats["drop.tcp.unacceptable"] == 200
    assert net.a.stats["tcp.invalid_ack_ratelimited"] == 200 - sent
    assert a_conn.state == State.ESTABLISHED


def test_retransmitted_data_is_still_acked_at_once():
    """Data wholly left of RCV.NXT by less than a window (the peer's retransmission, our ACK lost) is not
    rate-limited: each copy is ACKed at once, so spoofed pure ACKs cannot starve the real peer of its ACK."""
    net, a_conn, b_conn = _pair()
    at, bt = a_conn.tcb, b_conn.tcb
    a_port, b_port = a_conn.key[1], b_conn.key[1]
    b_conn.send(b"y" * 100, now=net.clock.now)
    net.run(max_time=1.0)
    assert at.rcv_nxt == bt.snd_nxt
    net.link.a._deliver(net.clock.now, _forged(B_MAC, A_MAC, B_IP, A_IP, b_port, a_port, at.rcv_nxt + 0x40000000,
                                               bt.rcv_nxt))  # an off-path ACK: uses up the interval
    before = net.link.a.counters["tx"]
    net.a.poll(net.clock.now)
    for _ in range(3):
        net.link.a._deliver(net.clock.now, _forged(B_MAC, A_MAC, B_IP, A_IP, b_port, a_port, bt.snd_nxt - 100,
                                                   bt.rcv_nxt, b"y" * 100))
        net.a.poll(net.clock.now)
    assert net.link.a.counters["tx"] - before == 4
    assert net.a.stats["tcp.unacceptable_old"] == 3
