"""ICMPv6 (RFC 4443): echo, errors out (rate-limited), errors in -> the ProtocolTable; NDP to ndp.py.

- Echo requests to our unicast addresses and to groups we joined are
  answered (as Linux does) from the address they were sent to, or for a
  group the source address selection picks.
- ``send_error`` builds Destination Unreachable / Packet Too Big / Time
  Exceeded / Parameter Problem quoting as much of the packet as fits in
  1280 bytes, and never (RFC 4443 2.4 (e)) in reply to an ICMPv6 error or
  a Redirect, to a packet sent to a multicast group or as link-layer
  multicast or broadcast (``icmpv6.no_error_to_link_group``) (except Packet Too Big and Parameter Problem code 2 for an
  option whose type asks for it, ``multicast_ok``), or to an unspecified
  or multicast source. A token bucket per destination limits them (RFC 4443
  2.4 (f)); at most ``max_buckets`` are tracked; and a host-wide bucket
  (``global_rate``/``global_burst``, ``icmpv6.errors_global_limited``) keeps
  spoofed sources from multiplying the rate (``ustack.ratelimit.ErrorBudget``,
  shared with ICMP).
- Incoming errors are matched to the transport named by the quoted
  packet's upper layer, found by walking the quoted extension headers with
  the same limit. Transports hear them in the vocabulary they already
  speak (RFC 1122's ICMPv4 type/code): no route and beyond scope -> net
  unreachable (3/0), address unreachable -> host unreachable (3/1), port
  unreachable -> 3/3, administratively prohibited -> 3/13, Packet Too Big
  -> fragmentation needed (3/4) with the new path MTU after it lowered the
  destination's entry (RFC 8201; only once the transport vouched for the
  quote where it can, ``icmp_quote_check``: TCP's sequence number in flight,
  RFC 5927), time exceeded -> 11, parameter problem -> 12. So TCP and UDP need no IPv6 branch.
- NDP messages (types 133..137) go to ``ndp.input`` with the hop limit.
"""

from __future__ import annotations

import errno
from typing import Optional

from ustack.net.icmp_base import MAX_BUCKETS, IcmpBase
from ustack.net.ip import ProtocolTable
from ustack.net.ipv6 import Ipv6Layer
from ustack.stats import Stats
from ustack.wire import WireError
from ustack.wire.icmpv6 import (
    DEST_UNREACHABLE,
    ECHO_REPLY,
    ECHO_REQUEST,
    NDP_TYPES,
    PACKET_TOO_BIG,
    PARAMETER_PROBLEM,
    REDIRECT,
    TIME_EXCEEDED,
    Icmpv6Message,
)
from ustack.wire.ipv6 import HEADER_LEN, walk
from ustack.wire.proto import PROTO_ICMPV6

MLD_QUERY = 130  # RFC 3810 5.1 (ustack.net.mld answers it)
MLD_REPORTS = frozenset((131, 132, 143))  # MLDv1 report/done (RFC 2710), MLDv2 report (RFC 3810)
# ICMPv6 destination unreachable code -> the ICMPv4 code transports understand (RFC 1122 vocabulary).
_UNREACH_AS_V4 = {0: 0, 1: 13, 2: 0, 3: 1, 4: 3, 5: 13, 6: 13}


