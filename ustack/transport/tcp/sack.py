"""SACK-based loss recovery at the sender (RFC 2018 scoreboard, RFC 6675 pipe and NextSeg).

``Scoreboard`` keeps the SACKed ranges as offsets from SND.UNA (sorted,
disjoint, merged), so advancing SND.UNA just slides them. ``SackSender`` is a
mixin of ``Connection``; when SACK was negotiated it replaces NewReno's
window inflation during fast recovery with RFC 6675's conservative rules:

- a hole is *lost* (IsLost) when more than (DupThresh - 1) * SMSS bytes, or
  DupThresh discontiguous ranges, above it have been SACKed (DupThresh = 3);
- pipe = unSACKed bytes not deemed lost, plus bytes retransmitted in this
  recovery (below HighRxt);
- while cwnd - pipe >= SMSS, NextSeg picks: (1) the first lost byte above
  HighRxt, (2) new data, (3) any unSACKed byte above HighRxt and below the
  highest SACKed byte, (4) once per recovery, a rescue retransmission of the
  last unSACKed segment.

Recovery starts on the third duplicate ACK or as soon as the first hole is
lost by the rule above; cwnd = ssthresh = FlightSize / 2 (congestion control
does that, see ``congestion.NewReno.sack``). A retransmission timeout
forgets the scoreboard (the receiver may renege, RFC 2018 section 8).
"""

from __future__ import annotations

from ustack.transport.tcp.seq import seq_add, seq_diff

DUP_THRESH = 3
MAX_BLOCKS = 128  # a peer cannot make the scoreboard (and each ACK's work) grow without bound


class Scoreboard:
    __slots__ = ("blocks",)

    def __init__(self):
        self.blocks: list = []  # [[start, end)] offsets from SND.UNA

    def clear(self) -> None:
        self.blocks = []

    def advance(self, n: int) -> None:
        """SND.UNA moved forward by ``n``."""
        out = []
        for s, e in self.blocks:
            s -= n
            e -= n
            if e > 0:
                out.append([max(s, 0), e])
        self.blocks = out

    def update(self, sack_blocks, una: int, snd_max: int) -> None:
        """Merge the SACK option's blocks; blocks outside (SND.UNA, SND.MAX] are ignored."""
        limit = seq_diff(snd_max, una)
        blocks = self.blocks
        for left, right in sack_blocks:
            s = seq_diff(left, una)
            e = seq_diff(right, una)
            if e <= 0 or s >= e or e > limit:
                continue  # old (a D-SACK) or bogus
            if s < 0:
                s = 0
            merged = [s, e]
            keep = []
            for b in blocks:
                if b[1] < merged[0] or b[0] > merged[1]:
                    keep.append(b)
                else:
                    merged = [min(b[0], merged[0]), max(b[1], merged[1])]
            keep.append(merged)
            keep.sort()
            blocks = keep
        if len(blocks) > MAX_BLOCKS:
            del blocks[MAX_BLOCKS:]  # forget the highest ranges: only makes losses look later
        self.blocks = blocks

    @property
    def sacked(self) -> int:
        return sum(e - s for s, e in self.blocks)

    def holes(self, limit: int, mss: int) -> list:
        """UnSACKed ranges below the highest SACKed byte, each as (start, end, lost)."""
        blocks = self.blocks
        out = []
        pos = 0
        n = len(blocks)
        above = self.sacked
        for i, (s, e) in enumerate(blocks):
            if s > pos:
                # IsLost: what is SACKed above this hole (RFC 6675 section 4)
                out.append((pos, s, above > (DUP_THRESH - 1) * mss or n - i >= DUP_THRESH))
            above -= e - s
            pos = e
        return out

    def tail(self, limit: int) -> tuple | None:
        """The unSACKed range between the highest SACKed byte and ``limit``."""
        pos = self.blocks[-1][1] if self.blocks else 0
        return (pos, limit) if pos < limit else None


