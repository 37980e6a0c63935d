"""RACK-TLP (RFC 8985), PRR (RFC 6937), D-SACK (RFC 2883) with undo (RFC 3708, Eifel RFC 3522) and
F-RTO (RFC 5682) against a scripted receiver on the manual clock.

``Wire`` stands between the engine and a minimal SACK receiver written here:
every data segment the engine emits reaches the receiver ``rtt / 2`` later
unless the test drops that transmission (by segment index and transmission
number); the receiver ACKs each arrival at once (SACK blocks, the most recent
first, a D-SACK block first for duplicates) and the ACK reaches the engine
``rtt / 2`` later. Timers fire at their own deadlines in between.
"""

from __future__ import annotations

import pytest

from tests.tcp.harness import Harness
from ustack.transport.tcp.prr import Prr
from ustack.transport.tcp.seq import seq_add, seq_diff
from ustack.wire.tcp import PSH

MSS = 1000
RTT = 0.01


class Wire:
    def __init__(self, h: Harness, conn, base: int, rtt: float = RTT, delays=None, drops=(), ts=False,
                 ack_stall: float = 0.0):
        self.h = h
        self.conn = conn
        self.base = base  # sequence number of segment index 0
        self.rtt = rtt
        self.delays = dict(delays or {})  # (index, transmission) -> extra one-way delay
        self.drops = set(drops)  # (index, transmission) not delivered
        self.ts = ts
        self.ack_stall = ack_stall  # ACKs the receiver sends before this time arrive only then
        self.sent: dict = {}  # index -> transmissions so far
        self.log: list = []  # (time, index, transmission) of every data segment the engine sent
        self.pushed: list = []  # (index, transmission) of the segments sent with PSH
        self.events: list = []  # (time, kind, payload)
        self.rcv_nxt = base
        self.ooo: list = []  # [start, end] received above rcv_nxt, most recent first
        self.received = bytearray()

    def collect(self) -> None:
        h = self.h
        for seg in h.drain():
            if not seg.payload:
                continue
            idx = seq_diff(seg.seq, self.base) // MSS
            n = self.sent[idx] = self.sent.get(idx, 0) + 1
            self.log.append((h.now, idx, n))
            if seg.hdr.flags & PSH:
                self.pushed.append((idx, n))
            if (idx, n) in self.drops:
                continue
            when = h.now + self.rtt / 2 + self.delays.get((idx, n), 0.0)
            self.events.append((when, "data", (seg.seq, bytes(seg.payload), seg.hdr.timestamps)))

    def arrive(self, seq: int, payload: bytes, ts) -> None:
        end = seq_add(seq, len(payload))
        dsack = None
        if seq_diff(end, self.rcv_nxt) <= 0 or any(seq_diff(seq, s) >= 0 and seq_diff(e, end) >= 0 for s, e, _ in self.ooo):
            dsack = (seq, end)
        elif seq_diff(seq, self.rcv_nxt) <= 0:
            self.received += payload[seq_diff(self.rcv_nxt, seq):]
            self.rcv_nxt = end
            moved = True
            while moved:
                moved = False
                for r in list(self.ooo):
                    if seq_diff(r[0], self.rcv_nxt) <= 0:
                        self.ooo.remove(r)
                        if seq_diff(r[1], self.rcv_nxt) > 0:
                            self.received += r[2][seq_diff(self.rcv_nxt, r[0]):]
                            self.rcv_nxt = r[1]
                        moved = True
        else:
            self.ooo.insert(0, [seq, end, payload])
        blocks = ([dsack] if dsack else []) + [(s, e) for s, e, _ in self.ooo]
        tsopt = (7000, ts[0]) if self.ts and ts else None
        when = max(self.h.now + self.rtt / 2, self.ack_stall)
        self.events.append((when, "ack", (self.rcv_nxt, tuple(blocks[:3]), tsopt)))

    def run(self, until: float) -> None:
        h = self.h
        self.collect()
        while True:
            nd = h.timers.next_deadline()
            ev = min(self.events, default=None, key=lambda e: e[0])
            t = min(x for x in (nd, ev[0] if ev else None) if x is not None) if (nd or ev) else None
            if t is None or t > until:
                break
            h.clock.set(max(t, h.now))
            if ev is not None and ev[0] <= h.now:
                self.events.remove(ev)
                if ev[1] == "data":
                    self.arrive(*ev[2])
                else:
                    ack, blocks, tsopt = ev[2]
                    h.peer.send(flags="A", ack=ack, sack=blocks, ts=tsopt if tsopt else False, advance=False)
            else:
                h.timers.run(h.now)
                h.layer.flush(h.now)
            self.collect()

    def retransmissions(self) -> list:
        return [(idx, n) for _, idx, n in self.log if n > 1]


