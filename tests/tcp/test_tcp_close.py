"""Closing: active, passive and simultaneous close, half-close, TIME-WAIT, abort, close with unread data."""

from __future__ import annotations

import socket

import pytest

from tests.tcp.harness import Harness
from ustack.transport.tcp import State


def test_active_close_through_fin_wait_and_time_wait():
    h = Harness(delayed_ack=False, msl=30.0)
    conn = h.open_active()
    una = conn.tcb.snd_una
    conn.close(now=h.now)
    assert conn.state == State.FIN_WAIT_1
    h.peer.expect(flags="FA", seq=una, ack=1001)
    h.peer.ack()
    assert conn.state == State.FIN_WAIT_2
    h.peer.expect_nothing()
    h.peer.send(flags="FA")
    assert conn.state == State.TIME_WAIT
    h.peer.expect(flags="A", seq=una + 1, ack=1002)
    assert conn.key in h.layer.connections
    h.advance(59.9)
    assert conn.state == State.TIME_WAIT
    h.advance(0.2)
    assert conn.state == State.CLOSED and conn.key not in h.layer.connections
    assert h.timers.next_deadline() is None


def test_fin_and_ack_of_our_fin_together_go_straight_to_time_wait():
    h = Harness(delayed_ack=False)
    conn = h.open_active()
    conn.shutdown(socket.SHUT_WR, now=h.now)
    fin = h.peer.expect(flags="FA")
    h.peer.send(flags="FA", ack=fin.seq + 1)
    assert conn.state == State.TIME_WAIT
    h.peer.expect(flags="A", ack=1002)


def test_time_wait_acks_a_retransmitted_fin_and_restarts():
    h = Harness(delayed_ack=False, msl=10.0)
    conn = h.open_active()
    conn.close(now=h.now)
    fin = h.peer.expect(flags="FA")
    h.peer.send(flags="FA", ack=fin.seq + 1)
    h.peer.expect(flags="A", ack=1002)
    h.advance(15.0)
    h.peer.send(flags="FA", seq=1001, ack=fin.seq + 1)  # our ACK was lost
    h.peer.expect(flags="A", seq=fin.seq + 1, ack=1002)
    h.advance(15.0)
    assert conn.state == State.TIME_WAIT  # the 2 MSL restarted
    h.advance(5.1)
    assert conn.state == State.CLOSED


def test_passive_close_close_wait_then_last_ack():
    h = Harness(delayed_ack=False)
    lst, conn = h.open_passive()
    h.peer.send(flags="FA")
    assert conn.state == State.CLOSE_WAIT and conn.eof and conn.readable
    h.peer.expect(flags="A", ack=1002)
    assert conn.recv(10) == b""
    conn.send(b"still talking", now=h.now)  # half-close: our side can still send
    h.peer.expect(flags="PA", payload=b"still talking")
    conn.close(now=h.now)
    assert conn.state == State.LAST_ACK
    fin = h.peer.expect(flags="FA")
    h.peer.ack()
    assert conn.state == State.CLOSED and not h.layer.connections
    assert fin.seq + 1 == conn.tcb.snd_una


@pytest.mark.parametrize("closing", [False, True])
def test_peer_fin_notifies_the_application_once(closing):
    """The peer's FIN in ESTABLISHED tells the application once, at CLOSE-WAIT (no second call after
    the segment); an application that closes from that call hears of LAST-ACK from its own close()
    and its FIN leaves with the ACK of the peer's, one segment."""
    h = Harness(delayed_ack=False)
    lst, conn = h.open_passive()
    events = []

    def on_event(c):
        events.append(c.state)
        if closing and c.eof and not c.wr_shutdown:
            c.close(now=h.now)

    conn.on_event = on_event
    h.peer.send(flags="FA")
    h.layer.flush(h.now)
    if closing:
        assert events == [State.CLOSE_WAIT, State.LAST_ACK]
        h.peer.expect(flags="FA", ack=1002)
    else:
        assert events == [State.CLOSE_WAIT]
        h.peer.expect(flags="A", ack=1002)
    h.peer.expect_nothing()


def test_simultaneous_close_via_closing():
    h = Harness(delayed_ack=False)
    conn = h.open_active()
    conn.close(now=h.now)
    fin = h.peer.expect(flags="FA")
    h.peer.send(flags="FA", ack=fin.seq)  # the peer's FIN crosses ours, not acking it
    assert conn.state == State.CLOSING
    h.peer.expect(flags="A", seq=fin.seq + 1, ack=1002)
    h.peer.send(flags="A", ack=fin.seq + 1)
    assert conn.state == State.TIME_WAIT


