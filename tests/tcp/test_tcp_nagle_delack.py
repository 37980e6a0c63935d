"""Latency rules as Linux has them, on the scripted peer and the manual clock: Nagle in Minshall's
variant, TCP_NODELAY, TCP_CORK (and its 200 ms cap), and delayed ACK with quick-ACK mode, ping-pong
mode, PSH with a waiting reader, the two-full-segments rule, TCP_QUICKACK and the adaptive delay."""

from __future__ import annotations

import pytest

from tests.tcp.harness import Harness

PEER_ISS = 1000


def established(rtt=0.1, peer_mss=1448, **cfg):
    """An active open whose handshake took ``rtt`` (SRTT = rtt, RTO = 3 * rtt, floored at 0.2 s)."""
    h = Harness(**cfg)
    conn = h.layer.connect(None, (h.peer.addr, h.peer.port), h.now)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S")
    h.advance(rtt)
    h.peer.snd_nxt = PEER_ISS
    h.peer.send(flags="SA", ack=syn.seq + 1, mss=peer_mss, win=65535)
    h.peer.expect(flags="A", seq=syn.seq + 1, ack=PEER_ISS + 1)
    return h, conn, syn.seq + 1


# -- Nagle (Minshall's variant) ------------------------------------------------------------------

def test_a_2000_byte_write_leaves_as_two_segments_at_once():
    h, conn, iss1 = established(delayed_ack=False)
    conn.send(b"r" * 2000, now=h.now)
    h.peer.expect(flags="A", psh=False, seq=iss1, ack=PEER_ISS + 1, length=1448)
    h.peer.expect(flags="PA", seq=iss1 + 1448, ack=PEER_ISS + 1, length=552)  # no wait for the first ACK
    h.peer.expect_nothing()
    assert conn.tcb.snd_sml == iss1 + 2000


def test_a_small_write_waits_while_an_earlier_small_segment_is_unacked():
    h, conn, iss1 = established(delayed_ack=False)
    conn.send(b"r" * 2000, now=h.now)
    assert [len(s.payload) for s in h.drain()] == [1448, 552]
    conn.send(b"a" * 10, now=h.now)
    conn.send(b"b" * 20, now=h.now)
    h.peer.expect_nothing()  # the 552-byte tail is a small segment in flight
    h.peer.ack(ack=iss1 + 1448)  # the full segment's ACK is not enough
    h.peer.expect_nothing()
    h.advance(0.05)
    h.peer.ack(ack=iss1 + 2000)  # the small one is acknowledged: the held bytes go, coalesced
    h.peer.expect(flags="PA", seq=iss1 + 2000, payload=b"a" * 10 + b"b" * 20)
    h.peer.expect_nothing()


def test_full_segments_are_never_held_and_small_ones_go_when_nothing_small_is_out():
    h, conn, iss1 = established(delayed_ack=False)
    conn.send(b"F" * 1448, now=h.now)
    conn.send(b"G" * 1448, now=h.now)
    assert [len(s.payload) for s in h.drain()] == [1448, 1448]
    conn.send(b"s" * 7, now=h.now)  # full segments are in flight, but no small one: goes at once
    h.peer.expect(flags="PA", seq=iss1 + 2896, payload=b"s" * 7)


def test_nodelay_sends_every_small_write():
    h, conn, iss1 = established(delayed_ack=False, nodelay=True)
    for i, chunk in enumerate((b"a" * 100, b"b" * 50, b"c" * 30)):
        conn.send(chunk, now=h.now)
    assert [(s.seq, s.payload) for s in h.drain()] == [(iss1, b"a" * 100), (iss1 + 100, b"b" * 50),
                                                       (iss1 + 150, b"c" * 30)]


# -- TCP_CORK --------------------------------------------------------------------------------------

def test_cork_holds_partial_segments_until_full_and_uncork_flushes():
    h, conn, iss1 = established(delayed_ack=False)
    conn.configure(cork=True)
    conn.send(b"x" * 100, now=h.now)
    h.peer.expect_nothing()  # nothing is outstanding, yet the cork holds it
    conn.send(b"y" * 1400, now=h.now)
    h.peer.expect(flags="A", seq=iss1, payload=b"x" * 100 + b"y" * 1348)  # full: goes
    h.peer.expect_nothing()  # the 52-byte rest stays corked
    h.advance(0.1)
    h.peer.ack()
    h.peer.expect_nothing()
    conn.configure(now=h.now, cork=False)
    h.peer.expect(flags="PA", seq=iss1 + 1448, payload=b"y" * 52)
    assert conn.sender.cork_timer.deadline is None


