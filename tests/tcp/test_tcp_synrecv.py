"""SYN-RECEIVED as a light record (``synrecv.SynReceived``): what it sends and what it builds equals
``Connection.open_passive``; every later event reaches a connection in SYN-RECEIVED as before."""

from __future__ import annotations

import random

import pytest

from tests.tcp.harness import LOCAL, PEER, Harness
from ustack.transport.tcp.connection import Connection
from ustack.transport.tcp.synrecv import SynReceived
from ustack.transport.tcp.tcb import Tcb, State
from ustack.wire.tcp import TcpHeader

KEY = (LOCAL, 80, PEER, 5000)

# What the record and open_passive must leave alike in the connection, besides its whole TCB.
_CONN_FIELDS = ("_own_mss", "_offer_ws", "_offer_ts", "_offer_sack", "_syn_time", "_last_rcv", "_isn_f", "passive")


def _half_open(h: Harness, backlog: int = 5, **syn):
    lst = h.layer.listen((LOCAL, 80), backlog)
    h.peer.send(flags="S", **syn)
    return lst, h.layer.connections[KEY]


def test_a_syn_leaves_a_record_and_the_handshake_ack_builds_the_connection():
    h = Harness()
    lst, rec = _half_open(h, mss=1400)
    assert type(rec) is SynReceived and rec.state == State.SYN_RECEIVED and lst.half_open == 1
    synack = h.peer.expect(flags="SA", ack=1001, mss=1460)  # our own MSS (RFC 9293 3.7.1)
    h.peer.send(flags="A", ack=synack.seq + 1)
    h.peer.expect_nothing()
    conn = h.layer.connections[KEY]
    assert type(conn) is Connection and rec.conn is conn
    assert lst.half_open == 0 and lst.accept() is conn and conn.state == State.ESTABLISHED
    assert conn.tcb.snd_una == synack.seq + 1 and conn.tcb.rcv_nxt == 1001


@pytest.mark.parametrize("seed", range(4))
def test_the_record_sends_and_builds_what_open_passive_does(seed):
    """Random SYN options and configurations: the same SYN-ACK bytes, then the same TCB, timer and
    negotiated fields in the connection the record builds as in one ``open_passive`` made."""
    rng = random.Random(seed)
    for _ in range(25):
        cfg = dict(window_scaling=rng.random() < 0.7, timestamps=rng.random() < 0.7, sack=rng.random() < 0.7,
                   rcvbuf=rng.choice((16000, 64000, 65535, 65536, 1 << 18, 1 << 22)),
                   mss=rng.choice((0, 0, 536, 1200)))
        syn = dict(mss=rng.choice((None, 536, 1460, 9000)), wscale=rng.choice((None, 0, 7, 14, 15)),
                   sack_perm=rng.random() < 0.5, ts=rng.choice((False, (rng.getrandbits(32), 0))),
                   win=rng.randrange(65536), seq=rng.getrandbits(32))
        a = Harness(**cfg)
        a.clock.set(100.0 + rng.random())
        _, rec = _half_open(a, **syn)
        b = Harness(**cfg)
        b.clock.set(a.now)
        b.layer.listen((LOCAL, 81), 5)  # (not the SYN's port: b answers it with a RST, cleared below)
        raw = b.peer.send(flags="S", **syn)
        b.host.out.clear()
        want = Connection(b.layer, b.layer.config, (LOCAL, 80), (PEER, 5000), listener=object())
        want.open_passive(TcpHeader.parse(raw, PEER, LOCAL), b.now)
        assert a.host.out == b.host.out  # the SYN-ACK, byte for byte
        assert a.stats["tcp.passive_opens"] == a.stats["tcp.out_segs"] == 1
        a.clock.set(a.now + 0.01)
        conn = rec.build()
        for name in Tcb.__slots__:
            assert getattr(conn.tcb, name) == getattr(want.tcb, name), name
        for name in _CONN_FIELDS:
            assert getattr(conn, name) == getattr(want, name), name
        assert conn.sender.rtx_timer.deadline == want.sender.rtx_timer.deadline
        assert type(conn.sender.recovery) is type(want.sender.recovery)
        assert conn.out.segs_out == want.out.segs_out == 1
        assert a.timers.live == 1  # the record's timer is now the connection's, nothing else armed


