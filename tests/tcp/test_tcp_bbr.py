"""BBR (bbr.py), delivery rate estimation (ratesample.py) and pacing (pacing.py): exact figures on
scripted sequences, the state machine's transitions, the pacer's releases over the pipe, and whole
stacks exact under 1%, 3% and 10% loss with BBR (manual clock; both fast-path modes)."""

from __future__ import annotations

import pytest

from ustack.tools.pipe_pair import PipePair
from ustack.transport.tcp.bbr import (DRAIN, DRAIN_GAIN, HIGH_GAIN, PACING_GAINS, PROBE_BW, PROBE_RTT, STARTUP,
                                      Bbr)
from ustack.transport.tcp.congestion import make
from ustack.transport.tcp.pacing import Pacer
from ustack.transport.tcp.ratesample import RateSampler
from ustack.transport.tcp.tcb import State

from .test_tcp_loss_pipe import echo

MSS = 1000
T = 1 / 128  # a binary fraction: the rates below are exact in floating point


# -- delivery rate estimation (draft-cheng-iccrg-delivery-rate-estimation) --------------------------

def test_rate_samples_on_a_scripted_ack_sequence():
    rs = RateSampler()
    rs.on_send(1000, 1000, 4 * MSS, 0.0)  # four segments at t=0, nothing in flight before: intervals start now
    s = rs.on_ack(3000, (), 2 * T)
    # two segments delivered over the ACK interval 2T (the send interval is 0: one burst)
    assert (s.newly_delivered, s.delivered, s.interval, s.rtt) == (2000, 2000, 2 * T, 2 * T)
    assert s.delivery_rate == 2000 / (2 * T) == 128000.0 and not s.is_app_limited
    rs.on_send(3000, 5000, 2 * MSS, 2 * T)  # sent with C.delivered = 2000, C.delivered_time = 2T
    s = rs.on_ack(3000, ((4000, 5000),), 3 * T, MSS)  # a SACK of the fourth segment: the burst record is split
    assert (s.newly_delivered, s.delivered, s.prior_delivered, s.interval) == (1000, 3000, 0, 3 * T)
    assert s.delivery_rate == 3000 / (3 * T) and rs.sacked == 1000
    # the cumulative ACK covers the third segment and the two sent at 2T; the SACKed one counts once
    s = rs.on_ack(7000, ((4000, 5000),), 4 * T, MSS)
    assert (s.newly_delivered, s.delivered, s.prior_delivered) == (3000, 4000, 2000)
    assert (s.send_elapsed, s.ack_elapsed, s.interval, s.rtt) == (2 * T, 2 * T, 2 * T, 2 * T)
    assert s.delivery_rate == 4000 / (2 * T) == 256000.0
    assert rs.delivered == 6000 and rs.sacked == 0 and rs.records == []


def test_ack_compression_app_limited_and_retransmissions():
    rs = RateSampler()
    rs.on_send(0, 0, 2 * MSS, 0.0)
    assert rs.on_ack(2000, (), 4 * T).delivery_rate == 2000 / (4 * T) and rs.min_rtt == 4 * T
    # an interval shorter than the minimum RTT is no sample (ACK compression; Linux's tcp_rate_gen): a
    # retransmission (no RTT sample) whose ACK comes back 2T after the previous delivery
    rs.on_send(2000, 2000, MSS, 4 * T)
    rs.on_send(2000, 2000, MSS, 4 * T + T / 2)
    s = rs.on_ack(3000, (), 6 * T)
    assert s.rtt is None and s.interval == 2 * T and s.delivery_rate is None and s.newly_delivered == 1000
    # the application left the window unused: samples of what is sent until that is delivered say so
    rs.mark_app_limited(1000)
    assert rs.app_limited == 3000 + 1000
    rs.on_send(3000, 3000, MSS, 6 * T)
    s = rs.on_ack(4000, (), 10 * T)
    assert s.is_app_limited and rs.app_limited == 4000  # C.delivered = 4000: not yet past the mark
    rs.on_send(4000, 4000, MSS, 10 * T)
    s = rs.on_ack(5000, (), 14 * T)
    assert s.is_app_limited and rs.app_limited == 0  # delivered passed the mark: the period ends
    # a retransmission takes the state of its own transmission and gives no RTT sample
    rs.on_send(5000, 5000, 2 * MSS, 14 * T)
    rs.on_send(5000, 5000, MSS, 20 * T)
    s = rs.on_ack(6000, (), 22 * T)
    assert s.rtt is None and s.prior_delivered == 5000 and s.ack_elapsed == 8 * T
    s = rs.on_ack(7000, (), 22 * T)
    assert s.rtt == 8 * T  # the second segment was sent once


