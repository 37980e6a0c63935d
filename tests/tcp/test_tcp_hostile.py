"""Hostile peers against TCP (issue 12): TIME-WAIT pinned by forged FINs, SYN-cookie ACKs
without a recent overflow, the challenge-ACK budget, orphans and limits."""

from __future__ import annotations

import errno

import pytest

from tests.tcp.harness import LOCAL, PEER, Harness, Peer
from ustack.transport.tcp import State
from ustack.transport.tcp.isn import COOKIE_PERIOD, KeyedHash
from ustack.transport.tcp.limits import ChallengeAckBudget
from ustack.transport.tcp.syncookies import COOKIE_VALID, SynCookies


def _time_wait(h: Harness):
    conn = h.open_active()
    conn.close(now=h.now)
    fin = h.peer.expect(flags="FA")
    h.peer.send(flags="FA", ack=fin.seq + 1)
    h.peer.expect(flags="A", ack=1002)
    assert conn.state == State.TIME_WAIT
    return conn, fin


def test_out_of_window_fins_do_not_restart_time_wait_and_draw_rate_limited_acks():
    h = Harness(delayed_ack=False, msl=10.0)
    conn, fin = _time_wait(h)
    # Forged FINs far out of window, every 100 ms for 25 s (longer than 2 MSL = 20 s).
    acks = 0
    for i in range(250):
        h.advance(0.1)
        if conn.state != State.TIME_WAIT:
            break
        h.peer.send(flags="FA", seq=1002 + 100_000 + i, ack=fin.seq + 1, advance=False)
        acks += len(h.drain())
    assert conn.state == State.CLOSED and conn.key not in h.layer.connections
    assert 20.0 <= h.now - 100.0 <= 21.0  # closed on the first 2 MSL, not restarted
    # At most one ACK per 500 ms (Linux tcp_invalid_ratelimit), not one per FIN.
    assert 30 <= acks <= 41, acks
    assert h.stats["drop.tcp.time_wait_unacceptable"] >= 190
    assert h.stats["tcp.invalid_ack_ratelimited"] >= 150


def test_retransmitted_fin_in_time_wait_still_restarts_and_is_acked_at_once():
    h = Harness(delayed_ack=False, msl=10.0)
    conn, fin = _time_wait(h)
    h.advance(15.0)
    for _ in range(3):  # each retransmission of the peer's FIN is ACKed, none throttled
        h.peer.send(flags="FA", seq=1001, ack=fin.seq + 1, advance=False)
        h.peer.expect(flags="A", seq=fin.seq + 1, ack=1002)
    h.advance(19.9)
    assert conn.state == State.TIME_WAIT
    h.advance(0.2)
    assert conn.state == State.CLOSED


# -- SYN cookies only after a recent overflow, with rotating keys (RFC 4987 3.6) ---------------

def test_cookie_ack_is_not_accepted_by_a_listener_that_sent_no_cookie():
    h = Harness(syn_backlog=1)
    lst = h.layer.listen((LOCAL, 80), 5)
    # A blind attacker who could compute a cookie (say, it learned the old fixed derivation from
    # the ISN secret) opens nothing: this listener never sent cookies.
    keyed = KeyedHash(h.host.isn_secret)
    cookie = keyed.make_cookie(LOCAL, 80, PEER, 5002, 100, 6, h.now)
    attacker = Peer(h, port=5002)
    attacker.send(flags="A", seq=101, ack=cookie + 1)
    assert h.pop().flag_str == "R"
    assert lst.accept() is None and h.stats["tcp.syncookies_accepted"] == 0
    assert h.stats["tcp.syncookie_not_expected"] == 1 and h.stats["drop.tcp.listen_bad_ack"] == 1
    # Even right after an overflow the derivable cookie is worthless: the keys are random.
    _ = _listener_with_full_syn_queue_on(h, lst)
    attacker.send(flags="A", seq=101, ack=cookie + 1)
    assert h.pop().flag_str == "R" and lst.accept() is None
    assert h.stats["drop.tcp.syncookie_bad"] == 1


def _listener_with_full_syn_queue_on(h: Harness, lst):
    h.peer.send(flags="S")
    h.pop()
    p = Peer(h, port=5009)
    p.send(flags="S", seq=300)
    return h.pop()  # a cookie SYN-ACK


def test_cookie_acks_checked_only_within_the_window_after_the_last_cookie():
    h = Harness(syn_backlog=1)
    lst = h.layer.listen((LOCAL, 80), 5)
    cookie = _listener_with_full_syn_queue_on(h, lst)
    assert cookie.flag_str == "SA" and h.stats["tcp.syncookies_sent"] == 1
    h.advance(COOKIE_VALID + 1)
    h.drain()  # the half-open connection's SYN-ACK retransmissions
    p = Peer(h, port=5002)
    p.send(flags="A", seq=4242, ack=0x12345678)
    assert h.pop().flag_str == "R" and h.stats["tcp.syncookie_not_expected"] == 1
    assert h.stats["drop.tcp.syncookie_bad"] == 0


