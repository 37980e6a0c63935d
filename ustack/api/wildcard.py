"""A wildcard socket on two stacks: a server bound to 0.0.0.0 or :: under ``ustack run --loopback``.

On Linux the wildcard address spans every interface: a listener bound to
0.0.0.0 accepts over the wire and over ``lo`` alike. With the loopback
interface on a stack of its own (``ustack.api.loopback``), such a socket is
two: ``WildcardStream`` / ``WildcardDatagram`` is the socket on the main
stack (the one the application holds, its ``getsockname``, options and
fd), and ``_twin`` its counterpart on the loopback stack, bound to the same
address and port (``bind_pair``). Then:

- ``listen`` listens on both; ``accept`` takes from whichever queue has a
  connection (the main one first), the accepted socket living on the stack
  its connection came in on; the readiness fd is readable when either is;
- UDP: ``recvfrom`` and friends take from whichever has a datagram;
  ``sendto`` leaves through the stack that owns the destination (127/8 and
  ::1: the loopback one);
- options set are set on both, ``close`` closes both;
- the first ``connect`` (a client that bound the wildcard as its source)
  keeps the one socket whose stack owns the destination and closes the
  other (``ustack.api.patch``): a connected socket lives on one stack.

Locks: the twin's events arrive in whichever thread polls the loopback
stack, under its lock; they reach the main socket through
``Driver.defer`` on the main driver (lock-free), whose next round updates
the readiness fd and wakes the waiters (``kick``). No code here holds one
driver's lock while taking the other's.
"""

from __future__ import annotations

import errno
import socket as _std

from ustack.api.base import MSG_DONTWAIT, bad_flags, set_callback, shared
from ustack.api.dgram import _RECV_FLAGS, DatagramSocket, udp_readiness
from ustack.api.stream import StreamSocket, tcp_readiness

_PAIR_TRIES = 32  # ephemeral ports tried for a pair free on both stacks


def bind_pair(make, address):
    """Bind ``make()`` (a Wildcard socket, options set) to ``address`` and its twin to the same address and
    port. With port 0, a port the twin cannot have is given back and another tried; an explicit port in use
    on either stack is EADDRINUSE, as Linux's wildcard bind meets a socket on any address of the port."""
    for _ in range(_PAIR_TRIES):
        main = make()
        try:
            main.bind(address)
            port = main.getsockname()[1]
            main._twin.bind((address[0], port, *address[2:]))
        except OSError as e:
            main.close()  # (the twin too)
            if e.errno == errno.EADDRINUSE and address[1] == 0:
                continue
            raise
        except BaseException:
            main.close()
            raise
        return main
    raise OSError(errno.EADDRINUSE, "Address already in use (no ephemeral port free on both stacks)")


class _Twinned:
    """What both kinds share: the twin, options on both, close of both."""

    _twin = shared()

    def _forward_twin_events(self, obj, attr: str, readable) -> None:
        """The twin's ``obj.attr`` events reach this socket: its readiness fd (``readable()``: either
        side has something) and the main driver's waiters, through the main driver's next round."""
        driver, h, twin = self._driver, self._h, self._twin

        def update():
            if h.__dict__.get("_twin") is not twin:
                return  # the twin was dropped (a connect): its late events say nothing about this socket
            rfd = h.rfd
            if rfd is not None:
                rfd.set(readable(), rfd.writable)
            driver.kick()

        set_callback(obj, attr, lambda *args: driver.defer(update))

    def drop_twin(self):
        """Forget the twin and return it (its caller closes it): this socket is one stack's from now on."""
        twin, self._twin = self._twin, None
        if twin is not None:
            with self._driver.lock:
                self._watch()  # (the callbacks that looked at both sides look at this one only)
                self._refresh()
        return twin

    def hand_over(self):
        """The twin, made to stand for this socket (a first connect toward the loopback stack): it takes the
        readiness fd (selectors may hold its number), the timeouts; this socket closes. Returns it."""
        twin = self.drop_twin()
        h, th = self._h, twin._h
        with self._driver.lock:
            rfd, h.rfd = h.rfd, None
            if rfd is not None:
                h.slots.pop(rfd.fileno(), None)
        twin._timeout = self._timeout
        for key in ("rcvtimeo", "sndtimeo"):
            if key in h.__dict__:
                th.__dict__[key] = h.__dict__[key]
        if rfd is not None:
            with twin._driver.lock:
                th.rfd = rfd
                if th.slot0.open:
                    th.slots[rfd.fileno()] = th.slot0
                twin._watch()
                rfd.set(*twin._readiness())
            start = getattr(twin._driver, "ensure_running", None)
            if start is not None:
                start()
        twin._sync_blocking()
        self._dead_quietly_close()
        return twin

    def _dead_quietly_close(self) -> None:
        self._closed = True
        self._real_close()

    def setsockopt(self, *args):
        super().setsockopt(*args)
        twin = self._twin
        if twin is not None:
            twin.setsockopt(*args)

    def _release(self) -> None:
        twin, self._twin = self._twin, None
        try:
            super()._release()
        finally:
            if twin is not None:
                twin.close()

    def _orphan(self):
        mine, twin = super()._orphan(), self._twin
        if twin is None:
            return mine
        twin_release = twin._orphan()
        twin._dead = True  # (its finalizer must not warn: it goes with this socket)
        twin._driver.defer(twin_release)  # under the loopback stack's own lock, in its next round
        return mine


