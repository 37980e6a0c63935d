"""TCP stream sockets with the stdlib's shape, on a Stack's TcpLayer.

``socket(driver)`` (SOCK_STREAM, the default, as in the stdlib) returns a
``StreamSocket``: bind, listen, accept, connect / connect_ex (blocking, with
timeout, or non-blocking with BlockingIOError(EINPROGRESS)), send, sendall,
sendto, sendmsg, sendfile (a copy loop), recv, recv_into, recvfrom,
recvfrom_into, recvmsg, recvmsg_into (no ancillary data), shutdown, close,
dup, detach, makefile, settimeout, setblocking, getsockname, getpeername,
setsockopt/getsockopt (TCP_NODELAY, TCP_CORK, TCP_QUICKACK, SO_RCVBUF,
SO_SNDBUF, SO_KEEPALIVE, SO_REUSEADDR, SO_REUSEPORT, SO_LINGER, SO_RCVTIMEO,
SO_SNDTIMEO, TCP_KEEPIDLE/INTVL/CNT, TCP_MAXSEG, TCP_CONGESTION, SO_ERROR). SO_REUSEPORT has
Linux's meaning: listening sockets that all set it before bind share one
(address, port), each with its own accept queue, new connections spread
over them by a keyed hash of the 4-tuple (ustack.transport.tcp.reuseport);
one stack belongs to one process, so the sharers are threads (or event
loops) of one program. recv flags: MSG_PEEK,
MSG_DONTWAIT, MSG_WAITALL (MSG_OOB is EINVAL, other flags EOPNOTSUPP); send
flags: MSG_DONTWAIT, MSG_NOSIGNAL (MSG_OOB and others EOPNOTSUPP: no urgent
data). Failures raise the stdlib's exceptions: ConnectionRefusedError,
ConnectionResetError, BrokenPipeError, TimeoutError.

Zero copy (U-Net's lending): ``recv_views`` lends received bytes as views
into RX frames, ``send_reserve``/``send_commit`` let the application write
straight into the send buffer (ustack.transport.tcp.recvbuf, sendbuf).

Application-controlled flow control (U-Net's TCP): ``tcp_info()`` reports the
connection's state like Linux's TCP_INFO; ``on_send_low_water`` /
``on_recv_high_water`` register buffer callbacks; ``configure(**knobs)``
changes per-connection knobs (buffers, Nagle, delayed ACK, congestion control).

Every call into the stack holds the driver's lock and ends with the TCP
layer's flush inside one TX batch, so what a call makes ready leaves at once.
"""

from __future__ import annotations

import errno
import io
import os
import socket as _std
import struct
from typing import Callable, Optional

from ustack.api.base import (AF_INET6, MSG_DONTWAIT, MSG_NOSIGNAL, MSG_PEEK, MSG_WAITALL, SOL_SOCKET, SocketBase,
                             bad_flags, byte_view, c_int, sendmsg_data, set_callback, shared,
                             writable_views)
from ustack.net.addr import ANY4, ANY6
from ustack.transport.ports import conflicts
from ustack.transport.tcp.congestion import ALGORITHMS
from ustack.transport.tcp.tcb import State

IPPROTO_TCP = _std.IPPROTO_TCP
TCP_CONGESTION = getattr(_std, "TCP_CONGESTION", 13)  # Linux's option number

_SOCKOPT_KNOBS = {
    (SOL_SOCKET, _std.SO_RCVBUF): "rcvbuf",
    (SOL_SOCKET, _std.SO_SNDBUF): "sndbuf",
    (SOL_SOCKET, _std.SO_KEEPALIVE): "keepalive",
    (IPPROTO_TCP, _std.TCP_NODELAY): "nodelay",
    (IPPROTO_TCP, _std.TCP_CORK): "cork",
    (IPPROTO_TCP, _std.TCP_QUICKACK): "quickack",  # one-shot, as in Linux (Connection.configure)
    (IPPROTO_TCP, _std.TCP_KEEPIDLE): "keepidle",
    (IPPROTO_TCP, _std.TCP_KEEPINTVL): "keepintvl",
    (IPPROTO_TCP, _std.TCP_KEEPCNT): "keepcnt",
    (IPPROTO_TCP, _std.TCP_MAXSEG): "mss",
}

_SENDING = (State.ESTABLISHED, State.CLOSE_WAIT)
_DIRECT_CHUNK = 262144  # bytes asked of send_reserve per read in sendfile_direct (a reservation may be shorter)
_RECV_FLAGS = MSG_PEEK | MSG_DONTWAIT | MSG_WAITALL | MSG_NOSIGNAL
_SEND_FLAGS = MSG_DONTWAIT | MSG_NOSIGNAL


