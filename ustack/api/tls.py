"""TLS on ustack sockets: ``ssl.SSLObject`` on memory BIOs, its records carried by the socket's send/recv.

``ssl.SSLSocket`` takes a kernel fd over (``detach()``) and lets OpenSSL
do the I/O; a ustack socket has no such fd. ``TlsSocket`` keeps the ustack
socket and moves TLS records between it and an ``SSLObject`` (the
``MemoryBIO`` pattern asyncio uses). While ``ustack.patch()`` is in force,
``SSLContext.wrap_socket`` builds one for a ustack-backed socket and an
``ssl.SSLSocket`` for any other (``TlsDispatch``), so ``http.client``,
``urllib`` and ``http.server`` code wrapping sockets needs no change.

Blocking and timeout sockets behave as ``SSLSocket`` does; on a
non-blocking socket a call that needs more records raises
``ssl.SSLWantReadError``, and a write while the records of an earlier
one still wait for room raises ``ssl.SSLWantWriteError`` (nothing taken).
A ``TlsSocket`` is an ``ssl.SSLSocket`` subclass whose kernel part is
never opened. Not supported: ``sendfile`` zero-copy (a copy loop is used),
``MSG_*`` flags on TLS calls (ValueError, as ``SSLSocket``).
"""

from __future__ import annotations

import _socket
import errno
import socket as _std
import ssl
import warnings

_RECORD = 16 * 1024 + 512  # one TLS record and some
_HEADER = 5  # a TLS record header: type, legacy version, length (RFC 8446 5.1)


def _to_sock(name):
    def call(self, *args, **kw):
        sock = self._sock
        if sock is None:
            raise OSError(9, "Bad file descriptor")
        return getattr(sock, name)(*args, **kw)

    call.__name__ = name
    call.__doc__ = (f"As ``socket.socket.{name}``, on the ustack socket underneath: takes, returns and raises as "
                    f"its {name} (EBADF once closed).")
    return call