def established(ts: bool = False, cwnd_segs: int = 10, recovery: str = "rack", **cfg):
    """A RACK (or ``recovery``) connection, SACK on, cwnd grown to ``cwnd_segs``, an RTT estimate of ``RTT``."""
    h = Harness(delayed_ack=False, sack=True, timestamps=ts, loss_recovery=recovery, **cfg)
    conn = h.layer.connect(None, (h.peer.addr, h.peer.port), h.now)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S")
    h.advance(RTT)
    opts = dict(ts=(h.peer.ts_clock, syn.hdr.timestamps[0])) if ts else {}
    h.peer.send(flags="SA", ack=syn.seq + 1, mss=MSS + (12 if ts else 0), sack_perm=True, **opts)
    h.peer.use_ts = ts
    h.peer.expect(flags="A")
    while conn.sender.cc.window < cwnd_segs * MSS:
        conn.send(b"g" * MSS, now=h.now)
        h.drain()
        h.advance(RTT)
        h.peer.ack()
    h.drain()
    assert conn.info().loss_recovery == recovery
    return h, conn


def payload(n: int) -> bytes:
    return b"".join(bytes([65 + i % 26]) * MSS for i in range(n))


def test_recover_starts_at_the_iss():
    """RFC 6582 3.2 step 1: "recover" is the ISS, for every recovery."""
    for recovery, sack in (("rack", True), ("rfc6675", True), ("newreno", True), ("rack", False)):
        h = Harness(sack=sack, loss_recovery=recovery)
        conn = h.open_active(peer_options={"sack_perm": sack})
        assert conn.sender.recovery.recover == conn.tcb.iss
        assert conn.info().loss_recovery == (recovery if sack else "newreno")


def test_lost_retransmission_is_detected_without_a_timeout():
    """RFC 8985 6.2: a retransmission is one more transmission; SACKs of later ones show it lost."""
    h, conn = established()
    data = payload(30)
    conn.send(data, now=h.now)
    base = conn.tcb.snd_una
    wire = Wire(h, conn, base, drops={(2, 1), (2, 2)})  # segment 2 and its first retransmission are lost
    wire.run(until=h.now + 0.15)  # well below the 200 ms minimum RTO
    assert bytes(wire.received) == data
    assert wire.sent[2] == 3 and wire.retransmissions() == [(2, 2), (2, 3)]
    info = conn.info()
    assert info.timeouts == 0 and info.tlps == 0 and info.lost == 2 and info.fast_retransmits == 1
    # the second retransmission went once RACK.rtt passed after the first, at a SACK of later data
    (t2,) = [t for t, i, n in wire.log if (i, n) == (2, 2)]
    (t3,) = [t for t, i, n in wire.log if (i, n) == (2, 3)]
    assert RTT <= t3 - t2 < 2 * RTT


def test_tail_loss_is_recovered_by_a_probe():
    """RFC 8985 7: the last two segments of a flight are lost; the PTO (2 SRTT) retransmits the last,
    its SACK shows the other lost, and RACK recovers it, all without an RTO."""
    h, conn = established()
    data = payload(10)
    conn.send(data, now=h.now)
    start = h.now
    wire = Wire(h, conn, conn.tcb.snd_una, drops={(8, 1), (9, 1)})
    wire.run(until=h.now + 0.15)
    assert bytes(wire.received) == data
    info = conn.info()
    assert info.tlps == 1 and info.timeouts == 0
    assert wire.retransmissions() == [(9, 2), (8, 2)]  # the probe (the last segment), then the hole
    (probe_at,) = [t for t, i, n in wire.log if (i, n) == (9, 2)]
    srtt = conn.sender.rtt.srtt
    assert probe_at - start == pytest.approx(RTT + 2 * srtt, abs=1e-3)  # last ACK + PTO
    assert conn.tcb.snd_una == seq_add(wire.base, len(data))