def test_data_and_fin_on_the_handshake_ack():
    h = Harness(delayed_ack=False)
    lst, _ = _half_open(h)
    synack = h.peer.expect(flags="SA")
    h.peer.send(flags="FPA", ack=synack.seq + 1, payload=b"hello")
    h.peer.expect(flags="A", seq=synack.seq + 1, ack=1007)  # the 5 bytes and the FIN
    conn = lst.accept()
    assert conn.state == State.CLOSE_WAIT and conn.recv(10) == b"hello" and conn.eof


def test_retransmitted_syn_then_timeouts_reach_the_connection():
    h = Harness(synack_retries=1)
    lst, rec = _half_open(h)
    synack = h.peer.expect(flags="SA")
    h.peer.send(flags="S", seq=1000, advance=False)
    h.peer.expect(flags="SA", seq=synack.seq, ack=1001)  # the same SYN-ACK again
    assert h.stats["tcp.syn_retransmits_seen"] == 1 and type(h.layer.connections[KEY]) is Connection
    assert h.fire_next() == pytest.approx(1.0)  # the initial RTO from the first SYN-ACK
    h.peer.expect(flags="SA", seq=synack.seq)
    h.fire_next()
    h.peer.expect_nothing()
    assert h.stats["tcp.synack_timeouts"] == 1 and not h.layer.connections and lst.half_open == 0


def test_the_synack_timer_of_a_record_retransmits_and_gives_up():
    h = Harness(synack_retries=2)
    lst, rec = _half_open(h)
    synack = h.peer.expect(flags="SA")
    assert h.fire_next() == pytest.approx(1.0)
    h.peer.expect(flags="SA", seq=synack.seq, ack=1001)
    assert type(h.layer.connections[KEY]) is Connection and lst.half_open == 1
    assert h.fire_next() == pytest.approx(2.0)  # backed off (RFC 6298 5.5)
    h.peer.expect(flags="SA", seq=synack.seq)
    h.fire_next()
    h.peer.expect_nothing()
    assert h.stats["tcp.synack_timeouts"] == 1 and not h.layer.connections and lst.half_open == 0


def test_reset_of_a_record():
    """RFC 5961 3.2: a RST at RCV.NXT ends it quietly; one elsewhere in the window gets a challenge ACK."""
    h = Harness()
    lst, _ = _half_open(h)
    synack = h.peer.expect(flags="SA")
    h.peer.send(flags="R", seq=1005)
    h.peer.expect(flags="A", seq=synack.seq + 1, ack=1001)
    assert h.layer.connections[KEY].state == State.SYN_RECEIVED
    h.peer.send(flags="R", seq=1001)
    h.peer.expect_nothing()
    assert not h.layer.connections and lst.half_open == 0


def test_bad_ack_and_full_accept_queue():
    """An ACK of something we did not send gets a RST (RFC 9293 3.10.7.4); when the accept queue filled
    after the SYN, the handshake's ACK is dropped and the connection stays in SYN-RECEIVED."""
    h = Harness(syn_backlog=8)  # (else the SYN queue's bound is the backlog: the second SYN gets a cookie)
    lst, _ = _half_open(h, backlog=1)
    synack = h.peer.expect(flags="SA")
    h.peer.port = 5001
    h.peer.snd_nxt = 3000
    h.peer.send(flags="S")
    synack2 = h.peer.expect(flags="SA", ack=3001)
    h.peer.port = 5000
    h.peer.send(flags="A", seq=1001, ack=synack.seq + 7, advance=False)
    h.peer.expect(flags="R", seq=synack.seq + 7)
    h.peer.send(flags="A", seq=1001, ack=synack.seq + 1)
    assert lst.pending == 1 and lst.half_open == 1
    h.peer.port = 5001
    h.peer.send(flags="A", seq=3001, ack=synack2.seq + 1)
    h.peer.expect_nothing()
    assert h.stats["drop.tcp.accept_queue_full"] == 1 and lst.half_open == 1
    assert h.layer.connections[(LOCAL, 80, PEER, 5001)].state == State.SYN_RECEIVED


def test_listener_close_resets_a_record():
    """ABORT in SYN-RECEIVED (RFC 9293 3.10.5): <SEQ=SND.NXT><CTL=RST>, and the TCB goes."""
    h = Harness()
    lst, _ = _half_open(h)
    synack = h.peer.expect(flags="SA")
    lst.close(h.now)
    h.peer.expect(flags="RA", seq=synack.seq + 1, ack=1001)
    assert not h.layer.connections


