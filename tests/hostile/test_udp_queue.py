"""Issue 12, item 3: a UDP receive queue is charged per datagram (payload + a fixed overhead,
as Linux charges skb truesize), so a flood of empty datagrams cannot queue without limit."""

from __future__ import annotations

from scapy.layers.inet import IP, UDP

from ustack.transport.udp import DATAGRAM_OVERHEAD

from .frames import A_IP, B_IP, E, drops, fresh, inject


def test_fifty_thousand_empty_datagrams_cannot_queue():
    net, ep, _ = fresh()
    frame = bytes(E / IP(src=B_IP, dst=A_IP) / UDP(sport=5, dport=7))
    for _ in range(50_000 // 500):
        inject(net, *([frame] * 500))
        while net.a.poll(net.clock.now) == net.clock.now:
            pass
    limit = ep.rcvbuf // DATAGRAM_OVERHEAD  # 277 at the default 212,992 bytes
    assert len(ep.queue) == limit
    assert ep.rmem == limit * DATAGRAM_OVERHEAD <= ep.rcvbuf
    assert drops(net, "udp.rcvbuf_full") == 50_000 - limit
    # Reading frees the charge: one more fits after one is read.
    ep.pop()
    inject(net, frame)
    assert len(ep.queue) == limit and ep.rmem == limit * DATAGRAM_OVERHEAD


def test_payload_and_overhead_are_both_charged_and_released():
    net, ep, _ = fresh()
    inject(net, E / IP(src=B_IP, dst=A_IP) / UDP(sport=5, dport=7) / (b"p" * 100))
    assert ep.queued_bytes == 100 and ep.rmem == 100 + DATAGRAM_OVERHEAD
    assert ep.pop()[0] == b"p" * 100
    assert ep.queued_bytes == 0 and ep.rmem == 0
