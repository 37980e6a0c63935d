"""IPv6 per-flow cached frame templates (issue 13, _fp_tmpl.pxi) and the SYN/SYN-ACK emit in C.

As tests/tcp/test_tcp_flow_template.py for IPv4: two runs of one scenario
on the pipe network (same secrets, same clock), one with every connection
writing established IPv6 segments from its cached template (``FlowEmitter``)
and its SYN/SYN-ACK through ``emit_tcp_options6``, one through the Python
emits (``Ipv6Layer.emit_tcp`` and ``output``). Every frame must be
byte-identical, including after a neighbour's MAC changes mid-flow, after
Packet Too Big lowers the path MTU, and across the end of a neighbour's
reachable time (RFC 4861 7.3.3: the template lapses and the Python lookup
probes the neighbour).
"""

from __future__ import annotations

import random
import struct

import pytest

from ustack import _fastpath
from ustack.net.addr import parse as ip_addr
from ustack.net.ipv6 import Ipv6Layer
from ustack.net.ndp import DELAY, PROBE, REACHABLE, STALE
from ustack.transport.tcp.ip_host import TcpOverIp
from ustack.transport.tcp.output import syn_options, syn_segment
from ustack.wire.tcp import ACK, SYN
from tests.stack.netsim import Net
from tests.tcp.test_tcp_flow_template import PORT, _differ, record_transfer

A6, B6 = ip_addr("fd00::1"), ip_addr("fd00::2")
OTHER_MAC = b"\x02\x00\x00\x00\x00\x99"


def _net(reachable_time=None):
    # (a short DELAY: the neighbour is probed, confirmed and REACHABLE again within the transfer)
    ndp = {"ndp": {"reachable_time": reachable_time, "delay_first_probe": 0.001}} if reachable_time else {}
    net = Net(seed=3, a_addr="fd00::1/64", b_addr="fd00::2/64",
              a_kw={"isn_secret": b"a" * 16, "ipv6": dict(ndp)}, b_kw={"isn_secret": b"b" * 16, "ipv6": dict(ndp)})
    assert net.run(lambda: A6 in net.a.iface6.preferred() and B6 in net.b.iface6.preferred(), 5)
    return net


def _run(monkeypatch, templates: bool, *, change_mac=False, too_big=False, reachable_time=None):
    """A 300 kB transfer A -> B over IPv6; returns (frames on the wire, marks, B's emitter, A's emitter)."""
    with monkeypatch.context() as m:
        if not templates:
            m.delattr(TcpOverIp, "tcp_emitter")
            m.setattr(Ipv6Layer, "emit_tcp_options", lambda self, *a: False)
        net = _net(reachable_time)

        def on_progress(got, marks, frames, client, push):
            if change_mac and "mac" not in marks and got > 60000:
                marks["mac"] = len(frames)
                # An override NA-like change: B now believes A is elsewhere (STALE with the new MAC).
                net.b.ndp._learn_stale(A6, OTHER_MAC, net.clock.now)
            if too_big and "pmtu" not in marks and got > 60000:
                marks["pmtu"] = len(frames)
                assert net.a.ipv6.pmtu_update(B6, 1300, net.clock.now)
                net.a.tcp.icmp_error(client.local_addr, client.local_port, client.remote_addr, PORT, 3, 4,
                                     net.a.ipv6.mtu(B6), net.clock.now)

        try:
            return record_transfer(net, B6, on_progress)
        finally:
            net.close()


def _tcp6(frames, who):
    return [f for w, f in frames if w == who and f[12:14] == b"\x86\xdd" and f[20] == 6]


def test_ipv6_templates_write_the_python_paths_frames(monkeypatch):
    fast, _, server_emit, client_emit = _run(monkeypatch, True)
    slow, _, server_slow, _ = _run(monkeypatch, False)
    assert type(server_emit) is _fastpath.FlowEmitter and type(server_slow) is not _fastpath.FlowEmitter
    assert fast == slow, _differ(fast, slow)
    assert client_emit.builds == 1 and client_emit.template.v6  # built once, every data segment from it
    # B learned A from its NS (STALE); its SYN-ACK's lookup started DELAY (RFC 4861 7.3.3), and a DELAY entry's
    # MAC is used as it is (the lookup changes nothing then): B's ACKs come from a template too.
    assert server_emit.builds == 1 and server_emit.refusals == 0
    assert len(_tcp6(fast, "a")) > 200
    # RFC 6437: one flow label per flow, in every segment either way (SYN included), never zero.
    labels = {int.from_bytes(f[14:18], "big") & 0xFFFFF for f in _tcp6(fast, "a")}
    assert len(labels) == 1 and 0 not in labels


