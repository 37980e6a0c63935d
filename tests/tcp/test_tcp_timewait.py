"""TIME-WAIT as a light record (transport/tcp/timewait.py): what it keeps, what it answers, its bound."""

from __future__ import annotations

import gc

from tests.tcp.harness import Harness
from ustack.transport.tcp.tcb import State
from ustack.transport.tcp.timewait import TimeWait


def _time_wait(h: Harness, **peer_options):
    conn = h.open_active(peer_options=peer_options or None)
    conn.close(now=h.now)
    fin = h.peer.expect(flags="FA")
    h.peer.send(flags="FA", ack=fin.seq + 1)
    ack = h.peer.expect(flags="A", seq=fin.seq + 1, ack=1002)
    assert conn.state == State.TIME_WAIT
    return conn, fin, ack


def test_the_connection_gives_way_to_a_record_out_of_the_flow_table():
    h = Harness(delayed_ack=False, msl=10.0)
    conn, fin, _ = _time_wait(h)
    key = conn.key
    rec = h.layer.connections[key]
    assert type(rec) is TimeWait and h.layer.time_wait == {key: rec}
    assert h.layer.flows.lookup(*key) is None and len(h.layer.flows) == 0  # the C fast path cannot see it
    assert rec.rcv_nxt == 1002 and rec.snd_nxt == fin.seq + 1 and rec.deadline == h.now + 20.0
    assert rec.info().state == "TIME_WAIT" and rec.info().rcv_nxt == 1002  # snapshot / `ustack stats`
    # The record holds the application's connection weakly: once dropped (and the stale heap entries
    # of its cancelled timers have surfaced), it is freed.
    del conn
    h.advance(5.0)
    gc.collect()
    assert rec.owner() is None
    h.advance(20.0)
    assert not h.layer.connections and not h.layer.time_wait and h.timers.live == 0


def test_acks_from_the_record_carry_the_window_and_timestamps_of_the_connection():
    h = Harness(delayed_ack=False, msl=10.0, timestamps=True)
    h.peer.use_ts = True
    conn, fin, first = _time_wait(h, ts=(h.peer.ts_clock, 0))
    h.advance(1.0)
    h.peer.ts_clock += 1000
    h.peer.send(flags="FA", seq=1001, ack=fin.seq + 1, advance=False)  # our ACK was lost
    again = h.peer.expect(flags="A", seq=fin.seq + 1, ack=1002, win=first.window)
    assert again.timestamps[0] == (first.timestamps[0] + 1000) & 0xFFFFFFFF  # our clock ran 1 s
    assert again.timestamps[1] == first.timestamps[1]  # TS.Recent is not moved in TIME-WAIT (as before)
    # PAWS: an older TSval is dropped and answered with an ACK.
    h.peer.ts_clock = first.timestamps[1] - 1
    h.peer.send(flags="A", seq=1002, ack=fin.seq + 1, advance=False)
    h.peer.expect(flags="A", ack=1002)
    assert h.stats["drop.tcp.paws"] == 1 and conn.state == State.TIME_WAIT


def test_rst_in_window_but_not_exact_draws_a_challenge_ack_and_keeps_time_wait():
    h = Harness(delayed_ack=False, msl=10.0)
    conn, fin, _ = _time_wait(h)
    h.peer.send(flags="R", seq=1002 + 100, advance=False)
    h.peer.expect(flags="A", seq=fin.seq + 1, ack=1002)
    assert h.stats["drop.tcp.rst_not_exact"] == 1 and conn.state == State.TIME_WAIT
    h.peer.send(flags="R", seq=1002 + 10_000_000, advance=False)
    h.peer.expect_nothing()
    assert h.stats["drop.tcp.rst_out_of_window"] == 1 and conn.state == State.TIME_WAIT


def test_aborting_the_connection_in_time_wait_deletes_the_record():
    h = Harness(delayed_ack=False, msl=10.0)
    conn, _, _ = _time_wait(h)
    conn.abort(now=h.now)
    h.peer.expect_nothing()
    assert conn.state == State.CLOSED and not h.layer.connections and not h.layer.time_wait


def test_beyond_max_time_wait_the_oldest_record_ends():
    h = Harness(delayed_ack=False, msl=10.0, max_time_wait=1)
    first, _, _ = _time_wait(h)
    h.peer.port = 5001
    second, _, _ = _time_wait(h)
    assert first.state == State.CLOSED and second.state == State.TIME_WAIT
    assert list(h.layer.time_wait) == [second.key] and first.key not in h.layer.connections
    assert h.stats["tcp.time_wait_overflow"] == 1


def test_max_time_wait_zero_keeps_no_record_but_still_acks_the_fin():
    h = Harness(delayed_ack=False, max_time_wait=0)
    conn = h.open_active()
    conn.close(now=h.now)
    fin = h.peer.expect(flags="FA")
    h.peer.send(flags="FA", ack=fin.seq + 1)
    h.peer.expect(flags="A", seq=fin.seq + 1, ack=1002)
    assert conn.state == State.CLOSED and not h.layer.connections
    assert h.stats["tcp.time_wait_overflow"] == 1


def test_between_two_stacks_the_record_sends_through_the_fast_emitter_and_hears_the_peer():
    """Over the pipe: the active closer keeps a record; its ACK (written by the host's C emitter) reaches
    the peer, whose connection is gone (its listener answers): the RST (SEQ = our ACK field = RCV.NXT) ends TIME-WAIT,
    as it did before (no RFC 1337 protection), found by the Python demux since the flow table has no entry."""
    from tests.stack.netsim import Net
    from ustack.net.addr import ANY4, parse

    with Net() as net:
        lst = net.a.tcp.listen((ANY4, 80), 8)
        client = net.b.tcp.connect(None, (parse("198.18.0.1"), 80), net.clock.now)
        assert net.run(until=lambda: lst.pending)
        server = lst.accept()
        client.close(now=net.clock.now)
        assert net.run(until=lambda: server.state == State.CLOSE_WAIT)
        server.close(now=net.clock.now)
        assert net.run(until=lambda: server.state == State.CLOSED and client.state == State.TIME_WAIT)
        rec = net.b.tcp.connections[client.key]
        assert type(rec) is TimeWait and net.b.tcp.flows.lookup(*client.key) is None
        out = net.b.stats["tcp.out_segs"]
        rec.send_ack(net.clock.now)
        assert net.b.stats["tcp.out_segs"] == out + 1
        assert net.run(until=lambda: client.state == State.CLOSED, max_time=1.0)
        assert net.a.stats["drop.tcp.listen_bad_ack"] == 1 and net.b.stats["tcp.resets_received"] == 1
        assert not net.b.tcp.connections and not net.b.tcp.time_wait
