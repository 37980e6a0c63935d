"""IPv4 (RFC 791, RFC 1122 section 3.3): output with fragmentation, input of fragments.

Output: ``output(dst, proto, payload)`` routes (connected subnet or default
gateway), resolves the next hop through ARP (queueing while it resolves),
and writes frames straight into TX slots from an Ethernet+IPv4 header
template via the fast path. A payload larger than the MTU is fragmented
(RFC 791 section 3.2: data in multiples of 8 bytes, MF on all but the last)
unless DF is asked for, which fails with EMSGSIZE.

Input of ordinary datagrams is dispatched by the Stack from the fast path's
classify records; fragments come here and go through the Reassembler, then
back through classify as one synthetic frame so L4 validation has one home.
"""

from __future__ import annotations

import errno
import struct
from typing import TYPE_CHECKING, Optional

from ustack import _fastpath
from ustack.net.reassembly import Reassembler
from ustack.net.route import LIMITED_BROADCAST

if TYPE_CHECKING:
    from ustack.stack import Stack

DEFAULT_TTL = 64
_IP_TEMPLATE = struct.Struct("!6s6sHBBHHHBBH4s4s")
IP_DF = 0x4000
IP_MF = 0x2000


class Ipv4Layer:
    def __init__(self, stack: "Stack", *, ttl: int = DEFAULT_TTL, reassembly_timeout: float = 30.0,
                 reassembly_max_bytes: int = 4 << 20, reassembly_max_datagrams: int = 64):
        self.stack = stack
        self.ttl = ttl
        self.ident = 0
        self.reassembler = Reassembler(stack.timers, stack.stats, timeout=reassembly_timeout,
                                       max_bytes=reassembly_max_bytes, max_datagrams=reassembly_max_datagrams,
                                       on_timeout=self._reassembly_timeout)
        self._templates: dict[tuple, bytes] = {}

    # -- output ---------------------------------------------------------------
    def next_ident(self) -> int:
        self.ident = (self.ident + 1) & 0xFFFF
        return self.ident

    def template(self, dst_mac: bytes, src: int, dst: int, proto: int, ttl: int, tos: int = 0) -> bytes:
        """Ethernet + IPv4 header for a flow, per-packet fields zero (cached, bounded)."""
        key = (dst_mac, src, dst, proto, ttl, tos)
        t = self._templates.get(key)
        if t is None:
            if len(self._templates) >= 4096:
                self._templates.clear()
            t = _IP_TEMPLATE.pack(dst_mac, self.stack.iface.mac, 0x0800, 0x45, tos, 0, 0, 0, ttl, proto, 0,
                                  src.to_bytes(4, "big"), dst.to_bytes(4, "big"))
            self._templates[key] = t
        return t

    def output(self, dst: int, proto: int, payload, *, src: Optional[int] = None, ttl: Optional[int] = None,
               tos: int = 0, df: bool = False, now: Optional[float] = None) -> None:
        """Send one IPv4 datagram carrying ``payload`` (an L4 message, checksum done)."""
        stack = self.stack
        iface = stack.iface
        if src is None:
            src = iface.addr
        if ttl is None:
            ttl = self.ttl
        mtu = iface.mtu
        if df and len(payload) + 20 > mtu:
            raise OSError(errno.EMSGSIZE, "Message too long (DF set and larger than the MTU)")
        if len(payload) + 20 > 65535:
            raise OSError(errno.EMSGSIZE, "Message too long for IPv4")
        if iface.is_broadcast(dst):
            self._emit(b"\xff" * 6, src, dst, proto, ttl, tos, df, payload)
            return
        hop = iface.next_hop(dst)
        when = stack.now if now is None else now
        mac = stack.arp.lookup(hop, when)
        if mac is not None:
            self._emit(mac, src, dst, proto, ttl, tos, df, payload)
            return
        data = bytes(payload)  # must outlive the caller's buffer while ARP resolves
        stack.arp.resolve_then(hop, lambda m: self._emit(m, src, dst, proto, ttl, tos, df, data), when)

    def _emit(self, dst_mac: bytes, src: int, dst: int, proto: int, ttl: int, tos: int, df: bool, payload) -> None:
        stack = self.stack
        tmpl = self.template(dst_mac, src, dst, proto, ttl, tos)
        ident = self.next_ident()
        mtu = stack.iface.mtu
        n = len(payload)
        if n + 20 <= mtu:
            slot = stack.tx_slot()
            if slot is None:
                return
            stack.tx_done(_fastpath.emit_ipv4(slot, tmpl, ident, IP_DF if df else 0, payload))
            stack.stats.inc("ipv4.packets_sent")
            return
        # RFC 791 section 3.2: fragment data in multiples of 8 octets.
        chunk = (mtu - 20) & ~7
        view = memoryview(payload)
        off = 0
        while off < n:
            piece = view[off:off + chunk]
            more = off + chunk < n
            slot = stack.tx_slot()
            if slot is None:
                return
            stack.tx_done(_fastpath.emit_ipv4(slot, tmpl, ident, (IP_MF if more else 0) | (off >> 3), piece))
            stack.stats.inc("ipv4.fragments_sent")
            off += chunk
        stack.stats.inc("ipv4.packets_sent")

    # -- input ----------------------------------------------------------------
    def input_fragment(self, frame: memoryview, rec: tuple, now: float) -> None:
        _, _, l3, ihl, tot, proto, src, dst, l4, _, _, _, plen, _ = rec
        stack = self.stack
        if not stack.iface.is_local_dest(dst):
            stack.stats.drop("ipv4.not_for_us")
            return
        fragfield = (frame[l3 + 6] << 8) | frame[l3 + 7]
        ident = (frame[l3 + 4] << 8) | frame[l3 + 5]
        offset = (fragfield & 0x1FFF) << 3
        more = bool(fragfield & IP_MF)
        whole = self.reassembler.add((src, dst, proto, ident), offset, frame[l4:l4 + plen], more,
                                     frame[l3:l3 + ihl], now)
        if whole is None:
            return
        if 20 + len(whole) > 65535:
            stack.stats.drop("ipv4.frag_too_long")
            return
        # Rebuild one unfragmented frame and run it through classify again.
        hdr = bytearray(_IP_TEMPLATE.pack(b"\0" * 6, b"\0" * 6, 0x0800, 0x45, 0, 20 + len(whole), ident, 0,
                                          frame[l3 + 8], proto, 0, src.to_bytes(4, "big"), dst.to_bytes(4, "big")))
        csum = _fastpath.checksum(memoryview(hdr)[14:34])
        hdr[24:26] = csum.to_bytes(2, "big")
        synthetic = bytes(hdr) + whole
        stack.deliver(memoryview(synthetic), _fastpath.classify_one(synthetic, None), now, reassembled=True)

    def _reassembly_timeout(self, header: bytes, first_data: bytes) -> None:
        # RFC 792 / RFC 1122 3.3.2: time exceeded, code 1 (reassembly), if fragment 0 arrived.
        src = int.from_bytes(header[12:16], "big")
        if src == LIMITED_BROADCAST or self.stack.iface.is_broadcast(src):
            return
        self.stack.icmp.send_error(11, 1, header + first_data, src)
