"""Retransmission: RTO timing and backoff (RFC 6298) with Karn, giving up, go-back-N after a timeout (and the
pure ACKs sent meanwhile), fast retransmit and NewReno fast recovery with partial ACKs (RFC 5681, RFC 6582)."""

from __future__ import annotations

import errno

import pytest

from tests.tcp.harness import LOCAL, PEER, SECRET, Harness
from ustack.transport.tcp import State
from ustack.transport.tcp.config import TcpConfig
from ustack.transport.tcp.congestion import Cubic, NewReno
from ustack.transport.tcp.isn import initial_sequence_number


def established(rtt: float = 0.1, peer_mss: int = 1000, peer_win: int = 65535, **cfg):
    """A connection whose handshake took ``rtt`` (srtt = rtt, rttvar = rtt/2, RTO = 3 rtt)."""
    h = Harness(delayed_ack=False, **cfg)
    conn = h.layer.connect(None, (h.peer.addr, h.peer.port), h.now)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S")
    h.advance(rtt)
    h.peer.send(flags="SA", ack=syn.seq + 1, mss=peer_mss, win=peer_win)
    h.peer.expect(flags="A")
    return h, conn


def grow_cwnd(h, conn, segments: int):
    """Send and ACK full segments until cwnd reaches ``segments`` MSS; leaves nothing in flight."""
    mss = conn.tcb.snd_mss
    while conn.sender.cc.window < segments * mss:
        conn.send(b"g" * mss, now=h.now)
        h.drain()
        h.peer.ack()
    h.drain()
    assert conn.tcb.snd_una == conn.tcb.snd_max


def test_rto_from_handshake_rtt_and_exponential_backoff():
    h, conn = established(rtt=0.1, min_rto=0.2)
    assert conn.info().rto == pytest.approx(0.3)
    conn.send(b"lost", now=h.now)
    first = h.peer.expect(flags="PA", payload=b"lost")
    for gap in (0.3, 0.6, 1.2, 2.4, 4.8):
        assert h.fire_next() == pytest.approx(gap)
        h.peer.expect(flags="PA", seq=first.seq, payload=b"lost")
    info = conn.info()
    assert info.timeouts == 5 and info.retransmits == 5 and info.backoff == 5


def test_min_and_max_rto():
    h, conn = established(rtt=0.001, min_rto=0.25, max_rto=2.0)
    assert conn.info().rto == 0.25
    conn.send(b"x", now=h.now)
    h.drain()
    gaps = [h.fire_next() for _ in range(6)]
    assert gaps == pytest.approx([0.25, 0.5, 1.0, 2.0, 2.0, 2.0])


def test_karn_no_sample_from_a_retransmitted_segment():
    h, conn = established(rtt=0.1)
    conn.send(b"a", now=h.now)
    h.drain()
    h.fire_next()  # retransmitted after 0.3 s
    h.drain()
    h.advance(0.05)
    h.peer.ack()  # ambiguous: for the original or the retransmission?
    info = conn.info()
    assert info.srtt == pytest.approx(0.1) and info.rto == pytest.approx(0.6)  # no sample, still backed off
    conn.send(b"b", now=h.now)
    h.drain()
    h.advance(0.1)
    h.peer.ack()  # a clean sample ends the backoff
    info = conn.info()
    assert info.backoff == 0 and info.rto == pytest.approx(0.1 + 4 * 0.0375)


def test_rto_restarted_by_acks_and_cancelled_when_all_acked():
    h, conn = established(rtt=0.1)
    conn.send(b"x" * 3000, now=h.now)
    segs = h.drain()
    assert len(segs) == 3
    h.advance(0.2)
    h.peer.ack(ack=segs[0].seq + 1000)
    assert h.timers.next_deadline() == pytest.approx(h.now + conn.info().rto)  # RFC 6298 5.3
    h.peer.ack()
    assert h.timers.next_deadline() is None  # RFC 6298 5.2


def test_gives_up_after_max_retries():
    h, conn = established(rtt=0.1, max_retries=3)
    conn.send(b"doomed", now=h.now)
    h.drain()
    for _ in range(3):
        h.fire_next()
        h.peer.expect(flags="PA")
    h.fire_next()
    h.peer.expect_nothing()  # no RST: the peer is presumably gone
    assert conn.state == State.CLOSED and conn.error.errno == errno.ETIMEDOUT
    with pytest.raises(TimeoutError):
        conn.recv(1)


def test_timeout_goes_back_n_in_slow_start():
    h, conn = established(rtt=0.1)
    conn.send(b"".join(bytes([65 + i]) * 1000 for i in range(3)), now=h.now)
    first, second, third = h.drain()
    assert conn.sender.cc.window == 4000  # RFC 5681 IW for a 1000-byte MSS
    h.fire_next()
    again = h.peer.expect(flags="A", seq=first.seq, payload=first.payload)  # one segment: cwnd = 1 MSS
    h.peer.expect_nothing()
    # RFC 9438 4.6 / 4.8 (CUBIC, the default): ssthresh = 0.7 FlightSize (3 segments), cwnd = the loss window
    assert conn.sender.cc.window == 1000 and conn.sender.cc.ssthresh == 3000 * 7 // 10
    h.peer.ack(ack=again.seq + 1000)
    h.peer.expect(flags="A", seq=second.seq, payload=second.payload)
    h.peer.expect(flags="PA", seq=third.seq, payload=third.payload)
    assert conn.info().retransmits == 3


