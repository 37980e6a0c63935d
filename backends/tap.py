"""The TAP backend: a Linux TAP device (/dev/net/tun) as a Device.

``TapDevice(ifname)`` attaches to (or creates) a TAP device in the calling
thread's network namespace, IFF_TAP | IFF_NO_PI, non-blocking. The kernel
side of the TAP is an ordinary interface; the user-space stack is the "wire"
behind it and uses its own MAC (``mac``), not the interface's.

Buffers come from two preallocated pools: ``rx_burst`` reads frames into
free RX slots and lends memoryviews of them until ``rx_release``;
``tx_reserve`` lends TX slots and ``tx_commit`` writes each frame (TAP takes
exactly one frame per write(2), so there is no batching below this point).
The fd is opened in the namespace it is opened from and stays there.

``gso=True`` (off by default): IFF_VNET_HDR, so every frame read or written
carries a 10-byte virtio_net_hdr in front, and ``tx_commit`` merges
runs of consecutive full-sized segments of one TCP flow into one
super-frame (``_fastpath.tpv3_tx_post_gso`` over a TX pool laid out as a
TPACKET_V3 ring of 64 KiB slots, 4 MiB with the default 64-frame burst),
written whole: the kernel takes it as one GSO skb (its TCP receives 64 KB
at once). Counted as ``tap.gso_frames`` / ``tap.gso_segments``.

On receive, ``gso=True`` also offers the kernel our offloads (TUNSETOFFLOAD:
TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6), as a virtio NIC would: the kernel then
neither finishes checksums nor segments what it sends us. A TCP super-frame of
up to 64 KiB arrives whole in one read (RX slots take 64 KiB), and each frame's
header says how far its checksum can be trusted: VIRTIO_NET_HDR_F_NEEDS_CSUM
(written on this host, the sum left partial) and VIRTIO_NET_HDR_F_DATA_VALID
(verified) become ``rx_status`` marks that classify trusts (rx.csum_trusted),
as the kernel's own input trusts them. Counted as ``tap.rx_gso_frames`` (frames
longer than the MTU). Without gso no offload is offered: the kernel finishes
every checksum and segments every super-frame before handing it over.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import struct
from typing import Optional, Sequence

from ustack import _fastpath as fp
from ustack.device import Capabilities, DeviceError
from ustack.stats import Stats

TUN_PATH = "/dev/net/tun"
TUNSETIFF = 0x400454CA  # _IOW('T', 202, int)
TUNSETOFFLOAD = 0x400454D0  # _IOW('T', 208, unsigned int)
TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6 = 0x01, 0x02, 0x04
VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_HDR_F_DATA_VALID = 0x01, 0x02
# virtio_net_hdr flags -> rx_status marks (ustack.device: Linux's tpacket bits CSUMNOTREADY 0x8, CSUM_VALID 0x80)
_RX_MARK = (0, 0x8, 0x80, 0x8 | 0x80)
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000
VNET_HDR_LEN = 10  # struct virtio_net_hdr (TUNSETVNETHDRSZ's default)
GSO_SLOT = 1 << 16  # a TX pool slot with gso: 48 bytes (the ring layout's header) + 10 + up to 65,478
TPV3_HDR_LEN = 48
SIOCGIFMTU = 0x8921
SIOCSIFMTU = 0x8922
ETH_HLEN = 14
VLAN_HLEN = 4
IFNAMSIZ = 16
GRO_FRAME = 0xFFFF + ETH_HLEN + VLAN_HLEN  # the largest super-frame: a 64 KiB IP datagram, Ethernet, a VLAN tag


def _ifreq_int(name: bytes, value: int = 0) -> bytes:
    return struct.pack("16si20x", name, value)


class TapDevice:
    """A TAP device: ``TapDevice(ifname, *, mac=None, mtu=None, create=True)``.

    ``mac`` is the MAC the stack uses on this link (default: a random locally
    administered unicast address). ``mtu`` sets the interface MTU when given
    (default: keep the interface's). ``create=False`` refuses to create a
    device that does not exist yet; with ``create=True`` a missing device is
    created and lives as long as this object keeps it open (a persistent one
    made by ``ustack.tools.netns.Topology.tap`` outlives it).
    """

    def __init__(
        self,
        ifname: str,
        *,
        mac: Optional[bytes] = None,
        mtu: Optional[int] = None,
        create: bool = True,
        max_burst: int = 64,
        rx_slots: int = 256,
        gso: bool = False,
    ):
        if not isinstance(ifname, str) or not 0 < len(ifname.encode()) < IFNAMSIZ:
            raise DeviceError(errno.EINVAL, f"bad interface name {ifname!r} (1..15 bytes)")
        if mac is not None and len(mac) != 6:
            raise DeviceError(errno.EINVAL, "mac must be 6 bytes")
        if max_burst < 1 or rx_slots < max_burst:
            raise DeviceError(errno.EINVAL, "need max_burst >= 1 and rx_slots >= max_burst")
        self.stats = Stats()
        self.gso = bool(gso)
        self._closed = True
        self._rx_lent: dict[int, int] = {}  # id(lent view) -> slot
        if not create:
            try:
                socket.if_nametoindex(ifname)
            except OSError:
                raise DeviceError(
                    errno.ENODEV, f"no network device named {ifname!r} in this network namespace (create=False)"
                ) from None
        try:
            fd = os.open(TUN_PATH, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise DeviceError(errno.ENOENT, f"{TUN_PATH} does not exist (tun module not loaded?)") from None
        except PermissionError:
            raise DeviceError(errno.EPERM, f"permission denied opening {TUN_PATH}: needs root or CAP_NET_ADMIN") from None
        try:
            name = self._attach(fd, ifname, IFF_VNET_HDR if self.gso else 0)
            if self.gso:
                try:
                    fcntl.ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6)
                except OSError as exc:
                    raise DeviceError(exc.errno, f"TUNSETOFFLOAD on {ifname!r}: {os.strerror(exc.errno)}") from None
            self._file = os.fdopen(fd, "r+b", buffering=0)
        except BaseException:
            os.close(fd)
            raise
        self._closed = False
        try:
            self.ifname = name
            self.mtu = self._mtu(name, mtu)
        except BaseException:
            self.close()
            raise
        if mac is None:
            mac = bytes([0x02]) + os.urandom(5)  # locally administered, unicast
        frame_size = self.mtu + ETH_HLEN + VLAN_HLEN
        self.capabilities = Capabilities(
            mac=bytes(mac),
            mtu=self.mtu,
            max_burst=max_burst,
            frame_size=frame_size,
            mode="tap (/dev/net/tun, one read/write per frame)" + (" vnet_hdr gso" if self.gso else ""),
            tx_tcp_segmentation=min(GSO_SLOT - TPV3_HDR_LEN - VNET_HDR_LEN - ETH_HLEN, 0xFFFF) if self.gso else 0,
            extra={"ifname": name, "rx_frames": rx_slots},
        )
        # RX slots are one byte longer than the largest frame the kernel
        # should hand us, so a read that fills a slot exposes an oversize frame.
        self._rx_off = VNET_HDR_LEN if self.gso else 0
        self._rx_slot = (self._rx_off + max(frame_size, GRO_FRAME if self.gso else 0) + 1 + 63) & ~63
        if self.gso:
            self.rx_status: list[int] = []  # the last burst's checksum marks (module docstring)
        self._rx_pool = bytearray(self._rx_slot * rx_slots)
        pool = memoryview(self._rx_pool)
        self._rx_views = [pool[i * self._rx_slot : (i + 1) * self._rx_slot] for i in range(rx_slots)]
        self._rx_free = list(range(rx_slots - 1, -1, -1))
        if self.gso:
            self._tx_pool = bytearray(GSO_SLOT * max_burst)
            tx = memoryview(self._tx_pool)
            base = TPV3_HDR_LEN + VNET_HDR_LEN
            self._tx_views = [tx[i * GSO_SLOT + base : i * GSO_SLOT + base + frame_size] for i in range(max_burst)]
        else:
            self._tx_pool = bytearray(frame_size * max_burst)
            tx = memoryview(self._tx_pool)
            self._tx_views = [tx[i * frame_size : (i + 1) * frame_size] for i in range(max_burst)]
        self._tx_reserved = 0

    @staticmethod
    def _attach(fd: int, ifname: str, extra_flags: int = 0) -> str:
        ifr = struct.pack("16sH22x", ifname.encode(), IFF_TAP | IFF_NO_PI | extra_flags)
        try:
            out = fcntl.ioctl(fd, TUNSETIFF, ifr)
        except OSError as exc:
            if exc.errno == errno.EPERM:
                msg = f"TUNSETIFF {ifname!r}: operation not permitted (needs CAP_NET_ADMIN, or the device belongs to another user)"
            elif exc.errno == errno.EBUSY:
                msg = f"TAP device {ifname!r} is busy: another file descriptor is attached to it"
            elif exc.errno == errno.EINVAL:
                msg = f"{ifname!r} exists but is not a single-queue TAP device (a TUN, multi-queue TAP or other link?)"
            else:
                msg = f"TUNSETIFF {ifname!r} failed: {os.strerror(exc.errno)}"
            raise DeviceError(exc.errno, msg) from None
        return out[:IFNAMSIZ].rstrip(b"\0").decode()

    @staticmethod
    def _mtu(ifname: str, wanted: Optional[int]) -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            name = ifname.encode()
            if wanted is not None:
                try:
                    fcntl.ioctl(s, SIOCSIFMTU, _ifreq_int(name, wanted))
                except OSError as exc:
                    raise DeviceError(exc.errno, f"cannot set MTU {wanted} on {ifname!r}: {os.strerror(exc.errno)}") from None
            out = fcntl.ioctl(s, SIOCGIFMTU, _ifreq_int(name))
            return struct.unpack_from("i", out, IFNAMSIZ)[0]

    # -- Device protocol ----------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise DeviceError(errno.EBADF, f"TAP device {getattr(self, 'ifname', '?')!r} is closed")

    def rx_burst(self, max_frames: int) -> list[memoryview]:
        self._check_open()
        free = self._rx_free
        count = min(max_frames, len(free))
        frames: list[memoryview] = []
        readinto = self._file.readinto
        lent = self._rx_lent
        views = self._rx_views
        limit = self._rx_slot - 1
        off = self._rx_off
        runts = oversize = big = 0
        marks: Optional[list[int]] = [] if off else None
        mtu_frame = self.mtu + ETH_HLEN + VLAN_HLEN
        for _ in range(count):
            slot = free.pop()
            try:
                got = readinto(views[slot])
            except OSError as exc:
                free.append(slot)
                if exc.errno in (errno.EAGAIN, errno.EINTR):
                    break
                if exc.errno in (errno.EFAULT, errno.EINVAL, errno.EMSGSIZE):
                    oversize += 1  # frame larger than the slot: the kernel refused to copy it
                    continue
                raise DeviceError(exc.errno, f"read from TAP {self.ifname!r}: {os.strerror(exc.errno)}") from None
            if got is None:  # EAGAIN on a non-blocking FileIO
                free.append(slot)
                break
            if got < off + ETH_HLEN or got > limit:
                free.append(slot)
                if got < off + ETH_HLEN:
                    runts += 1
                else:
                    oversize += 1
                continue
            view = views[slot]
            frame = view[off:got]  # (with gso: after the virtio_net_hdr)
            lent[id(frame)] = slot
            frames.append(frame)
            if marks is not None:
                marks.append(_RX_MARK[view[0] & 3])  # virtio_net_hdr.flags
                if got - off > mtu_frame:
                    big += 1
        if marks is not None:
            self.rx_status = marks
        if frames:
            self.stats.inc("tap.rx_frames", len(frames))
        if big:
            self.stats.inc("tap.rx_gso_frames", big)
        if runts:
            self.stats.drop("tap.rx_runt", runts)
        if oversize:
            self.stats.drop("tap.rx_oversize", oversize)
        return frames

    def rx_release(self, frames: Sequence[memoryview]) -> None:
        lent = self._rx_lent
        free = self._rx_free
        foreign = 0
        for frame in frames:
            slot = lent.pop(id(frame), None)
            if slot is None:
                foreign += 1
            else:
                free.append(slot)
        if foreign:
            self.stats.inc("tap.rx_release_foreign", foreign)

    def tx_reserve(self, n: int) -> list[memoryview]:
        self._check_open()
        n = max(0, min(n, len(self._tx_views)))
        self._tx_reserved = n
        return self._tx_views[:n]

    def tx_commit(self, lengths: Sequence[int]) -> None:
        self._check_open()
        count = len(lengths)
        if count > self._tx_reserved:
            raise ValueError(f"tx_commit of {count} frames but only {self._tx_reserved} reserved")
        limit = self.capabilities.frame_size
        for length in lengths:
            if not ETH_HLEN <= length <= limit:
                raise ValueError(f"TX frame length {length} outside {ETH_HLEN}..{limit}")
        self._tx_reserved = 0
        if self.gso:
            self._commit_gso(lengths)
            return
        write = self._file.write
        views = self._tx_views
        sent = errors = 0
        for i in range(count):
            try:
                if write(views[i][: lengths[i]]) is None:
                    errors += 1  # EAGAIN: the kernel queue is full
                else:
                    sent += 1
            except OSError:
                errors += 1  # EIO when the interface is down, etc.
        if sent:
            self.stats.inc("tap.tx_frames", sent)
        if errors:
            self.stats.drop("tap.tx_error", errors)

    def _commit_gso(self, lengths: Sequence[int]) -> None:
        pool = self._tx_pool
        nr = len(self._tx_views)
        _, posted, supers, merged = fp.tpv3_tx_post_gso(
            pool, 0, GSO_SLOT, nr, 0, lengths, self.capabilities.frame_size, self.capabilities.tx_tcp_segmentation,
            64)
        write = self._file.write
        view = memoryview(pool)
        sent = errors = 0
        for k in range(posted):
            slot = k * GSO_SLOT
            tp_len = struct.unpack_from("=I", pool, slot + 16)[0]  # tpacket3_hdr.tp_len: virtio_net_hdr + frame
            try:
                if write(view[slot + TPV3_HDR_LEN : slot + TPV3_HDR_LEN + tp_len]) is None:
                    errors += 1
                else:
                    sent += 1
            except OSError:
                errors += 1
        if sent:  # the stack's frames (a super-frame counts for its segments) when every write went
            self.stats.inc("tap.tx_frames", len(lengths) if not errors else sent)
        if supers:
            self.stats.inc("tap.gso_frames", supers)
            self.stats.inc("tap.gso_segments", merged)
        if errors:
            self.stats.drop("tap.tx_error", errors)

    def poll_at(self, now: float) -> None:
        """Frames arrive only from the kernel: nothing is due on a timer."""
        return None

    def fileno(self) -> int:
        return -1 if self._closed else self._file.fileno()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._rx_lent.clear()
        self._file.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "TapDevice":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"fd {self._file.fileno()}"
        return f"TapDevice({getattr(self, 'ifname', '?')!r}, {state})"