def test_half_close_keeps_receiving():
    h = Harness(delayed_ack=False)
    conn = h.open_active()
    conn.shutdown(socket.SHUT_WR, now=h.now)
    fin = h.peer.expect(flags="FA")
    h.peer.send(flags="PA", ack=fin.seq + 1, payload=b"more for you")
    assert conn.state == State.FIN_WAIT_2
    h.peer.expect(flags="A", ack=1001 + 12)
    assert conn.recv(100) == b"more for you"
    with pytest.raises(BrokenPipeError):
        conn.send(b"no")
    h.peer.send(flags="FA", payload=b"!")
    h.peer.expect(flags="A", ack=1001 + 14)
    assert conn.recv(10) == b"!" and conn.eof and conn.state == State.TIME_WAIT


def test_fin_retransmitted_until_acked():
    h = Harness(delayed_ack=False)
    conn = h.open_active()
    conn.close(now=h.now)
    fin = h.peer.expect(flags="FA")
    for gap in (0.2, 0.4, 0.8):
        assert h.fire_next() == pytest.approx(gap)
        h.peer.expect(flags="FA", seq=fin.seq)
    h.peer.ack()
    assert conn.state == State.FIN_WAIT_2


def test_fin_after_queued_data():
    h = Harness(delayed_ack=False)
    conn = h.open_active(peer_win=1000)
    conn.send(b"a" * 1500, now=h.now)
    conn.close(now=h.now)
    h.peer.expect(flags="A", length=1000)
    h.peer.expect_nothing()  # the window is full; FIN waits behind the data
    h.peer.ack(win=1000)
    h.peer.expect(flags="FPA", length=500)


def test_out_of_order_fin_waits_for_the_gap():
    h = Harness(delayed_ack=False)
    conn = h.open_active()
    h.peer.send(flags="FA", seq=1006, payload=b"world", advance=False)
    h.peer.expect(flags="A", ack=1001)
    assert conn.state == State.ESTABLISHED and not conn.eof
    h.peer.send(flags="A", seq=1001, payload=b"hello", advance=False)
    h.peer.expect(flags="A", ack=1012)
    assert conn.state == State.CLOSE_WAIT and conn.recv(100) == b"helloworld" and conn.eof


def test_close_with_unread_data_resets():
    h = Harness(delayed_ack=False)
    conn = h.open_active()
    h.peer.send(flags="PA", payload=b"unread")
    h.peer.expect(flags="A")
    una = conn.tcb.snd_max
    conn.close(now=h.now)
    h.peer.expect(flags="RA", seq=una, ack=1007)
    assert conn.state == State.CLOSED and not h.layer.connections


def test_abort_resets_the_peer():
    h = Harness()
    conn = h.open_active()
    conn.abort(h.now)
    h.peer.expect(flags="RA", seq=conn.tcb.snd_max)
    assert conn.state == State.CLOSED and h.timers.next_deadline() is None


def test_data_arriving_after_close_resets():
    h = Harness(delayed_ack=False)
    conn = h.open_active()
    conn.close(now=h.now)
    fin = h.peer.expect(flags="FA")
    h.peer.send(flags="PA", ack=fin.seq + 1, payload=b"late")
    h.peer.expect(flags="RA")
    assert conn.state == State.CLOSED and h.stats["drop.tcp.data_after_close"] == 1


def test_orphaned_fin_wait_2_times_out():
    h = Harness(delayed_ack=False, fin_wait2_timeout=20.0)
    conn = h.open_active()
    conn.close(now=h.now)
    h.peer.expect(flags="FA")
    h.peer.ack()
    assert conn.state == State.FIN_WAIT_2
    h.advance(19.0)
    assert conn.state == State.FIN_WAIT_2
    h.advance(1.5)
    assert conn.state == State.CLOSED


def test_half_closed_fin_wait_2_waits_for_ever():
    h = Harness(delayed_ack=False, fin_wait2_timeout=20.0)
    conn = h.open_active()
    conn.shutdown(socket.SHUT_WR, now=h.now)
    h.peer.expect(flags="FA")
    h.peer.ack()
    h.advance(1000.0)
    assert conn.state == State.FIN_WAIT_2


def test_reset_in_established_is_reported_once():
    h = Harness(delayed_ack=False)
    conn = h.open_active()
    h.peer.send(flags="PA", payload=b"last words")
    h.peer.expect(flags="A")
    h.peer.send(flags="RA")
    assert conn.state == State.CLOSED and isinstance(conn.error, ConnectionResetError)
    assert conn.recv(100) == b"last words"  # data before the reset stays readable
    with pytest.raises(ConnectionResetError):
        conn.recv(100)
    assert conn.recv(100) == b""
    with pytest.raises(BrokenPipeError):
        conn.send(b"x")


