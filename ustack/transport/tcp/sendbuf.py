"""The send buffer: bytes the user wrote, from SND.UNA onward (sent-unacknowledged, then unsent).

Offset 0 is the first unacknowledged data byte; the connection maps
sequence numbers to offsets (``seq - snd_una``). ``acknowledge(n)`` drops
the first ``n`` bytes. CPython's bytearray deletes from the front in O(1)
(it moves its start pointer), so acknowledging costs nothing per byte.
"""

from __future__ import annotations


class SendBuffer:
    __slots__ = ("capacity", "_data")

    def __init__(self, capacity: int):
        if capacity <= 0:
            raise ValueError("send buffer capacity must be positive")
        self.capacity = capacity
        self._data = bytearray()

    def __len__(self) -> int:
        return len(self._data)

    @property
    def free(self) -> int:
        return max(0, self.capacity - len(self._data))

    def write(self, data) -> int:
        """Append as much of ``data`` as fits; returns the number of bytes taken."""
        n = min(len(data), self.capacity - len(self._data))
        if n <= 0:
            return 0
        if n == len(data):
            self._data += data
        else:
            self._data += memoryview(data)[:n]
        return n

    def peek(self, offset: int, n: int) -> bytes:
        """A copy of ``n`` bytes starting ``offset`` bytes after SND.UNA."""
        return bytes(self._data[offset : offset + n])

    def acknowledge(self, n: int) -> None:
        """The first ``n`` bytes were acknowledged by the peer."""
        del self._data[:n]

    def clear(self) -> None:
        self._data = bytearray()
