"""The lines of ``ustack trace``: each pcap record dissected by scapy and written like ``tcpdump -nn``.

``Tracer(hosts, ports, absolute, number).frame(ts_ns, linktype, data,
orig_len)`` returns the line for one record, or None when the filters drop
it; TCP segments go through ``ustack.tools.trace_tcp.TcpAnalysis``. Each
line starts with the time in seconds since the first frame (microsecond
precision), then numbers, never names::

    0.000000 ARP who-has 198.18.0.1 tell 198.18.0.2
    0.000000 ARP 198.18.0.1 is-at 02:00:00:00:00:01
    0.000010 ICMP 198.18.0.2 > 198.18.0.1 type 8 code 0 echo request id 1 seq 1 len 56
    0.000020 UDP 198.18.0.2:5000 > 198.18.0.1:7 len 11
    0.000030 IP 198.18.0.2:5000 > 198.18.0.1:7 frag id 9 offset 0 MF proto udp len 1480
    0.000040 TCP 198.18.0.2:40000 > 198.18.0.1:80 [S] seq 0 win 64240 len 0 options [mss 1460,nop,wscale 7]
    0.000050 TCP 198.18.0.1:80 > 198.18.0.2:40000 [P.] seq 1:101 ack 1 win 512 (x128=65536) len 100 [retransmission]
    0.000060 ICMP6 fe80::1 > ff02::1:ff00:2 neighbor solicitation who-has fd00::2 hlim 255 len 24
    0.000070 TCP [fd00::2]:40000 > [fd00::1]:80 [S] seq 0 win 64800 len 0 options [mss 1440]
    0.000080 IP6 fd00::2 > fd00::1 frag id 77 offset 1448 proto udp len 600

IPv6 addresses are written as they are, with brackets around them when a
port follows; extension headers are walked (``ustack.wire.ipv6``) and named
after ``IP6`` when present (``ext [hbh,dst]``).

``len`` is always the payload length (UDP: the datagram's data, from the UDP
length field; TCP: IP total length minus both headers; IP fragment: the
fragment's data; ICMP: the octets after the 8-octet ICMP header). Fragment
``offset`` is in octets. TCP flags are tcpdump's letters (F S R P U E W, and
``.`` for ACK). Sequence and acknowledgment numbers are relative (see
trace_tcp; ``absolute`` prints them raw). ``seq A:B`` spans the data (B = A +
len); ``seq A`` for segments without data. The window is the raw field,
followed by ``(xF=W)``, the factor and the scaled window, once scaling
applies. SACK blocks are printed relative to the acknowledged direction. A
frame that was cut by the snapshot length ends with ``[captured C of O
bytes]``.

Filters: ``ports`` keeps TCP/UDP frames (and first IP fragments) with one of
them as source or destination port; ``hosts`` keeps IP frames from or to one
of them and ARP frames about one. The two kinds combine with "and".
Filtered-out frames are not analysed, which is harmless because a filter
keeps or drops whole connections.

A frame that is malformed is printed as far as it can be (``IP ... bad
header (...)``, ``TCP ... truncated header``, ``[bad udp length N]``,
``bad-opt``...), one that cannot be dissected at all as ``? len N ...`` with
its first octets in hex; never a traceback. With a filter, frames that
cannot be dissected are left out.

Not done: IP reassembly (each fragment is its own line), TCP over IPv6 (IPv6
gets a one-line summary), checksum verification, and payload printing.
"""

from __future__ import annotations

import ipaddress
import logging
import struct

from ustack.pcap import LINKTYPE_ETHERNET
from ustack.tools.trace_tcp import ACK, SEQ_MOD, TcpAnalysis

_U16 = struct.Struct("!H")
_TS = struct.Struct("!II")

# tcpdump's flag letters, in its order (F S R P . U E W in the output).
_TCP_FLAGS = ((0x01, "F"), (0x02, "S"), (0x04, "R"), (0x08, "P"), (0x10, "."), (0x20, "U"), (0x40, "E"),
              (0x80, "W"))