def test_new_syn_reopens_time_wait():
    h = Harness(delayed_ack=False)
    lst, conn = h.open_passive()
    h.peer.send(flags="FA")
    h.peer.expect(flags="A")
    conn.close(now=h.now)
    fin = h.peer.expect(flags="FA")
    assert conn.state == State.LAST_ACK
    h.peer.ack()
    assert conn.state == State.CLOSED
    # active closer is us in this variant:
    h2 = Harness(delayed_ack=False)
    lst2, c2 = h2.open_passive()
    c2.close(now=h2.now)
    fin = h2.peer.expect(flags="FA")
    h2.peer.send(flags="FA", ack=fin.seq + 1)
    h2.peer.expect(flags="A")
    assert c2.state == State.TIME_WAIT
    h2.peer.send(flags="S", seq=500, advance=False)  # old sequence number: challenge ACK, no reuse
    h2.peer.expect(flags="A", ack=1002)
    h2.peer.send(flags="S", seq=100000)  # clearly newer: a new connection
    h2.peer.expect(flags="SA", ack=100001)
    assert c2.state == State.CLOSED and lst2.half_open == 1


# LAST-ACK's last segment: (flags, data, seq offset from RCV.NXT, ack offset from SND.MAX, TSval change)
_LAST = {
    "exact": ("A", b"", 0, 0, 1), "same TSval": ("A", b"", 0, 0, 0), "older TSval": ("A", b"", 0, 0, -3),
    "no timestamp": ("A", b"", 0, 0, None), "PSH": ("PA", b"", 0, 0, 1), "data": ("PA", b"late", 0, 0, 1),
    "FIN again": ("FA", b"", -1, 0, 1), "ACK of the data only": ("A", b"", 0, -1, 1),
    "ACK beyond": ("A", b"", 0, 1, 1), "seq ahead": ("A", b"", 1, 0, 1), "RST": ("R", b"", 0, 0, 1),
}


def _last_ack(ts: bool, unacked: bytes, variant: str, general: bool, monkeypatch):
    """A passive close to LAST-ACK (``unacked``: data we sent that the peer has not ACKed), then one
    segment of ``variant``; through the general path alone when ``general``."""
    from ustack.transport.tcp import connection

    if general:
        monkeypatch.setattr(connection, "_final_ack", lambda *a: False)
    try:
        h = Harness(delayed_ack=False, timestamps=True)
        h.peer.use_ts = ts
        lst, conn = h.open_passive()
        if unacked:
            conn.send(unacked, now=h.now)
            h.peer.expect(flags="PA", payload=unacked)
        h.peer.send(flags="FA")
        h.peer.expect(flags="A")
        conn.close(now=h.now)
        fin = h.peer.expect(flags="FA")
        assert conn.state == State.LAST_ACK
        h.clock.set(h.now + 0.01)
        flags, data, dseq, dack, dts = _LAST[variant]
        tsopt = False
        if ts and dts is not None:
            tsopt = ((h.peer.ts_clock + dts) & 0xFFFFFFFF, fin.hdr.timestamps[0])
        h.peer.send(flags=flags, seq=h.peer.snd_nxt + dseq, ack=fin.seq + 1 + dack, ts=tsopt, payload=data)
        return h, conn
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("ts", [True, False])
@pytest.mark.parametrize("unacked", [b"", b"tail"])
@pytest.mark.parametrize("variant", sorted(_LAST))
def test_the_last_ack_shortcut_leaves_what_the_general_path_does(ts, unacked, variant, monkeypatch):
    """The final ACK in LAST-ACK (the form ``connection._final_ack`` takes, and each near miss it leaves
    to the general path): the same segments out, state, TCB, counters and layer tables."""
    a, conn_a = _last_ack(ts, unacked, variant, False, monkeypatch)
    b, conn_b = _last_ack(ts, unacked, variant, True, monkeypatch)
    assert a.host.out == b.host.out
    assert dict(a.stats.counters) == dict(b.stats.counters)
    assert conn_a.state == conn_b.state and set(a.layer.connections) == set(b.layer.connections)
    for name in conn_a.tcb.__slots__:
        assert getattr(conn_a.tcb, name) == getattr(conn_b.tcb, name), name
    for name in ("segs_in", "_last_rcv", "_charged"):
        assert getattr(conn_a, name) == getattr(conn_b, name), name
    assert repr(conn_a.error) == repr(conn_b.error)
    assert conn_a.sender.bytes_acked == conn_b.sender.bytes_acked
    assert a.timers.live == b.timers.live and a.layer.mem_used == b.layer.mem_used
    if variant == "exact" and not unacked:
        assert conn_a.state == State.CLOSED and not a.layer.connections


