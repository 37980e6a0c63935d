"""Loss recovery, apart from congestion control: NewReno (RFC 6582) and SACK-based (RFC 6675).

The sender holds one ``Recovery``, chosen by whether SACK was negotiated
(RFC 2018): ``NewRenoRecovery`` or ``SackRecovery``. It owns the duplicate
ACK count, "recover" (RFC 6675 calls it RecoveryPoint) and whether the
connection is in recovery, and tells the congestion controller when
recovery starts (``on_congestion``) and ends (``on_recovery_end``). The
sender reports, per acceptable ACK, in this order:

- ``on_ack(ack, advanced, acked, in_flight, now)``: SND.UNA moved forward
  by ``advanced`` sequence numbers (``acked`` of them data). Returns True
  when the congestion window must not grow on this ACK (in recovery, or
  this ACK ended it);
- ``on_dup_ack(ack, in_flight, now)``: a duplicate ACK (RFC 5681 section 2);
  the third starts recovery with a fast retransmit, unless the ACK does not
  cover "recover" (RFC 6582 3.2 step 2: no second reduction for losses
  from before a timeout);
- ``after_ack(ack, sack_blocks, now)``: the ACK is processed (the send
  window is current): SACK recovery updates its scoreboard and sends;
- ``on_rto()``: a retransmission timeout ends recovery (RFC 6582 3.2 step 5).

The output loop asks ``window(cwnd)`` what it may fill: during NewReno
recovery cwnd plus the inflation; outside recovery cwnd plus one segment
per duplicate ACK for the first two (RFC 3042 limited transmit); None
during SACK recovery, which sends new data itself (NextSeg rule 2).

NewReno (RFC 6582 3.2): recovery starts with ssthresh = cwnd = reduced
(the controller), inflated by 3 SMSS; each further duplicate ACK inflates
by one SMSS; a partial ACK deflates by the amount acknowledged, adds back
one SMSS when at least one was acknowledged, and retransmits the next
hole; the full ACK (covering "recover") ends it.

SACK (RFC 6675 section 5): cwnd = ssthresh without inflation; recovery
also starts as soon as the scoreboard says the first hole is lost
(IsLost, ``scoreboard``). On each ACK, PRR (RFC 9937, ``prr``) says how
much may go (in place of RFC 6675's cwnd - pipe), and recovery ends with
cwnd = ssthresh; within that, NextSeg picks: (1) the
first lost byte above HighRxt, (2) new data, (3) any unSACKed byte above
HighRxt and below the highest SACKed byte, (4) once per recovery, a rescue
retransmission of the last unSACKed segment (RescueRxt). pipe = unSACKed
bytes not deemed lost, plus bytes retransmitted below HighRxt. A timeout
forgets the scoreboard (the receiver may renege, RFC 2018 section 8).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ustack.transport.tcp.prr import Prr
from ustack.transport.tcp.scoreboard import DUP_THRESH, Scoreboard
from ustack.transport.tcp.seq import seq_add, seq_diff, seq_gt

if TYPE_CHECKING:
    from ustack.transport.tcp.congestion import CongestionControl
    from ustack.transport.tcp.sendbuf import SendBuffer
    from ustack.transport.tcp.tcb import Tcb


class RecoveryHost(Protocol):
    """What loss recovery needs from the sender."""

    tcb: Tcb
    cc: CongestionControl
    sndbuf: SendBuffer
    stats: "ustack.stats.Stats"  # noqa: F821

    def retransmit_head(self, now: float) -> None:
        """Retransmit the first unacknowledged segment."""

    def retransmit(self, seq: int, n: int, now: float) -> None:
        """Retransmit ``n`` bytes from ``seq`` (SND.NXT stays; no RTT sample, Karn)."""

    def output(self, now: float, budget: int | None = None) -> None:
        """Send new data; ``budget`` bytes at most (instead of the congestion window)."""


class Recovery(Protocol):
    """The loss recovery interface the sender drives (see the module docstring)."""

    dupacks: int  # consecutive duplicate ACKs (RFC 5681 section 2)
    arms_after_send: bool  # arm_timer arms the retransmission timer after new data (the segments leave it)
    in_recovery: bool
    recover: int  # RFC 6582 "recover" / RFC 6675 RecoveryPoint: SND.MAX - 1 when recovery started
    inflation: int  # bytes added to cwnd during NewReno recovery (negative after large partial ACKs)
    fast_retransmits: int  # recoveries entered

    def window(self, cwnd: int) -> int | None:
        """The window the output loop may fill given the controller's ``cwnd`` (None: recovery sends)."""

    def on_ack(self, ack: int, advanced: int, acked: int, in_flight: int, now: float) -> bool:
        """SND.UNA advanced; True when the congestion window must not grow on this ACK."""

    def on_dup_ack(self, ack: int, in_flight: int, now: float) -> None:
        """A duplicate ACK."""

    def after_ack(self, ack: int, sack_blocks, now: float) -> None:
        """The ACK is fully processed (the send window is current)."""

    def on_rto(self) -> None:
        """The retransmission timer expired."""

    def on_send(self, seq: int, length: int, now: float) -> None:
        """``length`` sequence numbers from ``seq`` were sent (RACK keeps per-segment send times)."""

    def arm_timer(self, now: float) -> None:
        """After an ACK or new data: run the sender's timer as RTO, reorder timer or PTO (RACK-TLP)."""

    def on_timer(self, kind: int, now: float) -> None:
        """The sender's timer expired as the reorder timer or the probe timeout (``rack.REO``/``rack.PTO``)."""

    def before_rto(self, now: float) -> None:
        """The retransmission timer expired, before the controller reduces the window."""

    def rto_retransmit(self, now: float) -> bool:
        """After the reduction: True when the recovery retransmits itself (else go-back-N from SND.UNA)."""


