"""Flow control and timers: persist / zero-window probes, window updates, silly-window avoidance on both
sides, Nagle and TCP_NODELAY, delayed ACK, window scaling, SACK blocks, keepalive, callbacks and info."""

from __future__ import annotations

import pytest

from tests.tcp.harness import Harness
from ustack.transport.tcp import State


def established(peer_win=65535, peer_mss=1460, **cfg):
    cfg.setdefault("delayed_ack", False)
    h = Harness(**cfg)
    conn = h.layer.connect(None, (h.peer.addr, h.peer.port), h.now)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S")
    h.advance(0.1)  # RTT 0.1 s: RTO 0.3 s
    h.peer.send(flags="SA", ack=syn.seq + 1, mss=peer_mss, win=peer_win)
    h.peer.expect(flags="A")
    return h, conn


# -- persist ---------------------------------------------------------------------

def test_zero_window_probes_back_off_and_never_give_up():
    h, conn = established(max_retries=3, persist_max=5.0)
    conn.send(b"0123456789", now=h.now)
    h.peer.expect(flags="PA", payload=b"0123456789")
    h.peer.ack(win=0)  # everything taken, window closed
    conn.send(b"abcdef", now=h.now)
    h.peer.expect_nothing()
    una = conn.tcb.snd_una
    rto = conn.info().rto
    gaps = []
    for _ in range(7):
        gaps.append(h.fire_next())
        h.peer.expect(flags="A", seq=una, payload=b"a")  # one octet past the window
        h.peer.rcv_nxt = una
        h.peer.ack(win=0)  # refused: RCV.NXT unchanged
    assert gaps == pytest.approx([min(rto * 2**i, 5.0) for i in range(7)])  # first probe after one RTO
    assert conn.state == State.ESTABLISHED and conn.info().timeouts == 0
    assert h.stats["tcp.window_probes"] == 7
    h.peer.ack(win=1000)  # the window opens: everything goes at once
    h.peer.expect(flags="PA", seq=una, payload=b"abcdef")
    h.peer.expect_nothing()


def test_probe_accepted_when_the_window_reopened_quietly():
    h, conn = established()
    h.peer.ack(win=0)
    conn.send(b"xyz", now=h.now)
    h.peer.expect_nothing()
    una = conn.tcb.snd_una
    h.fire_next()
    h.peer.expect(flags="A", seq=una, payload=b"x")
    h.peer.ack(ack=una + 1, win=100)  # the window update itself was lost, but the probe got through
    h.peer.expect(flags="PA", seq=una + 1, payload=b"yz")


def test_sender_sws_avoidance_and_override_timeout():
    h, conn = established()
    conn.send(b"q" * 2000, now=h.now)
    h.drain()
    h.peer.ack(win=300)  # a small window: 300 < max window / 2, and not all the data
    conn.send(b"r" * 1000, now=h.now)
    h.peer.expect_nothing()
    assert h.fire_next() == pytest.approx(conn.info().rto)  # the override timeout sends what fits
    h.peer.expect(flags="A", length=300)


# -- receive window ----------------------------------------------------------------

def test_window_update_after_the_application_reads():
    h, conn = established(rcvbuf=4000)
    h.peer.send(flags="PA", payload=b"1" * 1460)
    h.peer.expect(flags="A", win=4000 - 1460)
    h.peer.send(flags="PA", payload=b"2" * 1460)
    h.peer.send(flags="PA", payload=b"3" * 1080)
    h.peer.expect(flags="A", win=4000 - 2920)
    h.peer.expect(flags="A", win=0)
    conn.recv(1000, now=h.now)
    h.peer.expect_nothing()  # 1000 < min(RCV.BUFF/2, MSS): not worth announcing (receiver SWS)
    conn.recv(1000, now=h.now)
    h.peer.expect(flags="A", ack=1001 + 4000, win=2000)


def test_right_edge_moves_only_by_useful_amounts():
    h, conn = established(rcvbuf=4000)
    h.peer.send(flags="PA", payload=b"a" * 100)
    h.peer.expect(flags="A", win=3900)
    conn.recv(100)
    h.peer.send(flags="PA", payload=b"b" * 100)
    h.peer.expect(flags="A", win=3800)  # the right edge stays put: 100 freed bytes are too few
    conn.recv(100)
    h.peer.send(flags="PA", payload=b"c" * 1400)
    h.peer.expect(flags="A", win=2400)  # 200 freed: the edge still stays
    assert conn.recv(2000) == b"c" * 1400
    h.peer.expect_nothing()  # 2400 still offered, more than half the buffer: no update needed
    h.peer.send(flags="PA", payload=b"d" * 10)
    h.peer.expect(flags="A", win=4000 - 10)  # 1600 freed >= MSS: the edge moves


