"""The network-layer seam: what transports may ask of IP, and the protocol table for demux.

Transports (UDP, TCP, ICMP's users) reach the network layer only through
``IpLayer``, so IPv6 can stand beside IPv4 without touching them. An
``IpLayer`` answers routing questions (which source address, which MTU
toward a destination), sends datagrams (fragmenting when it must), and
writes whole frames for established flows from per-flow templates (the
fast emit: Ethernet + IP + L4 headers and the payload straight into a TX
slot, one C call).

``ProtocolTable`` maps an IP protocol number to the transport that takes
its datagrams and the ICMP errors quoting them: the one demux point between
the network layer and the transports.
"""

from __future__ import annotations

from typing import Optional, Protocol


class IpLayer(Protocol):
    """One IP version's output side, as the transports see it."""

    version: int  # 4 or 6
    header_len: int  # bytes of IP header on the datagrams we send (no options)

    def source(self, dst: bytes) -> bytes:
        """The local address to send from toward ``dst`` (OSError ENETUNREACH when there is no route)."""

    def mtu(self, dst: bytes) -> int:
        """The IP MTU toward ``dst`` (path MTU once known)."""

    def output(self, src: bytes, dst: bytes, proto: int, payload, now: float, *, ttl: Optional[int] = None,
               tos: int = 0, df: bool = False) -> None:
        """Send one datagram whose ``payload`` is a whole L4 message (checksum filled).

        Resolves the next hop (queueing while it resolves) and fragments a
        payload larger than the MTU unless ``df``, which raises EMSGSIZE.
        Raises OSError ENETUNREACH when there is no route.
        """

    def emit_udp(self, src: bytes, dst: bytes, sport: int, dport: int, payload, now: float) -> bool:
        """Fast emit of one unfragmented UDP datagram into a TX slot.

        False, having sent nothing, when the general path is needed (next hop
        unresolved, larger than the MTU, broadcast); BlockingIOError ENOBUFS
        when the TX ring is full.
        """

    def emit_tcp(self, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
                 window: int, ts, payload, now: float) -> bool:
        """Fast emit of one TCP segment (no options but timestamps; ``ts`` = (TSval, TSecr) or None).

        False, having sent nothing, when the general path is needed.
        """

    def emit_tcp_options(self, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
                         window: int, options: bytes, now: float) -> bool:
        """Fast emit of one TCP segment without data whose header carries ``options`` (padded to a
        multiple of 4): a SYN or SYN-ACK. False, having sent nothing, when the general path is needed.
        """


class Transport(Protocol):
    """What a transport offers the network layer (see ``ProtocolTable``)."""

    def icmp_error(self, src: bytes, sport: int, dst: bytes, dport: int, itype: int, code: int, info: int,
                   quoted: bytes, now: float) -> None:
        """An ICMP error quoting a datagram we sent from (src, sport) to (dst, dport).

        ``info`` is the ICMP header's second word (the next-hop MTU for
        "fragmentation needed"); ``quoted`` holds at least the first 8 bytes
        of the transport header we sent (RFC 792).
        """


class ProtocolTable:
    """IP protocol number -> transport (ICMP errors are routed through it)."""

    __slots__ = ("_by_number",)

    def __init__(self):
        self._by_number: dict[int, Transport] = {}

    def register(self, number: int, transport: Transport) -> None:
        if number in self._by_number:
            raise ValueError(f"IP protocol {number} already has a transport")
        self._by_number[number] = transport

    def get(self, number: int) -> Optional[Transport]:
        return self._by_number.get(number)

    def __contains__(self, number: int) -> bool:
        return number in self._by_number