class SackSender:
    __slots__ = ()

    def _sack_limit(self) -> int:
        """Data bytes that have been sent (offsets below this may be retransmitted)."""
        tcb = self.tcb
        return min(seq_diff(tcb.snd_max, tcb.snd_una), len(self.sndbuf))

    def _pipe(self) -> int:
        """RFC 6675 SetPipe(): the sender's estimate of bytes still in the network."""
        tcb = self.tcb
        limit = self._sack_limit()
        board = self._board
        high_rxt = seq_diff(self._high_rxt, tcb.snd_una)
        pipe = 0
        ranges = board.holes(limit, tcb.snd_mss)
        tail = board.tail(limit)
        if tail is not None:
            ranges.append((tail[0], tail[1], False))
        for s, e, lost in ranges:
            if not lost:
                pipe += e - s
            if high_rxt > s:
                pipe += min(e, high_rxt) - s
        return pipe

    def _next_seg(self) -> tuple | None:
        """RFC 6675 NextSeg(): (offset, length) to retransmit, ("new",) for new data, or None."""
        tcb = self.tcb
        mss = tcb.snd_mss
        limit = self._sack_limit()
        board = self._board
        high_rxt = max(0, seq_diff(self._high_rxt, tcb.snd_una))
        holes = board.holes(limit, mss)
        for s, e, lost in holes:  # rule 1: lost and not yet retransmitted
            start = max(s, high_rxt)
            if lost and start < e:
                return (start, min(mss, e - start))
        off = seq_diff(tcb.snd_nxt, tcb.snd_una)
        if off < len(self.sndbuf) and seq_diff(tcb.snd_nxt, tcb.snd_una) < tcb.snd_wnd:
            return ("new",)  # rule 2
        for s, e, _ in holes:  # rule 3: unSACKed, below the highest SACKed byte, not yet retransmitted
            start = max(s, high_rxt)
            if start < e:
                return (start, min(mss, e - start))
        if self._rescue_rxt is None or seq_diff(tcb.snd_una, self._rescue_rxt) > 0:  # rule 4
            tail = board.tail(limit)
            if tail is not None:
                s, e = tail
                s = max(s, e - mss)  # must include the highest unSACKed byte
                self._rescue_rxt = self.cc.recover
                return (s, e - s, "rescue")
        return None

    def _sack_enter_recovery(self, now: float) -> None:
        """Recovery just started: retransmit the first segment, reset HighRxt and RescueRxt."""
        tcb = self.tcb
        self._high_rxt = tcb.snd_una
        self._rescue_rxt = None
        self.fast_retransmits += 1
        self.host.stats.inc("tcp.fast_retransmits")
        n = min(tcb.snd_mss, self._sack_limit())
        if n > 0:
            self._rtt_seq = None
            self._send_data(tcb.snd_una, n, False, now, advance=False)
            self._high_rxt = seq_add(tcb.snd_una, n)
        else:
            self._retransmit_head(now)

    def _sack_after_ack(self, ack: int, now: float) -> None:
        """After an ACK's scoreboard update: maybe enter recovery (IsLost), then send by pipe."""
        tcb = self.tcb
        cc = self.cc
        if tcb.snd_max == tcb.snd_una:
            return
        if not cc.in_recovery:
            holes = self._board.holes(self._sack_limit(), tcb.snd_mss)
            if holes and holes[0][0] == 0 and holes[0][2]:
                # RFC 6675 section 5: IsLost(HighACK + 1) starts recovery without waiting for 3 dup ACKs.
                if cc.enter_recovery(ack, seq_diff(tcb.snd_max, tcb.snd_una), tcb.snd_max, now):
                    self._sack_enter_recovery(now)
            if not cc.in_recovery:
                return
        self._sack_send(now)

    def _sack_send(self, now: float) -> None:
        tcb = self.tcb
        mss = tcb.snd_mss
        pipe = self._pipe()
        cwnd = self.cc.window
        guard = 0
        while cwnd - pipe >= mss and guard < 1000:
            guard += 1
            seg = self._next_seg()
            if seg is None:
                break
            if seg[0] == "new":
                before = tcb.snd_nxt
                self._output(now, budget=cwnd - pipe)
                sent = seq_diff(tcb.snd_nxt, before)
                if sent <= 0:
                    break
                pipe += sent
                continue
            off, n = seg[0], seg[1]
            self._rtt_seq = None  # Karn
            self._send_data(seq_add(tcb.snd_una, off), n, False, now, advance=False)
            if len(seg) == 2:
                end = seq_add(tcb.snd_una, off + n)
                if seq_diff(end, self._high_rxt) > 0:
                    self._high_rxt = end
            pipe += n
