"""asyncio transports that sit directly on ustack protocol objects: a TCP ``Connection``, a ``UdpEndpoint``.

No fd per socket and no thread: the protocol object's callbacks
(``Connection.on_event`` for every segment and state change,
``on_send_low_water`` when the send buffer drains to its low-water mark,
``UdpEndpoint.on_readable``) schedule the transport's ``_process`` on the
event loop (``ustack.api.aio.loop``), once per stack round at most.

TCP flow control, as a kernel socket gives it to asyncio's selector
transports, with ustack's buffers in the kernel's place:

- ``write()`` puts bytes straight into the connection's send buffer; what
  does not fit waits in the transport's buffer (``get_write_buffer_size``).
  Above the high-water mark the protocol is paused (``pause_writing``); the
  send buffer's low-water callback refills it and, once the transport's
  buffer is at or below the low-water mark, resumes it (``resume_writing``).
- ``pause_reading()`` stops taking bytes out of the receive buffer, so the
  window the connection advertises shrinks to zero as unread data fills it
  (RFC 9293 3.8.6: the receiver's window is its free buffer);
  ``resume_reading()`` delivers what waited and the window reopens.
- a RST from the peer ends the transport with ``ConnectionResetError`` in
  ``connection_lost``; ``abort()`` sends a RST (RFC 9293 3.10.5 ABORT);
  ``close()`` sends what is buffered, then a FIN.

Writes and reads leave their segments (data, window updates) to the
TCP layer's flush, which the loop runs right after each round of callbacks
(``Stack.poll``): one TX commit for everything a round produced.
"""

from __future__ import annotations

import errno
import logging
import socket as _std
import threading

from asyncio import constants, futures, protocols, transports, trsock

from ustack.api.base import MSG_DONTWAIT
from ustack.transport.tcp.tcb import State

logger = logging.getLogger("asyncio")
_LOG_AFTER = constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES


class Hook:
    """Stands in a protocol object's callback slot: calls what was there, then the loop's subscribers.

    ``subs`` stay subscribed; ``once`` are called at the next event only
    (the ``sock_*`` waits). Subscribers must be cheap and must not call
    into the stack (they set a flag, schedule a callback, complete a
    future): in the loop's own thread they run right away, inside the
    stack's round, so what they schedule runs in this loop iteration;
    from another thread that polled the stack they go through
    ``call_soon_threadsafe``.
    """

    __slots__ = ("loop", "prev", "subs", "once")

    def __init__(self, loop, prev):
        self.loop = loop
        self.prev = prev
        self.subs: list = []
        self.once: list = []

    def __call__(self, *args):
        prev = self.prev
        if prev is not None:
            prev(*args)
        loop = self.loop
        if threading.get_ident() == loop.loop_thread:
            for fn in self.subs:
                fn()
            once = self.once
            if once:
                self.once = []
                for fn in once:
                    fn()
            return
        once, self.once = self.once, []
        for fn in self.subs + once:
            loop.soon_threadsafe(fn)


def hook(loop, obj, attr: str) -> Hook:
    """The Hook in ``obj.attr`` (installed on first use, keeping a callback already there)."""
    h = getattr(obj, attr)
    if isinstance(h, Hook) and h.loop is loop:
        return h
    h = Hook(loop, h)
    setattr(obj, attr, h)
    return h


def unhook(obj, attr: str, fn) -> None:
    """Remove ``fn`` from the Hook in ``obj.attr``; when no callback is left, put back what was there.

    Args:
        obj: the connection or endpoint.
        attr: the callback attribute's name.
        fn: the callback :func:`hook` subscribed.
    """
    h = getattr(obj, attr)
    if isinstance(h, Hook):
        if fn in h.subs:
            h.subs.remove(fn)
        if not h.subs and not h.once:
            setattr(obj, attr, h.prev)