def test_cork_200ms_cap_sends_the_partial_segment():
    h, conn, iss1 = established(delayed_ack=False, cork=True)
    conn.send(b"x" * 100, now=h.now)
    h.peer.expect_nothing()
    h.advance(0.05)
    conn.send(b"z" * 10, now=h.now)  # the cap runs from the first hold, not the last write
    h.advance(0.149)
    h.peer.expect_nothing()
    assert h.fire_next() == pytest.approx(0.001)
    h.peer.expect(flags="PA", seq=iss1, payload=b"x" * 100 + b"z" * 10)
    assert h.stats["tcp.cork_timeouts"] == 1
    h.peer.ack()
    conn.send(b"w" * 5, now=h.now)  # a new hold, a new 200 ms
    h.peer.expect_nothing()
    assert h.fire_next() == pytest.approx(0.2)
    h.peer.expect(flags="PA", seq=iss1 + 110, payload=b"w" * 5)


def test_cork_wins_over_nodelay_and_a_fin_takes_the_corked_bytes():
    h, conn, iss1 = established(delayed_ack=False, cork=True, nodelay=True)
    conn.send(b"x" * 100, now=h.now)
    h.peer.expect_nothing()  # Linux: TCP_CORK holds even with TCP_NODELAY
    conn.shutdown(1, now=h.now)  # SHUT_WR
    h.peer.expect(flags="FPA", seq=iss1, payload=b"x" * 100)
    assert conn.sender.cork_timer.deadline is None


# -- delayed ACK ------------------------------------------------------------------------------------

def test_quick_ack_mode_at_connection_start_then_delayed_acks():
    h, conn, iss1 = established(delayed_ack=True, max_quickacks=3)
    seq = PEER_ISS + 1
    for _ in range(3):  # rcv_wnd / (2 * 536) quick ACKs, at most max_quickacks
        h.peer.send(flags="A", payload=b"d" * 100)
        seq += 100
        h.peer.expect(flags="A", seq=iss1, ack=seq)
    h.peer.send(flags="A", payload=b"d" * 100)
    h.peer.expect_nothing()  # quick ACKs spent: delayed
    assert h.fire_next() == pytest.approx(0.04)
    h.peer.expect(flags="A", seq=iss1, ack=seq + 100)


def test_linux_default_grants_16_quick_acks():
    h, conn, iss1 = established(delayed_ack=True)
    for i in range(16):
        h.peer.send(flags="A", payload=b"d" * 100)
        h.peer.expect(flags="A", ack=PEER_ISS + 1 + 100 * (i + 1))
        conn.recv(1000)
    h.peer.send(flags="A", payload=b"d" * 100)
    h.peer.expect_nothing()


def test_quick_acks_again_after_idle_longer_than_the_rto():
    h, conn, iss1 = established(delayed_ack=True, max_quickacks=2)
    for _ in range(2):
        h.peer.send(flags="A", payload=b"q" * 100)
        h.drain()
    h.peer.send(flags="A", payload=b"q" * 100)
    h.peer.expect_nothing()
    h.fire_next()
    h.peer.expect(flags="A", ack=PEER_ISS + 301)
    h.advance(0.25)  # not idle long enough (RTO 0.3 s): still delayed
    h.peer.send(flags="A", payload=b"q" * 100)
    h.peer.expect_nothing()
    h.fire_next()
    h.drain()
    h.advance(0.5)  # idle longer than the RTO: quick ACKs again
    h.peer.send(flags="A", payload=b"q" * 100)
    h.peer.expect(flags="A", ack=PEER_ISS + 501)
    h.peer.send(flags="A", payload=b"q" * 100)
    h.peer.expect(flags="A", ack=PEER_ISS + 601)
    h.peer.send(flags="A", payload=b"q" * 100)
    h.peer.expect_nothing()


