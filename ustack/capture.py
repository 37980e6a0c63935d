"""Packet capture: a Device decorator that writes every frame in and out to a pcap file.

``PcapDevice(inner, path, clock)`` implements the Device protocol around
``inner``. Frames are stamped with the stack's clock (so a capture from a
ManualClock run shows simulated time) at nanosecond resolution (pcap magic
0xa1b23c4d); ``scapy.rdpcap`` and ``tcpdump -r`` read the file. Frames longer
than ``snaplen`` are truncated in the file (orig_len keeps the real length).
Writing happens as frames pass, buffered; the buffer is flushed when
``flush_interval`` seconds of stack time have passed since the last flush
(so ``ustack trace --follow`` sees a live capture), on ``flush()`` and on
``close()``.

``dissect(path)`` returns scapy packets for debugging and tests.
"""

from __future__ import annotations

import struct
from typing import Callable, Sequence

from ustack.device import Device, DeviceWrapper

PCAP_MAGIC_NS = 0xA1B23C4D
LINKTYPE_ETHERNET = 1
_GLOBAL = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")


class PcapWriter:
    def __init__(self, path: str, snaplen: int = 65535, flush_interval: float = 0.2):
        self.path = path
        self.snaplen = snaplen
        self.flush_interval = flush_interval
        self._flushed_at = None
        self.file = open(path, "wb", buffering=1 << 16)
        self.file.write(_GLOBAL.pack(PCAP_MAGIC_NS, 2, 4, 0, 0, snaplen, LINKTYPE_ETHERNET))
        self.frames = 0

    def write(self, when: float, frame) -> None:
        sec = int(when)
        nsec = int(round((when - sec) * 1e9))
        if nsec >= 1_000_000_000:
            sec, nsec = sec + 1, nsec - 1_000_000_000
        n = len(frame)
        cap = min(n, self.snaplen)
        self.file.write(_RECORD.pack(sec & 0xFFFFFFFF, nsec, cap, n))
        self.file.write(frame[:cap])
        self.frames += 1
        if self._flushed_at is None:
            self._flushed_at = when
        elif when - self._flushed_at >= self.flush_interval:
            self.file.flush()
            self._flushed_at = when

    def flush(self) -> None:
        if not self.file.closed:
            self.file.flush()

    def close(self) -> None:
        if not self.file.closed:
            self.file.close()


class PcapDevice(DeviceWrapper):
    """Capture decorator: same protocol as the device it wraps."""

    def __init__(self, inner: Device, path: str, clock: Callable[[], float], snaplen: int = 65535):
        super().__init__(inner)
        self.clock = clock
        self.writer = PcapWriter(path, snaplen)
        self._reserved: list = []

    def rx_burst(self, max_frames: int) -> list[memoryview]:
        frames = self.inner.rx_burst(max_frames)
        if frames:
            now = self.clock()
            for f in frames:
                self.writer.write(now, f)
        return frames

    def tx_reserve(self, n: int) -> list[memoryview]:
        self._reserved = self.inner.tx_reserve(n)
        return self._reserved

    def tx_commit(self, lengths: Sequence[int]) -> None:
        if lengths:
            now = self.clock()
            for slot, n in zip(self._reserved, lengths):
                self.writer.write(now, slot[:n])
        self._reserved = []
        self.inner.tx_commit(lengths)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
        self.inner.close()


def dissect(path: str):
    """The capture as scapy packets (scapy is imported lazily: it is slow to import)."""
    from scapy.utils import rdpcap

    return rdpcap(path)
