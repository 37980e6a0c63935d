"""The fuzz campaign (issue 12): hostile frames of every protocol through a whole Stack.

    python -m ustack.tools.fuzz_stack --frames 1000000 --seed 1 [--burst 32] [--json]

Two stacks, A (198.18.0.1) and B (198.18.0.2), on the pipe backend and one
manual clock. A runs a TCP echo service on port 80 and a UDP echo on port
7; B keeps a TCP connection to A streaming a deterministic byte sequence and
checking every echoed byte, and sends numbered UDP datagrams checking each
echo. Meanwhile A's device lends it generated frames (``LendingDevice``
adds them to each RX burst, so they go through classify and the whole
input path like real ones): Ethernet (VLAN tags, odd ethertypes, runts),
ARP (requests, replies, bad hardware/protocol sizes), IPv4 (every option
kind, valid and broken; fragments with random offsets and overlaps),
ICMP (echo, errors quoting TCP/UDP headers, unknown types), IPv6 (A also
has fd00::1/64: extension-header chains of every kind and length, routing
type 0, fragments and atomic fragments, ICMPv6 echo and errors, NS/NA/RS/RA
with valid and broken options, martian sources, foreign groups), UDP and TCP
(every flag combination, every option kind: MSS, window scale,
SACK-permitted, SACK blocks, timestamps, unknown and malformed), each built
with the ``ustack.wire`` emitters and then, often, mutated: bytes flipped,
truncated or extended, length fields and checksums broken (or fixed after
the damage so the deeper layers see it).

Frames that would be legitimate attacks with a known outcome are not sent
(ARP replies claiming B's address, TCP segments within the live
connection's window, ICMP errors quoting it): the campaign looks for
crashes, leaks and collateral damage, not for what TCP and ARP cannot
prevent by design.

With ``--storms N`` it then runs N stack-to-stack storms (issue 25): two
fresh stacks on a 1 ms pipe, timestamps off, one connection between them,
and a few forged in-window data segments injected in each direction (so each
side's ACKs fall left of the other's RCV.NXT) plus spoofed out-of-window
ones. Every storm must end quiet: no frame at all in the last 5 of its 10
simulated seconds.

At the end it prints frames/s, ``stack.internal_error`` (must be 0), the
drop-reason histogram, peak RSS before and after (``resource.getrusage``),
and the bytes and datagrams checked; it exits 1 on any internal error,
wrong or lost byte, or lost datagram.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import struct
import sys
import time
from collections import Counter, deque

from ustack.api import environment
from ustack.api.clock import ManualClock
from ustack.backends.pipe import PipeLink
from ustack.net.addr import ANY4
from ustack.stack import Stack
from ustack.tools.flood_frames import ether, ipv4, tcp as tcp_segment
from ustack.transport.tcp import State, TcpConfig
from ustack.wire import arp as warp
from ustack.wire import icmp as wicmp
from ustack.wire import icmpv6 as wicmp6
from ustack.wire import ipv4 as wip
from ustack.wire import ipv6 as wip6
from ustack.wire import tcp as wtcp
from ustack.wire.checksum import internet_checksum
from ustack.wire.ethernet import ETHERTYPE_ARP, ETHERTYPE_VLAN, EthernetHeader
from ustack.wire.udp import UdpHeader

A_IP = bytes((198, 18, 0, 1))
B_IP = bytes((198, 18, 0, 2))
A_IP6 = bytes.fromhex("fd000000000000000000000000000001")
B_IP6 = bytes.fromhex("fd000000000000000000000000000002")
ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
TCP_PORT, UDP_PORT, UDP_CLIENT_PORT = 80, 7, 4000
STREAM_CHUNK = 4096
STREAM_INFLIGHT = 64 * 1024


class LendingDevice:
    """A Device decorator that adds lent frames to each RX burst of the device it wraps."""

    def __init__(self, inner):
        self.inner = inner
        self.lent: deque = deque()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def rx_burst(self, max_frames: int):
        frames = self.inner.rx_burst(max_frames)
        lent = self.lent
        while lent and len(frames) < max_frames:
            frames.append(memoryview(lent.popleft()))
        return frames

    def rx_release(self, frames) -> None:
        self.inner.rx_release(frames)


_PERIOD = 65521  # a prime: a shifted, dropped or duplicated run of the stream never lines up again
_PATTERN = bytes(random.Random(0x57EA).randbytes(_PERIOD)) * 3


def stream_bytes(offset: int, n: int) -> bytes:
    """The deterministic stream B sends: byte i is _PATTERN[i mod _PERIOD] (n <= 2 * _PERIOD)."""
    start = offset % _PERIOD
    return _PATTERN[start : start + n]


class FrameFactory:
    """Generated frames, valid and broken, toward A (``a_mac``, A_IP)."""

    def __init__(self, rng: random.Random, a_mac: bytes, b_mac: bytes, live: tuple):
        self.rng = rng
        self.a_mac = a_mac
        self.b_mac = b_mac
        self.live = live  # (B's port of the live TCP connection) to keep clear of
        self.kinds = Counter()
        self._makers = [
            (self.arp, 10), (self.ip_options, 10), (self.fragment, 12), (self.icmp, 12), (self.udp, 14),
            (self.tcp, 30), (self.ethernet_odd, 4), (self.raw_garbage, 2), (self.ipv6, 14),
        ]
        self._weights = [w for _, w in self._makers]

    # -- helpers -----------------------------------------------------------

    def src_ip(self) -> bytes:
        r = self.rng.random()
        if r < 0.5:
            return B_IP
        if r < 0.8:
            return bytes((198, 18, 0, self.rng.randrange(3, 255)))
        if r < 0.9:  # martians of every kind
            return self.rng.choice([b"\xff\xff\xff\xff", b"\x7f\0\0\1", b"\0\0\0\0", b"\xe0\0\0\1", b"\xf0\0\0\1",
                                    A_IP, b"\xc6\x12\x00\xff"])
        return self.rng.randbytes(4)

    def eth(self, ethertype: int, payload: bytes) -> bytes:
        rng = self.rng
        dst = self.a_mac if rng.random() < 0.9 else rng.choice([b"\xff" * 6, rng.randbytes(6)])
        src = self.b_mac if rng.random() < 0.7 else rng.randbytes(6)
        vlan = rng.randrange(4096) if rng.random() < 0.03 else None
        hdr = EthernetHeader(dst, src, ethertype, vlan_id=vlan)
        buf = bytearray(hdr.length)
        hdr.emit(buf)
        return bytes(buf) + payload

    def ip(self, proto: int, payload: bytes, src: bytes | None = None, options: bytes = b"", **kw) -> bytes:
        src = src if src is not None else self.src_ip()
        hdr = wip.Ipv4Header(total_length=wip.MIN_HEADER_LEN + ((len(options) + 3) & ~3) + len(payload),
                             ident=kw.pop("ident", self.rng.randrange(65536)), ttl=self.rng.choice([1, 2, 64, 255]), proto=proto,
                             src=src, dst=kw.pop("dst", A_IP), options=options, **kw)
        buf = bytearray(hdr.header_len)
        hdr.emit(buf)
        return bytes(buf) + payload

    def ip_option_bytes(self) -> bytes:
        rng = self.rng
        kind = rng.randrange(8)
        if kind == 0:
            opt = wip.RecordRoute.empty(rng.randrange(1, 10)).encode()
        elif kind == 1:
            opt = wip.RecordRoute.empty(rng.randrange(1, 9), type=rng.choice([wip.IPOPT_LSRR, wip.IPOPT_SSRR])).encode()
        elif kind == 2:
            opt = wip.Timestamp(flag=rng.choice([wip.TS_ONLY, wip.TS_AND_ADDR, wip.TS_PRESPEC]),
                                entries=()).encode() + b""
        elif kind == 3:
            opt = bytes((wip.IPOPT_RA, 4, 0, 0))
        elif kind == 4:
            opt = bytes((wip.IPOPT_NOP,)) * rng.randrange(1, 8) + bytes((wip.IPOPT_EOL,))
        elif kind == 5:  # a length that runs past the header, or is 0/1
            opt = bytes((rng.choice([7, 68, 131, 137, 148, 0x99]), rng.choice([0, 1, 2, 39, 40, 255])))
            opt += rng.randbytes(rng.randrange(0, 10))
        elif kind == 6:
            opt = rng.randbytes(rng.randrange(1, 41))
        else:
            opt = bytes((rng.randrange(256), rng.randrange(256))) + rng.randbytes(rng.randrange(0, 8))
        return opt[: wip.MAX_OPTIONS_LEN]

    def transport_payload(self) -> tuple[int, bytes]:
        rng = self.rng
        proto = rng.choice([wip_proto for wip_proto in (1, 6, 17)] + [rng.randrange(256)])
        if proto == 6:
            return 6, self.tcp_segment(self.src_ip())[0]
        if proto == 17:
            return 17, self.udp_datagram(B_IP)
        if proto == 1:
            return 1, self.icmp_message()
        return proto, rng.randbytes(rng.randrange(0, 64))

    # -- generators, one per protocol -------------------------------------

    def arp(self) -> bytes:
        rng = self.rng
        spa = self.src_ip()
        if spa == B_IP:
            spa = bytes((198, 18, 0, rng.randrange(3, 255)))  # never spoof the live peer (ARP can't stop that)
        tpa = A_IP if rng.random() < 0.7 else self.src_ip()
        sha = rng.randbytes(6) if rng.random() < 0.5 else self.b_mac
        pkt = (warp.ArpPacket.request(sha, spa, tpa) if rng.random() < 0.6
               else warp.ArpPacket(warp.OP_REPLY, sha, spa, self.a_mac, tpa))
        buf = bytearray(warp.LENGTH)
        pkt.emit(buf)
        if rng.random() < 0.2:  # bad hardware/protocol type or sizes, unknown operation
            i = rng.choice([0, 1, 2, 3, 4, 5, 6, 7])
            buf[i] = rng.randrange(256)
        return self.eth(ETHERTYPE_ARP, bytes(buf))

    def ip_options(self) -> bytes:
        proto, payload = self.transport_payload()
        return self.eth(ETHERTYPE_IPV4, self.ip(proto, payload, options=self.ip_option_bytes()))

    def fragment(self) -> bytes:
        rng = self.rng
        proto, payload = self.transport_payload()
        payload += rng.randbytes(rng.randrange(0, 600))
        off = rng.choice([0, 8, 16, 1480, rng.randrange(0, 8192) * 8])
        cut = min(len(payload), rng.randrange(8, 1480) & ~7 or 8)
        mf = rng.random() < 0.7
        # a small set of idents so fragments do meet (and overlap) in reassembly
        return self.eth(ETHERTYPE_IPV4, self.ip(proto, payload[:cut], src=B_IP if rng.random() < 0.6 else None,
                                                flags_mf=mf, frag_offset=off, ident=rng.randrange(4)))

    def icmp_message(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.3:
            msg = wicmp.IcmpMessage.echo_request(rng.randrange(65536), rng.randrange(65536),
                                                 rng.randbytes(rng.randrange(0, 200)))
        elif r < 0.8:
            # an error quoting an IPv4 header and 8+ bytes of a TCP/UDP header we might own
            qproto = rng.choice([6, 17, 1, 47])
            sport = rng.choice([TCP_PORT, UDP_PORT, rng.randrange(65536)])
            dport = rng.randrange(1, 65536)
            if qproto == 6 and dport == self.live:
                dport += 1
            quoted_l4 = struct.pack("!HHI", sport, dport, rng.randrange(1 << 32)) + rng.randbytes(rng.randrange(0, 20))
            quoted = self.ip(qproto, quoted_l4, src=A_IP, dst=self.src_ip())
            quoted = quoted[: rng.choice([len(quoted), 20, 27, 28, rng.randrange(0, len(quoted) + 1)])]
            t = rng.choice([wicmp.DEST_UNREACHABLE, wicmp.TIME_EXCEEDED, wicmp.PARAMETER_PROBLEM,
                            wicmp.SOURCE_QUENCH, wicmp.REDIRECT])
            msg = wicmp.IcmpMessage(t, rng.randrange(16), rng.randrange(65536), rng.randrange(65536), quoted)
        else:
            msg = wicmp.IcmpMessage(rng.randrange(256), rng.randrange(256), rng.randrange(65536),
                                    rng.randrange(65536), rng.randbytes(rng.randrange(0, 64)))
        buf = bytearray(msg.length)
        msg.emit(buf)
        return bytes(buf)

    def icmp(self) -> bytes:
        return self.eth(ETHERTYPE_IPV4, self.ip(1, self.icmp_message()))

    def udp_datagram(self, src: bytes) -> bytes:
        rng = self.rng
        payload = rng.randbytes(rng.randrange(0, 300))
        sport = rng.randrange(1, 65536)
        if sport == UDP_CLIENT_PORT:
            sport += 1
        dport = rng.choice([UDP_PORT, UDP_PORT, 53, 67, rng.randrange(65536)])
        hdr = UdpHeader(sport, dport, 8 + len(payload))
        buf = bytearray(hdr.length)
        hdr.emit(buf, 0, src, A_IP, payload, with_checksum=rng.random() < 0.9)
        return bytes(buf)

    def udp(self) -> bytes:
        src = self.src_ip()
        return self.eth(ETHERTYPE_IPV4, self.ip(17, self.udp_datagram(src), src=src))

    def tcp_segment(self, src: bytes) -> tuple[bytes, int]:
        rng = self.rng
        sport = rng.randrange(1, 65536)
        if src == B_IP and sport == self.live:
            sport += 1  # the live connection is exercised with out-of-window segments only (see tcp())
        dport = rng.choice([TCP_PORT, TCP_PORT, rng.randrange(65536)])
        flags = rng.choice([wtcp.SYN, wtcp.SYN | wtcp.ACK, wtcp.ACK, wtcp.RST, wtcp.RST | wtcp.ACK,
                            wtcp.FIN | wtcp.ACK, wtcp.PSH | wtcp.ACK, rng.randrange(256)])
        kw = {}
        for name, p in (("mss", 0.3), ("wscale", 0.2), ("sack_permitted", 0.2), ("timestamps", 0.3),
                        ("sack_blocks", 0.15), ("unknown_options", 0.1)):
            if rng.random() < p:
                if name == "mss":
                    kw[name] = rng.choice([0, 1, 88, 536, 1460, 65535])
                elif name == "wscale":
                    kw[name] = rng.choice([0, 7, 14, 15, 255])
                elif name == "sack_permitted":
                    kw[name] = True
                elif name == "timestamps":
                    kw[name] = (rng.randrange(1 << 32), rng.randrange(1 << 32))
                elif name == "sack_blocks":
                    base = rng.randrange(1 << 32)
                    kw[name] = tuple(((base + 100 * i) & 0xFFFFFFFF, (base + 100 * i + 50) & 0xFFFFFFFF)
                                     for i in range(rng.randrange(1, 4 if "timestamps" in kw else 5)))
                else:
                    kw[name] = ((rng.choice([6, 7, 19, 28, 30, 34, 253, 254]), rng.randbytes(rng.randrange(0, 6))),)
        payload = rng.randbytes(rng.randrange(0, 200)) if rng.random() < 0.5 else b""
        try:
            hdr = wtcp.TcpHeader(sport, dport, rng.randrange(1 << 32), rng.randrange(1 << 32), flags,
                                 rng.randrange(65536), 0, rng.randrange(65536) if rng.random() < 0.05 else 0, **kw)
            seg = hdr.to_bytes(src, A_IP, payload)
        except (ValueError, struct.error):  # options past 40 bytes: send the header without them
            hdr = wtcp.TcpHeader(sport, dport, rng.randrange(1 << 32), 0, flags, rng.randrange(65536))
            seg = hdr.to_bytes(src, A_IP, payload)
        if rng.random() < 0.1:  # malformed options: a length byte that lies
            seg = bytearray(seg)
            if len(seg) > 21 and seg[12] >> 4 > 5:
                seg[21] = rng.choice([0, 1, 2, 40, 255])
                self._fix_tcp_checksum(seg, src)
            seg = bytes(seg)
        return seg, sport

    @staticmethod
    def _fix_tcp_checksum(seg: bytearray, src: bytes) -> None:
        seg[16:18] = b"\0\0"
        pseudo = src + A_IP + struct.pack("!BBH", 0, 6, len(seg))
        seg[16:18] = struct.pack("!H", internet_checksum(pseudo + bytes(seg)))

    def tcp(self) -> bytes:
        src = self.src_ip()
        seg, _ = self.tcp_segment(src)
        return self.eth(ETHERTYPE_IPV4, self.ip(6, seg, src=src))

    # -- IPv6 --------------------------------------------------------------

    def src_ip6(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.5:
            return B_IP6
        if r < 0.7:
            return bytes.fromhex("fe80000000000000") + rng.randbytes(8)
        if r < 0.85:  # martians: multicast, ::, ::1, v4-mapped, our own
            return rng.choice([bytes.fromhex("ff02" + "00" * 13 + "01"), bytes(16), bytes(15) + b"\1",
                               bytes(10) + b"\xff\xff" + B_IP, A_IP6])
        return bytes.fromhex("fd00") + rng.randbytes(14)

    def dst_ip6(self) -> tuple[bytes, bytes]:
        """(destination address, destination MAC)."""
        rng = self.rng
        r = rng.random()
        if r < 0.6:
            return A_IP6, self.a_mac
        group = rng.choice([bytes.fromhex("ff02" + "00" * 13 + "01"), bytes.fromhex("ff0200000000000000000001ff000001"),
                            bytes.fromhex("ff02" + "00" * 13 + "02"), bytes.fromhex("ff0200000000000000000001ff") +
                            rng.randbytes(3)])
        return group, b"\x33\x33" + group[12:16] if rng.random() < 0.9 else rng.randbytes(6)

    def icmpv6_message(self, src: bytes, dst: bytes) -> bytes:
        rng = self.rng
        r = rng.random()
        lla = ((wicmp6.OPT_SOURCE_LLA, rng.choice([self.b_mac, rng.randbytes(6)])),) if rng.random() < 0.7 else ()
        if r < 0.2:
            msg = wicmp6.Icmpv6Message.echo_request(rng.randrange(65536), rng.randrange(65536),
                                                    rng.randbytes(rng.randrange(0, 300)))
        elif r < 0.35:  # an error quoting an IPv6 packet we might have sent
            nh = rng.choice([6, 17, 58, 0, 44, 60])
            quoted_l4 = struct.pack("!HHI", rng.choice([TCP_PORT, UDP_PORT, rng.randrange(65536)]),
                                    rng.randrange(1, 65536), rng.randrange(1 << 32)) + rng.randbytes(rng.randrange(20))
            q = bytearray(40 + len(quoted_l4))
            wip6.Ipv6Header(A_IP6, self.src_ip6(), nh, len(quoted_l4)).emit(q)
            q[40:] = quoted_l4
            msg = wicmp6.Icmpv6Message.error(rng.choice([1, 2, 3, 4]), rng.randrange(8),
                                             bytes(q[:rng.choice([len(q), 40, 47, rng.randrange(len(q) + 1)])]),
                                             rng.choice([0, 600, 1280, 1400, 9000, rng.randrange(1 << 32)]))
        elif r < 0.55:
            target = rng.choice([A_IP6, B_IP6, bytes.fromhex("fd00") + rng.randbytes(14), bytes.fromhex("ff02" + "00" * 14)])
            msg = wicmp6.NeighborSolicit(target, lla).to_message()
        elif r < 0.7:
            target = rng.choice([B_IP6, A_IP6, bytes.fromhex("fe80000000000000") + rng.randbytes(8)])
            msg = wicmp6.NeighborAdvert(target, rng.randrange(8) << 29,
                                        ((wicmp6.OPT_TARGET_LLA, rng.randbytes(6)),) if rng.random() < 0.8 else ()
                                        ).to_message()
        elif r < 0.85:
            pis = tuple((wicmp6.OPT_PREFIX_INFO, wicmp6.PrefixInfo(rng.choice([bytes.fromhex("fd00") + rng.randbytes(14),
                                                                               rng.randbytes(16)]),
                                                                   rng.choice([64, 48, 128, rng.randrange(256)]),
                                                                   rng.randrange(256), rng.randrange(1 << 32),
                                                                   rng.randrange(1 << 32)))
                        for _ in range(rng.randrange(3)))
            mtu = ((wicmp6.OPT_MTU, rng.choice([1280, 1400, 1500, 9000, 68])),) if rng.random() < 0.5 else ()
            msg = wicmp6.RouterAdvert(rng.randrange(256), rng.randrange(256), rng.randrange(65536),
                                      rng.randrange(1 << 32), rng.randrange(1 << 32), lla + mtu + pis).to_message()
        elif r < 0.9:
            msg = wicmp6.RouterSolicit(lla).to_message()
        else:
            msg = wicmp6.Icmpv6Message(rng.randrange(256), rng.randrange(4), rng.randrange(1 << 32),
                                       rng.randbytes(rng.randrange(0, 64)))
        body = bytearray(msg.to_bytes(src, dst))
        if rng.random() < 0.1 and len(body) > 9:  # a malformed option length, checksum fixed after
            body[rng.randrange(8, len(body))] = rng.choice([0, 1, 255])
            body[2:4] = b"\0\0"
            body[2:4] = wicmp6.checksum_of(body, src, dst).to_bytes(2, "big")
        return bytes(body)

    def ext_chain(self, upper: int) -> tuple[int, bytes]:
        """A random extension-header chain ending at ``upper``: (first next header, bytes)."""
        rng = self.rng
        kinds = [rng.choice([0, 60, 43, 44, 60]) for _ in range(rng.choice([0, 1, 1, 2, 3, 9]))]
        out = b""
        nh = upper
        for kind in reversed(kinds):
            if kind in (0, 60):
                opts = tuple((rng.choice([5, 0x1E, 0x3F, 0x7F, 0x80, 0xC2, rng.randrange(256)]),
                              rng.randbytes(rng.randrange(0, 6))) for _ in range(rng.randrange(3)))
                opts = tuple(o for o in opts if o[0] not in (0, 1))
                hdr = wip6.OptionsHeader(kind, nh, opts)
            elif kind == 43:
                hdr = wip6.RoutingHeader(nh, rng.choice([0, 2, 4]), rng.choice([0, 0, 1, 2]), bytes(4) + A_IP6)
            else:
                hdr = wip6.FragmentHeader(nh, rng.choice([0, 0, 8, 1232, rng.randrange(8192) * 8]),
                                          rng.random() < 0.5, rng.randrange(4))
            buf = bytearray(hdr.length)
            hdr.emit(buf)
            out = bytes(buf) + out
            nh = kind
        return nh, out

    def ipv6(self) -> bytes:
        rng = self.rng
        src = self.src_ip6()
        dst, dst_mac = self.dst_ip6()
        upper = rng.choice([58, 58, 17, 6, 59, rng.randrange(256)])
        if upper == 58:
            body = self.icmpv6_message(src, dst)
        elif upper == 17:
            payload = rng.randbytes(rng.randrange(0, 300))
            sport = rng.randrange(1, 65536)
            hdr = UdpHeader(sport, rng.choice([UDP_PORT, 9, rng.randrange(65536)]), 8 + len(payload))
            buf = bytearray(hdr.length)
            hdr.emit(buf, 0, src, dst, payload, with_checksum=rng.random() < 0.95)
            body = bytes(buf)
        elif upper == 6:
            sport = rng.randrange(1, 65536)
            hdr = wtcp.TcpHeader(sport, rng.choice([TCP_PORT, rng.randrange(1, 65536)]), rng.randrange(1 << 32),
                                 rng.randrange(1 << 32), rng.choice([wtcp.SYN, wtcp.ACK, wtcp.RST, rng.randrange(256)]),
                                 rng.randrange(65536), mss=rng.choice([None, 1220, 1440]))
            body = hdr.to_bytes(src, dst, rng.randbytes(rng.randrange(0, 100)))
        else:
            body = rng.randbytes(rng.randrange(0, 100))
        nh, chain = self.ext_chain(upper) if rng.random() < 0.4 else (upper, b"")
        payload = chain + body
        hlim = rng.choice([255, 255, 64, 1, rng.randrange(256)])
        ip = bytearray(40 + len(payload))
        wip6.Ipv6Header(src, dst, nh, len(payload), hlim, rng.randrange(256), rng.randrange(1 << 20)).emit(ip)
        ip[40:] = payload
        frame = self.eth(ETHERTYPE_IPV6, bytes(ip))
        if dst[0] == 0xFF:
            frame = dst_mac + frame[6:]
        return frame

    def ethernet_odd(self) -> bytes:
        rng = self.rng
        r = rng.random()
        if r < 0.3:
            return self.eth(rng.choice([0x86DD, 0x88CC, 0x0842, rng.randrange(65536)]), rng.randbytes(rng.randrange(0, 100)))
        if r < 0.6:
            return rng.randbytes(rng.randrange(0, 14))  # runts
        # a VLAN tag inside a VLAN tag, or an IPv4 header with version/IHL lies
        ip = bytearray(self.ip(17, self.udp_datagram(B_IP)))
        ip[0] = rng.randrange(256)
        return self.eth(rng.choice([ETHERTYPE_IPV4, ETHERTYPE_VLAN]), bytes(ip))

    def raw_garbage(self) -> bytes:
        return self.rng.randbytes(self.rng.randrange(0, 1600))

    # -- mutation ----------------------------------------------------------

    def mutate(self, frame: bytes) -> bytes:
        rng = self.rng
        buf = bytearray(frame)
        for _ in range(rng.randrange(1, 4)):
            op = rng.randrange(7)
            if op == 0 and buf:  # flip bytes anywhere
                for _ in range(rng.randrange(1, 6)):
                    buf[rng.randrange(len(buf))] = rng.randrange(256)
            elif op == 1 and buf:  # truncate
                del buf[rng.randrange(len(buf)):]
            elif op == 2:  # extend with garbage (or past the MTU)
                buf += rng.randbytes(rng.choice([1, 7, 100, 1600]))
            elif op == 3 and len(buf) >= 18:  # IPv4 total length lies
                struct.pack_into("!H", buf, 16, rng.choice([0, 19, 20, 21, len(buf) - 14 + 1, 65535,
                                                             rng.randrange(65536)]))
            elif op == 4 and len(buf) >= 34:  # break or fix the IPv4 header checksum after the damage
                ihl = (buf[14] & 0xF) * 4
                if 20 <= ihl <= len(buf) - 14:
                    buf[24:26] = b"\0\0"
                    if rng.random() < 0.7:
                        buf[24:26] = struct.pack("!H", internet_checksum(bytes(buf[14 : 14 + ihl])))
            elif op == 5 and len(buf) >= 40:  # UDP length / TCP data offset lies
                buf[38:40] = struct.pack("!H", rng.randrange(65536))
                if len(buf) > 46:
                    buf[46] = rng.randrange(256)
            elif op == 6 and len(buf) >= 34:  # flags/fragment field
                buf[20:22] = struct.pack("!H", rng.randrange(65536))
        return bytes(buf)

    def frame(self) -> bytes:
        rng = self.rng
        maker = rng.choices(self._makers, weights=self._weights)[0][0]
        self.kinds[maker.__name__] += 1
        frame = maker()
        if rng.random() < 0.5:
            mutated = self.mutate(frame)
            if not _arp_claims(mutated, B_IP):  # a flipped byte can forge B's ARP entry: ARP cannot stop that
                frame = mutated
                self.kinds["mutated"] += 1
        return frame


def _arp_claims(frame: bytes, ip: bytes) -> bool:
    """The frame is (or, with a VLAN tag, may be) an ARP packet whose sender protocol address is ``ip``."""
    for off in (12, 16):
        if frame[off : off + 2] == b"\x08\x06" and frame[off + 16 : off + 20] == ip:
            return True
    return False


def out_of_window_live(rng: random.Random, conn, b_port: int) -> tuple[bytes, bytes]:
    """A segment on the live connection's 4-tuple that TCP must refuse: its sequence number is a quarter
    of the space away from A's RCV.NXT (so it is outside any window), with random flags and ACK."""
    seq = (conn.tcb.rcv_nxt + (1 << 30) + rng.randrange(1 << 29)) & 0xFFFFFFFF
    flags = rng.choice([wtcp.ACK, wtcp.RST, wtcp.FIN | wtcp.ACK, wtcp.PSH | wtcp.ACK, wtcp.ACK | wtcp.URG])
    hdr = wtcp.TcpHeader(b_port, TCP_PORT, seq, rng.randrange(1 << 32), flags, rng.randrange(65536),
                         timestamps=(rng.randrange(1 << 32), 0) if rng.random() < 0.5 else None)
    return hdr.to_bytes(B_IP, A_IP, rng.randbytes(rng.randrange(0, 100))), seq


