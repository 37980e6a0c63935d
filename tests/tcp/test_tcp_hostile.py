"""Hostile peers against TCP (issue 12): TIME-WAIT pinned by forged FINs, SYN-cookie ACKs
without a recent overflow, the challenge-ACK budget, orphans and limits."""

from __future__ import annotations

from tests.tcp.harness import Harness
from ustack.transport.tcp import State


def _time_wait(h: Harness):
    conn = h.open_active()
    conn.close(now=h.now)
    fin = h.peer.expect(flags="FA")
    h.peer.send(flags="FA", ack=fin.seq + 1)
    h.peer.expect(flags="A", ack=1002)
    assert conn.state == State.TIME_WAIT
    return conn, fin


def test_out_of_window_fins_do_not_restart_time_wait_and_draw_rate_limited_acks():
    h = Harness(delayed_ack=False, msl=10.0)
    conn, fin = _time_wait(h)
    # Forged FINs far out of window, every 100 ms for 25 s (longer than 2 MSL = 20 s).
    acks = 0
    for i in range(250):
        h.advance(0.1)
        if conn.state != State.TIME_WAIT:
            break
        h.peer.send(flags="FA", seq=1002 + 100_000 + i, ack=fin.seq + 1, advance=False)
        acks += len(h.drain())
    assert conn.state == State.CLOSED and conn.key not in h.layer.connections
    assert 20.0 <= h.now - 100.0 <= 21.0  # closed on the first 2 MSL, not restarted
    # At most one ACK per 500 ms (Linux tcp_invalid_ratelimit), not one per FIN.
    assert 30 <= acks <= 41, acks
    assert h.stats["drop.tcp.time_wait_unacceptable"] >= 190
    assert h.stats["tcp.oow_acks_suppressed"] >= 150


def test_retransmitted_fin_in_time_wait_still_restarts_and_is_acked_at_once():
    h = Harness(delayed_ack=False, msl=10.0)
    conn, fin = _time_wait(h)
    h.advance(15.0)
    for _ in range(3):  # each retransmission of the peer's FIN is ACKed, none throttled
        h.peer.send(flags="FA", seq=1001, ack=fin.seq + 1, advance=False)
        h.peer.expect(flags="A", seq=fin.seq + 1, ack=1002)
    h.advance(19.9)
    assert conn.state == State.TIME_WAIT
    h.advance(0.2)
    assert conn.state == State.CLOSED
