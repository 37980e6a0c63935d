"""Per-socket readiness fds: one kernel-visible fd per ustack socket for select, poll, epoll, selectors.

A ustack socket has no kernel socket, yet ``select``/``poll``/``epoll`` and
``selectors`` want one fd per socket whose read and write readiness are
independent. An AF_UNIX stream socketpair gives that (FACTS.md, "One fd
with read and write readiness that user space controls"): the application
sees end ``a`` (``fileno()``), the stack side holds end ``b``.

- readable: one byte written into ``b`` makes ``a`` readable; reading it
  back from ``a`` clears it.
- the stack side's reads and writes on ``a`` pass MSG_DONTWAIT, so the
  fd's own O_NONBLOCK is free to show the socket's blocking mode
  (``set_blocking``), as ``fcntl(F_GETFL)`` on a kernel socket does.
- not writable: ``a``'s SO_SNDBUF clamps at its minimum (4608 here); one
  512-byte write from ``a`` (it lands in ``b``'s receive queue) makes ``a``
  not writable; draining ``b`` makes it writable again.

``set(readable, writable)`` acts only on transitions, so the callbacks
that call it on every segment cost two attribute compares when nothing
changed. The fd exists only for the socket's lifetime; closing the socket
closes both ends (a later select on the number fails with EBADF, as for a
closed kernel socket).

Who keeps the stack polled while the application sleeps in select() on
these fds: the Driver's background thread, started on demand the first
time a socket hands out its fileno() (``Driver.ensure_running``). It
sleeps in poll(2) on the device fd until the stack's next deadline, so an
idle program uses no CPU.
"""

from __future__ import annotations

import os
import select
import socket as _std
import threading

import _socket

_FILL = b"\0" * 512  # one write this size makes ``a`` not writable (SO_SNDBUF at its minimum)
_MAX_FILL = 64  # writes tried before giving up on making ``a`` not writable (never reached on Linux)


class ReadinessFd:
    """One socket's readiness fd: ``fileno()`` for the application, ``set(r, w)`` for the stack side."""

    __slots__ = ("_a", "_b", "readable", "writable", "_lock", "__weakref__")

    def __init__(self, readable: bool = False, writable: bool = False):
        # the C module's pair, not ``socket.socketpair``: under ``ustack.patch()`` that makes the patch's
        # socket objects, and every set() would pass through its Python dispatch to reach the kernel
        a, b = _socket.socketpair(_std.AF_UNIX, _std.SOCK_STREAM)
        a.setsockopt(_std.SOL_SOCKET, _std.SO_SNDBUF, 1)  # the kernel clamps to its minimum
        a.setblocking(False)
        b.setblocking(False)
        self._a, self._b = a, b
        self._lock = threading.Lock()  # set() and close() in two threads: never a closed or reused end
        self.readable = False
        self.writable = True  # a fresh pair: ``a`` is writable, not readable
        self.set(readable, writable)

    def fileno(self) -> int:
        """The application's end of the pair: the fd select/poll/epoll watch; -1 once closed."""
        a = self._a
        return -1 if a is None else a.fileno()

    @property
    def closed(self) -> bool:
        """``True`` once :meth:`close` ran."""
        return self._a is None

    def set_blocking(self, blocking: bool) -> None:
        """The application's fd's O_NONBLOCK as a kernel socket's with this timeout would have it (clear only
        for timeout None); the stack side never blocks on it either way (MSG_DONTWAIT)."""
        a = self._a
        if a is not None:
            os.set_blocking(a.fileno(), blocking)

    def dup(self) -> int:
        """A new fd for the same readiness (``socket.dup``): the same open file, so the same states."""
        return os.dup(self._a.fileno())

    def set(self, readable: bool, writable: bool) -> None:
        """Make the fd report exactly these states; syscalls only for what changed."""
        if readable == self.readable and writable == self.writable:
            return
        with self._lock:
            self._set(readable, writable)

    def _set(self, readable: bool, writable: bool) -> None:
        a = self._a
        if a is None:
            return
        if readable != self.readable:
            if readable:
                self._b.send(b"!")
            else:
                _drain(a)
            self.readable = readable
        if writable != self.writable:
            if writable:
                _drain(self._b)
            else:
                for _ in range(_MAX_FILL):
                    try:
                        a.send(_FILL, _std.MSG_DONTWAIT)
                    except BlockingIOError:
                        break
                    if not _pollout(a):
                        break
            self.writable = writable

    def close(self) -> None:
        """Close both ends of the socket pair. Idempotent."""
        with self._lock:
            a, b = self._a, self._b
            self._a = self._b = None
            if a is not None:
                a.close()
                b.close()


def _drain(s) -> None:
    """Empty one end in one call: what is queued there is one 1-byte mark (readable) or at most
    ``_MAX_FILL`` 512-byte fills (not writable), all below one read's size; no second read to meet
    EAGAIN (a system call and a Python exception per transition)."""
    try:
        s.recv(1 << 16, _std.MSG_DONTWAIT)
    except BlockingIOError:
        pass


def _pollout(s) -> bool:
    p = select.poll()
    p.register(s.fileno(), select.POLLOUT)
    return bool(p.poll(0))
