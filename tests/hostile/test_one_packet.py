"""Issue 12, item 1: no single frame stops the host.

With no gateway, a reply toward an off-subnet source has no route. Each path
that used to raise ENETUNREACH out of Stack.poll is now a named drop, and an
exception barrier in poll counts any other bug (stack.internal_error) and
goes on with the round.
"""

from __future__ import annotations

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP

from ustack.net.addr import parse as ip_addr

from .frames import A_IP, B_IP, E, drops, fresh, inject

OFF = "10.9.9.9"  # off the subnet, and A has no gateway


def test_echo_from_off_subnet_source_is_a_named_drop():
    net, _, _ = fresh()
    assert inject(net, E / IP(src=OFF, dst=A_IP) / ICMP(type=8, id=1, seq=1) / b"hi") == 0
    assert drops(net, "icmp.echo_no_route") == 1
    assert net.a.stats["icmp.echo_replies_sent"] == 0


def test_udp_to_closed_port_from_off_subnet_source_is_a_named_drop():
    net, _, _ = fresh()
    assert inject(net, E / IP(src=OFF, dst=A_IP) / UDP(sport=5, dport=9) / b"x") == 0
    assert drops(net, "udp.no_socket") == 1
    assert drops(net, "icmp.error_no_route") == 1


def test_unknown_protocol_from_off_subnet_source_is_a_named_drop():
    net, _, _ = fresh()
    assert inject(net, E / IP(src=OFF, dst=A_IP, proto=253) / b"mystery") == 0
    assert drops(net, "ipv4.unknown_protocol") == 1
    assert drops(net, "icmp.error_no_route") == 1


def test_lone_fragment_from_off_subnet_source_times_out_quietly():
    net, _, _ = fresh()
    inject(net, E / IP(src=OFF, dst=A_IP, flags="MF", id=7, proto=17) / (b"f" * 64))
    net.clock.advance(31.0)
    net.a.poll(net.clock.now)  # the reassembly timer fires here; its ICMP has no route
    assert drops(net, "ipv4.frag_timeout") == 1
    assert drops(net, "icmp.error_no_route") == 1
    assert net.a.ipv4.reassembler.held == 0


def test_echo_from_on_link_source_is_still_answered():
    net, _, _ = fresh()
    got = []
    net.b.icmp.echo_handlers[5] = lambda seq, ident, data, src, now, ttl: got.append(data)
    net.b.icmp.ping(ip_addr(A_IP), 5, 1, net.clock.now, b"fine")
    net.run(lambda: got, 5)
    assert got == [b"fine"]


def test_barrier_counts_a_bug_drops_the_frame_and_finishes_the_round(monkeypatch):
    net, ep, _ = fresh()

    def broken(frame, pkt, now):
        raise RuntimeError("a bug in UDP input")

    monkeypatch.setitem(net.a._handlers, next(k for k, v in net.a._handlers.items() if v == net.a.udp.input), broken)
    fired = []
    net.a.timers.timer(lambda now: fired.append(now)).arm(net.clock.now)
    # The UDP frame hits the bug; the echo request after it in the same burst is still answered.
    sent = inject(net, E / IP(src=B_IP, dst=A_IP) / UDP(sport=5, dport=7) / b"x",
                  E / IP(src=B_IP, dst=A_IP) / ICMP(type=8, id=1, seq=1) / b"after")
    assert net.a.stats["stack.internal_error"] == 1
    assert net.a.stats["stack.internal_error.RuntimeError"] == 1
    assert drops(net, "stack.internal_error") == 1
    assert isinstance(net.a.last_internal_error, RuntimeError)
    assert net.a.stats["icmp.echo_requests_received"] == 1 and sent >= 1  # answered (ARP for B first)
    assert fired == [net.clock.now]  # timers ran in the same round
    net.a.stats.counters["stack.internal_error"] = 0  # seen; the autouse check is for unexpected ones


def test_barrier_keeps_firing_the_other_timers_when_one_raises():
    net, _, _ = fresh()
    fired = []

    def bad(now):
        raise ValueError("a bug in a timer")

    net.a.timers.timer(bad).arm(net.clock.now)
    net.a.timers.timer(lambda now: fired.append(now)).arm(net.clock.now)
    net.a.poll(net.clock.now)
    assert fired == [net.clock.now]
    assert net.a.stats["stack.internal_error.ValueError"] == 1
    net.a.stats.counters["stack.internal_error"] = 0


@pytest.mark.parametrize("frame", [
    E / IP(src=OFF, dst=A_IP) / ICMP(type=8, id=1, seq=1),
    E / IP(src="0.0.0.0", dst=A_IP) / ICMP(type=8, id=1, seq=1),
    E / IP(src=OFF, dst=A_IP) / UDP(sport=5, dport=9),
    E / IP(src=OFF, dst=A_IP, proto=253),
    E / IP(src=OFF, dst=A_IP) / TCP(sport=5, dport=80, flags="S"),
    E / IP(src=OFF, dst=A_IP) / TCP(sport=5, dport=81, flags="S"),
])
def test_serve_like_loop_survives_every_listed_frame(frame):
    net, _, _ = fresh()
    for _ in range(3):
        inject(net, frame)
        net.clock.advance(31.0)
        net.a.poll(net.clock.now)
    assert net.a.stats["stack.internal_error"] == 0


def test_a_timer_that_re_arms_itself_and_fails_cannot_hang_the_round():
    net, _, _ = fresh()
    timer = None

    def relentless(now):
        timer.arm(now)
        raise KeyError("again")

    timer = net.a.timers.timer(relentless)
    timer.arm(net.clock.now)
    assert net.a.poll(net.clock.now) == net.clock.now  # returns (the timer is still due), does not spin
    assert net.a.stats["stack.internal_error.KeyError"] == 64
    timer.cancel()
    net.a.stats.counters["stack.internal_error"] = 0