def test_cookie_keys_rotate_current_and_previous_kept():
    cookies = SynCookies(bytes(range(16)))
    c = cookies.make(LOCAL, 80, PEER, 5000, 777, 3, 1000.0)
    assert cookies.check(LOCAL, 80, PEER, 5000, 777, c, 1000.0) == 3
    assert cookies.check(LOCAL, 80, PEER, 5000, 777, c, 1000.0 + COOKIE_PERIOD) == 3  # previous key kept
    # A cookie made one period later rotates the key; two periods on, the first key is gone.
    cookies.make(LOCAL, 80, PEER, 5001, 1, 0, 1000.0 + COOKIE_PERIOD)
    cookies.make(LOCAL, 80, PEER, 5001, 1, 0, 1000.0 + 2 * COOKIE_PERIOD)
    assert cookies.rotations == 3
    assert cookies.check(LOCAL, 80, PEER, 5000, 777, c, 1000.0 + COOKIE_PERIOD) is None
    # Two layers with the same ISN secret do not share cookie keys (fresh randomness per period).
    other = SynCookies(bytes(range(16)))
    assert other.check(LOCAL, 80, PEER, 5000, 777, c, 1000.0) is None


# -- the layer-wide challenge-ACK budget is randomized (CVE-2016-5696) --------------------------

def test_challenge_ack_budget_varies_per_second_around_the_limit():
    budget = ChallengeAckBudget(100, bytes(16))
    per_second = []
    for second in range(50):
        n = 0
        while budget.take(1000.0 + second + n * 1e-6):
            n += 1
        per_second.append(n)
    assert all(50 <= n < 150 for n in per_second)
    assert len(set(per_second)) > 10  # not a fixed count an off-path attacker can subtract


def test_layer_challenge_budget_comes_from_config_and_is_not_the_fixed_limit():
    h = Harness(delayed_ack=False, challenge_ack_limit=4)
    conns = []
    for port in range(5000, 5012):
        h.peer = Peer(h, port=port)
        conns.append((h.peer, h.open_active()))
    h.drain()
    for peer, _ in conns:
        peer.send(flags="R", seq=1500, advance=False)
    sent = len(h.drain())
    assert 2 <= sent <= 5 and h.stats["tcp.challenge_acks_suppressed"] == 12 - sent


# -- orphans, and the connection cap (Linux tcp_orphan_retries / tcp_max_orphans) ----------------

def _orphan_under_zero_window(h: Harness, peer: Peer | None = None):
    """A connection with 2000 unsent bytes behind a zero window, then closed by the user."""
    conn = h.open_active()
    conn.send(b"x" * 1000, now=h.now)
    h.peer.expect(flags="PA", length=1000)
    h.peer.ack(win=0)  # took it all, and will never read again
    conn.send(b"y" * 2000, now=h.now)
    conn.close(now=h.now)
    assert conn.state == State.FIN_WAIT_1 and conn.orphaned
    return conn


def test_orphan_behind_a_zero_window_is_reset_after_orphan_retries():
    h = Harness(delayed_ack=False, orphan_retries=4, persist_max=5.0)
    conn = _orphan_under_zero_window(h)
    orphans_at_close = h.layer.orphans
    una = conn.tcb.snd_una
    probes = 0
    for _ in range(30):  # each probe answered at once with a zero window: the peer is alive but never reads
        h.fire_next()
        out = h.drain()
        if conn.state == State.CLOSED:
            assert out[-1].flag_str in ("R", "RA") and out[-1].seq == conn.tcb.snd_max
            break
        assert out[-1].payload == b"y" and out[-1].seq == una
        probes += 1
        h.peer.rcv_nxt = una
        h.peer.ack(win=0)
    assert conn.state == State.CLOSED and conn.key not in h.layer.connections
    assert probes == 4 and orphans_at_close == 1 and h.layer.orphans == 0
    assert h.stats["tcp.orphan_retries_exceeded"] == 1
    assert len(conn.sender.sndbuf) == 0  # its data is freed with it


def test_orphan_that_makes_progress_keeps_its_retries():
    h = Harness(delayed_ack=False, orphan_retries=2, persist_max=5.0)
    conn = _orphan_under_zero_window(h)
    una = conn.tcb.snd_una
    for i in range(6):  # the peer reads one byte per probe: slow, but progress
        h.fire_next()
        h.drain()
        una += 1
        h.peer.rcv_nxt = una
        h.peer.ack(win=0)
    assert conn.state == State.FIN_WAIT_1 and h.stats["tcp.orphan_retries_exceeded"] == 0


def test_orphans_beyond_max_orphans_are_reset_at_once():
    h = Harness(delayed_ack=False, max_orphans=1)
    first = _orphan_under_zero_window(h)
    h.peer = Peer(h, port=5001)
    second = h.open_active()
    second.send(b"z" * 100, now=h.now)
    h.drain()
    second.close(now=h.now)
    rst = h.drain()[-1]  # after its FIN, as Linux's tcp_close does when tcp_check_oom says so
    assert rst.flag_str in ("R", "RA") and rst.hdr.dst_port == 5001
    assert second.state == State.CLOSED and second.key not in h.layer.connections
    assert first.state == State.FIN_WAIT_1 and h.layer.orphans == 1
    assert h.stats["tcp.orphans_over_limit"] == 1