class _FastRecovery:
    """Duplicate ACK counting, limited transmit and the entry/exit rules both recoveries share."""

    __slots__ = ("sender", "dupacks", "in_recovery", "recover", "inflation", "fast_retransmits")
    # What RACK-TLP counts (``info()``); these recoveries do not tell them apart.
    lost_segs = tlps = undos = reorderings = dsacks = 0
    arms_after_send = False  # the sender arms the RTO itself as segments leave (arm_timer does nothing)

    def __init__(self, sender: RecoveryHost, recover: int):
        self.sender = sender
        self.dupacks = 0
        self.in_recovery = False
        self.recover = recover  # RFC 6582 3.2 step 1
        self.inflation = 0
        self.fast_retransmits = 0

    def window(self, cwnd: int) -> int | None:
        if self.in_recovery:
            return cwnd + self.inflation
        if self.dupacks:
            # RFC 3042 limited transmit: one new segment for each of the first two duplicate ACKs
            return cwnd + min(self.dupacks, 2) * self.sender.tcb.snd_mss
        return cwnd

    def on_ack(self, ack: int, advanced: int, acked: int, in_flight: int, now: float) -> bool:
        self.dupacks = 0
        if not self.in_recovery:
            return False
        if seq_gt(ack, self.recover):
            # RFC 6582 3.2 step 3: a full acknowledgment ends recovery; the window deflates.
            self.in_recovery = False
            self.inflation = 0
            self._end(in_flight, now)
        else:
            self._partial_ack(acked, now)
        return True

    def on_dup_ack(self, ack: int, in_flight: int, now: float) -> None:
        if self.in_recovery:
            self._more_dup_acks()
            return
        self.dupacks += 1
        if self.dupacks == DUP_THRESH and self._enter(ack, in_flight, now):
            self._fast_retransmit(now)

    def after_ack(self, ack: int, sack_blocks, now: float) -> None:
        pass

    def on_send(self, seq: int, length: int, now: float) -> None:
        pass

    def arm_timer(self, now: float) -> None:
        pass

    def on_timer(self, kind: int, now: float) -> None:
        pass

    def before_rto(self, now: float) -> None:
        pass

    def rto_retransmit(self, now: float) -> bool:
        return False

    def on_rto(self) -> None:
        # RFC 6582 3.2 step 5: no fast retransmit for losses from before the timeout.
        self.recover = seq_add(self.sender.tcb.snd_max, -1)
        self.in_recovery = False
        self.inflation = 0
        self.dupacks = 0

    def _enter(self, ack: int, in_flight: int, now: float) -> bool:
        # RFC 6582 3.2 step 2: only when the ACK covers more than "recover".
        if self.in_recovery or not seq_gt(ack, self.recover):
            return False
        sender = self.sender
        self.recover = seq_add(sender.tcb.snd_max, -1)  # the highest sequence number transmitted
        self.in_recovery = True
        self.fast_retransmits += 1
        sender.stats.inc("tcp.fast_retransmits")
        sender.cc.on_congestion(in_flight, now)
        return True

    def _end(self, in_flight: int, now: float) -> None:
        self.sender.cc.on_recovery_end(in_flight, now)

    def _partial_ack(self, acked: int, now: float) -> None:
        raise NotImplementedError

    def _more_dup_acks(self) -> None:
        raise NotImplementedError

    def _fast_retransmit(self, now: float) -> None:
        raise NotImplementedError