def tcp_readiness(conn, lst) -> tuple[bool, bool]:
    """(readable, writable) of a TCP socket, as Linux's tcp_poll reports them to select().

    Connected: data, EOF or an error is readable; room in the send buffer,
    a finished (or failed) connect or a shut-down sending side is writable.
    Listening: readable with a connection to accept, never writable. Neither
    (fresh, or after a failed connect): both, as Linux's POLLHUP on a
    closed socket reads to select().
    """
    if conn is not None:
        writable = conn.writable
        if writable and not conn.wr_shutdown and conn.state in _SENDING:
            # Linux's sk_stream_is_writeable: room for at least half of what is queued, so an
            # event loop is not woken for every few bytes the peer acknowledges
            sndbuf = conn.sender.sndbuf
            writable = sndbuf.free >= len(sndbuf) >> 1
        return conn.readable, writable
    if lst is not None:
        return lst.readable, False
    return True, True


def _peek(conn, n: int) -> bytes:
    """The first ``n`` readable bytes, left in place (MSG_PEEK)."""
    return conn.receiver.rcvbuf.peek(n)


class StreamSocket(SocketBase):
    """A TCP socket (see the module docstring)."""

    # state every dup() of the socket shares (ustack.api.base.Handle)
    _conn = shared()
    _listener = shared()
    _local = shared()
    _knobs = shared()
    _reuseaddr = shared()
    _reuseport = shared()
    _linger = shared()
    _connect_reported = shared()

    def __init__(self, driver, family: int = _std.AF_INET, type: int = _std.SOCK_STREAM, proto: int = 0,
                 _conn=None):
        super().__init__(driver, family, type, proto)
        self._conn = _conn
        self._listener = None
        self._local: Optional[tuple[bytes, int]] = None
        self._knobs: dict = {}
        self._reuseaddr = False
        self._reuseport = False
        self._oobinline = 0  # SO_OOBINLINE as set; urgent data is always in line here (RFC 6093)
        self._linger: Optional[tuple[int, int]] = None
        self._connect_reported = _conn is not None  # an accepted socket has nothing to report
        if _conn is not None:
            self._local = (_conn.local_addr, _conn.local_port)

    def __repr__(self):
        if self._dead:
            return "<ustack.api.socket TCP closed>"
        if self._listener is not None:
            return f"<ustack.api.socket TCP LISTEN laddr={self.getsockname()}>"
        if self._conn is not None:
            return f"<ustack.api.socket TCP {self._conn.state.name} laddr={self.getsockname()} raddr={self._peer()}>"
        return "<ustack.api.socket TCP unconnected>"

    # -- plumbing ---------------------------------------------------------------
    def _call(self, fn: Callable[[float], object]):
        """Run fn(now) under the lock; flush TCP output in one TX batch; wake sleeping pollers."""
        driver = self._driver
        stack = self.stack
        with driver.lock, stack.tx_batch():
            now = driver.clock()
            try:
                return fn(now)
            finally:
                stack.tcp.flush(now)
                driver.kick()
                rfd = self._h.rfd
                if rfd is not None:
                    rfd.set(*tcp_readiness(self._conn, self._listener))

    # -- readiness (ustack.api.readiness) --------------------------------------------
    def _readiness(self) -> tuple[bool, bool]:
        return tcp_readiness(self._conn, self._listener)

    def _watch(self) -> None:
        """Point the protocol object's on_event at the readiness fd (no reference to this socket)."""
        rfd = self._h.rfd
        if rfd is None:
            return
        conn, lst = self._conn, self._listener
        if conn is not None:
            set_callback(conn, "on_event", lambda c: rfd.set(*tcp_readiness(c, None)))
        elif lst is not None:
            set_callback(lst, "on_event", lambda lst: rfd.set(lst.readable, False))
        rfd.set(*tcp_readiness(conn, lst))

    def _require_conn(self):
        self._check()
        if self._conn is None:
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
        return self._conn

    def _peer(self):
        c = self._conn
        return self._format(c.remote_addr, c.remote_port)

    # -- addresses ----------------------------------------------------------------
    def bind(self, address) -> None:
        """Bind to a local ``(host, port)`` (AF_INET6: ``(host, port[, flowinfo, scope_id])``).

        Port 0 picks an ephemeral port. SO_REUSEADDR lets a port held by connections (TIME-WAIT) be
        bound again; SO_REUSEPORT joins the listeners on exactly that address in a group.

        Raises:
            OSError: EINVAL (already bound), EADDRNOTAVAIL (not one of the stack's addresses),
                EADDRINUSE (the port is taken), EBADF once closed; ``socket.gaierror`` for a name.
        """
        self._check()
        if self._local is not None:
            raise OSError(errno.EINVAL, "Invalid argument (already bound)")
        addr, port = self._parse(address)
        if not self._local_ok(addr):
            raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
        tcp = self.stack.tcp
        with self._driver.lock:
            if port == 0:
                port = tcp.pick_port(addr, ANY4, 0)
            elif (conflicts(addr, port, tcp.listeners) and not self._joins_group(tcp, addr, port)) or (
                    not self._reuseaddr and conflicts(addr, port, tcp.connections)):
                raise OSError(errno.EADDRINUSE, "Address already in use")
        self._local = (addr, port)

    def _joins_group(self, tcp, addr: bytes, port: int) -> bool:
        """SO_REUSEPORT: every listener overlapping (addr, port) is the reuseport group on exactly it."""
        if not self._reuseport:
            return False
        overlapping = [k for k in tcp.listeners if conflicts(addr, port, [k])]
        return overlapping == [(addr, port)] and hasattr(tcp.listeners[(addr, port)], "members")

    def getsockname(self) -> tuple[str, int]:
        """Return the local address (the wildcard and port 0 before bind or connect).

        Raises:
            OSError: EBADF once closed.
        """
        self._check()
        if self._conn is not None:
            return self._format(self._conn.local_addr, self._conn.local_port)
        if self._local is None:
            return self._format(ANY6 if self._family == AF_INET6 else ANY4, 0)
        return self._format(*self._local)

    def getpeername(self) -> tuple[str, int]:
        """Return the peer's address.

        Raises:
            OSError: ENOTCONN before the connection is established or once it is CLOSED (a reset too),
                as Linux; EBADF once closed.
        """
        conn = self._require_conn()
        if conn.state in (State.SYN_SENT, State.CLOSED):  # as Linux: a reset connection has no peer either
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
        return self._peer()

    # -- passive open -------------------------------------------------------------------
    def listen(self, backlog: int = 128) -> None:
        """Start listening (binding the wildcard and an ephemeral port first when unbound).

        Args:
            backlog: the accept queue's bound (at least 1); calling again on a listener changes it.

        Raises:
            OSError: EINVAL on a connected socket, EBADF once closed.
            OverflowError: a backlog that is not a C int, as the stdlib.
        """
        self._check()
        backlog = c_int(backlog, "listen")
        if self._conn is not None:
            raise OSError(errno.EINVAL, "Invalid argument (connected)")
        if self._listener is not None:
            self._listener.backlog = max(1, backlog)
            return
        if self._local is None:
            self.bind(("::" if self._family == AF_INET6 else "0.0.0.0", 0))
        addr, port = self._local
        with self._driver.lock:
            self._listener = self.stack.tcp.listen((addr, port), max(1, backlog), reuseport=self._reuseport,
                                                   **self._knobs)
            self._listener.v6only = self._v6only
            self._watch()

    def accept(self):
        """Take the next established connection from the accept queue.

        Returns:
            ``(socket, address)``: a new :class:`StreamSocket`, blocking (or with the default timeout),
            and the peer's address.

        Raises:
            OSError: EINVAL when not listening; ``BlockingIOError`` on a non-blocking socket with no
                connection ready; ``TimeoutError`` after the timeout (or SO_RCVTIMEO); EBADF once the
                listener is closed.
        """
        self._check()
        lst = self._listener
        if lst is None:
            raise OSError(errno.EINVAL, "Invalid argument (not listening)")
        while True:
            self._wait(lambda: lst.readable, 0, "rcvtimeo")  # Linux bounds accept() by SO_RCVTIMEO too
            with self._driver.lock:
                conn = lst.accept()
                self._refresh()
            if conn is not None:
                break
            if lst.closed:
                raise OSError(errno.EBADF, "Bad file descriptor (listener closed)")
            # another thread accepting on this listener took the connection first: wait for the next
            # (a non-blocking socket gets EAGAIN from _wait, as on Linux)
        child = StreamSocket(self._driver, self.family, self.type, self.proto, _conn=conn)
        child._timeout = _std.getdefaulttimeout()  # like the stdlib: accepted sockets start blocking
        return child, child._peer()

    # -- active open ----------------------------------------------------------------------
    def _start_connect(self, address) -> None:
        self._check()
        if self._listener is not None:
            raise OSError(errno.EINVAL, "Invalid argument (listening)")
        if self._conn is not None:
            if self._conn.connected:
                raise OSError(errno.EISCONN, "Transport endpoint is already connected")
            raise OSError(errno.EALREADY, "Operation already in progress")
        addr, port = self._parse(address)
        if port == 0:
            raise OSError(errno.ECONNREFUSED, "Connection refused")
        local = None
        if self._local is not None:
            local = self._local
        remote = (addr, port)
        self._connect_reported = False
        def start(now):
            conn = self._conn = self.stack.tcp.connect(local, remote, now, **self._knobs)
            self._watch()
            return conn

        self._call(start)

    def _connect_result(self) -> int:
        conn = self._conn
        if conn.connected:
            return 0
        err = conn.take_error()
        if err is not None:
            return err.errno or errno.ECONNREFUSED
        if conn.state == State.CLOSED:
            return errno.ECONNREFUSED
        return errno.EINPROGRESS

    def connect(self, address) -> None:
        """Open a connection to ``address`` (a ``(host, port)``; names resolve through the stack).

        Blocks until established (or the timeout); on a non-blocking socket it starts the handshake
        and raises ``BlockingIOError(EINPROGRESS)``, a second call EALREADY, and the call after the
        handshake returns once, as Linux.

        Raises:
            OSError: ``ConnectionRefusedError`` (a RST answered the SYN), ``TimeoutError`` (the SYN
                retries ran out, or the socket's timeout passed), ENETUNREACH/EHOSTUNREACH (no route,
                an ICMP error), EISCONN (already connected), ENOBUFS (``max_connections`` reached),
                ``BlockingIOError`` as above; ``socket.gaierror`` for a name that does not resolve.
        """
        if self._conn is not None and not self._connect_reported:
            pending = True  # a non-blocking connect in progress: report its outcome (0 once, like Linux)
        else:
            pending = False
            self._start_connect(address)
        conn = self._conn
        ready = lambda: conn.connected or conn.state == State.CLOSED or conn.error is not None  # noqa: E731
        if self._timeout == 0.0:
            with self._driver.lock:
                result = self._connect_result()
            if result == 0 and not pending:
                # the SYN-ACK raced in (the driver thread, a fast peer): Linux never finishes a handshake
                # inside a non-blocking connect(), it says EINPROGRESS and reports completion as writable
                result = errno.EINPROGRESS
            if result == errno.EINPROGRESS:
                if pending:
                    raise BlockingIOError(errno.EALREADY, "Operation already in progress")
                raise BlockingIOError(errno.EINPROGRESS, "Operation now in progress")
        else:
            try:
                self._wait(ready, 0, "sndtimeo")
            except BlockingIOError:
                # SO_SNDTIMEO expired on a blocking socket: Linux says EINPROGRESS and goes on connecting
                raise BlockingIOError(errno.EINPROGRESS, "Operation now in progress") from None
            except TimeoutError:
                self._call(lambda now: conn.abort(now))
                self._conn = None
                self._refresh()
                raise TimeoutError("timed out") from None
            with self._driver.lock:
                result = self._connect_result()
        self._connect_reported = True
        if result:
            self._conn = None
            self._refresh()
            if result == errno.ECONNREFUSED:
                raise ConnectionRefusedError(result, "Connection refused")
            if result == errno.ETIMEDOUT:
                raise TimeoutError(result, "Connection timed out")
            raise OSError(result, errno.errorcode.get(result, "error"))

    def connect_ex(self, address) -> int:
        """As :meth:`connect`, but return the errno instead of raising (0 when connected,
        EINPROGRESS for a non-blocking start).

        Raises:
            socket.gaierror: a name that does not resolve (as the stdlib's ``connect_ex``).
        """
        try:
            self.connect(address)
            return 0
        except _std.gaierror:
            raise  # a name that does not resolve is raised, as the stdlib's connect_ex (only connect's errno returns)
        except BlockingIOError as e:
            return e.errno
        except TimeoutError as e:
            return e.errno or errno.ETIMEDOUT
        except OSError as e:
            return e.errno or errno.EINVAL

    # -- data ---------------------------------------------------------------------------------
    def send(self, data, flags: int = 0) -> int:
        """Queue bytes for sending; blocks until some fit in the send buffer (per the timeout).

        Args:
            data: a bytes-like object.
            flags: MSG_DONTWAIT, MSG_NOSIGNAL (others: EOPNOTSUPP).

        Returns:
            The number of bytes taken (possibly fewer than ``len(data)``; 0 for empty data).

        Raises:
            OSError: ENOTCONN; ``BlockingIOError`` (EAGAIN) when the send buffer is full on a
                non-blocking socket; ``TimeoutError``; ``BrokenPipeError`` after shutdown(SHUT_WR) or
                the connection's end; ``ConnectionResetError`` after a RST; EBADF once closed.
        """
        conn = self._require_conn()
        bad_flags(flags, _SEND_FLAGS)
        view = byte_view(data)
        if not len(view):
            return 0
        self._wait(lambda: conn.writable, flags, "sndtimeo")
        n = self._call(lambda now: conn.send(view, now))
        if n == 0 and (flags & MSG_DONTWAIT or self._timeout == 0.0):
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        return n

    def sendall(self, data, flags: int = 0) -> None:
        """Send everything; a timeout bounds the whole call (the stdlib's rule since 3.5)."""
        conn = self._require_conn()
        bad_flags(flags, _SEND_FLAGS)
        view = byte_view(data)
        driver = self._driver
        timeout = 0.0 if flags & MSG_DONTWAIT else self._timeout
        end = None if timeout in (None, 0.0) else driver.clock() + timeout
        while len(view):
            if not conn.writable:
                if timeout == 0.0:
                    raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
                if end is None:
                    self._wait(lambda: conn.writable, 0, "sndtimeo")
                else:
                    remaining = end - driver.clock()
                    if remaining <= 0 or not driver.wait_until(lambda: conn.writable, remaining):
                        raise TimeoutError("timed out")
            n = self._call(lambda now: conn.send(view, now))
            view = view[n:]

    def sendto(self, data, flags_or_address, address=None) -> int:
        """On TCP the address is ignored, as Linux does for a connected stream socket."""
        if address is None:
            flags, address = 0, flags_or_address
        else:
            flags = flags_or_address
        self._parse(address)
        return self.send(data, flags)

    def sendmsg(self, buffers, ancdata=(), flags: int = 0, address=None) -> int:
        """Gathered send; ustack carries no ancillary data (a non-empty ``ancdata`` is EOPNOTSUPP)."""
        data = sendmsg_data(buffers, ancdata, flags)
        if address is not None:
            self._parse(address)
        return self.send(data, flags)

    def sendfile(self, file, offset: int = 0, count: Optional[int] = None) -> int:
        """Send a file: a regular file's bytes are read straight into the send buffer (``sendfile_direct``,
        one copy); anything else is copied through ``sendall``, as the stdlib falls back to send()."""
        self._sendfile_args(file, count)
        try:
            return self.sendfile_direct(file, offset, count)
        except _std._GiveupOnSendfile:
            pass
        if offset:
            file.seek(offset)
        total = 0
        try:
            while count is None or total < count:
                want = 65536 if count is None else min(65536, count - total)
                chunk = file.read(want)
                if not chunk:
                    break
                self.sendall(chunk)
                total += len(chunk)
            return total
        finally:
            if total > 0 and hasattr(file, "seek"):
                file.seek(offset + total)

    def _sendfile_args(self, file, count) -> None:
        self._check()
        if "b" not in getattr(file, "mode", "b"):
            raise ValueError("file should be opened in binary mode")
        if count is not None:
            if not isinstance(count, int):
                raise TypeError(f"count must be a positive integer (got {count!r})")
            if count <= 0:
                raise ValueError(f"count must be a positive integer (got {count!r})")
        if self._timeout == 0.0:
            raise ValueError("non-blocking sockets are not supported")

    def sendfile_direct(self, file, offset: int = 0, count: Optional[int] = None) -> int:
        """The stdlib's ``_sendfile_use_sendfile`` for ustack: ``os.preadv`` reads the file at ``offset``
        into a reservation of the send buffer (``send_reserve``/``send_commit``), so the bytes are copied
        once, file to ring (os.sendfile needs a kernel socket). Raises ``socket._GiveupOnSendfile`` for
        what is not a regular file with an fd; each wait for room is bounded by the timeout; the file's
        position ends after the last byte sent; returns the bytes sent (0 for an empty file)."""
        self._sendfile_args(file, count)
        try:
            fileno = file.fileno()
        except (AttributeError, io.UnsupportedOperation) as err:
            raise _std._GiveupOnSendfile(err)  # not a regular file
        try:
            fsize = os.fstat(fileno).st_size
        except OSError as err:
            raise _std._GiveupOnSendfile(err)
        if not fsize:
            return 0
        total = 0
        try:
            while count is None or total < count:
                want = _DIRECT_CHUNK if count is None else min(_DIRECT_CHUNK, count - total)
                view = self.send_reserve(want)
                try:
                    n = os.preadv(fileno, [view], offset)
                except OSError as err:
                    self.send_commit(0)
                    if total == 0:
                        raise _std._GiveupOnSendfile(err)
                    raise
                self.send_commit(n)
                if n == 0:  # end of file
                    break
                offset += n
                total += n
            return total
        finally:
            if total > 0 and hasattr(file, "seek"):
                file.seek(offset)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        """Receive up to ``bufsize`` bytes (``b""`` at the end of the stream).

        Args:
            bufsize: the most bytes to return.
            flags: MSG_PEEK, MSG_DONTWAIT, MSG_WAITALL, MSG_NOSIGNAL (others, MSG_OOB too: an OSError).

        Returns:
            New ``bytes`` (one copy: frame to bytes).

        Raises:
            ValueError: a negative ``bufsize``.
            OSError: ENOTCONN when not connected; ``BlockingIOError`` (EAGAIN) when nothing is readable on a
                non-blocking socket or with MSG_DONTWAIT; ``TimeoutError`` after the timeout (or SO_RCVTIMEO);
                ``ConnectionResetError`` after a RST (once the data queued before it is read); EBADF once closed.
        """
        conn = self._require_conn()
        if bufsize < 0:
            raise ValueError("negative buffersize in recv")
        if flags:
            buf = bytearray(bufsize)
            n = self._recv_flags(conn, memoryview(buf), flags)
            return bytes(buf[:n])
        self._wait_readable(conn, 0)
        return self._call(lambda now: conn.recv(bufsize, now))

    def recv_into(self, buffer, nbytes: int = 0, flags: int = 0) -> int:
        """Receive into ``buffer`` (its first ``nbytes``, or all of it): one copy, frame to buffer.

        Returns:
            The number of bytes received (0 at the end of the stream).

        Raises:
            ValueError: a negative ``nbytes``, or one larger than the buffer.
            OSError: ENOTCONN when not connected; ``BlockingIOError`` (EAGAIN) when nothing is readable on a
                non-blocking socket or with MSG_DONTWAIT; ``TimeoutError`` after the timeout (or SO_RCVTIMEO);
                ``ConnectionResetError`` after a RST (once the data queued before it is read); EBADF once closed.
        """
        conn = self._require_conn()
        view = memoryview(buffer).cast("B")
        if nbytes < 0:
            raise ValueError("negative buffersize in recv_into")
        if nbytes:
            if nbytes > len(view):
                raise ValueError("buffer too small for requested bytes")
            view = view[:nbytes]
        if flags:
            return self._recv_flags(conn, view, flags)
        self._wait_readable(conn, 0)
        return self._call(lambda now: conn.recv_into(view, now))

    # -- zero copy (U-Net's lending): see the README's "Copies per API" ------------------------
    def recv_views(self, nbytes: int, flags: int = 0):
        """Up to ``nbytes`` received bytes lent without a copy: a ``LentViews`` (``.views``, ``.nbytes``;
        iterate it, then ``release()`` it or use it as a context manager). Waits like ``recv``; empty at
        EOF. Until released, the bytes count against the receive window. flags: MSG_DONTWAIT."""
        conn = self._require_conn()
        if nbytes < 0:
            raise ValueError("negative buffersize in recv_views")
        bad_flags(flags, MSG_DONTWAIT, errno.EINVAL)
        self._wait_readable(conn, flags)
        lent = self._call(lambda now: conn.recv_views(nbytes, now))
        if lent.nbytes:
            lent._give_back = lambda lv: self._call(lambda now: conn.return_views(lv, now))
        return lent

    def send_reserve(self, nbytes: int, flags: int = 0) -> memoryview:
        """A writable view of up to ``nbytes`` inside the send buffer (contiguous, so it may be shorter);
        write into it, then ``send_commit(n)`` queues the first ``n`` bytes without a copy. Waits for
        room like ``send`` (EAGAIN when non-blocking). One reservation at a time; ``send`` raises
        BufferError while one is outstanding. flags: MSG_DONTWAIT."""
        conn = self._require_conn()
        if nbytes < 0:
            raise ValueError("negative size in send_reserve")
        bad_flags(flags, _SEND_FLAGS)
        if not nbytes:
            return memoryview(bytearray())
        self._wait(lambda: conn.writable, flags, "sndtimeo")
        view = self._call(lambda now: conn.send_reserve(nbytes))
        if not len(view) and (flags & MSG_DONTWAIT or self._timeout == 0.0):
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        return view

    def send_commit(self, nbytes: int) -> int:
        """Queue the first ``nbytes`` written into the reservation (0 gives it back); it is released."""
        conn = self._require_conn()
        return self._call(lambda now: conn.send_commit(nbytes, now))

    def _wait_readable(self, conn, flags: int) -> None:
        """Wait for ``conn`` to be readable; while blocked, the connection knows a reader waits
        (``Connection.reader_waiting``: a PSH-ed segment is then ACKed at once, as Linux does)."""
        if self._timeout == 0.0 or flags & MSG_DONTWAIT or conn.readable:
            self._wait(lambda: conn.readable, flags, "rcvtimeo")
            return
        conn.reader_waiting = True
        try:
            self._wait(lambda: conn.readable, flags, "rcvtimeo")
        finally:
            conn.reader_waiting = False

    def _recv_flags(self, conn, view, flags: int) -> int:
        """recv with MSG_PEEK (leave the bytes), MSG_DONTWAIT (this call only), MSG_WAITALL (fill or EOF)."""
        bad_flags(flags, _RECV_FLAGS, errno.EINVAL)  # Linux: MSG_OOB without urgent data is EINVAL
        if flags & MSG_PEEK and flags & MSG_WAITALL:
            # Linux waits for the whole length when peeking with MSG_WAITALL (sock_rcvlowat)
            rcvbuf, want = conn.receiver.rcvbuf, len(view)
            more = (State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2)  # states in which data may still come
            self._wait(lambda: len(rcvbuf) >= want or conn.rd_shutdown or conn.state not in more,
                       flags, "rcvtimeo")
        else:
            self._wait_readable(conn, flags)
        if flags & MSG_PEEK:
            def peek(now):
                if not len(conn.receiver.rcvbuf):
                    return conn.recv_into(view, now)  # EOF (0) or the pending error, raised once
                data = _peek(conn, len(view))
                view[:len(data)] = data
                return len(data)
            return self._call(peek)
        got = self._call(lambda now: conn.recv_into(view, now))
        if not flags & MSG_WAITALL:
            return got
        # MSG_WAITALL: keep going until the buffer is full, EOF, an error or the timeout (partial data then).
        while got < len(view):
            rest = view[got:]
            try:
                self._wait(lambda: conn.readable, flags & ~MSG_WAITALL, "rcvtimeo")
                n = self._call(lambda now: conn.recv_into(rest, now))
            except OSError:
                if got:
                    return got
                raise
            if n == 0:
                break
            got += n
        return got

    def recvfrom(self, bufsize: int, flags: int = 0):
        """(data, None): a stream socket reports no source address, as Linux does."""
        return self.recv(bufsize, flags), None

    def recvfrom_into(self, buffer, nbytes: int = 0, flags: int = 0):
        """As :meth:`recv_into`; returns ``(nbytes, None)`` (a connected stream has no source address)."""
        return self.recv_into(buffer, nbytes, flags), None

    def recvmsg(self, bufsize: int, ancbufsize: int = 0, flags: int = 0):
        """(data, [], 0, None): no ancillary data ever (ustack has none to give)."""
        if ancbufsize < 0:
            raise ValueError("negative buffer size in recvmsg()")
        return self.recv(bufsize, flags), [], 0, None

    def recvmsg_into(self, buffers, ancbufsize: int = 0, flags: int = 0):
        """Scatter into ``buffers`` in order; (nbytes, [], 0, None)."""
        if ancbufsize < 0:
            raise ValueError("negative buffer size in recvmsg_into()")
        views = writable_views(buffers)
        total = sum(len(v) for v in views)
        buf = bytearray(total)
        n = self.recv_into(buf, total, flags) if total else 0
        pos = 0
        for v in views:
            k = min(len(v), n - pos)
            if k <= 0:
                break
            v[:k] = buf[pos:pos + k]
            pos += k
        return n, [], 0, None

    def shutdown(self, how: int) -> None:
        """Shut the connection down for reading (SHUT_RD), writing (SHUT_WR: FIN after the queued
        bytes) or both (SHUT_RDWR).

        Raises:
            OSError: ENOTCONN when not connected, EINVAL for another ``how``, EBADF once closed.
            OverflowError: ``how`` is not a C int.
        """
        how = c_int(how, "shutdown")
        conn = self._require_conn()
        self._call(lambda now: conn.shutdown(how, now))

    def _release(self) -> None:
        """The last duplicate is closed: stop listening, or close (FIN) or abort (SO_LINGER 0) the connection."""
        conn, lst = self._conn, self._listener
        if lst is not None:
            self._call(lambda now: lst.close(now))
        if conn is None:
            return
        if self._linger is not None and self._linger[0] and self._linger[1] == 0:
            self._call(lambda now: conn.abort(now))  # SO_LINGER 0: RST, discard (RFC 9293 3.10.5 ABORT)
            return
        self._call(lambda now: conn.close(now))
        if self._linger is not None and self._linger[0]:
            # SO_LINGER > 0: block until the FIN is acknowledged or the linger time passes.
            self._driver.wait_until(lambda: conn.state in (State.CLOSED, State.TIME_WAIT, State.FIN_WAIT_2),
                                    float(self._linger[1]))

    def _orphan(self):
        """``_release`` for a finalizer: no time, so the segments leave at the next round's flush, and no
        SO_LINGER wait (nobody is left to wait); SO_LINGER 0 still aborts with a RST."""
        conn, lst = self._conn, self._listener
        rst = self._linger is not None and self._linger[0] and self._linger[1] == 0

        def release():
            if lst is not None:
                lst.close()
            if conn is not None:
                conn.abort() if rst else conn.close()

        return release

    # -- options ----------------------------------------------------------------------------------
    def setsockopt(self, level: int, optname: int, value, optlen: Optional[int] = None) -> None:
        """Set a socket option, as ``socket.socket.setsockopt``.

        SOL_SOCKET: SO_REUSEADDR, SO_REUSEPORT, SO_LINGER (``struct.pack("ii", onoff, seconds)``),
        SO_OOBINLINE, SO_RCVTIMEO/SO_SNDTIMEO (``struct timeval``), SO_RCVBUF, SO_SNDBUF, SO_KEEPALIVE;
        IPPROTO_TCP: TCP_NODELAY, TCP_CORK, TCP_QUICKACK, TCP_KEEPIDLE/INTVL/CNT, TCP_MAXSEG,
        TCP_CONGESTION (a name as bytes); IPPROTO_IPV6: IPV6_V6ONLY before bind. The TCP ones map onto
        the connection's knobs (:meth:`configure`).

        Raises:
            OSError: ENOPROTOOPT for an option ustack does not have, ENOENT for an unknown congestion
                control, EINVAL for a bad value or IPV6_V6ONLY after bind, EBADF once closed.
            TypeError: a value of the wrong type (SO_LINGER not packed).
        """
        self._check()
        if level == SOL_SOCKET and self._timeo_opt(optname, value):
            return
        if level == SOL_SOCKET and optname == _std.SO_REUSEADDR:
            self._reuseaddr = bool(value)
            return
        if self._v6only_opt(level, optname, value, set_it=True) is not None:
            if self._local is not None or self._conn is not None:
                raise OSError(errno.EINVAL, "Invalid argument (IPV6_V6ONLY after bind)")
            return
        if level == SOL_SOCKET and optname == _std.SO_REUSEPORT:
            # set before bind and listen on every socket that shares the port, as on Linux
            # (ustack.transport.tcp.reuseport: each listener its own queue, connections spread by 4-tuple)
            self._reuseport = bool(int.from_bytes(value, "little") if isinstance(value, (bytes, bytearray))
                                   else value)
            return
        if level == SOL_SOCKET and optname == _std.SO_OOBINLINE:
            # the connection ignores URG and delivers urgent data in line (RFC 6093 6), as SO_OOBINLINE=1 does
            self._oobinline = int(bool(int.from_bytes(value, "little") if isinstance(value, (bytes, bytearray))
                                       else value))
            return
        if level == SOL_SOCKET and optname == _std.SO_LINGER:
            if isinstance(value, (bytes, bytearray)):
                self._linger = struct.unpack("ii", bytes(value[:8]))
            else:
                raise TypeError("SO_LINGER takes struct.pack('ii', onoff, seconds)")
            return
        if level == IPPROTO_TCP and optname == TCP_CONGESTION:
            # the algorithm by name, as Linux takes it ("bbr", "cubic", "reno"; NUL-padded bytes or str)
            name = (bytes(value).split(b"\0", 1)[0].decode("ascii", "replace") if isinstance(value, (bytes, bytearray))
                    else str(value))
            if name.lower() not in ALGORITHMS:
                raise OSError(errno.ENOENT, "No such file or directory (unknown congestion control)")
            self.configure(congestion=name.lower())
            return
        knob = _SOCKOPT_KNOBS.get((level, optname))
        if knob is None:
            raise OSError(errno.ENOPROTOOPT, "Protocol not available")
        v = int.from_bytes(value, "little") if isinstance(value, (bytes, bytearray)) else int(value)
        if knob in ("rcvbuf", "sndbuf"):
            v = max(4096, v * 2)  # Linux doubles the request for bookkeeping; so do we
        elif knob in ("nodelay", "keepalive", "cork", "quickack"):
            v = bool(v)
        elif knob in ("keepidle", "keepintvl"):
            v = float(v)
        self._knobs[knob] = v
        if self._conn is not None:
            self._call(lambda now: self._conn.configure(now, **{knob: v}))

    def getsockopt(self, level: int, optname: int, buflen: int = 0):
        """Return a socket option's value (an int, or bytes for SO_LINGER, TCP_CONGESTION and the
        timeouts with ``buflen``); also SO_ERROR (the pending error's errno, cleared) and SO_TYPE.

        Raises:
            OSError: ENOPROTOOPT for an option ustack does not have, EBADF once closed.
        """
        self._check()
        if level == SOL_SOCKET and optname in (_std.SO_RCVTIMEO, _std.SO_SNDTIMEO):
            return self._timeo_get(optname)
        if level == SOL_SOCKET and optname == _std.SO_ERROR:
            with self._driver.lock:
                err = self._conn.take_error() if self._conn is not None else None
                self._refresh()
            return err.errno if err is not None and err.errno else 0
        if level == SOL_SOCKET and optname == _std.SO_TYPE:
            return self.type
        v6only = self._v6only_opt(level, optname)
        if v6only is not None:
            return v6only
        if level == SOL_SOCKET and optname == _std.SO_REUSEADDR:
            return int(self._reuseaddr)
        if level == SOL_SOCKET and optname == _std.SO_REUSEPORT:
            return int(self._reuseport)
        if level == SOL_SOCKET and optname == _std.SO_LINGER:
            return struct.pack("ii", *(self._linger or (0, 0)))
        if level == SOL_SOCKET and optname == _std.SO_OOBINLINE:
            return self._oobinline
        if level == IPPROTO_TCP and optname == TCP_CONGESTION:
            cfg = self._conn.config if self._conn is not None else self.stack.tcp.config.derive(**self._knobs)
            name = cfg.congestion.encode()
            return name.ljust(buflen, b"\0")[:buflen] if buflen else name  # Linux: the name, NUL-padded to buflen
        knob = _SOCKOPT_KNOBS.get((level, optname))
        if knob is None:
            raise OSError(errno.ENOPROTOOPT, "Protocol not available")
        if knob == "quickack":
            # Linux answers whether the connection is out of ping-pong mode (ACKs not being delayed for a reply).
            return int(self._conn is None or not self._conn.interactive)
        cfg = self._conn.config if self._conn is not None else self.stack.tcp.config.derive(**self._knobs)
        value = getattr(cfg, knob)
        if knob == "mss" and not value and self._conn is not None:
            value = self._conn.tcb.snd_mss
        elif knob == "rcvbuf" and self._conn is not None:
            value = self._conn.receiver.rcvbuf.capacity  # as Linux: the size auto-tuning has reached
        return int(value)

    # -- application-controlled flow control ---------------------------------------------------------
    def tcp_info(self):
        """A TCP_INFO-like snapshot (state, sequence variables, cwnd, ssthresh, srtt, rto, queues...)."""
        conn = self._require_conn()
        with self._driver.lock:
            return conn.info()

    def configure(self, **knobs) -> None:
        """Per-connection knobs by TcpConfig name: sndbuf, rcvbuf, nodelay, delayed_ack, congestion, ..."""
        self._check()
        self._knobs.update(knobs)
        if self._conn is not None:
            self._call(lambda now: self._conn.configure(now, **knobs))

    def on_send_low_water(self, callback: Optional[Callable[["StreamSocket"], None]],
                          low_water: Optional[int] = None) -> None:
        """Call ``callback(sock)`` (from the poll loop) when the send queue drains to ``low_water`` bytes."""
        conn = self._require_conn()
        with self._driver.lock:
            if low_water is not None:
                conn.configure(send_low_water=low_water)
            conn.on_send_low_water = None if callback is None else (lambda c: callback(self))

    def on_recv_high_water(self, callback: Optional[Callable[["StreamSocket"], None]],
                           high_water: Optional[int] = None) -> None:
        """Call ``callback(sock)`` (from the poll loop) when readable bytes reach ``high_water``."""
        conn = self._require_conn()
        with self._driver.lock:
            if high_water is not None:
                conn.configure(recv_high_water=high_water)
            conn.on_recv_high_water = None if callback is None else (lambda c: callback(self))

    @property
    def connection(self):
        """The protocol object underneath (ustack.transport.tcp.connection.Connection), for tools and tests."""
        return self._conn
