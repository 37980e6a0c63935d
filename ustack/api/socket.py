"""The socket factory: ``socket(driver, AF_INET or AF_INET6, SOCK_STREAM | SOCK_DGRAM)`` like ``socket.socket``.

AF_INET6 sockets are dual-stack unless IPV6_V6ONLY is set before bind
(Linux's default): bound to ::, they hear IPv4 too, and IPv4 peers appear
as ::ffff:a.b.c.d with 4-tuple addresses (host, port, flowinfo, scope_id).

Like the stdlib, the type defaults to SOCK_STREAM (TCP). The result is a
``StreamSocket`` (``ustack.api.stream``) or a ``DatagramSocket``
(``ustack.api.dgram``), both ``SocketBase`` (``ustack.api.base``). A socket
lives on a ``Driver`` (``ustack.api.driver``), which owns the clock and the
poll loop of one Stack.
"""

from __future__ import annotations

import errno
import socket as _std

from ustack.api.base import AF_INET, AF_INET6, SOCK_DGRAM, SOCK_STREAM, SOL_SOCKET, SocketBase, parse_address
from ustack.api.dgram import DatagramSocket
from ustack.api.stream import StreamSocket

__all__ = ["socket", "AF_INET", "AF_INET6", "SOCK_DGRAM", "SOCK_STREAM", "SOL_SOCKET", "SocketBase", "DatagramSocket",
           "StreamSocket", "parse_address"]


def socket(driver, family: int = AF_INET, type: int = SOCK_STREAM, proto: int = 0) -> SocketBase:
    """A UDP or TCP socket on ``driver``'s stack.

    Args:
        driver: the :class:`~ustack.api.driver.Driver` of the stack the socket lives on.
        family: ``AF_INET`` (default) or ``AF_INET6`` (dual-stack unless IPV6_V6ONLY).
        type: ``SOCK_STREAM`` (default, TCP) or ``SOCK_DGRAM`` (UDP), optionally with SOCK_NONBLOCK
            and SOCK_CLOEXEC.
        proto: 0 or the protocol's number.

    Returns:
        A :class:`~ustack.api.stream.StreamSocket` or a :class:`~ustack.api.dgram.DatagramSocket`.

    Raises:
        OSError: EAFNOSUPPORT for another family, EPROTONOSUPPORT for another type.
    """
    if family not in (AF_INET, AF_INET6):
        raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol (ustack: AF_INET, AF_INET6)")
    base_type = type & ~(_std.SOCK_NONBLOCK | _std.SOCK_CLOEXEC)
    if base_type == SOCK_DGRAM:
        return DatagramSocket(driver, family, type, proto)
    if base_type == SOCK_STREAM:
        return StreamSocket(driver, family, type, proto)
    raise OSError(errno.EPROTONOSUPPORT, "Protocol not supported")
