"""What the in-memory devices share (``pipe``, ``loopback``): lent TX slots, a wake-up pipe, close.

A ``MemoryDevice`` lends writable slots from a pool (``tx_reserve``), copies
the committed ones out as ``bytes`` (``_committed``, lengths checked) and
takes them back for the next burst. Its ``fileno()`` is the read end of an
os.pipe that is readable while frames wait: the subclass ``_signal``s under
its lock when it queues a frame and ``_drain_signal``s under the same lock
when its queue has nothing deliverable, so a Driver sleeping in poll(2)
wakes when another thread sends. The fds go when the device is closed or
garbage-collected, whichever comes first.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Sequence

from ustack.device import Capabilities


def _close_fds(*fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class MemoryDevice:
    """The Device protocol's plumbing for a link in memory; a subclass adds ``rx_burst``,
    ``tx_commit`` (over ``_committed``) and ``poll_at``."""

    closed_error = "device is closed"  # tx_commit's OSError after close()

    def __init__(self, capabilities: Capabilities, counters: dict, *, slots: int = 0):
        self.capabilities = capabilities
        self.counters = counters
        self._lock = threading.Lock()  # senders and the poller may be in different threads
        # TX slots: writable views over frame buffers, made once (``slots`` ahead) and lent again and again.
        self._pool = [memoryview(bytearray(capabilities.frame_size)) for _ in range(slots)]
        self._reserved: list[memoryview] = []
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self._release_fds = weakref.finalize(self, _close_fds, self._rfd, self._wfd)
        self._signalled = False
        self.closed = False

    # -- Device protocol ---------------------------------------------------
    def rx_release(self, frames: Sequence[memoryview]) -> None:
        for f in frames:
            f.release()

    def tx_reserve(self, n: int) -> list[memoryview]:
        pool = self._pool
        while len(pool) < n:
            pool.append(memoryview(bytearray(self.capabilities.frame_size)))
        reserved = self._reserved = pool[len(pool) - n:] if n else []
        del pool[len(pool) - len(reserved):]
        return list(reserved)

    def fileno(self) -> int:
        return self._rfd

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._release_fds()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- for the subclass --------------------------------------------------
    def _committed(self, lengths: Sequence[int]) -> list[bytes]:
        """The first ``len(lengths)`` reserved slots as frames (copies); every slot goes back to the pool."""
        if self.closed:
            raise OSError(self.closed_error)
        reserved = self._reserved
        if len(lengths) > len(reserved):
            raise ValueError("committing more slots than were reserved")
        frames = []
        for buf, length in zip(reserved, lengths):
            if not 0 < length <= len(buf):
                raise ValueError(f"bad frame length {length}")
            frames.append(bytes(buf[:length]))
        self._pool.extend(reserved)
        self._reserved = []
        return frames

    def _signal(self) -> None:
        """Under ``_lock``, after queueing a frame: make the fd readable. Written under the lock that
        ``_drain_signal`` runs under: written after it, a drain in between could clear ``_signalled``
        first and leave the late byte in the pipe for good (an fd readable forever, a poller spinning)."""
        if not self._signalled and not self.closed:
            self._signalled = True
            try:
                os.write(self._wfd, b"\0")
            except BlockingIOError:
                pass

    def _drain_signal(self) -> None:
        """Under ``_lock``, when nothing is deliverable: make the fd unreadable again."""
        if self._signalled and not self.closed:
            self._signalled = False
            try:
                while os.read(self._rfd, 4096):
                    pass
            except BlockingIOError:
                pass
