"""RACK-TLP loss detection (RFC 8985), the default recovery when SACK is negotiated.

``RackRecovery`` keeps one record per transmitted segment, ``[start, end,
xmit, flags]``: unwrapped sequence positions (so comparisons need no
modular arithmetic), the time of the latest (re)transmission, and SACKED /
LOST / RETRANS flags. Records are sorted by ``start``; a retransmission
updates its record in place. The sender reports every transmission
(``on_send``) and every ACK (``on_ack``, then ``after_ack``).

On each ACK (RFC 8985 section 6.2):

1. every segment newly acknowledged or SACKed updates RACK.xmit_ts /
   RACK.end_seq (the most recently *sent* delivered segment) and RACK.rtt,
   unless it was retransmitted and the ACK is for an earlier transmission
   (TSecr older than the retransmission, or an RTT below min_RTT);
2. a segment delivered below RACK.fack that was never retransmitted means
   the path reorders (RACK.reordering_seen);
3. the reordering window: 0 before any reordering was seen when in
   recovery or DupThresh segments are SACKed, else min(reo_wnd_mult *
   min_RTT / 4, SRTT); each D-SACK round raises reo_wnd_mult, 16
   recoveries without one reset it (6.2 step 4);
4. a segment sent before RACK.xmit_ts and not delivered is lost once
   RACK.rtt + reo_wnd have passed since its transmission; otherwise the
   reorder timer is set for the earliest such moment. A retransmission is
   just another transmission, so a lost retransmission is detected the
   same way, without a timeout.

Lost segments start fast recovery (congestion controller's
``on_congestion``); what is sent on each ACK during recovery is PRR's
(``prr``, RFC 6937): lost segments first, then new data.

Tail loss probe (section 7): with no probe outstanding, outside recovery
with nothing SACKed, the sender's one timer runs as the PTO (2 SRTT, plus
the worst-case delayed ACK when a single segment is in flight, never past
the RTO). On expiry one new segment is sent, or the last one again; the
ACK beyond it shows the loss repaired (the window is reduced as for a fast
retransmit), a D-SACK, its timestamp or a duplicate ACK that nothing was
lost. Unlike Linux (which probes only outside recovery) the PTO also runs
during fast recovery, sending new data or the highest unSACKed segment:
with the small windows of a lossy path, a lost retransmission at the end
of a flight otherwise has no later segment whose SACK would reveal it and
waits for the RTO.

After a retransmission timeout every unSACKed segment is marked lost and
they are retransmitted in slow start (timeout recovery), SACKed ones are
not sent again. A spurious timeout is detected by timestamps (Eifel,
RFC 3522) or, without them, by F-RTO (RFC 5682 section 2: two new segments
instead of retransmissions after the first ACK; an ACK of data never
retransmitted then shows the timeout was spurious). D-SACKs (RFC 2883)
for every retransmission of a recovery, or an ACK echoing a timestamp from
before its first retransmission, show a fast retransmit was spurious
(RFC 3708): then the congestion window and threshold are restored as they
were before the reduction (``CongestionControl.restore``).
"""

from __future__ import annotations

from bisect import bisect_left
from operator import itemgetter
from typing import TYPE_CHECKING

from ustack.transport.tcp.prr import Prr
from ustack.transport.tcp.rtt import ts_clock
from ustack.transport.tcp.scoreboard import DUP_THRESH
from ustack.transport.tcp.seq import seq_add, seq_diff

if TYPE_CHECKING:
    from ustack.transport.tcp.recovery import RecoveryHost

# What the sender's one retransmission timer currently stands for.
RTO, REO, PTO = 0, 1, 2

SACKED, LOST, RETRANS = 1, 2, 4
WC_DEL_ACK = 0.2  # RFC 8985 7.2 WCDelAckT: the worst-case delayed ACK for a lone segment
PTO_MIN = 0.002  # floor of the probe timeout, so a zero SRTT cannot make it fire at once
REO_PERSIST = 16  # RFC 8985 6.2 step 4: recoveries a raised reo_wnd_mult lasts without new D-SACKs
_START = itemgetter(0)