class Icmpv6Layer(IcmpBase):
    """ICMPv6 for one interface: answers through ``ip``, routes errors in through ``protocols``."""

    prefix = "icmpv6"
    proto = PROTO_ICMPV6
    unroutable = frozenset((errno.ENETUNREACH, errno.EADDRNOTAVAIL))

    def __init__(self, ip: Ipv6Layer, protocols: ProtocolTable, stats: Stats, *, error_rate: float = 1.0,
                 error_burst: float = 6.0, answer_multicast_echo: bool = True, max_buckets: int = MAX_BUCKETS,
                 global_rate: float = 1000.0, global_burst: float = 50.0):
        super().__init__(ip, protocols, stats, error_rate=error_rate, error_burst=error_burst,
                         max_buckets=max_buckets, global_rate=global_rate, global_burst=global_burst)
        self.iface = ip.iface
        self.answer_multicast_echo = answer_multicast_echo
        self.mld = None  # the interface's MldListener (ustack.net.mld), set by the Stack

    def _encode(self, msg: Icmpv6Message, src: bytes, dst: bytes) -> bytes:
        return msg.to_bytes(src, dst)

    # -- input ----------------------------------------------------------------
    def input(self, frame: memoryview, pkt, now: float) -> None:
        """One ICMPv6 message (a K_ICMP6 record: checksum verified, addressed to us)."""
        stats = self.stats
        src, dst = pkt.src, pkt.dst
        try:
            msg = Icmpv6Message.parse(frame[pkt.l4:pkt.l3 + pkt.total_len], src, dst, verify_checksum=False)
        except WireError as e:
            stats.drop(e.reason)
            return
        itype = msg.type
        if itype in NDP_TYPES:
            self.ip.ndp.input(msg, src, dst, pkt.ttl, bytes(frame[0:6]), now)
        elif itype == ECHO_REQUEST:
            if dst[0] == 0xFF and not self.answer_multicast_echo:
                stats.drop("icmpv6.multicast_echo_ignored")
                return
            if src == bytes(16):
                stats.drop("icmpv6.echo_from_unspecified")
                return
            stats.inc("icmpv6.echo_requests_received")
            try:
                reply_src = dst if dst[0] != 0xFF else self.ip.source(src)
            except OSError:
                stats.drop("icmpv6.echo_no_route")
                return
            self._answer_echo(msg, reply_src, src, now)
        elif itype == ECHO_REPLY:
            self._echo_reply_in(msg, msg.body, src, now, pkt.ttl)
        elif itype == MLD_QUERY:
            if self.mld is None:
                stats.drop("icmpv6.unsupported_type")
                return
            self.mld.query(bytes(frame[pkt.l4:pkt.l3 + pkt.total_len]), src, pkt.ttl, now)
        elif itype in MLD_REPORTS:
            if self.mld is not None and itype == 131:  # an MLDv1 Report: suppresses ours in MLDv1 mode
                self.mld.report_heard(bytes(frame[pkt.l4:pkt.l3 + pkt.total_len]), now)
            else:
                stats.inc("mld.other_reports_ignored")  # other listeners' reports: a v2 host ignores them (RFC 3810 6)
        elif itype in (DEST_UNREACHABLE, PACKET_TOO_BIG, TIME_EXCEEDED, PARAMETER_PROBLEM):
            stats.inc(f"icmpv6.errors_received.type{itype}.code{msg.code}")
            self._error_in(msg, now)
        else:
            stats.drop("icmpv6.unsupported_type")

    def _error_in(self, msg: Icmpv6Message, now: float) -> None:
        stats = self.stats
        quoted = msg.body
        if len(quoted) < HEADER_LEN or quoted[0] >> 4 != 6:
            stats.drop("icmpv6.bad_quote")
            return
        qsrc, qdst = bytes(quoted[8:24]), bytes(quoted[24:40])
        if qsrc not in self.iface.valid():
            stats.drop("icmpv6.error_not_ours")
            return
        try:
            chain = walk(quoted, HEADER_LEN, quoted[6], self.ip.max_extension_headers)
        except WireError:
            stats.drop("icmpv6.bad_quote")
            return
        if chain.fragment is not None and chain.fragment.offset:
            stats.drop("icmpv6.bad_quote")  # a non-first fragment quotes no ports
            return
        if len(quoted) < chain.offset + 8:
            stats.drop("icmpv6.bad_quote")
            return
        itype, code, info = msg.type, msg.code, 0
        l4 = bytes(quoted[chain.offset:chain.offset + 8])
        if itype == PACKET_TOO_BIG:
            # RFC 8201 4: lower the path MTU (never below 1280), then tell the transport the new one. First
            # the transport vouches for the quote where it can (RFC 5927 4.1: TCP's sequence number in flight;
            # a forgery changes nothing, counted there); a quote no connection owns lowers that destination's
            # entry only, and only a vouched one rebuilds every cached frame template.
            check = getattr(self.protocols.get(chain.next_header), "icmp_quote_check", None)
            vouched = None if check is None else check(qsrc, int.from_bytes(l4[0:2], "big"), qdst,
                                                       int.from_bytes(l4[2:4], "big"), l4)
            if vouched is False:
                return
            self.ip.pmtu_update(qdst, msg.mtu, now, flush=vouched is True)
            itype, code, info = 3, 4, self.ip.mtu(qdst)
        elif itype == DEST_UNREACHABLE:
            itype, code = 3, _UNREACH_AS_V4.get(code, 1)
        elif itype == TIME_EXCEEDED:
            itype = 11
        else:
            itype, code = 12, 0
        self._to_transport(chain.next_header, qsrc, qdst, l4, itype, code, info, now)

    # -- output ---------------------------------------------------------------
    def send_error(self, itype: int, code: int, original, dst: bytes, now: float, rest: int = 0,
                   multicast_ok: bool = False, link_group: bool = False) -> bool:
        """An ICMPv6 error quoting ``original`` (from its IPv6 header) to ``dst``; False if suppressed.
        ``link_group``: the packet came in a link-layer multicast frame (``Packet.link_group``)."""
        stats = self.stats
        if len(original) < HEADER_LEN:
            return False
        qdst = bytes(original[24:40])
        if original[6] == PROTO_ICMPV6 and len(original) > HEADER_LEN and (
                original[HEADER_LEN] < 128 or original[HEADER_LEN] == REDIRECT):
            return False  # RFC 4443 2.4 (e.1, e.2)
        if qdst[0] == 0xFF and not (multicast_ok or itype == PACKET_TOO_BIG):
            return False  # (e.3)
        if link_group and not (multicast_ok or itype == PACKET_TOO_BIG):
            stats.inc("icmpv6.no_error_to_link_group")  # (e.3): "sent as a link-layer multicast" too
            return False
        if dst == bytes(16) or dst[0] == 0xFF:
            return False  # (e.6)
        try:
            src = qdst if qdst in self.iface.valid() else self.ip.source(dst)
        except OSError:
            stats.drop("icmpv6.error_no_route")
            return False
        return self._send_error(src, dst, Icmpv6Message.error(itype, code, original, rest), itype, code, now)

    def ping(self, dst: bytes, ident: int, seq: int, now: float, payload: bytes = b"",
             ttl: Optional[int] = None) -> None:
        """Send one echo request (replies go to ``echo_handlers[ident]``)."""
        self._ping(Icmpv6Message.echo_request(ident, seq, payload), dst, now, ttl)