def test_pure_ack_after_a_timeout_carries_snd_max():
    """Regression: a segment without data carries SND.MAX, not snd_nxt.

    A timeout pulls snd_nxt back to SND.UNA (go-back-N) while the peer may
    have everything up to SND.MAX already. An ACK numbered snd_nxt then falls
    left of the peer's RCV.NXT: the peer finds it unacceptable and ignores its
    ACK field (RFC 9293 3.10.7.4), and two such peers stall until a timeout.
    """
    h, conn = established(rtt=0.1)
    conn.send(b"".join(bytes([65 + i]) * 1000 for i in range(3)), now=h.now)
    first, second, third = h.drain()  # the peer gets all three; its ACKs will be lost
    snd_max = third.seq + 1000
    assert h.peer.rcv_nxt == snd_max
    h.fire_next()  # RTO: go back N with a one-segment window
    h.peer.expect(flags="A", seq=first.seq, payload=first.payload)
    h.peer.expect_nothing()
    tcb = conn.tcb
    assert tcb.snd_max == snd_max and tcb.snd_nxt == first.seq + 1000  # snd_nxt really was pulled back
    # The peer's data (its ACK field still at our first byte) is acknowledged at once, by a pure ACK:
    h.peer.send(flags="PA", ack=first.seq, payload=b"data")
    ack = h.peer.expect(flags="A", length=0, ack=h.peer.snd_nxt)
    assert ack.seq == snd_max == h.peer.rcv_nxt  # acceptable to the peer: SEG.SEQ = RCV.NXT
    # An old duplicate is answered with a pure ACK too (RFC 9293 3.10.7.4, first step).
    h.peer.send(flags="PA", ack=first.seq, payload=b"data", seq=h.peer.snd_nxt - 4, advance=False)
    again = h.peer.expect(flags="A", length=0)
    assert again.seq == snd_max and h.stats["drop.tcp.unacceptable"] == 1
    h.peer.expect_nothing()


@pytest.mark.parametrize("congestion,ssthresh", [("newreno", 4000), ("cubic", 5600)])
def test_fast_retransmit_on_third_duplicate_ack_and_recovery(congestion, ssthresh):
    """RFC 5681 3.2 / RFC 6582 (no SACK): ssthresh from FlightSize (8 segments) by the algorithm's
    decrease (NewReno halves, RFC 5681 (4); CUBIC keeps 0.7, RFC 9438 4.6), cwnd = ssthresh + 3 SMSS,
    each further duplicate inflates it by one SMSS, the full ACK deflates it (RFC 6582 3.2 step 3)."""
    h, conn = established(rtt=0.1, congestion=congestion)
    grow_cwnd(h, conn, 8)
    cwnd = conn.sender.cc.window
    conn.send(b"".join(bytes([97 + i]) * 1000 for i in range(8)), now=h.now)
    segs = h.drain()
    assert len(segs) == 8
    una = segs[0].seq
    h.peer.ack(ack=una)  # segment 1 was lost; 2 and 3 produce duplicates
    h.peer.ack(ack=una)
    h.peer.expect_nothing()
    h.peer.ack(ack=una)  # third duplicate: fast retransmit at once, no timer
    h.peer.expect(flags="A", seq=una, payload=segs[0].payload)
    info = conn.info()
    assert info.fast_retransmits == 1 and info.in_recovery and info.dup_acks == 3
    assert info.congestion == congestion
    assert conn.sender.cc.ssthresh == ssthresh and info.cwnd == ssthresh + 3000
    assert cwnd >= 8000
    h.peer.ack(ack=una)  # more duplicates inflate the window
    assert conn.info().cwnd == ssthresh + 4000
    h.peer.ack(ack=segs[-1].seq + 1000)  # full ACK: recovery ends, window deflates
    info = conn.info()
    assert not info.in_recovery and info.cwnd == conn.sender.cc.window == min(ssthresh, 1000 + 1000)


@pytest.mark.parametrize("sack", [False, True])
def test_first_fast_retransmit_whatever_the_iss(sack):
    """RFC 6582 3.2 step 1: "recover" starts at the ISS. Started at 0, it made an ISS in the upper
    half of sequence space look "below recover" and refused every fast retransmit until a timeout."""
    local_port = 4000
    base = initial_sequence_number(SECRET, LOCAL, local_port, PEER, 5000, 0.0)
    h = Harness(start=((0xC0000000 - base) % (1 << 32)) / 250_000, delayed_ack=False, sack=sack)
    conn = h.layer.connect((LOCAL, local_port), (PEER, 5000), h.now)
    assert conn.tcb.iss >= 1 << 31
    h.peer.local_port = local_port
    syn = h.peer.expect(flags="S")
    h.advance(0.1)
    h.peer.send(flags="SA", ack=syn.seq + 1, mss=1000, sack_perm=sack)
    h.peer.expect(flags="A")
    grow_cwnd(h, conn, 8)
    conn.send(b"".join(bytes([97 + i]) * 1000 for i in range(8)), now=h.now)
    segs = h.drain()
    una = segs[0].seq
    for _ in range(3):
        h.peer.ack(ack=una)
    h.peer.expect(flags="A", seq=una, payload=segs[0].payload)
    info = conn.info()
    assert info.fast_retransmits == 1 and info.in_recovery and info.timeouts == 0


