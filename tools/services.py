"""Small event-driven TCP services that run inside a stack's poll loop (no threads).

Used by ``ustack serve``: echo (RFC 862 style), discard (RFC 863 style) and
a source that sends N bytes of a deterministic pattern to each client and
then closes, so a client reading to EOF measures a finite transfer.

They work on the protocol objects (ustack.transport.tcp Listener / Connection) through
their ``on_event`` callbacks, which the TCP layer calls from inside
``Stack.poll`` after each segment it processes; whatever they send is
flushed at the end of that poll round.
"""

from __future__ import annotations

import hashlib

from ustack.transport.tcp.tcb import State

PATTERN_BLOCK = bytes(range(256)) * 256  # 64 KiB; the stream is bytes(range(256)) repeated


def pattern(nbytes: int, offset: int = 0) -> bytes:
    """``nbytes`` of the deterministic pattern starting at stream offset ``offset``."""
    start = offset % 256
    out = bytearray()
    while len(out) < nbytes:
        out += PATTERN_BLOCK[start:start + nbytes - len(out)]
        start = 0
    return bytes(out)


def pattern_sha256(nbytes: int) -> str:
    h = hashlib.sha256()
    left = nbytes
    while left:
        chunk = PATTERN_BLOCK[:min(left, len(PATTERN_BLOCK))]
        h.update(chunk)
        left -= len(chunk)
    return h.hexdigest()


class _Service:
    # True for a service whose step only answers what it reads: a connection accepted with nothing to
    # read (no data, EOF, error) is left to its first on_event (the layer's call after the segment).
    reads_first = False

    def __init__(self, stack, port: int, backlog: int = 256):
        self.stack = stack
        wildcard = bytes(16) if stack.ipv6 is not None else bytes(4)  # :: is dual-stack: IPv4 too
        self.listener = stack.tcp.listen((wildcard, port), backlog)
        self.listener.on_event = self._on_listener
        self.connections = 0
        self.active: set = set()

    def _on_listener(self, lst) -> None:
        while True:
            conn = lst.accept()
            if conn is None:
                return
            self.connections += 1
            self.active.add(conn)
            conn.on_event = self._on_conn
            conn.on_send_low_water = self._on_conn
            self.opened(conn)
            if not self.reads_first or conn.readable:
                self._on_conn(conn)

    def _on_conn(self, conn) -> None:
        if conn.state == State.CLOSED:
            self.active.discard(conn)
            self.closed(conn)
            return
        try:
            self.step(conn)
        except (ConnectionError, OSError):
            self.stack.stats.inc("service.connection_errors")
            conn.abort()
            self.active.discard(conn)

    def opened(self, conn) -> None:
        pass

    def closed(self, conn) -> None:
        pass

    def step(self, conn) -> None:
        raise NotImplementedError


class TcpEcho(_Service):
    """Sends back every byte; closes after the peer's FIN once everything is echoed.

    Reads into one buffer of its own (``recv_into``) and sends from a view of it, as the kernel row's
    server in ``ustack bench`` does: two copies per byte (receive ring -> buffer -> send ring). Only a
    tail the send buffer refused is kept, per connection, until ``on_send_low_water``.
    """

    reads_first = True

    def __init__(self, stack, port: int, backlog: int = 256):
        super().__init__(stack, port, backlog)
        self.pending: dict = {}
        self.buf = bytearray(1 << 18)
        self.view = memoryview(self.buf)

    def opened(self, conn) -> None:
        self.pending[conn] = bytearray()

    def closed(self, conn) -> None:
        self.pending.pop(conn, None)

    def step(self, conn) -> None:
        pending = self.pending.get(conn)
        if pending is None:
            return
        if pending:
            del pending[:conn.send(pending)]
            if pending:
                return  # send buffer still full: on_send_low_water brings us back
        buf, view = self.buf, self.view
        while True:
            n = conn.recv_into(buf)
            if not n:
                break
            k = conn.send(view[:n])
            if k < n:
                pending += view[k:n]
                return
        if conn.eof and not conn.wr_shutdown:
            conn.close()


class TcpDiscard(_Service):
    """Reads and drops everything (``recv_into`` one buffer of its own, as the kernel row's server does);
    closes after the peer's FIN."""

    reads_first = True

    def __init__(self, stack, port: int, backlog: int = 256):
        super().__init__(stack, port, backlog)
        self.buf = bytearray(1 << 18)

    def step(self, conn) -> None:
        buf = self.buf
        while conn.recv_into(buf):
            pass
        if conn.eof and not conn.wr_shutdown:
            conn.close()


class TcpSource(_Service):
    """Sends ``nbytes`` of the pattern to each client, then closes."""

    def __init__(self, stack, port: int, nbytes: int, backlog: int = 256):
        super().__init__(stack, port, backlog)
        self.nbytes = nbytes
        self.sent: dict = {}

    def opened(self, conn) -> None:
        self.sent[conn] = 0

    def closed(self, conn) -> None:
        self.sent.pop(conn, None)

    def step(self, conn) -> None:
        while conn.recv(1 << 20):  # ignore what the client says
            pass
        sent = self.sent.get(conn)
        if sent is None or conn.wr_shutdown:
            return
        while sent < self.nbytes:
            start = sent % 256
            chunk = memoryview(PATTERN_BLOCK)[start:start + min(self.nbytes - sent, len(PATTERN_BLOCK) - start)]
            n = conn.send(chunk)
            if n == 0:
                break
            sent += n
        self.sent[conn] = sent
        if sent >= self.nbytes:
            conn.close()


class TcpSink(_Service):
    """Reads to EOF, hashing what it gets; answers ``<bytes> <sha256>`` and closes (half-close friendly)."""

    def __init__(self, stack, port: int, backlog: int = 256):
        super().__init__(stack, port, backlog)
        self.state: dict = {}
        self.results: list = []  # (bytes, sha256 hex) per finished connection

    def opened(self, conn) -> None:
        self.state[conn] = [hashlib.sha256(), 0]

    def closed(self, conn) -> None:
        self.state.pop(conn, None)

    def step(self, conn) -> None:
        st = self.state.get(conn)
        if st is None:
            return
        while True:
            data = conn.recv(1 << 20)
            if not data:
                break
            st[0].update(data)
            st[1] += len(data)
        if conn.eof and not conn.wr_shutdown:
            digest = st[0].hexdigest()
            self.results.append((st[1], digest))
            conn.send(f"{st[1]} {digest}\n".encode())
            conn.close()
