"""TcpOverIp: the ``TcpHost`` that puts a TcpLayer on an ``IpLayer``.

TCP knows the network layer only through this adapter: segments out
(``ip.output`` with DF for path-MTU discovery, RFC 1191, or the fast emit
straight into a TX slot), routing facts (MTU, source address), and ICMP
errors back in (registered in the IP ``ProtocolTable`` for protocol 6).
IPv6 is another ``IpLayer`` (``ip6``): the address length picks the layer.
"""

from __future__ import annotations

import errno
from typing import Optional

from ustack import _fastpath
from ustack.net.ip import IpLayer
from ustack.stats import Stats
from ustack.timers import TimerHeap
from ustack.transport.tcp.layer import TcpLayer
from ustack.wire.proto import PROTO_TCP


class TcpOverIp:
    """The ``TcpHost`` that puts a TcpLayer on an IpLayer (and routes ICMP errors back to it)."""

    __slots__ = ("ip", "ip6", "timers", "stats", "isn_secret", "tcp")

    def __init__(self, ip: IpLayer, timers: TimerHeap, stats: Stats, isn_secret: bytes,
                 ip6: Optional[IpLayer] = None):
        self.ip = ip
        self.ip6 = ip6
        self.timers = timers
        self.stats = stats
        self.isn_secret = isn_secret
        self.tcp: Optional[TcpLayer] = None

    def tcp_output(self, src: bytes, dst: bytes, segment, now: float) -> None:
        """A whole TCP segment (checksum filled) to IP; DF set for path-MTU discovery (RFC 1191)."""
        ip = self.ip if len(dst) == 4 else self.ip6
        try:
            if ip is None:
                raise OSError(errno.ENETUNREACH, "no IPv6 on this stack")
            ip.output(src, dst, PROTO_TCP, segment, now, df=len(segment) + ip.header_len <= ip.mtu(dst))
        except OSError as e:
            # No route: the segment is lost like any other; TCP's timers recover or give up.
            self.stats.drop("tcp.output_" + (errno.errorcode.get(e.errno, "error").lower()))

    def tcp_output_segment(self, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
                           window: int, ts, payload, now: float) -> bool:
        ip = self.ip if len(dst) == 4 else self.ip6
        return ip is not None and ip.emit_tcp(src, dst, sport, dport, seq, ack, flags, window, ts, payload, now)

    def tcp_template(self, src: bytes, dst: bytes, sport: int, dport: int, now: float):
        """A flow's cached frame template (``Ipv4Layer.tcp_template``, ``Ipv6Layer.tcp_template``), or the IP
        layer's ``Generation`` when it has none to give (nothing changes that until it moves), or None."""
        ip = self.ip if len(dst) == 4 else self.ip6
        if ip is None:
            return None
        t = ip.tcp_template(src, dst, sport, dport, now)
        return t if t is not None else ip.gen

    def tcp_emitter(self):
        """A connection's fast emitter over its flow's cached template (``_fastpath.FlowEmitter``)."""
        return _fastpath.FlowEmitter(self)

    def tcp_output_options(self, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
                           window: int, options: bytes, now: float) -> bool:
        ip = self.ip if len(dst) == 4 else self.ip6
        return ip is not None and ip.emit_tcp_options(src, dst, sport, dport, seq, ack, flags, window, options, now)

    def tcp_push(self) -> None:
        """Post what was written so far, now (one kick), not at the end of the poll round."""
        self.ip.link.commit()

    def _layer(self, dst: bytes) -> IpLayer:
        ip = self.ip if len(dst) == 4 else self.ip6
        if ip is None:
            raise OSError(errno.ENETUNREACH, "Network is unreachable (no IPv6 on this stack)")
        return ip

    def route_mtu(self, dst: bytes) -> int:
        return self._layer(dst).mtu(dst)

    def pick_source(self, dst: bytes) -> bytes:
        return self._layer(dst).source(dst)

    def icmp_quote_check(self, src: bytes, sport: int, dst: bytes, dport: int, quoted: bytes):
        """``TcpLayer.icmp_quote_check`` on the quoted TCP header's first 8 bytes (ports, sequence number)."""
        return self.tcp.icmp_quote_check(src, sport, dst, dport, int.from_bytes(quoted[4:8], "big"))

    def icmp_error(self, src: bytes, sport: int, dst: bytes, dport: int, itype: int, code: int, info: int,
                   quoted: bytes, now: float) -> None:
        # RFC 5927: the quoted sequence number lets TCP tell a genuine error from a blind forgery.
        self.tcp.icmp_error(src, sport, dst, dport, itype, code, info, now=now,
                            quoted_seq=int.from_bytes(quoted[4:8], "big"))