class TlsSocket(ssl.SSLSocket):
    """A TLS connection over a (connected or connecting) ustack socket, with SSLSocket's calls.

    A subclass of ``ssl.SSLSocket`` (so ``isinstance`` checks hold) whose
    kernel-socket part is never opened (fd -1): every socket-level call
    goes to the ustack socket underneath, every TLS call to the SSLObject.
    """

    def __new__(cls, *args, **kw):
        return _socket.socket.__new__(cls)  # the C socket object, unopened; SSLSocket.__init__ is not run

    def __init__(self, sock, context, server_side=False, do_handshake_on_connect=True,
                 suppress_ragged_eofs=True, server_hostname=None, session=None, connected=None):
        self._sock = sock
        self._context = context
        self.server_side = server_side
        self.do_handshake_on_connect = do_handshake_on_connect
        self.suppress_ragged_eofs = suppress_ragged_eofs
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._header = b""  # the part of the next record's header read so far
        self._record_left = 0  # bytes of the current record's body not read yet
        self._server_hostname, self._session = server_hostname, session
        # SSLContext.wrap_bio checks the arguments (at once, as SSLSocket's wrap does)
        bio = context.wrap_bio(self._incoming, self._outgoing, server_side, server_hostname, session)
        self._server_hostname = bio.server_hostname  # (IDNA-encoded, as SSLSocket keeps it)
        self._sslobj = None  # made at connect, as SSLSocket: None while unconnected, closed or unwrapped
        self._over = False  # closed or unwrapped: no TLS object any more
        self._io_refs = 0
        self._closed = False
        self._unsent = bytearray()  # records a non-blocking send could not take yet
        if connected is None:
            connected = True
            try:
                sock.getpeername()
            except OSError:
                connected = False
                self._refuse_pre_handshake_data()
        if connected:
            self._adopt_sslobj(bio)
        if connected and do_handshake_on_connect:
            try:
                self.do_handshake()
            except (OSError, ValueError):
                # as SSLSocket, which owns the fd it detached: a failed handshake closes the connection
                self.close()
                raise

    def _refuse_pre_handshake_data(self) -> None:
        """Wrapping a socket whose connection already ended (a reset leaves no peer): bytes it still holds
        came before any TLS and must not reach the caller as if protected; SSLSocket's rule and error."""
        sock = self._sock
        blocking = sock.getblocking()
        sock.setblocking(False)
        try:
            data = sock.recv(1)
        except OSError as e:
            if e.errno not in (errno.ENOTCONN, errno.EINVAL, errno.EAGAIN):
                raise
            data = b""
        finally:
            sock.setblocking(blocking)
        if data:
            reason = "Closed before TLS handshake with data in recv buffer."
            err = ssl.SSLError(errno.ENOTCONN, reason)
            err.reason, err.library = reason, None  # (the attributes _ssl sets)
            try:
                self.close()
            except OSError:
                pass
            raise err

    def _adopt_sslobj(self, bio=None) -> None:
        """The TLS object SSLSocket keeps as _sslobj (code such as CPython's ssl tests reads its chains),
        owned by this socket as there; made when the socket is connected."""
        if bio is None:
            bio = self._context.wrap_bio(self._incoming, self._outgoing, self.server_side, self._server_hostname,
                                         self._session)
        self._sslobj = bio._sslobj
        self._sslobj.owner = self

    def _connected(self) -> bool:
        try:
            self._plain().getpeername()
        except OSError:
            return False
        return True

    # -- record pump -------------------------------------------------------------
    def _flush(self) -> None:
        """Send the records OpenSSL produced; on a non-blocking socket what does not fit waits in _unsent."""
        data = self._outgoing.read()
        if data:
            self._unsent += data
        if not self._unsent:
            return
        if self._sock.gettimeout() != 0:
            self._sock.sendall(self._unsent)
            self._unsent.clear()
            return
        sent = 0
        try:
            while sent < len(self._unsent):
                sent += self._sock.send(memoryview(self._unsent)[sent:])
        except BlockingIOError:
            pass
        del self._unsent[:sent]

    def _fill(self) -> None:
        """Move received bytes into the incoming BIO, never past the end of the current TLS record (RFC 8446
        5.1: a 5-byte header whose last two bytes are the length): what follows the record that ends TLS
        (close_notify, then the clear text of a STARTTLS/ENDTLS protocol) stays in the socket for
        ``unwrap()``'s caller, as OpenSSL reading from a kernel fd leaves it."""
        left = self._record_left
        want = left if left else _HEADER - len(self._header)
        try:
            data = self._sock.recv(min(want, _RECORD))
        except BlockingIOError:
            # (errno, text) as _ssl raises it: callers read err.args[1]
            raise ssl.SSLWantReadError(ssl.SSL_ERROR_WANT_READ, "The operation did not complete (read)") from None
        if not data:
            self._incoming.write_eof()
            return
        self._incoming.write(data)
        if left:
            self._record_left = left - len(data)
            return
        self._header += data
        if len(self._header) == _HEADER:  # (OpenSSL sees the header before the body is read: a bad one fails now)
            self._record_left = int.from_bytes(self._header[3:5], "big")
            self._header = b""

    def _run(self, fn, *args):
        while True:
            try:
                result = fn(*args)
            except ssl.SSLWantReadError:
                self._flush()
                self._fill()
                continue
            except ssl.SSLError:
                # a failed handshake or read leaves its alert in the outgoing BIO: send it before raising,
                # as OpenSSL writing to a kernel fd has by then (RFC 8446 6: the peer learns why)
                try:
                    self._flush()
                except OSError:
                    pass
                raise
            self._flush()
            return result

    # -- the SSLSocket calls -----------------------------------------------------------
    def do_handshake(self, block=False) -> None:
        """Run the TLS handshake to its end, as ``ssl.SSLSocket.do_handshake``.

        Args:
            block: accepted for the stdlib's signature; the socket's own timeout decides.

        Raises:
            ValueError: on a closed or unwrapped socket.
            ssl.SSLError: a TLS failure (the alert OpenSSL produced is sent first); ``ssl.SSLWantReadError``
                on a non-blocking socket that needs more records.
            OSError: as the ustack socket underneath (ENOTCONN, ``TimeoutError``, ``ConnectionResetError``).
        """
        if self._sslobj is None:
            if self._over:
                raise ValueError("handshake on a closed or unwrapped SSL socket")
            self._plain().getpeername()  # unconnected: ENOTCONN, as SSLSocket
            self._adopt_sslobj()  # (a non-blocking connect completed since)
        self._run(self._sslobj.do_handshake)

    def connect(self, address) -> None:
        """Connect the ustack socket, then (with ``do_handshake_on_connect``) run the handshake.

        Raises:
            ValueError: a server-side socket, or one already connected.
            ssl.SSLError: a TLS failure (the alert OpenSSL produced is sent first); ``ssl.SSLWantReadError``
                on a non-blocking socket that needs more records.
            OSError: as the ustack socket underneath (ENOTCONN, ``TimeoutError``, ``ConnectionResetError``).
        """
        if self.server_side:
            raise ValueError("can't connect in server-side mode")
        if self._sslobj is not None:
            raise ValueError("attempt to connect already-connected SSLSocket!")
        self._plain().connect(address)
        self._adopt_sslobj()
        if self.do_handshake_on_connect:
            self.do_handshake()

    def connect_ex(self, address) -> int:
        """As :meth:`connect`, returning the errno (0 on success) instead of raising ``OSError``.

        Raises:
            socket.gaierror: a name that does not resolve.
        """
        try:
            self.connect(address)
            return 0
        except _std.gaierror:
            raise  # a name that does not resolve is raised, as the stdlib's connect_ex (only connect's errno returns)
        except OSError as e:
            return e.errno or 0

    def accept(self):
        """Accept a connection and wrap it server-side with this socket's context and settings.

        Returns:
            ``(TlsSocket, address)``.

        Raises:
            OSError: as :meth:`ustack.api.stream.StreamSocket.accept`; ``ssl.SSLError`` from the
                handshake when ``do_handshake_on_connect`` is set.
        """
        conn, address = self._sock.accept()
        return self.context.wrap_socket(conn, server_side=True, do_handshake_on_connect=self.do_handshake_on_connect,
                                        suppress_ragged_eofs=self.suppress_ragged_eofs), address

    def read(self, n=1024, buffer=None):
        """Read up to ``n`` bytes of clear text (into ``buffer`` when given), as ``SSLSocket.read``.

        Returns:
            ``bytes``, or the count written into ``buffer``; empty/0 at a ragged EOF when
            ``suppress_ragged_eofs``.

        Raises:
            ValueError: on a closed or unwrapped socket.
            ssl.SSLError: a TLS failure (the alert OpenSSL produced is sent first); ``ssl.SSLWantReadError``
                on a non-blocking socket that needs more records.
            OSError: as the ustack socket underneath (ENOTCONN, ``TimeoutError``, ``ConnectionResetError``).
        """
        if self._sslobj is None:
            raise ValueError("Read on closed or unwrapped SSL socket.")
        try:
            if buffer is not None:
                return self._run(self._sslobj.read, n, buffer)
            return self._run(self._sslobj.read, n)
        except ssl.SSLEOFError:
            if self.suppress_ragged_eofs:
                return 0 if buffer is not None else b""
            raise

    def write(self, data) -> int:
        """Encrypt and send ``data``, as ``SSLSocket.write``.

        Returns:
            The number of clear-text bytes taken.

        Raises:
            ValueError: on a closed or unwrapped socket.
            ssl.SSLWantWriteError: records of an earlier write still wait for room (nothing taken).
            ssl.SSLError: a TLS failure (the alert OpenSSL produced is sent first); ``ssl.SSLWantReadError``
                on a non-blocking socket that needs more records.
            OSError: as the ustack socket underneath (ENOTCONN, ``TimeoutError``, ``ConnectionResetError``).
        """
        if self._sslobj is None:
            raise ValueError("Write on closed or unwrapped SSL socket.")
        if self._unsent:
            self._flush()
            if self._unsent:  # records of an earlier write still wait for room: nothing taken this time
                raise ssl.SSLWantWriteError(ssl.SSL_ERROR_WANT_WRITE, "The operation did not complete (write)")
        return self._run(self._sslobj.write, data)

    def recv(self, buflen=1024, flags=0) -> bytes:
        """Receive up to ``buflen`` bytes of clear text (after ``unwrap()``: from the plain socket).

        Raises:
            ValueError: non-zero ``flags`` (as ``SSLSocket``).
            ssl.SSLError: a TLS failure (the alert OpenSSL produced is sent first); ``ssl.SSLWantReadError``
                on a non-blocking socket that needs more records.
            OSError: as the ustack socket underneath (ENOTCONN, ``TimeoutError``, ``ConnectionResetError``).
        """
        if flags:
            raise ValueError(f"non-zero flags not allowed in calls to recv() on {self.__class__}")
        if self._sslobj is None:  # unwrapped: clear text on the socket underneath, as SSLSocket
            return self._plain().recv(buflen)
        return self.read(buflen)

    def recv_into(self, buffer, nbytes=None, flags=0) -> int:
        """Receive clear text into ``buffer``; returns the byte count.

        Raises:
            ValueError: non-zero ``flags``.
            ssl.SSLError: a TLS failure (the alert OpenSSL produced is sent first); ``ssl.SSLWantReadError``
                on a non-blocking socket that needs more records.
            OSError: as the ustack socket underneath (ENOTCONN, ``TimeoutError``, ``ConnectionResetError``).
        """
        if flags:
            raise ValueError(f"non-zero flags not allowed in calls to recv_into() on {self.__class__}")
        if self._sslobj is None:
            return self._plain().recv_into(buffer, nbytes or 0)
        view = memoryview(buffer).cast("B")
        n = nbytes or len(view)
        if not n:
            return 0
        return self.read(n, view)

    def send(self, data, flags=0) -> int:
        """Send clear text; returns the bytes taken, as ``SSLSocket.send``.

        Raises:
            ValueError: non-zero ``flags``.
            ssl.SSLError: a TLS failure (the alert OpenSSL produced is sent first); ``ssl.SSLWantReadError``
                on a non-blocking socket that needs more records.
            OSError: as the ustack socket underneath (ENOTCONN, ``TimeoutError``, ``ConnectionResetError``).
        """
        if flags:
            raise ValueError(f"non-zero flags not allowed in calls to send() on {self.__class__}")
        if self._sslobj is None:
            return self._plain().send(data)
        return self.write(data)

    def sendall(self, data, flags=0) -> None:
        """Send all of ``data`` (clear text), returning ``None``.

        Raises:
            ValueError: non-zero ``flags``.
            ssl.SSLError: a TLS failure (the alert OpenSSL produced is sent first); ``ssl.SSLWantReadError``
                on a non-blocking socket that needs more records.
            OSError: as the ustack socket underneath (ENOTCONN, ``TimeoutError``, ``ConnectionResetError``).
        """
        if self._sslobj is None and not flags:
            return self._plain().sendall(data)
        view = memoryview(data).cast("B")
        while len(view):
            view = view[self.send(view, flags):]

    def sendfile(self, file, offset=0, count=None) -> int:
        """A copy loop through the TLS layer (records have to be encrypted anyway)."""
        if offset:
            file.seek(offset)
        total = 0
        try:
            while count is None or total < count:
                chunk = file.read(65536 if count is None else min(65536, count - total))
                if not chunk:
                    return total
                self.sendall(chunk)
                total += len(chunk)
            return total
        finally:
            if total and hasattr(file, "seek"):
                file.seek(offset + total)

    def pending(self) -> int:
        """The number of decrypted bytes ready to read without I/O (0 before the TLS session)."""
        return 0 if self._sslobj is None else self._sslobj.pending()

    def unwrap(self):
        """Close TLS (close_notify both ways) and return this object, now clear text over the same socket,
        as ``SSLSocket.unwrap`` returns itself; a second unwrap is a ValueError."""
        if self._sslobj is None:
            raise ValueError(f"No SSL wrapper around {self}")
        self._run(self._sslobj.shutdown)
        self._sslobj, self._over = None, True
        return self

    def _plain(self):
        sock = self._sock
        if sock is None:
            raise OSError(9, "Bad file descriptor")
        return sock

    def getpeercert(self, binary_form=False):
        """The peer's certificate, as ``SSLSocket.getpeercert`` (a dict, DER bytes with
        ``binary_form``, or ``None`` before the handshake).

        Raises:
            OSError: ENOTCONN on an unconnected socket.
            ValueError: no handshake done yet, as the stdlib.
        """
        if self._sslobj is None:
            self._plain().getpeername()  # unconnected: ENOTCONN, as SSLSocket
            return None
        return self._sslobj.getpeercert(binary_form)

    def cipher(self):
        """``(name, protocol, bits)`` of the session's cipher, or ``None`` before the session."""
        return None if self._sslobj is None else self._sslobj.cipher()

    def version(self):
        """The negotiated protocol (``'TLSv1.3'``...), or ``None`` before the handshake."""
        return None if self._sslobj is None else self._sslobj.version()

    def selected_alpn_protocol(self):
        """The ALPN protocol agreed on, or ``None``."""
        return None if self._sslobj is None else self._sslobj.selected_alpn_protocol()

    def shared_ciphers(self):
        """The ciphers both ends offered (server side), or ``None``."""
        return None if self._sslobj is None else self._sslobj.shared_ciphers()

    def compression(self):
        """The compression in use, or ``None`` (always, with OpenSSL's defaults)."""
        return None if self._sslobj is None else self._sslobj.compression()

    def get_channel_binding(self, cb_type="tls-unique"):
        """Channel-binding data (``tls-unique``), as ``SSLSocket.get_channel_binding``;
        ``None`` before the session.

        Raises:
            ValueError: an unsupported ``cb_type``.
        """
        return None if self._sslobj is None else self._sslobj.get_channel_binding(cb_type)

    @property
    def server_hostname(self):
        """The host name given for SNI and certificate checks, or ``None``."""
        return self._server_hostname if self._sslobj is None else self._sslobj.server_hostname

    @property
    def session(self):
        """The ``ssl.SSLSession`` to resume, or the one negotiated."""
        return self._session if self._sslobj is None else self._sslobj.session

    @session.setter
    def session(self, session):
        self._session = session
        if self._sslobj is not None:
            self._sslobj.session = session

    @property
    def session_reused(self):
        """``True`` when the session was resumed; ``None`` before the session."""
        return None if self._sslobj is None else self._sslobj.session_reused

    # -- files and closing (the stdlib's makefile and its reference counting) ------------
    makefile = _std.socket.makefile
    _decref_socketios = _std.socket._decref_socketios

    def close(self) -> None:
        """Close the ustack socket underneath once no ``makefile`` object uses it; records a
        non-blocking write left are sent first when the socket blocks. Later reads and writes raise
        ``ValueError``, as ``SSLSocket``.
        """
        self._closed = True
        if self._io_refs <= 0 and self._sock is not None:
            if self._unsent and self._sock.gettimeout() != 0:
                try:
                    self._flush()  # records a non-blocking write left, now that the socket blocks
                except OSError:
                    pass
            self._sock.close()
            self._sslobj, self._over = None, True  # (as SSLSocket: reads and writes after close are ValueError)

    def __del__(self):
        """Dropped unclosed: the stdlib's ResourceWarning, naming this object (not the socket beneath), and
        the ustack socket's own finalizer close (``SocketBase._close_from_finalizer``): a finalizer runs
        wherever a collection starts, inside ``Stack.poll`` too, so it takes no lock and sends nothing (records
        still unsent are dropped); the driver's next round releases the connection and sends the FIN."""
        sock = self.__dict__.get("_sock")
        if sock is None or getattr(self, "_closed", True):
            return
        warnings.warn(f"unclosed {self!r}", ResourceWarning, source=self)
        self._closed = True
        try:
            closer = getattr(sock, "_close_from_finalizer", None)
            (closer or sock.close)()  # (any other socket: its own close)
        except Exception:  # noqa: BLE001 - nothing may escape a finalizer
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # the socket-level calls and attributes: the ustack socket underneath answers
    fileno = _to_sock("fileno")
    settimeout = _to_sock("settimeout")
    gettimeout = _to_sock("gettimeout")
    setblocking = _to_sock("setblocking")
    getblocking = _to_sock("getblocking")
    getsockname = _to_sock("getsockname")
    getpeername = _to_sock("getpeername")
    setsockopt = _to_sock("setsockopt")
    getsockopt = _to_sock("getsockopt")
    shutdown = _to_sock("shutdown")
    bind = _to_sock("bind")
    listen = _to_sock("listen")
    get_inheritable = _to_sock("get_inheritable")
    set_inheritable = _to_sock("set_inheritable")
    family = property(lambda self: self._sock.family)
    type = property(lambda self: self._sock.type)
    proto = property(lambda self: self._sock.proto)
    timeout = property(lambda self: self._sock.gettimeout())

    def detach(self):
        """Not possible here.

        Raises:
            OSError: EOPNOTSUPP always (a TLS socket over ustack has no kernel fd to hand over).
        """
        raise OSError(95, "a TLS socket over ustack has no kernel fd to hand over")

    def dup(self):
        """Not possible, as for ``SSLSocket``.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(f"Can't dup() {self.__class__.__name__} instances")

    def __getattr__(self, name):
        # anything else a socket has: the socket underneath answers
        sock = self.__dict__.get("_sock")
        if sock is None:
            raise AttributeError(name)
        return getattr(sock, name)

    def __repr__(self):
        return f"<ustack.api.tls.TlsSocket over {self._sock!r}>"


class TlsDispatch:
    """``SSLContext.sslsocket_class`` while patched: TlsSocket for ustack sockets, SSLSocket for the rest."""

    @classmethod
    def _create(cls, sock, server_side=False, do_handshake_on_connect=True, suppress_ragged_eofs=True,
                server_hostname=None, context=None, session=None, tls_class=None):
        if sock.type != _std.SOCK_STREAM:  # SSLSocket._create's checks, before anything changes
            raise NotImplementedError("only stream sockets are supported")
        if server_side and server_hostname:
            raise ValueError("server_hostname can only be specified in server mode")
        if server_side and session is not None:
            raise ValueError("session can only be specified in client mode")
        if context is not None and context.check_hostname and not server_hostname:
            raise ValueError("check_hostname requires server_hostname")
        # as SSLSocket detach()es the socket it wraps: the TLS socket takes a patched socket's connection
        # over and the object the caller holds is left closed (fd -1), so closing it later ends nothing.
        # Asked through the object (a wrapper that forwards attributes, as asyncio's tests use, reaches
        # the socket itself).
        take = getattr(sock, "_tls_take", None)
        taken = take() if callable(take) else None
        if taken is not None:
            sock, connected = taken
            if connected is False:  # not yet addressed (wrapped before connect): its connect() picks the stack
                return (tls_class or TlsSocket)(sock, context, server_side, do_handshake_on_connect, suppress_ragged_eofs,
                                 server_hostname, session, connected=False)
        if getattr(sock, "_u", None) is not None or hasattr(sock, "_h"):
            return (tls_class or TlsSocket)(sock, context, server_side, do_handshake_on_connect, suppress_ragged_eofs,
                             server_hostname, session)
        return ssl.SSLSocket._create(sock, server_side, do_handshake_on_connect, suppress_ragged_eofs,
                                     server_hostname, context, session)