class Campaign:
    """Two stacks, the live services, and the lending device on A."""

    def __init__(self, seed: int, burst: int):
        self.rng = random.Random(seed)
        self.clock = ManualClock(1000.0)
        self.link = PipeLink(self.clock, seed=seed)
        self.lender = LendingDevice(self.link.a)
        secret = random.Random(seed ^ 0x5EED).randbytes(16)
        self.a = Stack(self.lender, ["198.18.0.1/24", "fd00::1/64"], gateway="198.18.0.254", isn_secret=secret,
                       fastpath=environment.fastpath())
        self.b = Stack(self.link.b, "198.18.0.2/24", isn_secret=secret[::-1], fastpath=environment.fastpath())
        self.burst = burst
        # A: echo services.
        self.udp_a = self.a.udp.endpoint()
        self.a.udp.bind(self.udp_a, ANY4, UDP_PORT)
        self.listener = self.a.tcp.listen((ANY4, TCP_PORT), 64)
        self.server = None
        self.echo_pending = bytearray()
        # B: the client side.
        self.udp_b = self.b.udp.endpoint()
        self.b.udp.bind(self.udp_b, ANY4, UDP_CLIENT_PORT)
        now = self.clock.now
        self.client = self.b.tcp.connect(None, (A_IP, TCP_PORT), now)
        self.factory = FrameFactory(self.rng, self.link.a.capabilities.mac, self.link.b.capabilities.mac,
                                    self.client.local_port)
        self.sent = self.checked = 0  # stream bytes sent by B / echoed back and verified
        self.bad_bytes = 0
        self.udp_sent = self.udp_echoed = self.udp_bad = 0
        self.frames = 0
        self.echo_errors = 0
        self.rounds = 0
        self.streaming = True

    def step(self) -> None:
        now = self.clock.now
        self.a.poll(now)
        self.b.poll(now)
        self._services(now)
        self.a.poll(now)
        self.b.poll(now)

    def _services(self, now: float) -> None:
        # A: accept, echo TCP, echo UDP.
        if self.server is None:
            self.server = self.listener.accept()
        while True:  # anything else accepted is a fuzz handshake that completed: close it
            extra = self.listener.accept()
            if extra is None:
                break
            extra.close(now)
        srv = self.server
        if srv is not None:
            data = srv.recv(1 << 16, now)
            if data:
                self.echo_pending += data
            if self.echo_pending:
                n = srv.send(bytes(self.echo_pending), now)
                del self.echo_pending[:n]
        q = self.udp_a
        while q.queue:
            payload, src, sport = q.pop()
            try:
                self.a.udp.send(q, payload, src, sport, now)
            except OSError:  # what an echo server sees for a forged source (no route, broadcast...)
                self.echo_errors += 1
        # B: stream out, check the echo.
        cl = self.client
        if cl.state.name == "ESTABLISHED":
            if self.streaming and self.sent - self.checked < STREAM_INFLIGHT:
                self.sent += cl.send(stream_bytes(self.sent, STREAM_CHUNK), now)
            back = cl.recv(1 << 16, now)
            if back:
                if back != stream_bytes(self.checked, len(back)):
                    self.bad_bytes += sum(1 for x, y in zip(back, stream_bytes(self.checked, len(back))) if x != y)
                self.checked += len(back)
        while self.udp_b.queue:
            payload, src, sport = self.udp_b.pop()
            if src == A_IP and sport == UDP_PORT and len(payload) == 12 and payload[:4] == b"ECHO":
                self.udp_echoed += 1
            else:
                self.udp_bad += 1
        self.rounds += 1
        if self.streaming and self.rounds % 2 == 0:
            self.b.udp.send(self.udp_b, b"ECHO" + struct.pack("!Q", self.udp_sent), A_IP, UDP_PORT, now)
            self.udp_sent += 1

    def run(self, n_frames: int) -> None:
        rng = self.rng
        factory = self.factory
        lent = self.lender.lent
        for _ in range(500):  # A's IPv6 addresses pass duplicate address detection (RFC 4862) first
            if self.a.iface6.is_ours(A_IP6) and self.a.iface6.link_local is not None:
                break
            self.step()
            self.clock.advance(0.01)
        while self.frames < n_frames:
            k = min(self.burst, n_frames - self.frames)
            for _ in range(k):
                if self.server is not None and rng.random() < 0.03:
                    seg, _ = out_of_window_live(rng, self.server, self.client.local_port)
                    lent.append(factory.eth(ETHERTYPE_IPV4, factory.ip(6, seg, src=B_IP)))
                    factory.kinds["live_out_of_window"] += 1
                else:
                    lent.append(factory.frame())
            self.frames += k
            self.step()
            self.clock.advance(0.001)

    def drain(self, max_time: float = 30.0) -> None:
        """Stop the fuzz; let the last bytes and datagrams come back."""
        self.streaming = False
        end = self.clock.now + max_time
        while self.clock.now < end:
            self.step()
            if self.checked == self.sent and self.udp_echoed >= self.udp_sent and not self.echo_pending:
                break
            self.clock.advance(0.01)


