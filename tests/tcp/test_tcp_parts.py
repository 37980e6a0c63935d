"""The engine's parts on their own: sequence arithmetic, buffers and reassembly, RTT, congestion control
(NewReno, CUBIC), NewReno loss recovery, ISNs, cookies."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ustack.stats import Stats
from ustack.transport.tcp.congestion import Cubic, NewReno, initial_window, make
from ustack.transport.tcp.isn import (
    COOKIE_MSS,
    KeyedHash,
    check_cookie,
    cookie_mss_index,
    initial_sequence_number,
    make_cookie,
    timestamp_offset,
)
from ustack.transport.tcp.recovery import NewRenoRecovery
from ustack.transport.tcp.recvbuf import ReceiveBuffer
from ustack.transport.tcp.rtt import RttEstimator
from ustack.transport.tcp.sendbuf import SendBuffer
from ustack.transport.tcp.seq import seq_add, seq_diff, seq_ge, seq_gt, seq_in, seq_le, seq_lt, seq_max, seq_min
from ustack.transport.tcp.tcb import Tcb

SECRET = bytes(range(16))
A, B = bytes([198, 18, 0, 1]), bytes([198, 18, 0, 2])


# -- sequence numbers ----------------------------------------------------------

def test_seq_wraps():
    top = 0xFFFFFFFF
    assert seq_add(top, 1) == 0
    assert seq_add(0, -1) == top
    assert seq_diff(0, top) == 1 and seq_diff(top, 0) == -1
    assert seq_lt(top, 0) and seq_gt(0, top) and seq_le(top, top) and seq_ge(5, 5)
    assert not seq_lt(5, 5) and not seq_gt(5, 5)
    assert seq_max(top, 2) == 2 and seq_min(top, 2) == top
    assert seq_in(0, top, 1) and seq_in(top, top, 1) and not seq_in(1, top, 1)
    assert not seq_in(7, 7, 7)  # empty range


@given(st.integers(0, 0xFFFFFFFF), st.integers(-(1 << 31) + 1, (1 << 31) - 1))
def test_seq_diff_inverts_add(a, n):
    b = seq_add(a, n)
    assert seq_diff(b, a) == n
    assert seq_lt(a, b) == (n > 0) and seq_gt(a, b) == (n < 0)


# -- send buffer -----------------------------------------------------------------

def test_send_buffer_bounds_and_acknowledge():
    sb = SendBuffer(10)
    assert sb.write(b"abcdef") == 6
    assert sb.write(b"ghijklmn") == 4 and sb.free == 0
    assert sb.write(b"x") == 0
    assert sb.peek(2, 3) == b"cde" and sb.peek(8, 5) == b"ij"
    sb.acknowledge(4)
    assert len(sb) == 6 and sb.peek(0, 2) == b"ef" and sb.free == 4


# -- receive buffer / reassembly ---------------------------------------------------

def test_in_order_then_read():
    rb = ReceiveBuffer(100)
    assert rb.write(0, b"hello") == 5
    assert rb.free == 95
    assert rb.read(3) == b"hel" and rb.read(10) == b"lo" and len(rb) == 0


def test_out_of_order_runs_merge_and_fill():
    rb = ReceiveBuffer(100)
    assert rb.write(10, b"KLMNO") == 0
    assert rb.write(20, b"UV") == 0
    assert rb.runs() == [(10, 15), (20, 22)] and rb.ooo_bytes == 7
    assert rb.write(12, b"MNOPQRST") == 0  # overlaps the first run and touches the second
    assert rb.runs() == [(10, 22)] and rb.ooo_bytes == 12
    assert rb.write(10, b"KLMNO") == 0  # a pure duplicate costs nothing
    assert rb.ooo_bytes == 12
    assert rb.write(0, b"ABCDEFGHIJ") == 22  # fills the gap: everything becomes in-order
    assert rb.read(100) == b"ABCDEFGHIJKLMNOPQRSTUV"
    assert rb.runs() == [] and rb.ooo_bytes == 0


def test_in_order_write_overlapping_a_run_partly():
    rb = ReceiveBuffer(100)
    rb.write(5, b"fghij")
    assert rb.write(0, b"abcdefg") == 10  # covers part of the run
    assert rb.read(100) == b"abcdefghij"


def test_runs_are_bounded():
    rb = ReceiveBuffer(1000, max_runs=3)
    for off in (10, 20, 30):
        assert rb.write(off, b"x") == 0
    assert rb.write(40, b"y") == -1  # a fourth run is refused
    assert rb.write(31, b"z") == 0  # extending a run is fine
    assert rb.runs() == [(10, 11), (20, 21), (30, 32)]


def test_sack_run_tracking():
    rb = ReceiveBuffer(1000)
    rb.write(100, b"a" * 10)
    rb.write(300, b"b" * 10)
    assert rb.last_run == 300
    rb.write(110, b"c" * 5)
    assert rb.last_run == 100
    rb.write(0, b"d" * 100)
    assert rb.last_run is None and rb.runs() == [(185, 195)]  # relative to the new RCV.NXT (115)


def test_segments_above_a_hole_extend_their_run():
    """The next segment above a hole, one overlapping the run's tail, and one inside it: one run,
    counted once (the run grows in place instead of being copied whole for every segment)."""
    rb = ReceiveBuffer(100_000)
    for i in range(1, 50):
        assert rb.write(1000 * i, bytes([i]) * 1000) == 0
    assert rb.runs() == [(1000, 50_000)] and rb.ooo_bytes == 49_000
    assert rb.write(49_500, bytes([49]) * 500 + b"z" * 700) == 0  # overlaps the tail
    assert rb.write(2_000, bytes([2]) * 10) == 0  # inside: nothing new
    assert rb.runs() == [(1000, 50_700)] and rb.ooo_bytes == 49_700 and rb.last_run == 1000
    assert rb.write(0, b"\0" * 1000) == 50_700
    assert rb.read(60_000) == b"".join(bytes([i]) * 1000 for i in range(50)) + b"z" * 700


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.lists(st.tuples(st.integers(0, 300), st.integers(1, 60)), min_size=1,
                                            max_size=40))
def test_reassembly_matches_reference(seed, pieces):
    """Random overlapping pieces of a stream, delivered in any order, come out exact."""
    stream = random.Random(seed).randbytes(400)
    rb = ReceiveBuffer(10_000)
    nxt = 0
    out = bytearray()
    for start, length in pieces + [(0, 400)]:
        end = min(start + length, 400)
        if end <= nxt:
            continue
        s = max(start, nxt)
        adv = rb.write(s - nxt, stream[s:end])
        assert adv >= 0
        nxt += adv
        out += rb.read(adv)
    assert bytes(out) == stream and nxt == 400 and rb.ooo_bytes == 0


# -- RTT ---------------------------------------------------------------------------

def test_rtt_rfc6298_formulas():
    r = RttEstimator(initial_rto=1.0, min_rto=0.001, max_rto=60.0)
    assert r.rto == 1.0 and r.srtt is None
    r.sample(0.1)
    assert r.srtt == pytest.approx(0.1) and r.rttvar == pytest.approx(0.05)
    assert r.rto == pytest.approx(0.1 + 4 * 0.05)
    r.sample(0.2)
    assert r.rttvar == pytest.approx(0.75 * 0.05 + 0.25 * 0.1)
    assert r.srtt == pytest.approx(0.875 * 0.1 + 0.125 * 0.2)
    assert r.rto == pytest.approx(r.srtt + 4 * r.rttvar)


def test_rtt_min_max_and_backoff():
    r = RttEstimator(initial_rto=1.0, min_rto=0.2, max_rto=10.0)
    r.sample(0.001)
    assert r.rto == 0.2  # clamped to min_rto
    for want in (0.4, 0.8, 1.6, 3.2, 6.4, 10.0, 10.0):
        r.backoff()
        assert r.rto == pytest.approx(want)
    r.sample(0.001)  # a fresh sample ends the backoff
    assert r.rto == 0.2 and r.backoffs == 0


# -- congestion control and loss recovery ------------------------------------------

class FakeSender:
    """What loss recovery sees of the sender (``recovery.RecoveryHost``), recording retransmissions."""

    def __init__(self, cc, snd_una: int, snd_max: int, mss: int):
        self.tcb = Tcb()
        self.tcb.snd_una, self.tcb.snd_max, self.tcb.snd_nxt, self.tcb.snd_mss = snd_una, snd_max, snd_max, mss
        self.cc = cc
        self.sndbuf = SendBuffer(1 << 20)
        self.stats = Stats()
        self.sent: list = []

    def retransmit_head(self, now: float) -> None:
        self.sent.append(("head", self.tcb.snd_una))

    def retransmit(self, seq: int, n: int, now: float) -> None:
        self.sent.append((seq, n))

    def output(self, now: float, budget=None) -> None:
        self.sent.append(("new", budget))


def ack(sender, rec, ack_seq: int, now: float = 0.0) -> bool:
    """SND.UNA moves to ``ack_seq``: what the sender does with the recovery and the controller."""
    tcb = sender.tcb
    advanced = ack_seq - tcb.snd_una
    tcb.snd_una = ack_seq
    hold = rec.on_ack(ack_seq, advanced, advanced, tcb.snd_max - ack_seq, now)
    if not hold:
        sender.cc.on_ack(advanced, None, now)
    return hold


def test_initial_window_rfc5681():
    assert initial_window(1460) == 4380 and initial_window(536) == 2144 and initial_window(9000) == 18000


def test_newreno_slow_start_and_avoidance():
    cc = NewReno(1000)
    assert cc.window == 4000
    cc.on_ack(1000, None, 0.0)
    assert cc.window == 5000  # slow start: + the bytes acknowledged
    cc.on_ack(4000, None, 0.0)
    assert cc.window == 9000  # a stretch ACK counts every byte it covers (Linux's tcp_slow_start)
    cc.ssthresh = 10000
    cc.on_ack(4000, None, 0.0)
    assert cc.window == 10000  # ... up to ssthresh
    cc.cwnd = cc.ssthresh = 6000
    for i in range(5):
        cc.on_ack(1000, None, 0.0)
    assert cc.window == 6000
    cc.on_ack(1000, None, 0.0)
    assert cc.window == 7000  # congestion avoidance: +SMSS per window of data


def test_newreno_fast_recovery_partial_and_full_ack():
    sender = FakeSender(NewReno(1000, cwnd=10000), snd_una=1, snd_max=10001, mss=1000)
    rec = NewRenoRecovery(sender, recover=0)
    rec.on_dup_ack(1, 10000, 0.0)
    rec.on_dup_ack(1, 10000, 0.0)
    assert sender.sent == [] and rec.window(sender.cc.window) == 10000 + 2 * 1000  # RFC 3042
    rec.on_dup_ack(1, 10000, 0.0)  # third: fast retransmit
    assert sender.sent == [("head", 1)] and rec.fast_retransmits == 1
    assert rec.in_recovery and sender.cc.ssthresh == 5000 and rec.window(sender.cc.window) == 8000
    assert rec.recover == 10000
    rec.on_dup_ack(1, 10000, 0.0)
    assert rec.window(sender.cc.window) == 9000  # inflation
    assert ack(sender, rec, 3001)  # partial ACK: retransmit, no growth
    assert sender.sent[-1] == ("head", 3001) and sender.stats["tcp.partial_acks"] == 1
    assert rec.in_recovery and rec.window(sender.cc.window) == 9000 - 3000 + 1000
    assert ack(sender, rec, 10001)  # full ACK ends recovery (and does not grow the window)
    assert not rec.in_recovery and rec.window(sender.cc.window) == sender.cc.window == min(5000, 1000 + 1000)
    assert len(sender.sent) == 2


def test_newreno_no_second_fast_retransmit_after_timeout():
    sender = FakeSender(NewReno(1000), snd_una=1001, snd_max=9001, mss=1000)
    rec = NewRenoRecovery(sender, recover=0)
    sender.cc.on_rto(8000, 0.0)
    rec.on_rto()
    assert sender.cc.window == 1000 and sender.cc.ssthresh == 4000 and rec.recover == 9000
    for _ in range(3):
        rec.on_dup_ack(5001, 4000, 0.0)
    assert not rec.in_recovery and sender.sent == []  # RFC 6582 step 2: the ACK does not cover "recover"


def test_make_by_name_and_switching_keeps_the_window():
    assert isinstance(make("NewReno", 1000), NewReno)
    with pytest.raises(ValueError):
        make("nope", 1000)
    cc = make("cubic", 1000, cwnd=7000, ssthresh=5000)
    assert isinstance(cc, Cubic) and cc.name == "cubic" and cc.window == 7000 and cc.ssthresh == 5000


# -- ISNs and SYN cookies ----------------------------------------------------------

def test_isn_keyed_and_clocked():
    i0 = initial_sequence_number(SECRET, A, 1, B, 2, 10.0)
    assert initial_sequence_number(SECRET, A, 1, B, 2, 10.0) == i0
    assert initial_sequence_number(SECRET, A, 1, B, 2, 11.0) == (i0 + 250_000) & 0xFFFFFFFF  # 4 µs ticks
    assert initial_sequence_number(SECRET, A, 1, B, 3, 10.0) != i0
    assert initial_sequence_number(bytes(16), A, 1, B, 2, 10.0) != i0
    with pytest.raises(ValueError):
        initial_sequence_number(b"short", A, 1, B, 2, 0.0)


def test_keyed_hash_is_blake2s_keyed_once_and_stateless():
    """The per-layer KeyedHash (BLAKE2s keyed once, copied per call) gives F() exactly as hashing afresh."""
    import hashlib

    keyed = KeyedHash(SECRET)

    def fresh(purpose: bytes, lport: int, rport: int, size: int = 4) -> int:
        h = hashlib.blake2s(A + B + lport.to_bytes(2, "big") + rport.to_bytes(2, "big"), key=SECRET,
                            digest_size=size, person=purpose)
        return int.from_bytes(h.digest(), "big")

    for _ in range(3):  # a copied state carries nothing from one call to the next
        # F of the ISN and the timestamp offset: the high and low halves of one 8-byte digest
        pair = fresh(b"isn+ts", 1, 2, 8)
        assert keyed.connection_hashes(A, 1, B, 2) == (pair >> 32, pair & 0xFFFFFFFF)
        assert keyed.ts_offset(A, 1, B, 2) == pair & 0xFFFFFFFF == timestamp_offset(SECRET, A, 1, B, 2)
        assert keyed.isn(A, 1, B, 2, 10.0) == (2_500_000 + (pair >> 32)) & 0xFFFFFFFF
        assert keyed.isn(A, 1, B, 2, 10.0) == initial_sequence_number(SECRET, A, 1, B, 2, 10.0)
    assert keyed.ts_offset(A, 1, B, 3) == fresh(b"isn+ts", 1, 3, 8) & 0xFFFFFFFF != keyed.ts_offset(A, 1, B, 2)
    assert keyed.hash32(b"other", A, 1, B, 2) == fresh(b"other", 1, 2)  # a purpose without a prepared state
    c = keyed.make_cookie(A, 80, B, 5000, 777, 3, 1000.0)
    assert c == make_cookie(SECRET, A, 80, B, 5000, 777, 3, 1000.0)
    assert keyed.check_cookie(A, 80, B, 5000, 777, c, 1000.0) == 3
    assert KeyedHash(bytes(16)).check_cookie(A, 80, B, 5000, 777, c, 1000.0) is None
    with pytest.raises(ValueError):
        KeyedHash(b"short")


def test_cookie_roundtrip_expiry_and_forgery():
    idx = cookie_mss_index(1460)
    assert COOKIE_MSS[idx] == 1460 and COOKIE_MSS[cookie_mss_index(1000)] == 536
    c = make_cookie(SECRET, A, 80, B, 5000, 777, idx, 1000.0)
    assert check_cookie(SECRET, A, 80, B, 5000, 777, c, 1000.0) == idx
    assert check_cookie(SECRET, A, 80, B, 5000, 777, c, 1000.0 + 64) == idx  # next period still good
    assert check_cookie(SECRET, A, 80, B, 5000, 777, c, 1000.0 + 200) is None  # expired
    assert check_cookie(SECRET, A, 80, B, 5000, 778, c, 1000.0) is None  # other client ISN
    assert check_cookie(SECRET, A, 80, B, 5001, 777, c, 1000.0) is None  # other port
    assert check_cookie(SECRET, A, 80, B, 5000, 777, c ^ 1, 1000.0) is None  # flipped MAC bit


def test_cubic_decrease_and_return_to_w_max():
    mss = 1000
    cc = Cubic(mss, cwnd=100 * mss)
    rtt = 0.1
    cc.on_congestion(100 * mss, 0.0)
    assert cc.ssthresh == 70 * mss and cc.window == 70 * mss and cc.w_max == 100
    # one window of ACKs per RTT: the window climbs back to W_max around t = K = cbrt(30 / 0.4)
    k = (30 / 0.4) ** (1 / 3)
    now = 0.0
    while now < k:
        for _ in range(cc.window // mss):
            cc.on_ack(mss, rtt, now)
        now += 0.1
    assert 95 * mss <= cc.window <= 105 * mss
    plateau = cc.window
    for _ in range(10):  # concave near W_max: slow growth
        for _ in range(cc.window // mss):
            cc.on_ack(mss, rtt, now)
        now += 0.1
    assert cc.window - plateau < 5 * mss
    for _ in range(30):  # then convex: faster again
        for _ in range(cc.window // mss):
            cc.on_ack(mss, rtt, now)
        now += 0.1
    assert cc.window > 115 * mss


def test_cubic_fast_convergence_and_timeout():
    cc = Cubic(1000, cwnd=100_000)
    cc.on_congestion(100_000, 0.0)
    cc.on_congestion(cc.window, 1.0)  # lost again below the last W_max
    assert cc.w_max == pytest.approx(70 * 1.7 / 2)
    cc.on_rto(40_000, 2.0)
    assert cc.window == 1000 and cc.ssthresh == 28_000


# -- the SYN writer ------------------------------------------------------------------

@pytest.mark.parametrize("ts", [None, (0, 0), (0xFFFFFFFF, 123456789)])
@pytest.mark.parametrize("wscale", [None, 0, 7, 14])
@pytest.mark.parametrize("sack", [False, True])
@pytest.mark.parametrize("flags", [0x02, 0x12])
def test_syn_segment_equals_the_wire_reference(ts, wscale, sack, flags):
    """output.syn_segment packs SYN/SYN-ACK bytes itself; they equal wire.tcp.TcpHeader's, checksum included."""
    from ustack.transport.tcp.output import syn_segment
    from ustack.wire.tcp import TcpHeader

    seq, ack = 0xFFFFFFF0, (0x12345678 if flags & 0x10 else 0)
    got = syn_segment(A, B, 40000, 80, seq, ack, flags, 65535, 1460, wscale, sack, ts)
    want = TcpHeader(40000, 80, seq, ack, flags, 65535, 0, 0, 1460, wscale, sack, (), ts).to_bytes(A, B)
    assert bytes(got) == want
    back = TcpHeader.parse(got, A, B)  # and it parses back, checksum verified
    assert (back.mss, back.wscale, back.sack_permitted, back.timestamps) == (1460, wscale, sack, ts)
