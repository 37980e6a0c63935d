"""The receive buffer: in-order bytes waiting for the user, plus out-of-order reassembly.

Positions are relative to RCV.NXT (the end of the in-order bytes): the
connection trims each segment to the receive window and calls
``write(offset, data)`` with ``offset = seq - rcv_nxt``. Out-of-order
pieces are kept as a sorted list of non-overlapping, merged runs, so
duplicates and overlaps cost no memory; the window bounds the bytes held
and ``max_runs`` bounds the number of runs (a segment that would create
one more run past the bound is dropped, and the peer retransmits it).

In-order bytes are a queue of chunks, each a view: into an RX frame the
buffer holds (``append``, the fast path's in-order segment: no copy, see
``ustack.rxhold``), or into memory of the buffer's own (a copy). ``read``
and ``read_into`` copy each byte once, out of the chunk; ``lend`` hands
the chunks themselves to the application (``recv_views``), whose bytes
keep counting against the window (``lent``) until ``unlend``.
"""

from __future__ import annotations

from collections import deque


class ReceiveBuffer:
    __slots__ = ("capacity", "max_runs", "_chunks", "_len", "_runs", "ooo_bytes", "last_run", "hold", "held", "lent")

    def __init__(self, capacity: int, max_runs: int = 256):
        if capacity <= 0:
            raise ValueError("receive buffer capacity must be positive")
        self.capacity = capacity
        self.max_runs = max_runs
        self._chunks: deque = deque()  # [view, frame or None]: in order, not yet read by the user
        self._len = 0  # bytes in _chunks
        self._runs: list = []  # [[start, bytearray]] sorted, disjoint, start > 0 (relative to RCV.NXT)
        self.ooo_bytes = 0
        self.last_run = None  # start of the run the most recent out-of-order segment joined (for SACK)
        self.hold = None  # the stack's RxHold (frames kept past their round), or None: always copy
        self.held = 0  # views of held frames this buffer keeps (chunks and lent ones), RxHold's count
        self.lent = 0  # bytes lent to the application (``lend``) and not yet given back

    def __len__(self) -> int:
        """Bytes ready for the user."""
        return self._len

    @property
    def free(self) -> int:
        """Room left for in-order data: the basis of the receive window (lent bytes still count)."""
        return max(0, self.capacity - self._len - self.lent)

    def append(self, data) -> None:
        """In-order bytes at RCV.NXT with nothing held out of order (the fast path's segment):
        kept as a view into the RX frame being delivered when the stack's hold takes it, else copied."""
        hold = self.hold
        frame = hold.take(self) if hold is not None else None
        if frame is None:
            self._chunks.append([memoryview(bytes(data)), None])
        else:
            self._chunks.append([memoryview(data).cast("B"), frame])
        self._len += len(data)

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
        before = self._len
        self.append(data)
        advanced = len(data)
        runs = self._runs
        if runs:
            # Slide the runs down by what was appended and absorb those now reached.
            shift = advanced
            while runs and runs[0][0] <= shift:
                start, run = runs.pop(0)
                self.ooo_bytes -= len(run)
                skip = shift - start
                if skip < len(run):
                    chunks.append([memoryview(run)[skip:], None])  # the run is no longer ours to change
                    self._len += len(run) - skip
                    shift += len(run) - skip
            for r in runs:
                r[0] -= shift
            advanced = self._len - before
            if self.last_run is not None:
                self.last_run -= shift
                if self.last_run <= 0:
                    self.last_run = None
        return advanced

    def _insert(self, offset: int, data) -> bool:
        end = offset + len(data)
        runs = self._runs
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
            runs.insert(i, [offset, bytearray(data)])
            self.ooo_bytes += len(data)
            self.last_run = offset
            return True
        # merge data with runs[i:j]
        start = min(offset, runs[i][0])
        last_start, last = runs[j - 1]
        stop = max(end, last_start + len(last))
        merged = bytearray(stop - start)
        for s, r in runs[i:j]:
            merged[s - start : s - start + len(r)] = r
            self.ooo_bytes -= len(r)
        merged[offset - start : end - start] = data
        runs[i:j] = [[start, merged]]
        self.ooo_bytes += len(merged)
        self.last_run = start
        return True

    def runs(self) -> list:
        """Out-of-order runs as ``(start, end)`` offsets past RCV.NXT."""
        return [(s, s + len(r)) for s, r in self._runs]

    def peek(self, n: int) -> bytes:
        """The first ``n`` in-order bytes, left in place (MSG_PEEK)."""
        out = []
        for view, _ in self._chunks:
            if n <= 0:
                break
            out.append(view[:n])
            n -= len(view)
        return b"".join(out)

    def _consume(self, n: int) -> None:
        """Forget the first ``n`` in-order bytes; frames no chunk needs any more go back."""
        chunks = self._chunks
        self._len -= n
        freed = []
        while n:
            chunk = chunks[0]
            view = chunk[0]
            if len(view) > n:
                chunk[0] = view[n:]
                break
            n -= len(view)
            chunks.popleft()
            if chunk[1] is not None:
                freed.append(chunk[1])
        if freed:
            self.hold.drop(freed, self)

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes, copied once out of the chunks."""
        n = min(n, self._len)
        if n <= 0:
            return b""
        first = self._chunks[0][0]
        data = bytes(first[:n]) if len(first) >= n else self.peek(n)
        self._consume(n)
        return data

    def read_into(self, buf) -> int:
        """Copy up to ``len(buf)`` bytes straight out of the chunks into ``buf``."""
        dst = memoryview(buf)
        n = min(len(dst), self._len)
        pos = 0
        for view, _ in self._chunks:
            k = min(len(view), n - pos)
            if k <= 0:
                break
            dst[pos : pos + k] = view[:k]
            pos += k
        self._consume(n)
        return n

    def lend(self, n: int) -> tuple:
        """Up to ``n`` bytes handed out without a copy: (views, frames held for them, bytes). The views
        are the chunks themselves; the bytes keep counting against the window until ``unlend``."""
        chunks = self._chunks
        n = min(n, self._len)
        views, frames = [], []
        left = n
        while left:
            chunk = chunks[0]
            view, frame = chunk
            if len(view) > left:
                views.append(view[:left])
                chunk[0] = view[left:]
                if frame is not None:
                    # the rest stays here: the frame gets one more holder, for the lent part
                    self.hold.take_again(frame, self)
                    frames.append(frame)
                break
            chunks.popleft()
            views.append(view)
            if frame is not None:
                frames.append(frame)
            left -= len(view)
        self._len -= n
        self.lent += n
        return views, frames, n

    def unlend(self, nbytes: int, frames: list) -> None:
        """The application gave back lent views: their bytes and frames."""
        self.lent = max(0, self.lent - nbytes)
        if frames:
            self.hold.drop(frames, self)

    def copy_out(self) -> None:
        """Replace views into held frames by copies of their bytes (the hold's bound was reached)."""
        freed = []
        for chunk in self._chunks:
            if chunk[1] is not None:
                freed.append(chunk[1])
                chunk[0] = memoryview(bytes(chunk[0]))
                chunk[1] = None
        if freed:
            self.hold.drop(freed, self)

    def clear(self) -> None:
        """Drop every byte held (lent views stay the application's until it gives them back)."""
        chunks = self._chunks
        freed = [frame for _, frame in chunks if frame is not None]
        self._chunks = deque()
        self._len = 0
        self._runs = []
        self.ooo_bytes = 0
        self.last_run = None
        if freed:
            self.hold.drop(freed, self)


class LentViews:
    """Bytes lent by ``recv_views``: ``views`` (memoryviews, in order, ``nbytes`` in all) into RX frames
    or the receive buffer's own memory. Read them, then ``release()`` (or leave a ``with`` block):
    the frames go back to the device and the window opens. Views are unusable after the release."""

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
                pass  # re-exported by the application: its problem once the frame is reused
        give_back(self)
