"""The lending API between two whole stacks over the pipe, on a manual clock, fast path on, under damage.

The sender queues with ``send_reserve``/``send_commit`` (no copy into the
send buffer), the receiver takes ``recv_views`` (views into held RX
frames) and keeps several leases outstanding before releasing them, so
the window and the hold bound are exercised while segments are lost,
reordered, duplicated and corrupted. The bytes must arrive exactly.
(``tools/bench_lending.py --exact`` runs the same over 20 MB.)
"""

from __future__ import annotations

import hashlib
from collections import deque

from ustack.device import DeviceWrapper
from ustack.transport.tcp.tcb import State

from .test_tcp_pipe import A, checked_net


class ReservePump:
    """Writes ``data`` straight into the send buffer through reservations."""

    def __init__(self, conn, data: bytes):
        self.conn, self.data, self.pos = conn, memoryview(data), 0
        conn.on_event = self.step
        conn.on_send_low_water = self.step

    def step(self, conn=None) -> None:
        c = self.conn
        if c.state not in (State.ESTABLISHED, State.CLOSE_WAIT):
            return
        while self.pos < len(self.data):
            view = c.send_reserve(min(65536, len(self.data) - self.pos))
            if not len(view):
                return
            n = len(view)
            view[:] = self.data[self.pos:self.pos + n]
            assert c.send_commit(n) == n
            self.pos += n
        if not c.wr_shutdown:
            c.shutdown(1)


class LendingSink:
    """Reads with recv_views, keeping up to ``keep`` leases before releasing the oldest."""

    def __init__(self, hold, keep: int = 8):
        self.h = hashlib.sha256()
        self.n = 0
        self.conn = None
        self.hold = hold
        self.keep = keep
        self.leases = deque()
        self.max_held = self.max_lent = 0

    def attach(self, conn):
        self.conn = conn
        conn.on_event = self.step
        self.step(conn)

    def step(self, conn=None) -> None:
        c = self.conn
        while True:
            lent = c.recv_views(1 << 16)
            if not lent.nbytes:
                break
            for v in lent.views:
                self.h.update(v)
            self.n += lent.nbytes
            self.leases.append(lent)
            self.max_lent = max(self.max_lent, c.receiver.rcvbuf.lent)
            self.max_held = max(self.max_held, self.hold.held)
            while len(self.leases) > self.keep:
                self.leases.popleft().release()
        if c.eof:
            while self.leases:
                self.leases.popleft().release()


