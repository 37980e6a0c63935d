"""What every ustack socket shares: address parsing, timeouts, blocking waits (see ``ustack.api.socket``).

A socket is made on a ``Driver`` (``ustack.api.driver``): the driver owns
the clock and the poll loop, the socket waits through it. Blocking calls
drive the stack's poll loop through the driver; non-blocking calls raise
BlockingIOError; timeouts raise TimeoutError (``socket.timeout``), as the
stdlib does. Addresses are text at this edge and packed bytes below it
(``ustack.net.addr``).
"""

from __future__ import annotations

import errno
import socket as _std
from typing import Optional

from ustack.net import addr
from ustack.net.addr import ANY4, BROADCAST4
from ustack.transport.ports import check_port

AF_INET = _std.AF_INET
SOCK_DGRAM = _std.SOCK_DGRAM
SOCK_STREAM = _std.SOCK_STREAM
SOL_SOCKET = _std.SOL_SOCKET


def parse_address(address) -> tuple[bytes, int]:
    """An AF_INET (host, port) pair -> (packed address, port), with the stdlib's errors."""
    if not isinstance(address, tuple) or len(address) != 2:
        raise TypeError("AF_INET address must be a tuple (host, port)")
    host, port = address
    check_port(port)
    if host in ("", "0.0.0.0"):
        return ANY4, port
    if host == "<broadcast>":
        return BROADCAST4, port
    if not isinstance(host, str):
        raise TypeError(f"str, bytes or bytearray expected, not {type(host).__name__}")
    try:
        a = addr.parse(host)
    except ValueError:
        a = None
    if a is None or len(a) != 4:
        raise _std.gaierror(_std.EAI_NONAME, "Name or service not known (ustack takes IPv4 literals)")
    return a, port


class SocketBase:
    """What UDP and TCP sockets share: the driver, timeouts, blocking waits, the context manager."""

    def __init__(self, driver, family: int = AF_INET, type: int = SOCK_STREAM, proto: int = 0):
        if not hasattr(driver, "wait_until"):
            raise TypeError(f"a ustack socket takes a ustack.api.driver.Driver, not {driver.__class__.__name__}")
        self.stack = driver.stack
        self.family = family
        self.type = type & ~(_std.SOCK_NONBLOCK | _std.SOCK_CLOEXEC)
        self.proto = proto
        self._driver = driver
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


