"""The AF_PACKET backend: PACKET_MMAP rings on one interface.

``PacketRingDevice(ifname)`` opens AF_PACKET SOCK_RAW sockets in the calling
thread's network namespace with an RX ring bound to the interface for every
EtherType and a TPACKET_V3 TX ring (fixed slots). The RX ring comes in two
versions (``rx_version``):

- 2 (default), TPACKET_V2: fixed slots, each with its own tp_status word. The
  kernel hands every frame over as soon as it has written it (and wakes the
  socket), so a lone frame -- a handshake, a request -- is visible at once.
  The ring version is per socket, so the TX ring lives on a second socket
  (TPACKET_V3, bound with protocol 0: it never receives). ``rx_burst`` walks
  slots in ring order; ``rx_release`` returns each slot on its own, in any
  order. A frame longer than a slot (``rx_frame_size`` minus the 66 bytes in
  front of it) is truncated by the kernel and dropped here, counted.
- 3, TPACKET_V3: variable-sized frames packed into blocks, one socket for both
  rings. The kernel hands a block over when it is full or when the block
  retire timer fires: 1 ms by default and the smallest the kernel accepts, so
  a lone frame waits up to 1 ms in a half-empty block (busy links fill blocks
  long before). A block goes back to the kernel once every frame lent from it
  has been released and the cursor has moved past it. The cheapest per frame
  under load, the slowest for request/response.

Measured on a veth (2 shared cores): 64-byte UDP echo RTT p50 ~1000 µs with
V3, ~55 µs with V2 (as AF_XDP and TAP); TCP connections/s ~500 vs ~3,000;
bulk TCP unchanged (~50 MB/s). The ring walk itself (lend + release, bursts
of 64) costs ~0.12 µs per frame in both. The price of V2 is a wake-up per
frame: a reader that sleeps in select() whenever the ring is empty gets ~4
frames per wake-up at ~400 kpps (~1.2 µs CPU per frame, wake-ups included;
V3: ~600 frames per wake-up, ~0.17 µs, ~580 kpps), so a receive-mostly
high-rate consumer that can wait 1 ms is better off with ``rx_version=3``.

RX frames are lent as memoryviews straight into the ring (no copy on our
side). TX: ``tx_reserve`` lends free slots (the frame goes at TPACKET_ALIGN(
sizeof(tpacket3_hdr)) = 48 bytes into the slot); ``tx_commit`` sets their
lengths, flips them to TP_STATUS_SEND_REQUEST and kicks the socket once
(send with MSG_DONTWAIT). With ``qdisc_bypass`` (default without gso)
frames go straight to the driver.

``gso`` (TCP segmentation offload on transmit; on by default with
``rx_version=2``, which it needs: PACKET_VNET_HDR is per socket and V2 has a
TX socket of its own, the only one that gets it): every TX frame carries a 10-byte virtio_net_hdr in front
(frames go at 58 bytes into 64 KiB slots, 64 of them by default: 4 MiB), and
``tx_commit`` merges each run of consecutive full-sized segments of one TCP
flow into one super-frame that the kernel segments back into exactly those
frames (ustack/_fp_gso.pxi says when a run qualifies). Nothing above the
device changes: the stack still writes, counts and retransmits segment by
segment. Counted as ``packet_ring.gso_frames`` (super-frames) and
``packet_ring.gso_segments`` (the segments they carry). With gso the qdisc is
not bypassed unless asked: the bypass (``__dev_direct_xmit``) drops every
skb the kernel had to segment in software (an interface without TSO, as
ustack.tools.netns sets veths up); through ``dev_queue_xmit`` (a veth's
noqueue qdisc) the kernel segments it before the driver. ``gso=False``
gives the per-frame ring (1024 slots of 2 KiB, qdisc bypassed). Our own
transmitted frames are not looped back to RX (PACKET_IGNORE_OUTGOING).

The per-frame ring work is in Cython (ustack/_fp_ring.pxi). The kernel's
per-frame status flags are kept in ``rx_status`` (parallel to the last burst:
TP_STATUS_LOSING 0x4 = the kernel dropped frames since the last
``kernel_stats()``, TP_STATUS_CSUMNOTREADY 0x8 = L4 checksum only partial,
TP_STATUS_CSUM_VALID 0x80 = verified) and counted in ``stats``; with the
offloads that ustack.tools.netns turns off, the checksum flags should not appear.
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
from ustack.backends.claim import AddressClaim, ClaimError
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
PACKET_VNET_HDR = 15
TPV3_BLOCK_STATUS = 8  # struct tpacket_block_desc: version, offset_to_priv, then hdr.bh1.block_status
VNET_HDR_LEN = 10  # struct virtio_net_hdr in front of every TX frame when gso is on
GSO_FRAME_SIZE = 1 << 16  # TX slot with gso: 48 + 10 + a 65,478-byte super-frame
GSO_TX_FRAMES = 64  # default TX slots with gso: 4 MiB
GSO_MAX_SEGS = 64  # segments per super-frame (and the IP datagram <= 65,535 bytes)
# V2 RX slots by default: 64 KiB each (66 bytes of header, then a frame of up to 65,470 bytes: the
# largest TSO/GRO super-frame at the kernel's default gso_max_size, 65,536), 1,024 of them (64 MiB): with
# 256 (16 MiB) and up to 128 held by receive buffers, a kernel sender at offloads off overran the ring
# whenever the server lost the CPU for ~0.2 ms (push at load 8: packet_ring.rx_losing 433,668 frames,
# 30-39 MB/s; 1,024 slots: none, 43-48 MB/s; the old 4,096 x 2 KiB: none, 43-63 MB/s)
GRO_RX_FRAME_SIZE = 1 << 16
GRO_RX_BLOCKS = 512
SO_SNDBUFFORCE = 32
TPACKET_V2 = 1
TPACKET_V3 = 2
PACKET_FANOUT_HASH = 0
ETH_P_ALL = 0x0003
SIOCGIFMTU = 0x8921
SIOCGIFHWADDR = 0x8927
ETH_HLEN = 14
IFNAMSIZ = 16
TPACKET_ALIGNMENT = 16
TPV3_HDR_LEN = 48  # TPACKET_ALIGN(sizeof(struct tpacket3_hdr)): TX data offset in a slot
# Where the kernel puts an Ethernet frame in a V2 RX slot: TPACKET_ALIGN(
# TPACKET2_HDRLEN (52) + 16) - 14 (af_packet.c tpacket_rcv, SOCK_RAW).
TPV2_RX_MAC_OFFSET = 66
RX_NOMINAL_FRAME = 2048  # V3 RX frames are variable-sized; the kernel only checks this divides blocks
DEFAULT_RETIRE_TOV_MS = 1
DEFAULT_RX_VERSION = 2
TX_RETRY_INTERVAL = 0.001  # a kick the kernel refused (send buffer full, ENOBUFS) is retried this soon


def _ifreq(name: str) -> bytes:
    return struct.pack("16s24x", name.encode())


def _slot_size(overhead: int, max_frame: int) -> int:
    """The smallest power of two from 2048 that holds ``overhead + max_frame`` bytes."""
    size = 2048
    while size < overhead + max_frame:
        size *= 2
    return size


class PacketRingDevice:
    """AF_PACKET RX (TPACKET_V2 or V3) + TPACKET_V3 TX rings on ``ifname``; see the module docstring.

    ``rx_version``: 2 (per-frame slots, default) or 3 (blocks).
    ``block_size`` x ``block_count``: the RX ring (block_size a multiple of
    the page size). V3 packs frames into the blocks (a block must hold a
    maximum-size frame); V2 cuts each block into slots of ``rx_frame_size``
    bytes (a multiple of 16 dividing block_size; default 64 KiB, a whole
    super-frame, or 2048 / the next power of two that fits 66 bytes plus an
    MTU-sized frame when block_size is not a multiple of 64 KiB).
    ``frame_size``: TX slot size (default 2048, or the next power of two that
    fits an MTU-sized frame; 64 KiB with gso). ``tx_frames``: TX slots
    (rounded up to whole TX blocks; default 1024, 64 with gso). ``gso``,
    ``gso_max_segs``: TCP segmentation offload on transmit (module docstring). ``fanout``: a PACKET_FANOUT group id (hash mode) or ``(group,
    mode)``. ``retire_tov_ms``: the V3 block retire timer. ``claim``: the
    stack's addresses, to keep the kernel's own IP input off the frames sent
    to them (``backends.claim.AddressClaim``: an nftables ingress drop after
    this socket's tap, what AF_XDP's redirect gives for free). Where nft is
    missing or refuses, the device opens without it and says why in
    ``claim_problem``.

    Defaults: with V2, 512 blocks of 128 KiB (64 MiB), 1,024 slots of 64 KiB,
    each able to take a whole TSO/GRO super-frame (a veth at the kernel's
    default offloads, or GRO, hands AF_PACKET TCP frames of up to 64 KiB);
    with V3, 64 blocks of 128 KiB (8 MiB): ~5,000 full-size or ~50,000 minimum-size frames, and a trickle of
    traffic still has 64 ms of blocks before the kernel must drop. TX: 64
    slots of 64 KiB (4 MiB) with gso, each a frame or a super-frame of up to
    45 segments; without, 1024 slots of 2 KiB (2 MiB) let a poll round post
    many bursts before waiting.
    """

    def __init__(
        self,
        ifname: str,
        *,
        rx_version: int = DEFAULT_RX_VERSION,
        block_size: int = 1 << 17,
        block_count: Optional[int] = None,
        rx_frame_size: Optional[int] = None,
        frame_size: Optional[int] = None,
        tx_frames: Optional[int] = None,
        fanout: Union[None, int, tuple[int, int]] = None,
        qdisc_bypass: Optional[bool] = None,
        mac: Optional[bytes] = None,
        retire_tov_ms: int = DEFAULT_RETIRE_TOV_MS,
        max_burst: int = 64,
        claim: Sequence[str] = (),
        gso: Optional[bool] = None,
        gso_max_segs: int = GSO_MAX_SEGS,
    ):
        if not isinstance(ifname, str) or not 0 < len(ifname.encode()) < IFNAMSIZ:
            raise DeviceError(errno.EINVAL, f"bad interface name {ifname!r} (1..15 bytes)")
        if mac is not None and len(mac) != 6:
            raise DeviceError(errno.EINVAL, "mac must be 6 bytes")
        if rx_version not in (2, 3):
            raise DeviceError(errno.EINVAL, f"rx_version must be 2 (TPACKET_V2) or 3 (TPACKET_V3), not {rx_version!r}")
        if gso is None:
            gso = rx_version == 2  # the default wherever it can be had
        if gso and rx_version != 2:
            raise DeviceError(errno.EINVAL, "gso needs rx_version=2 (PACKET_VNET_HDR on a TX socket of its own)")
        if gso and not 2 <= gso_max_segs <= 0xFFFF:
            raise DeviceError(errno.EINVAL, "gso_max_segs must be 2..65535")
        self.gso = bool(gso)
        if qdisc_bypass is None:
            # the bypass (__dev_direct_xmit) drops an skb that validate_xmit_skb had to change, so a
            # super-frame the interface cannot segment itself (TSO off) must go through dev_queue_xmit
            qdisc_bypass = not self.gso
        self._gso_max_segs = gso_max_segs
        self.ifname = ifname
        self.rx_version = rx_version
        self.stats = Stats()
        self.rx_status: list[int] = []
        self._closed = True
        self._maps: list[mmap.mmap] = []
        self._views: list[memoryview] = []
        self._tx_views: list[memoryview] = []
        self.claim: Optional[AddressClaim] = None
        self.claim_problem = ""
        self._sock = self._tx_sock = self._new_socket()
        self._closed = False
        self._watch = None  # rx_watch's RxWatch, made on first use
        try:
            if rx_version == 2:
                self._tx_sock = self._new_socket()
            self._setup(ifname, block_size, block_count, rx_frame_size, frame_size, tx_frames, fanout, qdisc_bypass,
                        mac, retire_tov_ms, max_burst)
            if claim:
                try:
                    self.claim = AddressClaim(ifname, claim)
                except ValueError as e:
                    raise DeviceError(errno.EINVAL, f"claim: {e}") from None
                except ClaimError as e:
                    self.claim_problem = str(e)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _new_socket() -> socket.socket:
        try:
            return socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: no traffic before bind
        except PermissionError:
            raise DeviceError(errno.EPERM, "AF_PACKET sockets need CAP_NET_RAW (run as root)") from None

    def _sockopt(self, sock: socket.socket, opt: int, value: Union[int, bytes], what: str) -> None:
        try:
            sock.setsockopt(SOL_PACKET, opt, value)
        except OSError as exc:
            raise DeviceError(exc.errno, f"AF_PACKET {what} on {self.ifname!r}: {os.strerror(exc.errno)}") from None

    def _map(self, sock: socket.socket, size: int) -> memoryview:
        try:
            ring = mmap.mmap(
                sock.fileno(), size, mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), mmap.PROT_READ | mmap.PROT_WRITE
            )
        except OSError as exc:
            raise DeviceError(exc.errno, f"mmap of the {size}-byte ring failed: {os.strerror(exc.errno)}") from None
        self._maps.append(ring)
        view = memoryview(ring)
        self._views.append(view)
        return view

    def _bind(self, sock: socket.socket, protocol: int) -> None:
        try:
            sock.bind((self.ifname, protocol))
        except OSError as exc:
            if exc.errno in (errno.ENODEV, errno.ENXIO):
                raise DeviceError(exc.errno, f"no such interface {self.ifname!r} in this network namespace") from None
            raise DeviceError(exc.errno, f"bind to {self.ifname!r} failed: {os.strerror(exc.errno)}") from None

    def _tx_options(self, sock: socket.socket, qdisc_bypass: bool, tx_nr: int, frame_size: int) -> None:
        self._sockopt(sock, PACKET_LOSS, 1, "PACKET_LOSS")  # the kernel skips malformed TX slots instead of stalling
        if qdisc_bypass:
            self._sockopt(sock, PACKET_QDISC_BYPASS, 1, "PACKET_QDISC_BYPASS")
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

    def _setup(self, ifname, block_size, block_count, rx_frame_size, frame_size, tx_frames, fanout, qdisc_bypass,
               mac, retire_tov_ms, max_burst) -> None:
        sock, tx_sock, v2 = self._sock, self._tx_sock, self.rx_version == 2
        try:
            socket.if_nametoindex(ifname)
        except OSError:
            raise DeviceError(errno.ENODEV, f"no such interface {ifname!r} in this network namespace") from None
        mtu = struct.unpack_from("i", fcntl.ioctl(sock, SIOCGIFMTU, _ifreq(ifname)), IFNAMSIZ)[0]
        if mac is None:
            hw = fcntl.ioctl(sock, SIOCGIFHWADDR, _ifreq(ifname))
            mac = hw[IFNAMSIZ + 2 : IFNAMSIZ + 8]  # struct sockaddr: sa_family, then the address
        max_frame = mtu + ETH_HLEN

        if block_count is None:
            big_slots = v2 and rx_frame_size is None
            block_count = GRO_RX_BLOCKS if big_slots else 64
        page = mmap.PAGESIZE
        if block_size <= 0 or block_size % page:
            raise DeviceError(errno.EINVAL, f"block_size {block_size} must be a positive multiple of the page size {page}")
        if block_count < 2:
            raise DeviceError(errno.EINVAL, "block_count must be at least 2")
        if v2:
            if rx_frame_size is None:
                # a slot takes a whole super-frame: a local sender's TSO (a veth as the kernel sets it up)
                # or GRO hand AF_PACKET TCP frames of up to 64 KiB, which a smaller slot truncates
                # (a caller's smaller blocks get the old MTU-sized slots: super-frames are then truncated, counted)
                rx_frame_size = _slot_size(TPV2_RX_MAC_OFFSET, max_frame)
                if block_size % GRO_RX_FRAME_SIZE == 0 and rx_frame_size < GRO_RX_FRAME_SIZE:
                    rx_frame_size = GRO_RX_FRAME_SIZE
            if rx_frame_size % TPACKET_ALIGNMENT or rx_frame_size <= TPV2_RX_MAC_OFFSET + ETH_HLEN:
                raise DeviceError(errno.EINVAL, f"rx_frame_size {rx_frame_size} must be a multiple of 16 and > 80")
            if block_size % rx_frame_size:
                raise DeviceError(errno.EINVAL, f"block_size {block_size} must be a multiple of rx_frame_size {rx_frame_size}")
        elif block_size < 64 + 48 + max_frame:
            raise DeviceError(errno.EINVAL, f"block_size {block_size} cannot hold a {max_frame}-byte frame")
        if frame_size is None:
            frame_size = GSO_FRAME_SIZE if self.gso else _slot_size(TPV3_HDR_LEN, max_frame)
        if tx_frames is None:
            tx_frames = GSO_TX_FRAMES if self.gso else 1024
        if frame_size % TPACKET_ALIGNMENT or frame_size < TPV3_HDR_LEN + ETH_HLEN:
            raise DeviceError(errno.EINVAL, f"frame_size {frame_size} must be a multiple of 16 and > 62")
        if self.gso and frame_size < TPV3_HDR_LEN + VNET_HDR_LEN + max_frame:
            raise DeviceError(errno.EINVAL, f"frame_size {frame_size} cannot hold a {max_frame}-byte frame with gso")
        if not 1 <= retire_tov_ms <= 1000:
            raise DeviceError(errno.EINVAL, "retire_tov_ms must be 1..1000")
        tx_block = max(1 << 16, frame_size)
        tx_block = (tx_block + page - 1) // page * page
        per_block = tx_block // frame_size
        tx_blocks = max(1, -(-max(tx_frames, 1) // per_block))
        tx_nr = per_block * tx_blocks

        # The ring version is per socket: V2 RX and V3 TX need two of them.
        self._sockopt(sock, PACKET_VERSION, TPACKET_V2 if v2 else TPACKET_V3, f"PACKET_VERSION=TPACKET_V{self.rx_version}")
        if v2:
            self._sockopt(tx_sock, PACKET_VERSION, TPACKET_V3, "PACKET_VERSION=TPACKET_V3 (TX socket)")
        self._sockopt(sock, PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING")
        if self.gso:  # before the TX ring (the kernel refuses it after: EBUSY)
            self._sockopt(tx_sock, PACKET_VNET_HDR, 1, "PACKET_VNET_HDR (TX socket)")
        self._tx_options(tx_sock, qdisc_bypass, tx_nr, frame_size)
        rx_size = block_size * block_count
        if v2:
            rx_nr = rx_size // rx_frame_size
            self._sockopt(sock, PACKET_RX_RING, struct.pack("4I", block_size, block_count, rx_frame_size, rx_nr),
                          f"RX ring {rx_nr}x{rx_frame_size}")
        else:
            rx_nr = block_size // RX_NOMINAL_FRAME * block_count
            self._sockopt(
                sock, PACKET_RX_RING,
                struct.pack("7I", block_size, block_count, RX_NOMINAL_FRAME, rx_nr, retire_tov_ms, 0, 0),
                f"RX ring {block_count}x{block_size}",
            )
        self._sockopt(tx_sock, PACKET_TX_RING, struct.pack("7I", tx_block, tx_blocks, frame_size, tx_nr, 0, 0, 0),
                      f"TX ring {tx_nr}x{frame_size}")
        tx_size = tx_block * tx_blocks
        if v2:
            self._rx_mv = self._map(sock, rx_size)
            self._tx_mv = self._map(tx_sock, tx_size)
            self._tx_off = 0
            # protocol 0: the TX socket is tied to the interface but receives
            # nothing (the kernel takes each frame's EtherType from its header)
            self._bind(tx_sock, 0)
        else:
            self._rx_mv = self._tx_mv = self._map(sock, rx_size + tx_size)
            self._tx_off = rx_size
        self._bind(sock, ETH_P_ALL)
        if fanout is not None:
            group, mode = (fanout, PACKET_FANOUT_HASH) if isinstance(fanout, int) else fanout
            self._sockopt(sock, PACKET_FANOUT, (group & 0xFFFF) | (mode << 16), f"PACKET_FANOUT group {group}")
        sock.setblocking(False)
        tx_sock.setblocking(False)

        self._block_size = block_size
        self._block_count = block_count
        self._rx_size = rx_size
        if v2:
            self._rx_frame_size = rx_frame_size
            self._rx_nr = rx_nr
            self._rx_head = 0  # the next slot to look at
            self._lent = bytearray(rx_nr)  # 1 per slot lent and not yet released
        else:
            self._refs = array("i", bytes(4 * block_count))
            self._rx_block = 0  # the RX cursor: block, offset of the next header, packets left
            self._rx_pos = 0
            self._rx_left = 0
        self._tx_frame_size = frame_size
        self._tx_nr = tx_nr
        self._tx_head = 0
        self._tx_reserved = 0
        self._tx_pending = False
        data_off = TPV3_HDR_LEN + (VNET_HDR_LEN if self.gso else 0)
        slot_len = min(frame_size - data_off, max_frame)
        base = self._tx_off + data_off
        # the largest IP datagram of one super-frame: the slot and IPv4's length field (a larger one than the
        # interface's gso_max_size/segs is segmented by the kernel in software: still exact, only slower)
        self._gso_max_bytes = min(frame_size - data_off - ETH_HLEN, 0xFFFF) if self.gso else 0
        self._tx_views = [self._tx_mv[base + i * frame_size : base + i * frame_size + slot_len] for i in range(tx_nr)]
        extra = {
            "ifname": ifname,
            "rx_version": self.rx_version,
            "rx_ring": (block_count, block_size),
            "tx_ring": (tx_nr, frame_size),
            "retire_tov_ms": None if v2 else retire_tov_ms,
            "fanout": fanout,
            "gso": (self._gso_max_bytes, self._gso_max_segs) if self.gso else None,
        }
        # what the kernel cycles through in order, slots (V2) or blocks (V3): a held one stops it there,
        # so the stack copies out what it holds before it comes round again (ustack.rxhold)
        extra["rx_frames"] = rx_nr if v2 else block_count
        extra["rx_ordered"] = True
        if v2:
            extra["rx_slots"] = (rx_nr, rx_frame_size)
        self.capabilities = Capabilities(
            mac=bytes(mac),
            mtu=mtu,
            max_burst=min(max_burst, tx_nr),
            frame_size=slot_len,
            mode=f"packet_ring tpacket_v{self.rx_version} rx / tpacket_v3 tx" + (" qdisc_bypass" if qdisc_bypass else "")
            + (" gso" if self.gso else ""),
            tx_tcp_segmentation=self._gso_max_bytes,
            extra=extra,
        )

    # -- Device protocol ----------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise DeviceError(errno.EBADF, f"packet ring on {self.ifname!r} is closed")

    def rx_burst(self, max_frames: int) -> list[memoryview]:
        self._check_open()
        if self._tx_pending:
            self._kick()  # every poll round pushes out slots an earlier kick left behind
        if self.rx_version == 2:
            return self._rx_burst_v2(max_frames)
        return self._rx_burst_v3(max_frames)

    def rx_watch(self):
        """The status word of the next RX slot (V2) or block (V3) as an ``ustack._fastpath.RxWatch``, for the
        driver's busy-poll without the GIL; None when closed or inside a V3 block (frames are waiting)."""
        if self._closed:
            return None
        watch = self._watch
        if watch is None:
            watch = self._watch = fp.RxWatch.tp_status(self._rx_mv)
        if self.rx_version == 2:
            watch.at(self._rx_head * self._rx_frame_size)  # tpacket2_hdr.tp_status
        elif self._rx_left:
            return None
        else:
            watch.at(self._rx_block * self._block_size + TPV3_BLOCK_STATUS)
        return watch

    def _rx_burst_v2(self, max_frames: int) -> list[memoryview]:
        frames: list[memoryview] = []
        statuses: list[int] = []
        taken, self._rx_head, truncated, corrupt, notready, valid, losing = fp.tpv2_rx_take(
            self._rx_mv, self._rx_frame_size, self._rx_nr, self._rx_head, self._lent, max_frames, frames, statuses
        )
        self.rx_status = statuses
        if taken:
            self.stats.inc("packet_ring.rx_frames", taken)
        if truncated or corrupt or notready or valid or losing:
            self._count_flags(truncated, corrupt, notready, valid, losing)
        return frames

    def _count_flags(self, truncated: int, corrupt: int, notready: int, valid: int, losing: int) -> None:
        stats = self.stats
        if truncated:
            stats.drop("packet_ring.truncated", truncated)
        if corrupt:
            stats.drop("packet_ring.corrupt_slot", corrupt)
        if notready:
            stats.inc("packet_ring.rx_csum_notready", notready)
        if valid:
            stats.inc("packet_ring.rx_csum_valid", valid)
        if losing:
            stats.inc("packet_ring.rx_losing", losing)

    def _rx_burst_v3(self, max_frames: int) -> list[memoryview]:
        frames: list[memoryview] = []
        statuses: list[int] = []
        mv, refs, bsize = self._rx_mv, self._refs, self._block_size
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
            if truncated or notready or valid or losing:
                self._count_flags(truncated, 0, notready, valid, losing)
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
        if self.rx_version == 2:
            released, foreign = fp.tpv2_rx_release(self._rx_mv, frames, self._rx_frame_size, self._rx_nr, self._lent)
        else:
            returned, foreign = fp.tpv3_rx_release(self._rx_mv, frames, self._rx_size, self._block_size, self._refs)
            if returned:
                self.stats.inc("packet_ring.rx_blocks_returned", returned)
        if foreign:
            self.stats.inc("packet_ring.rx_release_foreign", foreign)

    def tx_reserve(self, n: int) -> list[memoryview]:
        self._check_open()
        n = max(0, min(n, self._tx_nr))
        count, reset = fp.tpv3_tx_available(self._tx_mv, self._tx_off, self._tx_frame_size, self._tx_nr, self._tx_head, n)
        if count < n and self._tx_pending:
            self._kick()  # an earlier kick was refused; push those slots out and look again
            count, more = fp.tpv3_tx_available(self._tx_mv, self._tx_off, self._tx_frame_size, self._tx_nr, self._tx_head, n)
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
        if self.gso:
            self._tx_head, posted, supers, merged = fp.tpv3_tx_post_gso(
                self._tx_mv, self._tx_off, self._tx_frame_size, self._tx_nr, self._tx_head, lengths,
                self.capabilities.frame_size, self._gso_max_bytes, self._gso_max_segs,
            )
            if supers:
                self.stats.inc("packet_ring.gso_frames", supers)
                self.stats.inc("packet_ring.gso_segments", merged)
        else:
            self._tx_head = fp.tpv3_tx_post(
                self._tx_mv, self._tx_off, self._tx_frame_size, self._tx_nr, self._tx_head, lengths,
                self.capabilities.frame_size,
            )
        self.stats.inc("packet_ring.tx_frames", count)
        self._kick()

    def _kick(self) -> None:
        """One send() for every posted slot. The kernel stops early, without an
        error, when the socket's send buffer is full; then the last posted slot
        is still TP_STATUS_SEND_REQUEST and the next rx_burst/tx_reserve kicks again."""
        try:
            self._tx_sock.send(b"", socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            # ENOBUFS, ENETDOWN...: the slots stay posted; the next kick retries them
            self.stats.inc(f"packet_ring.tx_kick_error.{errno.errorcode.get(exc.errno, exc.errno)}")
        last = (self._tx_head - 1) % self._tx_nr
        status = fp.tpv3_tx_status(self._tx_mv, self._tx_off, self._tx_frame_size, self._tx_nr, last)
        self._tx_pending = status == fp.TP_STATUS_SEND_REQUEST
        if self._tx_pending:
            self.stats.inc("packet_ring.tx_kick_incomplete")

    def poll_at(self, now: float) -> Optional[float]:
        """Frames arrive only from the kernel; but slots a refused kick left posted are kicked again
        here, at the end of each poll round, and while the kernel still holds them back the stack
        polls again after ``TX_RETRY_INTERVAL`` (an idle stack would otherwise strand its last
        reply until the next frame arrives)."""
        if not self._tx_pending or self._closed:
            return None
        self._kick()
        return now + TX_RETRY_INTERVAL if self._tx_pending else None

    def fileno(self) -> int:
        return -1 if self._closed else self._sock.fileno()

    def kernel_stats(self) -> dict[str, int]:
        """Read (and reset) the kernel's PACKET_STATISTICS of the RX socket; totals accumulate in ``stats``.

        ``freeze_q_cnt`` (blocks the kernel found still ours) exists for V3 only; it is 0 with V2.
        """
        self._check_open()
        raw = self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 12)  # V2: struct tpacket_stats, 8 bytes
        packets, drops = struct.unpack_from("2I", raw)
        freezes = struct.unpack_from("I", raw, 8)[0] if len(raw) >= 12 else 0
        self.stats.inc("packet_ring.kernel_packets", packets)
        if drops:
            self.stats.drop("packet_ring.kernel_ring_full", drops)
        self.stats.inc("packet_ring.kernel_queue_freezes", freezes)
        return {"packets": packets, "drops": drops, "freeze_q_cnt": freezes}

    def hand_over_teardown(self) -> tuple[list[dict], list[int]]:
        """The claim's removal (nft, CAP_NET_ADMIN), for a keeper that outlives a privilege drop (tools.privileges)."""
        return (self.claim.hand_over() if self.claim is not None else []), []

    def close(self) -> None:
        """Close the socket and unmap the rings.

        If the caller still holds lent frames the mapping cannot be unmapped
        now; it goes when the last of them is dropped (counted as
        ``packet_ring.close_deferred_unmap``).
        """
        if self._closed:
            return
        self._closed = True
        if self.claim is not None:
            self.claim.close()
        for view in self._tx_views:
            view.release()
        self._tx_views = []
        if self._watch is not None:
            self._watch.release()  # its buffer export would keep the ring mapped
            self._watch = None
        for view in self._views:
            view.release()
        self._views = []
        self._rx_mv = self._tx_mv = None
        deferred = False
        for ring in self._maps:
            try:
                ring.close()
            except BufferError:
                deferred = True
        self._maps = []
        if deferred:
            self.stats.inc("packet_ring.close_deferred_unmap")
        self._sock.close()
        self._tx_sock.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "PacketRingDevice":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PacketRingDevice({self.ifname!r}, {'closed' if self._closed else 'open'})"
