"""A socket dropped without close(): its finalizer sends nothing and takes no lock; the next round sends the FIN.

A finalizer runs wherever a garbage collection starts: inside the stack's own
poll, in another thread, under any lock. Two stacks on the pipe, the client a
ustack socket on a Driver with a manual clock (the test is the poller), the
server a core connection on stack B.
"""

from __future__ import annotations

import errno
import gc
import socket as std
import ssl
import struct
import threading
import warnings

import pytest

from ustack.api.driver import Driver
from ustack.api.socket import socket as usocket
from ustack.api.tls import TlsSocket
from ustack.net.addr import ANY4
from ustack.tools.pipe_pair import A4, B4, PipePair
from ustack.transport.tcp.tcb import State


class Net(PipePair):
    """Stack A (driver ``da`` on the manual clock) and a core listener on B's port 80."""

    def __init__(self):
        super().__init__(start=100.0)
        self.da = Driver(self.a, self.clock)
        self.lst = self.b.tcp.listen((ANY4, 80), 4)

    def round(self) -> None:
        self.da.poll()
        self.b.poll(self.clock.now)
        self.clock.set(self.clock.now + 0.001)

    def connect(self, linger0: bool = False):
        """A client socket on A connected to B's listener: (socket, the server's core connection)."""
        s = usocket(self.da)
        if linger0:
            s.setsockopt(std.SOL_SOCKET, std.SO_LINGER, struct.pack("ii", 1, 0))
        s.setblocking(False)
        assert s.connect_ex((B4, 80)) in (errno.EINPROGRESS, 0)
        for _ in range(50):
            self.round()
            server = self.lst.accept() if self.lst.readable else None
            if server is not None:
                break
        assert server is not None and s.connection.state == State.ESTABLISHED
        self.round()
        return s, server


@pytest.fixture
def net():
    n = Net()
    try:
        yield n
    finally:
        n.da.close()
        n.close()


def _collect(holder: list) -> None:
    """Drop the last reference to the socket in ``holder`` and collect it (its __del__ runs here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        holder.clear()
        gc.collect()


def _sent(stack) -> int:
    return stack.stats["eth.frames_sent"]


def _collected_inside_poll(net, holder: list, conn) -> tuple[list, object]:
    """Collect the socket in ``holder`` from a timer inside A's Stack.poll; then B's poll and one more round.

    Returns what the timer saw right after the finalizer ran ([(nothing sent, state, orphaned)]) and the
    connection's state when that poll round ended."""
    inside = []

    def collect_now(now):  # a timer callback: runs inside A's Stack.poll
        sent = _sent(net.a)
        _collect(holder)
        inside.append((_sent(net.a) == sent, conn.state, conn.orphaned))

    net.a.timers.timer(collect_now).arm(net.clock.now)
    net.da.poll()
    after = conn.state
    net.b.poll(net.clock.now)
    net.round()
    return inside, after


@pytest.mark.parametrize("linger0", [False, True], ids=["fin", "rst"])
def test_dropped_socket_sends_nothing_until_the_next_round(net, linger0):
    s, server = net.connect(linger0)
    conn = s.connection
    holder = [s]
    del s
    sent = _sent(net.a)
    _collect(holder)
    assert _sent(net.a) == sent and conn.state == State.ESTABLISHED and not conn.orphaned  # no I/O, no state
    net.round()  # the round releases the connection first, and its flush sends
    assert conn.orphaned
    assert _sent(net.a) > sent
    if linger0:
        assert conn.state == State.CLOSED and server.state == State.CLOSED  # SO_LINGER 0: the peer took our RST
    else:
        assert conn.state == State.FIN_WAIT_1 and server.state == State.CLOSE_WAIT  # the peer took our FIN
        net.round()
        assert conn.state == State.FIN_WAIT_2  # and ACKed it


def test_finalizer_inside_the_stacks_poll_defers_to_the_next_round(net):
    s, server = net.connect()
    conn = s.connection
    holder = [s]
    del s
    # the finalizer neither sent nor closed mid-poll, nor did the rest of that round (already past its start)
    assert _collected_inside_poll(net, holder, conn) == ([(True, State.ESTABLISHED, False)], State.ESTABLISHED)
    assert conn.orphaned and conn.state == State.FIN_WAIT_1 and server.state == State.CLOSE_WAIT


def test_finalizer_in_another_thread_takes_no_lock(net):
    s, server = net.connect()
    conn = s.connection
    holder = [s]
    del s
    collector = threading.Thread(target=_collect, args=(holder,))
    with net.da.lock:  # a poller holds the stack: the finalizer must not wait for it
        collector.start()
        collector.join(5.0)
        assert not collector.is_alive()
        assert conn.state == State.ESTABLISHED
    net.round()
    net.round()
    assert server.state == State.CLOSE_WAIT


def test_dropped_udp_socket_unbinds_at_the_next_round(net):
    s = usocket(net.da, std.AF_INET, std.SOCK_DGRAM)
    s.bind((A4, 5353))
    holder = [s]
    del s
    _collect(holder)
    again = usocket(net.da, std.AF_INET, std.SOCK_DGRAM)
    try:
        with pytest.raises(OSError) as e:
            again.bind((A4, 5353))  # the finalizer did not touch the stack
        assert e.value.errno == errno.EADDRINUSE
        net.round()
        again.bind((A4, 5353))  # the round released it
    finally:
        again.close()


def test_tls_socket_finalizer_inside_the_stacks_poll_defers_to_the_next_round(net):
    """A TlsSocket dropped unclosed and collected inside Stack.poll: its finalizer takes the plain socket's
    deferred close (no lock, no segment, no nested poll); the next round orphans the connection and sends the
    FIN (issue 25 item 3: it closed for real, flushing and sending from inside the outer round)."""
    s, server = net.connect()
    conn = s.connection
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    holder = [TlsSocket(s, ctx, do_handshake_on_connect=False)]
    del s
    inside, depth = [], [0]
    poll = net.a.poll

    def counting_poll(*a, **kw):
        depth[0] += 1
        try:
            if depth[0] > 1:
                inside.append("re-entered")
            return poll(*a, **kw)
        finally:
            depth[0] -= 1

    net.a.poll = counting_poll
    seen, _ = _collected_inside_poll(net, holder, conn)
    assert inside + seen == [(True, State.ESTABLISHED, False)]  # neither sent, closed nor polled from the finalizer
    assert conn.orphaned and conn.state == State.FIN_WAIT_1 and server.state == State.CLOSE_WAIT


def test_patched_socket_finalizer_inside_the_stacks_poll_defers_to_the_next_round(net):
    """The same for the socket ``ustack.patch()`` installs: its __del__ closed the ustack socket for real."""
    import ustack

    ustack.patch(net.da)
    try:
        s = std.socket(std.AF_INET, std.SOCK_STREAM)
        s.setblocking(False)
        assert s.connect_ex((B4, 80)) in (errno.EINPROGRESS, 0)
        for _ in range(50):
            net.round()
            server = net.lst.accept() if net.lst.readable else None
            if server is not None:
                break
        conn = s._u.connection
        assert server is not None and conn.state == State.ESTABLISHED
        net.round()
        holder = [s]
        del s
        assert _collected_inside_poll(net, holder, conn)[0] == [(True, State.ESTABLISHED, False)]
        assert conn.orphaned and conn.state == State.FIN_WAIT_1 and server.state == State.CLOSE_WAIT
    finally:
        ustack.unpatch()
