"""ICMPv4 (RFC 792, RFC 1122 section 3.2.2): echo, errors out (rate-limited), errors in.

- Echo requests to our unicast address are answered with the same
  identifier, sequence and data. Broadcast echo requests are ignored, as
  Linux does by default (icmp_echo_ignore_broadcasts).
- ``send_error`` builds destination-unreachable / time-exceeded messages
  quoting the offending datagram, never in reply to an ICMP error, a
  broadcast/multicast datagram, a non-initial fragment or a datagram from a
  broadcast source (RFC 1122 section 3.2.2). A token bucket per destination
  limits them (RFC 1812 section 4.3.2.8; Linux: ~1/s, burst 6). At most
  ``max_buckets`` destinations are tracked (default 4096); a new one past
  that evicts the least recently created bucket (``icmp.ratelimit_evicted``).
  A host-wide bucket bounds them all together (``global_rate`` 1000/s,
  ``global_burst`` 50, as Linux's icmp_msgs_per_sec / icmp_msgs_burst), so
  spoofed sources, each with a fresh bucket, cannot multiply the rate
  (``icmp.errors_global_limited``).
- A reply or error toward a source we have no route to (no gateway, off the
  subnet) is dropped (``icmp.echo_no_route`` / ``icmp.error_no_route``),
  never raised: one packet must not stop the host.
- Incoming destination-unreachable / time-exceeded messages are matched to
  the transport named by the quoted header's protocol (``ProtocolTable``),
  which surfaces them on the endpoint.
- ``ping()`` sends an echo request; replies are delivered to the callback
  registered for their identifier.
"""

from __future__ import annotations

import errno
from typing import Callable, Optional

from ustack.net.addr import ANY4, is_multicast
from ustack.net.ip import IpLayer, ProtocolTable
from ustack.net.route import Interface
from ustack.ratelimit import ErrorBudget
from ustack.stats import Stats
from ustack.wire import WireError
from ustack.wire.icmp import DEST_UNREACHABLE, ECHO_REPLY, ECHO_REQUEST, TIME_EXCEEDED, IcmpMessage
from ustack.wire.proto import PROTO_ICMP

MAX_BUCKETS = 4096  # default cap of per-destination rate limiters (remote traffic cannot push past it)