STORM_SECONDS = 10.0
STORM_QUIET = 5.0  # the last seconds of a storm in which no frame may be sent


def storm(seed: int) -> tuple[int, int]:
    """One stack-to-stack storm (see the module docstring): (frames sent in all, frames in the quiet part)."""
    rng = random.Random(seed)
    clock = ManualClock(1000.0)
    link = PipeLink(clock, seed=seed, delay=0.001)
    cfg = TcpConfig(timestamps=False, sack=rng.random() < 0.5)
    macs = (link.a.capabilities.mac, link.b.capabilities.mac)
    a = Stack(link.a, "198.18.0.1/24", tcp_config=cfg, fastpath=environment.fastpath())
    b = Stack(link.b, "198.18.0.2/24", tcp_config=cfg, fastpath=environment.fastpath())

    def run(seconds: float) -> int:
        before = link.a.counters["tx"] + link.b.counters["tx"]
        end = clock.now + seconds
        while clock.now < end:
            deadlines = [d for d in (a.poll(clock.now), b.poll(clock.now), link.a.poll_at(clock.now),
                                     link.b.poll_at(clock.now)) if d is not None]
            clock.set(min(max(min(deadlines, default=end), clock.now + 1e-6), end))
        return link.a.counters["tx"] + link.b.counters["tx"] - before

    lst = a.tcp.listen((ANY4, TCP_PORT), 4)
    client = b.tcp.connect(None, (A_IP, TCP_PORT), clock.now)
    run(1.0)
    server = lst.accept()
    if server is None or client.state != State.ESTABLISHED:
        raise RuntimeError("storm: the connection did not open")
    client.send(rng.randbytes(rng.randrange(1, 5000)), clock.now)
    run(1.0)
    ends = ((server, link.b, A_IP, B_IP, macs[0], macs[1]), (client, link.a, B_IP, A_IP, macs[1], macs[0]))
    for conn, into, src, dst, src_mac, dst_mac in ends:  # conn is the side the forgery claims to come from
        tcb = conn.tcb
        for _ in range(rng.randrange(1, 4)):
            r = rng.random()
            if r < 0.5:  # the receiver's next byte: taken as data, and the two sides' sequence spaces now differ
                seq = tcb.snd_nxt
            elif r < 0.7:  # in its window, ahead: held out of order
                seq = tcb.snd_nxt + rng.randrange(1, 2000)
            else:  # far outside it: an off-path forgery
                seq = tcb.snd_nxt + (1 << 30) + rng.randrange(1 << 29)
            seg = tcp_segment(src, dst, conn.local_port, conn.remote_port, seq, tcb.rcv_nxt, 0x18,
                              payload=rng.randbytes(rng.randrange(1, 1400)))
            into._deliver(clock.now, ether(dst_mac, src_mac, 0x0800, ipv4(src, dst, 6, seg)))
    total = run(STORM_SECONDS - STORM_QUIET)
    quiet = run(STORM_QUIET)
    a.close()
    b.close()
    link.close()
    return total + quiet, quiet


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ustack.tools.fuzz_stack", description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=100_000, help="hostile frames to feed A (default 100000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--burst", type=int, default=32, help="hostile frames lent per poll round (1-64)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of text")
    ap.add_argument("--storms", type=int, default=0, help="stack-to-stack storms to run after the frames")
    args = ap.parse_args(argv)
    if args.frames < 0 or args.storms < 0 or not 1 <= args.burst <= 64:
        ap.error("--frames and --storms must be >= 0 and --burst in 1..64")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    camp = Campaign(args.seed, args.burst)
    t0 = time.perf_counter()
    camp.run(args.frames)
    elapsed = time.perf_counter() - t0
    camp.drain()
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    internal = camp.a.stats["stack.internal_error"] + camp.b.stats["stack.internal_error"]
    lost = camp.sent - camp.checked
    udp_lost = camp.udp_sent - camp.udp_echoed
    report = {
        "frames": camp.frames, "seed": args.seed, "seconds": round(elapsed, 2),
        "frames_per_s": round(camp.frames / elapsed) if elapsed else None,
        "internal_errors": internal,
        "last_internal_error": repr(camp.a.last_internal_error or camp.b.last_internal_error),
        "tcp_bytes_sent": camp.sent, "tcp_bytes_checked": camp.checked, "tcp_bytes_lost": lost,
        "tcp_bytes_wrong": camp.bad_bytes, "tcp_state": camp.client.state.name,
        "udp_sent": camp.udp_sent, "udp_echoed": camp.udp_echoed, "udp_lost": udp_lost, "udp_bad": camp.udp_bad,
        "peak_rss_kib_before": rss_before, "peak_rss_kib_after": rss_after,
        "connections_a": len(camp.a.tcp.connections),
        "kinds": dict(camp.factory.kinds.most_common()),
        "drops_a": camp.a.stats.drops(),
        "drops_b": camp.b.stats.drops(),
    }
    storms = [storm(args.seed * 1000 + i) for i in range(args.storms)]
    report["storms"] = len(storms)
    report["storms_loud"] = sum(1 for _, quiet in storms if quiet)  # still sending in the last 5 s
    report["storm_frames_max"] = max((total for total, _ in storms), default=0)
    ok = (internal == 0 and lost == 0 and camp.bad_bytes == 0 and udp_lost == 0 and camp.udp_bad == 0
          and report["storms_loud"] == 0)
    report["ok"] = ok
    if args.json:
        print(json.dumps(report))
    else:
        for k in ("frames", "seed", "seconds", "frames_per_s", "internal_errors", "tcp_bytes_sent",
                  "tcp_bytes_checked", "tcp_bytes_lost", "tcp_bytes_wrong", "tcp_state", "udp_sent", "udp_echoed",
                  "udp_lost", "udp_bad", "peak_rss_kib_before", "peak_rss_kib_after", "connections_a", "storms",
                  "storms_loud", "storm_frames_max"):
            print(f"{k:22} {report[k]}")
        if internal:
            print(f"{'last_internal_error':22} {report['last_internal_error']}")
        print("frame kinds:", ", ".join(f"{k} {v}" for k, v in report["kinds"].items()))
        print("drops at A (reason count):")
        for reason, n in sorted(report["drops_a"].items(), key=lambda kv: -kv[1]):
            print(f"  {n:10} {reason}")
        print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
