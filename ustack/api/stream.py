"""TCP stream sockets with the stdlib's shape, on a Stack's TcpLayer.

``socket(driver)`` (SOCK_STREAM, the default, as in the stdlib) returns a
``StreamSocket``: bind, listen, accept, connect / connect_ex (blocking, with
timeout, or non-blocking with BlockingIOError(EINPROGRESS)), send, sendall,
recv, recv_into, shutdown, close, settimeout, setblocking, getsockname,
getpeername, setsockopt/getsockopt (TCP_NODELAY, TCP_CORK, TCP_QUICKACK, SO_RCVBUF, SO_SNDBUF,
SO_KEEPALIVE, SO_REUSEADDR, SO_LINGER, TCP_KEEPIDLE/INTVL/CNT, TCP_MAXSEG,
SO_ERROR). Failures raise the stdlib's exceptions: ConnectionRefusedError,
ConnectionResetError, BrokenPipeError, TimeoutError.

Application-controlled flow control (U-Net's TCP): ``tcp_info()`` reports the
connection's state like Linux's TCP_INFO; ``on_send_low_water`` /
``on_recv_high_water`` register buffer callbacks; ``configure(**knobs)``
changes per-connection knobs (buffers, Nagle, delayed ACK, congestion control).

Every call into the stack holds the driver's lock and ends with the TCP
layer's flush inside one TX batch, so what a call makes ready leaves at once.
"""

from __future__ import annotations

import errno
import socket as _std
import struct
from typing import Callable, Optional

from ustack.api.base import SOL_SOCKET, SocketBase, parse_address
from ustack.net.addr import ANY4, to_str
from ustack.transport.ports import conflicts
from ustack.transport.tcp.tcb import State

IPPROTO_TCP = _std.IPPROTO_TCP

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