class IcmpLayer:
    """ICMP for one IPv4 interface: answers through ``ip``, routes errors in through ``protocols``."""

    def __init__(self, ip: IpLayer, iface: Interface, protocols: ProtocolTable, stats: Stats, *,
                 error_rate: float = 1.0, error_burst: float = 6.0, answer_broadcast_echo: bool = False,
                 max_buckets: int = MAX_BUCKETS, global_rate: float = 1000.0, global_burst: float = 50.0):
        self.ip = ip
        self.iface = iface
        self.protocols = protocols
        self.stats = stats
        self.answer_broadcast_echo = answer_broadcast_echo
        # errors out: a bucket per destination (at most max_buckets) and one for the host
        self.budget = ErrorBudget(stats, "icmp", rate=error_rate, burst=error_burst, max_buckets=max_buckets,
                                  global_rate=global_rate, global_burst=global_burst)
        # ident -> handler(seq, ident, payload, src, now, ttl)
        self.echo_handlers: dict[int, Callable[[int, int, bytes, bytes, float, int], None]] = {}

    # -- input ----------------------------------------------------------------
    def input(self, frame: memoryview, pkt, now: float) -> None:
        """One ICMP message (a K_ICMP record: checksum verified, addressed to one of our addresses)."""
        stats = self.stats
        try:
            msg = IcmpMessage.parse(frame[pkt.l4:pkt.l3 + pkt.total_len], verify_checksum=False)
        except WireError as e:
            stats.drop(e.reason)
            return
        itype = msg.type
        src = pkt.src
        if itype == ECHO_REQUEST:
            if pkt.dst != self.iface.addr and not self.answer_broadcast_echo:
                stats.drop("icmp.broadcast_echo_ignored")
                return
            stats.inc("icmp.echo_requests_received")
            reply = msg.echo_reply()
            buf = bytearray(reply.length)
            reply.emit(buf)
            if self._output(src, buf, now, "icmp.echo_no_route"):
                stats.inc("icmp.echo_replies_sent")
        elif itype == ECHO_REPLY:
            stats.inc("icmp.echo_replies_received")
            handler = self.echo_handlers.get(msg.ident)
            if handler is None:
                stats.drop("icmp.unmatched_echo_reply")
                return
            handler(msg.seq, msg.ident, msg.payload, src, now, pkt.ttl)
        elif itype in (DEST_UNREACHABLE, TIME_EXCEEDED):
            stats.inc(f"icmp.errors_received.type{itype}.code{msg.code}")
            self._error_in(msg, now)
        else:
            stats.drop("icmp.unsupported_type")

    def _error_in(self, msg: IcmpMessage, now: float) -> None:
        quoted = msg.payload
        stats = self.stats
        if len(quoted) < 20 or (quoted[0] >> 4) != 4:
            stats.drop("icmp.bad_quote")
            return
        qihl = (quoted[0] & 0x0F) * 4
        if qihl < 20 or len(quoted) < qihl + 8:
            stats.drop("icmp.bad_quote")
            return
        qsrc = bytes(quoted[12:16])
        if qsrc != self.iface.addr:
            stats.drop("icmp.error_not_ours")
            return
        transport = self.protocols.get(quoted[9])
        if transport is None:
            stats.drop("icmp.error_no_transport")
            return
        # RFC 792: the quote holds at least 8 bytes of the transport header (ports, and for TCP
        # the sequence number, which RFC 5927 uses to tell a genuine error from a blind forgery).
        l4 = bytes(quoted[qihl:qihl + 8])
        transport.icmp_error(qsrc, int.from_bytes(l4[0:2], "big"), bytes(quoted[16:20]),
                             int.from_bytes(l4[2:4], "big"), msg.type, msg.code, msg.seq, l4, now)

    # -- output ---------------------------------------------------------------
    def send_error(self, itype: int, code: int, original, dst: bytes, now: float, rest: int = 0) -> bool:
        """Send an ICMP error quoting ``original`` (IP header onwards) to ``dst``; False if suppressed."""
        stats = self.stats
        iface = self.iface
        if len(original) < 20:
            return False
        # RFC 1122 3.2.2: never about an ICMP error, a non-initial fragment,
        # a broadcast/multicast datagram or a datagram from such a source.
        ihl = (original[0] & 0x0F) * 4
        qdst = bytes(original[16:20])
        if original[9] == PROTO_ICMP and len(original) > ihl and original[ihl] not in (ECHO_REQUEST, ECHO_REPLY, 13, 14):
            return False
        if ((original[6] << 8) | original[7]) & 0x1FFF:
            return False
        if (iface.is_broadcast(qdst) or is_multicast(qdst) or iface.is_broadcast(dst) or is_multicast(dst)
                or dst == ANY4):
            return False
        try:
            self.ip.source(dst)
        except OSError as e:  # no route back (no gateway): nothing to send, nothing to raise
            if e.errno != errno.ENETUNREACH:
                raise
            stats.drop("icmp.error_no_route")
            return False
        if not self.budget.allow(dst, now):
            return False
        msg = IcmpMessage.error(itype, code, original, rest)
        buf = bytearray(msg.length)
        msg.emit(buf)
        if not self._output(dst, buf, now, "icmp.error_no_route"):
            return False
        stats.inc(f"icmp.errors_sent.type{itype}.code{code}")
        return True

    def _output(self, dst: bytes, buf: bytearray, now: float, no_route: str) -> bool:
        """Send an ICMP message from our address; False (the drop ``no_route``) when ``dst`` is unroutable."""
        try:
            self.ip.output(self.iface.addr, dst, PROTO_ICMP, buf, now)
        except OSError as e:
            if e.errno != errno.ENETUNREACH:
                raise
            self.stats.drop(no_route)
            return False
        return True

    def ping(self, dst: bytes, ident: int, seq: int, now: float, payload: bytes = b"",
             ttl: Optional[int] = None) -> None:
        """Send one echo request (replies go to ``echo_handlers[ident]``)."""
        msg = IcmpMessage.echo_request(ident, seq, payload)
        buf = bytearray(msg.length)
        msg.emit(buf)
        self.ip.output(self.ip.source(dst), dst, PROTO_ICMP, buf, now, ttl=ttl)
        self.stats.inc("icmp.echo_requests_sent")
