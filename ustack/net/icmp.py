"""ICMPv4 (RFC 792, RFC 1122 section 3.2.2): echo, errors out (rate-limited), errors in.

- Echo requests to our unicast address are answered with the same
  identifier, sequence and data. Broadcast echo requests are ignored, as
  Linux does by default (icmp_echo_ignore_broadcasts).
- ``send_error`` builds destination-unreachable / time-exceeded messages
  quoting the offending datagram, never in reply to an ICMP error, a
  broadcast/multicast datagram (by its IP address, or by its frame's
  destination MAC: ``icmp.no_error_to_link_group``), a non-initial fragment
  or a datagram from a broadcast source (RFC 1122 section 3.2.2). A token bucket per destination
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
- With the fast path, once a source's echo request was answered here, its
  next ones are answered in C (``_fastpath.EchoResponder``) from a cached
  template of the same reply while its ARP entry stays fresh.
- ``ping()`` sends an echo request; replies are delivered to the callback
  registered for their identifier.
"""

from __future__ import annotations

import errno
from typing import Optional

from ustack.net.addr import ANY4, is_multicast
from ustack.net.icmp_base import MAX_BUCKETS, IcmpBase
from ustack.net.ip import IpLayer, ProtocolTable
from ustack.net.route import Interface
from ustack.stats import Stats
from ustack.wire import WireError
from ustack.wire.checksum import internet_checksum
from ustack.wire.icmp import DEST_UNREACHABLE, ECHO_REPLY, ECHO_REQUEST, HEADER_LEN, TIME_EXCEEDED, IcmpMessage
from ustack.wire.proto import PROTO_ICMP


class IcmpLayer(IcmpBase):
    """ICMP for one IPv4 interface: answers through ``ip``, routes errors in through ``protocols``."""

    prefix = "icmp"
    proto = PROTO_ICMP

    def __init__(self, ip: IpLayer, iface: Interface, protocols: ProtocolTable, stats: Stats, *,
                 error_rate: float = 1.0, error_burst: float = 6.0, answer_broadcast_echo: bool = False,
                 max_buckets: int = MAX_BUCKETS, global_rate: float = 1000.0, global_burst: float = 50.0):
        super().__init__(ip, protocols, stats, error_rate=error_rate, error_burst=error_burst,
                         max_buckets=max_buckets, global_rate=global_rate, global_burst=global_burst)
        self.iface = iface
        self.answer_broadcast_echo = answer_broadcast_echo
        # the fast path's EchoResponder (_fastpath, the stack sets it): after a reply sent from here, the
        # template of that source's replies goes to it, and its next requests are answered in C
        self.fast_echo = None

    def _encode(self, msg: IcmpMessage, src: bytes, dst: bytes) -> bytearray:
        buf = bytearray(msg.length)
        msg.emit(buf)
        return buf

    # -- input ----------------------------------------------------------------
    def input(self, frame: memoryview, pkt, now: float) -> None:
        """One ICMP message (a K_ICMP record: checksum verified, addressed to one of our addresses)."""
        stats = self.stats
        l4 = pkt.l4
        end = pkt.l3 + pkt.total_len
        if end - l4 >= HEADER_LEN and frame[l4] == ECHO_REQUEST:
            self._echo(frame[l4:end], pkt, now)  # the common case in few Python calls: it runs on a cold cache
            return
        try:
            msg = IcmpMessage.parse(frame[pkt.l4:pkt.l3 + pkt.total_len], verify_checksum=False)
        except WireError as e:
            stats.drop(e.reason)
            return
        itype = msg.type
        src = pkt.src
        if itype == ECHO_REPLY:
            self._echo_reply_in(msg, msg.payload, src, now, pkt.ttl)
        elif itype in (DEST_UNREACHABLE, TIME_EXCEEDED):
            stats.inc(f"icmp.errors_received.type{itype}.code{msg.code}")
            self._error_in(msg, now)
        else:
            stats.drop("icmp.unsupported_type")

    def _echo(self, request, pkt, now: float) -> None:
        """Answer an echo request (RFC 792): the same message with type 0 (Echo Reply), code 0 and its
        checksum recomputed; identifier, sequence number and data as they came."""
        stats = self.stats
        dst = pkt.dst
        owned = self.iface.owns(dst)
        if not owned and not self.answer_broadcast_echo:
            stats.drop("icmp.broadcast_echo_ignored")
            return
        # RFC 1122 3.2.2.6: the reply's source is the request's destination when that was ours
        ours = bytes(dst) if owned else self.iface.addr
        stats.inc("icmp.echo_requests_received")
        reply = bytearray(request)
        reply[0:4] = b"\0\0\0\0"  # ECHO_REPLY, code 0, checksum 0
        csum = internet_checksum(reply)
        reply[2] = csum >> 8
        reply[3] = csum & 0xFF
        try:
            self.ip.output(ours, pkt.src, PROTO_ICMP, reply, now)
        except OSError as e:
            if e.errno not in self.unroutable:
                raise
            stats.drop("icmp.echo_no_route")
            return
        stats.inc("icmp.echo_replies_sent")
        if self.fast_echo is not None and owned:
            template = self.ip.echo_template(ours, pkt.src, now)
            if template is not None:
                self.fast_echo.learn(template)

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
        if not self.iface.owns(qsrc):
            stats.drop("icmp.error_not_ours")
            return
        self._to_transport(quoted[9], qsrc, bytes(quoted[16:20]), bytes(quoted[qihl:qihl + 8]),
                           msg.type, msg.code, msg.seq, now)

    # -- output ---------------------------------------------------------------
    def send_error(self, itype: int, code: int, original, dst: bytes, now: float, rest: int = 0,
                   link_group: bool = False) -> bool:
        """Send an ICMP error quoting ``original`` (IP header onwards) to ``dst``; False if suppressed.
        ``link_group``: the datagram came in a link-layer broadcast or multicast frame (``Packet.link_group``)."""
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
        if link_group:  # RFC 1122 3.2.2: nor one that came as a link-layer broadcast or multicast
            stats.inc("icmp.no_error_to_link_group")
            return False
        try:
            self.ip.source(dst)
        except OSError as e:  # no route back (no gateway): nothing to send, nothing to raise
            if e.errno != errno.ENETUNREACH:
                raise
            stats.drop("icmp.error_no_route")
            return False
        # from the address the datagram was sent to when it is ours (a loopback interface owns many)
        source = qdst if iface.owns(qdst) else iface.addr
        return self._send_error(source, dst, IcmpMessage.error(itype, code, original, rest), itype, code, now)

    def ping(self, dst: bytes, ident: int, seq: int, now: float, payload: bytes = b"",
             ttl: Optional[int] = None) -> None:
        """Send one echo request (replies go to ``echo_handlers[ident]``)."""
        self._ping(IcmpMessage.echo_request(ident, seq, payload), dst, now, ttl)