class RackRecovery:
    """RFC 8985 RACK-TLP with PRR, D-SACK undo and F-RTO (see the module docstring)."""

    __slots__ = ("sender", "dupacks", "in_recovery", "in_loss", "recover", "inflation", "fast_retransmits",
                 "segs", "una", "una_seq", "sacked_bytes", "lost_bytes", "prr", "delivered", "dsack",
                 "rack_xmit", "rack_end", "rack_rtt", "min_rtt", "fack", "reordering_seen", "reo_wnd_mult",
                 "reo_wnd_persist", "dsack_round", "reo_deadline", "tlp_end", "tlp_retrans", "tlp_time", "tlp_flight",
                 "advanced", "undo_rto", "undo_snap", "undo_retrans", "undo_marker", "undo_until", "retrans_stamp", "frto", "frto_high",
                 "lost_segs", "tlps", "undos", "reorderings", "dsacks")

    name = "rack"
    arms_after_send = True  # arm_timer runs the sender's timer after new data (Sender.output)

    def __init__(self, sender: RecoveryHost, recover: int):
        self.sender = sender
        self.dupacks = 0
        self.in_recovery = False  # fast recovery
        self.in_loss = False  # timeout recovery (after an RTO)
        self.recover = recover  # RFC 6582 / RFC 6675 RecoveryPoint
        self.inflation = 0
        self.fast_retransmits = 0
        self.segs: list = []  # [start, end, xmit, flags], sorted by start (unwrapped positions)
        self.una = 0  # unwrapped position of SND.UNA ...
        self.una_seq = sender.tcb.snd_una  # ... and the sequence number it stands for
        self.sacked_bytes = 0
        self.lost_bytes = 0  # marked lost and not yet retransmitted
        self.prr = Prr()
        self.delivered = 0  # DeliveredData of the ACK in progress (RFC 6937)
        self.dsack = None  # the D-SACK range of the ACK in progress
        self.rack_xmit = -1.0  # RACK.xmit_ts
        self.rack_end = 0  # RACK.end_seq
        self.rack_rtt = 0.0  # RACK.rtt
        self.min_rtt = None  # RACK.min_RTT
        self.fack = 0  # RACK.fack
        self.reordering_seen = False
        self.reo_wnd_mult = 1
        self.reo_wnd_persist = 0
        self.dsack_round = None
        self.reo_deadline = None  # when the reorder timer must fire
        self.tlp_end = None  # TLP.end_seq: a probe is outstanding
        self.tlp_retrans = False  # TLP.is_retrans
        self.tlp_time = 0.0
        self.tlp_flight = 0  # max(FlightSize, cwnd) when the probe left: the flight whose tail was lost
        self.undo_snap = None  # the controller's state before the reduction (RFC 3708)
        self.undo_rto = False  # the episode began with a timeout (else with a fast retransmit)
        self.undo_retrans = 0  # retransmissions of the episode not yet shown spurious by a D-SACK
        self.undo_marker = None  # SND.UNA when the episode began (None: nothing to undo)
        self.undo_until = None  # a finished episode can still be undone until SND.UNA passes this
        self.retrans_stamp = None  # time of the episode's first retransmission (Eifel, RFC 3522)
        self.frto = 0  # F-RTO step (RFC 5682 2.1): 0 off, 1 after the RTO, 2 after the new segments
        self.frto_high = 0  # end of what the timeout retransmitted
        self.lost_segs = self.tlps = self.undos = self.reorderings = self.dsacks = 0
        self.advanced = False  # on_ack ran for the ACK in progress (SND.UNA moved)

    # -- positions ---------------------------------------------------------

    def _sync(self, now: float) -> None:
        """Follow SND.UNA when something else (the handshake) moved it."""
        una = self.sender.tcb.snd_una
        if una != self.una_seq:
            self._slide(una, now)

    def _pos(self, seq: int) -> int:
        return self.una + seq_diff(seq, self.una_seq)

    def _seq(self, pos: int) -> int:
        return seq_add(self.una_seq, pos - self.una)

    def _slide(self, ack: int, now: float) -> int:
        """SND.UNA moved to ``ack``: drop the records now acknowledged; return what they delivered."""
        new = self._pos(ack)
        self.una, self.una_seq = new, ack
        segs = self.segs
        k = 0
        delivered = 0
        plain = None  # the last delivered segment sent once and never SACKed: RACK needs only that one
        fack = self.fack
        for r in segs:
            if r[1] > new:
                break
            k += 1
            fl = r[3]
            if not fl:
                plain = r
                if r[1] < fack and not self.reordering_seen:
                    self._rack_update(r, now)  # delivered below RACK.fack: reordering
            elif fl & SACKED:
                self.sacked_bytes -= r[1] - r[0]
                delivered -= r[1] - r[0]
            else:
                if fl & LOST:
                    self.lost_bytes -= r[1] - r[0]
                self._rack_update(r, now)
        if plain is not None:
            self._rack_update(plain, now)  # the latest sent of them: RACK.xmit_ts, RACK.rtt, min_RTT
        if k:
            del segs[:k]
        return delivered

    # -- the Recovery interface -------------------------------------------

    def window(self, cwnd: int) -> int | None:
        if self.in_recovery or self.in_loss:
            return None  # recovery sends (PRR, or slow start over the lost segments)
        if self.dupacks:
            return cwnd + min(self.dupacks, 2) * self.sender.tcb.snd_mss  # RFC 3042 limited transmit
        return cwnd

    def on_send(self, seq: int, length: int, now: float) -> None:
        """``length`` sequence numbers from ``seq`` (data and FIN) were just sent."""
        if length <= 0:
            return
        self._sync(now)
        s = self._pos(seq)
        e = s + length
        segs = self.segs
        top = segs[-1][1] if segs else self.una
        if self.in_recovery:
            self.prr.sent(length)
        if s < top:
            i = bisect_left(segs, s, key=_START)
            if i and segs[i - 1][1] > s:
                i -= 1
            n = len(segs)
            undo = self.undo_marker is not None
            while i < n:
                r = segs[i]
                if r[0] >= e:
                    break
                fl = r[3]
                if fl & LOST:
                    self.lost_bytes -= r[1] - r[0]
                r[3] = (fl & ~LOST) | RETRANS
                r[2] = now
                if undo:
                    self.undo_retrans += 1
                    if self.retrans_stamp is None:
                        self.retrans_stamp = now
                i += 1
        if e > top:
            segs.append([max(s, top), e, now, 0])

    def on_ack(self, ack: int, advanced: int, acked: int, in_flight: int, now: float) -> bool:
        self.dupacks = 0
        self.advanced = True
        self.delivered = advanced + self._slide(ack, now)
        if self.undo_until is not None and self.una >= self.undo_until:
            self.undo_marker = self.undo_until = None  # the episode is over for good
        if not (self.in_recovery or self.in_loss):
            return False
        fast = self.in_recovery
        if self.in_loss and self._spurious_rto(advanced):
            return True
        if seq_diff(ack, self.recover) > 0:
            self._exit(in_flight, now, fast)
            return fast
        return fast  # fast recovery: PRR decides; timeout recovery: slow start

    def on_dup_ack(self, ack: int, in_flight: int, now: float) -> None:
        self.dupacks += 1
        # RFC 8985 section 3.4 keeps DupThresh as a complement: the third duplicate ACK marks the
        # first segment lost (for a peer that sends duplicate ACKs without SACK blocks), unless the
        # ACK does not cover "recover" (RFC 6582 3.2 step 2).
        if (self.dupacks == DUP_THRESH and not (self.in_recovery or self.in_loss or self.sacked_bytes)
                and self.segs and seq_diff(ack, self.recover) > 0):
            r = self.segs[0]
            if not r[3] & (SACKED | LOST):
                r[3] |= LOST
                self.lost_bytes += r[1] - r[0]
                self.lost_segs += 1

    def after_ack(self, ack: int, sack_blocks, now: float) -> None:
        sender = self.sender
        tcb = sender.tcb
        self.dsack = None
        advanced, self.advanced = self.advanced, False
        if sack_blocks:
            self._sack(sack_blocks, now)
        self._dsack_round()
        if self.tlp_end is not None:
            self._tlp_ack(now, advanced)
        if tcb.snd_max == tcb.snd_una:
            self.reo_deadline = None
            self.delivered = 0
            return
        if self.frto == 1:
            self._frto_first(advanced, now)
        elif self.frto == 2 and not advanced:
            self.frto = 0  # RFC 5682 2.1 step 3a: a duplicate ACK after the new segments
        if self.sacked_bytes or self.in_recovery or self.in_loss:
            self._detect_loss(now)
        if self.lost_bytes and not (self.in_recovery or self.in_loss):
            self._enter(now)
        if (self.in_recovery or self.in_loss) and self.frto != 2:
            self._send(now)
        self.delivered = 0

    def on_rto(self) -> None:
        """Kept for the Recovery interface: the timeout's work is in ``before_rto`` / ``rto_retransmit``."""

    def before_rto(self, now: float) -> None:
        """The retransmission timer expired; the controller has not reduced the window yet."""
        self.tlp_end = None
        self.reo_deadline = None
        if not ((self.in_recovery or self.in_loss) and self.undo_marker is not None):
            self._start_undo()
            self.undo_rto = True

    def rto_retransmit(self, now: float) -> bool:
        """Timeout recovery (RFC 8985 6.3): every unSACKed segment is lost; retransmit in slow start."""
        tcb = self.sender.tcb
        self._sync(now)
        again = self.in_loss  # a repeated timeout: F-RTO only on the first (RFC 5682 2.1)
        self.in_recovery = False
        self.in_loss = True
        self.dupacks = 0
        self.recover = seq_add(tcb.snd_max, -1)
        for r in self.segs:
            fl = r[3]
            if not fl & (SACKED | LOST):
                r[3] = fl | LOST
                self.lost_bytes += r[1] - r[0]
                self.lost_segs += 1
        # F-RTO (RFC 5682 2.1) when timestamps cannot tell a spurious timeout (Eifel, RFC 3522)
        self.frto = 0 if tcb.ts_ok or again else 1
        self._send(now)
        self.frto_high = self.segs[0][1] if self.segs else self.una
        return True

    # -- timers ------------------------------------------------------------

    def arm_timer(self, now: float) -> None:
        """Run the sender's timer as the reorder timer, the PTO or the RTO, whichever applies."""
        sender = self.sender
        tcb = sender.tcb
        if tcb.snd_max == tcb.snd_una:
            return
        timer = sender.rtx_timer
        if self.reo_deadline is not None:
            timer.arm(self.reo_deadline)
            sender.rtx_kind = REO
            return
        if self.tlp_end is None and not self.in_loss and (self.in_recovery or not self.sacked_bytes):
            rtt = sender.rtt
            srtt = rtt.srtt
            pto = 2 * srtt if srtt is not None else 1.0  # RFC 8985 7.2
            if seq_diff(tcb.snd_max, tcb.snd_una) <= tcb.snd_mss:
                pto += WC_DEL_ACK
            pto = max(pto, PTO_MIN)
            rto_at = timer.deadline if sender.rtx_kind == RTO and timer.deadline is not None else now + rtt.rto
            timer.arm(min(now + pto, rto_at))
            sender.rtx_kind = PTO
            return
        if sender.rtx_kind != RTO or timer.deadline is None:  # (None: output left the RTO arm to us)
            timer.arm(now + sender.rtt.rto)
            sender.rtx_kind = RTO

    def on_timer(self, kind: int, now: float) -> None:
        """The timer expired as the reorder timer (``REO``) or the probe timeout (``PTO``)."""
        if kind == REO:
            self.reo_deadline = None
            self._detect_loss(now)
            if self.lost_bytes and not (self.in_recovery or self.in_loss):
                self._enter(now)
            if self.in_recovery or self.in_loss:
                self._send(now)
            self.arm_timer(now)
        elif kind == PTO:
            self._probe(now)

    # -- RACK (RFC 8985 6.2) -------------------------------------------------

    def _rack_update(self, r, now: float) -> None:
        """A segment was delivered (acknowledged or SACKed for the first time)."""
        sender = self.sender
        x = r[2]
        rtt = now - x
        fl = r[3]
        if fl & RETRANS:
            tsecr = sender.ack_tsecr
            if tsecr is not None and _ts_before(tsecr, ts_clock(x, sender.tcb.ts_offset)):
                return  # the ACK is for an earlier transmission
            if self.min_rtt is not None and rtt < self.min_rtt:
                return  # too soon to be for the retransmission
        elif self.min_rtt is None or rtt < self.min_rtt:
            self.min_rtt = rtt
        self.rack_rtt = rtt
        end = r[1]
        if x > self.rack_xmit or (x == self.rack_xmit and end > self.rack_end):
            self.rack_xmit = x
            self.rack_end = end
        if end > self.fack:
            self.fack = end
        elif end < self.fack and not fl & RETRANS and not self.reordering_seen:
            self.reordering_seen = True
            self.reorderings += 1
            sender.stats.inc("tcp.reordering_seen")

    def reo_wnd(self) -> float:
        """RFC 8985 6.2 step 4: the reordering window."""
        if not self.reordering_seen:
            if self.in_recovery or self.in_loss:
                return 0.0
            if self.sacked_bytes >= DUP_THRESH * self.sender.tcb.snd_mss:
                return 0.0
        if self.min_rtt is None:
            return 0.0
        w = self.reo_wnd_mult * self.min_rtt / 4
        srtt = self.sender.rtt.srtt
        return min(w, srtt) if srtt is not None else w

    def _detect_loss(self, now: float) -> None:
        """RFC 8985 6.2 step 5: mark lost what was sent RACK.rtt + reo_wnd before the latest delivery."""
        rx = self.rack_xmit
        if rx < 0:
            return
        re_ = self.rack_end
        wait = self.rack_rtt + self.reo_wnd()
        timeout = 0.0
        marked = 0
        for r in self.segs:
            fl = r[3]
            if fl & (SACKED | LOST):
                continue
            x = r[2]
            if x > rx or (x == rx and (r[1] >= re_ or fl & RETRANS)):
                # Sent after RACK.xmit_ts, and so is everything above it never retransmitted. The
                # tie-break by sequence number holds for first transmissions only: a retransmission
                # sent in the same instant as the delivered segment cannot be called earlier.
                if fl & RETRANS:
                    continue
                break
            remaining = x + wait - now
            if remaining <= 0 and x < now:  # (what left at this very instant is not overdue)
                r[3] = fl | LOST
                self.lost_bytes += r[1] - r[0]
                marked += 1
            elif remaining > timeout:
                timeout = remaining
        if marked:
            self.lost_segs += marked
            self.sender.stats.inc("tcp.rack_lost", marked)
        self.reo_deadline = now + timeout if timeout else None

    def _dsack_round(self) -> None:
        """RFC 8985 6.2 step 4: one raise of reo_wnd_mult per round trip with D-SACKs."""
        if self.dsack_round is not None and self.una >= self.dsack_round:
            self.dsack_round = None
        if self.dsack_round is None and self.dsack is not None:
            self.dsack_round = self._pos(self.sender.tcb.snd_nxt)
            self.reo_wnd_mult += 1
            self.reo_wnd_persist = REO_PERSIST

    # -- SACK and D-SACK (RFC 2018, RFC 2883) ----------------------------------

    def _sack(self, blocks, now: float) -> None:
        segs = self.segs
        if not segs:
            first = blocks[0]
            s, e = self._pos(first[0]), self._pos(first[1])
            if e <= self.una and s < e:
                self._on_dsack(s, e)
            return
        top = segs[-1][1]
        for i, (left, right) in enumerate(blocks):
            s, e = self._pos(left), self._pos(right)
            if s >= e:
                continue
            if i == 0:
                # RFC 2883 4: the first block is a D-SACK when below the cumulative ACK or inside the second.
                if e <= self.una or (len(blocks) > 1 and self._pos(blocks[1][0]) <= s
                                     and e <= self._pos(blocks[1][1])):
                    self._on_dsack(s, e)
                    continue
            if e <= self.una or e > top:
                continue  # old or bogus
            j = bisect_left(segs, s, key=_START)
            n = len(segs)
            while j < n:
                r = segs[j]
                if r[1] > e:
                    break
                fl = r[3]
                if not fl & SACKED:
                    size = r[1] - r[0]
                    if fl & LOST:
                        self.lost_bytes -= size
                    r[3] = (fl & ~LOST) | SACKED
                    self.sacked_bytes += size
                    self.delivered += size
                    self._rack_update(r, now)
                j += 1

    def _on_dsack(self, s: int, e: int) -> None:
        """A D-SACK: [s, e) arrived twice."""
        sender = self.sender
        self.dsacks += 1
        sender.stats.inc("tcp.dsack_recv")
        self.dsack = (s, e)
        if self.undo_marker is not None and s >= self.undo_marker:
            mss = sender.tcb.snd_mss
            self.undo_retrans -= max(1, -(-(e - s) // mss))
            if self.undo_retrans <= 0 and not (self.in_recovery or self.in_loss):
                self._undo()  # RFC 3708: every retransmission of the finished recovery was unneeded

    # -- recovery ------------------------------------------------------------

    def _start_undo(self) -> None:
        self.undo_snap = self.sender.cc.snapshot()
        self.undo_marker = self.una
        self.undo_until = None
        self.undo_retrans = 0
        self.retrans_stamp = None

    def _enter(self, now: float) -> None:
        """Lost segments: fast recovery starts (RFC 6675 5 step 4 with PRR's start, RFC 6937)."""
        sender = self.sender
        tcb = sender.tcb
        flight = seq_diff(tcb.snd_max, tcb.snd_una)
        self.in_recovery = True
        self.recover = seq_add(tcb.snd_max, -1)
        self.fast_retransmits += 1
        sender.stats.inc("tcp.fast_retransmits")
        self._start_undo()
        self.undo_rto = False
        sender.cc.on_congestion(flight, now)
        self.prr.start(flight)

    def _exit(self, in_flight: int, now: float, fast: bool) -> None:
        """A full acknowledgment: recovery ends; undone when it proved spurious (RFC 3708, RFC 3522)."""
        self.in_recovery = self.in_loss = False
        self.frto = 0
        if self.undo_marker is not None and (self.undo_retrans <= 0 or self._ts_before_retrans()):
            self._undo()
        else:
            if fast:
                self.sender.cc.end_reduction(now)  # RFC 9937: PRR brought the flight to ssthresh
            if self.undo_marker is not None:
                self.undo_until = self._pos(self.sender.tcb.snd_max)  # late D-SACKs may still undo it
        # RFC 8985 6.2 step 4: a raised reordering window lasts REO_PERSIST recoveries without D-SACKs.
        self.reo_wnd_persist -= 1
        if self.reo_wnd_persist <= 0:
            self.reo_wnd_mult = 1

    def _ts_before_retrans(self) -> bool:
        """Eifel (RFC 3522): the ACK echoes a timestamp from before the first retransmission."""
        sender = self.sender
        tsecr = sender.ack_tsecr
        stamp = self.retrans_stamp
        return tsecr is not None and stamp is not None and _ts_before(tsecr, ts_clock(stamp, sender.tcb.ts_offset))

    def _undo(self) -> None:
        """The reduction was spurious: the window and threshold come back, lost marks go."""
        sender = self.sender
        if self.undo_snap is not None:
            sender.cc.restore(self.undo_snap)
        self.undo_snap = self.undo_marker = self.undo_until = None
        self.undos += 1
        sender.stats.inc("tcp.spurious_undo")
        if not self.undo_rto and not self.reordering_seen:
            self.reordering_seen = True  # a spurious fast retransmit: the path reorders
            self.reorderings += 1
            sender.stats.inc("tcp.reordering_seen")
        self.in_recovery = self.in_loss = False
        self.frto = 0
        if self.lost_bytes:
            for r in self.segs:
                r[3] &= ~LOST
            self.lost_bytes = 0

    def _spurious_rto(self, advanced: int) -> bool:
        """First ACKs after a timeout: Eifel detection (timestamps) or F-RTO step 3 (RFC 5682 2.1)."""
        if self.frto == 2:
            if advanced > 0 and self.una > self.frto_high:
                self._undo()  # 3b: data never retransmitted was acknowledged
                return True
            self.frto = 0  # 3a: a duplicate ACK, conventional recovery
            return False
        if self.frto == 0 and advanced > 0 and self._ts_before_retrans():
            self._undo()
            return True
        return False

    def _frto_first(self, advanced: bool, now: float) -> None:
        """RFC 5682 2.1 step 2: the first ACK after the timeout."""
        sender = self.sender
        tcb = sender.tcb
        if (not advanced or not self.in_loss or seq_diff(tcb.snd_una, self.recover) > 0
                or seq_diff(tcb.snd_nxt, tcb.snd_una) >= len(sender.sndbuf)):
            self.frto = 0  # 2a: a duplicate ACK, all acknowledged, or nothing new to send
            return
        before = tcb.snd_max
        sender.output(now, budget=2 * tcb.snd_mss)  # 2b: two new segments instead of retransmissions
        self.frto = 2 if tcb.snd_max != before else 0

    def _send(self, now: float) -> None:
        """Lost segments first, then new data: by PRR in fast recovery, by cwnd - pipe after a timeout."""
        sender = self.sender
        tcb = sender.tcb
        mss = tcb.snd_mss
        cc = sender.cc
        pipe = seq_diff(tcb.snd_max, tcb.snd_una) - self.sacked_bytes - self.lost_bytes
        if pipe < 0:
            pipe = 0
        if self.in_recovery:
            budget = self.prr.sndcnt(self.delivered, pipe, cc.ssthresh, mss)
        else:
            budget = cc.window - pipe
        self.delivered = 0
        if budget <= 0:
            return
        i = 0
        segs = self.segs
        while budget > 0:
            if self.lost_bytes:
                n = len(segs)
                while i < n and not segs[i][3] & LOST:
                    i += 1
                if i < n:
                    budget -= self._retransmit(segs[i], now)
                    i += 1
                    continue
            if self.in_loss and budget < mss:
                break
            if seq_diff(tcb.snd_nxt, tcb.snd_una) < len(sender.sndbuf) or (tcb.fin_queued and not tcb.fin_acked):
                sender.output(now, budget=budget)
            break

    def _retransmit(self, r, now: float) -> int:
        """Send the segment of record ``r`` again (with the FIN if it held it); return its length."""
        sender = self.sender
        tcb = sender.tcb
        start = max(r[0], self.una)
        length = r[1] - start
        if length <= 0:
            r[3] &= ~LOST
            return 0
        data = len(sender.sndbuf) - (start - self.una)
        n = min(length, data)
        fin = length > n
        if n < 0:
            n = 0
        sender.rtt_seq = None  # Karn
        sender.send_data(self._seq(start), n, fin, now, advance=False)
        return length

    def _probe(self, now: float) -> None:
        """RFC 8985 7.3: the PTO expired: one new segment, else the last one again."""
        sender = self.sender
        tcb = sender.tcb
        if tcb.snd_max == tcb.snd_una or not self.segs:
            return
        self.tlps += 1
        sender.stats.inc("tcp.tlp_probes")
        sender.psh_next = True  # a receiver that delays ACKs answers a pushed segment when it is read
        before = tcb.snd_max
        if seq_diff(tcb.snd_nxt, tcb.snd_una) < len(sender.sndbuf) and tcb.snd_nxt == tcb.snd_max:
            sender.output(now, budget=tcb.snd_mss)
        if tcb.snd_max != before:
            self.tlp_retrans = False
        else:
            last = self.segs[-1]
            if self.in_recovery:
                last = next((r for r in reversed(self.segs) if not r[3] & SACKED), None)
                if last is None:
                    return
            else:
                self.undo_marker = self.undo_until = None  # a probe is not part of a recovery's undo count
            self._retransmit(last, now)
            self.tlp_retrans = True
        self.tlp_end = self._pos(tcb.snd_max)
        self.tlp_time = now
        self.tlp_flight = max(seq_diff(tcb.snd_max, tcb.snd_una), sender.cc.window)

    def _tlp_ack(self, now: float, advanced: bool) -> None:
        """RFC 8985 7.4: did the probe repair a loss? Decided by the first ACK past the probe, a
        D-SACK of it, or a duplicate ACK once the probe is acknowledged (both copies arrived)."""
        dsack = self.dsack
        end = self.tlp_end
        if self.una < end:
            return
        if not self.tlp_retrans or (dsack is not None and dsack[1] >= end):
            self.tlp_end = None  # a probe of new data, or both the original and the probe arrived
            return
        sender = self.sender
        tsecr = sender.ack_tsecr
        if tsecr is not None and _ts_before(tsecr, ts_clock(self.tlp_time, sender.tcb.ts_offset)):
            self.tlp_end = None  # the ACK was for the original: nothing was lost
            return
        if self.una == end:
            if not advanced and not self.delivered:
                self.tlp_end = None  # a duplicate ACK after the probe was acknowledged: no loss
            return
        self.tlp_end = None
        if self.in_recovery or self.in_loss:
            return
        # The probe repaired a tail loss: reduce the window once, as for a fast retransmit (7.4.2),
        # from the flight that lost its tail, as Linux does from cwnd (what is in flight when the
        # repair shows is only what was sent since: often nothing, which made ssthresh 2 SMSS).
        sender.stats.inc("tcp.tlp_recoveries")
        sender.cc.on_congestion(max(self.tlp_flight, sender.tcb.snd_mss), now)


def _ts_before(a: int, b: int) -> bool:
    """Timestamp ``a`` is older than ``b`` (RFC 7323 modular comparison)."""
    return ((a - b) & 0xFFFFFFFF) > 0x7FFFFFFF