class WildcardStream(_Twinned, StreamSocket):
    """A TCP socket bound to the wildcard on the main stack with a twin on the loopback stack."""

    def __init__(self, driver, family, type, proto, twin: StreamSocket):
        super().__init__(driver, family, type, proto)
        self._twin = twin

    def _either(self):
        """A call answering "a connection waits on either listener" (no reference to this socket: the
        protocol objects' callbacks hold it, and must not keep the socket from its finalizer)."""
        lst, twin = self._listener, self._twin
        tl = twin._listener if twin is not None else None
        return lambda: (lst is not None and lst.readable) or (tl is not None and tl.readable)

    def _readiness(self):
        r, w = tcp_readiness(self._conn, self._listener)
        if self._listener is not None and self._twin is not None:
            r = self._either()()
        return r, w

    def _watch(self) -> None:
        super()._watch()
        rfd, lst, twin = self._h.rfd, self._listener, self._twin
        if rfd is not None and lst is not None and twin is not None and twin._listener is not None:
            either = self._either()
            set_callback(lst, "on_event", lambda _lst: rfd.set(either(), False))
            rfd.set(either(), False)

    def listen(self, backlog: int = 128) -> None:
        """Listen on both stacks (the main one and the loopback one), as ``socket.listen``.

        Raises:
            OSError: as :meth:`ustack.api.stream.StreamSocket.listen`.
        """
        twin = self._twin
        first = self._listener is None
        super().listen(backlog)
        if twin is None:
            return
        twin.listen(backlog)
        if first:
            self._forward_twin_events(twin._listener, "on_event", self._either())
            start = getattr(twin._driver, "ensure_running", None)
            if start is not None:
                start()  # someone must poll the loopback stack while this socket's owner waits on the main one
            self._watch()

    def accept(self):
        """Accept the next connection from either stack, as ``socket.accept``.

        Returns:
            ``(socket, address)``.

        Raises:
            OSError: ``BlockingIOError`` on a non-blocking socket with nothing pending,
                ``TimeoutError`` after the timeout, EINVAL when not listening.
        """
        twin = self._twin
        if twin is None or self._listener is None:
            return super().accept()
        self._check()
        lst, tl = self._listener, twin._listener
        tdriver, either = twin._driver, self._either()
        while True:
            if not either():
                tdriver.poll()  # (a non-blocking accept must see what waits on the loopback stack)
            self._wait(either, 0, "rcvtimeo")
            with self._driver.lock:
                conn, driver = lst.accept(), self._driver
            if conn is None:
                with tdriver.lock:
                    conn, driver = tl.accept(), tdriver
            with self._driver.lock:  # (every update of this socket's readiness fd runs under its stack's lock)
                self._refresh()
            if conn is not None:
                break
            if lst.closed:
                raise OSError(errno.EBADF, "Bad file descriptor (listener closed)")
        child = StreamSocket(driver, self.family, self.type, self.proto, _conn=conn)
        child._timeout = _std.getdefaulttimeout()  # like the stdlib: accepted sockets start blocking
        return child, child._peer()


class WildcardDatagram(_Twinned, DatagramSocket):
    """A UDP socket bound to the wildcard on the main stack with a twin on the loopback stack."""

    def __init__(self, driver, family, type, proto, twin: DatagramSocket):
        super().__init__(driver, family, type, proto)
        self._twin = twin
        self._forward_twin_events(twin._ep, "on_readable", self._either())
        start = getattr(twin._driver, "ensure_running", None)
        if start is not None:
            start()

    def _either(self):
        """A call answering "a datagram or an error waits on either side" (no reference to this socket)."""
        ep, twin = self._ep, self._twin
        tep = twin._ep if twin is not None else None
        return lambda: udp_readiness(ep)[0] or (tep is not None and udp_readiness(tep)[0])

    def _readiness(self):
        return self._either()(), True

    def _watch(self) -> None:
        if self._twin is None:
            return super()._watch()
        rfd = self._h.rfd
        if rfd is not None:
            either = self._either()
            set_callback(self._ep, "on_readable", lambda: rfd.set(either(), True))
            rfd.set(either(), True)

    def _take(self, flags: int):
        twin = self._twin
        if twin is None:
            return super()._take(flags)
        bad_flags(flags, _RECV_FLAGS)
        either = self._either()
        if not either():
            twin._driver.poll()  # (a non-blocking read must see what waits on the loopback stack)
        self._wait(either, flags, "rcvtimeo")
        if udp_readiness(self._ep)[0]:
            return super()._take(flags | MSG_DONTWAIT)
        item = twin._take(flags | MSG_DONTWAIT)
        with self._driver.lock:
            self._refresh()
        return item

    def _send(self, data, addr: bytes, port: int) -> int:
        twin = self._twin
        if twin is not None and owns(twin.stack, addr):
            return twin._send(data, addr, port)  # 127/8, ::1: through the loopback stack
        return super()._send(data, addr, port)


def owns(stack, addr: bytes) -> bool:
    """``addr`` is one of ``stack``'s own unicast addresses (a loopback stack: 127/8 and ::1)."""
    if len(addr) == 4:
        return stack.iface.owns(addr)
    return stack.iface6 is not None and stack.iface6.is_ours(addr) and addr != bytes(16)

