"""Two TcpLayers wired together through an in-memory link with seeded loss, reordering,
duplication and corruption: multi-megabyte transfers must arrive byte-exact and both ends close."""

from __future__ import annotations

import heapq
import random

import pytest

from tests.tcp.harness import FakeHost
from ustack.api import environment
from ustack.api.clock import ManualClock
from ustack.backends.impair import Impairment
from ustack.transport.tcp import State, TcpConfig, TcpLayer
from ustack.timers import TimerHeap
from ustack.wire.ipv4 import ip_to_bytes

A_ADDR = ip_to_bytes("198.18.1.1")
B_ADDR = ip_to_bytes("198.18.1.2")


class Link:
    """A lossy wire between two layers: every segment is delayed, and may be lost, duplicated,
    held back (reordered) or corrupted, by the project's one seeded impairment model."""

    def __init__(self, clock, seed: int, loss=0.0, dup=0.0, reorder=0.0, corrupt=0.0, delay=0.01):
        self.clock = clock
        # Reordered segments are held back by up to three one-way delays.
        self.impairment = Impairment(seed=seed, loss=loss, duplicate=dup, reorder=reorder, corrupt=corrupt,
                                     delay=delay, reorder_delay=2 * delay)
        self.queue: list = []
        self._n = 0
        self.ends: dict = {}
        self.sent = 0

    @property
    def lost(self) -> int:
        return self.impairment.counters["lost"]

    def attach(self, addr: bytes, layer: TcpLayer, host: FakeHost) -> None:
        self.ends[addr] = layer
        host.sink = self.transmit

    def transmit(self, src: bytes, dst: bytes, segment: bytes) -> None:
        self.sent += 1
        for when, data in self.impairment.carry(segment, self.clock.now):
            self._n += 1
            heapq.heappush(self.queue, (when, self._n, src, dst, data))

    def next_time(self):
        return self.queue[0][0] if self.queue else None

    def deliver_due(self, now: float) -> None:
        while self.queue and self.queue[0][0] <= now:
            _, _, src, dst, data = heapq.heappop(self.queue)
            self.ends[dst].input(src, dst, memoryview(data), now)


class World:
    """A clock, one timer heap, two hosts and layers, and the link."""

    def __init__(self, seed: int, link: dict, **cfg):
        self.clock = ManualClock(10.0)
        self.timers = TimerHeap()
        self.link = Link(self.clock, seed, **link)
        self.a_host = FakeHost(self.clock, self.timers, addr=A_ADDR)
        self.b_host = FakeHost(self.clock, self.timers, addr=B_ADDR)
        self.b_host.isn_secret = bytes(range(100, 116))
        config = TcpConfig(**cfg)
        self.a = TcpLayer(self.a_host, config, environment.fastpath())
        self.b = TcpLayer(self.b_host, config, environment.fastpath())
        self.link.attach(A_ADDR, self.a, self.a_host)
        self.link.attach(B_ADDR, self.b, self.b_host)

    @property
    def now(self) -> float:
        return self.clock.now

    def run(self, step, limit: float) -> None:
        """Advance event by event until ``step(now)`` returns True or ``limit`` seconds pass."""
        end = self.clock.now + limit
        while True:
            self.a.flush(self.now)
            self.b.flush(self.now)
            if step(self.now):
                return
            # what the step's user calls left pending (now=None marks the connection dirty) goes out
            # before the loop looks for the next event, as the stack's poll loop flushes after the application
            self.a.flush(self.now)
            self.b.flush(self.now)
            times = [t for t in (self.link.next_time(), self.timers.next_deadline()) if t is not None]
            assert times, "deadlock: nothing in flight and no timer armed"
            t = max(min(times), self.now)
            assert t <= end, f"not done after {limit} s of protocol time"
            self.clock.set(t)
            self.link.deliver_due(t)
            self.timers.run(t)