def test_syn_and_synack_are_written_in_c(monkeypatch):
    counts = []
    real = _fastpath.emit_tcp_options6

    def counting(*a):
        counts.append(a[6])  # flags
        return real(*a)

    monkeypatch.setattr(_fastpath, "emit_tcp_options6", counting)
    _run(monkeypatch, True)
    # A's SYN waited for Neighbor Discovery (queued by the general path); B's SYN-ACK went out in C.
    assert counts == [SYN | ACK]
    # A second connection once A knows B: its SYN is written in C too, and its SYN-ACK from the flow's
    # template (the connection's emitter from then on: built once, for the SYN-ACK).
    counts.clear()
    with _net() as net:
        lst = net.b.tcp.listen((B6, PORT), 5)
        first = net.a.tcp.connect(None, (B6, PORT), net.clock.now)
        assert net.run(lambda: first.tcb.state.name == "ESTABLISHED", 5)
        second = net.a.tcp.connect(None, (B6, PORT), net.clock.now)
        assert net.run(lambda: second.tcb.state.name == "ESTABLISHED", 5)
        accepted = [lst.accept(), lst.accept()]
        assert None not in accepted
        sent = net.b.stats["ipv6.packets_sent"]
    assert counts == [SYN | ACK, SYN]
    emitter = accepted[1].out.fast
    assert type(emitter) is _fastpath.FlowEmitter and emitter.builds == 1 and emitter.refusals == 0
    assert sent >= 4  # (both SYN-ACKs and the ACKs counted alike)


def test_a_neighbours_new_mac_rebuilds_the_template(monkeypatch):
    fast, marks, server_emit, _ = _run(monkeypatch, True, change_mac=True, reachable_time=30.0)
    slow, slow_marks, _, _ = _run(monkeypatch, False, change_mac=True, reachable_time=30.0)
    assert marks == slow_marks and fast == slow, _differ(fast, slow)
    after = _tcp6(fast[marks["mac"]:], "b")
    astray = [f for f in after if f[:6] == OTHER_MAC]
    assert astray  # right after the change B's segments go to the new MAC, none from the old template
    assert after[0][:6] == OTHER_MAC
    assert after[-1][:6] == _tcp6(fast, "a")[0][6:12]  # and once A answers the probes, to A again
    assert server_emit.builds >= 2


def test_packet_too_big_mid_flow_gives_the_same_frames(monkeypatch):
    fast, marks, _, client_emit = _run(monkeypatch, True, too_big=True)
    slow, _, _, _ = _run(monkeypatch, False, too_big=True)
    assert fast == slow, _differ(fast, slow)
    after = [len(f) for f in _tcp6(fast[marks["pmtu"]:], "a")]
    assert max(after) <= 14 + 1300  # A's segments now fit the path MTU (RFC 8201)
    assert client_emit.builds == 2  # the path MTU change invalidated the template


def test_the_template_lapses_with_the_reachable_time(monkeypatch):
    fast, _, _, client_emit = _run(monkeypatch, True, reachable_time=0.003)
    slow, _, _, _ = _run(monkeypatch, False, reachable_time=0.003)
    assert fast == slow, _differ(fast, slow)
    assert client_emit.builds > 2  # rebuilt after each lapse
    # At each lapse (REACHABLE past its time) the emitter is refused once: the Python lookup moves the entry to
    # STALE and DELAY (and bumps the generation); the next segment builds on the DELAY entry.
    assert 0 < client_emit.refusals < client_emit.builds


def test_no_template_unless_the_neighbour_is_reachable():
    with _net() as net:
        ip6 = net.a.ipv6
        src = A6
        assert ip6.tcp_template(src, B6, 1, 2, net.clock.now) is None  # not in the cache yet
        got = []
        net.a.icmpv6.echo_handlers[7] = lambda *a: got.append(a)
        net.a.icmpv6.ping(B6, 7, 1, net.clock.now, b"x")
        assert net.run(lambda: got, 5)
        n = net.a.ndp.cache[B6]
        assert n.state == REACHABLE
        t = ip6.tcp_template(src, B6, 1, 2, net.clock.now)
        assert t.v6 and t.valid_until == n.reachable_until and t.mtu == 1500
        assert t.header == ip6._template(n.mac, src, B6, 6, 64, 0, b"\x00\x01\x00\x02")
        assert ip6.tcp_template(src, bytes.fromhex("ff02" + "00" * 13 + "01"), 1, 2, net.clock.now) is None
        gen = ip6.gen.value
        ip6.invalidate()
        assert ip6.gen.value == gen + 1


