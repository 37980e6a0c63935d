"""RX frames kept past their poll round: the one-copy receive path and the lending bound.

The device lends each burst's frames for one round (``rx_burst`` ...
``rx_release``). In-order TCP payload that the fast path appends to a
receive buffer is kept there as a view into its frame instead of being
copied, so ``recv``/``recv_into`` copy each byte once (frame -> the
application's buffer), and ``recv_views`` lends the frame itself (zero
copies). A frame with such a view is *held*: it goes back to the device
only when every view of it has been read, released or copied out.

Holding is bounded, so the device's RX ring keeps flowing whatever the
application does: at most ``limit`` frames are held at once. When a frame
would pass the bound, every receive buffer first copies its held (not yet
lent) bytes out into memory of its own (``reclaim``: a second copy, only
for bytes that wait), and the new payload is copied when the bound is
still reached (``rx_hold.copied``): frames the application holds through
``recv_views`` are the only ones the stack cannot take back.
"""

from __future__ import annotations


class RxHold:
    """The frames of one device that receive buffers hold (see the module docstring)."""

    __slots__ = ("release", "limit", "stats", "current", "in_round", "_refs", "_owners", "_pending")

    def __init__(self, release, limit: int, stats):
        if limit < 0:
            raise ValueError("the hold limit must be >= 0")
        self.release = release  # the device's rx_release
        self.limit = limit
        self.stats = stats
        self.current = None  # the frame being delivered (set by the stack's poll), else None
        self.in_round = False  # inside a poll round: frames freed now go back with the burst
        self._refs: dict = {}  # id(frame) -> [frame, views of it held]
        self._owners: dict = {}  # id(buffer) -> a receive buffer holding frames (``held`` > 0)
        self._pending: list = []  # frames freed during the round

    @property
    def held(self) -> int:
        """Frames held now."""
        return len(self._refs)

    def take(self, owner):
        """Hold the frame being delivered for one view kept by ``owner``; the frame, or None (copy then)."""
        frame = self.current
        if frame is None:
            return None
        refs = self._refs
        entry = refs.get(id(frame))
        if entry is None:
            if len(refs) >= self.limit:
                if self._owners:
                    self.reclaim()
                if len(refs) >= self.limit:
                    self.stats.inc("rx_hold.copied")
                    return None
            refs[id(frame)] = [frame, 1]
        else:
            entry[1] += 1
        owner.held += 1
        self._owners[id(owner)] = owner
        return frame

    def take_again(self, frame, owner) -> None:
        """One more view of a frame already held (a chunk split between the buffer and a lender)."""
        self._refs[id(frame)][1] += 1
        owner.held += 1

    def drop(self, frames: list, owner) -> None:
        """``owner`` no longer keeps views of ``frames`` (one entry per view taken)."""
        refs = self._refs
        freed = []
        for frame in frames:
            entry = refs.get(id(frame))
            if entry is None:
                continue
            entry[1] -= 1
            if entry[1] <= 0:
                del refs[id(frame)]
                freed.append(frame)
        owner.held -= len(frames)
        if owner.held <= 0:
            owner.held = 0
            self._owners.pop(id(owner), None)
        if freed:
            if self.in_round:
                self._pending.extend(freed)
            else:
                self.release(freed)

    def reclaim(self) -> None:
        """Every receive buffer copies out the bytes it holds in frames (not those lent to the application)."""
        self.stats.inc("rx_hold.reclaims")
        for owner in list(self._owners.values()):
            owner.copy_out()

    def unheld(self, frames: list) -> list:
        """End of a round: the burst's frames nobody holds, plus those freed during the round."""
        refs = self._refs
        out = [f for f in frames if id(f) not in refs] if refs else list(frames)
        if self._pending:
            out.extend(self._pending)
            self._pending = []
        return out