def lend_transfer(net, nbytes: int, seed: int = 0, max_time: float = 600.0):
    data = hashlib.sha256(str(seed).encode()).digest() * (nbytes // 32 + 1)
    data = data[:nbytes]
    lst = net.a.tcp.listen((b"\0\0\0\0", 80), 16)
    sink = LendingSink(net.a.rx_hold)
    lst.on_event = lambda l: sink.attach(l.accept()) if sink.conn is None and l.readable else None
    client = net.b.tcp.connect(None, (A, 80), net.clock.now)
    ReservePump(client, data)
    ok = net.run(lambda: sink.conn is not None and sink.conn.eof and sink.n == nbytes and not sink.leases, max_time)
    assert ok, (sink.n, nbytes, client.info(), net.clock.now)
    assert sink.h.hexdigest() == hashlib.sha256(data).hexdigest()
    return sink, client


def test_lending_exact_at_5pct_loss_reorder_duplication_corruption():
    # The case is the fast path on, so it is on here even in the suite's USTACK_FASTPATH=0 run.
    net = checked_net(seed=11, loss=0.05, duplicate=0.01, reorder=0.02, corrupt=0.005, delay=0.002, jitter=0.001,
                      a_kw={"fastpath": True}, b_kw={"fastpath": True})
    assert net.a.tcp.fastpath and net.b.tcp.fastpath
    sink, client = lend_transfer(net, 2_000_000, seed=3)
    assert client.info().retransmits > 0
    drops = net.a.stats.drops()
    assert any(k.endswith("bad_checksum") for k in drops), drops  # corruption was caught, not delivered
    assert sink.max_held > 0 and sink.max_lent > 0  # views into RX frames were lent and counted
    rcvbuf = sink.conn.receiver.rcvbuf
    assert rcvbuf.lent == 0 and rcvbuf.held == 0 and net.a.rx_hold.held == 0  # every frame went back
    assert sink.conn.segs_fast > 100  # in-order segments took the C fast path (and its append)


def test_lent_bytes_close_the_window_until_released():
    net = checked_net()
    lst = net.a.tcp.listen((b"\0\0\0\0", 80), 16)
    client = net.b.tcp.connect(None, (A, 80), net.clock.now)
    net.run(lambda: lst.readable, 5)
    server = lst.accept()
    cap = server.receiver.rcvbuf.capacity
    data = bytes(range(256)) * (cap // 256)  # exactly the receive buffer
    sent = 0

    def pump():
        nonlocal sent
        while sent < len(data):
            n = client.send(data[sent:sent + 65536], net.clock.now)
            if not n:
                break
            sent += n

    client.on_event = client.on_send_low_water = lambda c=None: pump()
    pump()
    net.run(lambda: len(server.receiver.rcvbuf) == cap, 30)
    lent = server.recv_views(cap, net.clock.now)
    assert lent.nbytes == cap and lent.tobytes() == data
    assert server.receiver.rcvbuf.free == 0
    # The right edge already advertised may stand a little past the buffer: a scaled window (wscale 7,
    # covering the auto-tuning ceiling) is rounded up rather than shrunk (RFC 7323 2.4).
    edge = server.tcb.rcv_adv
    offered = (edge - server.tcb.rcv_nxt) % (1 << 32)
    assert offered < 1024
    more = b"z" * 5000
    client.send(more, net.clock.now)
    net.run(lambda: False, 2)
    # the window stayed shut while the views were lent: nothing beyond the edge already offered
    assert len(server.receiver.rcvbuf) == offered and server.tcb.rcv_adv == edge
    assert net.a.rx_hold.held > 0
    lent.release()
    # the lent frames went back; only what the buffer keeps (the ``offered`` bytes) is still held
    assert net.a.rx_hold.held == server.receiver.rcvbuf.held <= 1
    net.run(lambda: len(server.receiver.rcvbuf) == len(more), 10)
    assert server.recv(10000, net.clock.now) == more


def test_hold_bound_keeps_the_ring_flowing_while_nobody_reads():
    net = checked_net()
    net.a.rx_hold.limit = 4
    lst = net.a.tcp.listen((b"\0\0\0\0", 80), 16)
    client = net.b.tcp.connect(None, (A, 80), net.clock.now)
    net.run(lambda: lst.readable, 5)
    server = lst.accept()
    data = hashlib.sha256(b"bound").digest() * 5000  # 160 KB: more than 4 frames, less than the window
    assert client.send(data, net.clock.now) == len(data)
    net.run(lambda: len(server.receiver.rcvbuf) == len(data), 30)
    hold = net.a.rx_hold
    assert hold.held <= 4 and net.a.stats["rx_hold.reclaims"] > 0  # copied out at the bound, frames went back
    assert server.recv(len(data), net.clock.now) == data
    assert hold.held == 0
    client.close(net.clock.now)
    server.close(net.clock.now)
    net.run(lambda: server.state == State.CLOSED, 10)


# -- issue 25, item 10: a slice of a lent view outlives release(): its frame must not be reused -------------
class RingDevice(DeviceWrapper):
    """An RX ring of ``slots`` fixed buffers, reused in turn once released (as AF_XDP's UMEM frames are)."""

    def __init__(self, inner, slots: int = 8):
        super().__init__(inner)
        self._mem = [memoryview(bytearray(inner.capabilities.frame_size)) for _ in range(slots)]
        self._free = deque(range(slots))
        self._out: dict[int, int] = {}  # id(frame view) -> slot
        self.filled = 0

    def rx_burst(self, max_frames):
        frames = self.inner.rx_burst(min(max_frames, len(self._free)))
        out = []
        for f in frames:
            slot = self._free.popleft()
            n = len(f)
            self._mem[slot][:n] = f
            view = self._mem[slot][:n]
            self._out[id(view)] = slot
            out.append(view)
            self.filled += 1
        self.inner.rx_release(frames)
        return out

    def rx_release(self, frames):
        for f in frames:
            self._free.append(self._out.pop(id(f)))


def _ring_pair(hold: int):
    from .netsim import Net

    net = Net(wrap_a=lambda d: RingDevice(d, slots=8), a_kw={"fastpath": True, "rx_hold": hold},
              b_kw={"fastpath": True})
    lst = net.a.tcp.listen((b"\0\0\0\0", 80), 16)
    client = net.b.tcp.connect(None, (A, 80), net.clock.now)
    assert net.run(lambda: lst.readable, 5)
    return net, client, lst.accept()


def _exchange(net, client, server, data: bytes) -> None:
    """``data`` from the client, read on the server with recv (more traffic through the ring)."""
    got, sent = bytearray(), 0
    while len(got) < len(data):
        sent += client.send(data[sent:sent + 65536], net.clock.now) if sent < len(data) else 0
        net.run(lambda: len(server.receiver.rcvbuf) > 0, 5)
        got += server.recv(1 << 20, net.clock.now)
    assert bytes(got) == data


def test_a_slice_of_a_released_lent_view_keeps_reading_its_own_bytes():
    net, client, server = _ring_pair(hold=4)
    ring, hold = net.a.device, net.a.rx_hold
    first = bytes(range(256)) * 4
    client.send(first, net.clock.now)
    assert net.run(lambda: len(server.receiver.rcvbuf) == len(first), 5)
    lent = server.recv_views(len(first), net.clock.now)
    assert lent.tobytes() == first and hold.held == 1
    piece = lent.views[0][100:200]  # the program keeps a slice
    for v in lent.views:
        v.release()  # ... and releases the view itself: the slice survives that
    lent.release()
    before = ring.filled
    _exchange(net, client, server, bytes(range(255, -1, -1)) * 400)  # ~100 KB: the 8-slot ring turns many times
    assert ring.filled - before > 40
    assert bytes(piece) == first[100:200]  # its frame was never handed back to the ring
    assert hold.outliving == 1 and net.a.stats["rx_hold.lent_outliving"] == 1 and 1 <= hold.held <= hold.limit
    del piece  # the last view of the frame: the next round gives it back
    client.send(b"x", net.clock.now)
    net.run(lambda: len(server.receiver.rcvbuf) == 1, 5)
    assert hold.outliving == 0 and server.recv(10, net.clock.now) == b"x"
    assert net.run(lambda: hold.held == 0, 1)


def test_outliving_views_are_bounded_by_the_hold_and_the_ring_keeps_flowing():
    net, client, server = _ring_pair(hold=4)
    hold, stats = net.a.rx_hold, net.a.stats
    kept = []
    for i in range(40):  # each lease leaves a slice behind
        data = bytes([i]) * 700
        client.send(data, net.clock.now)
        assert net.run(lambda: len(server.receiver.rcvbuf) == len(data), 5)
        lent = server.recv_views(len(data), net.clock.now)
        kept.append((lent.views[0][:50], data[:50]))
        lent.release()
        assert hold.held <= hold.limit == 4
    assert all(bytes(s) == want for s, want in kept)
    assert 0 < hold.outliving <= 4 and stats["rx_hold.copied"] > 0  # past the bound: copied, not pinned
    kept.clear()
    client.send(b"y", net.clock.now)
    net.run(lambda: len(server.receiver.rcvbuf) == 1, 5)
    assert hold.outliving == 0
