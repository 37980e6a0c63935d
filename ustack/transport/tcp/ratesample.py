"""Delivery rate estimation (draft-cheng-iccrg-delivery-rate-estimation-02): a rate sample per ACK.

The connection counts ``delivered``, the bytes cumulatively acknowledged or
SACKed so far, and ``delivered_time``, when that count last grew. Every
transmission (``on_send``, a retransmission too) records, for the sequence
range it sent (section 3.2):

- P.delivered: C.delivered when it left;
- P.delivered_time: C.delivered_time when it left;
- P.first_sent_time: the send time of the packet most recently delivered
  when it left (the start of the current send interval); with nothing in
  flight the send and ACK intervals start now;
- P.is_app_limited: whether the sender was application-limited then;
- its own send time.

On each ACK (``on_ack``) the ranges newly delivered (cumulatively or by a
SACK block, each once) add to C.delivered, and the most recently *sent* of
them gives the sample (section 3.3):

- rs.delivered = C.delivered - P.delivered (the data delivered over the
  interval);
- rs.interval = max(send_elapsed, ack_elapsed), send_elapsed = P.sent_time
  - P.first_sent_time, ack_elapsed = now - P.delivered_time (the longer of
  the two phases keeps ACK compression from inflating the rate);
- rs.delivery_rate = rs.delivered / rs.interval, or None when no range was
  newly delivered or the interval is below the minimum RTT seen (ACK
  compression: Linux's tcp_rate_gen does the same).

Records are kept per transmission call, not per segment: a burst of segments
sent in one instant shares every field, so one record ``[start, end,
delivered, delivered_time, first_sent_time, app_limited, sent_time, flags]``
stands for all of them and is split only where a cumulative ACK, a SACK
block or a retransmission cuts it. Positions are unwrapped sequence numbers
(no modular arithmetic), as RACK-TLP's records. The sample also carries the
RTT of the most recently sent, never retransmitted, newly delivered range
(BBR's min_rtt input) and the bytes newly delivered by this ACK.

Application-limited periods (section 3.4): the sender calls
``mark_app_limited(pipe)`` when it had nothing more to send and room in the
window; samples of packets sent until C.delivered passes that mark say so.
"""

from __future__ import annotations

from bisect import bisect_left
from operator import itemgetter

from ustack.transport.tcp.seq import seq_diff

SACKED, RETRANS = 1, 2
_START = itemgetter(0)


class RateSample:
    """One ACK's rate sample (the draft's ``rs``); reused from ACK to ACK."""

    __slots__ = ("delivery_rate", "delivered", "prior_delivered", "prior_time", "interval", "send_elapsed",
                 "ack_elapsed", "is_app_limited", "rtt", "newly_delivered")

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self.delivery_rate = None  # bytes per second; None: no valid sample on this ACK
        self.delivered = 0  # rs.delivered: bytes delivered over the interval
        self.prior_delivered = 0  # P.delivered of the sampled range
        self.prior_time = 0.0  # P.delivered_time of the sampled range
        self.interval = 0.0
        self.send_elapsed = 0.0
        self.ack_elapsed = 0.0
        self.is_app_limited = False
        self.rtt = None  # seconds: the newest never-retransmitted range newly delivered (None: none)
        self.newly_delivered = 0  # bytes newly acknowledged or SACKed by this ACK


