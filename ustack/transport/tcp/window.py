"""What every congestion control keeps: SMSS, cwnd and ssthresh, and the MSS rules (RFC 5681 3.1).

``congestion`` builds NewReno and CUBIC on ``Window``, ``bbr`` BBR; both import it from here.
"""

from __future__ import annotations

INFINITE_SSTHRESH = 1 << 30


def initial_window(mss: int) -> int:
    """RFC 5681 3.1 equation (3): IW by segment size."""
    if mss > 2190:
        return 2 * mss
    if mss > 1095:
        return 3 * mss
    return 4 * mss


class Window:
    """What every algorithm keeps: SMSS, cwnd and ssthresh, and the MSS rules (RFC 5681 3.1).

    Not a congestion control by itself: NewReno and CUBIC each add their
    own growth and decrease on top (loss recovery is apart, see ``recovery``).
    """

    __slots__ = ("mss", "cwnd", "ssthresh")

    def __init__(self, mss: int, cwnd: int | None = None, ssthresh: int | None = None):
        self.mss = mss
        self.cwnd = initial_window(mss) if cwnd is None else cwnd
        self.ssthresh = INFINITE_SSTHRESH if ssthresh is None else ssthresh  # 3.1: "arbitrarily high"

    @property
    def window(self) -> int:
        return self.cwnd

    def set_mss(self, mss: int) -> None:
        if self.ssthresh == INFINITE_SSTHRESH and self.cwnd == initial_window(self.mss):
            self.cwnd = initial_window(mss)
        self.mss = mss

    def lower_mss(self, mss: int) -> None:
        self.mss = mss

    def snapshot(self) -> tuple:
        """The state a loss response changes, kept so that a spurious one can be undone (RFC 3708, RFC 4015)."""
        return tuple(getattr(self, name) for name in self._undo_slots())

    def restore(self, snap: tuple) -> None:
        """Undo a spurious reduction: the window and threshold as they were (never lower than now)."""
        cwnd, ssthresh = self.cwnd, self.ssthresh
        for name, value in zip(self._undo_slots(), snap):
            setattr(self, name, value)
        self.cwnd = max(self.cwnd, cwnd)
        self.ssthresh = max(self.ssthresh, ssthresh)

    def _undo_slots(self) -> tuple:
        return ("cwnd", "ssthresh")

    def end_reduction(self, now: float) -> None:
        self.cwnd = self.ssthresh
