"""The loopback device: a link whose transmit side delivers to its own receive side (Linux's ``lo``).

``LoopbackDevice()`` implements the Device protocol for a Stack built with
``loopback=True`` (``ustack.net.loopback``: no ARP, no ND; 127.0.0.1/8 and
::1). Every committed frame is queued, in order, for the same device's next
``rx_burst``; nothing leaves the process. Like Linux's ``lo`` it is
lossless, its IP MTU is the largest an IPv4 datagram can be (65,535; Linux
says 65,536, which IPv4's total length cannot carry), and it tells the
stack that received checksums need no check (``rx_checksum_verified``: the
frames never left memory, as Linux marks loopback skbs CHECKSUM_UNNECESSARY).

``fileno()`` is the read end of an os.pipe that is readable while frames
wait, so a Driver sleeping in poll(2) wakes when another thread sends.
The queue holds at most ``max_queued`` frames; a commit beyond that is the
counted drop ``counters["overflow"]`` (Linux's ``lo`` drops at its backlog
too) and TCP recovers as on any link.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from typing import Optional, Sequence

from ustack.device import Capabilities

LOOPBACK_MAC = b"\x02\x00\x00\x00\x00\x01"  # locally administered; never seen outside the process
LOOPBACK_MTU = 65535
MAX_QUEUED = 4096


def _close_fds(*fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class LoopbackDevice:
    """A Device whose TX is its own RX (in memory, in order, lossless up to ``max_queued``)."""

    def __init__(self, *, mtu: int = LOOPBACK_MTU, max_burst: int = 64, max_queued: int = MAX_QUEUED):
        self.capabilities = Capabilities(mac=LOOPBACK_MAC, mtu=mtu, max_burst=max_burst, frame_size=mtu + 14,
                                         rx_checksum_verified=True, mode="loopback (in-memory, TX to own RX)")
        self.max_queued = max_queued
        self._queue: collections.deque = collections.deque()
        self._lock = threading.Lock()  # senders in several threads, one poller
        self._pool: list[memoryview] = []
        self._reserved: list[memoryview] = []
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self._release_fds = weakref.finalize(self, _close_fds, self._rfd, self._wfd)
        self._signalled = False
        self.closed = False
        self.counters = {"tx": 0, "rx": 0, "overflow": 0}

    # -- Device protocol ---------------------------------------------------
    def rx_burst(self, max_frames: int) -> list[memoryview]:
        queue = self._queue
        out = []
        with self._lock:
            while queue and len(out) < max_frames:
                out.append(memoryview(queue.popleft()))
            if not queue and self._signalled:
                self._signalled = False
                try:
                    while os.read(self._rfd, 4096):
                        pass
                except BlockingIOError:
                    pass
        self.counters["rx"] += len(out)
        return out

    def rx_release(self, frames: Sequence[memoryview]) -> None:
        for f in frames:
            f.release()

    def tx_reserve(self, n: int) -> list[memoryview]:
        pool = self._pool
        size = self.capabilities.frame_size
        while len(pool) < n:
            pool.append(memoryview(bytearray(size)))
        reserved = self._reserved = pool[len(pool) - n:] if n else []
        del pool[len(pool) - len(reserved):]
        return list(reserved)

    def tx_commit(self, lengths: Sequence[int]) -> None:
        if self.closed:
            raise OSError("loopback device is closed")
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
        if not frames:
            return
        with self._lock:
            room = self.max_queued - len(self._queue)
            if room < len(frames):
                self.counters["overflow"] += len(frames) - max(room, 0)
                frames = frames[:max(room, 0)]
            self._queue.extend(frames)
            self.counters["tx"] += len(frames)
            if frames and not self._signalled:
                self._signalled = True
                try:
                    os.write(self._wfd, b"\0")
                except BlockingIOError:
                    pass

    def fileno(self) -> int:
        return self._rfd

    def poll_at(self) -> Optional[float]:
        return None  # frames are deliverable at once; the fd says when

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._release_fds()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
