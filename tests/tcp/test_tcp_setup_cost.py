"""Connection setup cost: what a connection allocates lazily, and that it behaves the same when it does."""

from __future__ import annotations

from tests.tcp.harness import Harness
from ustack.timers import UNARMED
from ustack.transport.tcp.tcb import State


def test_a_quiet_connection_makes_no_delack_keepalive_or_close_timer():
    h = Harness(delayed_ack=True)
    _, conn = h.open_passive()
    assert conn.receiver.delack_timer is UNARMED
    assert conn._keepalive_timer is UNARMED and conn._close_timer is UNARMED
    assert h.timers.live == 0  # the SYN-ACK's retransmission timer was cancelled by the ACK


def test_lazily_made_timers_fire_as_before():
    """The delayed ACK goes out at the delay; TIME-WAIT ends after exactly 2 MSL."""
    h = Harness(delayed_ack=True, max_quickacks=0, msl=30.0)  # no quick ACKs: data's ACK is delayed
    conn = h.open_active()
    assert conn.receiver.delack_timer is UNARMED
    h.peer.send(flags="A", payload=b"z" * 10)
    assert conn.receiver.delack_timer is not UNARMED and conn.receiver.delack_timer.deadline is not None
    h.peer.expect_nothing()
    due = conn.receiver.delack_timer.deadline
    assert h.fire_next() > 0 and h.now == due
    h.peer.expect(flags="A", ack=1011)  # the peer ISS 1000 + SYN + 10 bytes
    assert conn.recv(100) == b"z" * 10
    conn.close(now=h.now)
    fin = h.peer.expect(flags="FA")
    h.peer.send(flags="FA", ack=fin.seq + 1)
    h.peer.expect(flags="A")
    assert conn.state == State.TIME_WAIT and h.layer.connections[conn.key].deadline == h.now + 60.0
    h.advance(59.999)
    assert conn.state == State.TIME_WAIT
    h.advance(0.001)
    assert conn.state == State.CLOSED and conn.key not in h.layer.connections


def test_syn_fast_emit_equals_the_general_path_frame():
    """``_fastpath.emit_tcp_options`` writes exactly the frame ``output`` makes of ``syn_segment``."""
    import random
    import struct

    from ustack import _fastpath
    from ustack.transport.tcp.output import syn_options, syn_segment
    from ustack.wire.tcp import ACK, SYN, TcpHeader

    rng = random.Random(7)
    src, dst = bytes((198, 18, 0, 1)), bytes((198, 18, 0, 2))
    template = struct.pack("!6s6sHBBHHHBBH4s4s", b"\x02" * 6, b"\x04" * 6, 0x0800, 0x45, 0, 0, 0, 0, 64, 6, 0,
                           src, dst)
    for _ in range(200):
        flags = SYN | (ACK if rng.random() < 0.5 else 0)
        seq, ack = rng.getrandbits(32), rng.getrandbits(32) if flags & ACK else 0
        sport, dport, window = rng.randrange(1, 65536), rng.randrange(1, 65536), rng.randrange(65536)
        mss = rng.randrange(88, 65536)
        wscale = rng.choice((None, 0, 7, 14))
        sack = rng.random() < 0.5
        ts = (rng.getrandbits(32), rng.getrandbits(32)) if rng.random() < 0.7 else None
        ident = rng.getrandbits(16)
        opts = syn_options(mss, wscale, sack, ts)
        seg = syn_segment(src, dst, sport, dport, seq, ack, flags, window, mss, wscale, sack, ts)
        assert bytes(seg) == TcpHeader(sport, dport, seq, ack, flags, window, 0, 0, mss=mss, wscale=wscale,
                                       sack_permitted=sack, timestamps=ts).to_bytes(src, dst)
        general, fast = bytearray(2048), bytearray(2048)
        n = _fastpath.emit_ipv4(general, template, ident, 0x4000, seg)
        assert _fastpath.emit_tcp_options(fast, template, ident, sport, dport, seq, ack, flags, window, opts) == n
        assert fast[:n] == general[:n]


