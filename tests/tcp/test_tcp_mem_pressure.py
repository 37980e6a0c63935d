"""The soft level of the TCP memory budget (``tcp_mem_pressure``, Linux's tcp_mem pressure), on the manual clock.

Above it every connection's buffers are trimmed to what they hold plus
PRESSURE_MIN: the receive window stops growing (its advertised edge is never
taken back), out-of-order data is not queued, ``send`` takes only up to
PRESSURE_MIN; below it again everything opens as before. ``layer.charge(n)``
stands for n bytes held by other connections.
"""

from __future__ import annotations

import pytest

from tests.tcp.harness import Harness
from ustack.transport.tcp.config import PRESSURE_MIN, TcpConfig

BALLAST = 200_000  # bytes "held by other connections": above the soft level, far below the hard one


def _harness(**kw) -> Harness:
    return Harness(delayed_ack=False, tcp_mem=1 << 20, tcp_mem_pressure=100_000, rcvbuf=30_000, **kw)


def _edge(seg, conn) -> int:
    return seg.ack + (seg.hdr.window << conn.tcb.rcv_wscale)


def test_the_window_stops_growing_under_pressure_and_opens_again_below_it():
    h = _harness()
    conn = h.open_active()
    h.layer.charge(BALLAST)
    assert h.layer.under_pressure and h.stats["tcp.mem_pressure_entered"] == 1
    edges, windows = [], []
    for i in range(24):  # the application reads everything after every second segment
        h.peer.send(flags="PA", payload=bytes([65 + i % 26]) * 1400)
        ack = h.peer.expect(flags="A", ack=1001 + 1400 * (i + 1))
        edges.append(_edge(ack, conn))
        windows.append(ack.hdr.window << conn.tcb.rcv_wscale)
        if i % 2:
            assert conn.recv(2800, now=h.now) == bytes([65 + (i - 1) % 26]) * 1400 + bytes([65 + i % 26]) * 1400
            if edges[-1] - ack.ack >= PRESSURE_MIN:
                h.peer.expect_nothing()  # no window update while the old edge is still ahead
            else:  # a window update up to the trimmed buffer, no further
                update = h.peer.expect(flags="A")
                assert update.hdr.window << conn.tcb.rcv_wscale == PRESSURE_MIN
    # Without pressure each read would move the right edge on by 2800 bytes; under it the edge stays
    # where it was advertised until the window has shrunk to PRESSURE_MIN, then it only trickles.
    first = edges[0]
    assert edges[:19] == [first] * 19
    assert all(w <= PRESSURE_MIN for w in windows[19:]) and windows[-1] > 0
    assert all(b >= a for a, b in zip(edges, edges[1:]))  # never taken back (RFC 7323 2.4)
    # Below the soft level again: the next ACK offers the whole free buffer at once.
    h.layer.charge(-BALLAST)
    assert not h.layer.under_pressure
    h.peer.send(flags="PA", payload=b"z" * 1400)
    ack = h.peer.expect(flags="A")
    assert ack.hdr.window << conn.tcb.rcv_wscale == 30_000 - 1400
    assert conn.recv(5000, now=h.now) == b"z" * 1400
    assert h.stats["tcp.mem_pressure_entered"] == 1


def test_without_pressure_the_same_reads_move_the_edge():
    """The control for the test above: same script, no ballast."""
    h = _harness()
    conn = h.open_active()
    edges = []
    for i in range(6):
        h.peer.send(flags="PA", payload=b"x" * 1400)
        edges.append(_edge(h.peer.expect(flags="A"), conn))
        if i % 2:
            conn.recv(2800, now=h.now)
    assert edges == [edges[0] + 2800 * (i // 2) for i in range(6)]
    assert h.stats["tcp.mem_pressure_entered"] == 0


def test_out_of_order_data_is_not_queued_under_pressure_in_order_still_is():
    h = _harness()
    conn = h.open_active()
    h.layer.charge(BALLAST)
    h.peer.send(flags="PA", seq=1001 + 1400, payload=b"later" * 280, advance=False)
    h.peer.expect(flags="A", ack=1001)  # at once: the peer learns where the gap is
    assert h.stats["drop.tcp.mem_pressure_ooo"] == 1 and conn.receiver.rcvbuf.ooo_bytes == 0
    h.peer.send(flags="PA", payload=b"first" * 280)
    h.peer.expect(flags="A", ack=1001 + 1400)
    assert conn.recv(5000, now=h.now) == b"first" * 280
    h.layer.charge(-BALLAST)
    h.peer.send(flags="PA", seq=1001 + 2800, payload=b"gap!" * 350, advance=False)
    h.peer.expect(flags="A", ack=1001 + 1400)
    assert conn.receiver.rcvbuf.ooo_bytes == 1400 and h.stats["drop.tcp.mem_pressure_ooo"] == 1


def test_send_takes_only_up_to_the_minimum_under_pressure_and_all_again_after():
    h = _harness()
    conn = h.open_active()
    h.layer.charge(BALLAST)
    assert conn.send(b"s" * 10_000, now=h.now) == PRESSURE_MIN
    assert h.stats["tcp.mem_pressure_send"] == 1 and not conn.writable
    sent = 0
    while h.host.out:
        sent += len(h.peer.expect(flags="A").payload)
    assert sent == PRESSURE_MIN
    h.peer.ack()
    assert conn.writable  # the buffer drained: the connection may queue its minimum again
    assert conn.send(b"t" * 10_000, now=h.now) == PRESSURE_MIN
    while h.host.out:
        h.pop()
    h.peer.ack()
    h.layer.charge(-BALLAST)
    assert conn.send(b"u" * 10_000, now=h.now) == 10_000
    assert h.stats["tcp.mem_pressure_send"] == 2


def test_connections_own_buffers_enter_and_leave_pressure():
    h = Harness(delayed_ack=False, tcp_mem=1 << 20, tcp_mem_pressure=3000)
    conn = h.open_active()
    h.peer.send(flags="PA", payload=b"a" * 1400)
    h.peer.expect(flags="A")
    assert not h.layer.under_pressure
    h.peer.send(flags="PA", payload=b"b" * 1400)
    h.peer.send(flags="PA", payload=b"c" * 1400)
    assert h.layer.mem_used == 4200 and h.layer.under_pressure
    conn.recv(10_000, now=h.now)
    assert h.layer.mem_used == 0 and not h.layer.under_pressure
    h.peer.send(flags="PA", payload=b"d" * 1400)
    h.peer.send(flags="PA", payload=b"e" * 1400)
    h.peer.send(flags="PA", payload=b"f" * 1400)
    assert h.stats["tcp.mem_pressure_entered"] == 2
    assert h.stats["drop.tcp.mem_pressure"] == 0  # the hard level was never reached


def test_the_soft_level_is_checked():
    assert TcpConfig().tcp_mem_pressure is None  # 3/4 of tcp_mem
    with pytest.raises(ValueError, match="tcp_mem_pressure"):
        TcpConfig(tcp_mem=1000, tcp_mem_pressure=2000).validate()
    with pytest.raises(ValueError, match="tcp_mem_pressure"):
        TcpConfig(tcp_mem_pressure=0).validate()
    h = Harness(tcp_mem=4000)
    assert h.layer.pressure_level() == 3000
