"""One AF_XDP socket: UMEM registration, the four rings mapped, bind.

The control plane only: the socket, an anonymous UMEM mapping registered
with XDP_UMEM_REG, ring sizes set with setsockopt, the rings mmap'd at the
page offsets of include/uapi/linux/if_xdp.h and the byte offsets the kernel
reports in XDP_MMAP_OFFSETS, and bind() with a packed struct sockaddr_xdp
(Python's socket module cannot express it, so libc's bind is called through
ctypes). The ring work itself is ustack._fastpath.XskRing / XskDataPath.

Teardown order matters: the ring mappings hold a reference on the socket, so
they are unmapped before the socket is closed -- otherwise the queue stays
bound and the next bind fails with EBUSY (FACTS.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import resource
import socket
import struct

from ustack._fastpath import XskRing

AF_XDP = getattr(socket, "AF_XDP", 44)
SOL_XDP = 283

# Socket options.
XDP_MMAP_OFFSETS = 1
XDP_RX_RING = 2
XDP_TX_RING = 3
XDP_UMEM_REG = 4
XDP_UMEM_FILL_RING = 5
XDP_UMEM_COMPLETION_RING = 6
XDP_STATISTICS = 7
XDP_OPTIONS = 8
XDP_MAX_TX_SKB_BUDGET = 9  # kernel >= 6.17: descriptors copy mode sends per sendto()

# sxdp_flags for bind.
XDP_SHARED_UMEM = 1 << 0
XDP_COPY = 1 << 1
XDP_ZEROCOPY = 1 << 2
XDP_USE_NEED_WAKEUP = 1 << 3
XDP_USE_SG = 1 << 4

XDP_OPTIONS_ZEROCOPY = 1 << 0

# mmap page offsets of the rings.
XDP_PGOFF_RX_RING = 0
XDP_PGOFF_TX_RING = 0x80000000
XDP_UMEM_PGOFF_FILL_RING = 0x100000000
XDP_UMEM_PGOFF_COMPLETION_RING = 0x180000000

STATISTICS_FIELDS = (
    "rx_dropped",
    "rx_invalid_descs",
    "tx_invalid_descs",
    "rx_ring_full",
    "rx_fill_ring_empty_descs",
    "tx_ring_empty_descs",
)


def _libc() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    lib.bind.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
    lib.bind.restype = ctypes.c_int
    return lib


_LIBC = _libc()  # a loaded library handle: constant after import


def raise_memlock(needed: int) -> tuple[int, int]:
    """Make RLIMIT_MEMLOCK at least ``needed`` bytes when permitted (unlimited if we may).

    Returns the (soft, hard) limit in force afterwards. Never raises: a limit
    that stays too small shows up as ENOBUFS from XDP_UMEM_REG (unless the
    process has CAP_IPC_LOCK, which exempts it from the limit).
    """
    infinity = resource.RLIM_INFINITY
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft == infinity or soft >= needed:
        return soft, hard
    # Locked memory is counted per user across all UMEMs, so ask for as much
    # as we may (like libbpf): unlimited needs CAP_SYS_RESOURCE, the hard limit
    # does not.
    wishes = [(infinity, infinity)]
    if hard == infinity or hard >= needed:
        wishes.append((hard, hard))
    for limits in wishes:
        try:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, limits)
            break
        except (ValueError, OSError):
            continue
    return resource.getrlimit(resource.RLIMIT_MEMLOCK)


class XskSocket:
    """An AF_XDP socket with its own UMEM and four rings (not yet bound)."""

    def __init__(self, *, frame_size: int, num_frames: int, rx_size: int, tx_size: int,
                 fill_size: int, comp_size: int):
        self.frame_size = frame_size
        self.num_frames = num_frames
        self.umem_size = frame_size * num_frames
        self.memlock = (0, 0)
        self.sock: socket.socket | None = None
        self.umem: mmap.mmap | None = None
        self._maps: list[mmap.mmap] = []
        self.rx = self.tx = self.fill = self.comp = None
        self.bound_flags = 0
        self.tx_budget = 32
        try:
            self.sock = socket.socket(AF_XDP, socket.SOCK_RAW, 0)
            self.umem = mmap.mmap(
                -1, self.umem_size, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0),
                mmap.PROT_READ | mmap.PROT_WRITE,
            )
            self._register_umem()
            self._setsockopt_int(XDP_UMEM_FILL_RING, fill_size)
            self._setsockopt_int(XDP_UMEM_COMPLETION_RING, comp_size)
            self._setsockopt_int(XDP_RX_RING, rx_size)
            self._setsockopt_int(XDP_TX_RING, tx_size)
            offsets = struct.unpack("16Q", self.sock.getsockopt(SOL_XDP, XDP_MMAP_OFFSETS, 128))
            self.rx = self._map_ring(offsets[0:4], XDP_PGOFF_RX_RING, rx_size, 16)
            self.tx = self._map_ring(offsets[4:8], XDP_PGOFF_TX_RING, tx_size, 16)
            self.fill = self._map_ring(offsets[8:12], XDP_UMEM_PGOFF_FILL_RING, fill_size, 8)
            self.comp = self._map_ring(offsets[12:16], XDP_UMEM_PGOFF_COMPLETION_RING, comp_size, 8)
            self.tx_budget = self._raise_tx_budget(tx_size)
        except BaseException:
            self.close()
            raise

    def _register_umem(self) -> None:
        self.memlock = raise_memlock(self.umem_size)
        buf = (ctypes.c_char * self.umem_size).from_buffer(self.umem)
        try:
            # struct xdp_umem_reg {u64 addr, len; u32 chunk_size, headroom, flags, tx_metadata_len}
            reg = struct.pack("QQIIII", ctypes.addressof(buf), self.umem_size, self.frame_size, 0, 0, 0)
        finally:
            del buf  # drop the export so the mapping can be closed later
        self.sock.setsockopt(SOL_XDP, XDP_UMEM_REG, reg)

    def _raise_tx_budget(self, tx_size: int) -> int:
        """Let one sendto() kick send a whole TX ring in copy mode (default: 32).

        Best effort: older kernels lack the option; then the data path kicks
        again while sendto() answers EAGAIN.
        """
        try:
            self._setsockopt_int(XDP_MAX_TX_SKB_BUDGET, tx_size)
        except OSError:
            return 32
        return tx_size

    def _setsockopt_int(self, opt: int, value: int) -> None:
        self.sock.setsockopt(SOL_XDP, opt, struct.pack("i", value))

    def _map_ring(self, off, pgoff: int, size: int, desc_size: int) -> XskRing:
        producer, consumer, desc, flags = off
        length = desc + size * desc_size
        m = mmap.mmap(
            self.sock.fileno(), length, mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
            mmap.PROT_READ | mmap.PROT_WRITE, offset=pgoff,
        )
        self._maps.append(m)
        return XskRing(m, producer, consumer, desc, flags, size, desc_size)

    def fileno(self) -> int:
        return self.sock.fileno() if self.sock is not None else -1

    def bind(self, ifindex: int, queue: int, flags: int) -> None:
        """bind(2) with struct sockaddr_xdp {u16 family, flags; u32 ifindex, queue_id, shared_umem_fd}."""
        addr = struct.pack("HHIII", AF_XDP, flags, ifindex, queue, 0)
        if _LIBC.bind(self.sock.fileno(), addr, len(addr)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"bind(AF_XDP, ifindex={ifindex}, queue={queue}, flags={flags:#x}): "
                               f"{errno.errorcode.get(err, err)}")
        self.bound_flags = flags

    def options(self) -> int:
        return struct.unpack("I", self.sock.getsockopt(SOL_XDP, XDP_OPTIONS, 4))[0]

    def statistics(self) -> dict[str, int]:
        raw = self.sock.getsockopt(SOL_XDP, XDP_STATISTICS, 8 * len(STATISTICS_FIELDS))
        values = struct.unpack(f"{len(raw) // 8}Q", raw)
        return dict(zip(STATISTICS_FIELDS, values))

    def close(self) -> None:
        """Unmap the rings, close the socket, then drop the UMEM. Idempotent."""
        for ring in (self.rx, self.tx, self.fill, self.comp):
            if ring is not None:
                ring.detach()
        self.rx = self.tx = self.fill = self.comp = None
        for m in self._maps:
            m.close()
        self._maps = []
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.umem is not None:
            try:
                self.umem.close()
            except BufferError:
                pass  # frames still referenced by the stack: unmapped when the last view dies
            self.umem = None
