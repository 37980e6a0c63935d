"""The pipe backend: an in-memory Ethernet link between two stacks in one process.

``PipeLink(clock, seed=...)`` has two ends, ``.a`` and ``.b``; each is a
Device. Frames committed on one end arrive on the other after ``delay``
(+ uniform ``jitter``) seconds of the given clock, subject to seeded
impairments: loss, duplication, reordering (an extra delay for a fraction of
frames), corruption (one byte flipped) — all drawn from one
``random.Random(seed)`` so a run is reproducible. No privileges needed.

A pipe end's ``fileno()`` is the read end of an os.pipe that becomes readable
when a frame is committed toward it, so blocking waits and selectors work;
``poll_at()`` tells when the next delayed frame becomes deliverable.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import weakref
from typing import Callable, Optional, Sequence

from ustack.backends.impair import Impairment
from ustack.device import Capabilities


def _close_fds(*fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class PipeEnd:
    """One end of a PipeLink: implements the Device protocol."""

    def __init__(self, link: "PipeLink", mac: bytes, name: str):
        self.link = link
        self.name = name
        mtu = link.mtu
        self.capabilities = Capabilities(
            mac=mac,
            mtu=mtu,
            max_burst=64,
            frame_size=mtu + 18,
            mode="pipe (in-memory, seeded impairment)",
        )
        self.peer: Optional[PipeEnd] = None
        self._arrivals: list = []  # heap of (deliver_at, seq, frame bytes)
        self._lock = threading.Lock()  # the two ends may be driven from two threads
        # TX slots: writable views over frame buffers, made once and lent again and again.
        self._pool = [memoryview(bytearray(mtu + 18)) for _ in range(64)]
        self._reserved: list[memoryview] = []
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        # The fds go when the end is closed or garbage-collected, whichever comes first.
        self._release_fds = weakref.finalize(self, _close_fds, self._rfd, self._wfd)
        self._signalled = False
        self.closed = False
        self.counters = {"tx": 0, "rx": 0, "lost": 0, "duplicated": 0, "reordered": 0, "corrupted": 0}

    # -- Device protocol ---------------------------------------------------
    def rx_burst(self, max_frames: int) -> list[memoryview]:
        now = self.link.clock()
        arrivals = self._arrivals
        out = []
        with self._lock:
            while arrivals and len(out) < max_frames and arrivals[0][0] <= now:
                out.append(memoryview(heapq.heappop(arrivals)[2]))
            if not arrivals or arrivals[0][0] > now:
                self._drain_signal()
        self.counters["rx"] += len(out)
        return out

    def rx_release(self, frames: Sequence[memoryview]) -> None:
        for f in frames:
            f.release()

    def tx_reserve(self, n: int) -> list[memoryview]:
        pool = self._pool
        while len(pool) < n:
            pool.append(memoryview(bytearray(self.capabilities.frame_size)))
        reserved = self._reserved = pool[-n:] if n else []
        del pool[len(pool) - len(reserved):]
        return list(reserved)

    def tx_commit(self, lengths: Sequence[int]) -> None:
        if self.closed:
            raise OSError("pipe end is closed")
        reserved = self._reserved
        if len(lengths) > len(reserved):
            raise ValueError("committing more slots than were reserved")
        for buf, length in zip(reserved, lengths):
            if not 0 < length <= len(buf):
                raise ValueError(f"bad frame length {length}")
            self.link._carry(self, bytes(buf[:length]))
        self.counters["tx"] += len(lengths)
        self._pool.extend(reserved)
        self._reserved = []

    def fileno(self) -> int:
        return self._rfd

    def poll_at(self) -> Optional[float]:
        """When the next queued frame becomes deliverable (None if none queued)."""
        return self._arrivals[0][0] if self._arrivals else None

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._release_fds()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- link side -----------------------------------------------------------
    def _deliver(self, when: float, frame: bytes) -> None:
        # The signal byte is written under the lock that rx_burst drains under: written after
        # the lock, a drain in between could clear ``_signalled`` first and leave the late byte
        # in the pipe for good (an fd readable forever, a poller spinning).
        with self._lock:
            heapq.heappush(self._arrivals, (when, next(self.link._seq), frame))
            if not self._signalled and not self.closed:
                self._signalled = True
                try:
                    os.write(self._wfd, b"\0")
                except BlockingIOError:
                    pass

    def _drain_signal(self) -> None:
        if self._signalled and not self.closed:
            self._signalled = False
            try:
                while os.read(self._rfd, 4096):
                    pass
            except BlockingIOError:
                pass


class PipeLink:
    """Two PipeEnds joined by a seeded, impairable in-memory wire."""

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        seed: int = 0,
        mtu: int = 1500,
        delay: float = 0.0,
        jitter: float = 0.0,
        loss: float = 0.0,
        duplicate: float = 0.0,
        reorder: float = 0.0,
        reorder_delay: float = 0.005,
        corrupt: float = 0.0,
        mac_a: bytes = b"\x02\x00\x00\x00\x00\x0a",
        mac_b: bytes = b"\x02\x00\x00\x00\x00\x0b",
    ):
        self.clock = clock
        self.mtu = mtu
        self.impairment = Impairment(seed=seed, loss=loss, duplicate=duplicate, reorder=reorder,
                                     reorder_delay=reorder_delay, corrupt=corrupt, delay=delay, jitter=jitter)
        self._seq = itertools.count()
        self.a = PipeEnd(self, mac_a, "a")
        self.b = PipeEnd(self, mac_b, "b")
        self.a.peer, self.b.peer = self.b, self.a

    def _carry(self, sender: PipeEnd, frame: bytes) -> None:
        imp = self.impairment
        before = dict(imp.counters)
        for when, data in imp.carry(frame, self.clock()):
            sender.peer._deliver(when, data)
        counters = sender.counters
        for name, n in imp.counters.items():
            counters[name] += n - before[name]

    def close(self) -> None:
        self.a.close()
        self.b.close()
