"""UDP sockets with the stdlib's shape (``socket(driver, AF_INET, SOCK_DGRAM)``).

bind, connect, send/sendto, recv/recvfrom/recv_into/recvfrom_into,
settimeout/gettimeout/setblocking, getsockname/getpeername,
setsockopt/getsockopt (SO_RCVBUF, SO_BROADCAST, SO_REUSEADDR), close and
the context-manager protocol, on a ``UdpEndpoint`` of the stack's UdpLayer.
"""

from __future__ import annotations

import errno
import socket as _std

from ustack.api.base import (AF_INET, AF_INET6, MSG_DONTWAIT, MSG_NOSIGNAL, MSG_PEEK, MSG_WAITALL, SOCK_DGRAM,
                             SOL_SOCKET, SocketBase, bad_flags, byte_view, sendmsg_data, set_callback, shared,
                             writable_views)
from ustack.net.addr import ANY4, ANY6

_RECV_FLAGS = MSG_PEEK | MSG_DONTWAIT | MSG_WAITALL  # MSG_WAITALL means nothing for datagrams (Linux too)
_SEND_FLAGS = MSG_DONTWAIT | MSG_NOSIGNAL | _std.MSG_CONFIRM  # MSG_CONFIRM: a neighbour hint, not needed


def udp_readiness(ep) -> tuple[bool, bool]:
    """(readable, writable) of a UDP socket: a datagram or an error waits; sending never blocks here."""
    return bool(ep.queue) or ep.error is not None or ep.closed, True