def test_icmp_error_and_info_of_a_record():
    h = Harness()
    _, rec = _half_open(h)
    h.peer.expect(flags="SA")
    assert rec.info().state == "SYN_RECEIVED"
    h.layer.icmp_error(LOCAL, 80, PEER, 5000, 3, 1)  # host unreachable: a soft error in SYN-RECEIVED
    conn = h.layer.connections[KEY]
    assert type(conn) is Connection and conn.state == State.SYN_RECEIVED
    assert conn._soft_error is not None and h.stats["tcp.icmp_errors"] == 1


def test_a_full_syn_queue_of_records_answers_with_cookies():
    h = Harness(syn_backlog=2, syncookies=True)
    lst = h.layer.listen((LOCAL, 80), 8)
    for port in (5000, 5001, 5002):
        h.peer.port = port
        h.peer.send(flags="S", seq=port * 10)
        h.peer.expect(flags="SA", ack=port * 10 + 1)
    assert lst.half_open == 2 and len(h.layer.connections) == 2 and h.stats["tcp.syncookies_sent"] == 1
    assert all(type(c) is SynReceived for c in h.layer.connections.values())


def test_ipv6_record_and_handshake():
    from tests.tcp.harness import LOCAL6, PEER6

    h = Harness(family=6, timestamps=True, sack=True, window_scaling=True)
    lst = h.layer.listen((LOCAL6, 80), 5)
    h.peer.send(flags="S", mss=1440, wscale=7, sack_perm=True, ts=(77, 0))
    rec = h.layer.connections[(LOCAL6, 80, PEER6, 5000)]
    assert type(rec) is SynReceived
    synack = h.peer.expect(flags="SA", ack=1001, mss=1440, sack_permitted=True)  # 1500 - 40 - 20
    assert synack.timestamps[1] == 77 and synack.wscale is not None
    h.peer.send(flags="A", ack=synack.seq + 1, ts=(78, synack.timestamps[0]))
    h.peer.expect_nothing()
    conn = lst.accept()
    assert conn.state == State.ESTABLISHED and conn.tcb.ts_recent == 78 and conn.tcb.sack_ok


# The handshake's ACK variants: (flags, data, seq offset from RCV.NXT, ack offset from SND.MAX, TSval change)
_ACKS = {
    "exact": ("A", b"", 0, 0, 1), "same TSval": ("A", b"", 0, 0, 0), "older TSval": ("A", b"", 0, 0, -5),
    "no timestamp": ("A", b"", 0, 0, None), "PSH": ("PA", b"", 0, 0, 1), "data": ("PA", b"hi", 0, 0, 1),
    "FIN": ("FA", b"", 0, 0, 1), "ACK of less": ("A", b"", 0, -1, 1), "ACK beyond": ("A", b"", 0, 1, 1),
    "seq ahead": ("A", b"", 1, 0, 1), "seq behind": ("A", b"", -1, 0, 1), "RST": ("RA", b"", 0, 0, 1),
}


