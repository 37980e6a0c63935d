"""The sender's SACK scoreboard (RFC 6675 section 2 and 4, fed by RFC 2018 SACK blocks).

``Scoreboard`` keeps the SACKed ranges as offsets from SND.UNA (sorted,
disjoint, merged), so advancing SND.UNA just slides them. ``holes`` lists
the unSACKed ranges below the highest SACKed byte with RFC 6675's IsLost
verdict: a hole is lost when more than (DupThresh - 1) * SMSS bytes, or
DupThresh discontiguous ranges, above it have been SACKed (DupThresh = 3).
The recovery that uses it (pipe, NextSeg) is ``recovery.SackRecovery``.
"""

from __future__ import annotations

from ustack.transport.tcp.seq import seq_diff

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

    def holes(self, mss: int) -> list:
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
