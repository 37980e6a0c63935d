"""The conformance harness: a device under test on a link with a peer, plus frame helpers.

A *link* is what the conformance tests talk to:

- ``device``: the Device under test (open);
- ``stack_mac``, ``peer_mac``, ``stack_ip``, ``peer_ip``: the link's addresses;
- ``peer_udp(port)``: a non-blocking UDP endpoint on the peer, bound to
  ``peer_ip:port``, with ``sendto``, ``recvfrom``, ``fileno``, ``close``
  (a kernel socket for kernel-peered links);
- ``peer_capture()``: a raw capture on the peer's interface with ``recv``,
  ``fileno``, ``close``, or None when the peer has none;
- ``small_opts`` / ``small_capacity``: device options that make its RX
  buffering small, and how many frames that buffering holds at most;
- ``reopen(**opts)``, ``close()``.

``KernelLink`` implements it over a ``ustack.tools.netns.Topology`` for every
backend that runs on a real interface (tap, packet, afxdp). A pipe link
would implement the same surface with a scripted peer on the other end.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import time
from typing import Callable, Optional

from ustack.tools.netns import Topology
from ustack.wire.checksum import ones_sum, pseudo_header_sum

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800

# Per kind: which topology, which backend with which options (``backend``
# defaults to the kind, ``opts`` to none), small-buffer options and the most
# frames those small buffers can hold.
KERNEL_KINDS = {
    "tap": {
        "topology": Topology.tap,
        "small_opts": {"rx_slots": 64},
        "small_capacity": 64,
    },
    "tap-gso": {
        "topology": Topology.tap,
        "backend": "tap",
        "opts": {"gso": True},
        "small_opts": {"rx_slots": 64},
        "small_capacity": 64,
    },
    "packet": {
        "topology": Topology.veth,
        "opts": {"gso": False},  # the per-frame TX ring; "packet-gso" below has the default's
        # the default TPACKET_V2 RX ring: 32 one-page blocks of two 2 KiB slots
        "small_opts": {"block_size": 4096, "block_count": 32, "tx_frames": 32},
        "small_capacity": 64,
    },
    "packet-v3": {
        "topology": Topology.veth,
        "backend": "packet",
        "opts": {"rx_version": 3},
        # 4 blocks of one page; a frame takes at least 144 bytes of a block
        # (tpacket3_hdr + sockaddr_ll + alignment + a 60-byte frame)
        "small_opts": {"block_size": 4096, "block_count": 4, "tx_frames": 32},
        "small_capacity": 4 * 4096 // 144,
    },
    "packet-gso": {
        "topology": Topology.veth,
        "backend": "packet",
        "opts": {"gso": True},
        # TX: 32 slots of 64 KiB with a virtio_net_hdr in front of every frame
        "small_opts": {"block_size": 4096, "block_count": 32, "tx_frames": 32},
        "small_capacity": 64,
    },
    "afxdp": {
        "topology": Topology.veth,
        # a 128-frame UMEM with 64-entry rings: 64 frames fit on the fill/RX side
        "small_opts": {"num_frames": 128, "ring_size": 64},
        "small_capacity": 64,
    },
}


class KernelLink:
    """A device on one end of a Topology; the kernel of the peer namespace on the other."""

    def __init__(self, kind: str, *, small: bool = False, tag: str = "b"):
        spec = KERNEL_KINDS[kind]
        self.kind = kind
        self.spec = spec
        self.small_opts = dict(spec["small_opts"])
        self.small_capacity = spec["small_capacity"]
        self.topo: Topology = spec["topology"](tag=tag)
        self.device = None
        self._closers: list = []
        try:
            self.stack_mac = self.topo.stack_mac
            self.peer_mac = self.topo.peer_mac
            self.stack_ip = self.topo.stack_addr
            self.peer_ip = self.topo.peer_addr
            # the kernel peer can send unicast to the stack before it answers ARP
            self.topo.add_peer_neighbour()
            self.device = self.open(**(self.small_opts if small else {}))
            if self.device.capabilities.mac != self.stack_mac:
                raise AssertionError("device MAC differs from the topology's stack MAC")
        except BaseException:
            self.close()
            raise

    def open(self, **opts):
        backend = self.spec.get("backend", self.kind)
        return self.topo.open_device(backend, **{**self.spec.get("opts", {}), **opts})

    def reopen(self, **opts):
        if self.device is not None:
            self.device.close()
        self.device = self.open(**opts)
        return self.device

    def peer_udp(self, port: int) -> socket.socket:
        with self.topo.in_peer_ns():
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind((self.peer_ip, port))
        s.setblocking(False)
        self._closers.append(s)
        return s

    def peer_tcp(self) -> socket.socket:
        with self.topo.in_peer_ns():
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        self._closers.append(s)
        return s

    def peer_capture(self) -> Optional[socket.socket]:
        with self.topo.in_peer_ns():
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            s.bind((self.topo.peer_ifname, ETH_P_ALL))
        s.setblocking(False)
        self._closers.append(s)
        return s

    def close(self) -> None:
        for s in self._closers:
            s.close()
        self._closers = []
        if self.device is not None:
            self.device.close()
        self.topo.close()


# -- frames -------------------------------------------------------------------


def ipv4_udp_frame(
    src_mac: bytes, dst_mac: bytes, src_ip: str, dst_ip: str, sport: int, dport: int, payload: bytes, ident: int = 0
) -> bytes:
    """Ethernet + IPv4 + UDP with both checksums computed (the reference checksum module)."""
    src, dst = socket.inet_aton(src_ip), socket.inet_aton(dst_ip)
    udp_len = 8 + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, ident & 0xFFFF, 0x4000, 64, 17, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", (~ones_sum(ip)) & 0xFFFF) + ip[12:]
    udp = struct.pack("!HHHH", sport, dport, udp_len, 0) + payload
    csum = (~ones_sum(udp, pseudo_header_sum(src, dst, 17, udp_len))) & 0xFFFF
    udp = udp[:6] + struct.pack("!H", csum or 0xFFFF) + udp[8:]
    return dst_mac + src_mac + struct.pack("!H", ETH_P_IP) + ip + udp


def parse_ipv4_l4(frame) -> Optional[tuple[str, str, int, int, int, bytes]]:
    """(src_ip, dst_ip, proto, sport, dport, l4 bytes) of an Ethernet/IPv4 frame, or None.

    Length-checked: anything short or not IPv4 gives None.
    """
    frame = bytes(frame)
    if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[14] >> 4 != 4:
        return None
    ihl = (frame[14] & 15) * 4
    total = struct.unpack_from("!H", frame, 16)[0]
    if ihl < 20 or total < ihl + 4 or 14 + total > len(frame):
        return None
    l4 = frame[14 + ihl : 14 + total]
    sport, dport = struct.unpack_from("!HH", l4)
    src, dst = socket.inet_ntoa(frame[26:30]), socket.inet_ntoa(frame[30:34])
    return src, dst, frame[23], sport, dport, l4


class Received(bytes):
    """A received frame's bytes and the device's ``rx_status`` mark for it (0 when it gives none)."""

    mark = 0


def l4_checksum_ok(frame) -> bool:
    """The UDP/TCP checksum of an IPv4 frame is complete and correct (RFC 768 / RFC 793); or, for a frame
    the device marked partial (RX_CSUM_PARTIAL: written on this host with checksum offload, as a TAP with
    TUNSETOFFLOAD gets them), exactly the folded pseudo-header sum that such a sender leaves."""
    parsed = parse_ipv4_l4(frame)
    assert parsed is not None
    src, dst, proto, _, _, l4 = parsed
    pseudo = pseudo_header_sum(socket.inet_aton(src), socket.inet_aton(dst), proto, len(l4))
    if getattr(frame, "mark", 0) & 0x8:
        at = 16 if proto == 6 else 6
        return int.from_bytes(l4[at:at + 2], "big") == ones_sum(b"", pseudo)
    return ones_sum(l4, pseudo) == 0xFFFF


def udp_dport(frame, dport: int) -> bool:
    parsed = parse_ipv4_l4(frame)
    return parsed is not None and parsed[2] == 17 and parsed[4] == dport


# -- bounded waits ----------------------------------------------------------------


def wait_readable(fd: int, deadline: float) -> bool:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return False
    return bool(select.select([fd], [], [], remaining)[0])


def collect(device, want: Callable[[bytes], bool], count: int, timeout: float = 5.0, *, until=None) -> list[bytes]:
    """Receive frames until ``count`` of them satisfy ``want`` (copies), releasing every burst.

    Waits on ``device.fileno()`` with a bounded deadline. With ``until`` (a
    predicate), also stops as soon as a frame satisfying it arrives, and
    returns all frames seen up to it.
    """
    deadline = time.monotonic() + timeout
    got: list[bytes] = []
    seen: list[bytes] = []
    while until is not None or len(got) < count:
        frames = device.rx_burst(64)
        marks = getattr(device, "rx_status", None) or [0] * len(frames)
        try:
            for f, mark in zip(frames, marks):
                b = Received(f)
                b.mark = mark
                if until is not None:
                    seen.append(b)
                    if until(b):
                        return seen
                if want(b):
                    got.append(b)
        finally:
            device.rx_release(frames)
        if frames:
            continue
        if not wait_readable(device.fileno(), deadline):
            break
    return seen if until is not None else got


def drain_udp(sock, count: int, timeout: float = 5.0) -> list[tuple[bytes, tuple]]:
    """recvfrom a non-blocking socket until ``count`` datagrams arrived or the deadline passes."""
    deadline = time.monotonic() + timeout
    out = []
    while len(out) < count:
        try:
            out.append(sock.recvfrom(65536))
            continue
        except BlockingIOError:
            pass
        if not wait_readable(sock.fileno(), deadline):
            break
    return out


def transmit(device, frames: list[bytes], timeout: float = 5.0) -> int:
    """tx_reserve/tx_commit all ``frames`` (in order), waiting for slots; returns how many went."""
    deadline = time.monotonic() + timeout
    sent = 0
    while sent < len(frames) and time.monotonic() < deadline:
        slots = device.tx_reserve(min(len(frames) - sent, device.capabilities.max_burst))
        lengths = []
        for slot in slots:
            frame = frames[sent + len(lengths)]
            slot[: len(frame)] = frame
            lengths.append(len(frame))
        device.tx_commit(lengths)
        sent += len(lengths)
        if not slots:
            # TX slots come back asynchronously; a packet ring polls writable
            # when the kernel's next slot is free (a TAP always does)
            remaining = deadline - time.monotonic()
            if remaining > 0:
                select.select([], [device.fileno()], [], remaining)
    return sent


def random_payload(n: int) -> bytes:
    return os.urandom(n)