class Transfer:
    """One direction of application traffic: write ``data`` into ``tx``, read it out of ``rx``."""

    def __init__(self, data: bytes, chunk: int):
        self.data = data
        self.chunk = chunk
        self.sent = 0
        self.received = bytearray()
        self.tx = self.rx = None
        self.closed = False

    def step(self, now: float) -> bool:
        tx, rx = self.tx, self.rx
        if tx is not None and self.sent < len(self.data) and tx.writable:
            self.sent += tx.send(memoryview(self.data)[self.sent : self.sent + self.chunk])
        if tx is not None and self.sent == len(self.data) and not self.closed:
            tx.shutdown(1)
            self.closed = True
        if rx is not None:
            while True:
                got = rx.recv(65536)
                if not got:
                    break
                self.received += got
        return rx is not None and rx.eof


def transfer(seed: int, size_ab: int, size_ba: int, link: dict, limit: float = 600.0, **cfg):
    w = World(seed, link, **cfg)
    rng = random.Random(seed)
    ab = Transfer(rng.randbytes(size_ab), 40000)
    ba = Transfer(rng.randbytes(size_ba), 30000)
    lst = w.b.listen((B_ADDR, 80), 4)
    client = w.a.connect(None, (B_ADDR, 80), w.now)
    ab.tx = client
    ba.rx = client
    server = [None]

    def step(now):
        if server[0] is None:
            server[0] = lst.accept()
            if server[0] is not None:
                ab.rx = server[0]
                ba.tx = server[0]
        done_ab = ab.step(now)
        done_ba = ba.step(now)
        return done_ab and done_ba

    w.run(step, limit)
    assert bytes(ab.received) == ab.data
    assert bytes(ba.received) == ba.data
    conn_a, conn_b = client, server[0]
    # Both sides sent FIN and got FIN: one waits in TIME-WAIT, then both are gone.
    w.run(lambda now: conn_a.state == State.CLOSED and conn_b.state == State.CLOSED
          and not w.a.connections and not w.b.connections, 2 * 60.0 + 30.0)
    assert conn_a.error is None and conn_b.error is None
    return w, conn_a, conn_b


def test_clean_link_transfer():
    w, a, b = transfer(1, 2_000_000, 300_000, dict(delay=0.005))
    assert a.info().retransmits == 0 and b.info().retransmits == 0
    assert w.link.lost == 0


@pytest.mark.parametrize("seed", [2, 3])
def test_lossy_link_transfer_is_byte_exact(seed):
    w, a, b = transfer(seed, 3_000_000, 500_000,
                       dict(loss=0.02, dup=0.01, reorder=0.03, corrupt=0.005, delay=0.01))
    assert a.info().retransmits > 0
    # the receiver's buffer auto-tuned beyond the initial 256 KiB (rcvspace.py), and the bytes are exact
    assert b.receiver.rcvbuf.capacity > 256 * 1024 and w.b_host.stats["tcp.rcvbuf_grown"] > 0
    drops = w.a_host.stats.drops() | w.b_host.stats.drops()
    assert drops.get("tcp.bad_checksum", 0) > 0


def test_lossy_link_with_all_options():
    w, a, b = transfer(4, 2_000_000, 1_000_000, dict(loss=0.02, dup=0.01, reorder=0.05, delay=0.02),
                       window_scaling=True, timestamps=True, sack=True, rcvbuf=1 << 20, sndbuf=1 << 20)
    info = a.info()
    # the window scale covers the auto-tuning ceiling (rcvbuf_max, 6 MiB): 7
    assert info.timestamps and info.sack and info.snd_wscale == 7 and info.rcv_wscale == 7


def test_small_buffers_and_nagle_off_transfer():
    transfer(5, 500_000, 500_000, dict(loss=0.03, reorder=0.05, delay=0.003),
             rcvbuf=3000, sndbuf=5000, nodelay=True, delayed_ack=False)


def test_cubic_transfer():
    w, a, b = transfer(6, 2_000_000, 200_000, dict(loss=0.01, reorder=0.02, delay=0.01), congestion="cubic")
    assert a.info().congestion == "cubic" and b.info().congestion == "cubic"
