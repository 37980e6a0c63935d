"""The send buffer: bytes the user wrote, from SND.UNA onward (sent-unacknowledged, then unsent).

A ring of ``capacity`` bytes that never moves once allocated (it is made
at the first write and dropped when emptied by ``clear``), so views into
it stay valid:

- offset 0 is the first unacknowledged data byte; the connection maps
  sequence numbers to offsets (``seq - snd_una``); ``acknowledge(n)``
  moves the head past the first ``n`` bytes;
- ``peek(offset, n)`` lends a view of queued bytes to the segment writer,
  which copies it into a TX slot (the one copy on the way out); only a
  range that wraps the ring's end is joined into new bytes;
- ``reserve(n)`` lends a writable view of free space after the queued
  bytes (the zero-copy send: the application writes its data there) and
  ``commit(k)`` queues the first ``k`` bytes written, without a copy.
  ``write`` (``send``) copies the caller's bytes in: the other copy.

Changing ``capacity`` while bytes are queued moves them to a new ring
(views lent earlier keep the old one alive and unchanged).
"""

from __future__ import annotations


class SendBuffer:
    __slots__ = ("capacity", "_ring", "_head", "_len", "_reserved")

    def __init__(self, capacity: int):
        if capacity <= 0:
            raise ValueError("send buffer capacity must be positive")
        self.capacity = capacity
        self._ring = None  # bytearray(len == ring size) once something was written
        self._head = 0  # ring index of offset 0 (SND.UNA's byte)
        self._len = 0  # bytes queued
        self._reserved = None  # the view lent by reserve(), until commit()

    def __len__(self) -> int:
        return self._len

    @property
    def free(self) -> int:
        return max(0, self.capacity - self._len)

    def _ready(self) -> bytearray:
        """The ring, (re)made at ``capacity`` bytes; queued bytes keep their order."""
        ring = self._ring
        if ring is not None and len(ring) == self.capacity:
            return ring
        new = bytearray(max(self.capacity, self._len))
        if self._len:
            new[: self._len] = self._span(0, self._len)
        self._ring, self._head = new, 0
        return new

    def _span(self, offset: int, n: int):
        """``n`` bytes from ``offset``: a view when contiguous in the ring, else joined bytes."""
        ring = self._ring
        size = len(ring)
        start = (self._head + offset) % size
        end = start + n
        if end <= size:
            return memoryview(ring)[start:end]
        return bytes(memoryview(ring)[start:]) + bytes(memoryview(ring)[: end - size])

    def write(self, data) -> int:
        """Copy in as much of ``data`` as fits; returns the number of bytes taken."""
        if self._reserved is not None:
            raise BufferError("a reservation is outstanding: commit it first")
        n = min(len(data), self.capacity - self._len)
        if n <= 0:
            return 0
        ring = self._ready()
        size = len(ring)
        if not self._len:
            self._head = 0  # empty: start at the ring's beginning, the longest contiguous room
        tail = (self._head + self._len) % size
        first = min(n, size - tail)
        src = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
        ring[tail : tail + first] = src[:first]
        if first < n:
            ring[: n - first] = src[first:n]
        self._len += n
        return n

    def peek(self, offset: int, n: int):
        """``n`` bytes starting ``offset`` bytes after SND.UNA: a view into the ring (valid until those
        bytes are acknowledged), or new bytes when the range wraps the ring's end."""
        if n <= 0 or self._ring is None:
            return b""
        n = min(n, self._len - offset)
        if n <= 0:
            return b""
        return self._span(offset, n)

    def acknowledge(self, n: int) -> None:
        """The first ``n`` bytes were acknowledged by the peer."""
        n = min(n, self._len)
        if n <= 0:
            return
        self._len -= n
        self._head = (self._head + n) % len(self._ring) if self._len else 0

    # -- the zero-copy send ----------------------------------------------

    def reserve(self, n: int) -> memoryview:
        """A writable view of up to ``n`` free bytes right after the queued ones (contiguous, so it may
        be shorter than ``n``, and empty when the buffer is full). One reservation at a time."""
        if self._reserved is not None:
            raise BufferError("a reservation is outstanding: commit it first")
        n = min(n, self.capacity - self._len)
        if n <= 0:
            return memoryview(b"")  # read-only and empty: there is nothing to write into
        ring = self._ready()
        size = len(ring)
        if not self._len:
            self._head = 0
        tail = (self._head + self._len) % size
        end = self._head if tail < self._head else size
        view = memoryview(ring)[tail : tail + min(n, end - tail)]
        self._reserved = view
        return view

    def commit(self, n: int) -> int:
        """Queue the first ``n`` bytes of the reservation (the rest stays free); the view is released."""
        view = self._reserved
        if view is None:
            raise BufferError("nothing reserved")
        if not 0 <= n <= len(view):
            raise ValueError(f"commit of {n} bytes into a reservation of {len(view)}")
        self._reserved = None
        _release(view)
        self._len += n
        return n

    def cancel(self) -> None:
        """Give the reservation back without queueing anything."""
        view, self._reserved = self._reserved, None
        if view is not None:
            _release(view)

    @property
    def reserved(self) -> int:
        """Bytes of the outstanding reservation (0 without one)."""
        view = self._reserved
        return len(view) if view is not None else 0

    def clear(self) -> None:
        self.cancel()
        self._ring = None
        self._head = 0
        self._len = 0


def _release(view: memoryview) -> None:
    """Release a lent view; one the application re-exported stays usable, and harmless (the ring never moves)."""
    try:
        view.release()
    except BufferError:
        pass