def test_a_cumulative_ack_cutting_a_later_burst_delivers_its_part():
    rs = RateSampler()
    rs.on_send(0, 0, MSS, 0.0)
    rs.on_send(0, 1000, 4 * MSS, T)  # one record for a burst of four segments
    s = rs.on_ack(3000, (), 4 * T)  # the first segment and two of the burst
    assert s.newly_delivered == 3000 and s.rtt == 3 * T and s.send_elapsed == T
    assert [r[:2] for r in rs.records] == [[3000, 5000]]


def test_sack_edges_count_whole_segments_and_records_stay_bounded():
    """A SACK block counts only the whole segments it covers; odd edges (a hostile peer's) cut records at
    segment boundaries only, so there are never more records than segments."""
    rs = RateSampler()
    rs.on_send(0, 0, 10 * MSS, 0.0)  # one record for ten segments
    s = rs.on_ack(0, ((1500, 3700),), T, MSS)  # covers the second segment only ([2000, 3000))
    assert s.newly_delivered == 1000 and rs.sacked == 1000
    for k in range(1, 200):  # many odd edges
        rs.on_ack(0, ((k * 37 % 9000 + 1, k * 37 % 9000 + 600),), T, MSS)
    assert len(rs.records) <= 10 and rs.sacked == 1000
    s = rs.on_ack(0, ((0, 10 * MSS),), 2 * T, MSS)
    assert s.newly_delivered == 9000 and rs.sacked == 10000


# -- the state machine (draft-cardwell-iccrg-bbr-congestion-control-00 4.3) ----------------------------

def feed(bbr, rs, now, rate, rtt, delivered, pipe, app_limited=False, recovering=False):
    """One ACK's sample, scripted: ``delivered`` bytes newly delivered, the round ending when the sampled
    packet was sent at the round's start (prior_delivered = C.delivered before this ACK)."""
    s = rs.sample
    s.clear()
    s.prior_delivered = rs.delivered
    rs.delivered += delivered
    s.newly_delivered = delivered
    s.delivered = delivered
    s.delivery_rate = rate
    s.rtt = rtt
    s.is_app_limited = app_limited
    bbr.on_rate_sample(rs, pipe, recovering, rtt, now)


def test_startup_exits_after_three_rounds_without_growth_then_drain_then_probe_bw():
    bbr = Bbr(MSS, seed=1)
    rs = RateSampler()
    assert (bbr.mode, bbr.pacing_gain, bbr.cwnd_gain) == (STARTUP, HIGH_GAIN, HIGH_GAIN)
    now = 0.0
    for rate in (1e6, 2e6, 4e6):  # doubling: the pipe is not full
        now += 0.01
        feed(bbr, rs, now, rate, 0.01, 10 * MSS, 50 * MSS)
        assert bbr.mode == STARTUP and bbr.round_start
    assert bbr.btl_bw == 4e6 and bbr.full_bw == 4e6
    for n in (1, 2):  # growth below 25% per round: counted
        now += 0.01
        feed(bbr, rs, now, 4.5e6, 0.01, 10 * MSS, 50 * MSS)
        assert bbr.mode == STARTUP and bbr.full_bw_count == n
    now += 0.01
    feed(bbr, rs, now, 4.5e6, 0.01, 10 * MSS, 50 * MSS)  # the third round: full, DRAIN (inflight > BDP)
    assert bbr.full_bw_reached and bbr.mode == DRAIN and bbr.pacing_gain == DRAIN_GAIN
    assert bbr.bdp(1.0) == 45 * MSS  # 4.5 MB/s x 10 ms
    now += 0.01
    feed(bbr, rs, now, 4.5e6, 0.01, 10 * MSS, 45 * MSS)  # inflight down to one BDP: PROBE_BW
    assert bbr.mode == PROBE_BW and bbr.cwnd_gain == 2.0
    assert bbr.cycle_index != 1 and bbr.pacing_gain == PACING_GAINS[bbr.cycle_index]  # never starts at 3/4
    # cwnd: 2 BDP + 3 send quanta (1 ms at the pacing rate: 4.455 KB -> 4 segments), in even segments
    assert bbr.quantum == 4 * MSS
    target = bbr.target_cwnd(2.0)
    assert target == (90 + 12 + (2 if bbr.cycle_index == 0 else 0)) * MSS
    assert bbr.cwnd <= target and bbr.pacing_rate == pytest.approx(4.5e6 * bbr.pacing_gain * 0.99)