_PROTO_NAMES = {1: "icmp", 6: "tcp", 17: "udp", 58: "icmp6"}
_ICMP6_TYPES = {1: "unreachable", 2: "packet too big", 3: "time exceeded", 4: "parameter problem",
                128: "echo request", 129: "echo reply", 133: "router solicitation", 134: "router advertisement",
                135: "neighbor solicitation", 136: "neighbor advertisement", 137: "redirect"}

# ICMP names (RFC 792, RFC 1812 for the newer unreachable codes).
_ICMP_TYPES = {0: "echo reply", 3: "unreachable", 4: "source quench", 5: "redirect", 8: "echo request",
               11: "time exceeded", 12: "parameter problem", 13: "timestamp request", 14: "timestamp reply"}
_ICMP_UNREACH = {0: "net unreachable", 1: "host unreachable", 2: "protocol unreachable", 3: "port unreachable",
                 4: "fragmentation needed", 5: "source route failed", 9: "net prohibited",
                 10: "host prohibited", 13: "administratively prohibited"}
_ICMP_TIMXCEED = {0: "ttl exceeded in transit", 1: "fragment reassembly time exceeded"}
_ICMP_ERRORS = (3, 4, 5, 11, 12)


def _tcp_options(opts: bytes, sack_base) -> tuple[list, int | None]:
    """tcpdump-style option words and the window scale shift (None if absent)."""
    out = []
    wscale = None
    i, n = 0, len(opts)
    while i < n:
        kind = opts[i]
        if kind == 0:
            out.append("eol")
            break
        if kind == 1:
            out.append("nop")
            i += 1
            continue
        if i + 1 >= n or opts[i + 1] < 2 or i + opts[i + 1] > n:
            out.append("bad-opt")
            break
        length = opts[i + 1]
        body = opts[i + 2:i + length]
        if kind == 2 and length == 4:
            out.append(f"mss {_U16.unpack(body)[0]}")
        elif kind == 3 and length == 3:
            wscale = body[0]
            out.append(f"wscale {wscale}")
        elif kind == 4 and length == 2:
            out.append("sackOK")
        elif kind == 5 and length > 2 and (length - 2) % 8 == 0:
            blocks = []
            for j in range(0, length - 2, 8):
                left, right = _TS.unpack_from(body, j)
                if sack_base is not None:
                    left, right = (left - sack_base) % SEQ_MOD, (right - sack_base) % SEQ_MOD
                blocks.append(f"{{{left}:{right}}}")
            out.append(f"sack {len(blocks)} " + "".join(blocks))
        elif kind == 8 and length == 10:
            val, ecr = _TS.unpack(body)
            out.append(f"TS val {val} ecr {ecr}")
        elif kind in (2, 3, 4, 5, 8):
            out.append(f"bad-opt {kind} len {length}")
        else:
            out.append(f"opt-{kind} 0x{body.hex()}" if body else f"opt-{kind}")
        i += length
    return out, wscale


def _flags_str(flags: int) -> str:
    return "".join(letter for bit, letter in _TCP_FLAGS if flags & bit) or "none"