class DatagramSocket(SocketBase):
    """A UDP socket."""

    _ep = shared()

    def __init__(self, driver, family: int = AF_INET, type: int = SOCK_DGRAM, proto: int = 0):
        super().__init__(driver, family, type, proto)
        with self._driver.lock:
            self._ep = self.stack.udp.endpoint()

    def __repr__(self):
        state = "closed" if self._dead else f"laddr={self.getsockname()}"
        return f"<ustack.api.socket UDP {state}>"

    def _release(self) -> None:
        with self._driver.lock:
            self._ep.close()

    def _orphan(self):
        return self._ep.close

    # -- readiness (ustack.api.readiness) ----------------------------------------
    def _readiness(self) -> tuple[bool, bool]:
        return udp_readiness(self._ep)

    def _watch(self) -> None:
        rfd, ep = self._h.rfd, self._ep
        if rfd is not None:
            set_callback(ep, "on_readable", lambda: rfd.set(*udp_readiness(ep)))

    # -- addresses ------------------------------------------------------------
    def bind(self, address) -> None:
        """Bind to a local ``(host, port)`` (AF_INET6: ``(host, port[, flowinfo, scope_id])``).

        Port 0 picks an ephemeral port. On AF_INET6 a v4-mapped address binds IPv4, as on Linux.

        Raises:
            OSError: EADDRINUSE (the port is taken), EADDRNOTAVAIL (not one of the stack's addresses),
                EINVAL (already bound), EBADF once closed; ``socket.gaierror`` for a name that does not resolve.
        """
        self._check()
        addr, port = self._parse(address)  # AF_INET6: a v4-mapped local address is an IPv4 binding, as Linux
        with self._driver.lock:
            self._ep.v6only = self._v6only
            self.stack.udp.bind(self._ep, addr, port)

    def connect(self, address) -> None:
        """Set the default destination and accept datagrams from it alone, as UDP ``connect``.

        Binds an ephemeral port first when unbound. No packet is sent.

        Raises:
            OSError: EINVAL for port 0, ENETUNREACH when no route leads there, EBADF once closed;
                ``socket.gaierror`` for a name that does not resolve.
        """
        self._check()
        addr, port = self._parse(address)
        if port == 0:
            raise OSError(errno.EINVAL, "Invalid argument")
        with self._driver.lock:
            if self._family == AF_INET6 and not self._ep.bound:
                self._ep.v6only = self._v6only
                self.stack.udp.bind(self._ep, ANY6 if len(addr) == 16 else ANY4, 0)
            self.stack.udp.connect(self._ep, addr, port)

    def connect_ex(self, address) -> int:
        """As :meth:`connect`, but return the errno instead of raising ``OSError`` (0 on success).

        Raises:
            socket.gaierror: a name that does not resolve (as the stdlib's ``connect_ex``).
        """
        try:
            self.connect(address)
            return 0
        except _std.gaierror:
            raise  # a name that does not resolve is raised, as the stdlib's connect_ex (only connect's errno returns)
        except OSError as e:
            return e.errno or errno.EINVAL

    def getsockname(self) -> tuple[str, int]:
        """Return the local address, ``(host, port)`` or AF_INET6's 4-tuple.

        A connected socket bound to the wildcard reports the source address its route chose, as Linux.

        Raises:
            OSError: EBADF once closed.
        """
        self._check()
        ep = self._ep
        if not ep.bound and self._family == AF_INET6:
            return self._format(ANY6, 0)
        if ep.ckey is not None and ep.local_addr in (ANY4, ANY6):
            return self._format(ep.ckey[0], ep.local_port)  # connected: the source the route chose, as Linux
        return self._format(ep.local_addr, ep.local_port)

    def getpeername(self) -> tuple[str, int]:
        """Return the connected peer's address.

        Raises:
            OSError: ENOTCONN when not connected, EBADF once closed.
        """
        self._check()
        if self._ep.remote is None:
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
        return self._format(*self._ep.remote)

    # -- options --------------------------------------------------------------
    def setsockopt(self, level: int, optname: int, value) -> None:
        """Set a socket option: SO_RCVBUF (doubled, as Linux), SO_BROADCAST, SO_RCVTIMEO,
        SO_SNDTIMEO, IPV6_V6ONLY (before bind); SO_REUSEADDR and SO_SNDBUF are accepted without effect.

        Raises:
            OSError: ENOPROTOOPT for an option ustack does not have, EINVAL for IPV6_V6ONLY after bind,
                EBADF once closed.
        """
        self._check()
        if level == SOL_SOCKET and self._timeo_opt(optname, value):
            return
        if self._v6only_opt(level, optname, value, set_it=True) is not None:
            if self._ep.bound:
                raise OSError(errno.EINVAL, "Invalid argument (IPV6_V6ONLY after bind)")
            return
        if level == SOL_SOCKET and optname == _std.SO_RCVBUF:
            self._ep.rcvbuf = max(256, int(value) * 2)  # Linux doubles the requested value
        elif level == SOL_SOCKET and optname == _std.SO_BROADCAST:
            self._ep.broadcast = bool(value)
        elif level == SOL_SOCKET and optname in (_std.SO_REUSEADDR, _std.SO_SNDBUF):
            pass  # accepted; no effect for UDP on a single-owner stack
        else:
            raise OSError(errno.ENOPROTOOPT, "Protocol not available")

    def getsockopt(self, level: int, optname: int, buflen: int = 0):
        """Return a socket option's value (an int, or bytes when ``buflen`` is given for timeouts).

        Also SO_ERROR (the pending error's errno, cleared), SO_TYPE.

        Raises:
            OSError: ENOPROTOOPT for an option ustack does not have, EBADF once closed.
        """
        self._check()
        if level == SOL_SOCKET and optname in (_std.SO_RCVTIMEO, _std.SO_SNDTIMEO):
            return self._timeo_get(optname)
        v6only = self._v6only_opt(level, optname)
        if v6only is not None:
            return v6only
        if level == SOL_SOCKET and optname == _std.SO_RCVBUF:
            return self._ep.rcvbuf
        if level == SOL_SOCKET and optname == _std.SO_BROADCAST:
            return int(self._ep.broadcast)
        if level == SOL_SOCKET and optname == _std.SO_ERROR:
            with self._driver.lock:
                err = self._ep.take_error()
                self._refresh()  # the error no longer makes the socket readable
            return err.errno if err is not None else 0
        if level == SOL_SOCKET and optname == _std.SO_TYPE:
            return self.type
        raise OSError(errno.ENOPROTOOPT, "Protocol not available")

    # -- data -----------------------------------------------------------------
    def sendto(self, data, *args) -> int:
        """Send one datagram: ``sendto(data, address)`` or ``sendto(data, flags, address)``.

        Returns:
            The number of bytes sent (all of ``data``).

        Raises:
            TypeError: a wrong number of arguments or data that is not bytes-like.
            OSError: EMSGSIZE (larger than a datagram may be), ENETUNREACH, EACCES (broadcast without
                SO_BROADCAST), EOPNOTSUPP for unsupported flags, EBADF once closed.
        """
        self._check()
        if len(args) == 1:
            flags, address = 0, args[0]
        elif len(args) == 2:
            flags, address = args
        else:
            raise TypeError(f"sendto() takes 2 or 3 arguments ({len(args) + 1} given)")
        data = byte_view(data)  # (the stdlib checks the data before the address)
        bad_flags(flags, _SEND_FLAGS)
        addr, port = self._parse(address)
        return self._send(data, addr, port)

    def _send(self, data, addr: bytes, port: int) -> int:
        driver = self._driver
        with driver.lock:
            err = self._ep.take_error()
            if err is not None:
                self._refresh()
                raise err
            n = self.stack.udp.send(self._ep, data, addr, port, driver.clock())
        driver.kick()
        return n

    def send(self, data, flags: int = 0) -> int:
        """Send one datagram to the connected peer.

        Returns:
            The number of bytes sent.

        Raises:
            OSError: EDESTADDRREQ when not connected; as :meth:`sendto` otherwise.
        """
        self._check()
        bad_flags(flags, _SEND_FLAGS)
        data = byte_view(data)
        if self._ep.remote is None:
            raise OSError(errno.EDESTADDRREQ, "Destination address required")
        dst, port = self._ep.remote
        return self._send(data, dst, port)

    def sendall(self, data, flags: int = 0) -> None:
        """Send one datagram to the connected peer, as :meth:`send`; returns ``None``."""
        self.send(data, flags)

    def sendmsg(self, buffers, ancdata=(), flags: int = 0, address=None) -> int:
        """One datagram gathered from ``buffers``; no ancillary data (non-empty ``ancdata``: EOPNOTSUPP)."""
        data = sendmsg_data(buffers, ancdata, flags)
        if address is None:
            return self.send(data, flags)
        return self.sendto(data, flags, address)

    def _take(self, flags: int):
        """The next datagram (left queued with MSG_PEEK) as (payload, src, sport); raises a pending error."""
        bad_flags(flags, _RECV_FLAGS)
        ep = self._ep
        self._wait(lambda: bool(ep.queue) or ep.error is not None or ep.closed, flags, "rcvtimeo")
        with self._driver.lock:
            if ep.queue:
                item = ep.queue[0] if flags & MSG_PEEK else ep.pop()
                self._refresh()
                return item
            err = ep.take_error()
            self._refresh()
        if err is not None:
            raise err
        raise OSError(errno.EBADF, "Bad file descriptor")

    def recvfrom(self, bufsize: int, flags: int = 0):
        """Receive the next datagram (MSG_PEEK: leave it queued).

        Args:
            bufsize: at most this many bytes are returned; the rest of a longer datagram is discarded.
            flags: MSG_PEEK, MSG_DONTWAIT.

        Returns:
            ``(data, address)``.

        Raises:
            ValueError: a negative ``bufsize``.
            OSError: ``BlockingIOError`` (EAGAIN) when nothing is queued on a non-blocking socket or with
                MSG_DONTWAIT, ``TimeoutError`` when the socket's timeout (or SO_RCVTIMEO) passes, a pending
                error of the endpoint (an ICMP error such as ``ConnectionRefusedError``), EBADF once closed.
        """
        self._check()
        if bufsize < 0:
            raise ValueError("negative buffersize in recvfrom")
        payload, src, sport = self._take(flags)
        return payload[:bufsize], self._format(src, sport)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        """Receive the next datagram's data, as :meth:`recvfrom` without the address."""
        return self.recvfrom(bufsize, flags)[0]

    def recvfrom_into(self, buffer, nbytes: int = 0, flags: int = 0):
        """Receive the next datagram into ``buffer`` (its first ``nbytes``, or all of it).

        Returns:
            ``(nbytes_received, address)``; a longer datagram is truncated.

        Raises:
            ValueError: a negative ``nbytes``, or one larger than the buffer.
            OSError: ``BlockingIOError`` (EAGAIN) when nothing is queued on a non-blocking socket or with
                MSG_DONTWAIT, ``TimeoutError`` when the socket's timeout (or SO_RCVTIMEO) passes, a pending
                error of the endpoint (an ICMP error such as ``ConnectionRefusedError``), EBADF once closed.
        """
        self._check()
        view = memoryview(buffer).cast("B")
        if nbytes < 0:
            raise ValueError("negative buffersize in recvfrom_into")
        n = nbytes or len(view)
        if n > len(view):
            raise ValueError("nbytes is greater than the length of the buffer")
        payload, src, sport = self._take(flags)
        k = min(n, len(payload))
        view[:k] = payload[:k]
        return k, self._format(src, sport)

    def recv_into(self, buffer, nbytes: int = 0, flags: int = 0) -> int:
        """Receive the next datagram into ``buffer``; returns the byte count, as :meth:`recvfrom_into`."""
        return self.recvfrom_into(buffer, nbytes, flags)[0]

    def recvmsg(self, bufsize: int, ancbufsize: int = 0, flags: int = 0):
        """(data, [], msg_flags, address); msg_flags has MSG_TRUNC when the datagram was cut. No ancillary data."""
        self._check()
        if bufsize < 0 or ancbufsize < 0:
            raise ValueError("negative buffer size in recvmsg()")
        payload, src, sport = self._take(flags)
        mflags = _std.MSG_TRUNC if len(payload) > bufsize else 0
        return payload[:bufsize], [], mflags, self._format(src, sport)

    def recvmsg_into(self, buffers, ancbufsize: int = 0, flags: int = 0):
        """Receive the next datagram scattered into ``buffers``, as ``socket.socket.recvmsg_into``.

        Returns:
            ``(nbytes, ancdata, msg_flags, address)``: no ancillary data; MSG_TRUNC when it did not fit.

        Raises:
            ValueError: a negative ``ancbufsize``.
            OSError: ``BlockingIOError`` (EAGAIN) when nothing is queued on a non-blocking socket or with
                MSG_DONTWAIT, ``TimeoutError`` when the socket's timeout (or SO_RCVTIMEO) passes, a pending
                error of the endpoint (an ICMP error such as ``ConnectionRefusedError``), EBADF once closed.
        """
        self._check()
        if ancbufsize < 0:
            raise ValueError("negative buffer size in recvmsg_into()")
        views = writable_views(buffers)
        payload, src, sport = self._take(flags)
        pos = 0
        for v in views:
            k = min(len(v), len(payload) - pos)
            if k <= 0:
                break
            v[:k] = payload[pos:pos + k]
            pos += k
        mflags = _std.MSG_TRUNC if pos < len(payload) else 0
        return pos, [], mflags, self._format(src, sport)

    @property
    def drops(self) -> int:
        """Datagrams dropped because the receive queue was full."""
        return self._ep.drops
