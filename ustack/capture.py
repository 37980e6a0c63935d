"""Packet capture: a Device decorator that writes every frame in and out to a pcap file.

``PcapDevice(inner, path, clock)`` implements the Device protocol around
``inner``. Frames are stamped with the stack's clock (so a capture from a
ManualClock run shows simulated time) at nanosecond resolution (pcap magic
0xa1b23c4d); ``scapy.rdpcap`` and ``tcpdump -r`` read the file. Frames longer
than ``snaplen`` are truncated in the file (orig_len keeps the real length).
The file is written by ``ustack.pcap.PcapWriter`` as frames pass, buffered;
the buffer is flushed when ``flush_interval`` seconds of stack time have
passed since the last flush (so ``ustack trace --follow`` sees a live
capture), on ``flush()`` and on ``close()``.

The file is private (0600) and new: an existing file is refused unless
``overwrite`` (then replaced, never truncated), a symlink at ``path`` is refused, and
``max_bytes`` caps its size (``records_dropped`` counts what the cap kept
out; see ``ustack.pcap.PcapWriter``).

``dissect(path)`` returns scapy packets for debugging and tests.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from ustack.device import Device, DeviceWrapper
from ustack.pcap import DEFAULT_SNAPLEN, PcapWriter


class PcapDevice(DeviceWrapper):
    """Capture decorator: same protocol as the device it wraps."""

    def __init__(self, inner: Device, path: str, clock: Callable[[], float], snaplen: int = DEFAULT_SNAPLEN,
                 max_bytes: Optional[int] = None, overwrite: bool = False):
        super().__init__(inner)
        self.clock = clock
        self.writer = PcapWriter(path, snaplen, max_bytes=max_bytes, overwrite=overwrite)
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

    @property
    def records_dropped(self) -> int:
        """Frames not written because the file reached ``max_bytes``."""
        return self.writer.records_dropped

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
        self.inner.close()


def dissect(path: str):
    """The capture as scapy packets (scapy is imported lazily: it is slow to import)."""
    from scapy.utils import rdpcap

    return rdpcap(path)
