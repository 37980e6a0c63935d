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
        self._check()
        addr, port = self._parse(address)  # AF_INET6: a v4-mapped local address is an IPv4 binding, as Linux
        with self._driver.lock:
            self._ep.v6only = self._v6only
            self.stack.udp.bind(self._ep, addr, port)

    def connect(self, address) -> None:
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
        try:
            self.connect(address)
            return 0
        except _std.gaierror:
            raise  # a name that does not resolve is raised, as the stdlib's connect_ex (only connect's errno returns)
        except OSError as e:
            return e.errno or errno.EINVAL

    def getsockname(self) -> tuple[str, int]:
        self._check()
        ep = self._ep
        if not ep.bound and self._family == AF_INET6:
            return self._format(ANY6, 0)
        if ep.ckey is not None and ep.local_addr in (ANY4, ANY6):
            return self._format(ep.ckey[0], ep.local_port)  # connected: the source the route chose, as Linux
        return self._format(ep.local_addr, ep.local_port)

    def getpeername(self) -> tuple[str, int]:
        self._check()
        if self._ep.remote is None:
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
        return self._format(*self._ep.remote)

    # -- options --------------------------------------------------------------
    def setsockopt(self, level: int, optname: int, value) -> None:
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
        self._check()
        bad_flags(flags, _SEND_FLAGS)
        data = byte_view(data)
        if self._ep.remote is None:
            raise OSError(errno.EDESTADDRREQ, "Destination address required")
        dst, port = self._ep.remote
        return self._send(data, dst, port)

    def sendall(self, data, flags: int = 0) -> None:
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
        self._check()
        if bufsize < 0:
            raise ValueError("negative buffersize in recvfrom")
        payload, src, sport = self._take(flags)
        return payload[:bufsize], self._format(src, sport)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        return self.recvfrom(bufsize, flags)[0]

    def recvfrom_into(self, buffer, nbytes: int = 0, flags: int = 0):
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