class Tracer:
    """Turns records into lines: dissection, filters and TCP analysis."""

    def __init__(self, hosts=(), ports=(), absolute=False, number=False):
        _quiet_scapy()
        import scapy.layers.l2 as l2
        from scapy.config import conf
        from scapy.layers.inet import ICMP, IP, TCP, UDP

        self._conf = conf
        self._IP, self._TCP, self._UDP, self._ICMP, self._ARP = IP, TCP, UDP, ICMP, l2.ARP
        self._Ether = l2.Ether
        # Link layers to step over on the way to IP or ARP.
        self._l2 = tuple(getattr(l2, name) for name in ("Ether", "Dot1Q", "CookedLinux", "CookedLinuxV2")
                         if hasattr(l2, name))
        self.hosts = frozenset(hosts)
        self.ports = frozenset(ports)
        self.absolute = absolute
        self.number = number
        self.reset()

    def reset(self) -> None:
        self.tcp = TcpAnalysis()
        self.first_ns = None
        self.frames = 0
        self._snapped = False

    # -- filters
    def _want_hosts(self, *addrs) -> bool:
        return not self.hosts or any(a in self.hosts for a in addrs)

    def _want_ports(self, *ports) -> bool:
        return not self.ports or any(p in self.ports for p in ports)

    def _want_nonport(self, *addrs) -> bool:
        return not self.ports and self._want_hosts(*addrs)

    def frame(self, ts_ns: int, linktype: int, data: bytes, orig_len: int):
        """The line for one record, or None if the filters drop it."""
        self.frames += 1
        self._snapped = len(data) < orig_len
        if self.first_ns is None:
            self.first_ns = ts_ns
        try:
            body = self._describe(linktype, data)
        except Exception as e:  # whatever scapy or a mangled frame does: one line, never a traceback
            why = " ".join(str(e).split())
            body = f"? len {len(data)} undecodable ({type(e).__name__}: {why}) {bytes(data[:32]).hex()}"
            if self.hosts or self.ports:
                return None
        if body is None:
            return None
        if len(data) < orig_len:
            body += f" [captured {len(data)} of {orig_len} bytes]"
        rel = ts_ns - self.first_ns
        sign = "-" if rel < 0 else ""
        rel = abs(rel)
        stamp = f"{sign}{rel // 1_000_000_000}.{rel % 1_000_000_000 // 1000:06d}"
        if self.number:
            return f"{self.frames} {stamp} {body}"
        return f"{stamp} {body}"

    def _excluded(self, data) -> bool:
        """A cheap look at a plain Ethernet/IPv4 frame: True if the filters surely drop it (saves scapy)."""
        n = len(data)
        off = 12
        while off + 4 <= n and data[off] == 0x81 and data[off + 1] == 0x00:  # 802.1Q tags
            off += 4
        if off + 2 + 20 > n or data[off] != 0x08 or data[off + 1] != 0x00:
            return False
        ip = off + 2
        ihl = (data[ip] & 15) * 4
        if data[ip] >> 4 != 4 or ihl < 20 or ip + ihl > n:
            return False
        if self.hosts:
            src = ".".join(map(str, data[ip + 12:ip + 16]))
            dst = ".".join(map(str, data[ip + 16:ip + 20]))
            if src not in self.hosts and dst not in self.hosts:
                return True
        if self.ports:
            if data[ip + 9] not in (6, 17):
                return True
            if _U16.unpack_from(data, ip + 6)[0] & 0x3FFF or ip + ihl + 4 > n:
                return False  # a fragment, or ports not captured: let the full path decide
            sport, dport = struct.unpack_from("!HH", data, ip + ihl)
            if sport not in self.ports and dport not in self.ports:
                return True
        return False

    def _describe(self, linktype: int, data: bytes):
        if linktype == LINKTYPE_ETHERNET:
            if (self.hosts or self.ports) and self._excluded(data):
                return None
            if len(data) < 14:
                return None if self.hosts or self.ports else f"? len {len(data)} short frame {bytes(data).hex()}"
            cls = self._Ether
        else:
            cls = self._conf.l2types.num2layer.get(linktype)
            if cls is None:
                if self.hosts or self.ports:
                    return None
                return f"? linktype {linktype} len {len(data)}"
        pkt = cls(bytes(data))
        layer = pkt
        while isinstance(layer, self._l2):
            nxt = layer.payload
            if not nxt:
                break
            layer = nxt
        if isinstance(layer, self._IP):
            return self._ipv4(layer)
        under = layer.underlayer if layer is not pkt else None
        if getattr(under, "type", None) == 0x86DD:
            raw = bytes(layer.original or b"") if hasattr(layer, "original") and layer.original else bytes(layer)
            return self._ipv6(raw)
        if isinstance(layer, self._ARP):
            return self._arp(layer)
        if self.hosts or self.ports:
            return None
        return self._other(pkt, layer, data)

    def _ipv6(self, raw: bytes) -> str | None:
        """An IPv6 packet from its header: extension headers, fragments, UDP/TCP/ICMPv6 (with NDP names)."""
        from ustack.wire import WireError
        from ustack.wire.ipv6 import Ipv6Header, walk

        if len(raw) < 40:
            return None if self.hosts or self.ports else f"IP6? len {len(raw)} truncated header"
        src, dst = str(ipaddress.IPv6Address(raw[8:24])), str(ipaddress.IPv6Address(raw[24:40]))
        if not self._want_hosts(src, dst):
            return None
        try:
            ip = Ipv6Header.parse(raw)
            chain = walk(raw, 40, raw[6], 16)
        except WireError as e:
            return None if self.ports else f"IP6 {src} > {dst} bad header ({e.reason})"
        names = {0: "hbh", 43: "rt", 44: "frag", 60: "dst"}
        ext = (" ext [" + ",".join(names.get(getattr(h, "kind", 44 if hasattr(h, "ident") else 43), "?")
                                   for h in chain.headers) + "]") if chain.headers else ""
        end = 40 + ip.payload_len
        body = raw[chain.offset:end]
        nh = chain.next_header
        frag = chain.fragment
        if frag is not None and not frag.atomic:
            if self.ports:
                return None
            return (f"IP6 {src} > {dst} frag id {frag.ident} offset {frag.offset}{' MF' if frag.more else ''} "
                    f"proto {_PROTO_NAMES.get(nh, nh)} len {len(body)}")
        a, b = f"[{src}]", f"[{dst}]"
        if nh == 17 and len(body) >= 8:
            from scapy.layers.inet import UDP
            text = self._udp(UDP(body), a, b, len(body))
            return text and text + ext
        if nh == 6 and len(body) >= 20:
            from scapy.layers.inet import TCP
            text = self._tcp(TCP(body), a, b, len(body))
            return text and text + ext
        if self.ports:
            return None
        if nh == 58 and len(body) >= 8:
            return self._icmp6(body, src, dst, ip.hop_limit) + ext
        return f"IP6 {src} > {dst} nh {_PROTO_NAMES.get(nh, nh)}{ext} len {len(body)}"

    def _icmp6(self, body: bytes, src: str, dst: str, hlim: int) -> str:
        itype, code = body[0], body[1]
        name = _ICMP6_TYPES.get(itype, f"type {itype}")
        text = f"ICMP6 {src} > {dst} {name}"
        if itype in (128, 129):
            text += f" id {_U16.unpack_from(body, 4)[0]} seq {_U16.unpack_from(body, 6)[0]}"
        elif itype in (135, 136) and len(body) >= 24:
            target = ipaddress.IPv6Address(body[8:24])
            text += f" who-has {target}" if itype == 135 else f" tgt is {target}"
            if itype == 136:
                flags = "".join(f for f, bit in (("R", 0x80), ("S", 0x40), ("O", 0x20)) if body[4] & bit)
                text += f" [{flags}]" if flags else ""
        elif itype == 2:
            text += f" mtu {struct.unpack_from('!I', body, 4)[0]}"
        elif itype == 4:
            text += f" code {code} pointer {struct.unpack_from('!I', body, 4)[0]}"
        elif itype < 128:
            text += f" code {code}"
        if itype in (133, 134, 135, 136, 137):
            text += f" hlim {hlim}"
        return text + f" len {len(body) - 8}"

    def _other(self, pkt, layer, data) -> str:
        under = layer.underlayer if layer is not pkt else None
        etype = getattr(under, "type", None) if under is not None else None
        raw = bytes(layer.original or b"") if hasattr(layer, "original") else b""
        if isinstance(pkt, self._Ether):
            kind = f"type 0x{etype:04x}" if isinstance(etype, int) else "?"
            return f"ETH {pkt.src} > {pkt.dst} {kind} len {len(data)}"
        return f"? {type(layer).__name__} len {len(data)}"

    def _arp(self, arp) -> str | None:
        psrc, pdst = arp.psrc, arp.pdst
        if not self._want_nonport(psrc, pdst):
            return None
        op = arp.op
        if op == 1:
            text = f"ARP who-has {pdst} tell {psrc}"
            return text + " (gratuitous)" if psrc == pdst else text
        if op == 2:
            return f"ARP {psrc} is-at {arp.hwsrc}"
        return f"ARP op {op} {psrc} > {pdst}"

    def _ipv4(self, ip) -> str | None:
        raw = ip.original or b""
        src, dst = ip.src, ip.dst
        if len(raw) < 20:
            return None if self.hosts or self.ports else f"IP? len {len(raw)} truncated header"
        ihl = (raw[0] & 15) * 4
        total = _U16.unpack_from(raw, 2)[0]
        if raw[0] >> 4 != 4 or ihl < 20 or total < ihl:
            if not self._want_nonport(src, dst):
                return None
            return f"IP {src} > {dst} bad header (version {raw[0] >> 4}, ihl {ihl}, total length {total})"
        plen = total - ihl
        if total > len(raw) and not self._snapped:
            text = self._ipv4_body(ip, raw, src, dst, len(raw) - ihl)
            return text and f"{text} [ip length {total} > {len(raw)} in frame]"
        return self._ipv4_body(ip, raw, src, dst, plen)

    def _ipv4_body(self, ip, raw, src, dst, plen) -> str | None:
        proto = raw[9]
        mf = raw[6] & 0x20
        offset = (_U16.unpack_from(raw, 6)[0] & 0x1FFF) * 8
        if mf or offset:
            return self._fragment(ip, src, dst, proto, plen, offset, mf, _U16.unpack_from(raw, 4)[0])
        if not self._want_hosts(src, dst):
            return None
        payload = ip.payload
        if proto == 6:
            if isinstance(payload, self._TCP):
                return self._tcp(payload, src, dst, plen)
            if not self.ports:
                return f"TCP {src} > {dst} truncated header ({len(payload.original or b'')} bytes) len {plen}"
            return None
        if proto == 17:
            if isinstance(payload, self._UDP):
                return self._udp(payload, src, dst, plen)
            if not self.ports:
                return f"UDP {src} > {dst} truncated header len {plen}"
            return None
        if self.ports:
            return None
        if proto == 1:
            if isinstance(payload, self._ICMP):
                return self._icmp(payload, src, dst, plen)
            return f"ICMP {src} > {dst} truncated header ({len(payload.original or b'') if payload else 0} bytes)"
        return f"IP {src} > {dst} proto {_PROTO_NAMES.get(proto, proto)} len {plen}"

    def _fragment(self, ip, src, dst, proto, plen, offset, mf, ident) -> str | None:
        if not self._want_hosts(src, dst):
            return None
        payload = ip.payload
        if offset == 0 and isinstance(payload, (self._TCP, self._UDP)):
            sport, dport = payload.sport, payload.dport
            if not self._want_ports(sport, dport):
                return None
            where = f"{src}:{sport} > {dst}:{dport}"
        elif self.ports:
            return None
        else:
            where = f"{src} > {dst}"
        more = " MF" if mf else ""
        return f"IP {where} frag id {ident} offset {offset}{more} proto {_PROTO_NAMES.get(proto, proto)} len {plen}"

    def _udp(self, udp, src, dst, plen) -> str | None:
        sport, dport = udp.sport, udp.dport
        if not self._want_ports(sport, dport):
            return None
        ulen = udp.len
        text = f"UDP {src}:{sport} > {dst}:{dport} len {max(ulen - 8, 0)}"
        if ulen < 8 or ulen > plen:
            text += f" [bad udp length {ulen}]"
        return text

    def _icmp(self, icmp, src, dst, plen) -> str:
        raw = icmp.original or b""
        if len(raw) < 8:
            return f"ICMP {src} > {dst} truncated header ({len(raw)} bytes)"
        itype, code = raw[0], raw[1]
        text = f"ICMP {src} > {dst} type {itype} code {code}"
        name = _ICMP_TYPES.get(itype)
        if itype in (0, 8):
            return f"{text} {name} id {icmp.id} seq {icmp.seq} len {max(plen - 8, 0)}"
        if itype == 3:
            name = _ICMP_UNREACH.get(code, name)
            if code == 4:
                name += f" (mtu {icmp.nexthopmtu})"
        elif itype == 11:
            name = _ICMP_TIMXCEED.get(code, name)
        if name:
            text += " " + name
        if itype in _ICMP_ERRORS:
            quoted = icmp.payload
            qraw = bytes(quoted.original or b"") if quoted else b""
            if len(qraw) >= 20 and qraw[0] >> 4 == 4:
                qihl = (qraw[0] & 15) * 4
                qsrc = ".".join(str(b) for b in qraw[12:16])
                qdst = ".".join(str(b) for b in qraw[16:20])
                qproto = qraw[9]
                ports = qraw[qihl:qihl + 4] if qihl >= 20 else b""
                if qproto in (6, 17) and len(ports) == 4:
                    sp, dp = struct.unpack("!HH", ports)
                    return f"{text} for {_PROTO_NAMES[qproto].upper()} {qsrc}:{sp} > {qdst}:{dp}"
                return f"{text} for {_PROTO_NAMES.get(qproto, 'proto %d' % qproto).upper()} {qsrc} > {qdst}"
        return f"{text} len {max(plen - 8, 0)}"

    def _tcp(self, tcp, src, dst, plen) -> str | None:
        sport, dport = tcp.sport, tcp.dport
        if not self._want_ports(sport, dport):
            return None
        raw = tcp.original or b""
        hlen = (raw[12] >> 4) * 4 if len(raw) >= 13 else 0
        if hlen < 20 or hlen > plen:
            return f"TCP {src}:{sport} > {dst}:{dport} bad data offset {hlen} (segment {plen} bytes)"
        seq, ack, flags, win = tcp.seq, tcp.ack, int(tcp.flags), tcp.window
        dlen = plen - hlen
        opts = raw[20:hlen]
        words, wscale = _tcp_options(opts, None)
        seq_base, ack_base, rev_base, scale, markers = self.tcp.segment(src, sport, dst, dport, seq, ack, flags,
                                                                         win, dlen, wscale)
        if not self.absolute:
            seq = (seq - seq_base) % SEQ_MOD
            if ack_base is not None:
                ack = (ack - ack_base) % SEQ_MOD
            if opts and rev_base is not None and 5 in opts:
                words, _ = _tcp_options(opts, rev_base)
        parts = [f"TCP {src}:{sport} > {dst}:{dport} [{_flags_str(flags)}]"]
        parts.append(f"seq {seq}:{(seq + dlen) % SEQ_MOD}" if dlen else f"seq {seq}")
        if flags & ACK:
            parts.append(f"ack {ack}")
        if scale:
            parts.append(f"win {win} (x{1 << scale}={win << scale})")
        else:
            parts.append(f"win {win}")
        parts.append(f"len {dlen}")
        if words:
            parts.append(f"options [{','.join(words)}]")
        for m in markers:
            parts.append(f"[{m}]")
        if len(raw) < hlen:
            parts.append(f"[header cut at {len(raw)} bytes]")
        return " ".join(parts)


def _quiet_scapy() -> None:
    logging.getLogger("scapy").setLevel(logging.ERROR)