def test_tail_probe_that_was_not_needed_keeps_the_window():
    """RFC 8985 7.4: the probe's D-SACK shows nothing was lost: no reduction."""
    h, conn = established()
    cwnd = conn.sender.cc.window
    conn.send(payload(4), now=h.now)
    # segments 2 and 3 are 25 ms late: the PTO (20 ms after the ACK of 1) fires first and resends 3
    wire = Wire(h, conn, conn.tcb.snd_una, delays={(2, 1): 0.025, (3, 1): 0.025})
    wire.run(until=h.now + 0.15)
    info = conn.info()
    assert info.tlps == 1 and info.timeouts == 0 and info.dsacks == 1
    assert wire.retransmissions() == [(3, 2)]
    assert conn.sender.cc.window >= cwnd and not conn.sender.recovery.in_recovery


def test_spurious_fast_retransmit_is_undone_by_dsack():
    """RFC 2883 / RFC 3708: reordering makes a segment look lost; the D-SACK of its retransmission
    gives the window back and RACK learns the path reorders."""
    h, conn = established()
    cwnd, ssthresh = conn.sender.cc.window, conn.sender.cc.ssthresh
    data = payload(10)
    conn.send(data, now=h.now)
    wire = Wire(h, conn, conn.tcb.snd_una, delays={(0, 1): 0.004})  # segment 0 arrives 4 ms late
    wire.run(until=h.now + 0.1)
    assert bytes(wire.received) == data
    info = conn.info()
    assert wire.retransmissions() == [(0, 2)] and info.fast_retransmits == 1
    assert info.dsacks == 1 and info.spurious_undone == 1 and info.reordering == 1
    assert conn.sender.cc.window >= cwnd and conn.sender.cc.ssthresh == ssthresh
    assert conn.sender.recovery.reo_wnd_mult == 2  # RFC 8985 6.2 step 4: a D-SACK round widens reo_wnd


def test_reordering_within_the_window_retransmits_nothing():
    """Once reordering is seen, reo_wnd (min_RTT / 4) absorbs a 2 ms late segment."""
    h, conn = established()
    conn.sender.recovery.reordering_seen = True
    data = payload(10)
    conn.send(data, now=h.now)
    wire = Wire(h, conn, conn.tcb.snd_una, delays={(3, 1): 0.002})
    wire.run(until=h.now + 0.1)
    assert bytes(wire.received) == data and wire.retransmissions() == []
    assert conn.info().fast_retransmits == 0


def test_spurious_timeout_is_undone_by_frto():
    """RFC 5682 2.1 (no timestamps): the RTO resends the first segment only; the first ACK brings two
    new segments, the second ACK acknowledges data never retransmitted: the timeout was spurious."""
    h, conn = established()
    cwnd = conn.sender.cc.window
    data = payload(20)
    conn.send(data, now=h.now)
    # the ACK path stalls for 300 ms (beyond the 200 ms RTO), then all the ACKs arrive
    wire = Wire(h, conn, conn.tcb.snd_una, ack_stall=h.now + 0.3)
    wire.run(until=h.now + 0.45)
    info = conn.info()
    assert info.timeouts == 1 and info.spurious_undone == 1
    assert wire.retransmissions() == [(0, 2)]  # no go-back-N
    assert conn.sender.cc.window >= cwnd
    assert (10, 1) in wire.pushed  # the tail probe (new data, 20 ms on) carried PSH: ACKed at once
    wire.run(until=h.now + 0.5)
    assert bytes(wire.received) == data


def test_spurious_timeout_is_undone_by_timestamps():
    """Eifel (RFC 3522): the first ACK after the RTO echoes a TSval older than the retransmission."""
    h, conn = established(ts=True)
    cwnd = conn.sender.cc.window
    data = payload(20)
    conn.send(data, now=h.now)
    wire = Wire(h, conn, conn.tcb.snd_una, ack_stall=h.now + 0.3, ts=True)
    wire.run(until=h.now + 0.45)
    info = conn.info()
    assert info.timeouts == 1 and info.spurious_undone == 1
    assert wire.retransmissions() == [(0, 2)]
    assert conn.sender.cc.window >= cwnd
    wire.run(until=h.now + 0.5)
    assert bytes(wire.received) == data


