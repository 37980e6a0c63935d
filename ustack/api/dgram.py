"""UDP sockets with the stdlib's shape (``socket(driver, AF_INET, SOCK_DGRAM)``).

bind, connect, send/sendto, recv/recvfrom/recv_into/recvfrom_into,
settimeout/gettimeout/setblocking, getsockname/getpeername,
setsockopt/getsockopt (SO_RCVBUF, SO_BROADCAST, SO_REUSEADDR), close and
the context-manager protocol, on a ``UdpEndpoint`` of the stack's UdpLayer.
"""

from __future__ import annotations

import errno
import socket as _std

from ustack.api.base import AF_INET, SOCK_DGRAM, SOL_SOCKET, SocketBase, parse_address
from ustack.net.addr import to_str

class DatagramSocket(SocketBase):
    """A UDP socket."""

    def __init__(self, driver, family: int = AF_INET, type: int = SOCK_DGRAM, proto: int = 0):
        super().__init__(driver, family, type, proto)
        with self._driver.lock:
            self._ep = self.stack.udp.endpoint()

    def __repr__(self):
        state = "closed" if self._closed else f"laddr={self.getsockname()}"
        return f"<ustack.api.socket UDP {state}>"

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with self._driver.lock:
                self._ep.close()

    # -- addresses ------------------------------------------------------------
    def bind(self, address) -> None:
        self._check()
        addr, port = parse_address(address)
        with self._driver.lock:
            self.stack.udp.bind(self._ep, addr, port)

    def connect(self, address) -> None:
        self._check()
        addr, port = parse_address(address)
        if port == 0:
            raise OSError(errno.EINVAL, "Invalid argument")
        with self._driver.lock:
            self.stack.udp.connect(self._ep, addr, port)

    def connect_ex(self, address) -> int:
        try:
            self.connect(address)
            return 0
        except OSError as e:
            return e.errno or errno.EINVAL

    def getsockname(self) -> tuple[str, int]:
        self._check()
        return to_str(self._ep.local_addr), self._ep.local_port

    def getpeername(self) -> tuple[str, int]:
        self._check()
        if self._ep.remote is None:
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
        return to_str(self._ep.remote[0]), self._ep.remote[1]

    # -- options --------------------------------------------------------------
    def setsockopt(self, level: int, optname: int, value) -> None:
        self._check()
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
        if level == SOL_SOCKET and optname == _std.SO_RCVBUF:
            return self._ep.rcvbuf
        if level == SOL_SOCKET and optname == _std.SO_BROADCAST:
            return int(self._ep.broadcast)
        if level == SOL_SOCKET and optname == _std.SO_ERROR:
            err = self._ep.take_error()
            return err.errno if err is not None else 0
        if level == SOL_SOCKET and optname == _std.SO_TYPE:
            return self.type
        raise OSError(errno.ENOPROTOOPT, "Protocol not available")

    # -- data -----------------------------------------------------------------
    def sendto(self, data, *args) -> int:
        self._check()
        if len(args) == 1:
            address = args[0]
        elif len(args) == 2:
            address = args[1]
        else:
            raise TypeError("sendto() takes 2 or 3 arguments")
        addr, port = parse_address(address)
        driver = self._driver
        with driver.lock:
            err = self._ep.take_error()
            if err is not None:
                raise err
            n = self.stack.udp.send(self._ep, memoryview(data).cast("B"), addr, port, driver.clock())
        driver.kick()
        return n

    def send(self, data, flags: int = 0) -> int:
        self._check()
        if self._ep.remote is None:
            raise OSError(errno.EDESTADDRREQ, "Destination address required")
        driver = self._driver
        with driver.lock:
            err = self._ep.take_error()
            if err is not None:
                raise err
            dst, port = self._ep.remote
            n = self.stack.udp.send(self._ep, memoryview(data).cast("B"), dst, port, driver.clock())
        driver.kick()
        return n

    def sendall(self, data, flags: int = 0) -> None:
        self.send(data, flags)

    def _wait_readable(self) -> None:
        ep = self._ep
        self._wait(lambda: bool(ep.queue) or ep.error is not None or ep.closed)

    def _pop(self):
        ep = self._ep
        with self._driver.lock:
            if ep.queue:
                return ep.pop()
            err = ep.take_error()
        if err is not None:
            raise err
        raise OSError(errno.EBADF, "Bad file descriptor")

    def recvfrom(self, bufsize: int, flags: int = 0):
        self._check()
        if bufsize < 0:
            raise ValueError("negative buffersize in recvfrom")
        self._wait_readable()
        payload, src, sport = self._pop()
        return payload[:bufsize], (to_str(src), sport)

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
        self._wait_readable()
        payload, src, sport = self._pop()
        k = min(n, len(payload))
        view[:k] = payload[:k]
        return k, (to_str(src), sport)

    def recv_into(self, buffer, nbytes: int = 0, flags: int = 0) -> int:
        return self.recvfrom_into(buffer, nbytes, flags)[0]

    @property
    def drops(self) -> int:
        """Datagrams dropped because the receive queue was full."""
        return self._ep.drops
