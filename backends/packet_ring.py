"""The AF_PACKET backend: PACKET_MMAP rings (TPACKET_V3) on one interface.

``PacketRingDevice(ifname)`` opens an AF_PACKET SOCK_RAW socket in the
calling thread's network namespace, sets up one mapping holding a TPACKET_V3
RX ring (variable-sized frames packed into blocks) followed by a TPACKET_V3
TX ring (fixed slots), and binds it to the interface for every EtherType.

RX: the kernel fills a block and hands it over (block_status TP_STATUS_USER)
when it is full or when the block retire timer fires. ``rx_burst`` lends
frames as memoryviews straight into the ring (no copy on our side); a block
goes back to the kernel once every frame lent from it has been released and
the cursor has moved past it. The retire timer is 1 ms by default: that is
the latency a lone frame (a handshake, a request) can wait in a half-empty
block, and 1 ms is the smallest the kernel accepts; busy links fill blocks
long before it fires.

TX: ``tx_reserve`` lends free slots (the frame goes at TPACKET_ALIGN(
sizeof(tpacket3_hdr)) = 48 bytes into the slot); ``tx_commit`` sets their
lengths, flips them to TP_STATUS_SEND_REQUEST and kicks the socket once
(send with MSG_DONTWAIT). With ``qdisc_bypass`` (default) frames go straight
to the driver. Our own transmitted frames are not looped back to RX
(PACKET_IGNORE_OUTGOING).

The per-frame ring work is in Cython (ustack/_fp_ring.pxi). The kernel's
per-frame checksum flags are kept in ``rx_status`` (parallel to the last
burst: TP_STATUS_CSUMNOTREADY 0x8 = L4 checksum only partial,
TP_STATUS_CSUM_VALID 0x80 = verified) and counted in ``stats``; with the
offloads that tools.netns turns off, neither should appear.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import socket
import struct
from array import array
from typing import Optional, Sequence, Union

from ustack import _fastpath as fp
from ustack.device import Capabilities, DeviceError
from ustack.stats import Stats

SOL_PACKET = 263
PACKET_RX_RING = 5
PACKET_STATISTICS = 6
PACKET_VERSION = 10
PACKET_TX_RING = 13
PACKET_LOSS = 14
PACKET_FANOUT = 18
PACKET_QDISC_BYPASS = 20
PACKET_IGNORE_OUTGOING = 23
SO_SNDBUFFORCE = 32
TPACKET_V3 = 2
PACKET_FANOUT_HASH = 0
ETH_P_ALL = 0x0003
SIOCGIFMTU = 0x8921
SIOCGIFHWADDR = 0x8927
ETH_HLEN = 14
IFNAMSIZ = 16
TPACKET_ALIGNMENT = 16
TPV3_HDR_LEN = 48  # TPACKET_ALIGN(sizeof(struct tpacket3_hdr)): TX data offset in a slot
RX_NOMINAL_FRAME = 2048  # V3 RX frames are variable-sized; the kernel only checks this divides blocks
DEFAULT_RETIRE_TOV_MS = 1


def _ifreq(name: str) -> bytes:
    return struct.pack("16s24x", name.encode())


class PacketRingDevice:
    """AF_PACKET TPACKET_V3 RX + TX rings on ``ifname``; see the module docstring.

    ``block_size`` x ``block_count``: the RX ring (block_size a multiple of
    the page size, big enough for a maximum-size frame). ``frame_size``: TX
    slot size (default 2048, or the next power of two that fits an MTU-sized
    frame). ``tx_frames``: TX slots (rounded up to whole TX blocks).
    ``fanout``: a PACKET_FANOUT group id (hash mode) or ``(group, mode)``.

    Defaults: 64 blocks of 128 KiB (8 MiB) hold ~5,000 full-size or ~50,000
    minimum-size frames, and with a 1 ms retire timer a trickle of traffic
    still has 64 ms of blocks before the kernel must drop; 1024 TX slots of
    2 KiB (2 MiB) let a poll round post many bursts before waiting.
    """

    def __init__(
        self,
        ifname: str,
        *,
        block_size: int = 1 << 17,
        block_count: int = 64,
        frame_size: Optional[int] = None,
        tx_frames: int = 1024,
        fanout: Union[None, int, tuple[int, int]] = None,
        qdisc_bypass: bool = True,
        mac: Optional[bytes] = None,
        retire_tov_ms: int = DEFAULT_RETIRE_TOV_MS,
        max_burst: int = 64,
    ):
        if not isinstance(ifname, str) or not 0 < len(ifname.encode()) < IFNAMSIZ:
            raise DeviceError(errno.EINVAL, f"bad interface name {ifname!r} (1..15 bytes)")
        if mac is not None and len(mac) != 6:
            raise DeviceError(errno.EINVAL, "mac must be 6 bytes")
        self.ifname = ifname
        self.stats = Stats()
        self.rx_status: list[int] = []
        self._closed = True
        self._ring: Optional[mmap.mmap] = None
        self._mv: Optional[memoryview] = None
        self._tx_views: list[memoryview] = []
        try:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: no traffic before bind
        except PermissionError:
            raise DeviceError(errno.EPERM, "AF_PACKET sockets need CAP_NET_RAW (run as root)") from None
        self._sock = sock
        self._closed = False
        try:
            self._setup(ifname, block_size, block_count, frame_size, tx_frames, fanout, qdisc_bypass, mac,
                        retire_tov_ms, max_burst)
        except BaseException:
            self.close()
            raise

    def _setup(self, ifname, block_size, block_count, frame_size, tx_frames, fanout, qdisc_bypass, mac,
               retire_tov_ms, max_burst) -> None:
        sock = self._sock
        try:
            socket.if_nametoindex(ifname)
        except OSError:
            raise DeviceError(errno.ENODEV, f"no such interface {ifname!r} in this network namespace") from None
        mtu = struct.unpack_from("i", fcntl.ioctl(sock, SIOCGIFMTU, _ifreq(ifname)), IFNAMSIZ)[0]
        if mac is None:
            hw = fcntl.ioctl(sock, SIOCGIFHWADDR, _ifreq(ifname))
            mac = hw[IFNAMSIZ + 2 : IFNAMSIZ + 8]  # struct sockaddr: sa_family, then the address
        max_frame = mtu + ETH_HLEN

        page = mmap.PAGESIZE
        if block_size <= 0 or block_size % page:
            raise DeviceError(errno.EINVAL, f"block_size {block_size} must be a positive multiple of the page size {page}")
        if block_size < 64 + 48 + max_frame:
            raise DeviceError(errno.EINVAL, f"block_size {block_size} cannot hold a {max_frame}-byte frame")
        if block_count < 2:
            raise DeviceError(errno.EINVAL, "block_count must be at least 2")
        if frame_size is None:
            frame_size = 2048
            while frame_size < TPV3_HDR_LEN + max_frame:
                frame_size *= 2
        if frame_size % TPACKET_ALIGNMENT or frame_size < TPV3_HDR_LEN + ETH_HLEN:
            raise DeviceError(errno.EINVAL, f"frame_size {frame_size} must be a multiple of 16 and > 62")
        if not 1 <= retire_tov_ms <= 1000:
            raise DeviceError(errno.EINVAL, "retire_tov_ms must be 1..1000")
        tx_block = max(1 << 16, frame_size)
        tx_block = (tx_block + page - 1) // page * page
        per_block = tx_block // frame_size
        tx_blocks = max(1, -(-max(tx_frames, 1) // per_block))
        tx_nr = per_block * tx_blocks

        def sockopt(opt: int, value: Union[int, bytes], what: str) -> None:
            try:
                sock.setsockopt(SOL_PACKET, opt, value)
            except OSError as exc:
                raise DeviceError(exc.errno, f"AF_PACKET {what} on {ifname!r}: {os.strerror(exc.errno)}") from None

        sockopt(PACKET_VERSION, TPACKET_V3, "PACKET_VERSION=TPACKET_V3")
        sockopt(PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING")
        sockopt(PACKET_LOSS, 1, "PACKET_LOSS")  # the kernel skips malformed TX slots instead of stalling
        if qdisc_bypass:
            sockopt(PACKET_QDISC_BYPASS, 1, "PACKET_QDISC_BYPASS")
        # Every posted slot holds an skb charged to this socket until the
        # driver frees it; a send buffer that covers the whole ring makes the
        # ring, not the buffer, the limit (the kernel doubles the value).
        wanted = tx_nr * (frame_size + 1024) // 2
        for option in (SO_SNDBUFFORCE, socket.SO_SNDBUF):
            try:
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) < 2 * wanted:
                    sock.setsockopt(socket.SOL_SOCKET, option, wanted)
                break
            except PermissionError:
                continue  # SO_SNDBUFFORCE needs CAP_NET_ADMIN; SO_SNDBUF is capped by wmem_max
        rx_nr = block_size // RX_NOMINAL_FRAME * block_count
        sockopt(
            PACKET_RX_RING,
            struct.pack("7I", block_size, block_count, RX_NOMINAL_FRAME, rx_nr, retire_tov_ms, 0, 0),
            f"RX ring {block_count}x{block_size}",
        )
        sockopt(
            PACKET_TX_RING,
            struct.pack("7I", tx_block, tx_blocks, frame_size, tx_nr, 0, 0, 0),
            f"TX ring {tx_nr}x{frame_size}",
        )
        rx_size = block_size * block_count
        tx_size = tx_block * tx_blocks
        try:
            self._ring = mmap.mmap(
                sock.fileno(), rx_size + tx_size, mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                mmap.PROT_READ | mmap.PROT_WRITE,
            )
        except OSError as exc:
            raise DeviceError(exc.errno, f"mmap of the {rx_size + tx_size}-byte ring failed: {os.strerror(exc.errno)}") from None
        try:
            sock.bind((ifname, ETH_P_ALL))
        except OSError as exc:
            if exc.errno in (errno.ENODEV, errno.ENXIO):
                raise DeviceError(exc.errno, f"no such interface {ifname!r} in this network namespace") from None
            raise DeviceError(exc.errno, f"bind to {ifname!r} failed: {os.strerror(exc.errno)}") from None
        if fanout is not None:
            group, mode = (fanout, PACKET_FANOUT_HASH) if isinstance(fanout, int) else fanout
            sockopt(PACKET_FANOUT, (group & 0xFFFF) | (mode << 16), f"PACKET_FANOUT group {group}")
        sock.setblocking(False)

        self._mv = memoryview(self._ring)
        self._block_size = block_size
        self._block_count = block_count
        self._rx_size = rx_size
        self._refs = array("i", bytes(4 * block_count))
        self._rx_block = 0  # the RX cursor: block, offset of the next header, packets left
        self._rx_pos = 0
        self._rx_left = 0
        self._tx_off = rx_size
        self._tx_frame_size = frame_size
        self._tx_nr = tx_nr
        self._tx_head = 0
        self._tx_reserved = 0
        self._tx_pending = False
        slot_len = min(frame_size - TPV3_HDR_LEN, max_frame)
        base = self._tx_off + TPV3_HDR_LEN
        self._tx_views = [self._mv[base + i * frame_size : base + i * frame_size + slot_len] for i in range(tx_nr)]
        self.capabilities = Capabilities(
            mac=bytes(mac),
            mtu=mtu,
            max_burst=min(max_burst, tx_nr),
            frame_size=slot_len,
            mode="packet_ring tpacket_v3 rx / tpacket_v3 tx" + (" qdisc_bypass" if qdisc_bypass else ""),
            extra={
                "ifname": ifname,
                "rx_ring": (block_count, block_size),
                "tx_ring": (tx_nr, frame_size),
                "retire_tov_ms": retire_tov_ms,
                "fanout": fanout,
            },
        )

    # -- Device protocol ----------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise DeviceError(errno.EBADF, f"packet ring on {self.ifname!r} is closed")

    def rx_burst(self, max_frames: int) -> list[memoryview]:
        self._check_open()
        if self._tx_pending:
            self._kick()  # every poll round pushes out slots an earlier kick left behind
        frames: list[memoryview] = []
        statuses: list[int] = []
        mv, refs, bsize = self._mv, self._refs, self._block_size
        stats = self.stats
        block, pos, left = self._rx_block, self._rx_pos, self._rx_left
        visited = 0
        while len(frames) < max_frames and visited <= self._block_count:
            boff = block * bsize
            if left == 0:
                npkts, first = fp.tpv3_block_open(mv, boff, bsize)
                if npkts == -1:
                    break  # the kernel still owns the block
                refs[block] = 1  # the cursor's reference
                if npkts <= 0:
                    if npkts < 0:
                        stats.drop("packet_ring.corrupt_block")
                    fp.tpv3_block_unref(mv, refs, block, bsize)
                    block = (block + 1) % self._block_count
                    visited += 1
                    continue
                pos, left = first, npkts
                stats.inc("packet_ring.rx_blocks")
            taken, pos, left, truncated, notready, valid, losing = fp.tpv3_rx_take(
                mv, boff, bsize, pos, left, max_frames - len(frames), frames, statuses
            )
            refs[block] += taken
            if truncated:
                stats.drop("packet_ring.truncated", truncated)
            if notready:
                stats.inc("packet_ring.rx_csum_notready", notready)
            if valid:
                stats.inc("packet_ring.rx_csum_valid", valid)
            if losing:
                stats.inc("packet_ring.rx_losing", losing)
            if left <= 0:
                if left < 0:
                    stats.drop("packet_ring.corrupt_block")
                    left = 0
                if fp.tpv3_block_unref(mv, refs, block, bsize):
                    stats.inc("packet_ring.rx_blocks_returned")
                block = (block + 1) % self._block_count
                visited += 1
        self._rx_block, self._rx_pos, self._rx_left = block, pos, left
        self.rx_status = statuses
        if frames:
            stats.inc("packet_ring.rx_frames", len(frames))
        return frames

    def rx_release(self, frames: Sequence[memoryview]) -> None:
        if self._closed or not frames:
            return
        returned, foreign = fp.tpv3_rx_release(self._mv, frames, self._rx_size, self._block_size, self._refs)
        if returned:
            self.stats.inc("packet_ring.rx_blocks_returned", returned)
        if foreign:
            self.stats.inc("packet_ring.rx_release_foreign", foreign)

    def tx_reserve(self, n: int) -> list[memoryview]:
        self._check_open()
        n = max(0, min(n, self._tx_nr))
        count, reset = fp.tpv3_tx_available(self._mv, self._tx_off, self._tx_frame_size, self._tx_nr, self._tx_head, n)
        if count < n and self._tx_pending:
            self._kick()  # an earlier kick was refused; push those slots out and look again
            count, more = fp.tpv3_tx_available(self._mv, self._tx_off, self._tx_frame_size, self._tx_nr, self._tx_head, n)
            reset += more
        if reset:
            self.stats.drop("packet_ring.tx_wrong_format", reset)
        self._tx_reserved = count
        head = self._tx_head
        end = head + count
        if end <= self._tx_nr:
            return self._tx_views[head:end]
        return self._tx_views[head:] + self._tx_views[: end - self._tx_nr]

    def tx_commit(self, lengths: Sequence[int]) -> None:
        self._check_open()
        count = len(lengths)
        if count > self._tx_reserved:
            raise ValueError(f"tx_commit of {count} frames but only {self._tx_reserved} reserved")
        self._tx_reserved = 0
        if count == 0:
            return
        self._tx_head = fp.tpv3_tx_post(
            self._mv, self._tx_off, self._tx_frame_size, self._tx_nr, self._tx_head, lengths,
            self.capabilities.frame_size,
        )
        self.stats.inc("packet_ring.tx_frames", count)
        self._kick()

    def _kick(self) -> None:
        """One send() for every posted slot. The kernel stops early, without an
        error, when the socket's send buffer is full; then the last posted slot
        is still TP_STATUS_SEND_REQUEST and the next rx_burst/tx_reserve kicks again."""
        try:
            self._sock.send(b"", socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            # ENOBUFS, ENETDOWN...: the slots stay posted; the next kick retries them
            self.stats.inc(f"packet_ring.tx_kick_error.{errno.errorcode.get(exc.errno, exc.errno)}")
        last = (self._tx_head - 1) % self._tx_nr
        status = fp.tpv3_tx_status(self._mv, self._tx_off, self._tx_frame_size, self._tx_nr, last)
        self._tx_pending = status == fp.TP_STATUS_SEND_REQUEST
        if self._tx_pending:
            self.stats.inc("packet_ring.tx_kick_incomplete")

    def fileno(self) -> int:
        return -1 if self._closed else self._sock.fileno()

    def kernel_stats(self) -> dict[str, int]:
        """Read (and reset) the kernel's PACKET_STATISTICS; totals accumulate in ``stats``."""
        self._check_open()
        raw = self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 12)
        packets, drops, freezes = struct.unpack("3I", raw)
        self.stats.inc("packet_ring.kernel_packets", packets)
        if drops:
            self.stats.drop("packet_ring.kernel_ring_full", drops)
        self.stats.inc("packet_ring.kernel_queue_freezes", freezes)
        return {"packets": packets, "drops": drops, "freeze_q_cnt": freezes}

    def close(self) -> None:
        """Close the socket and unmap the rings.

        If the caller still holds lent frames the mapping cannot be unmapped
        now; it goes when the last of them is dropped (counted as
        ``packet_ring.close_deferred_unmap``).
        """
        if self._closed:
            return
        self._closed = True
        for view in self._tx_views:
            view.release()
        self._tx_views = []
        if self._mv is not None:
            self._mv.release()
            self._mv = None
        if self._ring is not None:
            try:
                self._ring.close()
            except BufferError:
                self.stats.inc("packet_ring.close_deferred_unmap")
            self._ring = None
        self._sock.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "PacketRingDevice":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PacketRingDevice({self.ifname!r}, {'closed' if self._closed else 'open'})"