class StreamTransport(transports._FlowControlMixin, transports.Transport):
    """An asyncio Transport on a ustack TCP connection (see the module docstring)."""

    max_size = 256 * 1024  # bytes handed to data_received() at most per call
    _start_tls_compatible = True
    _sendfile_compatible = constants._SendfileMode.FALLBACK

    def __init__(self, loop, sock, usock, protocol, waiter=None, extra=None, server=None):
        super().__init__(extra, loop)
        self._loop = loop
        self._sock = sock
        self._usock = usock
        self._driver = usock._driver
        self._conn = conn = usock._conn
        self._extra["socket"] = trsock.TransportSocket(sock)
        # as the socket reports them (AF_INET6: 4-tuples, a link-local address with its scope id), as asyncio's
        self._extra.setdefault("sockname", usock._format(conn.local_addr, conn.local_port))
        self._extra.setdefault("peername", usock._format(conn.remote_addr, conn.remote_port))
        self._server = server
        self._buffer = bytearray()
        self._conn_lost = 0
        self._closing = False
        self._closed = False  # SSLProtocol marks its app transport; kept for the same checks
        self._paused = False  # reading paused
        self._eof = False  # write_eof() called
        self._eof_received = False
        self._scheduled = False
        self._protocol = None
        self._protocol_connected = False
        self.set_protocol(protocol)
        if server is not None:
            server._attach()
        self._hooks = ((conn, "on_event"), (conn, "on_send_low_water"))
        for obj, attr in self._hooks:
            hook(loop, obj, attr).subs.append(self._kick)
        conn.reader_waiting = True
        loop.call_soon(self._protocol.connection_made, self)
        loop.call_soon(self._kick)  # data or a FIN may have come before the transport
        if waiter is not None:
            loop.call_soon(futures._set_result_unless_cancelled, waiter, None)

    def __repr__(self):
        state = "closed" if self._conn_lost else "closing" if self._closing else "open"
        return f"<ustack StreamTransport {state} {self._conn!r} buffer={len(self._buffer)}>"

    # -- the protocol -------------------------------------------------------------
    def set_protocol(self, protocol):
        """Replace the protocol, as ``asyncio.Transport.set_protocol``."""
        self._protocol_buffered = isinstance(protocol, protocols.BufferedProtocol)
        self._protocol = protocol
        self._protocol_connected = True

    def get_protocol(self):
        """Return the current protocol."""
        return self._protocol

    def is_closing(self):
        """``True`` once the transport is closing or closed."""
        return self._closing

    # -- events from the stack ----------------------------------------------------------
    def _kick(self):
        if not self._scheduled and not self._conn_lost:
            self._scheduled = True
            self._loop.call_soon(self._process)

    def _process(self):
        self._scheduled = False
        if self._conn_lost:
            return
        conn = self._conn
        if self._buffer:
            sndbuf = conn.sender.sndbuf
            if sndbuf.free >= sndbuf.capacity >> 1 or conn.error is not None or conn.state == State.CLOSED:
                self._push()
                if self._conn_lost:
                    return
        if not self._paused and not self._closing:
            self._read()
            if self._conn_lost or self._paused:
                return
        err = conn.error
        if err is not None:
            with self._driver.lock:
                conn.take_error()
            self._fatal_error(err, "Fatal read error on ustack stream transport")
            return
        if not self._paused and not self._closing and conn.eof and not self._eof_received:
            self._eof_received = True
            self._on_eof()
        elif conn.state == State.CLOSED and not len(conn.receiver.rcvbuf):
            # the connection ended without a RST we were told of (a timeout counts as an error above)
            self._force_close(None)

    def _read(self):
        conn, lock = self._conn, self._driver.lock
        rcvbuf = conn.receiver.rcvbuf
        while len(rcvbuf) and not self._paused and not self._closing:
            try:
                if self._protocol_buffered:
                    buf = self._protocol.get_buffer(-1)
                    if not len(buf):
                        raise RuntimeError("get_buffer() returned an empty buffer")
                    with lock:
                        n = conn.recv_into(buf)
                    if n:
                        self._protocol.buffer_updated(n)
                else:
                    with lock:
                        data = conn.recv(self.max_size)
                    if data:
                        self._protocol.data_received(data)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")
                return

    def _on_eof(self):
        try:
            keep_open = self._protocol.eof_received()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.eof_received() call failed.")
            return
        if not keep_open:
            self.close()

    # -- reading ------------------------------------------------------------------------
    def is_reading(self):
        """``True`` unless reading is paused or the transport is closing."""
        return not self._paused and not self._closing

    def pause_reading(self):
        """Stop delivering data to the protocol (the receive window then closes as the buffer fills)."""
        if self._closing or self._paused:
            return
        self._paused = True
        self._conn.reader_waiting = False

    def resume_reading(self):
        """Deliver data again, starting with what waited."""
        if self._closing or not self._paused:
            return
        self._paused = False
        self._conn.reader_waiting = True
        self._kick()

    # -- writing ------------------------------------------------------------------------
    def get_write_buffer_size(self):
        """The bytes waiting in the transport, not yet in the connection's send buffer."""
        return len(self._buffer)

    def write(self, data):
        """Queue ``data`` for sending (never blocks; ``pause_writing`` is called above the high-water mark).

        Raises:
            TypeError: data that is not bytes-like.
            RuntimeError: after :meth:`write_eof`.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data argument must be a bytes-like object, not {type(data).__name__!r}")
        if self._eof:
            raise RuntimeError("Cannot call write() after write_eof()")
        if not data:
            return
        if self._conn_lost:
            if self._conn_lost >= _LOG_AFTER:
                logger.warning("socket.send() raised exception.")
            self._conn_lost += 1
            return
        if not self._buffer:
            try:
                with self._driver.lock:
                    n = self._conn.send(data)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal write error on ustack stream transport")
                return
            if n == len(data):
                return
            data = memoryview(data).cast("B")[n:]
        self._buffer += data
        self._maybe_pause_protocol()

    def writelines(self, list_of_data):
        """Write the concatenation of ``list_of_data``, as :meth:`write`."""
        self.write(b"".join(list_of_data))

    def _push(self):
        """Move buffered bytes into the send buffer; finish a pending write_eof() or close() once empty."""
        try:
            with self._driver.lock:
                n = self._conn.send(self._buffer)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._buffer.clear()
            self._fatal_error(exc, "Fatal write error on ustack stream transport")
            return
        del self._buffer[:n]
        self._maybe_resume_protocol()
        if not self._buffer:
            if self._closing:
                self._conn_lost += 1
                self._loop.call_soon(self._call_connection_lost, None)
            elif self._eof:
                self._shutdown_write()

    def can_write_eof(self):
        """``True``: a TCP transport can half-close."""
        return True

    def write_eof(self):
        """Send a FIN once the buffered data has gone (shutdown SHUT_WR); reading goes on."""
        if self._closing or self._eof:
            return
        self._eof = True
        if not self._buffer:
            self._shutdown_write()

    def _shutdown_write(self):
        with self._driver.lock:
            if self._conn.state not in (State.CLOSED,):
                self._conn.shutdown(_std.SHUT_WR)

    # -- the end ----------------------------------------------------------------------------
    def close(self):
        """Close after the buffered data is sent (FIN; RST only for unread data or SO_LINGER 0);
        ``connection_lost(None)`` follows.
        """
        if self._closing:
            return
        self._closing = True
        self._conn.reader_waiting = False
        if not self._buffer:
            self._conn_lost += 1
            self._loop.call_soon(self._call_connection_lost, None)

    def abort(self):
        """Close at once, dropping buffered data, as asyncio's selector transport does."""
        self._force_close(None)

    def _fatal_error(self, exc, message="Fatal error on transport"):
        if isinstance(exc, OSError):
            if self._loop.get_debug():
                logger.debug("%r: %s", self, message, exc_info=True)
        else:
            self._loop.call_exception_handler({"message": message, "exception": exc, "transport": self,
                                               "protocol": self._protocol})
        self._force_close(exc)

    def _force_close(self, exc):
        if self._conn_lost:
            return
        self._buffer.clear()
        self._closing = True
        self._conn_lost += 1
        # asyncio's selector transport closes its socket here: what the send buffer already holds still goes,
        # then FIN; a RST only for unread received data (RFC 2525 2.17) or SO_LINGER 0, as a kernel close()
        # (the peer of an aborted handshake sees EOF, as asyncio's test_ssl expects). The close itself is
        # the socket's, in _call_connection_lost.
        self._loop.call_soon(self._call_connection_lost, exc)

    def _call_connection_lost(self, exc):
        try:
            if self._protocol_connected:
                self._protocol.connection_lost(exc)
        finally:
            for obj, attr in self._hooks:
                unhook(obj, attr, self._kick)
            self._usock.close()  # FIN after the send buffer (or nothing: already aborted)
            self._sock = self._usock = None
            self._protocol = None
            self._loop = None
            server = self._server
            if server is not None:
                server._detach()
                self._server = None

    def __del__(self, _warn=__import__("warnings").warn):
        if not self._conn_lost and getattr(self, "_usock", None) is not None:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            try:
                self._usock._close_from_finalizer()  # no I/O here: the FIN leaves at the next round
            except Exception:  # noqa: BLE001 - nothing may escape a finalizer (the stack may be gone)
                pass