def test_ping_pong_delays_acks_for_the_reply_and_the_timer_ends_it():
    h, conn, iss1 = established(delayed_ack=True, max_quickacks=0)
    h.peer.send(flags="PA", payload=b"request1")
    h.peer.expect_nothing()
    assert not conn.interactive
    h.advance(0.01)
    conn.send(b"reply1", now=h.now)  # within the ATO of the request: interactive
    h.peer.expect(flags="PA", seq=iss1, ack=PEER_ISS + 9, payload=b"reply1")
    assert conn.interactive
    h.advance(0.2)
    h.peer.send(flags="PA", payload=b"request2")
    h.peer.expect_nothing()  # the ACK waits for the reply
    h.advance(0.03)
    conn.send(b"reply2", now=h.now)
    h.peer.expect(flags="PA", seq=iss1 + 6, ack=PEER_ISS + 17, payload=b"reply2")
    h.peer.send(flags="PA", payload=b"request3")  # this one gets no reply
    start = h.now
    while not h.host.out:  # the timer request2 armed fires first and re-arms for request3's ACK (lazy)
        h.fire_next()
    # 30 ms after request2 (less than the ATO): ATO = 40/2 + 30 = 50 ms (Linux's estimator)
    assert h.now - start == pytest.approx(0.05)
    h.peer.expect(flags="A", seq=iss1 + 12, ack=PEER_ISS + 25)
    assert not conn.interactive  # the timer fired: ping-pong mode is over


def test_a_late_reply_does_not_make_the_flow_interactive():
    h, conn, iss1 = established(delayed_ack=True, max_quickacks=0)
    h.peer.send(flags="PA", payload=b"request")
    assert h.fire_next() == pytest.approx(0.04)
    h.peer.expect(flags="A", ack=PEER_ISS + 8)
    h.advance(0.5)
    conn.send(b"reply", now=h.now)
    h.drain()
    assert not conn.interactive


def test_ack_at_once_for_a_psh_segment_when_the_reader_waits():
    h, conn, iss1 = established(delayed_ack=True, max_quickacks=0)
    conn.reader_waiting = True
    h.peer.send(flags="A", payload=b"no push")
    h.peer.expect_nothing()  # no PSH: the message is not complete
    h.peer.send(flags="PA", payload=b" and push")
    h.peer.expect(flags="A", seq=iss1, ack=PEER_ISS + 17)
    assert conn.recv(100) == b"no push and push"
    conn.reader_waiting = False
    h.peer.send(flags="PA", payload=b"nobody waits")
    h.peer.expect_nothing()


def test_in_ping_pong_mode_only_the_second_pushed_segment_is_acked_at_once():
    h, conn, iss1 = established(delayed_ack=True, max_quickacks=0)
    conn.configure(quickack=False)  # Linux: TCP_QUICKACK 0 enters ping-pong mode
    assert conn.interactive
    conn.reader_waiting = True
    h.peer.send(flags="PA", payload=b"one")
    h.peer.expect_nothing()  # its ACK is to ride on the reply
    h.peer.send(flags="PA", payload=b"two")
    h.peer.expect(flags="A", ack=PEER_ISS + 7)


def test_a_read_that_empties_the_buffer_acks_a_pushed_segment():
    h, conn, iss1 = established(delayed_ack=True, max_quickacks=0)
    h.peer.send(flags="PA", payload=b"message")
    h.peer.expect_nothing()
    assert conn.recv(3, now=h.now) == b"mes"
    h.peer.expect_nothing()  # not empty yet
    assert conn.recv(100, now=h.now) == b"sage"
    h.peer.expect(flags="A", seq=iss1, ack=PEER_ISS + 8)
    assert conn.receiver.delack_due is None  # no delayed ACK runs (its timer may fire once, lazily, and find none)


def test_never_more_than_two_full_segments_unacknowledged_even_in_ping_pong():
    h, conn, iss1 = established(delayed_ack=True, max_quickacks=0)
    conn.configure(quickack=False)
    h.peer.send(flags="A", payload=b"1" * 1448)
    h.peer.expect_nothing()
    h.peer.send(flags="A", payload=b"2" * 1448)
    h.peer.expect(flags="A", ack=PEER_ISS + 1 + 2896)


