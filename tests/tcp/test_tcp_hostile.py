"""Hostile peers against TCP (issue 12): TIME-WAIT pinned by forged FINs, SYN-cookie ACKs
without a recent overflow, the challenge-ACK budget, orphans and limits."""

from __future__ import annotations

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
    assert h.stats["tcp.oow_acks_suppressed"] >= 150


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
