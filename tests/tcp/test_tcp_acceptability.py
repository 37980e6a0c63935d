"""Segment acceptability (RFC 9293 3.10.7.4), RST/SYN/ACK hardening (RFC 5961) with its rate limit,
and timestamps/PAWS (RFC 7323)."""

from __future__ import annotations

import pytest

from tests.tcp.harness import Harness, Peer
from ustack.ratelimit import TokenBucket
from ustack.transport.tcp import State


def established(**cfg):
    h = Harness(delayed_ack=False, **cfg)
    conn = h.open_active()
    return h, conn


# -- the four acceptability cases ----------------------------------------------

def test_zero_length_segment_in_open_window():
    h, conn = established()
    wnd = 64000
    h.peer.send(flags="A", seq=1001 + wnd - 1, advance=False)  # last octet of the window: acceptable
    h.peer.expect_nothing()
    h.peer.send(flags="A", seq=1001 + wnd, advance=False)  # just past it
    h.peer.expect(flags="A", seq=conn.tcb.snd_nxt, ack=1001)
    h.peer.send(flags="A", seq=1000, advance=False)  # just before RCV.NXT, within 500 ms of that ACK
    h.peer.expect_nothing()  # Linux's tcp_invalid_ratelimit: one ACK per 500 ms to unacceptable segments
    h.advance(0.5)
    h.peer.send(flags="A", seq=1000, advance=False)
    h.peer.expect(flags="A", ack=1001)
    assert h.stats["drop.tcp.unacceptable"] == 3 and h.stats["tcp.invalid_ack_ratelimited"] == 1
    assert h.stats["tcp.unacceptable_old"] == 2  # only those left of RCV.NXT: past the window is not "old"


def test_paws_drops_are_acked_at_most_every_500_ms():
    """RFC 7323 5.3 R1 drops draw an ACK, rate-limited as every unacceptable segment (Linux counts
    TCPACKSkippedPAWS): forged old TSvals are not each reflected."""
    h, conn = ts_established()
    acks = 0
    for _ in range(100):  # 100 in 1 s
        h.peer.send(flags="PA", payload=b"x", ts=(4000, h.peer.ts_recent), advance=False)
        h.layer.flush(h.now)
        acks += len(h.drain())
        h.advance(0.01)
    assert h.stats["drop.tcp.paws"] == 100
    assert acks == 2 and h.stats["tcp.invalid_ack_ratelimited"] == 98


def test_zero_window_accepts_only_rcv_nxt_and_still_processes_acks():
    h, conn = established(rcvbuf=2000)
    h.peer.send(flags="PA", payload=b"x" * 2000)
    h.peer.expect(flags="A", ack=3001, win=0)
    conn.send(b"ours", now=h.now)
    ours = h.peer.expect(flags="PA", payload=b"ours")
    h.peer.send(flags="A", seq=3002, advance=False)  # zero window: only SEG.SEQ = RCV.NXT is acceptable
    h.peer.expect(flags="A", ack=3001, win=0)
    # A zero-window probe (one octet at RCV.NXT): the text is refused, the ACK field is used.
    h.peer.send(flags="PA", seq=3001, ack=ours.seq + 4, payload=b"p", advance=False)
    h.peer.expect(flags="A", ack=3001, win=0)
    assert conn.tcb.snd_una == ours.seq + 4 and len(conn.receiver.rcvbuf) == 2000


def test_data_segments_trimmed_to_the_window():
    h, conn = established(rcvbuf=1000)
    h.peer.send(flags="PA", seq=1001, payload=b"a" * 600, advance=False)
    h.peer.expect(flags="A", ack=1601)
    # old and new data in one segment: only the new part is taken
    h.peer.send(flags="PA", seq=1301, payload=b"b" * 300 + b"c" * 100, advance=False)
    h.peer.expect(flags="A", ack=1701)
    # entirely old: a duplicate, answered with an ACK
    h.peer.send(flags="PA", seq=1001, payload=b"d" * 100, advance=False)
    h.peer.expect(flags="A", ack=1701)
    # straddling the right edge (window now 300): trimmed, and ACKed at once
    h.peer.send(flags="FPA", seq=1701, payload=b"e" * 500, advance=False)
    h.peer.expect(flags="A", ack=2001, win=0)
    assert conn.state == State.ESTABLISHED  # the FIN was past the window
    assert conn.recv(2000) == b"a" * 600 + b"c" * 100 + b"e" * 300
    # entirely beyond the window
    h.peer.send(flags="PA", seq=5000, payload=b"f", advance=False)
    h.peer.expect(flags="A", ack=2001)


# -- RST (RFC 5961 3.2) ------------------------------------------------------------

def test_rst_exactly_at_rcv_nxt_resets():
    h, conn = established()
    h.peer.send(flags="R", seq=1001)
    assert conn.state == State.CLOSED and isinstance(conn.error, ConnectionResetError)


def test_rst_in_window_but_not_exact_gets_challenge_ack_rate_limited():
    h, conn = established(challenge_ack_interval=0.5)
    h.peer.send(flags="R", seq=1002, advance=False)
    h.peer.expect(flags="A", seq=conn.tcb.snd_nxt, ack=1001)
    h.peer.send(flags="R", seq=1500, advance=False)
    h.peer.expect_nothing()  # within 0.5 s of the last challenge ACK
    h.advance(0.5)
    h.peer.send(flags="RA", seq=2000, advance=False)
    h.peer.expect(flags="A", ack=1001)
    assert conn.state == State.ESTABLISHED
    assert h.stats["tcp.challenge_acks"] == 2 and h.stats["tcp.challenge_acks_suppressed"] == 1
    assert conn.info().challenge_acks == 2


