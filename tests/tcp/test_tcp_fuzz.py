"""Robustness: random segments, user calls and time steps against every kind of connection.
Nothing may raise, every emitted segment must parse, and the TCB's invariants must hold."""

from __future__ import annotations

import socket

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tcp.harness import LOCAL, Harness
from ustack.transport.tcp import State
from ustack.transport.tcp.seq import seq_diff, seq_ge, seq_le
from ustack.wire.tcp import TcpHeader

# Mostly meaningful flag combinations (ACK, data, FIN, RST, SYN), sometimes any byte.
_flags = st.one_of(st.sampled_from([0x10, 0x18, 0x10, 0x11, 0x19, 0x04, 0x14, 0x02, 0x12]), st.integers(0, 0xFF))
_abs = st.integers(0, 0xFFFFFFFF).map(lambda v: ("abs", v))
_seq_rel = st.one_of(st.just(0), st.integers(-3000, 3000), st.integers(-70000, 70000), _abs)
_ack_rel = st.one_of(st.just(0), st.sampled_from([1000 * i for i in range(1, 7)]), st.integers(-70000, 70000), _abs)
_segment = st.tuples(
    st.just("seg"), _flags, _seq_rel, _ack_rel, st.integers(0, 0xFFFF), st.integers(0, 3000),
    st.none() | st.integers(0, 0xFFFF), st.none() | st.integers(0, 20), st.booleans(),
    st.none() | st.tuples(st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFFFFFF)),
    st.lists(st.tuples(st.integers(-3000, 70000), st.integers(-10, 5000)), max_size=3),
)
_user = st.tuples(st.just("user"), st.sampled_from(["send", "recv", "shut_wr", "shut_rd", "close", "abort",
                                                     "nodelay", "bigread"]), st.integers(0, 100_000))
_time = st.tuples(st.just("time"), st.floats(0.0, 30.0))
_actions = st.lists(st.one_of(_segment, _segment, _segment, _user, _time), min_size=3, max_size=40)


def _rel(base: int, v) -> int:
    if isinstance(v, tuple):
        return v[1]
    return (base + v) & 0xFFFFFFFF


def _check(h: Harness, conn) -> None:
    for src, dst, data in h.host.out:
        hdr = TcpHeader.parse(data, src, dst)  # valid checksum and options
        assert hdr.header_len <= len(data)
    h.host.out.clear()
    if conn is None or conn.state == State.CLOSED:
        return
    tcb = conn.tcb
    if conn.state not in (State.SYN_SENT,):
        assert seq_le(tcb.snd_una, tcb.snd_nxt) and seq_le(tcb.snd_nxt, tcb.snd_max)
        assert seq_diff(tcb.snd_max, tcb.snd_una) <= len(conn.sender.sndbuf) + 2
        assert seq_ge(tcb.rcv_adv, tcb.rcv_nxt) or conn.state == State.SYN_RECEIVED
    assert len(conn.sender.sndbuf) <= conn.sender.sndbuf.capacity
    assert conn.receiver.rcvbuf.ooo_bytes <= conn.receiver.rcvbuf.capacity + (1 << 14)


def _run(h: Harness, conn, actions, extra_conns=lambda: []) -> None:
    for action in actions:
        kind = action[0]
        if kind == "seg":
            _, flags, seq_rel, ack_rel, win, plen, mss, ws, sackp, ts, blocks = action
            target = conn if conn is not None and conn.state != State.CLOSED else None
            base_seq = target.tcb.rcv_nxt if target is not None else 1000
            base_ack = target.tcb.snd_una if target is not None else 0
            sack = [((base_ack + lo) & 0xFFFFFFFF, (base_ack + lo + n) & 0xFFFFFFFF) for lo, n in blocks]
            if ts and sack:
                sack = sack[:3]
            if mss is not None or ws is not None:
                sack = sack[:2]
            h.peer.send(flags=flags, seq=_rel(base_seq, seq_rel), ack=_rel(base_ack, ack_rel), win=win,
                        payload=bytes(plen), mss=mss, wscale=ws, sack_perm=sackp, ts=ts if ts else False,
                        sack=sack, advance=False)
        elif kind == "time":
            h.advance(action[1])
        elif conn is not None:
            _, what, n = action
            try:
                if what == "send":
                    conn.send(b"s" * n)
                elif what == "recv":
                    conn.recv(n)
                elif what == "bigread":
                    buf = bytearray(n)
                    conn.recv_into(buf)
                elif what == "shut_wr":
                    conn.shutdown(socket.SHUT_WR)
                elif what == "shut_rd":
                    conn.shutdown(socket.SHUT_RD)
                elif what == "close":
                    conn.close()
                elif what == "abort":
                    conn.abort()
                elif what == "nodelay":
                    conn.nodelay = not conn.nodelay
            except OSError:
                pass  # errors a socket would report (reset, broken pipe...) are fine
            h.layer.flush(h.now)
        _check(h, conn)
        for c in extra_conns():
            _check(h, c)
    h.advance(400.0)  # every timer runs out
    _check(h, conn)