class RateSampler:
    """The connection's delivery counters and per-transmission records (see the module docstring)."""

    __slots__ = ("delivered", "delivered_time", "first_sent_time", "app_limited", "records", "una", "una_seq",
                 "sacked", "min_rtt", "sample")

    def __init__(self):
        self.delivered = 0  # C.delivered (bytes)
        self.delivered_time = 0.0  # C.delivered_time
        self.first_sent_time = 0.0  # C.first_sent_time
        self.app_limited = 0  # C.app_limited: the delivered count that ends the app-limited period (0: none)
        self.records: list = []  # [start, end, delivered, delivered_time, first_sent_time, app_limited, sent, flags]
        self.una = 0  # unwrapped position of SND.UNA ...
        self.una_seq = None  # ... and the sequence number it stands for (None until the first send)
        self.sacked = 0  # bytes SACKed above SND.UNA
        self.min_rtt = None  # the smallest RTT sample seen (ACK compression guard)
        self.sample = RateSample()

    def _pos(self, seq: int) -> int:
        return self.una + seq_diff(seq, self.una_seq)

    def _split(self, pos: int) -> int:
        """Cut the record holding ``pos`` inside it in two; the index of the first record starting at or
        after ``pos``."""
        recs = self.records
        i = bisect_left(recs, pos, key=_START)
        if i and recs[i - 1][1] > pos:
            r = recs[i - 1]
            tail = r.copy()
            tail[0] = pos
            r[1] = pos
            recs.insert(i, tail)
            return i
        return i

    # -- transmit (section 3.2) ----------------------------------------------------

    def on_send(self, una: int, seq: int, length: int, now: float) -> None:
        """``length`` sequence numbers from ``seq`` just left (a first transmission or a retransmission);
        ``una`` is SND.UNA."""
        if length <= 0:
            return
        recs = self.records
        if self.una_seq is None or not recs:
            self.una_seq = una  # positions restart from SND.UNA while nothing is outstanding
            if not recs:
                self.una = 0
                self.sacked = 0
                # nothing in flight: the send and ACK intervals start now
                self.first_sent_time = self.delivered_time = now
        s = self._pos(seq)
        e = s + length
        top = recs[-1][1] if recs else self.una
        app = self.app_limited != 0
        if s < top:  # a retransmission: its records take the state of this transmission
            i = self._split(max(s, self.una))
            j = self._split(min(e, top))
            for k in range(i, j):
                r = recs[k]
                if not r[7] & SACKED:
                    r[2:8] = (self.delivered, self.delivered_time, self.first_sent_time, app, now, r[7] | RETRANS)
        if e > top:
            recs.append([max(s, top), e, self.delivered, self.delivered_time, self.first_sent_time, app, now, 0])

    def mark_app_limited(self, pipe: int) -> None:
        """The sender had nothing more to send with ``pipe`` bytes in flight and room in the window
        (section 3.4): samples stay app-limited until what is in flight now is delivered."""
        self.app_limited = max(self.delivered + pipe, 1)

    # -- acknowledgments (section 3.3) ------------------------------------------------

    def _cut(self, pos: int, mss: int, up: bool) -> int:
        """A SACK block's edge: the record holding ``pos`` is cut at a segment boundary (``mss`` from its
        start; rounded ``up`` for a left edge, down for a right one), so that only whole segments count
        as SACKed and a peer's odd edges cannot make more records than segments; the index of the first
        record past the cut."""
        recs = self.records
        i = bisect_left(recs, pos, key=_START)
        if i and recs[i - 1][1] > pos:
            r = recs[i - 1]
            off = pos - r[0]
            cut = r[0] + (-(-off // mss) if up else off // mss) * mss
            if cut >= r[1]:
                return i
            if cut <= r[0]:
                return i - 1
            return self._split(cut)
        return i

    def on_ack(self, ack: int, sack_blocks, now: float, mss: int = 1) -> RateSample:
        """An ACK up to ``ack`` with ``sack_blocks`` ((left, right) sequence pairs): the rate sample.
        ``mss``: the segment size SACK blocks are counted in (whole segments)."""
        rs = self.sample
        rs.clear()
        recs = self.records
        if self.una_seq is None:
            return rs
        new = self._pos(ack)
        latest = None
        rtt_rec = None
        delivered = 0
        if new > self.una:
            if recs and new < recs[-1][1]:
                self._split(new)  # a record the ACK cuts (one burst, partly acknowledged)
            k = 0
            for r in recs:
                if r[1] > new:
                    break
                k += 1
                if r[7] & SACKED:
                    self.sacked -= r[1] - r[0]
                    continue
                delivered += r[1] - r[0]
                if latest is None or r[6] > latest[6] or (r[6] == latest[6] and r[1] > latest[1]):
                    latest = r
                if not r[7] & RETRANS and (rtt_rec is None or r[6] > rtt_rec[6]):
                    rtt_rec = r
            if k:
                del recs[:k]
            self.una, self.una_seq = new, ack
        if sack_blocks and recs:
            top = recs[-1][1]
            for left, right in sack_blocks:
                s, e = self._pos(left), self._pos(right)
                if s < self.una:
                    s = self.una
                if e > top:
                    e = top
                if s >= e:
                    continue  # a D-SACK below SND.UNA, or nothing we sent
                i = self._cut(s, mss, True)
                j = self._cut(e, mss, False)
                for k in range(i, j):
                    r = recs[k]
                    if r[7] & SACKED:
                        continue
                    r[7] |= SACKED
                    size = r[1] - r[0]
                    self.sacked += size
                    delivered += size
                    if latest is None or r[6] > latest[6] or (r[6] == latest[6] and r[1] > latest[1]):
                        latest = r
                    if not r[7] & RETRANS and (rtt_rec is None or r[6] > rtt_rec[6]):
                        rtt_rec = r
        if latest is None:
            return rs
        self.delivered += delivered
        self.delivered_time = now
        rs.newly_delivered = delivered
        rs.prior_delivered = latest[2]
        rs.prior_time = latest[3]
        rs.is_app_limited = latest[5]
        rs.send_elapsed = latest[6] - latest[4]
        rs.ack_elapsed = now - latest[3]
        self.first_sent_time = latest[6]
        if rtt_rec is not None:
            rtt = now - rtt_rec[6]
            rs.rtt = rtt
            if self.min_rtt is None or rtt < self.min_rtt:
                self.min_rtt = rtt
        if self.app_limited and self.delivered > self.app_limited:
            self.app_limited = 0  # the app-limited period's data is delivered (section 3.4)
        rs.delivered = self.delivered - rs.prior_delivered
        rs.interval = max(rs.send_elapsed, rs.ack_elapsed)
        if rs.interval > 0 and (self.min_rtt is None or rs.interval >= self.min_rtt):
            rs.delivery_rate = rs.delivered / rs.interval
        return rs