def _steady(seed: int, rate: float, delivered: int, inflight: int):
    """A BBR fed eight ACKs 10 ms apart (min RTT 10 ms at ``rate``): (bbr, its sampler, the time)."""
    bbr = Bbr(MSS, seed=seed)
    rs = RateSampler()
    now = 0.0
    for _ in range(8):
        now += 0.01
        feed(bbr, rs, now, rate, 0.01, delivered, inflight)
    return bbr, rs, now


def test_probe_bw_cycles_its_gains_about_once_per_min_rtt():
    bbr, rs, now = _steady(2, 1e6, 10 * MSS, 10 * MSS)
    assert bbr.mode == PROBE_BW
    seen = []
    for _ in range(20):
        now += 0.0101  # a little over min_rtt per ACK: one phase each (inflight at BDP ends 5/4 and 3/4 too)
        feed(bbr, rs, now, 1e6, 0.01, 10 * MSS, 13 * MSS if bbr.pacing_gain > 1 else 10 * MSS)
        seen.append(bbr.pacing_gain)
    start = seen.index(5 / 4)
    assert seen[start:start + 8] == list(PACING_GAINS)


def test_probe_rtt_after_ten_seconds_without_a_new_min_rtt():
    bbr, rs, now = _steady(3, 10e6, 20 * MSS, 50 * MSS)
    assert bbr.mode == PROBE_BW and bbr.min_rtt == 0.01
    stamp = bbr.min_rtt_stamp
    while now + 0.5 < stamp + 9.9:  # ten seconds of larger RTTs: RTprop is not refreshed
        now += 0.5
        feed(bbr, rs, now, 10e6, 0.02, 20 * MSS, 150 * MSS)
        assert bbr.mode == PROBE_BW
    prior = bbr.cwnd
    now = stamp + 10.01
    feed(bbr, rs, now, 10e6, 0.02, 20 * MSS, 150 * MSS)
    assert bbr.mode == PROBE_RTT and bbr.cwnd == 4 * MSS and bbr.prior_cwnd == prior
    assert bbr.min_rtt == 0.02 and rs.app_limited  # the expired filter took the sample; PROBE_RTT is app-limited
    now += 0.001
    feed(bbr, rs, now, 1e6, 0.015, 10 * MSS, 4 * MSS)  # inflight down to 4 segments: 200 ms from now
    assert bbr.mode == PROBE_RTT and bbr.probe_rtt_done == pytest.approx(now + 0.2) and bbr.min_rtt == 0.015
    now += 0.1
    feed(bbr, rs, now, 1e6, 0.015, 4 * MSS, 4 * MSS)  # a round, but not 200 ms yet
    assert bbr.mode == PROBE_RTT and bbr.cwnd == 4 * MSS
    now += 0.11
    feed(bbr, rs, now, 1e6, 0.015, 4 * MSS, 4 * MSS)
    assert bbr.mode == PROBE_BW and bbr.cwnd >= prior and bbr.min_rtt_stamp == now