def test_connection_cap_refuses_syns_and_active_opens():
    h = Harness(delayed_ack=False, max_connections=2)
    lst = h.layer.listen((LOCAL, 80), 8)
    h.peer.send(flags="S", seq=100)
    assert h.pop().flag_str == "SA"
    Peer(h, port=5001).send(flags="S", seq=200)
    assert h.pop().flag_str == "SA"
    assert len(h.layer.connections) == 2 and lst.half_open == 2
    Peer(h, port=5002).send(flags="S", seq=300)
    h.peer.expect_nothing()
    assert h.stats["drop.tcp.conn_limit"] == 1 and len(h.layer.connections) == 2
    with pytest.raises(OSError) as e:
        h.layer.connect(None, (PEER, 9999), h.now)
    assert e.value.errno == errno.ENOBUFS and h.stats["tcp.conn_limit_active"] == 1


# -- the layer's memory budget (Linux tcp_mem) ---------------------------------------------------

def test_data_beyond_the_memory_budget_is_dropped_and_the_window_stops_opening():
    h = Harness(delayed_ack=False, tcp_mem=3000, tcp_mem_pressure=3000)  # the hard level alone
    conn = h.open_active()
    h.peer.send(flags="PA", payload=b"a" * 2000)
    ack = h.peer.expect(flags="A", ack=3001)
    edge = ack.ack + (ack.hdr.window << conn.tcb.rcv_wscale)
    assert h.layer.mem_used == 2000
    h.peer.send(flags="PA", payload=b"b" * 2000)  # in the window, but beyond the budget
    h.peer.expect(flags="A", ack=3001)  # not taken: the peer will send it again
    assert h.stats["drop.tcp.mem_pressure"] == 1 and h.layer.mem_used == 2000
    h.peer.snd_nxt = 3001
    h.peer.send(flags="PA", payload=b"c" * 1000)  # what still fits is taken
    ack = h.peer.expect(flags="A", ack=4001)
    assert ack.ack + (ack.hdr.window << conn.tcb.rcv_wscale) <= edge  # the right edge did not move on
    assert h.layer.mem_used == 3000
    assert conn.recv(5000, now=h.now) == b"a" * 2000 + b"c" * 1000
    assert h.layer.mem_used == 0
    h.peer.send(flags="PA", payload=b"d" * 2000)
    h.peer.expect(flags="A", ack=6001)
    assert conn.recv(5000, now=h.now) == b"d" * 2000 and h.stats["drop.tcp.mem_pressure"] == 1


def test_memory_budget_counts_send_buffers_and_frees_with_the_connection():
    h = Harness(delayed_ack=False, tcp_mem=5000, tcp_mem_pressure=5000)  # the hard level alone
    conn = h.open_active()
    assert conn.send(b"s" * 4000, now=h.now) == 4000
    assert h.layer.mem_used == 4000
    assert conn.send(b"t" * 4000, now=h.now) == 1000  # only what the budget still holds
    assert h.stats["tcp.mem_pressure_send"] == 1
    conn.abort(now=h.now)
    assert h.layer.mem_used == 0


def test_bare_ack_in_time_wait_draws_nothing():
    h = Harness(delayed_ack=False, msl=10.0)
    conn, fin = _time_wait(h)
    h.peer.send(flags="A", seq=1002, ack=fin.seq + 1, advance=False)
    h.peer.expect_nothing()
    assert conn.state == State.TIME_WAIT and h.stats["drop.tcp.time_wait_unacceptable"] == 0


# -- TS.Recent is not planted by a segment whose ACK is refused -----------------------------------

def test_forged_ack_at_the_left_edge_does_not_plant_its_timestamp():
    """The inject flood's informed ACKs: seq = RCV.NXT (in window), ack beyond SND.NXT, a huge TSval.
    RFC 5961 5.2 drops the segment; TS.Recent must not take its TSval either, or every later
    segment of the real peer fails PAWS (RFC 7323 5.3) and the connection stalls."""
    from tests.tcp.test_tcp_acceptability import ts_established

    h, conn = ts_established()
    h.peer.ts_clock = 6000
    h.peer.send(flags="PA", payload=b"real")
    h.peer.expect(flags="A", ack=1005)
    assert conn.tcb.ts_recent == 6000
    h.peer.send(flags="A", ack=conn.tcb.snd_nxt + 100_000, ts=(0x7FFF0000, 0), advance=False)
    h.peer.expect(flags="A", ack=1005)  # RFC 5961 5.2: drop it, ACK what we have
    assert h.stats["drop.tcp.ack_unsent"] == 1
    assert conn.tcb.ts_recent == 6000
    h.peer.ts_clock = 6001
    h.peer.send(flags="PA", payload=b"still")
    h.peer.expect(flags="A", ack=1010)
    assert conn.recv(100, now=h.now) == b"realstill" and h.stats["drop.tcp.paws"] == 0
