"""ICMPv4 (RFC 792, RFC 1122 section 3.2.2): echo, errors out (rate-limited), errors in.

- Echo requests to our unicast address are answered with the same
  identifier, sequence and data. Broadcast echo requests are ignored, as
  Linux does by default (icmp_echo_ignore_broadcasts).
- ``send_error`` builds destination-unreachable / time-exceeded messages
  quoting the offending datagram, never in reply to an ICMP error, a
  broadcast/multicast datagram, a non-initial fragment or a datagram from a
  broadcast source (RFC 1122 section 3.2.2). A token bucket per destination
  limits them (RFC 1812 section 4.3.2.8; Linux: ~1/s, burst 6).
- Incoming destination-unreachable / time-exceeded messages are matched to
  the transport endpoint named by the quoted header and surfaced there.
- ``ping()`` sends an echo request; replies are delivered to the callback
  registered for their identifier.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from ustack.ratelimit import TokenBucket
from ustack.wire import WireError
from ustack.wire.icmp import (DEST_UNREACHABLE, ECHO_REPLY, ECHO_REQUEST, TIME_EXCEEDED, IcmpMessage)

if TYPE_CHECKING:
    from ustack.stack import Stack

PROTO_ICMP = 1


class IcmpLayer:
    def __init__(self, stack: "Stack", *, error_rate: float = 1.0, error_burst: float = 6.0,
                 answer_broadcast_echo: bool = False):
        self.stack = stack
        self.error_rate = error_rate
        self.error_burst = error_burst
        self.answer_broadcast_echo = answer_broadcast_echo
        self._buckets: dict[int, TokenBucket] = {}
        # ident -> handler(seq, ident, payload, src, now, ttl)
        self.echo_handlers: dict[int, Callable[[int, int, bytes, int, float, int], None]] = {}

    # -- input ----------------------------------------------------------------
    def input(self, frame: memoryview, rec: tuple, now: float) -> None:
        _, _, l3, ihl, tot, _, src, dst, l4, itype, code, _, _, _ = rec
        stack = self.stack
        stats = stack.stats
        try:
            msg = IcmpMessage.parse(frame[l4:l3 + tot], verify_checksum=False)  # classify verified it
        except WireError as e:
            stats.drop(e.reason)
            return
        if itype == ECHO_REQUEST:
            if dst != stack.iface.addr and not self.answer_broadcast_echo:
                stats.drop("icmp.broadcast_echo_ignored")
                return
            stats.inc("icmp.echo_requests_received")
            reply = msg.echo_reply()
            buf = bytearray(reply.length)
            reply.emit(buf)
            stack.ipv4.output(src, PROTO_ICMP, buf, now=now)
            stats.inc("icmp.echo_replies_sent")
        elif itype == ECHO_REPLY:
            stats.inc("icmp.echo_replies_received")
            handler = self.echo_handlers.get(msg.ident)
            if handler is None:
                stats.drop("icmp.unmatched_echo_reply")
                return
            handler(msg.seq, msg.ident, msg.payload, src, now, frame[l3 + 8])
        elif itype in (DEST_UNREACHABLE, TIME_EXCEEDED):
            stats.inc(f"icmp.errors_received.type{itype}.code{code}")
            self._error_in(msg, src)
        else:
            stats.drop("icmp.unsupported_type")

    def _error_in(self, msg: IcmpMessage, reporter: int) -> None:
        quoted = msg.payload
        stats = self.stack.stats
        if len(quoted) < 20 or (quoted[0] >> 4) != 4:
            stats.drop("icmp.bad_quote")
            return
        qihl = (quoted[0] & 0x0F) * 4
        if qihl < 20 or len(quoted) < qihl + 8:
            stats.drop("icmp.bad_quote")
            return
        proto = quoted[9]
        qsrc = int.from_bytes(quoted[12:16], "big")
        qdst = int.from_bytes(quoted[16:20], "big")
        sport = int.from_bytes(quoted[qihl:qihl + 2], "big")
        dport = int.from_bytes(quoted[qihl + 2:qihl + 4], "big")
        if qsrc != self.stack.iface.addr:
            stats.drop("icmp.error_not_ours")
            return
        # RFC 792: the quote holds at least 8 bytes of the transport header; for TCP that includes
        # the sequence number, which RFC 5927 uses to tell a genuine error from a blind forgery.
        quoted_seq = int.from_bytes(quoted[qihl + 4:qihl + 8], "big")
        self.stack.transport_error(proto, qsrc, sport, qdst, dport, msg.type, msg.code, msg.seq, quoted_seq)

    # -- output ---------------------------------------------------------------
    def send_error(self, itype: int, code: int, original, dst: int, rest: int = 0) -> bool:
        """Send an ICMP error quoting ``original`` (IP header onwards) to ``dst``; False if suppressed."""
        stack = self.stack
        stats = stack.stats
        iface = stack.iface
        if len(original) < 20:
            return False
        # RFC 1122 3.2.2: never about an ICMP error, a non-initial fragment,
        # a broadcast/multicast datagram or a datagram from such a source.
        ihl = (original[0] & 0x0F) * 4
        qdst = int.from_bytes(original[16:20], "big")
        if original[9] == PROTO_ICMP and len(original) > ihl and original[ihl] not in (ECHO_REQUEST, ECHO_REPLY, 13, 14):
            return False
        if ((original[6] << 8) | original[7]) & 0x1FFF:
            return False
        if iface.is_broadcast(qdst) or (qdst >> 28) == 14 or iface.is_broadcast(dst) or (dst >> 28) == 14 or dst == 0:
            return False
        bucket = self._buckets.get(dst)
        if bucket is None:
            if len(self._buckets) > 4096:
                self._buckets.clear()
            bucket = self._buckets[dst] = TokenBucket(self.error_rate, self.error_burst, stack.now)
        if not bucket.take(stack.now):
            stats.inc("icmp.errors_rate_limited")
            return False
        msg = IcmpMessage.error(itype, code, original, rest)
        buf = bytearray(msg.length)
        msg.emit(buf)
        stack.ipv4.output(dst, PROTO_ICMP, buf)
        stats.inc(f"icmp.errors_sent.type{itype}.code{code}")
        return True

    def ping(self, dst: int, ident: int, seq: int, payload: bytes = b"", ttl: Optional[int] = None) -> None:
        """Send one echo request (replies go to ``echo_handlers[ident]``)."""
        msg = IcmpMessage.echo_request(ident, seq, payload)
        buf = bytearray(msg.length)
        msg.emit(buf)
        self.stack.ipv4.output(dst, PROTO_ICMP, buf, ttl=ttl)
        self.stack.stats.inc("icmp.echo_requests_sent")
