"""TCP analysis for ``ustack trace``: relative sequence numbers, window scale, and the markers.

``TcpAnalysis().segment(...)`` is told every TCP segment of a capture in
order and returns what the line needs: each direction's base (printed as 0),
the window scale once it applies, and the markers below.

Sequence and acknowledgment numbers are relative to each direction's base
(its ISN: the first SYN seen in that direction; when the capture starts
mid-connection, the first sequence number seen for it, or the first
acknowledgment number referring to it, whichever comes first). Once both
SYNs were seen carrying a window scale option (RFC 7323 2.2: only then does
scaling apply, and never to a SYN's own window) the scale is returned.

Markers, per connection (the 4-tuple; a SYN with a new ISN starts a new
connection) and direction, judged only from what this capture saw. "Next
expected" is the highest sequence number plus length (SYN and FIN count
one) seen so far in that direction.

``[retransmission]``
    The segment occupies sequence space (data, SYN or FIN) and at least one
    octet of it was already seen in an earlier segment of this direction
    (seen octets are kept as a set of ranges, so repacketized resends count).
``[out-of-order]``
    The segment occupies sequence space below the next expected sequence
    number, none of it seen before: it fills a hole. Note that at a
    receiver-side capture the resend of a segment lost before the capture
    point is exactly that, so it shows here, after a
    ``[previous segment not captured]`` on the segment beyond the hole.
``[previous segment not captured]``
    The segment starts above the next expected sequence number: the capture
    missed octets (lost before the capture point, or reordered).
``[keep-alive]``
    No SYN/FIN/RST, at most one octet of data, and a sequence number one
    below the next expected one (RFC 9293 3.8.4; Linux window probes look
    the same). Such a segment gets no other sequence or ack marker.
``[zero window]``
    The advertised window is 0 (SYN, FIN and RST segments excepted).
``[zero window probe]``
    One octet of new data sent while the other side's last advertised
    window was 0.
``[window update]``
    A pure ACK (no data, no SYN/FIN/RST) that repeats the previous
    acknowledgment number of its direction with a different, non-zero
    window.
``[dup ack #n]``
    RFC 5681 2: a pure ACK (no data, no SYN/FIN/RST) whose acknowledgment
    number equals the greatest one sent so far in its direction, with the
    same window as the previous segment of its direction, while the other
    side has data outstanding (it has sent beyond that acknowledgment
    number). A zero-window ACK (the answer to a window probe) is not
    counted. ``n`` counts these for the same acknowledgment number: the
    first duplicate is #1; a higher acknowledgment number restarts it.

Not done: SACK-aware or RTT-based analysis.
"""

from __future__ import annotations

import bisect

SEQ_MOD = 1 << 32
HALF = 1 << 31
FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10


class _Direction:
    """What one direction of a connection has shown so far, in unwrapped relative sequence space."""

    __slots__ = ("base", "syn_seen", "wscale", "nxt", "starts", "ends", "last_ack", "last_win", "dups", "rev")

    def __init__(self):
        self.base = None      # raw 32-bit number that prints as 0
        self.syn_seen = False
        self.wscale = None    # shift from this direction's SYN; -1: SYN without the option
        self.nxt = None       # next expected (highest seq + len seen), unwrapped, relative
        self.starts = []      # octets seen: merged, sorted [start, end) ranges
        self.ends = []
        self.last_ack = None  # greatest acknowledgment number sent in this direction (unwrapped)
        self.last_win = None  # raw window of the previous segment in this direction
        self.dups = 0
        self.rev = None

    def unwrap(self, number: int) -> int:
        rel = (number - self.base) % SEQ_MOD
        ref = self.nxt if self.nxt is not None else 0
        d = (rel - ref) % SEQ_MOD
        return ref + (d - SEQ_MOD if d >= HALF else d)

    def seen(self, start: int, end: int) -> bool:
        """Was any octet of [start, end) seen before?"""
        i = bisect.bisect_right(self.starts, start) - 1
        if i >= 0 and self.ends[i] > start:
            return True
        return i + 1 < len(self.starts) and self.starts[i + 1] < end

    def add(self, start: int, end: int) -> None:
        starts, ends = self.starts, self.ends
        if starts and start >= starts[-1]:  # the common case: at or after the last range
            if start <= ends[-1]:
                if end > ends[-1]:
                    ends[-1] = end
                return
            starts.append(start)
            ends.append(end)
            return
        lo = bisect.bisect_left(ends, start)    # first range ending at or after start
        hi = bisect.bisect_right(starts, end)   # ranges from lo to hi-1 touch [start, end)
        if lo < hi:
            start = min(start, starts[lo])
            end = max(end, ends[hi - 1])
        starts[lo:hi] = [start]
        ends[lo:hi] = [end]


