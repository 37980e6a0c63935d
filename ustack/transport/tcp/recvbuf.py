"""The receive buffer: in-order bytes waiting for the user, plus out-of-order reassembly.

Positions are relative to RCV.NXT (the end of the in-order bytes): the
connection trims each segment to the receive window and calls
``write(offset, data)`` with ``offset = seq - rcv_nxt``. Out-of-order
pieces are kept as a sorted list of non-overlapping, merged runs, so
duplicates and overlaps cost no memory; the window bounds the bytes held
and ``max_runs`` bounds the number of runs (a segment that would create
one more run past the bound is dropped, and the peer retransmits it).
"""

from __future__ import annotations


class ReceiveBuffer:
    __slots__ = ("capacity", "max_runs", "_data", "_runs", "ooo_bytes", "last_run")

    def __init__(self, capacity: int, max_runs: int = 256):
        if capacity <= 0:
            raise ValueError("receive buffer capacity must be positive")
        self.capacity = capacity
        self.max_runs = max_runs
        self._data = bytearray()  # in order, not yet read by the user
        self._runs: list = []  # [[start, bytearray]] sorted, disjoint, start > 0 (relative to RCV.NXT)
        self.ooo_bytes = 0
        self.last_run = None  # start of the run the most recent out-of-order segment joined (for SACK)

    def __len__(self) -> int:
        """Bytes ready for the user."""
        return len(self._data)

    @property
    def free(self) -> int:
        """Room left for in-order data: the basis of the receive window."""
        return max(0, self.capacity - len(self._data))

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
        before = len(self._data)
        self._data += data
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
                    self._data += memoryview(run)[skip:]
                    shift += len(run) - skip
            for r in runs:
                r[0] -= shift
            advanced = len(self._data) - before
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

    def holds(self, offset: int, n: int) -> bool:
        """Bytes [offset, offset + n) past RCV.NXT are all held out of order already (a duplicate)."""
        end = offset + n
        for s, r in self._runs:
            if s <= offset and end <= s + len(r):
                return True
            if s > offset:
                break
        return False

    def runs(self) -> list:
        """Out-of-order runs as ``(start, end)`` offsets past RCV.NXT."""
        return [(s, s + len(r)) for s, r in self._runs]

    def peek(self, n: int) -> bytes:
        """The first ``n`` in-order bytes, left in place (MSG_PEEK)."""
        return bytes(self._data[:n])

    def read(self, n: int) -> bytes:
        data = bytes(self._data[:n])
        del self._data[:n]
        return data

    def read_into(self, buf) -> int:
        n = min(len(buf), len(self._data))
        memoryview(buf)[:n] = self._data[:n]
        del self._data[:n]
        return n

    def clear(self) -> None:
        self._data = bytearray()
        self._runs = []
        self.ooo_bytes = 0
        self.last_run = None