def test_newreno_partial_ack_retransmits_next_hole():
    h, conn = established(rtt=0.1)
    grow_cwnd(h, conn, 8)
    conn.send(b"".join(bytes([97 + i]) * 1000 for i in range(6)), now=h.now)
    segs = h.drain()
    una = segs[0].seq
    for _ in range(3):  # segments 1 and 3 were lost
        h.peer.ack(ack=una)
    h.peer.expect(flags="A", seq=una, payload=segs[0].payload)
    h.peer.ack(ack=segs[2].seq)  # partial ACK: covers segments 1-2 only
    h.peer.expect(flags="A", seq=segs[2].seq, payload=segs[2].payload)  # retransmitted at once
    assert conn.info().in_recovery and h.stats["tcp.partial_acks"] == 1
    h.peer.ack(ack=segs[-1].seq + 1000)
    assert not conn.info().in_recovery
    assert conn.info().retransmits == 2 and conn.info().timeouts == 0


def test_duplicate_acks_need_no_data_and_same_window():
    h, conn = established(rtt=0.1)
    grow_cwnd(h, conn, 8)
    conn.send(b"z" * 5000, now=h.now)
    segs = h.drain()
    una = segs[0].seq
    h.peer.ack(ack=una, win=60000)  # window changed: not a duplicate (RFC 5681 section 2)
    h.peer.send(flags="PA", ack=una, payload=b"d", win=60000)  # carries data: not a duplicate
    h.peer.expect(flags="A")
    h.peer.ack(ack=una, win=60000)
    h.peer.ack(ack=una, win=60000)
    h.peer.expect_nothing()
    assert conn.info().dup_acks == 2


@pytest.mark.parametrize("layer,conn_opts,cls,ssthresh", [
    ({}, {}, Cubic, 2800),  # the default, as Linux's: RFC 9438 4.6, 0.7 of the 4 segments in flight
    ({"congestion": "newreno"}, {}, NewReno, 2000),  # layer-wide: RFC 5681 (4), half of them
    ({}, {"congestion": "newreno"}, NewReno, 2000),  # per connection, as setsockopt(TCP_CONGESTION)
])
def test_default_congestion_control_is_cubic_and_newreno_stays_selectable(layer, conn_opts, cls, ssthresh):
    assert TcpConfig().congestion == "cubic"
    h = Harness(delayed_ack=False, **layer)
    conn = h.layer.connect(None, (h.peer.addr, h.peer.port), h.now, **conn_opts)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S")
    h.advance(0.1)
    h.peer.send(flags="SA", ack=syn.seq + 1, mss=1000)
    h.peer.expect(flags="A")
    assert type(conn.sender.cc) is cls and conn.info().congestion == cls.name
    conn.send(b"".join(bytes([65 + i]) * 1000 for i in range(4)), now=h.now)
    first = h.drain()[0]  # IW: 4 segments of 1000 bytes, none acknowledged
    h.fire_next()  # RTO: the algorithm's decrease from FlightSize, cwnd = the loss window
    h.peer.expect(flags="A", seq=first.seq, payload=first.payload)
    assert (conn.sender.cc.ssthresh, conn.sender.cc.window) == (ssthresh, 1000)


def test_switching_congestion_control_on_a_live_connection_keeps_window_and_recovery():
    h, conn = established(rtt=0.1, congestion="newreno")  # explicitly NewReno: the switch is to CUBIC
    grow_cwnd(h, conn, 8)
    conn.send(b"".join(bytes([97 + i]) * 1000 for i in range(8)), now=h.now)
    segs = h.drain()
    una = segs[0].seq
    for _ in range(3):
        h.peer.ack(ack=una)
    h.peer.expect(flags="A", seq=una)
    before = conn.info()
    assert before.in_recovery and before.congestion == "newreno"
    conn.configure(congestion="cubic")
    cc = conn.sender.cc
    after = conn.info()
    assert after.congestion == "cubic" and type(cc).__name__ == "Cubic"
    assert (after.cwnd, after.ssthresh, after.in_recovery) == (before.cwnd, before.ssthresh, True)
    conn.configure(congestion="CUBIC")
    assert conn.sender.cc is cc  # the same algorithm: nothing rebuilt
    h.peer.ack(ack=segs[-1].seq + 1000)  # the full ACK ends recovery under the new algorithm
    info = conn.info()
    assert not info.in_recovery and info.cwnd == min(4000, 1000 + 1000) and info.congestion == "cubic"
