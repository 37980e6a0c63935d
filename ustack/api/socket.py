"""Stdlib-shaped sockets on a ustack Stack.

``socket(stack, AF_INET, SOCK_DGRAM)`` behaves like ``socket.socket`` (TCP:
see ustack.api.stream, which ``socket(stack)`` / SOCK_STREAM returns):
bind, connect, send/sendto, recv/recvfrom/recv_into/recvfrom_into,
settimeout/gettimeout/setblocking, getsockname/getpeername,
setsockopt/getsockopt (SO_RCVBUF, SO_BROADCAST, SO_REUSEADDR), close and
the context-manager protocol. Blocking calls drive the stack's poll loop
through its Driver; non-blocking calls raise BlockingIOError; timeouts
raise TimeoutError (``socket.timeout``) as the stdlib does.
"""

from __future__ import annotations

import errno
import socket as _std
from typing import Optional

from ustack.api.driver import driver_for
from ustack.net.route import ip_int, ip_str

AF_INET = _std.AF_INET
SOCK_DGRAM = _std.SOCK_DGRAM
SOCK_STREAM = _std.SOCK_STREAM
SOL_SOCKET = _std.SOL_SOCKET


def parse_address(address) -> tuple[int, int]:
    if not isinstance(address, tuple) or len(address) != 2:
        raise TypeError("AF_INET address must be a tuple (host, port)")
    host, port = address
    if not isinstance(port, int):
        raise TypeError("'str' object cannot be interpreted as an integer" if isinstance(port, str) else
                        "port must be an integer")
    if not 0 <= port <= 0xFFFF:
        raise OverflowError("port must be 0-65535.")
    if host in ("", "0.0.0.0"):
        return 0, port
    if host == "<broadcast>":
        return 0xFFFFFFFF, port
    try:
        return ip_int(host), port
    except ValueError:
        raise _std.gaierror(_std.EAI_NONAME, "Name or service not known (ustack takes IPv4 literals)") from None


class socket:
    """A socket on a ustack Stack: ``socket(stack, AF_INET, SOCK_STREAM | SOCK_DGRAM)``.

    Like the stdlib, the type defaults to SOCK_STREAM (TCP); the instance is
    a ``StreamSocket`` or a ``DatagramSocket``, both subclasses of this one.
    """

    def __new__(cls, stack=None, family: int = AF_INET, type: int = SOCK_STREAM, proto: int = 0, **kw):
        if cls is socket:
            if family != AF_INET:
                raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol (ustack is IPv4)")
            base_type = type & ~(_std.SOCK_NONBLOCK | _std.SOCK_CLOEXEC)
            if base_type == SOCK_DGRAM:
                cls = DatagramSocket
            elif base_type == SOCK_STREAM:
                from ustack.api.stream import StreamSocket

                cls = StreamSocket
            else:
                raise OSError(errno.EPROTONOSUPPORT, "Protocol not supported")
        return object.__new__(cls)

    def __init__(self, stack, family: int = AF_INET, type: int = SOCK_STREAM, proto: int = 0):
        self.stack = stack
        self.family = family
        self.type = type & ~(_std.SOCK_NONBLOCK | _std.SOCK_CLOEXEC)
        self.proto = proto
        self._driver = driver_for(stack)
        self._timeout: Optional[float] = 0.0 if type & _std.SOCK_NONBLOCK else _std.getdefaulttimeout()
        self._closed = False

    # -- housekeeping ---------------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check(self) -> None:
        if self._closed:
            raise OSError(errno.EBADF, "Bad file descriptor")

    def fileno(self) -> int:
        """The device's fd: readable when frames wait (for selectors; the stack still has to be polled)."""
        return -1 if self._closed else self.stack.device.fileno()

    def settimeout(self, value: Optional[float]) -> None:
        if value is not None:
            value = float(value)
            if value < 0:
                raise ValueError("Timeout value out of range")
        self._timeout = value

    def gettimeout(self) -> Optional[float]:
        return self._timeout

    def setblocking(self, flag: bool) -> None:
        self._timeout = None if flag else 0.0

    def getblocking(self) -> bool:
        return self._timeout != 0.0

    def _wait(self, predicate, what: str = "") -> None:
        """Block (per the timeout) until predicate() holds; BlockingIOError / TimeoutError otherwise."""
        driver = self._driver
        if self._timeout == 0.0:
            with driver.lock:
                if predicate():
                    return
                driver.stack.poll(driver.clock())
                if predicate():
                    return
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        if not driver.wait_until(predicate, self._timeout):
            raise TimeoutError("timed out")


class DatagramSocket(socket):
    """A UDP socket."""

    def __init__(self, stack, family: int = AF_INET, type: int = SOCK_DGRAM, proto: int = 0):
        super().__init__(stack, family, type, proto)
        with self._driver.lock:
            self._ep = stack.udp.endpoint()

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
        return ip_str(self._ep.local_addr), self._ep.local_port

    def getpeername(self) -> tuple[str, int]:
        self._check()
        if self._ep.remote is None:
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
        return ip_str(self._ep.remote[0]), self._ep.remote[1]

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
        return payload[:bufsize], (ip_str(src), sport)

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
        return k, (ip_str(src), sport)

    def recv_into(self, buffer, nbytes: int = 0, flags: int = 0) -> int:
        return self.recvfrom_into(buffer, nbytes, flags)[0]

    @property
    def drops(self) -> int:
        """Datagrams dropped because the receive queue was full."""
        return self._ep.drops
