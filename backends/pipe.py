"""The pipe backend: an in-memory Ethernet link between two stacks in one process.

``PipeLink(clock, seed=...)`` has two ends, ``.a`` and ``.b``; each is a
Device. Frames committed on one end arrive on the other after ``delay``
(+ uniform ``jitter``) seconds of the given clock, subject to seeded
impairments: loss, duplication, reordering (an extra delay for a fraction of
frames), corruption (one byte flipped) — all drawn from one
``random.Random(seed)`` so a run is reproducible. No privileges needed.

A pipe end's ``fileno()`` is the read end of an os.pipe that becomes readable
when a frame is committed toward it, so blocking waits and selectors work
(``ustack.backends.memory``, shared with the loopback device);
``poll_at(now)`` tells when the next delayed frame becomes deliverable.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable, Optional

from ustack.backends.impair import Impairment
from ustack.backends.memory import MemoryDevice
from ustack.device import Capabilities


class PipeEnd(MemoryDevice):
    """One end of a PipeLink: implements the Device protocol."""

    closed_error = "pipe end is closed"

    def __init__(self, link: "PipeLink", mac: bytes, name: str):
        self.link = link
        self.name = name
        mtu = link.mtu
        super().__init__(Capabilities(mac=mac, mtu=mtu, max_burst=64, frame_size=mtu + 18,
                                      mode="pipe (in-memory, seeded impairment)"),
                         {"tx": 0, "rx": 0, "lost": 0, "duplicated": 0, "reordered": 0, "corrupted": 0}, slots=64)
        self.peer: Optional[PipeEnd] = None
        self._arrivals: list = []  # heap of (deliver_at, seq, frame bytes); _lock: the ends may run in two threads

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

    def tx_commit(self, lengths) -> None:
        for frame in self._committed(lengths):
            self.link._carry(self, frame)
        self.counters["tx"] += len(lengths)

    def poll_at(self, now: float) -> Optional[float]:
        """When the next queued frame becomes deliverable (None if none queued)."""
        return self._arrivals[0][0] if self._arrivals else None

    # -- link side -----------------------------------------------------------
    def _deliver(self, when: float, frame: bytes) -> None:
        with self._lock:
            heapq.heappush(self._arrivals, (when, next(self.link._seq), frame))
            self._signal()


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