def _pair():
    a, b = _Direction(), _Direction()
    a.rev, b.rev = b, a
    return a, b


class TcpAnalysis:
    """Per-connection, per-direction TCP state; ``segment`` returns the bases, the scale and the markers."""

    def __init__(self):
        self.dirs: dict[tuple, _Direction] = {}

    def _direction(self, key, rkey) -> _Direction:
        d = self.dirs.get(key)
        if d is None:
            d, r = _pair()
            self.dirs[key] = d
            self.dirs[rkey] = r
        return d

    def _renew(self, key, rkey, both: bool) -> _Direction:
        """A SYN with a new ISN: a new connection on the same 4-tuple."""
        if both:
            d, r = _pair()
            self.dirs[key] = d
            self.dirs[rkey] = r
            return d
        old = self.dirs[key]
        d = _Direction()
        d.rev, old.rev.rev = old.rev, d
        self.dirs[key] = d
        return d

    def segment(self, src, sport, dst, dport, seq, ack, flags, win, plen, wscale):
        key, rkey = (src, sport, dst, dport), (dst, dport, src, sport)
        d = self._direction(key, rkey)
        syn, fin, rst, ackf = flags & SYN, flags & FIN, flags & RST, flags & ACK
        if syn and (d.base is not None or d.nxt is not None) and (not d.syn_seen or seq != d.base):
            d = self._renew(key, rkey, both=not ackf)
        if syn and not d.syn_seen:
            d.base = seq
            d.syn_seen = True
            d.wscale = wscale if wscale is not None else -1
            d.nxt = 0
        if d.base is None:
            d.base = seq
        rev = d.rev
        s = d.unwrap(seq)
        if d.nxt is None:
            d.nxt = s
        ack_ext = None
        if ackf:
            if rev.base is None:
                rev.base = ack
            ack_ext = rev.unwrap(ack)
        ctl = flags & (SYN | FIN | RST)
        occupy = plen + (1 if syn else 0) + (1 if fin else 0)
        end = s + occupy
        markers = []
        keepalive = not ctl and plen <= 1 and s == d.nxt - 1
        if keepalive:
            markers.append("keep-alive")
        elif not rst:
            if occupy and d.seen(s, end):
                markers.append("retransmission")
            elif occupy and s < d.nxt:
                markers.append("out-of-order")
            elif s > d.nxt and not syn:
                markers.append("previous segment not captured")
            if plen == 1 and s == d.nxt and rev.last_win == 0 and not ctl:
                markers.append("zero window probe")
        if win == 0 and not ctl:
            markers.append("zero window")
        if ackf and not plen and not ctl and not keepalive and ack_ext == d.last_ack:
            if win != d.last_win:
                if win != 0 and d.last_win is not None:
                    markers.append("window update")
            elif win and rev.nxt is not None and rev.nxt > ack_ext:  # RFC 5681 2: data outstanding
                d.dups += 1
                markers.append(f"dup ack #{d.dups}")
        if not rst:
            if occupy:
                d.add(s, end)
            if end > d.nxt:
                d.nxt = end
            d.last_win = win
        if ackf and (d.last_ack is None or ack_ext > d.last_ack):
            d.last_ack = ack_ext
            d.dups = 0
        scale = None
        if not syn and d.wscale is not None and rev.wscale is not None and d.wscale > 0 and rev.wscale >= 0:
            scale = min(d.wscale, 14)
        return d.base, (rev.base if ackf else None), rev.base, scale, markers