def test_window_scaling_both_ways():
    h, conn = established(window_scaling=True, rcvbuf=1 << 20)  # peer offers no scaling
    assert conn.tcb.rcv_wscale == 0
    h2 = Harness(delayed_ack=False, window_scaling=True, rcvbuf=1 << 20, rcvbuf_auto=False)  # a fixed 1 MiB
    c2 = h2.layer.connect(None, (h2.peer.addr, h2.peer.port), h2.now)
    h2.peer.local_port = c2.local_port
    syn = h2.peer.expect(flags="S", wscale=5, win=65535)
    h2.peer.send(flags="SA", ack=syn.seq + 1, mss=1460, win=4, wscale=10)
    h2.peer.expect(flags="A", win=(1 << 20) >> 5)
    h2.peer.ack(win=3)  # 3 << 10 = 3072 bytes
    assert c2.tcb.snd_wnd == 3072
    c2.send(b"w" * 5000, now=h2.now)
    assert [len(s.payload) for s in h2.drain()] == [1460, 1460]  # 152 more would be a silly window
    h2.peer.send(flags="PA", payload=b"v" * 3200, win=3)
    h2.peer.expect(flags="A", win=((1 << 20) - 3200 + 31) >> 5)  # rounded up, never shrinking


# -- Nagle ---------------------------------------------------------------------------

def test_nagle_coalesces_small_writes():
    h, conn = established()
    conn.send(b"a", now=h.now)
    first = h.peer.expect(flags="PA", payload=b"a")  # nothing outstanding: goes at once
    conn.send(b"b", now=h.now)
    conn.send(b"c", now=h.now)
    h.peer.expect_nothing()
    conn.send(b"F" * 1460, now=h.now)  # a full segment is never held
    h.peer.expect(flags="A", seq=first.seq + 1, payload=b"bc" + b"F" * 1458)
    h.peer.expect_nothing()
    h.peer.ack()
    h.peer.expect(flags="PA", payload=b"FF")


def test_nodelay_sends_every_write():
    h, conn = established(nodelay=True)
    for ch in b"abc":
        conn.send(bytes([ch]), now=h.now)
    assert [s.payload for s in h.drain()] == [b"a", b"b", b"c"]
    conn.nodelay = False
    conn.send(b"d", now=h.now)
    conn.send(b"e", now=h.now)
    h.peer.expect_nothing()
    conn.nodelay = True
    h.layer.flush(h.now)
    h.peer.expect(flags="PA", payload=b"de")


def test_dirty_connections_flush_on_layer_flush():
    h, conn = established()
    conn.send(b"queued")
    h.peer.expect_nothing()
    h.layer.flush(h.now)
    h.peer.expect(flags="PA", payload=b"queued")


# -- delayed ACK ------------------------------------------------------------------------

def test_delayed_ack_every_second_full_segment_and_timeout():
    h, conn = established(delayed_ack=True, delack_timeout=0.04, max_quickacks=0)  # no quick-ACK mode
    h.peer.send(flags="A", payload=b"1" * 1460)
    h.peer.expect_nothing()
    h.peer.send(flags="A", payload=b"2" * 1460)
    h.peer.expect(flags="A", ack=1001 + 2920)  # second full-sized segment
    h.peer.send(flags="PA", payload=b"small")
    h.peer.expect_nothing()
    assert h.fire_next() == pytest.approx(0.04)
    h.peer.expect(flags="A", ack=1001 + 2925)


def test_delayed_ack_rides_on_data():
    h, conn = established(delayed_ack=True, max_quickacks=0)  # no quick-ACK mode
    h.peer.send(flags="PA", payload=b"question")
    h.peer.expect_nothing()
    conn.send(b"answer", now=h.now)
    h.peer.expect(flags="PA", ack=1009, payload=b"answer")
    h.peer.ack()
    h.advance(1.0)
    h.peer.expect_nothing()  # the timer was cancelled


def test_out_of_order_and_gap_filling_are_acked_at_once():
    h, conn = established(delayed_ack=True)
    h.peer.send(flags="A", seq=1101, payload=b"b" * 100, advance=False)
    h.peer.expect(flags="A", ack=1001)
    h.peer.send(flags="A", seq=1001, payload=b"a" * 100, advance=False)
    h.peer.expect(flags="A", ack=1201)
    assert conn.recv(300) == b"a" * 100 + b"b" * 100


# -- SACK blocks --------------------------------------------------------------------------

