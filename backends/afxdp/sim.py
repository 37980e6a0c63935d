"""A software stand-in for the kernel's side of the AF_XDP rings.

For tests and the ring-loop benchmark, without privileges: four rings in
bytearrays laid out like the kernel's mappings (producer, consumer, flags,
descriptors), a bytearray UMEM, and an XskDataPath over them (``fd=-1``: no
syscalls). The SimKernel plays the kernel: it takes addresses from the fill
ring and produces RX descriptors (splitting a long frame into XDP_PKT_CONTD
pieces as multi-buffer does), consumes TX descriptors and posts their
addresses on the completion ring, and can write any raw descriptor or index
to check how the data path copes with a misbehaving peer.
"""

from __future__ import annotations

import struct

from ustack._fastpath import XskDataPath, XskRing

PRODUCER, CONSUMER, FLAGS, DESCS = 0, 64, 128, 192
XDP_RING_NEED_WAKEUP = 1
XDP_PKT_CONTD = 1
XDP_PACKET_HEADROOM = 256
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_DESC = struct.Struct("<QII")


class SimRing:
    """One ring's memory; the kernel side's indices are read and written here."""

    def __init__(self, size: int, desc_size: int):
        self.size = size
        self.desc_size = desc_size
        self.mem = bytearray(DESCS + size * desc_size)
        self.ring = XskRing(self.mem, PRODUCER, CONSUMER, DESCS, FLAGS, size, desc_size)

    def _get(self, off: int) -> int:
        return _U32.unpack_from(self.mem, off)[0]

    def _set(self, off: int, value: int) -> None:
        _U32.pack_into(self.mem, off, value & 0xFFFFFFFF)

    producer = property(lambda self: self._get(PRODUCER), lambda self, v: self._set(PRODUCER, v))
    consumer = property(lambda self: self._get(CONSUMER), lambda self, v: self._set(CONSUMER, v))
    flags = property(lambda self: self._get(FLAGS), lambda self, v: self._set(FLAGS, v))

    def pending(self) -> int:
        return (self.producer - self.consumer) & 0xFFFFFFFF

    def free(self) -> int:
        return self.size - self.pending()

    def _slot(self, idx: int) -> int:
        return DESCS + (idx & (self.size - 1)) * self.desc_size

    # kernel as consumer (fill, tx)
    def take_addrs(self, n: int) -> list[int]:
        n = min(n, self.pending())
        cons = self.consumer
        out = [_U64.unpack_from(self.mem, self._slot(cons + i))[0] for i in range(n)]
        self.consumer = cons + n
        return out

    def take_descs(self, n: int) -> list[tuple[int, int, int]]:
        n = min(n, self.pending())
        cons = self.consumer
        out = [_DESC.unpack_from(self.mem, self._slot(cons + i)) for i in range(n)]
        self.consumer = cons + n
        return out

    # kernel as producer (rx, completion)
    def put_addrs(self, addrs) -> None:
        prod = self.producer
        for i, a in enumerate(addrs):
            _U64.pack_into(self.mem, self._slot(prod + i), a)
        self.producer = prod + len(addrs)

    def put_descs(self, descs) -> None:
        prod = self.producer
        for i, (addr, length, options) in enumerate(descs):
            _DESC.pack_into(self.mem, self._slot(prod + i), addr, length, options)
        self.producer = prod + len(descs)


class SimKernel:
    """The kernel side of one AF_XDP socket, with the XskDataPath under test as ``path``."""

    def __init__(self, *, frame_size: int = 4096, num_frames: int = 64, ring_size: int = 32,
                 slot_frames: int = 1, sg: bool = False, need_wakeup: bool = True,
                 max_frame: int = 65535 + 18):
        self.frame_size = frame_size
        self.rx_frames = num_frames // 2
        tx_frames = num_frames - self.rx_frames
        self.tx_slots = tx_frames // slot_frames
        self.umem = bytearray(frame_size * num_frames)
        fill_size = max(ring_size, _pow2(self.rx_frames))
        comp_size = max(ring_size, _pow2(tx_frames))
        self.rx = SimRing(ring_size, 16)
        self.tx = SimRing(ring_size, 16)
        self.fill = SimRing(fill_size, 8)
        self.comp = SimRing(comp_size, 8)
        self.path = XskDataPath(
            self.umem, frame_size, self.rx.ring, self.tx.ring, self.fill.ring, self.comp.ring, -1,
            rx_frames=self.rx_frames, tx_slots=self.tx_slots, slot_frames=slot_frames,
            need_wakeup=need_wakeup, sg=sg, max_frame=max_frame,
        )
        self.sg = sg
        self.spare: list[int] = []  # fill addresses taken but not used yet

    def receive(self, frame: bytes, headroom: int = XDP_PACKET_HEADROOM) -> bool:
        """Deliver one frame as the kernel would; False when no fill buffer or RX slot is free."""
        room = self.frame_size - headroom
        pieces = [frame[i:i + room] for i in range(0, len(frame), room)] or [b""]
        if len(pieces) > 1 and not self.sg:
            return False
        need = len(pieces) - len(self.spare)
        if need > 0:
            self.spare += self.fill.take_addrs(need)
        if len(self.spare) < len(pieces) or self.rx.free() < len(pieces):
            return False
        descs = []
        for i, piece in enumerate(pieces):
            base = self.spare.pop(0)
            addr = base + headroom
            self.umem[addr:addr + len(piece)] = piece
            descs.append((addr, len(piece), XDP_PKT_CONTD if i < len(pieces) - 1 else 0))
        self.rx.put_descs(descs)
        return True

    def transmit(self, complete: bool = True) -> list[bytes]:
        """Take every posted TX descriptor; return the frames (pieces joined)."""
        frames, current = [], b""
        descs = self.tx.take_descs(self.tx.pending())
        for addr, length, options in descs:
            current += bytes(self.umem[addr:addr + length])
            if not options & XDP_PKT_CONTD:
                frames.append(current)
                current = b""
        if complete:
            self.comp.put_addrs([addr for addr, _, _ in descs])
        self.last_tx_descs = descs
        return frames


def _pow2(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p
