"""What ICMP (``icmp.py``) and ICMPv6 (``icmpv6.py``) share: echo replies to their handlers, output that
turns "no route" into a named drop, and errors out under one rate budget.

Each layer keeps what differs: which messages it answers and how, the rules
of RFC 1122 3.2.2 / RFC 4443 2.4 (e) on when not to send an error, and its
wire format (``_encode``). Counters and drops carry the layer's ``prefix``
("icmp" or "icmpv6"): ``<prefix>.echo_replies_received``,
``<prefix>.unmatched_echo_reply``, ``<prefix>.errors_sent.type<T>.code<C>``...
"""

from __future__ import annotations

import errno
from typing import Callable, Optional

from ustack.net.ip import IpLayer, ProtocolTable
from ustack.ratelimit import ErrorBudget
from ustack.stats import Stats

MAX_BUCKETS = 4096  # default cap of per-destination rate limiters (remote traffic cannot push past it)


class IcmpBase:
    """Echo handlers, routed output and the error budget of one ICMP layer (subclassed by version)."""

    prefix = "icmp"
    proto = 1
    unroutable = frozenset((errno.ENETUNREACH,))  # output errors that are a drop, not an exception

    def __init__(self, ip: IpLayer, protocols: ProtocolTable, stats: Stats, *, error_rate: float, error_burst: float,
                 max_buckets: int, global_rate: float, global_burst: float):
        self.ip = ip
        self.protocols = protocols
        self.stats = stats
        # errors out: a bucket per destination (at most max_buckets) and one for the host (RFC 1812 4.3.2.8,
        # RFC 4443 2.4 (f))
        self.budget = ErrorBudget(stats, self.prefix, rate=error_rate, burst=error_burst, max_buckets=max_buckets,
                                  global_rate=global_rate, global_burst=global_burst)
        # ident -> handler(seq, ident, payload, src, now, ttl)
        self.echo_handlers: dict[int, Callable[[int, int, bytes, bytes, float, int], None]] = {}

    def _encode(self, msg, src: bytes, dst: bytes) -> bytes:
        """The message on the wire, checksum filled (ICMPv6's covers a pseudo-header of ``src``/``dst``)."""
        raise NotImplementedError

    def _echo_reply_in(self, msg, data, src: bytes, now: float, ttl: int) -> None:
        self.stats.inc(self.prefix + ".echo_replies_received")
        handler = self.echo_handlers.get(msg.ident)
        if handler is None:
            self.stats.drop(self.prefix + ".unmatched_echo_reply")
            return
        handler(msg.seq, msg.ident, data, src, now, ttl)

    def _to_transport(self, proto: int, qsrc: bytes, qdst: bytes, l4: bytes, itype: int, code: int, info: int,
                      now: float) -> None:
        """An error about one of our datagrams to the transport that sent it (the ``ProtocolTable``), in
        ICMPv4's type/code vocabulary. ``l4``: the quote's first 8 bytes of the transport header (RFC 792:
        the ports, and for TCP the sequence number RFC 5927 checks against blind forgeries)."""
        transport = self.protocols.get(proto)
        if transport is None:
            self.stats.drop(self.prefix + ".error_no_transport")
            return
        transport.icmp_error(qsrc, int.from_bytes(l4[0:2], "big"), qdst, int.from_bytes(l4[2:4], "big"),
                             itype, code, info, l4, now)

    def _answer_echo(self, request, src: bytes, dst: bytes, now: float) -> None:
        """The reply to an echo request from ``dst`` (sent from ``src``, one of ours)."""
        if self._output(src, dst, request.echo_reply(), now, self.prefix + ".echo_no_route"):
            self.stats.inc(self.prefix + ".echo_replies_sent")

    def _send_error(self, src: bytes, dst: bytes, msg, itype: int, code: int, now: float) -> bool:
        """An error the caller found allowed, within the budget; counted by type and code when it went out."""
        if not self.budget.allow(dst, now):
            return False
        if not self._output(src, dst, msg, now, self.prefix + ".error_no_route"):
            return False
        self.stats.inc(f"{self.prefix}.errors_sent.type{itype}.code{code}")
        return True

    def _output(self, src: bytes, dst: bytes, msg, now: float, no_route: str) -> bool:
        """Send ``msg``; False (the drop ``no_route``) when ``dst`` cannot be reached from here."""
        try:
            self.ip.output(src, dst, self.proto, self._encode(msg, src, dst), now)
        except OSError as e:
            if e.errno not in self.unroutable:
                raise
            self.stats.drop(no_route)
            return False
        return True

    def _ping(self, msg, dst: bytes, now: float, ttl: Optional[int]) -> None:
        src = self.ip.source(dst)
        self.ip.output(src, dst, self.proto, self._encode(msg, src, dst), now, ttl=ttl)
        self.stats.inc(self.prefix + ".echo_requests_sent")