class StreamSocket(SocketBase):
    """A TCP socket (see the module docstring)."""

    def __init__(self, driver, family: int = _std.AF_INET, type: int = _std.SOCK_STREAM, proto: int = 0,
                 _conn=None):
        super().__init__(driver, family, type, proto)
        self._conn = _conn
        self._listener = None
        self._local: Optional[tuple[bytes, int]] = None
        self._knobs: dict = {}
        self._reuseaddr = False
        self._linger: Optional[tuple[int, int]] = None
        self._connect_reported = _conn is not None  # an accepted socket has nothing to report
        if _conn is not None:
            self._local = (_conn.local_addr, _conn.local_port)

    def __repr__(self):
        if self._closed:
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

    def _require_conn(self):
        self._check()
        if self._conn is None:
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
        return self._conn

    def _peer(self):
        c = self._conn
        return (to_str(c.remote_addr), c.remote_port)

    # -- addresses ----------------------------------------------------------------
    def bind(self, address) -> None:
        self._check()
        if self._local is not None:
            raise OSError(errno.EINVAL, "Invalid argument (already bound)")
        addr, port = parse_address(address)
        if not self.stack.iface.is_ours(addr):
            raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
        tcp = self.stack.tcp
        with self._driver.lock:
            if port == 0:
                port = tcp.pick_port(addr, ANY4, 0)
            elif conflicts(addr, port, tcp.listeners) or (
                    not self._reuseaddr and conflicts(addr, port, tcp.connections)):
                raise OSError(errno.EADDRINUSE, "Address already in use")
        self._local = (addr, port)

    def getsockname(self) -> tuple[str, int]:
        self._check()
        if self._conn is not None:
            return to_str(self._conn.local_addr), self._conn.local_port
        if self._local is None:
            return "0.0.0.0", 0
        return to_str(self._local[0]), self._local[1]

    def getpeername(self) -> tuple[str, int]:
        conn = self._require_conn()
        if conn.state in (State.SYN_SENT, State.CLOSED) and not conn.connected:
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
        return self._peer()

    # -- passive open -------------------------------------------------------------------
    def listen(self, backlog: int = 128) -> None:
        self._check()
        if self._conn is not None:
            raise OSError(errno.EINVAL, "Invalid argument (connected)")
        if self._listener is not None:
            self._listener.backlog = max(1, backlog)
            return
        if self._local is None:
            self.bind(("0.0.0.0", 0))
        addr, port = self._local
        with self._driver.lock:
            self._listener = self.stack.tcp.listen((addr, port), max(1, backlog), **self._knobs)

    def accept(self):
        self._check()
        lst = self._listener
        if lst is None:
            raise OSError(errno.EINVAL, "Invalid argument (not listening)")
        self._wait(lambda: lst.readable)
        with self._driver.lock:
            conn = lst.accept()
        if conn is None:
            raise OSError(errno.EBADF, "Bad file descriptor (listener closed)")
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
        addr, port = parse_address(address)
        if port == 0:
            raise OSError(errno.ECONNREFUSED, "Connection refused")
        local = None
        if self._local is not None:
            local = self._local
        remote = (addr, port)
        self._connect_reported = False
        self._conn = self._call(lambda now: self.stack.tcp.connect(local, remote, now, **self._knobs))

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
            if result == errno.EINPROGRESS:
                if pending:
                    raise BlockingIOError(errno.EALREADY, "Operation already in progress")
                raise BlockingIOError(errno.EINPROGRESS, "Operation now in progress")
        else:
            try:
                self._wait(ready)
            except TimeoutError:
                self._call(lambda now: conn.abort(now))
                self._conn = None
                raise TimeoutError("timed out") from None
            with self._driver.lock:
                result = self._connect_result()
        self._connect_reported = True
        if result:
            self._conn = None
            if result == errno.ECONNREFUSED:
                raise ConnectionRefusedError(result, "Connection refused")
            if result == errno.ETIMEDOUT:
                raise TimeoutError(result, "Connection timed out")
            raise OSError(result, errno.errorcode.get(result, "error"))

    def connect_ex(self, address) -> int:
        try:
            self.connect(address)
            return 0
        except BlockingIOError as e:
            return e.errno
        except TimeoutError as e:
            return e.errno or errno.ETIMEDOUT
        except OSError as e:
            return e.errno or errno.EINVAL

    # -- data ---------------------------------------------------------------------------------
    def send(self, data, flags: int = 0) -> int:
        conn = self._require_conn()
        view = memoryview(data).cast("B")
        if not len(view):
            return 0
        self._wait(lambda: conn.writable)
        n = self._call(lambda now: conn.send(view, now))
        if n == 0:
            if self._timeout == 0.0:
                raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        return n

    def sendall(self, data, flags: int = 0) -> None:
        conn = self._require_conn()
        view = memoryview(data).cast("B")
        driver = self._driver
        end = None if self._timeout in (None, 0.0) else driver.clock() + self._timeout
        while len(view):
            if not conn.writable:
                remaining = None if end is None else end - driver.clock()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError("timed out")
                if self._timeout == 0.0:
                    raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
                if not driver.wait_until(lambda: conn.writable, remaining):
                    raise TimeoutError("timed out")
            n = self._call(lambda now: conn.send(view, now))
            view = view[n:]

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        conn = self._require_conn()
        if bufsize < 0:
            raise ValueError("negative buffersize in recv")
        self._wait_readable(conn)
        return self._call(lambda now: conn.recv(bufsize, now))

    def recv_into(self, buffer, nbytes: int = 0, flags: int = 0) -> int:
        conn = self._require_conn()
        view = memoryview(buffer).cast("B")
        if nbytes < 0:
            raise ValueError("negative buffersize in recv_into")
        if nbytes:
            if nbytes > len(view):
                raise ValueError("buffer too small for requested bytes")
            view = view[:nbytes]
        self._wait_readable(conn)
        return self._call(lambda now: conn.recv_into(view, now))

    def _wait_readable(self, conn) -> None:
        """Wait for ``conn`` to be readable; while blocked, the connection knows a reader waits
        (``Connection.reader_waiting``: a PSH-ed segment is then ACKed at once, as Linux does)."""
        if self._timeout == 0.0 or conn.readable:
            self._wait(lambda: conn.readable)
            return
        conn.reader_waiting = True
        try:
            self._wait(lambda: conn.readable)
        finally:
            conn.reader_waiting = False

    def shutdown(self, how: int) -> None:
        conn = self._require_conn()
        self._call(lambda now: conn.shutdown(how, now))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
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

    def detach(self):
        raise OSError(errno.EOPNOTSUPP, "ustack sockets have no file descriptor to detach")

    # -- options ----------------------------------------------------------------------------------
    def setsockopt(self, level: int, optname: int, value, optlen: Optional[int] = None) -> None:
        self._check()
        if level == SOL_SOCKET and optname == _std.SO_REUSEADDR:
            self._reuseaddr = bool(value)
            return
        if level == SOL_SOCKET and optname == _std.SO_LINGER:
            if isinstance(value, (bytes, bytearray)):
                self._linger = struct.unpack("ii", bytes(value[:8]))
            else:
                raise TypeError("SO_LINGER takes struct.pack('ii', onoff, seconds)")
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
        self._check()
        if level == SOL_SOCKET and optname == _std.SO_ERROR:
            err = self._conn.take_error() if self._conn is not None else None
            return err.errno if err is not None and err.errno else 0
        if level == SOL_SOCKET and optname == _std.SO_TYPE:
            return self.type
        if level == SOL_SOCKET and optname == _std.SO_REUSEADDR:
            return int(self._reuseaddr)
        if level == SOL_SOCKET and optname == _std.SO_LINGER:
            return struct.pack("ii", *(self._linger or (0, 0)))
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