def test_rst_outside_window_is_dropped_silently():
    h, conn = established()
    h.peer.send(flags="R", seq=1001 + 64000, advance=False)
    h.peer.send(flags="R", seq=900, advance=False)
    h.peer.expect_nothing()
    assert conn.state == State.ESTABLISHED and h.stats["drop.tcp.rst_out_of_window"] == 2


def test_layer_wide_challenge_ack_budget():
    h = Harness(delayed_ack=False)
    h.layer.challenge_acks = TokenBucket(2.0, 2.0, h.now)  # a budget of 2 per second, starting full
    conns = []
    for port in (5000, 5001, 5002):
        h.peer = Peer(h, port=port)
        conns.append((h.peer, h.open_active()))
    for peer, _ in conns:
        peer.send(flags="R", seq=1500, advance=False)
    assert len(h.drain()) == 2  # the third is over the layer's budget
    assert h.stats["tcp.challenge_acks_suppressed"] == 1


# -- SYN in a synchronized state (RFC 5961 4.2) ------------------------------------------

@pytest.mark.parametrize("seq", [1001, 1500, 999_999])
def test_syn_in_established_gets_challenge_ack(seq):
    h, conn = established()
    h.peer.send(flags="S", seq=seq, advance=False)
    h.peer.expect(flags="A", seq=conn.tcb.snd_nxt, ack=1001)
    assert conn.state == State.ESTABLISHED and h.stats["drop.tcp.syn_in_window"] == 1


# -- ACK range (RFC 5961 5.2) ---------------------------------------------------------------

def test_ack_for_unsent_data_is_challenged_and_dropped():
    h, conn = established()
    una = conn.tcb.snd_una
    h.peer.send(flags="PA", ack=una + 10, payload=b"ignored", advance=False)
    h.peer.expect(flags="A", ack=1001)
    assert len(conn.receiver.rcvbuf) == 0 and h.stats["drop.tcp.ack_unsent"] == 1


def test_too_old_ack_is_challenged_but_recent_old_ack_is_fine():
    h, conn = established()
    una = conn.tcb.snd_una
    assert conn.tcb.max_snd_wnd == 65535
    h.peer.send(flags="PA", ack=una - 65536, payload=b"old", advance=False)
    h.peer.expect(flags="A", ack=1001)
    assert h.stats["drop.tcp.ack_too_old"] == 1 and len(conn.receiver.rcvbuf) == 0
    h.peer.send(flags="PA", ack=una - 1000, payload=b"fine")
    h.peer.expect(flags="A", ack=1005)
    assert conn.recv(10) == b"fine"


# -- timestamps and PAWS (RFC 7323) ----------------------------------------------------------

def ts_established():
    h = Harness(delayed_ack=False, timestamps=True)
    conn = h.layer.connect(None, (h.peer.addr, h.peer.port), h.now)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S")
    h.peer.use_ts = True
    h.peer.ts_recent = syn.timestamps[0]
    h.advance(0.1)
    h.peer.send(flags="SA", ack=syn.seq + 1, mss=1460)
    h.peer.expect(flags="A")
    return h, conn


def test_timestamps_echoed_and_rtt_measured():
    h, conn = ts_established()
    conn.send(b"timed", now=h.now)
    seg = h.peer.expect(flags="PA")
    assert seg.timestamps[1] == 5000  # TS.Recent: the peer's last TSval
    h.advance(0.250)
    h.peer.ts_clock = 5250
    h.peer.ack()
    assert conn.info().srtt == pytest.approx(0.875 * 0.1 + 0.125 * 0.25, abs=0.002)  # handshake, then this
    assert conn.tcb.ts_recent == 5250


def test_paws_drops_old_timestamps_with_an_ack():
    h, conn = ts_established()
    h.peer.ts_clock = 6000
    h.peer.send(flags="PA", payload=b"new")
    h.peer.expect(flags="A", ack=1004)
    h.peer.ts_clock = 5999  # older than TS.Recent: a wrapped or duplicate segment
    h.peer.send(flags="PA", payload=b"old", advance=False)
    h.peer.expect(flags="A", ack=1004)
    assert conn.recv(10) == b"new" and h.stats["drop.tcp.paws"] == 1


def test_paws_gives_up_after_24_days_idle():
    h, conn = ts_established()
    h.peer.ts_clock = 6000
    h.peer.send(flags="PA", payload=b"a")
    h.peer.expect(flags="A")
    h.clock.advance(25 * 24 * 3600.0)
    h.peer.ts_clock = 10
    h.peer.send(flags="PA", payload=b"b")
    h.peer.expect(flags="A", ack=1003)
    assert conn.recv(10) == b"ab"


def test_segment_without_timestamp_dropped_once_negotiated():
    h, conn = ts_established()
    h.peer.send(flags="PA", payload=b"bare", ts=False, advance=False)
    h.peer.expect_nothing()
    assert h.stats["drop.tcp.no_timestamp"] == 1 and len(conn.receiver.rcvbuf) == 0
    h.peer.send(flags="R", ts=False)  # RSTs need none
    assert conn.state == State.CLOSED


def test_ts_recent_not_updated_by_segments_beyond_last_ack_sent():
    h, conn = ts_established()
    h.peer.ts_clock = 7000
    h.peer.send(flags="PA", seq=1101, payload=b"later", advance=False)  # out of order
    h.peer.expect(flags="A", ack=1001)
    assert conn.tcb.ts_recent == 5000  # RFC 7323 4.3: SEG.SEQ > Last.ACK.sent