def test_tcp_quickack_sends_an_owed_ack_and_leaves_ping_pong():
    h, conn, iss1 = established(delayed_ack=True, max_quickacks=4)
    conn.configure(quickack=False)
    h.peer.send(flags="PA", payload=b"held")
    h.peer.expect_nothing()
    conn.configure(now=h.now, quickack=True)
    h.peer.expect(flags="A", seq=iss1, ack=PEER_ISS + 5)
    assert not conn.interactive
    h.peer.send(flags="PA", payload=b"quick")  # quick-ACK mode again
    h.peer.expect(flags="A", ack=PEER_ISS + 10)


def test_the_ack_delay_adapts_between_40_and_200_ms():
    # A slow, non-interactive sender: each expiry doubles the ATO (Linux), the delay stops at 200 ms.
    h, conn, iss1 = established(rtt=0.5, delayed_ack=True, max_quickacks=0)
    delays = []
    for i in range(5):
        h.peer.send(flags="A", payload=b"s" * 10)
        delays.append(h.fire_next())
        h.peer.expect(flags="A", ack=PEER_ISS + 1 + 10 * (i + 1))
        h.advance(1.0 - delays[-1])
    assert delays == pytest.approx([0.04, 0.08, 0.16, 0.2, 0.2])
    delack = conn.receiver.delack
    assert delack.ato == pytest.approx(1.28)  # grown past the cap; the delay itself stays at 200 ms
    # The estimator follows the gaps: m < ATO gives ATO/2 + m (at most the RTO, 1.5 s); m <= 20 ms
    # gives ATO/2 + 20 ms, back toward 40 ms.
    h.peer.send(flags="A", payload=b"f" * 10)
    assert delack.ato == pytest.approx(1.5)
    for want in (0.77, 0.405, 0.2225):
        h.advance(0.01)
        h.peer.send(flags="A", payload=b"f" * 10)
        assert delack.ato == pytest.approx(want)
    assert h.fire_next() == pytest.approx(0.2 - 0.03)  # the timer armed by the first of them
    h.peer.expect(flags="A", ack=PEER_ISS + 91)
    # Leaving quick-ACK mode resets it.
    conn.configure(quickack=True, max_quickacks=1)
    h.peer.send(flags="A", payload=b"q" * 10)
    h.peer.expect(flags="A")
    assert conn.receiver.delack.ato == pytest.approx(0.04)


def test_delack_knobs_are_validated():
    with pytest.raises(ValueError):
        Harness(delack_max=0.6)
    with pytest.raises(ValueError):
        Harness(delack_timeout=0.1, delack_max=0.05)
    with pytest.raises(ValueError):
        Harness(max_quickacks=-1)


def test_the_delayed_ack_timer_is_rearmed_lazily_and_the_ack_still_goes_when_due():
    """A bulk stream ACKed every second segment touches the timer once, not once per ACK; a timer
    left from an ACK that has left fires, finds the next delayed ACK due later, and re-arms for it."""
    h, conn, iss1 = established(delayed_ack=True, max_quickacks=0)
    heap = h.timers._heap
    pushes = len(heap)
    acks = 0
    for i in range(20):
        h.peer.send(flags="A", payload=bytes(1448))
        acks += len(h.drain())
        h.advance(0.001)
    assert acks == 10  # every second full-sized segment (RFC 5681 4.2)
    assert len(heap) - pushes <= 1  # armed once by the first segment (eagerly: 10 arms and 10 cancels)
    h.advance(0.05)  # the left timer fires with no delayed ACK due: nothing is sent
    h.peer.expect_nothing()
    h.peer.send(flags="A", payload=bytes(1448))  # an odd segment: its ACK waits
    due = conn.receiver.delack_due
    assert due is not None and due > h.now
    h.advance(0.003)
    h.peer.send(flags="A", payload=bytes(1448))  # ACKed at once; the timer is left armed
    h.peer.expect(flags="A", ack=h.peer.snd_nxt)
    assert conn.receiver.delack_due is None and conn.receiver.delack_timer.deadline == due
    h.peer.send(flags="A", payload=bytes(1448))
    due = conn.receiver.delack_due
    assert due > conn.receiver.delack_timer.deadline  # the left timer fires first ...
    while not h.host.out:
        h.fire_next()
    assert h.now == due  # ... and the ACK goes when due, as if the timer had been re-armed for it
    h.peer.expect(flags="A", ack=h.peer.snd_nxt)
