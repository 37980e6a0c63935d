"""ARP, ICMP echo and ICMP errors between two stacks over the pipe backend (manual clock)."""

from __future__ import annotations

import pytest

from ustack.net.addr import parse as ip_addr
from ustack.wire.icmp import IcmpMessage

from .netsim import Net

A = ip_addr("198.18.0.1")
B = ip_addr("198.18.0.2")


def ping(net, src_stack, dst, count=1, payload=b"x" * 56, ident=77, max_time=5.0):
    got = []
    src_stack.icmp.echo_handlers[ident] = lambda seq, i, data, frm, now, ttl: got.append((seq, data, frm, now))
    for seq in range(count):
        src_stack.icmp.ping(dst, ident, seq, net.clock.now, payload)
    net.run(lambda: len(got) >= count, max_time)
    return got


def test_ping_resolves_arp_then_replies_with_same_data():
    net = Net()
    got = ping(net, net.b, A, count=3, payload=b"0123456789")
    assert [(s, d, f) for s, d, f, _ in got] == [(0, b"0123456789", A), (1, b"0123456789", A), (2, b"0123456789", A)]
    assert net.b.stats["arp.requests_sent"] == 1
    assert net.a.stats["icmp.echo_requests_received"] == 3
    assert net.a.arp.lookup(B, net.clock.now) == net.link.b.capabilities.mac


def test_gratuitous_arp_at_start_is_sent():
    net = Net()
    net.step()
    assert net.a.stats["arp.announcements_sent"] == 1
    assert net.b.stats["arp.announcements_sent"] == 1


def test_arp_cache_entry_expires_and_is_re_resolved():
    net = Net()
    ping(net, net.b, A)
    assert net.b.stats["arp.requests_sent"] == 1
    net.clock.advance(61.0 + net.b.arp.stale_time)  # past the ttl and the stale time: forgotten
    assert net.b.arp.lookup(A, net.clock.now) is None
    ping(net, net.b, A)
    assert net.b.stats["arp.requests_sent"] == 2


def test_stale_arp_entry_is_used_and_refreshed_by_a_unicast_poll():
    """RFC 1122 2.3.2.1: past its ttl the entry still carries traffic while a unicast request revalidates it."""
    net = Net()
    ping(net, net.b, A)
    net.clock.advance(61.0)
    ping(net, net.b, A)  # answered at once through the stale entry
    assert net.b.stats["arp.requests_sent"] == 1  # no broadcast, no pending resolution
    assert net.b.stats["arp.unicast_polls_sent"] == 1 and net.a.stats["arp.requests_received"] == 2
    assert net.b.arp.cache[A][1] > net.clock.now  # A's reply made it fresh again
    net.clock.advance(30.0)
    ping(net, net.b, A)
    assert net.b.stats["arp.unicast_polls_sent"] == 1  # fresh: no poll


def test_unresolvable_next_hop_retries_then_drops_the_queue():
    net = Net()
    ghost = ip_addr("198.18.0.99")
    for seq in range(3):
        net.b.icmp.ping(ghost, 1, seq, net.clock.now, b"")
    net.run(max_time=10.0)
    assert net.b.stats["arp.requests_sent"] == 1 + net.b.arp.max_retries
    assert net.b.stats["drop.arp.unresolved"] == 3
    assert net.b.arp.queued == 0


def test_arp_queue_is_bounded():
    net = Net()
    ghost = ip_addr("198.18.0.99")
    for seq in range(net.b.arp.queue_per_host + 5):
        net.b.icmp.ping(ghost, 1, seq, net.clock.now, b"")
    assert net.b.stats["drop.arp.queue_full"] == 5
    assert net.b.arp.queued == net.b.arp.queue_per_host


def test_udp_to_closed_port_gets_rate_limited_port_unreachable():
    net = Net()
    ping(net, net.b, A)  # resolve ARP first so all 20 datagrams leave at once
    ep = net.b.udp.endpoint()
    net.b.udp.connect(ep, A, 9)
    for _ in range(20):
        net.b.udp.send(ep, b"hi", A, 9, net.clock.now)
    net.run(max_time=0.5)
    assert net.a.stats["drop.udp.no_socket"] == 20
    sent = net.a.stats["icmp.errors_sent.type3.code3"]
    assert sent == 6  # burst of the per-destination token bucket
    assert net.a.stats["icmp.errors_rate_limited"] == 14
    assert isinstance(ep.error, ConnectionRefusedError)


def test_broadcast_echo_is_ignored():
    net = Net()
    net.b.icmp.ping(ip_addr("198.18.0.255"), 5, 1, net.clock.now, b"")
    net.run(max_time=1.0)
    assert net.a.stats["drop.icmp.broadcast_echo_ignored"] == 1
    assert net.a.stats["icmp.echo_replies_sent"] == 0


def test_echo_reply_is_the_request_with_type_and_code_zero_and_a_fresh_checksum():
    """RFC 792: identifier, sequence number and data come back as they came; an odd length and a
    non-zero code in the request change nothing else. (The Python path's reply, seen at ``ipv4.output``;
    test_fast_echo holds the fast path's to it byte for byte.)"""
    net = Net(a_kw={"fastpath": False})
    ping(net, net.b, A)  # ARP resolved both ways
    sent = []
    output = net.a.ipv4.output
    net.a.ipv4.output = lambda src, dst, proto, payload, now, **kw: (sent.append((src, dst, proto, bytes(payload))),
                                                                   output(src, dst, proto, payload, now, **kw))
    request = IcmpMessage(8, 5, 0x1234, 0xBEEF, b"odd")
    buf = bytearray(request.length)
    request.emit(buf)
    net.b.ipv4.output(B, A, 1, buf, net.clock.now)
    net.run(lambda: bool(sent), 1.0)
    expected = bytearray(request.length)
    IcmpMessage(0, 0, 0x1234, 0xBEEF, b"odd").emit(expected)
    assert sent == [(A, B, 1, bytes(expected))]
    assert IcmpMessage.parse(expected).checksum != 0  # parse verified it
    assert net.a.stats["icmp.echo_replies_sent"] == 2


def test_no_icmp_error_about_an_icmp_error():
    net = Net()
    net.step()
    quoted = bytearray(28)
    quoted[0] = 0x45
    quoted[9] = 1
    quoted[12:16] = B
    quoted[16:20] = A
    quoted[20] = 3  # the quoted datagram is itself an ICMP error
    assert net.a.icmp.send_error(3, 3, bytes(quoted), B, net.clock.now) is False


def test_echo_reply_payload_is_exact_for_large_fragmented_ping():
    net = Net()
    payload = bytes(range(256)) * 20  # 5120 bytes: fragmented both ways
    got = ping(net, net.b, A, payload=payload)
    assert got and got[0][1] == payload
    assert net.b.stats["ipv4.fragments_sent"] == 4
    assert net.a.stats["ipv4.reassembled"] == 1
    assert net.b.stats["ipv4.reassembled"] == 1


def test_icmp_message_emitted_is_parsed_back():
    msg = IcmpMessage.echo_request(1, 2, b"abc")
    buf = bytearray(msg.length)
    msg.emit(buf)
    assert IcmpMessage.parse(buf).payload == b"abc"
