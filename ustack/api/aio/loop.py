"""The native asyncio event loop for ustack: the loop itself polls the stack (DESIGN.md "How the stack runs").

``EventLoop(driver)`` is asyncio's selector event loop (the Unix one:
subprocesses, signals, AF_UNIX, pipes and 127/8 stay on the kernel through
the normal selector) with three changes:

- its selector (``StackSelector``) watches two more fds, the device's (RX
  readiness) and the driver's wake-up pipe (another thread moved a
  deadline), and before it waits it polls the stack (``Stack.poll``: TX of
  what the callbacks just wrote, timers, RX), then waits no longer than
  the stack's next deadline; after the wait it polls again (after a
  round that received frames it does not sleep for the driver's
  ``busy_poll`` budget, as ``ustack.api.driver`` spins). So every
  round of callbacks is followed by one TX commit, and a frame that
  arrives wakes the loop through the device fd;
- connection events reach transports through the protocol objects'
  callbacks (``ustack.api.aio.transport.Hook``: inside the stack's round
  they only schedule the transport's work for this loop iteration): no
  thread, no per-socket fd;
- the socket-level hooks asyncio builds everything on
  (``_make_socket_transport``, ``_make_ssl_transport``,
  ``_make_datagram_transport``, ``_start_serving``/``_stop_serving`` and the
  ``sock_*`` methods) take ustack sockets natively. So ``create_connection``,
  ``create_server``, ``start_server``/``open_connection``,
  ``create_datagram_endpoint``, ``ssl=``, ``start_tls`` and ``sendfile``
  are asyncio's own code over ustack transports. The sockets asyncio makes
  come from ``socket.socket``, i.e. from ``ustack.patch(driver)`` (which
  ``ustack run`` installs): unpatched, only ``sock=`` arguments reach ustack.

While the loop runs it owns the stack's polling: the driver's background
thread is stopped (and restarted afterwards if it ran), and
``Driver.auto_start`` is off so a socket's ``fileno()`` does not start it
again. Threads that block on ustack sockets meanwhile poll through the
driver's lock as always; what they cause reaches the loop through
``call_soon_threadsafe``. An exception from ``Stack.poll`` (a device's
``rx_burst`` or ``tx_commit`` failing) does not stop the loop: as in the
driver's thread it is counted (``driver.poll_error.<Type>``), kept in
``driver.last_error``, and that stack is left alone for ``ERROR_BACKOFF``;
the loop's exception handler hears of it at most once a second.

``getaddrinfo`` answers through ``ustack.api.resolver`` (the patch's, or
the loop's own when unpatched): numeric, /etc/hosts, then DNS over the
stack's own UDP, in the default executor; IPv6 results only when the stack
has IPv6.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import selectors
import socket as _std
import threading

from asyncio import constants, sslproto

from ustack.api.aio.transport import DatagramTransport, StreamTransport, hook, unhook
from ustack.api.base import MSG_DONTWAIT, SocketBase
from ustack.api.driver import ERROR_BACKOFF
from ustack.api.dgram import DatagramSocket
from ustack.api.patch import PatchedSocket
from ustack.api.stream import StreamSocket
from ustack.transport.tcp.tcb import State

_RX_COUNTER = "eth.frames_received"  # the Stack counts every received frame here (as the Driver reads it)
_STACK = object()
_NO_FD_POLL = 0.001  # seconds between polls of a device that has no fd to wait on  # selector data of the fds the loop watches for the stack itself


def ustack_socket(sock, address=None):
    """The ustack socket behind ``sock`` (a ustack socket or a patched one), or None for a kernel socket.

    A patched socket not yet decided is decided by ``address`` (loopback: the
    kernel, or the loopback stack) or, without one, for ustack, as its first
    call would. By type, not isinstance: a ``Mock(spec=sock)`` passes
    isinstance checks and must be treated as the foreign object it is.
    """
    kind = type(sock)
    if issubclass(kind, SocketBase):
        return sock
    if not issubclass(kind, PatchedSocket):
        return None
    return sock._impl(address)


class StackSelector(selectors.BaseSelector):
    """The loop's selector: a normal selector plus the stack's fds, polling the stack around each wait."""

    def __init__(self, loop, inner=None):
        self._loop = loop
        self._inner = inner or selectors.DefaultSelector()

    def register(self, fileobj, events, data=None):
        """Watch ``fileobj`` for ``events``, as ``selectors.BaseSelector.register``; returns the SelectorKey."""
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj):
        """Stop watching ``fileobj``; returns its SelectorKey (KeyError when not registered)."""
        return self._inner.unregister(fileobj)

    def modify(self, fileobj, events, data=None):
        """Change the events or data watched for ``fileobj``; returns the new SelectorKey."""
        return self._inner.modify(fileobj, events, data)

    def get_map(self):
        """The mapping of file objects to SelectorKeys, as ``selectors.BaseSelector.get_map``."""
        return self._inner.get_map()

    def close(self):
        """Close the selector underneath."""
        self._inner.close()

    def select(self, timeout=None):
        """Poll the stack, wait for the fds (and the device) up to ``timeout`` seconds, poll again.

        Returns:
            A list of ``(key, events)``, as ``selectors.BaseSelector.select``.
        """
        return self._loop._select_with_stack(self._inner, timeout)


class EventLoop(asyncio.SelectorEventLoop):
    """asyncio's selector loop polling a ustack stack (see the module docstring)."""

    def __init__(self, driver, *more):
        # ``more``: other stacks' drivers this loop polls too (the loopback interface's, ``ustack run --loopback``)
        self._driver = driver
        self._stack = driver.stack
        self._drivers = (driver, *more)
        # kicks from threads that move a stack's deadline (their sends) make its waker readable
        self._wakers = {}
        super().__init__(StackSelector(self))
        inner = self._selector._inner
        self._device_fd = 0
        for d in self._drivers:
            waker = d.wake_fd()
            self._wakers[waker.r] = (d, waker)
            inner.register(waker.r, selectors.EVENT_READ, _STACK)
            dev_fd = d.stack.device.fileno()
            if dev_fd is not None and dev_fd >= 0:
                inner.register(dev_fd, selectors.EVENT_READ, _STACK)
            else:
                self._device_fd = -1  # one device without an fd: look again soon
        self._serving_hooks: dict = {}
        self._resolver = None  # made on first use when the patch has none for this driver
        self._loop_thread = None
        self.stack_rounds = 0  # Stack.poll calls made by this loop (tests, tools)
        self._spin_end = 0.0
        self._error_until: dict = {}  # driver -> when to poll its stack again after a failed round
        self._error_reported: dict = {}  # driver -> when its last failure was reported

    @property
    def driver(self):
        """The :class:`~ustack.api.driver.Driver` of the main stack this loop polls."""
        return self._driver

    def close(self):
        """Close the loop and give its wake-up pipes back to the drivers."""
        super().close()
        wakers, self._wakers = self._wakers, {}
        for driver, waker in wakers.values():
            driver.release_wake_fd(waker)  # the driver's kicks stop writing to it

    # -- driving the stack ----------------------------------------------------------
    @property
    def loop_thread(self):
        """The thread id running this loop (None when it is not running)."""
        return self._loop_thread

    def soon_threadsafe(self, fn) -> None:
        """``call_soon_threadsafe`` unless the loop is closed (a stack event from another thread)."""
        if not self.is_closed():
            self.call_soon_threadsafe(fn)

    def _poll_stack(self):
        """One round of every stack this loop polls; the earliest next deadline."""
        first = None
        for driver in self._drivers:
            stack = driver.stack
            stats = stack.stats
            with driver.lock:
                now = driver.clock()
                resume = self._error_until.get(driver)
                if resume is not None and now < resume:
                    deadline = resume  # backing off after a failed round, as the driver's thread does
                else:
                    driver.run_deferred()  # what socket finalizers left for the next round
                    received = stats[_RX_COUNTER]
                    try:
                        deadline = driver.deadline = stack.poll(now)
                    except Exception as e:  # noqa: BLE001 - a device error must not stop the loop
                        deadline = self._round_failed(driver, e, now)
                    else:
                        self._error_until.pop(driver, None)
                        if stats[_RX_COUNTER] != received:
                            self._spin_end = now + driver.busy_poll  # frames flow: spin a while before sleeping
            if deadline is not None and (first is None or deadline < first):
                first = deadline
        self.stack_rounds += 1
        return first

    def _round_failed(self, driver, exc: Exception, now: float) -> float:
        """What the driver's thread does with an exception from ``Stack.poll`` (a device's ``rx_burst`` or
        ``tx_commit`` failing): count it (``driver.poll_error.<Type>``), keep it (``driver.last_error``),
        back off ``ERROR_BACKOFF`` and go on; and report it to the loop's exception handler, at most
        once a second. Returns when to try again."""
        driver.last_error = exc
        driver.stack.stats.inc(f"driver.poll_error.{type(exc).__name__}")
        self._error_until[driver] = now + ERROR_BACKOFF
        if now >= self._error_reported.get(driver, float("-inf")) + 1.0:
            self._error_reported[driver] = now
            self.call_exception_handler({"message": f"ustack: a round of the stack failed "
                                                    f"({type(exc).__name__}: {exc}); the loop goes on",
                                         "exception": exc})
        return now + ERROR_BACKOFF

    def _select_with_stack(self, inner, timeout):
        driver = self._driver
        deadline = self._poll_stack()  # TX of what the callbacks wrote, timers, RX that waited
        if self._ready or driver.clock() < self._spin_end:
            timeout = 0  # the stack had news for a transport, or frames are flowing (busy-poll budget)
        elif deadline is not None:
            wait = max(0.0, deadline - driver.clock())
            timeout = wait if timeout is None else min(timeout, wait)
        if self._device_fd < 0 and (timeout is None or timeout > _NO_FD_POLL):
            timeout = _NO_FD_POLL  # a device without an fd to wait on: look again soon
        events = inner.select(timeout)
        out = []
        stack_event = False
        for key, mask in events:
            if key.data is _STACK:
                stack_event = True
                woken = self._wakers.get(key.fd)
                if woken is not None:
                    woken[1].drain()
            else:
                out.append((key, mask))
        if stack_event or timeout != 0:
            self._poll_stack()  # RX that woke us, or timers that are due
        return out

    def run_forever(self):
        """Run the loop, as ``asyncio`` does; while it runs the drivers' background threads are
        stopped (the loop polls the stacks itself) and they are restarted afterwards if they ran.
        """
        saved = []
        for driver in self._drivers:
            saved.append((driver, driver._thread is not None, driver.auto_start))
            driver.auto_start = False
            driver.stop()
        self._loop_thread = threading.get_ident()
        try:
            super().run_forever()
        finally:
            self._loop_thread = None
            for driver, thread_ran, auto in saved:
                driver.auto_start = auto
                if thread_ran:
                    driver.start()

    # -- transports ---------------------------------------------------------------------
    def _make_socket_transport(self, sock, protocol, waiter=None, *, extra=None, server=None):
        u = ustack_socket(sock)
        if u is None:
            return super()._make_socket_transport(sock, protocol, waiter, extra=extra, server=server)
        return StreamTransport(self, sock, u, protocol, waiter, extra, server)

    def _make_ssl_transport(self, rawsock, protocol, sslcontext, waiter=None, *, server_side=False,
                            server_hostname=None, extra=None, server=None,
                            ssl_handshake_timeout=constants.SSL_HANDSHAKE_TIMEOUT,
                            ssl_shutdown_timeout=constants.SSL_SHUTDOWN_TIMEOUT):
        u = ustack_socket(rawsock)
        if u is None:
            return super()._make_ssl_transport(
                rawsock, protocol, sslcontext, waiter, server_side=server_side, server_hostname=server_hostname,
                extra=extra, server=server, ssl_handshake_timeout=ssl_handshake_timeout,
                ssl_shutdown_timeout=ssl_shutdown_timeout)
        ssl_protocol = sslproto.SSLProtocol(self, protocol, sslcontext, waiter, server_side, server_hostname,
                                            ssl_handshake_timeout=ssl_handshake_timeout,
                                            ssl_shutdown_timeout=ssl_shutdown_timeout)
        StreamTransport(self, rawsock, u, ssl_protocol, extra=extra, server=server)
        return ssl_protocol._app_transport

    def _make_datagram_transport(self, sock, protocol, address=None, waiter=None, extra=None):
        u = ustack_socket(sock)
        if u is None:
            return super()._make_datagram_transport(sock, protocol, address, waiter, extra)
        return DatagramTransport(self, sock, u, protocol, address, waiter, extra)

    # -- servers ------------------------------------------------------------------------
    def _start_serving(self, protocol_factory, sock, sslcontext=None, server=None, backlog=100,
                       ssl_handshake_timeout=constants.SSL_HANDSHAKE_TIMEOUT,
                       ssl_shutdown_timeout=constants.SSL_SHUTDOWN_TIMEOUT):
        u = ustack_socket(sock)
        if u is None:
            return super()._start_serving(protocol_factory, sock, sslcontext, server, backlog,
                                          ssl_handshake_timeout, ssl_shutdown_timeout)
        entries = []
        twin = getattr(u, "_twin", None)  # a wildcard server on both stacks (ustack.api.wildcard)
        for side in (u, twin) if twin is not None and twin._listener is not None else (u,):
            lst = side._listener
            accept = functools.partial(self._accept_ready, protocol_factory, sock, side, lst, sslcontext, server,
                                       backlog, ssl_handshake_timeout, ssl_shutdown_timeout)
            kick = functools.partial(self.call_soon, accept)  # accepting calls into the stack: not inside its round
            hook(self, lst, "on_event").subs.append(kick)
            entries.append((lst, kick))
            self.call_soon(accept)  # connections that arrived before
        self._serving_hooks[id(sock)] = entries

    def _accept_ready(self, protocol_factory, sock, u, lst, sslcontext, server, backlog,
                      ssl_handshake_timeout, ssl_shutdown_timeout):
        driver = u._driver  # the listener's stack (this loop may poll several)
        for _ in range(backlog):
            with driver.lock:
                conn = lst.accept()
            if conn is None:
                return
            child = StreamSocket(driver, u.family, u.type, u.proto, _conn=conn)
            child.setblocking(False)
            wrap = getattr(type(sock), "_wrap", None)
            csock = wrap(child) if wrap is not None else child
            extra = {"peername": child.getpeername()}
            self.create_task(self._accept_connection2(protocol_factory, csock, extra, sslcontext, server,
                                                      ssl_handshake_timeout, ssl_shutdown_timeout))

    def _stop_serving(self, sock):
        entry = self._serving_hooks.pop(id(sock), None)
        if entry is None:
            return super()._stop_serving(sock)
        for lst, kick in entry:
            unhook(lst, "on_event", kick)
        sock.close()

    # -- sock_* on ustack sockets --------------------------------------------------------
    def _event(self, obj, attr: str = "on_event", *more):
        """A future done at ``obj``'s next event (a segment, a state change, a datagram), or at the next
        event of any of ``more`` (more (obj, attr) pairs)."""
        fut = self.create_future()
        done = functools.partial(_done, fut)
        for o, a in ((obj, attr), *more):
            hook(self, o, a).once.append(done)
        return fut

    async def _until(self, u, readable: bool):
        """Wait until ``u`` is readable (or writable), as select() would report it for a kernel socket
        (a wildcard socket on both stacks: either side, ``ustack.api.wildcard``)."""
        while True:
            twin = getattr(u, "_twin", None)
            if isinstance(u, DatagramSocket):
                if u._readiness()[0 if readable else 1]:
                    return
                await self._event(u._ep, "on_readable", *(((twin._ep, "on_readable"),) if twin else ()))
                continue
            if u._readiness()[0 if readable else 1]:
                return
            obj = u._conn if u._conn is not None else u._listener
            more = ((twin._listener, "on_event"),) if twin is not None and twin._listener is not None else ()
            await self._event(obj, "on_event", *more)

    async def sock_recv(self, sock, n):
        """Receive up to ``n`` bytes from ``sock``, as ``loop.sock_recv``.

        On a ustack socket the call waits for the socket's readiness on this loop; a kernel socket gets
        asyncio's own.
        """
        u = ustack_socket(sock)
        if u is None:
            return await super().sock_recv(sock, n)
        await self._until(u, True)
        return u.recv(n, MSG_DONTWAIT)

    async def sock_recv_into(self, sock, buf):
        """Receive into ``buf``; returns the byte count, as ``loop.sock_recv_into``.

        On a ustack socket the call waits for the socket's readiness on this loop; a kernel socket gets
        asyncio's own.
        """
        u = ustack_socket(sock)
        if u is None:
            return await super().sock_recv_into(sock, buf)
        await self._until(u, True)
        return u.recv_into(buf, 0, MSG_DONTWAIT)

    async def sock_recvfrom(self, sock, bufsize):
        """Receive a datagram: ``(data, address)``, as ``loop.sock_recvfrom``.

        On a ustack socket the call waits for the socket's readiness on this loop; a kernel socket gets
        asyncio's own.
        """
        u = ustack_socket(sock)
        if u is None:
            return await super().sock_recvfrom(sock, bufsize)
        await self._until(u, True)
        return u.recvfrom(bufsize, MSG_DONTWAIT)

    async def sock_recvfrom_into(self, sock, buf, nbytes=0):
        """Receive a datagram into ``buf``: ``(nbytes, address)``.

        On a ustack socket the call waits for the socket's readiness on this loop; a kernel socket gets
        asyncio's own.
        """
        u = ustack_socket(sock)
        if u is None:
            return await super().sock_recvfrom_into(sock, buf, nbytes)
        await self._until(u, True)
        return u.recvfrom_into(buf, nbytes, MSG_DONTWAIT)

    async def sock_sendall(self, sock, data):
        """Send all of ``data``, waiting for room as needed, as ``loop.sock_sendall``.

        On a ustack socket the call waits for the socket's readiness on this loop; a kernel socket gets
        asyncio's own.
        """
        u = ustack_socket(sock)
        if u is None:
            return await super().sock_sendall(sock, data)
        view = memoryview(data).cast("B")
        while True:
            await self._until(u, False)
            try:
                n = u.send(view, MSG_DONTWAIT) if len(view) else 0
            except BlockingIOError:
                n = 0
            view = view[n:]
            if not len(view):
                return None

    async def sock_sendto(self, sock, data, address):
        """Send one datagram to ``address``; returns the byte count (raises as ``socket.sendto``)."""
        u = ustack_socket(sock, address)
        if u is None:
            return await super().sock_sendto(sock, data, address)
        return u.sendto(data, MSG_DONTWAIT, address)

    async def sock_connect(self, sock, address):
        """Connect ``sock`` to ``address``, as ``loop.sock_connect``.

        On a ustack socket the call waits for the socket's readiness on this loop; a kernel socket gets
        asyncio's own.

        Raises:
            OSError: the connection's failure (``ConnectionRefusedError``, ``TimeoutError``...).
        """
        u = ustack_socket(sock, address)
        if u is None:
            return await super().sock_connect(sock, address)
        if isinstance(u, DatagramSocket):
            return u.connect(address)
        err = u.connect_ex(address)
        if err in (0, errno.EISCONN):
            return None
        if err not in (errno.EINPROGRESS, errno.EALREADY, errno.EAGAIN):
            raise OSError(err, f"Connect call failed {address}")
        conn = u._conn
        while not (conn.connected or conn.state == State.CLOSED or conn.error is not None):
            await self._event(conn)
        err = u.connect_ex(address)
        if err in (0, errno.EISCONN):
            return None
        raise OSError(err, f"Connect call failed {address}")

    async def sock_accept(self, sock):
        """Accept a connection: ``(socket, address)``, the new socket non-blocking.

        On a ustack socket the call waits for the socket's readiness on this loop; a kernel socket gets
        asyncio's own.

        Raises:
            OSError: EINVAL when ``sock`` is not listening.
        """
        u = ustack_socket(sock)
        if u is None:
            return await super().sock_accept(sock)
        if u._listener is None:
            raise OSError(errno.EINVAL, "Invalid argument (not listening)")
        await self._until(u, True)
        child, addr = sock.accept()
        child.setblocking(False)
        return child, addr

    # -- names ------------------------------------------------------------------------------
    def resolver(self):
        """The patch's resolver when ``socket.socket`` is patched on this loop's driver, else the loop's own."""
        patched = getattr(_std.socket, "_resolver", None)
        if patched is not None and getattr(_std.socket, "_driver", None) is self._driver:
            return patched
        if self._resolver is None:
            from ustack.api.resolver import Resolver

            self._resolver = Resolver(self._driver)
        return self._resolver

    async def getaddrinfo(self, host, port, *, family=0, type=0, proto=0, flags=0):
        # the resolver blocks on its UDP socket: in the default executor, whose thread polls the stack
        # through the driver's lock as any blocking thread does (module docstring)
        """Resolve with ustack's resolver (:class:`ustack.api.resolver.Resolver`) in the default executor.

        Returns:
            As ``socket.getaddrinfo``.

        Raises:
            socket.gaierror: as :meth:`ustack.api.resolver.Resolver.getaddrinfo`.
        """
        return await self.run_in_executor(None, self.resolver().getaddrinfo, host, port, family, type, proto,
                                          flags)


def _done(fut) -> None:
    if not fut.done():
        fut.set_result(None)


class EventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """New loops are ``EventLoop(driver)``: ``asyncio.run()`` in an unmodified program runs on the stack."""

    def __init__(self, driver, *more):
        super().__init__()
        self._driver = driver
        self._more = more

    def new_event_loop(self):
        """A new :class:`EventLoop` on this policy's drivers."""
        return EventLoop(self._driver, *self._more)
