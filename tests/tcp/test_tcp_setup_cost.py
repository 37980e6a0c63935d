"""Connection setup cost: what a connection allocates lazily, and that it behaves the same when it does."""

from __future__ import annotations

from tests.tcp.harness import Harness
from ustack.timers import UNARMED
from ustack.transport.tcp.tcb import State


def test_a_quiet_connection_makes_no_delack_keepalive_or_close_timer():
    h = Harness(delayed_ack=True)
    _, conn = h.open_passive()
    assert conn.receiver.delack_timer is UNARMED
    assert conn._keepalive_timer is UNARMED and conn._close_timer is UNARMED
    assert h.timers.live == 0  # the SYN-ACK's retransmission timer was cancelled by the ACK


def test_lazily_made_timers_fire_as_before():
    """The delayed ACK goes out at the delay; TIME-WAIT ends after exactly 2 MSL."""
    h = Harness(delayed_ack=True, max_quickacks=0, msl=30.0)  # no quick ACKs: data's ACK is delayed
    conn = h.open_active()
    assert conn.receiver.delack_timer is UNARMED
    h.peer.send(flags="A", payload=b"z" * 10)
    assert conn.receiver.delack_timer is not UNARMED and conn.receiver.delack_timer.deadline is not None
    h.peer.expect_nothing()
    due = conn.receiver.delack_timer.deadline
    assert h.fire_next() > 0 and h.now == due
    h.peer.expect(flags="A", ack=1011)  # the peer ISS 1000 + SYN + 10 bytes
    assert conn.recv(100) == b"z" * 10
    conn.close(now=h.now)
    fin = h.peer.expect(flags="FA")
    h.peer.send(flags="FA", ack=fin.seq + 1)
    h.peer.expect(flags="A")
    assert conn.state == State.TIME_WAIT and conn._close_timer.deadline == h.now + 60.0
    h.advance(59.999)
    assert conn.state == State.TIME_WAIT
    h.advance(0.001)
    assert conn.state == State.CLOSED and conn.key not in h.layer.connections