class NewRenoRecovery(_FastRecovery):
    """RFC 6582 fast recovery (with RFC 5681 3.2 window inflation)."""

    name = "newreno"
    __slots__ = ()

    def _fast_retransmit(self, now: float) -> None:
        self.inflation = 3 * self.sender.cc.mss  # RFC 5681 3.2 step 3: the three segments that left
        self.sender.retransmit_head(now)

    def _more_dup_acks(self) -> None:
        self.inflation += self.sender.cc.mss  # RFC 5681 3.2 step 4

    def _partial_ack(self, acked: int, now: float) -> None:
        # RFC 6582 3.2 step 4: deflate by the amount acknowledged, add back one SMSS when at least
        # one SMSS was acknowledged, and retransmit the first unacknowledged segment.
        sender = self.sender
        cc = sender.cc
        mss = cc.mss
        base = cc.window
        cwnd = max(mss, base + self.inflation - acked + (mss if acked >= mss else 0))
        self.inflation = cwnd - base
        sender.stats.inc("tcp.partial_acks")
        sender.retransmit_head(now)


class SackRecovery(_FastRecovery):
    """RFC 6675 conservative SACK-based loss recovery, what it sends paced by PRR (RFC 9937)."""

    name = "rfc6675"
    __slots__ = ("board", "high_rxt", "rescue_rxt", "prr", "delivered", "sacked_seen")

    def __init__(self, sender: RecoveryHost, recover: int):
        super().__init__(sender, recover)
        self.board = Scoreboard()
        self.high_rxt = 0  # HighRxt: the highest sequence number retransmitted in this recovery
        self.rescue_rxt = None  # RescueRxt: "recover" at the last rescue retransmission
        self.prr = Prr()
        self.delivered = 0  # SND.UNA's advance on the ACK in progress (DeliveredData less the SACKed)
        self.sacked_seen = 0  # SACKed bytes on the scoreboard after the previous ACK

    def window(self, cwnd: int) -> int | None:
        if self.in_recovery:
            return None  # new data goes out through NextSeg rule 2 (see _send)
        return super().window(cwnd)

    def on_ack(self, ack: int, advanced: int, acked: int, in_flight: int, now: float) -> bool:
        self.board.advance(advanced)
        self.delivered = advanced
        return super().on_ack(ack, advanced, acked, in_flight, now)

    def on_send(self, seq: int, length: int, now: float) -> None:
        if self.in_recovery:
            self.prr.sent(length)  # prr_out

    def _enter(self, ack: int, in_flight: int, now: float) -> bool:
        if not super()._enter(ack, in_flight, now):
            return False
        self.prr.start(in_flight)  # RecoverFS
        return True

    def _end(self, in_flight: int, now: float) -> None:
        self.sender.cc.end_reduction(now)  # RFC 9937: PRR brought the flight down to ssthresh

    def on_rto(self) -> None:
        super().on_rto()
        self.board.clear()  # the receiver may renege (RFC 2018 8): go back N from SND.UNA
        self.sacked_seen = 0

    def _partial_ack(self, acked: int, now: float) -> None:
        pass  # the scoreboard decides what to send; cwnd stays at ssthresh

    def _more_dup_acks(self) -> None:
        pass  # no inflation: pipe counts what left the network

    def _fast_retransmit(self, now: float) -> None:
        """Recovery just started: retransmit the first segment, reset HighRxt and RescueRxt."""
        sender = self.sender
        una = sender.tcb.snd_una
        self.high_rxt = una
        self.rescue_rxt = None
        n = min(sender.tcb.snd_mss, self._sent())
        if n > 0:
            sender.retransmit(una, n, now)
            self.high_rxt = seq_add(una, n)
        else:
            sender.retransmit_head(now)

    def after_ack(self, ack: int, sack_blocks, now: float) -> None:
        """Update the scoreboard; maybe enter recovery (IsLost); then send by pipe."""
        tcb = self.sender.tcb
        board = self.board
        if sack_blocks:
            board.update(sack_blocks, tcb.snd_una, tcb.snd_max)
        # RFC 9937 DeliveredData: SND.UNA's advance plus the change in SACKed bytes (bytes SACKed
        # before and now acknowledged cumulatively leave the count as they join the advance)
        sacked = board.sacked
        delivered = self.delivered + sacked - self.sacked_seen
        self.sacked_seen = sacked
        self.delivered = 0
        if tcb.snd_max == tcb.snd_una:
            return
        if not self.in_recovery:
            holes = self.board.holes(tcb.snd_mss)
            if holes and holes[0][0] == 0 and holes[0][2]:
                # RFC 6675 section 5: IsLost(HighACK + 1) starts recovery without waiting for 3 dup ACKs.
                if self._enter(ack, seq_diff(tcb.snd_max, tcb.snd_una), now):
                    self._fast_retransmit(now)
            if not self.in_recovery:
                return
        self._send(now, max(delivered, 0))

    # -- RFC 6675 section 4 ----------------------------------------------

    def _sent(self) -> int:
        """Data bytes that have been sent (offsets below this may be retransmitted)."""
        sender = self.sender
        tcb = sender.tcb
        return min(seq_diff(tcb.snd_max, tcb.snd_una), len(sender.sndbuf))

    def pipe(self) -> int:
        """SetPipe(): the sender's estimate of bytes still in the network."""
        tcb = self.sender.tcb
        limit = self._sent()
        board = self.board
        high_rxt = seq_diff(self.high_rxt, tcb.snd_una)
        pipe = 0
        ranges = board.holes(tcb.snd_mss)
        tail = board.tail(limit)
        if tail is not None:
            ranges.append((tail[0], tail[1], False))
        for s, e, lost in ranges:
            if not lost:
                pipe += e - s
            if high_rxt > s:
                pipe += min(e, high_rxt) - s
        return pipe

    def next_seg(self) -> tuple | None:
        """NextSeg(): (offset, length) to retransmit, ("new",) for new data, or None."""
        sender = self.sender
        tcb = sender.tcb
        mss = tcb.snd_mss
        limit = self._sent()
        board = self.board
        high_rxt = max(0, seq_diff(self.high_rxt, tcb.snd_una))
        holes = board.holes(mss)
        for s, e, lost in holes:  # rule 1: lost and not yet retransmitted
            start = max(s, high_rxt)
            if lost and start < e:
                return (start, min(mss, e - start))
        off = seq_diff(tcb.snd_nxt, tcb.snd_una)
        if off < len(sender.sndbuf) and off < tcb.snd_wnd:
            return ("new",)  # rule 2
        for s, e, _ in holes:  # rule 3: unSACKed, below the highest SACKed byte, not yet retransmitted
            start = max(s, high_rxt)
            if start < e:
                return (start, min(mss, e - start))
        if self.rescue_rxt is None or seq_diff(tcb.snd_una, self.rescue_rxt) > 0:  # rule 4
            tail = board.tail(limit)
            if tail is not None:
                s, e = tail
                s = max(s, e - mss)  # must include the highest unSACKed byte
                self.rescue_rxt = self.recover
                return (s, e - s, "rescue")
        return None

    def _send(self, now: float, delivered: int) -> None:
        """Section 5 step (C), with PRR (RFC 9937) in place of cwnd - pipe: send what NextSeg picks
        within PRR's sndcnt for the ``delivered`` bytes of this ACK."""
        sender = self.sender
        tcb = sender.tcb
        mss = tcb.snd_mss
        budget = self.prr.sndcnt(delivered, self.pipe(), sender.cc.ssthresh, mss)
        guard = 0
        while budget > 0 and guard < 1000:
            guard += 1
            seg = self.next_seg()
            if seg is None:
                break
            if seg[0] == "new":
                before = tcb.snd_nxt
                sender.output(now, budget=budget)
                sent = seq_diff(tcb.snd_nxt, before)
                if sent <= 0:
                    break
                budget -= sent
                continue
            off, n = seg[0], seg[1]
            sender.retransmit(seq_add(tcb.snd_una, off), n, now)
            if len(seg) == 2:
                end = seq_add(tcb.snd_una, off + n)
                if seq_diff(end, self.high_rxt) > 0:
                    self.high_rxt = end
            budget -= n