def test_loss_keeps_the_model_and_restores_the_window():
    bbr, rs, now = _steady(4, 10e6, 20 * MSS, 100 * MSS)
    cwnd, bw = bbr.cwnd, bbr.btl_bw
    bbr.on_congestion(120 * MSS, now)  # fast recovery: the recovery's target is cwnd (PRR's ssthresh)
    assert bbr.ssthresh == cwnd and bbr.cwnd == cwnd and bbr.btl_bw == bw
    now += 0.01
    feed(bbr, rs, now, 10e6, 0.01, 20 * MSS, 100 * MSS, recovering=True)
    assert bbr.ssthresh == bbr.cwnd
    bbr.end_reduction(now)
    assert bbr.cwnd >= cwnd and not bbr.reducing
    bbr.on_rto(100 * MSS, now)  # a timeout: one segment, restored when the recovery after it ends
    assert bbr.cwnd == MSS and bbr.full_bw == 0
    now += 0.01
    feed(bbr, rs, now, 10e6, 0.01, 2 * MSS, MSS, recovering=True)
    assert bbr.cwnd == 4 * MSS  # grown by what was delivered, four segments at least
    now += 0.01
    feed(bbr, rs, now, 10e6, 0.01, 2 * MSS, MSS)
    assert bbr.cwnd >= cwnd


def test_bbr_is_selectable_by_name():
    cc = make("BBR", 1448)
    assert isinstance(cc, Bbr) and cc.name == "bbr" and cc.paces
    assert not getattr(make("cubic", 1448), "paces", False)


# -- pacing ------------------------------------------------------------------------------------

def test_pacer_token_bucket():
    p = Pacer()
    assert p.allowance(1e6, 4 * MSS, MSS, 0.0) == 4 * MSS  # full at the first release: one quantum
    p.spend(4 * MSS, 4 * MSS)
    assert p.allowance(1e6, 4 * MSS, MSS, 0.0) == 0
    assert p.wake_at(1e6, 4 * MSS, 0.0) == 2 * MSS / 1e6  # half a quantum later
    assert p.allowance(1e6, 4 * MSS, MSS, 0.0015) == 2 * MSS  # 1500 bytes: whole segments, rounded up
    p.spend(2 * MSS, 4 * MSS)
    assert p.tokens == -500
    assert p.allowance(1e6, 4 * MSS, MSS, 1.0) == 4 * MSS  # never more than a quantum after idle


@pytest.mark.parametrize("fastpath", [True, False])
def test_paced_sender_releases_half_a_quantum_per_timer(fastpath):
    """Over a pipe with a 100 ms RTT (no ACK comes back meanwhile): the first release is one quantum (2
    segments at this rate), then the pacing timer lets one segment go every 1 ms (half a quantum)."""
    pair = PipePair(seed=1, delay=0.05, fastpath=fastpath)
    clock = pair.clock
    lst, conn = pair.connect(80, congestion="bbr", nodelay=True)
    assert pair.run(lambda now: False, lambda: conn.state == State.ESTABLISHED, max_time=1.0)
    sender = conn.sender
    mss = conn.tcb.snd_mss
    cc = sender.cc
    cc.set_rate(mss * 1000.0)  # one segment per ms; the quantum is then its floor, two segments
    cc.cwnd = 100 * mss  # the window does not limit here
    assert cc.quantum == 2 * mss
    t0 = clock.now
    una = conn.tcb.snd_una
    assert conn.send(bytes(50 * mss), t0) == 50 * mss

    def sent():
        return (conn.tcb.snd_nxt - una) // mss

    assert sent() == 2 and sender.pace_timer.deadline == pytest.approx(t0 + 0.001)
    for k in range(1, 11):
        clock.set(t0 + k * 0.001 + 1e-9)
        pair.b.poll(clock.now)
        assert sent() == 2 + k
    assert conn.tcb.snd_una == una  # no ACK yet: the timer, not the ACK clock, released them


# -- whole stacks under loss ---------------------------------------------------------------------

@pytest.mark.parametrize("loss,size,max_rto", [(0.01, 1_000_000, 0), (0.03, 1_000_000, 1), (0.10, 300_000, 2)])
def test_echo_under_loss_with_bbr_is_exact(loss, size, max_rto):
    conn, server = echo(size, loss, reorder=0.01, congestion="bbr")
    for c in (conn, server):
        info = c.info()
        assert info.congestion == "bbr" and info.loss_recovery == "rack"
        assert info.timeouts <= max_rto, info
        assert info.retransmits
    assert conn.sender.cc.mode in (PROBE_BW, DRAIN, STARTUP)


