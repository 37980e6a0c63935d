"""The receive buffer: in-order bytes waiting for the user, plus out-of-order reassembly.

Positions are relative to RCV.NXT (the end of the in-order bytes): the
connection trims each segment to the receive window and calls
``write(offset, data)`` with ``offset = seq - rcv_nxt``. Out-of-order
pieces are kept as a sorted list of non-overlapping, merged runs, so
duplicates and overlaps cost no memory; the window bounds the bytes held
and ``max_runs`` bounds the number of runs (a segment that would create
one more run past the bound is dropped, and the peer retransmits it).

In-order bytes are a queue of chunks (``_fastpath.ChunkQueue``, in C),
each a view: into an RX frame the buffer holds (``append``: no copy, see
``ustack.rxhold``), or into memory of the buffer's own (a copy). ``read``
and ``read_into`` copy each byte once, out of the chunk; ``lend`` hands
the chunks themselves to the application (``recv_views``), whose bytes
keep counting against the window (``lent``) until ``unlend``.
"""

from __future__ import annotations

from heapq import nlargest
from operator import itemgetter

from ustack._fastpath import ChunkQueue

_STAMP = itemgetter(2)


class ReceiveBuffer:
    __slots__ = ("capacity", "max_runs", "_chunks", "_runs", "ooo_bytes", "last_run", "lent", "append", "_tick")

    def __init__(self, capacity: int, max_runs: int = 256):
        if capacity <= 0:
            raise ValueError("receive buffer capacity must be positive")
        self.capacity = capacity
        self.max_runs = max_runs
        self._chunks = ChunkQueue()  # in order, not yet read by the user
        # [[start, bytearray, stamp]] sorted, disjoint, start > 0 (relative to RCV.NXT); ``stamp`` orders
        # the runs by their latest change, for SACK (``recent``)
        self._runs: list = []
        self._tick = 0
        self.ooo_bytes = 0
        self.last_run = None  # start of the run the most recent out-of-order segment joined (for SACK)
        self.lent = 0  # bytes lent to the application (``lend``) and not yet given back
        # append(data): in-order bytes at RCV.NXT (the fast path's segment, or the in-order part of a
        # slow one), kept as a view into the RX frame being delivered when the hold takes it, else
        # copied; the C queue's own method, so the fast path's call runs no Python frame
        self.append = self._chunks.append

    def __len__(self) -> int:
        """Bytes ready for the user."""
        return self._chunks.nbytes

    @property
    def free(self) -> int:
        """Room left for in-order data: the basis of the receive window (lent bytes still count)."""
        return max(0, self.capacity - self._chunks.nbytes - self.lent)

    @property
    def hold(self):
        """The stack's RxHold (frames kept past their round), or None: every byte is copied in."""
        return self._chunks.hold

    @hold.setter
    def hold(self, hold) -> None:
        self._chunks.hold = hold

    @property
    def held(self) -> int:
        """Views of held frames this buffer keeps (its chunks and the views it lent)."""
        return self._chunks.held

    def write(self, offset: int, data) -> int:
        """Store ``data`` at ``offset`` bytes past RCV.NXT; returns how far RCV.NXT advances.

        Returns -1 when an out-of-order segment was dropped because the run
        limit was reached.
        """
        if not data:
            return 0
        if offset > 0:
            return 0 if self._insert(offset, data) else -1
        if offset < 0:  # the caller trims, but be safe
            data = memoryview(data)[-offset:]
            if not data:
                return 0
        chunks = self._chunks
        before = chunks.nbytes
        self.append(data)
        advanced = len(data)
        runs = self._runs
        if runs:
            # Slide the runs down by what was appended and absorb those now reached.
            shift = advanced
            while runs and runs[0][0] <= shift:
                start, run, _ = runs.pop(0)
                self.ooo_bytes -= len(run)
                skip = shift - start
                if skip < len(run):
                    chunks.push(memoryview(run)[skip:], None)  # the run is no longer ours to change
                    shift += len(run) - skip
            for r in runs:
                r[0] -= shift
            advanced = chunks.nbytes - before
            if self.last_run is not None:
                self.last_run -= shift
                if self.last_run <= 0:
                    self.last_run = None
        return advanced

    def _insert(self, offset: int, data) -> bool:
        end = offset + len(data)
        runs = self._runs
        self._tick = tick = self._tick + 1
        # find the first run that ends at or after offset (could overlap or touch)
        i = 0
        while i < len(runs) and runs[i][0] + len(runs[i][1]) < offset:
            i += 1
        j = i
        while j < len(runs) and runs[j][0] <= end:
            j += 1
        if i == j:  # no overlap or contact: a new run
            if len(runs) >= self.max_runs:
                return False
            runs.insert(i, [offset, bytearray(data), tick])
            self.ooo_bytes += len(data)
            self.last_run = offset
            return True
        run_start, run, _ = runs[i]
        if j == i + 1 and run_start <= offset:
            # Within or past the end of one run, the common case (the next segment above a hole):
            # extend it in place, amortised O(len(data)), instead of copying the whole run again.
            tail = end - run_start - len(run)
            if tail > 0:
                run += memoryview(data)[len(data) - tail:]
                self.ooo_bytes += tail
            runs[i][2] = tick
            self.last_run = run_start
            return True
        # merge data with runs[i:j]
        start = min(offset, runs[i][0])
        last_start, last, _ = runs[j - 1]
        stop = max(end, last_start + len(last))
        merged = bytearray(stop - start)
        for s, r, _ in runs[i:j]:
            merged[s - start : s - start + len(r)] = r
            self.ooo_bytes -= len(r)
        merged[offset - start : end - start] = data
        runs[i:j] = [[start, merged, tick]]
        self.ooo_bytes += len(merged)
        self.last_run = start
        return True

    def holds(self, offset: int, n: int) -> bool:
        """Bytes [offset, offset + n) past RCV.NXT are all held out of order already (a duplicate)."""
        end = offset + n
        for s, r, _ in self._runs:
            if s <= offset and end <= s + len(r):
                return True
            if s > offset:
                break
        return False

    def runs(self) -> list:
        """Out-of-order runs as ``(start, end)`` offsets past RCV.NXT."""
        return [(s, s + len(r)) for s, r, _ in self._runs]

    def recent(self, n: int) -> list:
        """The ``n`` out-of-order runs changed most recently, latest first, as ``(start, end)`` offsets
        past RCV.NXT: what SACK reports (RFC 2018 4: the block of the segment that triggered the ACK
        first, then the most recently reported ones; a run that changed is reported again)."""
        runs = self._runs
        if len(runs) > n:
            runs = nlargest(n, runs, key=_STAMP)
        elif len(runs) > 1:
            runs = sorted(runs, key=_STAMP, reverse=True)
        return [(s, s + len(r)) for s, r, _ in runs]

    @property
    def tick(self) -> int:
        """The stamp of the latest change to the out-of-order runs (0 before any)."""
        return self._tick

    def changed_since(self, tick: int) -> list:
        """The runs changed after stamp ``tick``, oldest change first, as ``(start, end, stamp)``."""
        changed = [(s, s + len(r), t) for s, r, t in self._runs if t > tick]
        if len(changed) > 1:
            changed.sort(key=_STAMP)
        return changed

    def peek(self, n: int) -> bytes:
        """The first ``n`` in-order bytes, left in place (MSG_PEEK)."""
        return self._chunks.peek(n)

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes, copied once out of the chunks."""
        return self._chunks.read(n)

    def read_into(self, buf) -> int:
        """Copy up to ``len(buf)`` bytes straight out of the chunks into ``buf``."""
        return self._chunks.read_into(buf)

    def lend(self, n: int) -> tuple:
        """Up to ``n`` bytes handed out without a copy: (views, frames held for them, bytes). The views
        are slices of the chunks; the bytes keep counting against the window until ``unlend``."""
        views, frames = [], []
        n = self._chunks.lend(n, views, frames)
        self.lent += n
        return views, frames, n

    def unlend(self, nbytes: int, frames: list) -> None:
        """The application gave back lent views: their bytes and frames."""
        self.lent = max(0, self.lent - nbytes)
        if frames:
            self._chunks.unlend(frames)

    def copy_out(self) -> None:
        """Replace views into held frames by copies of their bytes (the hold's bound was reached)."""
        self._chunks.copy_out()

    def clear(self) -> None:
        """Drop every byte held (lent views stay the application's until it gives them back)."""
        self._chunks.clear()
        self._runs = []
        self.ooo_bytes = 0
        self.last_run = None


class LentViews:
    """Bytes lent by ``recv_views``: ``views`` (memoryviews, in order, ``nbytes`` in all) into RX frames
    or the receive buffer's own memory. Read them, then ``release()`` (or leave a ``with`` block):
    the frames go back to the device and the window opens. Views are unusable after the release;
    a slice of one (or a buffer taken from it) still reads its bytes, and keeps its frame held until
    it is gone (``RxHold.outliving``, ``rx_hold.lent_outliving``; see ``_fp_rxq.pxi``)."""

    __slots__ = ("views", "nbytes", "frames", "_give_back")

    def __init__(self, views: list, frames: list, nbytes: int, give_back):
        self.views = views
        self.nbytes = nbytes
        self.frames = frames  # one entry per view of a held frame (RxHold's references)
        self._give_back = give_back  # called once with this object when released

    def __len__(self) -> int:
        return self.nbytes

    def __iter__(self):
        return iter(self.views)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def tobytes(self) -> bytes:
        """A copy of the lent bytes (for convenience; the point of lending is not to need it)."""
        return b"".join(self.views)

    @property
    def released(self) -> bool:
        return self._give_back is None

    def release(self) -> None:
        """Give the views back (a second call does nothing)."""
        give_back, self._give_back = self._give_back, None
        if give_back is None:
            return
        for view in self.views:
            try:
                view.release()
            except BufferError:
                pass  # re-exported by the application: the frame stays held until that buffer goes
        give_back(self)