_settings = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_options = st.fixed_dictionaries({"timestamps": st.booleans(), "window_scaling": st.booleans(),
                                  "sack": st.booleans(), "delayed_ack": st.booleans(),
                                  "rcvbuf": st.sampled_from([2000, 64000, 300000])})


@_settings
@given(_options, _actions)
def test_fuzz_established_active(opts, actions):
    h = Harness(**opts)
    conn = h.open_active(peer_win=30000, peer_mss=1000, peer_options=dict(sack_perm=True, wscale=2))
    for _ in range(6):  # some data in flight, so ACKs and SACK blocks have something to act on
        conn.send(b"d" * 1000, now=h.now)
    _run(h, conn, actions)


@_settings
@given(_options, _actions)
def test_fuzz_syn_sent(opts, actions):
    h = Harness(**opts)
    conn = h.layer.connect(None, (h.peer.addr, h.peer.port), h.now)
    h.peer.local_port = conn.local_port
    _run(h, conn, actions)


@_settings
@given(_options, st.integers(0, 2), _actions)
def test_fuzz_listener(opts, syn_backlog, actions):
    h = Harness(syn_backlog=syn_backlog, **opts)
    lst = h.layer.listen((LOCAL, 80), 2)

    def children():
        return list(h.layer.connections.values())

    _run(h, None, actions, children)
    while (c := lst.accept()) is not None:
        c.abort()
    lst.close()


def _random_action(rng, mss: int):
    r = rng.random()
    if r < 0.7:
        flags = rng.choice([0x10, 0x10, 0x10, 0x10, 0x18, 0x18, 0x11, 0x02, 0x12])
        if rng.random() < 0.03:
            flags = rng.choice([0x04, 0x14, rng.randrange(256)])
        seq_rel = rng.choice([0, 0, 0, rng.randint(-3000, 3000), rng.randint(-70000, 70000)])
        ack_rel = rng.choice([0, 0, mss * rng.randint(1, 8), rng.randint(-3000, 9000)])
        blocks = [(mss * rng.randint(1, 8), mss * rng.randint(1, 3)) for _ in range(rng.randint(0, 3))]
        plen = rng.choice([0, 0, 0, mss, rng.randint(1, 2000)])
        return ("seg", flags, seq_rel, ack_rel, rng.choice([30000, 30000, 0, rng.randint(0, 65535)]), plen,
                None, None, False, None, blocks)
    if r < 0.85:
        return ("time", rng.choice([0.0, 0.01, 0.05, 0.3, rng.uniform(0, 20)]))
    return ("user", rng.choice(["send", "send", "send", "recv", "recv", "shut_wr", "close", "nodelay"]),
            rng.choice([1, 100, 1000, 5000, 20000]))


def test_random_walks_with_data_in_flight():
    """Long seeded walks: mostly plausible ACKs with SACK blocks, data, timers; deeper than hypothesis goes."""
    import random

    for seed in range(120):
        rng = random.Random(seed)
        h = Harness(sack=rng.random() < 0.7, delayed_ack=rng.random() < 0.5, nodelay=rng.random() < 0.3)
        conn = h.open_active(peer_win=30000, peer_mss=1000, peer_options=dict(sack_perm=True))
        for _ in range(rng.randint(0, 12)):
            conn.send(b"w" * 1000, now=h.now)
        _run(h, conn, [_random_action(rng, 1000) for _ in range(60)])
