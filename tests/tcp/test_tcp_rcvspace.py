"""Receive-buffer auto-tuning (transport/tcp/rcvspace.py, Linux's tcp_rcv_space_adjust), on the manual clock.

A scripted peer sends what the advertised window allows once per RTT (50 ms,
the handshake's); the application reads (fast: all of it; slow: a little).
The buffer grows while the application keeps up, stops at ``rcvbuf_max``,
never grows for a slow reader, an explicit ``rcvbuf`` or under memory
pressure, and the advertised right edge never moves left (RFC 7323 2.4).
"""

from __future__ import annotations

from tests.tcp.harness import Harness
from ustack.transport.tcp.config import TcpConfig
from ustack.transport.tcp.connection import window_shift_for
from ustack.transport.tcp.rcvspace import HEADROOM_SEGMENTS, ReceiveSpace

RTT = 0.05
SEG = 1400


def _open(h: Harness, peer_wscale: int | None = 7, **opts):
    """connect() with the SYN-ACK one RTT later (SRTT = RTT); returns (connection, our SYN)."""
    conn = h.layer.connect(None, (h.peer.addr, h.peer.port), h.now, **opts)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S")
    h.advance(RTT)
    h.peer.snd_nxt = 1000
    h.peer.send(flags="SA", ack=syn.seq + 1, win=65535, mss=1460, wscale=peer_wscale)
    ack = h.peer.expect(flags="A", ack=1001)
    assert conn.state.name == "ESTABLISHED"
    return conn, syn, ack


def _edge(seg, conn) -> int:
    return seg.ack + (seg.hdr.window << conn.tcb.rcv_wscale)