class DatagramTransport(transports._FlowControlMixin, transports.DatagramTransport):
    """An asyncio DatagramTransport on a ustack UDP endpoint: datagrams in order, errors to error_received()."""

    def __init__(self, loop, sock, usock, protocol, address=None, waiter=None, extra=None):
        super().__init__(extra, loop)
        self._loop = loop
        self._sock = sock
        self._usock = usock
        self._driver = usock._driver
        self._ep = ep = usock._ep
        self._address = address
        self._extra["socket"] = trsock.TransportSocket(sock)
        self._extra.setdefault("sockname", usock._format(ep.local_addr, ep.local_port))
        if address is not None:
            self._extra.setdefault("peername", address)
        self._protocol = protocol
        self._closing = False
        self._conn_lost = 0
        self._scheduled = False
        # (endpoint, its stack's lock): one, or two for a wildcard socket on both stacks (ustack.api.wildcard)
        twin = getattr(usock, "_twin", None)
        self._sides = ((ep, self._driver.lock),) + (((twin._ep, twin._driver.lock),) if twin is not None else ())
        for side_ep, _ in self._sides:
            hook(loop, side_ep, "on_readable").subs.append(self._kick)
        loop.call_soon(protocol.connection_made, self)
        loop.call_soon(self._kick)
        if waiter is not None:
            loop.call_soon(futures._set_result_unless_cancelled, waiter, None)

    def __repr__(self):
        return f"<ustack DatagramTransport {'closed' if self._conn_lost else 'open'} {self._extra['sockname']}>"

    def get_protocol(self):
        """Return the current protocol."""
        return self._protocol

    def set_protocol(self, protocol):
        """Replace the protocol."""
        self._protocol = protocol

    def is_closing(self):
        """``True`` once the transport is closing or closed."""
        return self._closing

    def get_write_buffer_size(self):
        """Always 0: a datagram leaves at once or fails (no queue to fill)."""
        return 0  # a datagram leaves at once or is dropped with an error (no queue to fill)

    def _kick(self):
        if not self._scheduled and not self._conn_lost:
            self._scheduled = True
            self._loop.call_soon(self._process)

    def _process(self):
        self._scheduled = False
        for ep, lock in self._sides:
            while not self._conn_lost:
                with lock:
                    if ep.queue:
                        item, err = ep.pop(), None
                    else:
                        item, err = None, ep.take_error()
                if item is not None:
                    payload, src, sport = item
                    self._protocol.datagram_received(payload, self._usock._format(src, sport))
                elif err is not None:
                    self._protocol.error_received(err)
                else:
                    break

    def sendto(self, data, addr=None):
        """Send one datagram to ``addr`` (the connected address when ``None``).

        Raises:
            TypeError: data that is not bytes-like.
            ValueError: an address other than the connected one.
            OSError: EDESTADDRREQ when there is no address; a send error goes to the protocol's ``error_received``.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data argument must be a bytes-like object, not {type(data).__name__!r}")
        if self._address is not None:
            if addr not in (None, self._address):
                raise ValueError(f"Invalid address: must be None or {self._address}")
            addr = self._address
        if addr is None:
            raise OSError(errno.EDESTADDRREQ, "Destination address required")
        if self._conn_lost:
            if self._conn_lost >= _LOG_AFTER:
                logger.warning("socket.send() raised exception.")
            self._conn_lost += 1
            return
        try:
            self._usock.sendto(data, MSG_DONTWAIT, addr)
        except OSError as exc:
            self._protocol.error_received(exc)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal write error on ustack datagram transport")

    def close(self):
        """Close the endpoint; ``connection_lost(None)`` follows."""
        if self._closing:
            return
        self._closing = True
        self._conn_lost += 1
        self._loop.call_soon(self._call_connection_lost, None)

    def abort(self):
        """Close at once (as :meth:`close`: nothing is buffered)."""
        self.close()

    def _fatal_error(self, exc, message="Fatal error on transport"):
        self._loop.call_exception_handler({"message": message, "exception": exc, "transport": self,
                                           "protocol": self._protocol})
        self._force_close(exc)

    def _force_close(self, exc):
        if self._conn_lost:
            return
        self._closing = True
        self._conn_lost += 1
        self._loop.call_soon(self._call_connection_lost, exc)

    def _call_connection_lost(self, exc):
        try:
            self._protocol.connection_lost(exc)
        finally:
            for ep, _ in self._sides:
                unhook(ep, "on_readable", self._kick)
            self._usock.close()
            self._sock = self._usock = None
            self._protocol = None
            self._loop = None