def test_delay_and_probe_entries_give_templates_stale_ones_do_not():
    """RFC 4861 7.3.3: a STALE entry's first use starts DELAY (the Python lookup's side effect, so no template);
    DELAY and PROBE entries are used as they are until confirmed or deleted, which bump the generation."""
    with _net() as net:
        ip6, ndp = net.a.ipv6, net.a.ndp
        now = net.clock.now
        mac_b = net.b.iface6.mac
        ndp._learn_stale(B6, mac_b, now)  # as B's Neighbor Solicitation would leave it
        assert ndp.cache[B6].state == STALE and ip6.tcp_template(A6, B6, 1, 2, now) is None
        gen = ip6.gen.value
        assert ip6._resolved(B6, now) == mac_b  # the lookup: DELAY, and the generation moves
        assert ndp.cache[B6].state == DELAY and ip6.gen.value == gen + 1
        t = ip6.tcp_template(A6, B6, 1, 2, now)
        assert t.header[:6] == mac_b and t.valid_until == float("inf") and t.gen_seen == ip6.gen.value
        net.clock.set(now + ndp.delay_first_probe + 0.001)
        net.a.poll(net.clock.now)  # (B not polled: the unicast probe waits on the wire)
        assert ndp.cache[B6].state == PROBE and t.gen_seen == ip6.gen.value  # still good: same MAC, no side effect
        assert net.run(lambda: ndp.cache[B6].state == REACHABLE, 2)  # B answers: confirmed, templates rebuilt
        assert t.gen_seen != ip6.gen.value


def test_syn_fast_emit6_equals_the_general_path_frame():
    """``emit_tcp_options6`` writes exactly the frame ``output`` (``emit_ipv6``) makes of ``syn_segment``."""
    rng = random.Random(11)
    src, dst = A6, B6
    template = struct.pack("!6s6sHIHBB16s16s", b"\x02" * 6, b"\x04" * 6, 0x86DD, (6 << 28) | 0x12345, 0, 6, 64,
                           src, dst)
    for _ in range(200):
        flags = SYN | (ACK if rng.random() < 0.5 else 0)
        seq, ack = rng.getrandbits(32), rng.getrandbits(32) if flags & ACK else 0
        sport, dport, window = rng.randrange(1, 65536), rng.randrange(1, 65536), rng.randrange(65536)
        mss = rng.randrange(1220, 65536)
        wscale = rng.choice((None, 0, 7, 14))
        sack = rng.random() < 0.5
        ts = (rng.getrandbits(32), rng.getrandbits(32)) if rng.random() < 0.7 else None
        opts = syn_options(mss, wscale, sack, ts)
        seg = syn_segment(src, dst, sport, dport, seq, ack, flags, window, mss, wscale, sack, ts)
        general, fast = bytearray(2048), bytearray(2048)
        n = _fastpath.emit_ipv6(general, template, seg)
        assert _fastpath.emit_tcp_options6(fast, template, sport, dport, seq, ack, flags, window, opts) == n
        assert fast[:n] == general[:n]


def test_syn_fast_emit6_rejects_bad_options_templates_and_small_slots():
    template = struct.pack("!6s6sHIHBB16s16s", bytes(6), bytes(6), 0x86DD, 6 << 28, 0, 6, 64, A6, B6)
    with pytest.raises(ValueError):
        _fastpath.emit_tcp_options6(bytearray(200), template, 1, 2, 3, 4, 2, 100, b"\x01\x01\x01")  # not 4n
    with pytest.raises(ValueError):
        _fastpath.emit_tcp_options6(bytearray(200), template, 1, 2, 3, 4, 2, 100, bytes(44))  # over 40
    with pytest.raises(ValueError):
        _fastpath.emit_tcp_options6(bytearray(80), template, 1, 2, 3, 4, 2, 100, bytes(8))  # 82 > 80
    with pytest.raises(ValueError):
        _fastpath.emit_tcp_options6(bytearray(200), template[:53], 1, 2, 3, 4, 2, 100, bytes(8))
    udp = template[:20] + b"\x11" + template[21:]
    with pytest.raises(ValueError):
        _fastpath.emit_tcp_options6(bytearray(200), udp, 1, 2, 3, 4, 2, 100, bytes(8))  # next header not TCP


def test_template_constructor_checks_the_header():
    gen = _fastpath.Generation()
    v6 = struct.pack("!6s6sHIHBB16s16s", bytes(6), bytes(6), 0x86DD, 6 << 28, 0, 6, 64, A6, B6)
    t = _fastpath.TcpTemplate(v6, gen, 1.0, 1500, None, 0, None, {})
    assert t.v6
    with pytest.raises(ValueError):
        _fastpath.TcpTemplate(v6[:20] + b"\x11" + v6[21:], gen, 1.0, 1500, None, 0, None, {})
    with pytest.raises(ValueError):
        _fastpath.TcpTemplate(v6[:34], gen, 1.0, 1500, None, 0, None, {})  # an IPv4 length without idents