def _rounds(h: Harness, conn, first_ack, n: int, read: int | None = None, limit: int = 400):
    """``n`` RTTs: the peer fills the advertised window (at most ``limit`` segments), the application
    reads ``read`` bytes (None: all) at the round's time. Returns (right edges seen, bytes received, read)."""
    edge = _edge(first_ack, conn)
    edges = [edge]
    got = bytearray()
    sent = bytearray()
    for r in range(n):
        k = 0
        while edge - h.peer.snd_nxt >= SEG and k < limit:
            payload = bytes([(h.peer.snd_nxt // SEG) % 251]) * SEG
            sent += payload
            h.peer.send(flags="PA", payload=payload)
            k += 1
        got += conn.recv(len(conn.receiver.rcvbuf) if read is None else read, now=h.now)
        h.layer.flush(h.now)
        for seg in h.drain():
            e = _edge(seg, conn)
            assert e >= edges[-1], f"right edge moved left: {e} < {edges[-1]}"  # RFC 7323 2.4
            edges.append(e)
        edge = edges[-1]
        h.advance(RTT)
    return edges, bytes(got), bytes(sent)


def test_the_buffer_grows_per_rtt_while_the_reader_keeps_up_and_stops_at_the_cap():
    h = Harness(window_scaling=True, delayed_ack=False, rcvbuf=64000, rcvbuf_max=400_000)
    conn, syn, ack = _open(h)
    assert syn.hdr.wscale == window_shift_for(400_000) == 3
    edges, got, sent = _rounds(h, conn, ack, 8)
    assert got == sent  # exact bytes, in order
    assert conn.receiver.rcvbuf.capacity == 400_000 and h.stats["tcp.rcvbuf_grown"] >= 2
    # the window offered at the end covers the grown buffer (what scaling by 3 can say, 65535 << 3)
    assert edges[-1] - (1001 + len(got)) == 400_000
    assert all(b >= a for a, b in zip(edges, edges[1:]))


def test_growth_is_twice_the_bytes_read_per_rtt_plus_headroom():
    h = Harness(window_scaling=True, delayed_ack=False, rcvbuf=64000)
    conn, syn, ack = _open(h)
    assert syn.hdr.wscale == 7  # covers the default rcvbuf_max, 6 MiB (Linux offers 7 too)
    assert conn.receiver.rcvbuf.capacity == 64000
    _rounds(h, conn, ack, 2)  # round 1 starts the measurement; round 2 (one RTT later): 45 segments read in it
    assert conn.receiver.rcvbuf.capacity == 2 * (64000 // SEG * SEG) + HEADROOM_SEGMENTS * SEG


def test_a_slow_reader_does_not_grow_the_buffer():
    h = Harness(window_scaling=True, delayed_ack=False, rcvbuf=64000)
    conn, _, ack = _open(h)
    edges, got, sent = _rounds(h, conn, ack, 12, read=2800)
    assert conn.receiver.rcvbuf.capacity == 64000 and h.stats["tcp.rcvbuf_grown"] == 0
    assert got == sent[: len(got)] and len(got) == 12 * 2800
    assert all(b >= a for a, b in zip(edges, edges[1:]))
    # the window never offered more than the buffer (rounded up to the scale's unit, 128: RFC 7323 2.4)
    assert max(edges) - 1001 < 64000 + 12 * 2800 + 128


def test_an_explicit_rcvbuf_turns_auto_tuning_off():
    h = Harness(window_scaling=True, delayed_ack=False, rcvbuf=64000)
    conn, syn, ack = _open(h, rcvbuf=64000)  # a connect knob, as SO_RCVBUF before connect
    assert not conn.config.rcvbuf_auto and syn.hdr.wscale == 0  # scaled for 64000 only
    edges, got, sent = _rounds(h, conn, ack, 6)
    assert got == sent and conn.receiver.rcvbuf.capacity == 64000 and h.stats["tcp.rcvbuf_grown"] == 0


def test_configure_keeps_a_grown_buffer_and_an_explicit_size_stops_growth_without_shrinking_the_edge():
    h = Harness(window_scaling=True, delayed_ack=False, rcvbuf=64000)
    conn, _, ack = _open(h)
    edges, got, sent = _rounds(h, conn, ack, 3)
    grown = conn.receiver.rcvbuf.capacity
    assert grown > 64000
    conn.configure(h.now, nodelay=True)  # another knob: the grown buffer stays
    assert conn.receiver.rcvbuf.capacity == grown and conn.receiver.space.limit
    conn.configure(h.now, rcvbuf=32000)  # SO_RCVBUF: that size from now on, no more growth
    assert conn.receiver.rcvbuf.capacity == 32000 and not conn.receiver.space.limit
    h.peer.send(flags="PA", payload=b"x" * SEG)
    later = h.peer.expect(flags="A")
    assert _edge(later, conn) >= edges[-1]  # what was offered stays offered (RFC 7323 2.4)


def test_memory_pressure_stops_growth():
    h = Harness(window_scaling=True, delayed_ack=False, rcvbuf=8000, tcp_mem=1 << 20, tcp_mem_pressure=100_000)
    conn, _, ack = _open(h)
    h.layer.charge(200_000)  # held by other connections: above the soft level
    assert h.layer.under_pressure
    edges, got, sent = _rounds(h, conn, ack, 6)
    assert got == sent and conn.receiver.rcvbuf.capacity == 8000 and h.stats["tcp.rcvbuf_grown"] == 0
    h.layer.charge(-200_000)
    assert not h.layer.under_pressure
    _rounds(h, conn, _last_ack(h, conn), 3)
    assert conn.receiver.rcvbuf.capacity > 8000


def _last_ack(h: Harness, conn):
    h.peer.send(flags="PA", payload=b"y" * 100)
    seg = h.peer.expect(flags="A")
    assert conn.recv(100, now=h.now) == b"y" * 100
    return seg


def test_the_wscale_offered_covers_the_cap():
    assert TcpConfig().rcvbuf_ceiling == 6 << 20 and window_shift_for(6 << 20) == 7
    assert TcpConfig(rcvbuf_max=1 << 30).rcvbuf_ceiling == 1 << 30 and window_shift_for(1 << 30) == 14
    assert TcpConfig().derive(rcvbuf=1 << 20).rcvbuf_ceiling == 1 << 20  # explicit: no auto-tuning
    assert TcpConfig(rcvbuf_max=0).rcvbuf_ceiling == TcpConfig().rcvbuf
    for cap, ws in ((400_000, 3), (6 << 20, 7), (1 << 30, 14)):
        h = Harness(window_scaling=True, rcvbuf=64000, rcvbuf_max=cap)
        h.layer.connect(None, (h.peer.addr, h.peer.port), h.now)
        syn = h.peer.expect(flags="S")
        assert syn.hdr.wscale == ws and (cap >> ws) <= 0xFFFF or ws == 14


def test_receive_space_measures_once_per_rtt():
    s = ReceiveSpace(1 << 20)
    assert s.adjust(0, 64000, 1400, 0.05, 1.0, False) == 64000  # starts the measurement
    assert s.adjust(100_000, 64000, 1400, 0.05, 1.02, False) == 64000  # within the RTT: nothing
    assert s.adjust(100_000, 64000, 1400, 0.05, 1.05, False) == 200_000 + 16 * 1400
    assert s.adjust(150_000, 222_400, 1400, 0.05, 1.10, False) == 222_400  # 50_000 in that RTT: less than before
    assert s.adjust(600_000, 222_400, 1400, 0.05, 1.15, True) == 222_400  # pressure: no growth
    assert s.adjust(2_000_000, 222_400, 1400, 0.05, 1.20, False) == 1 << 20  # the cap
    s.measure_rtt(0, 64000, 2.0)
    s.measure_rtt(30_000, 64000, 2.01)  # the window not yet received: no sample
    assert s.rtt is None
    s.measure_rtt(64000, 64000, 2.03)
    assert abs(s.rtt - 0.03) < 1e-9
