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
wait, so a Driver sleeping in poll(2) wakes when another thread sends
(``ustack.backends.memory``, shared with the pipe backend).
The queue holds at most ``max_queued`` frames; a commit beyond that is the
counted drop ``counters["overflow"]`` (Linux's ``lo`` drops at its backlog
too) and TCP recovers as on any link.
"""

from __future__ import annotations

import collections
from typing import Optional

from ustack.backends.memory import MemoryDevice
from ustack.device import Capabilities

LOOPBACK_MAC = b"\x02\x00\x00\x00\x00\x01"  # locally administered; never seen outside the process
LOOPBACK_MTU = 65535
MAX_QUEUED = 4096


class LoopbackDevice(MemoryDevice):
    """A Device whose TX is its own RX (in memory, in order, lossless up to ``max_queued``)."""

    closed_error = "loopback device is closed"

    def __init__(self, *, mtu: int = LOOPBACK_MTU, max_burst: int = 64, max_queued: int = MAX_QUEUED):
        super().__init__(Capabilities(mac=LOOPBACK_MAC, mtu=mtu, max_burst=max_burst, frame_size=mtu + 14,
                                      rx_checksum_verified=True, mode="loopback (in-memory, TX to own RX)"),
                         {"tx": 0, "rx": 0, "overflow": 0})
        self.max_queued = max_queued
        self._queue: collections.deque = collections.deque()  # _lock: senders in several threads, one poller

    # -- Device protocol ---------------------------------------------------
    def rx_burst(self, max_frames: int) -> list[memoryview]:
        queue = self._queue
        out = []
        with self._lock:
            while queue and len(out) < max_frames:
                out.append(memoryview(queue.popleft()))
            if not queue:
                self._drain_signal()
        self.counters["rx"] += len(out)
        return out

    def tx_commit(self, lengths) -> None:
        frames = self._committed(lengths)
        if not frames:
            return
        with self._lock:
            room = self.max_queued - len(self._queue)
            if room < len(frames):
                self.counters["overflow"] += len(frames) - max(room, 0)
                frames = frames[:max(room, 0)]
            self._queue.extend(frames)
            self.counters["tx"] += len(frames)
            if frames:
                self._signal()

    def poll_at(self, now: float) -> Optional[float]:
        return None  # frames are deliverable at once; the fd says when