def test_genuine_timeout_is_not_undone():
    """The whole flight and the probe are lost: F-RTO's second ACK is a duplicate (a SACK of a new
    segment), recovery is conventional."""
    h, conn = established()
    data = payload(20)
    conn.send(data, now=h.now)
    wire = Wire(h, conn, conn.tcb.snd_una, drops={(i, 1) for i in range(11)})
    wire.run(until=h.now + 1.0)
    assert bytes(wire.received) == data
    info = conn.info()
    assert info.timeouts == 1 and info.spurious_undone == 0
    assert conn.sender.cc.ssthresh < 10 * MSS


def test_prr_sends_one_segment_per_two_acks_down_to_ssthresh():
    """RFC 6937 section 3 and its example: one loss in a flight of 20, ssthresh 10 (Reno's half): on
    each duplicate ACK (one segment delivered) PRR sends ceil(delivered * 10 / 20) - out, so a segment
    on every other ACK, the retransmission first, and pipe ends at ssthresh."""
    prr = Prr()
    prr.start(20 * MSS)
    pipe = 19 * MSS  # the lost segment is not in the pipe
    schedule = []
    for _ in range(19):
        pipe -= MSS  # the segment this ACK reports left the network
        n = prr.sndcnt(MSS, pipe, 10 * MSS, MSS)
        schedule.append(n // MSS)
        prr.sent(n)
        pipe += n
    # worked by hand from section 3.1: proportional while pipe > ssthresh, then PRR-SSRB (pipe
    # reaches ssthresh after 16 ACKs: nothing on the 17th, one each on the last two)
    assert schedule == [1, 0] * 8 + [0, 1, 1]
    assert sum(schedule) == 10 and pipe == 10 * MSS


def test_prr_slow_start_reduction_bound():
    """RFC 6937 3.1 PRR-SSRB: when pipe falls below ssthresh (a burst of losses) the sender catches up
    by at most what was delivered plus one segment per ACK, never beyond ssthresh."""
    prr = Prr()
    prr.start(20 * MSS)
    assert prr.sndcnt(MSS, 4 * MSS, 10 * MSS, MSS) == 2 * MSS  # delivered 1 + 1
    prr.sent(2 * MSS)
    assert prr.sndcnt(3 * MSS, 6 * MSS, 10 * MSS, MSS) == 4 * MSS  # max(4 - 2, 3) + 1, = ssthresh - pipe
    prr.sent(4 * MSS)
    assert prr.sndcnt(MSS, 9 * MSS, 10 * MSS, MSS) == MSS  # ssthresh - pipe binds


def test_duplicate_data_is_reported_by_a_dsack():
    """RFC 2883 4: data received twice is reported in the first SACK block of the next ACK, sent at
    once and only once: old data, old data overlapping new, and out-of-order data held already."""
    h = Harness(delayed_ack=False, sack=True)
    conn = h.open_active(peer_options={"sack_perm": True})
    assert conn.tcb.sack_ok
    base = h.peer.snd_nxt
    h.peer.send(flags="A", payload=b"a" * 100)
    h.peer.expect(flags="A", ack=base + 100, sack_blocks=())
    h.peer.send(flags="A", seq=base, payload=b"a" * 100, advance=False)  # entirely old
    h.peer.expect(flags="A", ack=base + 100, sack_blocks=((base, base + 100),))
    assert h.stats["drop.tcp.unacceptable"] == 1 and h.stats["tcp.dsack_sent"] == 1
    h.peer.send(flags="A", seq=base + 300, payload=b"d" * 100, advance=False)  # out of order
    h.peer.expect(flags="A", ack=base + 100, sack_blocks=((base + 300, base + 400),))
    h.peer.send(flags="A", seq=base + 300, payload=b"d" * 100, advance=False)  # the same again
    h.peer.expect(flags="A", ack=base + 100, sack_blocks=((base + 300, base + 400), (base + 300, base + 400)))
    h.peer.send(flags="A", seq=base + 50, payload=b"a" * 50 + b"b" * 100, advance=False)  # 50 old, 100 new
    h.peer.expect(flags="A", ack=base + 200, sack_blocks=((base + 50, base + 100), (base + 300, base + 400)))
    h.peer.snd_nxt = base + 200
    h.peer.send(flags="A", payload=b"e" * 100)  # in order: the ACK carries no D-SACK any more
    h.peer.expect(flags="A", ack=base + 300 + 100, sack_blocks=())
    assert conn.recv(1000) == b"a" * 100 + b"b" * 100 + b"e" * 100 + b"d" * 100


def test_recovery_ends_with_cwnd_at_ssthresh():
    """RFC 9937 (PRR): the full ACK ends recovery with cwnd = ssthresh, even when it leaves nothing in
    flight (RFC 6582's min(ssthresh, FlightSize + SMSS) then made cwnd 2 SMSS: a receiver that ACKs
    a whole flight at once, as Linux does when its reader lags, collapsed the window every time)."""
    h, conn = established()
    data = payload(10)
    conn.send(data, now=h.now)
    wire = Wire(h, conn, conn.tcb.snd_una, drops={(3, 1)})
    wire.run(until=h.now + 0.15)
    assert bytes(wire.received) == data and wire.retransmissions() == [(3, 2)]
    cc = conn.sender.cc
    assert conn.info().fast_retransmits == 1 and not conn.sender.recovery.in_recovery
    assert conn.tcb.snd_una == conn.tcb.snd_max  # the full ACK left nothing in flight
    # CUBIC's (the default) 0.7 of the FlightSize when the loss was found (RFC 9438 4.6; SND.MAX -
    # SND.UNA: 7 segments, three SACKed)
    assert conn.info().congestion == "cubic"
    assert cc.ssthresh == 7 * MSS * 7 // 10 and cc.window == cc.ssthresh


def test_tail_loss_repaired_by_a_probe_reduces_the_window_it_was_sent_with():
    """RFC 8985 7.4.2: a probe that repaired a tail loss reduces the window as a fast retransmit
    does, from the window that lost its tail (cwnd 19 when the probe left -> ssthresh 13.3 with
    CUBIC's beta 0.7, the default), not from what is in flight when the ACK beyond the probe shows
    the repair (one segment: 2 SMSS)."""
    h, conn = established()
    assert conn.sender.cc.window == 10 * MSS
    data = payload(10)
    conn.send(data, now=h.now)
    wire = Wire(h, conn, conn.tcb.snd_una, drops={(9, 1)})  # the last segment: no SACK can show it
    wire.run(until=h.now + 0.3)  # the PTO of a lone segment waits out a delayed ACK (RFC 8985 7.2)
    assert wire.retransmissions() == [(9, 2)] and conn.info().tlps == 1
    more = payload(2)
    conn.send(more, now=h.now)  # the ACK beyond the probe shows the repair
    wire.run(until=h.now + 0.1)
    assert bytes(wire.received) == data + more
    info = conn.info()
    assert info.timeouts == 0 and info.fast_retransmits == 0 and h.stats["tcp.tlp_recoveries"] == 1
    assert info.congestion == "cubic"
    assert conn.sender.cc.ssthresh == 19 * MSS * 7 // 10  # slow start: 10 + one per ACK of segments 0-8


def test_out_of_order_acks_beyond_dupthresh_are_compressed_to_one_per_round():
    """RFC 5681 4.2 ACKs each out-of-order segment at once; with SACK, once DupThresh (3) ACKs went for
    one RCV.NXT, the rest of a poll round's segments above the hole share one ACK at the round's end
    whose SACK block covers them all (as Linux's tcp_comp_sack). A new RCV.NXT starts the count again."""
    from unittest import mock

    from ustack.transport.tcp.layer import TcpLayer

    h = Harness(delayed_ack=False, sack=True)
    h.open_active(peer_options={"sack_perm": True})
    base = h.peer.snd_nxt
    with mock.patch.object(TcpLayer, "flush", lambda self, now: None):  # one round: the end comes later
        for i in range(1, 7):  # segment 0 is lost; 1-6 arrive in one burst
            h.peer.send(flags="A", seq=base + 100 * i, payload=b"x" * 100, advance=False)
    for i in range(1, 4):
        h.peer.expect(flags="A", ack=base, sack_blocks=((base + 100, base + 100 * (i + 1)),))
    h.peer.expect_nothing()
    h.layer.flush(h.now)  # the round ends
    h.peer.expect(flags="A", ack=base, sack_blocks=((base + 100, base + 700),))
    h.peer.expect_nothing()
    assert h.stats["tcp.sack_compressed"] == 3
    h.peer.send(flags="A", seq=base, payload=b"x" * 100, advance=False)  # the hole fills: ACK at once
    h.peer.expect(flags="A", ack=base + 700, sack_blocks=())
    h.peer.send(flags="A", seq=base + 800, payload=b"x" * 100, advance=False)  # a new hole, a new count
    h.peer.expect(flags="A", ack=base + 700, sack_blocks=((base + 800, base + 900),))


def test_sack_blocks_repeat_the_most_recently_changed_runs():
    """RFC 2018 4: the block of the segment that triggered the ACK first, then the most recently
    reported ones. With five runs above a hole the ACK for the fifth reports the fifth, fourth, third
    and second, latest first (in sequence order after the first, as before, it reported the lowest
    runs again and again and never the fourth: the sender's RACK took its segments for lost); a run
    that changes again moves to the front."""
    h = Harness(delayed_ack=False, sack=True)
    h.open_active(peer_options={"sack_perm": True})
    base = h.peer.snd_nxt
    for k in range(1, 6):  # runs at 200, 400, ..., 1000 above the lost segment at 0
        h.peer.send(flags="A", seq=base + 200 * k, payload=b"x" * 100, advance=False)
        h.peer.expect(flags="A", ack=base)
    h.peer.send(flags="A", seq=base + 1100, payload=b"x" * 100, advance=False)  # the last run grows
    h.peer.expect(flags="A", ack=base, sack_blocks=((base + 1000, base + 1200), (base + 800, base + 900),
                                                    (base + 600, base + 700), (base + 400, base + 500)))
    h.peer.send(flags="A", seq=base + 300, payload=b"x" * 100, advance=False)  # joins 200 and 400
    h.peer.expect(flags="A", ack=base, sack_blocks=((base + 200, base + 500), (base + 1000, base + 1200),
                                                    (base + 800, base + 900), (base + 600, base + 700)))


def test_a_round_that_changes_more_runs_than_one_ack_reports_sends_more_acks():
    """A compressed ACK (one per poll round) carries four SACK blocks (three with timestamps); when
    more runs changed since the last ACK, the older changes go first in ACKs of their own, so that
    every run is reported once: before, a run extended early in a round whose later segments opened
    three new runs was never reported, and the kernel's RACK retransmitted all its segments."""
    from unittest import mock

    from ustack.transport.tcp.layer import TcpLayer

    h = Harness(delayed_ack=False, sack=True)
    conn = h.open_active(peer_options={"sack_perm": True})
    assert not conn.tcb.ts_ok  # four blocks an ACK
    base = h.peer.snd_nxt
    with mock.patch.object(TcpLayer, "flush", lambda self, now: None):  # one round
        for k in range(1, 10):  # the lost segment at 0; runs at 200, ..., 1800
            h.peer.send(flags="A", seq=base + 200 * k, payload=b"x" * 100, advance=False)
    for k in range(1, 4):  # the first DupThresh ACKs go at once
        h.peer.expect(flags="A", ack=base, sack_blocks=tuple((base + 200 * j, base + 200 * j + 100)
                                                             for j in range(k, 0, -1)))
    h.peer.expect_nothing()
    h.layer.flush(h.now)  # the round ends: six runs changed since the last ACK
    h.peer.expect(flags="A", ack=base, sack_blocks=((base + 1000, base + 1100), (base + 800, base + 900)))
    h.peer.expect(flags="A", ack=base, sack_blocks=tuple((base + 200 * j, base + 200 * j + 100)
                                                         for j in (9, 8, 7, 6)))
    h.peer.expect_nothing()
    assert h.stats["tcp.sack_extra_acks"] == 1
    h.peer.send(flags="A", seq=base + 1900, payload=b"x" * 100, advance=False)  # one change: one ACK
    h.peer.expect(flags="A", ack=base, sack_blocks=((base + 1800, base + 2000),) + tuple(
        (base + 200 * j, base + 200 * j + 100) for j in (8, 7, 6)))
    h.peer.expect_nothing()


def test_a_filled_gap_is_acked_twice_at_the_rounds_end_with_the_window_the_read_opened():
    """The segment that fills a gap releases all the data held above it at once; its ACK (RFC 5681
    4.2: at once) leaves at the end of the poll round, after the application read, and offers the
    whole buffer again: sent before the read it offered what was left (here 0 of 4000 bytes), and
    a lost window update after the read stalled the sender until its persist timer. It goes twice:
    alone and lost, it left the sender with a repaired hole it did not know of."""
    h = Harness(delayed_ack=True, sack=True, rcvbuf=4000)
    conn = h.open_active(peer_options={"sack_perm": True})
    base = h.peer.snd_nxt
    h.peer.send(flags="A", seq=base + 1000, payload=b"b" * 3000, advance=False)  # above a hole
    h.peer.expect(flags="A", ack=base, sack_blocks=((base + 1000, base + 4000),))
    h.layer.in_round = True  # a poll round delivers (Stack.poll)
    h.peer.send(flags="A", seq=base, payload=b"a" * 1000, advance=False)  # fills it
    h.peer.expect_nothing()
    assert conn.recv(8000) == b"a" * 1000 + b"b" * 3000  # the application reads in the round
    h.layer.in_round = False
    h.layer.flush(h.now)  # the round ends
    for _ in range(2):  # twice: this ACK replaces two (at once, then the window update)
        h.peer.expect(flags="A", ack=base + 4000, win=4000, sack_blocks=())
    h.peer.expect_nothing()
    assert h.stats["tcp.gap_ack_repeats"] == 1
    # Outside a poll round (the socket API's own calls) the ACK goes at once, as before.
    h.peer.send(flags="A", seq=base + 5000, payload=b"d" * 1000, advance=False)
    h.peer.expect(flags="A", ack=base + 4000)
    h.peer.send(flags="A", seq=base + 4000, payload=b"c" * 1000, advance=False)
    h.peer.expect(flags="A", ack=base + 6000, win=2000)


def test_out_of_order_acks_are_never_compressed_without_sack():
    """Without SACK the sender counts duplicate ACKs: each out-of-order segment is ACKed at once."""
    from unittest import mock

    from ustack.transport.tcp.layer import TcpLayer

    h = Harness(delayed_ack=False, sack=False)
    h.open_active()
    base = h.peer.snd_nxt
    with mock.patch.object(TcpLayer, "flush", lambda self, now: None):
        for i in range(1, 7):
            h.peer.send(flags="A", seq=base + 100 * i, payload=b"x" * 100, advance=False)
    for _ in range(6):
        h.peer.expect(flags="A", ack=base)
    h.peer.expect_nothing()


def test_echoes_of_timestamps_from_before_a_timeout_are_no_rtt_samples():
    """The ACK path stalls past the RTO; the ACKs then echo TSvals from before the timeout: their
    "RTT" is the stall plus the wait, not the path's (Karn's rule for what the echo stands for). Taken,
    SRTT went from 10 ms to 76 ms here, and the PTO (2 SRTT) with it."""
    h, conn = established(ts=True)
    assert conn.sender.rtt.srtt == pytest.approx(RTT, abs=1e-3)
    conn.send(payload(20), now=h.now)
    wire = Wire(h, conn, conn.tcb.snd_una, ack_stall=h.now + 0.3, ts=True)
    wire.run(until=h.now + 0.45)
    assert conn.info().timeouts == 1 and conn.info().spurious_undone == 1
    assert conn.sender.rtt.srtt == pytest.approx(RTT, abs=2e-3)


def test_rfc6675_recovery_is_paced_by_prr_and_ends_at_ssthresh():
    """RFC 9937 for RFC 6675 recovery too: one loss in a flight of 20, plus the 2 segments of limited
    transmit (RFC 3042): RecoverFS 22, ssthresh 11. After the fast retransmit PRR sends new data in
    proportion to what is delivered, the first new segment once 5 segments are SACKed (ceil(3 * 11 /
    22) = 2 sent), where RFC 6675's cwnd - pipe waited for 12 (pipe = 22 - SACKed); recovery ends
    with cwnd = ssthresh."""
    from unittest import mock

    from ustack.transport.tcp.recovery import SackRecovery

    # explicitly NewReno: the PRR schedule below is worked by hand with its halving (ssthresh 11 of 22)
    h, conn = established(cwnd_segs=20, recovery="rfc6675", congestion="newreno")
    assert conn.sender.cc.window == 20 * MSS
    conn.sender.cc.ssthresh = 20 * MSS  # congestion avoidance from here: no growth during the test
    base = conn.tcb.snd_una
    seen = []
    on_send = SackRecovery.on_send

    def spy(self, seq, length, now):
        if self.in_recovery and seq_diff(seq, base) >= 20 * MSS and not seen:
            seen.append(self.board.sacked)  # SACKed bytes when recovery's first new segment left
        on_send(self, seq, length, now)

    with mock.patch.object(SackRecovery, "on_send", spy):
        data = payload(20)
        conn.send(data, now=h.now)
        wire = Wire(h, conn, base, drops={(0, 1)})
        h.advance(0)
        conn.send(payload(5), now=h.now)  # more to send while recovery runs
        wire.run(until=h.now + 0.15)
    assert wire.retransmissions()[0] == (0, 2) and conn.info().fast_retransmits == 1
    assert bytes(wire.received) == data + payload(5)
    assert seen == [5 * MSS]
    cc = conn.sender.cc
    assert not conn.sender.recovery.in_recovery and cc.ssthresh == 11 * MSS and cc.window == cc.ssthresh


def test_rfc6675_recovery_ends_with_cwnd_at_ssthresh_when_nothing_is_in_flight():
    """The full ACK acknowledges everything: RFC 6582's min(ssthresh, FlightSize + SMSS) gave 2 SMSS."""
    h, conn = established(cwnd_segs=20, recovery="rfc6675")
    conn.sender.cc.ssthresh = 20 * MSS
    data = payload(20)
    conn.send(data, now=h.now)
    wire = Wire(h, conn, conn.tcb.snd_una, drops={(0, 1)})
    wire.run(until=h.now + 0.15)
    assert bytes(wire.received) == data and conn.tcb.snd_una == conn.tcb.snd_max
    cc = conn.sender.cc
    assert conn.info().congestion == "cubic"  # the default: ssthresh 0.7 of the 20 in flight (RFC 9438 4.6)
    assert cc.ssthresh == 20 * MSS * 7 // 10 and cc.window == cc.ssthresh


@pytest.mark.parametrize("sack", [True, False])
def test_fin_arms_the_retransmission_timer_once(sack, monkeypatch):
    """A lone FIN arms the sender's timer once: RACK-TLP's probe timeout (RFC 8985 7.2, the earlier of
    the PTO and the RTO) without an RTO arm before it; NewReno (no SACK) the RTO (RFC 6298 5.1)."""
    from ustack import timers as timers_mod
    from ustack.transport.tcp import rack

    h = Harness(delayed_ack=False, sack=sack)
    conn = h.open_active(peer_options={"sack_perm": True} if sack else None)
    sender = conn.sender
    arms = []
    arm = timers_mod.Timer.arm

    def counting(timer, deadline):
        if timer is sender.rtx_timer:
            arms.append(deadline)
        arm(timer, deadline)

    monkeypatch.setattr(timers_mod.Timer, "arm", counting)
    now = h.now
    conn.close(now=now)
    h.layer.flush(now)
    h.peer.expect(flags="FA")
    rto = sender.rtt.rto
    if sack:
        srtt = sender.rtt.srtt
        pto = max((2 * srtt if srtt is not None else 1.0) + rack.WC_DEL_ACK, rack.PTO_MIN)
        assert arms == [min(now + pto, now + rto)] and sender.rtx_kind == rack.PTO
    else:
        assert arms == [now + rto] and sender.rtx_kind == rack.RTO
    assert sender.rtx_timer.deadline == arms[0]