def test_syn_fast_emit_rejects_bad_options_and_small_slots():
    import pytest

    from ustack import _fastpath

    template = bytes(12) + b"\x08\x00\x45" + bytes(8) + b"\x06" + bytes(10)
    with pytest.raises(ValueError):
        _fastpath.emit_tcp_options(bytearray(100), template, 1, 1, 2, 3, 4, 2, 100, b"\x01\x01\x01")  # not 4n
    with pytest.raises(ValueError):
        _fastpath.emit_tcp_options(bytearray(100), template, 1, 1, 2, 3, 4, 2, 100, bytes(44))  # over 40
    with pytest.raises(ValueError):
        _fastpath.emit_tcp_options(bytearray(60), template, 1, 1, 2, 3, 4, 2, 100, bytes(8))  # 62 > 60
    with pytest.raises(ValueError):
        _fastpath.emit_tcp_options(bytearray(100), template[:33], 1, 1, 2, 3, 4, 2, 100, bytes(8))


def test_last_ack_ends_when_the_ack_covers_the_fin():
    """RFC 9293 3.10.7.4, LAST-ACK: an ACK of the data only keeps the state (and the FIN's timer);
    the ACK of the FIN deletes the TCB at once, sending nothing."""
    h = Harness(delayed_ack=False)
    _, conn = h.open_passive()
    h.peer.send(flags="FA")
    h.peer.expect(flags="A", ack=1002)
    conn.send(b"tail", now=h.now)
    data = h.peer.expect(flags="PA", payload=b"tail")
    conn.close(now=h.now)
    fin = h.peer.expect(flags="FA", seq=data.seq + 4)
    h.peer.send(flags="A", ack=data.seq + 4)  # the data, not the FIN
    h.peer.expect_nothing()
    assert conn.state == State.LAST_ACK and conn.sender.rtx_timer.deadline is not None
    assert conn.sender.bytes_acked == 4
    h.peer.send(flags="A", ack=fin.seq + 1)
    h.peer.expect_nothing()
    assert conn.state == State.CLOSED and not h.layer.connections and conn.tcb.snd_una == fin.seq + 1
    assert h.timers.live == 0


def test_last_ack_one_ack_for_data_and_fin():
    """One ACK covering the data and the FIN: CLOSED at once, the data counted as acknowledged."""
    h = Harness(delayed_ack=False)
    _, conn = h.open_passive()
    h.peer.send(flags="FA")
    h.peer.expect(flags="A", ack=1002)
    conn.send(b"last words", now=h.now)
    conn.close(now=h.now)
    segs = h.drain()
    assert [s.flag_str for s in segs] in (["FPA"], ["PA", "FA"])
    h.peer.send(flags="A", ack=segs[-1].seq + segs[-1].seg_len)
    h.peer.expect_nothing()
    assert conn.state == State.CLOSED and conn.sender.bytes_acked == 10 and not h.layer.connections


def _collector_finds(kinds: set) -> list:
    """What of ``kinds`` (type names) the cycle collector would have to free now."""
    import gc

    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = [type(o).__name__ for o in gc.garbage if type(o).__name__ in kinds]
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
    return found


def test_closed_connections_are_freed_by_reference_counting():
    """A connection the application closed is freed with all its parts when it ends (LAST-ACK -> CLOSED
    on the passive side; TIME-WAIT's record on the active side): loss recovery no longer holds its
    sender in a cycle that only the collector would break (with the sender, receiver, output, TCB)."""
    import gc

    parts = {"Sender", "Receiver", "Tcb", "Output", "RackRecovery", "NewRenoRecovery", "SackRecovery"}
    h = Harness(delayed_ack=False, sack=True, timestamps=True)
    h.peer.use_ts = True
    gc.collect()
    _, conn = h.open_passive()
    h.peer.send(flags="FA")
    h.peer.expect(flags="A")
    conn.close(now=h.now)
    fin = h.peer.expect(flags="FA")
    h.peer.send(flags="A", ack=fin.seq + 1)
    assert conn.state == State.CLOSED
    del conn
    assert _collector_finds(parts) == []
    active = h.open_active(peer_options=dict(sack_perm=True))
    active.close(now=h.now)
    fin = h.peer.expect(flags="FA")
    h.peer.send(flags="FA", ack=fin.seq + 1)
    h.peer.expect(flags="A")
    assert active.state == State.TIME_WAIT
    del active
    assert _collector_finds(parts) == []