def _bulk(fastpath: bool, loss: float, size: int = 2_000_000):
    """``size`` bytes b -> a with BBR over a 1 ms RTT pipe, the receiver ACKing every second segment."""
    from ustack.net.addr import parse

    pair = PipePair(seed=5, delay=0.0005, loss=loss, fastpath=fastpath)
    clock = pair.clock
    lst = pair.a.tcp.listen((bytes(4), 80), 4, ack_coalescing=False)
    conn = pair.b.tcp.connect(None, (parse("198.18.0.1"), 80), clock.now, congestion="bbr")
    data = bytes((i * 7 + i // 1000) % 251 for i in range(size))
    view = memoryview(data)
    got = bytearray()
    state = {"sent": 0, "server": None}

    def step(now):
        if state["server"] is None:
            state["server"] = lst.accept()
        acted = False
        if state["sent"] < size and conn.state == State.ESTABLISHED:
            n = conn.send(view[state["sent"]:state["sent"] + 65536], now)
            state["sent"] += n
            acted = n > 0
        if state["server"] is not None:
            while data := state["server"].recv(1 << 20, now):
                got.extend(data)
                acted = True
        return acted

    assert pair.run(step, lambda: len(got) >= size, max_time=60.0)
    assert bytes(got) == data
    cc = conn.sender.cc
    info = conn.info()
    return (clock.now, info.retransmits, info.timeouts, cc.cwnd, cc.btl_bw, cc.min_rtt, cc.mode, cc.pacing_rate,
            (conn.tcb.snd_max - conn.tcb.iss) % (1 << 32), conn.sender.rs.delivered)


@pytest.mark.parametrize("loss", [0.0, 0.03])
def test_bbr_in_c_and_in_python_send_the_same(loss):
    """The C paths (ACKs in TxPath.on_ack, paced output in TxPath.output) and the Python ones give the same
    transfer: the same simulated end, retransmissions, model and pacing rate."""
    on = _bulk(True, loss)
    off = _bulk(False, loss)
    assert on == off
    assert on[2] == 0


@pytest.mark.parametrize("recovery,sack", [("rfc6675", True), ("newreno", False)])
def test_bbr_with_the_other_recoveries_is_exact(recovery, sack):
    """BBR beside RFC 6675 and NewReno recovery (no SACK: the sampler counts cumulative ACKs only)."""
    conn, server = echo(300_000, 0.03, reorder=0.01, congestion="bbr", loss_recovery=recovery, sack=sack)
    info = conn.info()
    assert info.congestion == "bbr" and info.loss_recovery == recovery and info.retransmits


def test_send_buffer_grows_to_twice_cwnd_for_bbr_unless_set():
    """BBR's send buffer follows cwnd (Linux's tcp_sndbuf_expand) up to sndbuf_max; an explicit sndbuf
    (SO_SNDBUF) keeps it, as in Linux; CUBIC keeps the configured buffer."""
    from ustack.transport.tcp.config import TcpConfig

    cfg = TcpConfig()
    assert cfg.sndbuf_auto and not cfg.derive(sndbuf=65536).sndbuf_auto
    with pytest.raises(ValueError):
        cfg.derive(sndbuf_max=-1)
    for knobs, grows in (({"congestion": "bbr"}, True), ({"congestion": "bbr", "sndbuf": 262144}, False),
                         ({"congestion": "cubic"}, False)):
        pair = PipePair(seed=2, delay=0.0005)
        lst, conn = pair.connect(80, **knobs)
        data = bytes(1_000_000)
        st = {"sent": 0, "got": 0, "server": None}

        def step(now):
            if st["server"] is None:
                st["server"] = lst.accept()
            acted = False
            if st["sent"] < len(data) and conn.state == State.ESTABLISHED:
                n = conn.send(data[st["sent"]:st["sent"] + 65536], now)
                st["sent"] += n
                acted = n > 0
            if st["server"] is not None:
                while chunk := st["server"].recv(1 << 20, now):
                    st["got"] += len(chunk)
                    acted = True
            return acted

        assert pair.run(step, lambda: st["got"] >= len(data), max_time=30.0)
        capacity = conn.sender.sndbuf.capacity
        if grows:
            assert capacity > 262144 and capacity == min(2 * conn.sender.cc.window, cfg.sndbuf_max)
        else:
            assert capacity == 262144