def test_sack_blocks_describe_out_of_order_data():
    h = Harness(delayed_ack=False, sack=True)
    conn = h.layer.connect(None, (h.peer.addr, h.peer.port), h.now)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S", sack_permitted=True)
    h.peer.send(flags="SA", ack=syn.seq + 1, sack_perm=True)
    h.peer.expect(flags="A")
    h.peer.send(flags="A", seq=1201, payload=b"c" * 100, advance=False)
    h.peer.expect(flags="A", ack=1001, sack_blocks=((1201, 1301),))
    h.peer.send(flags="A", seq=1401, payload=b"e" * 100, advance=False)
    h.peer.expect(flags="A", ack=1001, sack_blocks=((1401, 1501), (1201, 1301)))  # most recent first
    h.peer.send(flags="A", seq=1101, payload=b"b" * 100, advance=False)
    h.peer.expect(flags="A", ack=1001, sack_blocks=((1101, 1301), (1401, 1501)))
    h.peer.send(flags="A", seq=1001, payload=b"a" * 100, advance=False)
    h.peer.expect(flags="A", ack=1301, sack_blocks=((1401, 1501),))
    assert conn.info().ooo_bytes == 100


# -- keepalive -------------------------------------------------------------------------------

def test_keepalive_probes_and_timeout():
    h, conn = established(keepalive=True, keepidle=10.0, keepintvl=2.0, keepcnt=3)
    una = conn.tcb.snd_una
    h.advance(9.9)
    h.peer.expect_nothing()
    h.advance(0.2)
    h.peer.expect(flags="A", seq=una - 1, ack=1001, length=0)
    h.peer.ack()  # alive: the idle period starts again
    h.advance(9.9)
    h.peer.expect_nothing()
    h.advance(0.1)
    h.peer.expect(flags="A", seq=una - 1)
    for _ in range(2):
        assert h.fire_next() == pytest.approx(2.0)
        h.peer.expect(flags="A", seq=una - 1)
    h.fire_next()
    h.peer.expect(flags="RA")
    assert conn.state == State.CLOSED and isinstance(conn.error, TimeoutError)


def test_keepalive_off_by_default():
    h, conn = established()
    h.advance(10000.0)
    h.peer.expect_nothing()
    assert h.timers.next_deadline() is None


# -- callbacks and info -------------------------------------------------------------------------

def test_water_mark_callbacks_and_events():
    h, conn = established(sndbuf=10000, rcvbuf=10000, send_low_water=1000, recv_high_water=3000)
    low, high, events = [], [], []
    conn.on_send_low_water = lambda c: low.append(len(c.sender.sndbuf))
    conn.on_recv_high_water = lambda c: high.append(len(c.receiver.rcvbuf))
    conn.on_event = lambda c: events.append(c.state)
    assert conn.send(b"s" * 12000, now=h.now) == 10000
    assert not conn.writable or conn.sender.sndbuf.free == 0
    h.drain()
    h.peer.ack(ack=conn.tcb.snd_una + 4380)
    assert low == []
    h.drain()
    h.peer.ack(ack=conn.tcb.snd_max)
    h.drain()
    h.peer.ack(ack=conn.tcb.snd_max)
    assert low and low[0] <= 1000
    for _ in range(3):
        h.peer.send(flags="PA", payload=b"r" * 1000)
    assert high == [3000] and events and conn.readable


def test_info_snapshot():
    h, conn = established(sndbuf=50000)
    conn.send(b"i" * 20000, now=h.now)
    h.drain()
    info = conn.info()
    assert info.state == "ESTABLISHED" and info.remote == (h.peer.addr, h.peer.port)
    assert info.bytes_in_flight == 4380 and info.send_queue == 20000 and info.unsent == 20000 - 4380
    assert info.cwnd == 4380 and info.srtt == pytest.approx(0.1) and info.rto == pytest.approx(0.3)
    assert info.snd_wnd == 65535 and info.rcv_wnd == 64000 and info.congestion == "cubic"
    h.peer.send(flags="PA", payload=b"in")
    info = conn.info()
    assert info.recv_queue == 2 and info.bytes_received == 2 and info.segs_in == 2


def test_unanswered_zero_window_probes_give_up():
    h, conn = established(max_retries=3, persist_max=5.0)
    h.peer.ack(win=0)
    conn.send(b"abc", now=h.now)
    for _ in range(3):
        h.fire_next()
        h.peer.expect(flags="A", length=1)  # the peer has gone silent
    h.fire_next()
    h.peer.expect_nothing()
    assert conn.state == State.CLOSED and isinstance(conn.error, TimeoutError)