def _handshake(cfg: dict, syn: dict, variant: str, win: int, rtt: float, general: bool, monkeypatch):
    """A SYN, its SYN-ACK, ``rtt`` later one handshake ACK of ``variant``; the general path alone when
    ``general``. Returns the harness, the connection (or record) and the listener."""
    from ustack.transport.tcp import synrecv

    if general:
        monkeypatch.setattr(synrecv, "_handshake_acked", lambda *a: False)
    try:
        h = Harness(**cfg)
        h.clock.set(100.0)
        lst, _ = _half_open(h, **syn)
        synack = h.peer.expect(flags="SA")
        h.clock.set(100.0 + rtt)
        flags, data, dseq, dack, dts = _ACKS[variant]
        ts = False
        if syn["ts"] and synack.hdr.timestamps is not None and dts is not None:
            ts = ((syn["ts"][0] + dts) & 0xFFFFFFFF, synack.hdr.timestamps[0])
        h.peer.send(flags=flags, seq=syn["seq"] + 1 + dseq, ack=synack.seq + 1 + dack, ts=ts, win=win, payload=data)
        return h, h.layer.connections.get(KEY), lst
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("seed", range(4))
def test_the_handshake_ack_shortcut_leaves_what_the_general_path_does(seed, monkeypatch):
    """Random options, configurations and ACKs (the exact form the shortcut takes and every near miss
    it leaves to the general path): the same segments out, TCB, connection fields, timers, RTT
    estimate, accept queue and counters as ``Connection.segment_arrives`` alone."""
    rng = random.Random(seed)
    seen = set()
    for _ in range(40):
        cfg = dict(window_scaling=rng.random() < 0.7, timestamps=rng.random() < 0.7, sack=rng.random() < 0.7,
                   delayed_ack=rng.random() < 0.5)
        syn = dict(mss=rng.choice((None, 1460)), wscale=rng.choice((None, 0, 7, 14)), sack_perm=rng.random() < 0.5,
                   ts=rng.choice((False, (rng.getrandbits(32), 0))), win=rng.randrange(65536),
                   seq=rng.getrandbits(32))
        variant = rng.choice(sorted(_ACKS))
        win, rtt = rng.randrange(65536), rng.choice((0.0, 0.0003, 0.05))
        a, conn_a, lst_a = _handshake(cfg, syn, variant, win, rtt, False, monkeypatch)
        b, conn_b, lst_b = _handshake(cfg, syn, variant, win, rtt, True, monkeypatch)
        seen.add(variant)
        assert a.host.out == b.host.out, variant
        assert dict(a.stats.counters) == dict(b.stats.counters), variant
        assert (lst_a.pending, lst_a.half_open) == (lst_b.pending, lst_b.half_open), variant
        assert a.timers.live == b.timers.live, variant
        assert type(conn_a) is type(conn_b), variant
        if conn_a is None or type(conn_a) is SynReceived and conn_a.conn is None:
            continue
        for name in Tcb.__slots__:
            assert getattr(conn_a.tcb, name) == getattr(conn_b.tcb, name), (variant, name)
        for name in _CONN_FIELDS + ("segs_in", "segs_fast", "_keep_probes", "_charged"):
            assert getattr(conn_a, name) == getattr(conn_b, name), (variant, name)
        rtt_a, rtt_b = conn_a.sender.rtt, conn_b.sender.rtt
        assert (rtt_a.srtt, rtt_a.rttvar, rtt_a.rto) == (rtt_b.srtt, rtt_b.rttvar, rtt_b.rto), variant
        assert conn_a.sender.rtx_timer.deadline == conn_b.sender.rtx_timer.deadline, variant
    assert "exact" in seen or seed != 0


def test_the_handshake_ack_shortcut_takes_the_exact_ack_only(monkeypatch):
    """The exact ACK is taken by the shortcut (its connection never runs the general path); with the
    accept queue full it is left to the general path, which drops it (tcp.accept_queue_full)."""
    from ustack.transport.tcp import synrecv

    calls = []
    real = Connection.segment_arrives
    monkeypatch.setattr(Connection, "segment_arrives", lambda self, *a: (calls.append(a), real(self, *a))[1])
    h = Harness(timestamps=True, syn_backlog=4)  # two records, one place in the accept queue
    lst, _ = _half_open(h, backlog=1, ts=(77, 0))
    synack = h.peer.expect(flags="SA")
    h.peer.port, h.peer.snd_nxt = 5001, 3000  # a second SYN, from another port, before the first completes
    h.peer.send(flags="S", ts=(90, 0))
    synack2 = h.peer.expect(flags="SA")
    h.peer.port = 5000
    h.peer.send(flags="A", seq=1001, ack=synack.seq + 1, ts=(78, synack.hdr.timestamps[0]))
    conn = h.layer.connections[KEY]
    assert calls == [] and lst.pending == 1 and conn.state == State.ESTABLISHED and conn.tcb.ts_recent == 78
    h.peer.expect_nothing()
    rec = h.layer.connections[(LOCAL, 80, PEER, 5001)]
    h.peer.port = 5001
    h.peer.send(flags="A", seq=3001, ack=synack2.seq + 1, ts=(91, synack2.hdr.timestamps[0]))  # backlog 1: full
    assert len(calls) == 1 and h.stats["drop.tcp.accept_queue_full"] == 1 and lst.pending == 1
    assert rec.state == State.SYN_RECEIVED and synrecv._handshake_acked(rec.conn, calls[0][0], b"", h.now) is False
    h.peer.expect_nothing()