# The peer's FIN: (flags, data, seq offset from RCV.NXT, ack offset from SND.MAX, TSval change)
_FIN = {
    "exact": ("FA", b"", 0, 0, 1), "same TSval": ("FA", b"", 0, 0, 0), "older TSval": ("FA", b"", 0, 0, -3),
    "no timestamp": ("FA", b"", 0, 0, None), "PSH": ("FPA", b"", 0, 0, 1), "data": ("FPA", b"bye", 0, 0, 1),
    "ACK of less": ("FA", b"", 0, -1, 1), "ACK beyond": ("FA", b"", 0, 1, 1), "seq ahead": ("FA", b"", 1, 0, 1),
    "seq behind": ("FA", b"", -1, 0, 1), "FIN without ACK": ("F", b"", 0, 0, 1), "RST": ("RA", b"", 0, 0, 1),
}


def _peer_fin(where: str, ts: bool, sent: bytes, variant: str, general: bool, monkeypatch):
    """A connection in ``where`` (ESTABLISHED after a passive open, FIN-WAIT-1 or FIN-WAIT-2 after an
    active close; ``sent``: data of ours the FIN acknowledges), then one segment of ``variant``;
    through the general path alone when ``general``."""
    from ustack.transport.tcp import connection

    if general:
        monkeypatch.setattr(connection, "_peer_fin", lambda *a: False)
    try:
        h = Harness(delayed_ack=False, timestamps=True)
        h.peer.use_ts = ts
        if where.startswith("ESTABLISHED"):
            _, conn = h.open_passive()
            if where.endswith("closing"):  # the application closes on EOF, from its event callback
                conn.on_event = lambda c: c.close() if c.eof and not c.wr_shutdown else None
        else:
            conn = h.open_active()
        if sent:
            conn.send(sent, now=h.now)
            h.peer.expect(flags="PA", payload=sent)
        last = None
        if not where.startswith("ESTABLISHED"):
            conn.close(now=h.now)
            last = h.peer.expect(flags="FA")
            if where == "FIN_WAIT_2":
                h.peer.ack(ack=last.seq + 1)
        assert conn.state.name == where.split()[0]
        h.clock.set(h.now + 0.01)
        flags, data, dseq, dack, dts = _FIN[variant]
        tsopt = False
        if ts and dts is not None:
            tsopt = ((h.peer.ts_clock + dts) & 0xFFFFFFFF, h.peer.ts_recent)
        h.peer.send(flags=flags, seq=h.peer.snd_nxt + dseq, ack=conn.tcb.snd_max + dack, ts=tsopt, payload=data)
        h.layer.flush(h.now)
        return h, conn
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("where", ["ESTABLISHED", "ESTABLISHED closing", "FIN_WAIT_1", "FIN_WAIT_2"])
@pytest.mark.parametrize("ts", [True, False])
@pytest.mark.parametrize("sent", [b"", b"tail"])
@pytest.mark.parametrize("variant", sorted(_FIN))
def test_the_peer_fin_shortcut_leaves_what_the_general_path_does(where, ts, sent, variant, monkeypatch):
    """The peer's FIN (the form ``connection._peer_fin`` takes, and each near miss it leaves to the
    general path): the same segments out, state, TCB, counters, layer tables and timers."""
    a, conn_a = _peer_fin(where, ts, sent, variant, False, monkeypatch)
    b, conn_b = _peer_fin(where, ts, sent, variant, True, monkeypatch)
    assert a.host.out == b.host.out
    assert dict(a.stats.counters) == dict(b.stats.counters)
    assert conn_a.state == conn_b.state and set(a.layer.connections) == set(b.layer.connections)
    for name in conn_a.tcb.__slots__:
        assert getattr(conn_a.tcb, name) == getattr(conn_b.tcb, name), name
    for name in ("segs_in", "_last_rcv", "_charged", "eof"):
        assert getattr(conn_a, name) == getattr(conn_b, name), name
    assert repr(conn_a.error) == repr(conn_b.error)
    sa, sb = conn_a.sender, conn_b.sender
    def sender_state(s):
        return s.bytes_acked, s.rtt.srtt, s.rtt.rto, s.cc.window, s.rtx_timer.deadline

    assert sender_state(sa) == sender_state(sb)
    assert a.timers.live == b.timers.live and a.layer.mem_used == b.layer.mem_used
    assert conn_a._close_timer.deadline == conn_b._close_timer.deadline
    if variant == "exact":
        assert conn_a.state.name == {"ESTABLISHED": "CLOSE_WAIT", "ESTABLISHED closing": "LAST_ACK",
                                     "FIN_WAIT_1": "TIME_WAIT",
                                     "FIN_WAIT_2": "TIME_WAIT"}[where]
