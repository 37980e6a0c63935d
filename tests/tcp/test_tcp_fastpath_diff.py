"""Differential test of the TCP fast path (issue 11, item 8): C header prediction against the Python path.

Two identical connections, one with the fast path (``_fastpath.FlowTable`` demux and
``EstablishedPath``, the harness delivering as the stack does) and one without, get the same random and adversarial segments (in order, old, ahead,
beyond the window, stale and missing timestamps, ACKs of unsent data, FIN/RST/SYN/URG,
zero windows), the same clock steps, reads and writes. After every step both must have
emitted the same bytes and be in the same state: TCB, receiver, delayed-ACK and sender
fields, buffers, timers, counters.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.tcp.harness import Harness
from ustack.wire.tcp import TcpHeader

_TCB_FIELDS = ("state", "iss", "snd_una", "snd_nxt", "snd_max", "snd_sml", "snd_wnd", "max_snd_wnd", "snd_wl1",
               "snd_wl2", "irs", "rcv_nxt", "rcv_wnd", "rcv_adv", "snd_wscale", "rcv_wscale", "snd_mss", "rcv_mss",
               "mss_base", "ts_ok", "ts_recent", "ts_recent_age", "ts_offset", "last_ack_sent", "sack_ok",
               "fin_queued", "fin_acked", "fin_rcvd", "fin_rcvd_seq")


_CC_FIELDS = {"newreno": ("mss", "cwnd", "ssthresh", "bytes_acked"),
              "cubic": ("mss", "cwnd", "ssthresh", "w_max", "k", "epoch", "w_est")}


def _state(h: Harness, conn) -> dict:
    tcb, rcv, snd = conn.tcb, conn.receiver, conn.sender
    d = rcv.delack
    rtt = snd.rtt
    return {
        "tcb": tuple(getattr(tcb, f) for f in _TCB_FIELDS),
        "rcv": (rcv.ack_now, rcv.ack_round, rcv.wnd_update, rcv.unacked, rcv.bytes_received, rcv.rcvbuf.peek(len(rcv.rcvbuf)),
                rcv.rcvbuf.runs(), rcv.rcvbuf.ooo_bytes, rcv.delack_timer.deadline, rcv.delack_due),
        "delack": (d.ato, d.quick, d.pingpong, d.lrcvtime, d.pushed, d.reader_waiting),
        "snd": (len(snd.sndbuf), snd.rtx_timer.deadline, snd.persist_timer.deadline, snd.rtx_count, snd.rtt_seq,
                snd.dup_acks, snd.bytes_acked, snd.retransmits, rtt.srtt, rtt.rttvar, rtt.rto, snd.cc.window,
                snd.cc.ssthresh),
        "snd2": (snd.rtt_time, snd.rtx_kind, snd.ack_tsecr, snd.psh_next, snd.nodelay, rtt.backoffs,
                 tuple(getattr(snd.cc, f) for f in _CC_FIELDS[snd.cc.name]),
                 repr(getattr(snd.recovery, "segs", None)), snd.sndbuf.peek(0, len(snd.sndbuf))),
        "conn": (conn.error.__class__.__name__, conn.segs_in, h.layer.mem_used, h.layer.under_pressure, conn._charged,
                 conn._last_rcv, conn._keep_probes, snd.probes_out, conn.out.segs_out),
        "stats": h.stats.snapshot(),
    }


def _open(fast: bool, ts: bool, wscale: bool, sack: bool, cc: str, family: int = 4, coalesce: bool = True,
          prepare=None):
    """An established connection on a scripted harness; ``prepare(h)`` runs before the handshake."""
    h = Harness(timestamps=ts, window_scaling=wscale, sack=sack, congestion=cc, family=family,
                rcvbuf=64000 if not wscale else 200000, ack_coalescing=coalesce)
    h.layer.fastpath = fast
    if prepare is not None:
        prepare(h)
    peer = h.peer
    lst = h.layer.listen((h.local, peer.local_port), 5)
    peer.snd_nxt = 1000
    opts = {}
    if ts:
        opts["ts"] = (peer.ts_clock, 0)
    if wscale:
        opts["wscale"] = 2
    peer.send(flags="S", win=65535, mss=1460, sack_perm=sack, **opts)
    synack = peer.expect(flags="SA", ack=1001)
    peer.use_ts = ts
    peer.send(flags="A", ack=synack.seq + 1, win=65535)
    conn = lst.accept()
    assert conn is not None
    return h, conn


_step = st.one_of(
    # a plausible burst: in-order segments acknowledging what we sent (the fast path's case)
    st.tuples(st.just("burst"), st.integers(1, 8), st.sampled_from([1448, 1448, 1000, 1, 3000]),
              st.sampled_from(["A", "PA"]), st.sampled_from(["all", 0])),
    # the same delivered as one poll round's burst (TcpLayer.in_round): in-order ACKs coalesced to its end
    st.tuples(st.just("round"), st.integers(1, 8), st.sampled_from([1448, 1448, 1000, 1, 3000]),
              st.sampled_from(["A", "PA"]), st.sampled_from(["all", 0])),
    # a peer segment: (kind, seq offset, length, flags, ack offset, window, timestamp mode)
    st.tuples(st.just("seg"),
              st.sampled_from([0, 0, 0, 0, -1448, -1, 1, 1448, 70000]),
              st.sampled_from([0, 0, 1, 100, 1448, 1448, 1448, 3000]),
              st.sampled_from(["A", "A", "A", "PA", "PA", "FA", "R", "RA", "SA", "UA", "EA", ""]),
              st.sampled_from([0, 0, 0, "all", "all", "half", -1, 1, 100000]),
              st.sampled_from([65535, 65535, 65535, 0, 1000, 30000]),
              st.sampled_from(["now", "now", "now", "same", "old", "none", "jump"])),
    st.tuples(st.just("time"), st.sampled_from([0.0, 0.001, 0.03, 0.05, 0.25, 1.5])),
    st.tuples(st.just("read"), st.sampled_from([1, 500, 5000, 100000])),
    st.tuples(st.just("send"), st.sampled_from([1, 100, 1448, 5000, 40000])),
    st.tuples(st.just("wait"), st.booleans()),
    # the sending side: the peer's pure ACKs, each (ack advance, its window, the time before it)
    st.tuples(st.just("acks"), st.integers(1, 12), st.sampled_from([1448, 2896, 2896, "all", 1000, 4344]),
              st.sampled_from([65535, 65535, 20000, 3000, 1448]), st.sampled_from([0.0, 0.0005, 0.002, 0.02, 0.3])),
    # congestion avoidance from here (as after a loss: ssthresh below cwnd), on both connections alike
    st.tuples(st.just("ssthresh"), st.sampled_from([0.5, 0.9])),
    st.tuples(st.just("nodelay"), st.booleans()),
)


def _apply(h: Harness, conn, step, unacked_out: list) -> None:
    kind = step[0]
    peer = h.peer
    if kind == "time":
        h.advance(step[1])
    elif kind in ("read", "send"):
        try:
            if kind == "read":
                unacked_out.append(conn.recv(step[1], h.now))
            else:
                unacked_out.append(conn.send(b"x" * step[1], h.now))
        except OSError as e:
            unacked_out.append(type(e).__name__)
    elif kind == "wait":
        conn.reader_waiting = step[1]
    elif kind == "nodelay":
        conn.sender.nodelay = step[1]
    elif kind == "ssthresh":
        cc = conn.sender.cc
        cc.ssthresh = max(int(cc.cwnd * step[1]), 2 * cc.mss)
    elif kind == "acks":
        _, count, adv, win, dt = step
        tcb = conn.tcb
        for _ in range(count):
            h.advance(dt)
            outstanding = (tcb.snd_max - tcb.snd_una) & 0xFFFFFFFF
            ack = tcb.snd_max if adv == "all" else (tcb.snd_una + min(adv, outstanding)) & 0xFFFFFFFF
            if peer.use_ts:
                peer.ts_clock = (peer.ts_clock + 1) & 0xFFFFFFFF
            peer.send(flags="A", ack=ack, win=win)
            h.layer.flush(h.now)
            unacked_out.append([seg for _, _, seg in h.host.out])
            h.drain()
    elif kind in ("burst", "round"):
        _, count, n, flags, dack = step
        h.layer.in_round = kind == "round"
        for _ in range(count):
            if peer.use_ts:
                peer.ts_clock = (peer.ts_clock + 1) & 0xFFFFFFFF  # (a "jump" step may have taken it past 2**32)
            ack = conn.tcb.snd_max if dack == "all" else peer.rcv_nxt
            peer.send(flags=flags, ack=ack, payload=bytes(n))
        h.layer.in_round = False
    else:
        _, dseq, n, flags, dack, win, tsmode = step
        seq = (peer.snd_nxt + dseq) & 0xFFFFFFFF
        tcb = conn.tcb
        if dack == "all":
            ack = tcb.snd_max
        elif dack == "half":
            ack = (tcb.snd_una + (tcb.snd_max - tcb.snd_una) // 2) & 0xFFFFFFFF
        else:
            ack = (peer.rcv_nxt + dack) & 0xFFFFFFFF
        ts = None
        if peer.use_ts:
            peer.ts_clock = (peer.ts_clock + {"now": 1, "same": 0, "old": 0, "none": 0, "jump": 1 << 30}[tsmode])
            tsval = peer.ts_clock - (100 if tsmode == "old" else 0)
            ts = False if tsmode == "none" else (tsval & 0xFFFFFFFF, peer.ts_recent)
        elif tsmode == "jump":
            ts = (5, 0)  # a timestamps option on a connection that did not negotiate them
        payload = bytes((seq + i) & 0xFF for i in range(n))
        peer.send(flags=flags or 0, seq=seq, ack=ack, win=win, payload=payload, ts=ts, advance=dseq == 0)
    h.layer.flush(h.now)
    out = [seg for _, _, seg in h.host.out]
    for seg in h.drain():  # the peer observes what we sent (its RCV.NXT, TS.Recent)
        pass
    unacked_out.append(out)


def _in_lockstep(fast, slow, steps, apply=None, state=None) -> None:
    """Run ``steps`` on both (harness, connection) pairs: after each, the same bytes out and the same state."""
    apply, state = apply or _apply, state or _state
    (fast_h, fast_conn), (slow_h, slow_conn) = fast, slow
    for i, step in enumerate(steps):
        fast_out, slow_out = [], []
        apply(fast_h, fast_conn, step, fast_out)
        apply(slow_h, slow_conn, step, slow_out)
        assert fast_out == slow_out, f"step {i} {step}: emitted bytes differ"
        assert state(fast_h, fast_conn) == state(slow_h, slow_conn), f"step {i} {step}: state differs"


def _full_segments(h, count: int, in_round: bool = True) -> None:
    """``count`` full in-order segments from the peer, delivered as one poll round (``TcpLayer.in_round``)
    or one by one."""
    h.layer.in_round = in_round
    for _ in range(count):
        h.peer.ts_clock += 1
        h.peer.send(flags="A", payload=bytes(1448))
    h.layer.in_round = False


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans(), st.booleans(), st.booleans(), st.sampled_from(["newreno", "cubic"]), st.sampled_from([4, 6]),
       st.lists(_step, min_size=3, max_size=40), st.booleans())
# Found at random (CI's derandomized profile never drew it): a segment ACKing half of the flight after
# an RTO echoed another TSecr from C than from Python until C applied TS.Recent after the ACK.
@example(True, False, True, "newreno", 4, [("send", 40000)] + [("burst", 1, 1448, "A", "all")] * 2 + [
    ("time", 0.25), ("seg", 0, 0, "A", "half", 65535, "now")], False)
@example(True, True, True, "newreno", 4, [("send", 40000)] + [("burst", 1, 1448, "A", "all")] * 2 + [
    ("time", 0.25), ("seg", 0, 0, "A", "half", 65535, "now")], False)
def test_fast_path_and_python_path_agree(ts, wscale, sack, cc, family, steps, coalesce):
    fast_h, fast_conn = _open(True, ts, wscale, sack, cc, family, coalesce)
    slow_h, slow_conn = _open(False, ts, wscale, sack, cc, family, coalesce)
    assert len(fast_conn.local_addr) == len(slow_conn.local_addr) == (4 if family == 4 else 16)
    assert fast_conn._fast is not None and slow_conn._fast is None
    assert _state(fast_h, fast_conn) == _state(slow_h, slow_conn)
    _in_lockstep((fast_h, fast_conn), (slow_h, slow_conn), steps)
    assert slow_conn.segs_fast == 0


@pytest.mark.parametrize("cc", ["newreno", "cubic"])
@pytest.mark.parametrize("ts", [True, False])
def test_sender_bulk_runs_in_c_and_agrees(cc, ts):
    """A bulk send through slow start into congestion avoidance, window changes and Nagle: the C transmit
    path (``TxPath``: full segments from the ring, pure ACKs with RTT and cwnd) emits what Python does."""
    steps = [("send", 40000), ("send", 40000), ("acks", 6, 2896, 65535, 0.002), ("nodelay", True),
             ("send", 5000), ("acks", 4, "all", 20000, 0.002), ("send", 40000), ("ssthresh", 0.5),
             ("acks", 10, 2896, 65535, 0.02), ("send", 100), ("acks", 3, 1448, 3000, 0.0005),
             ("nodelay", False), ("send", 100), ("acks", 12, 1448, 65535, 0.3), ("acks", 12, "all", 65535, 0.02)]
    fast_conn, slow_conn = _run_both(steps, ts=ts, cc=cc)
    tx = fast_conn.sender.tx
    assert slow_conn.sender.tx is None and tx is not None
    assert tx.segments >= 40 and tx.acks >= 20 and tx.outputs >= 10  # both halves of the sender ran in C
    assert fast_conn.sender.cc.ssthresh < fast_conn.sender.cc.cwnd  # congestion avoidance was reached
    if cc == "cubic":
        assert fast_conn.sender.cc.epoch is not None
    assert fast_conn.sender.rtt.srtt is not None


@pytest.mark.parametrize("family", [4, 6])
def test_bulk_transfer_runs_on_the_fast_path(family):
    """In-order data with timestamps and window scaling is taken in C, and the same bytes come out."""
    runs = []
    for fast in (True, False):
        h, conn = _open(fast, True, True, True, "cubic", family)
        emitted = []
        data = bytes(range(256)) * 200
        for off in range(0, len(data), 1448):
            h.peer.send(flags="PA" if off + 1448 >= len(data) else "A", payload=data[off:off + 1448])
            emitted += [seg for _, _, seg in h.host.out]
            h.drain()
        h.advance(0.2)
        emitted += [seg for _, _, seg in h.host.out]
        assert conn.recv(1 << 20, h.now) == data
        runs.append((emitted, conn.segs_fast, _state(h, conn)))
    (fast_out, fast_segs, fast_state), (slow_out, slow_segs, slow_state) = runs
    assert fast_out == slow_out and fast_state == slow_state
    assert slow_segs == 0
    assert fast_segs == 36  # every data segment of the transfer (51,200 bytes in 1448-byte segments)


def test_sender_pure_acks_run_on_the_fast_path():
    """Pure ACKs of new data on the sending side are taken in C, with the same cwnd, RTT and output."""
    runs = []
    for fast in (True, False):
        h, conn = _open(fast, True, False, False, "newreno")
        left = 300000  # (topped up as the 64 kB send buffer drains: ACK rounds past slow start)
        for _ in range(200):
            left -= conn.send(b"y" * left, h.now)
            h.layer.flush(h.now)
            h.advance(0.01)
            if not h.host.out:
                break
            h.drain()
            h.peer.ack()
        runs.append(([seg for _, _, seg in h.host.out], conn.segs_fast, _state(h, conn)))
        assert conn.tcb.snd_una == conn.tcb.snd_max
    assert runs[0][0] == runs[1][0] and runs[0][2] == runs[1][2]
    assert runs[0][1] > 5 and runs[1][1] == 0


def _run_both(steps, ts=True, wscale=False, sack=False, cc="newreno"):
    fast_h, fast_conn = _open(True, ts, wscale, sack, cc)
    slow_h, slow_conn = _open(False, ts, wscale, sack, cc)
    for i, step in enumerate(steps):
        fast_out, slow_out = [], []
        _apply(fast_h, fast_conn, step, fast_out)
        _apply(slow_h, slow_conn, step, slow_out)
        assert fast_out == slow_out, f"step {i} {step}: emitted bytes differ"
        assert _state(fast_h, fast_conn) == _state(slow_h, slow_conn), f"step {i} {step}: state differs"
    return fast_conn, slow_conn


@pytest.mark.parametrize("cc", ["newreno", "cubic"])
@pytest.mark.parametrize("dack", ["all", "half"])
def test_a_request_that_acks_our_reply_takes_the_ack_in_c(cc, dack):
    """An echo's next request: data whose ACK field advances SND.UNA (our reply acknowledged) runs
    Sender.on_ack in C (TxPath.on_ack, as for a pure ACK), with the same bytes and state as the Python path."""
    fast_conn, slow_conn = _run_both([
        ("burst", 2, 1448, "A", 0),  # a request
        ("send", 2896 + 100),  # our reply, outstanding
        ("seg", 0, 1448, "A", dack, 65535, "now"),  # the next request, acknowledging (part of) it
        ("seg", 0, 700, "AP", "all", 65535, "now"),
        ("time", 0.05),
    ], cc=cc)
    assert fast_conn.sender.tx.acks == (1 if dack == "all" else 2)  # (0 before: the Python Sender.on_ack)
    assert fast_conn.tcb.snd_una == fast_conn.tcb.snd_max


def test_data_that_opens_a_zero_window_cancels_persist_as_the_python_path_does():
    fast_conn, _ = _run_both([
        ("seg", 0, 0, "A", 0, 0, "now"),  # the peer closes its window
        ("send", 5000),  # our data waits: the persist timer runs
        ("seg", 0, 100, "A", 0, 65535, "now"),  # in-order data that reopens the window
        ("time", 0.25),
    ])
    assert fast_conn.sender.persist_timer.deadline is None and fast_conn.tcb.snd_max != fast_conn.tcb.iss + 1


def test_stale_timestamp_falls_through_to_paws_and_an_old_segment_is_answered_in_c():
    fast_conn, _ = _run_both([
        ("burst", 3, 1448, "A", 0),
        ("seg", 0, 1448, "A", 0, 65535, "old"),  # PAWS: dropped with an ACK (the Python path)
        ("seg", -1448, 1448, "A", 0, 65535, "now"),  # the same data, a fresh timestamp: in order, in C
        ("seg", -1448, 1448, "A", 0, 65535, "now"),  # again: a duplicate, unacceptable, ACKed (in C)
        ("burst", 2, 1448, "PA", 0),
    ])
    stats = fast_conn.host.stats
    assert stats["drop.tcp.paws"] == 1 and stats["drop.tcp.unacceptable"] == 1 == stats["tcp.unacceptable_old"] and fast_conn.segs_fast == 7


@pytest.mark.parametrize("fast", [True, False])
def test_a_rounds_in_order_segments_get_one_ack_at_its_end(fast):
    """Receive ACK coalescing: 8 full segments in one poll round (``in_round``) are ACKed once, by the
    flush after the application's read, with the window that read opened; outside a round, each one (quick-ACK
    mode at a connection's start)."""
    acks = {}
    for in_round in (True, False):
        h, conn = _open(fast, True, True, False, "cubic")
        h.drain()
        _full_segments(h, 8, in_round=in_round)
        before_flush = [seg for _, _, seg in h.host.out]
        assert conn.recv(1 << 20, h.now) == bytes(8 * 1448)
        h.layer.flush(h.now)
        out = h.drain()
        acks[in_round] = (before_flush, out)
        assert conn.tcb.last_ack_sent == conn.tcb.rcv_nxt and not conn.receiver.ack_round
        assert conn.segs_fast == (8 if fast else 0)
    (held, coalesced), (every_second, per_seg) = acks[True], acks[False]
    assert held == [] and len(coalesced) == 1
    assert len(every_second) == len(per_seg) == 8  # (no window update after the read: never below half)
    ack = coalesced[0].hdr
    assert ack.flags == 0x10 and ack.ack == conn.tcb.rcv_nxt  # everything, cumulatively
    assert ack.window << conn.tcb.rcv_wscale >= 200000 - 3  # the whole buffer again: the read came first


# -- RACK-TLP's per-ACK work in C (TxPath._rack_plain: on_ack, after_ack, arm_timer) ---------------------

def _rack_state(h: Harness, conn) -> dict:
    """``_state`` plus every field of the RackRecovery and its Prr, and the retransmission timer's kind."""
    rec = conn.sender.recovery
    fields = {}
    for cls in type(rec).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if name in ("sender", "prr"):
                continue
            v = getattr(rec, name, None)
            fields[name] = repr(v) if isinstance(v, list) else v
    prr = getattr(rec, "prr", None)
    if prr is not None:
        fields["prr"] = tuple(getattr(prr, n) for n in type(prr).__slots__)
    return {**_state(h, conn), "rack": fields, "rtx": (conn.sender.rtx_kind, conn.sender.rtx_timer.deadline)}


_rack_step = st.one_of(
    st.tuples(st.just("send"), st.sampled_from([1448, 5000, 40000, 40000])),
    st.tuples(st.just("acks"), st.integers(1, 12), st.sampled_from([1448, 2896, 2896, "all", 1000]),
              st.sampled_from([65535, 65535, 20000]), st.sampled_from([0.0, 0.0005, 0.002, 0.02, 0.3])),
    # a SACK for a later part of the flight (RACK's records SACKed, reordering, loss detection: the Python way)
    st.tuples(st.just("sack"), st.sampled_from([1448, 2896, 4344]), st.sampled_from([1448, 2896])),
    st.tuples(st.just("time"), st.sampled_from([0.0005, 0.002, 0.05, 0.25, 1.5])),
    st.tuples(st.just("burst"), st.integers(1, 4), st.sampled_from([1448, 1000]), st.sampled_from(["A", "PA"]),
              st.sampled_from(["all", 0])),
)


def _apply_rack(h: Harness, conn, step, out: list) -> None:
    if step[0] != "sack":
        _apply(h, conn, step, out)
        return
    _, start, length = step
    tcb, peer = conn.tcb, h.peer
    outstanding = (tcb.snd_max - tcb.snd_una) & 0xFFFFFFFF
    if outstanding > start:
        s = (tcb.snd_una + start) & 0xFFFFFFFF
        e = (s + min(length, outstanding - start)) & 0xFFFFFFFF
        if peer.use_ts:
            peer.ts_clock = (peer.ts_clock + 1) & 0xFFFFFFFF
        peer.send(flags="A", ack=tcb.snd_una, sack=[(s, e)])
    h.layer.flush(h.now)
    out.append([seg for _, _, seg in h.host.out])
    h.drain()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans(), st.sampled_from(["newreno", "cubic"]), st.lists(_rack_step, min_size=3, max_size=40))
def test_rack_ack_work_in_c_agrees_with_python(ts, cc, steps):
    """With SACK (RACK-TLP the recovery), pure ACKs, SACKs, timeouts and probes: the C path of RACK's
    common case leaves the same RackRecovery, timer and bytes as its Python methods, step by step."""
    fast_h, fast_conn = _open(True, ts, False, True, cc)
    slow_h, slow_conn = _open(False, ts, False, True, cc)
    assert type(fast_conn.sender.recovery).__name__ == "RackRecovery"
    _in_lockstep((fast_h, fast_conn), (slow_h, slow_conn), steps, _apply_rack, _rack_state)


def test_rack_common_case_runs_in_c():
    """A bulk send ACKed in order: RACK-TLP's on_ack/after_ack/arm_timer ran in C for the pure ACKs, with the
    same records, RACK.rtt, min_RTT, PTO and bytes as in Python."""
    steps = [("send", 40000), ("acks", 6, 2896, 65535, 0.002), ("send", 40000), ("acks", 8, 2896, 65535, 0.002),
             ("acks", 12, "all", 65535, 0.02)]
    fast_h, fast_conn = _open(True, True, False, True, "cubic")
    slow_h, slow_conn = _open(False, True, False, True, "cubic")
    for step in steps:
        fast_out, slow_out = [], []
        _apply(fast_h, fast_conn, step, fast_out)
        _apply(slow_h, slow_conn, step, slow_out)
        assert fast_out == slow_out
        assert _rack_state(fast_h, fast_conn) == _rack_state(slow_h, slow_conn)
    assert fast_conn.sender.tx.rack_acks >= 5  # (the others: after a probe timeout, the Python way)
    assert fast_conn.sender.recovery.min_rtt is not None and fast_conn.sender.recovery.segs == []


def test_round_end_and_window_update_acks_are_built_in_c(monkeypatch):
    """The ACK a poll round owes at its end (coalesced) and the window update after a read leave through
    ``EstablishedPath.send_ack`` (C) with the fast path on, not ``Output.send_ack``; the bytes are the same
    (the differential test above)."""
    from ustack.transport.tcp.output import Output
    calls = []
    original = Output.send_ack
    monkeypatch.setattr(Output, "send_ack", lambda self, now: (calls.append(now), original(self, now)))
    h, conn = _open(True, True, True, False, "cubic")
    h.drain()
    _full_segments(h, 8, in_round=True)
    h.layer.flush(h.now)
    assert len(h.drain()) == 1 and conn.tcb.last_ack_sent == conn.tcb.rcv_nxt
    assert conn.recv(1 << 20, h.now) == bytes(8 * 1448)
    h.layer.flush(h.now)
    h.drain()
    assert calls == []


def test_a_partial_segment_nagle_holds_is_held_in_c():
    """Minshall's Nagle: a partial tail with an earlier short segment unacknowledged stays queued; a pure
    ACK that leaves it held is handled whole in C (``TxPath.output``), with the same bytes and state."""
    steps = [("send", 100), ("send", 5000), ("acks", 1, 50, 65535, 0.001), ("acks", 1, 1448, 65535, 0.001),
             ("acks", 1, "all", 65535, 0.001), ("acks", 1, "all", 65535, 0.001)]
    fast_h, fast_conn = _open(True, True, False, True, "cubic")
    slow_h, slow_conn = _open(False, True, False, True, "cubic")
    outputs = []
    for step in steps:
        fast_out, slow_out = [], []
        _apply(fast_h, fast_conn, step, fast_out)
        _apply(slow_h, slow_conn, step, slow_out)
        assert fast_out == slow_out
        assert _rack_state(fast_h, fast_conn) == _rack_state(slow_h, slow_conn)
        outputs.append(fast_conn.sender.tx.outputs)
    assert outputs[2] == outputs[1] + 1  # the ACK of 50 bytes: the 656-byte tail held, in C
    assert len(fast_conn.sender.sndbuf) == 0  # and it left once the short segment was acknowledged


@pytest.mark.parametrize("cc", ["newreno", "cubic"])
@pytest.mark.parametrize("ts", [True, False])
def test_a_short_last_segment_that_goes_leaves_in_c(cc, ts):
    """The data's short last segment, when nothing holds it (no short segment outstanding, the window and
    cwnd reach it): sent by the C output (TxPath.output, the burst's tail, PSH, SND.SML its end), as the
    Python loop sends it: same bytes and state (RACK's records, the timer, Minshall's SND.SML)."""
    steps = [("send", 64), ("acks", 1, "all", 65535, 0.001), ("send", 2 * 1448 + 300),
             ("acks", 1, "all", 65535, 0.001), ("send", 1000), ("send", 10),  # 10 bytes held: 1000 outstanding
             ("acks", 1, "all", 65535, 0.001), ("acks", 1, "all", 65535, 0.001)]
    fast_h, fast_conn = _open(True, ts, False, True, cc)
    slow_h, slow_conn = _open(False, ts, False, True, cc)
    segments = []
    for step in steps:
        fast_out, slow_out = [], []
        _apply(fast_h, fast_conn, step, fast_out)
        _apply(slow_h, slow_conn, step, slow_out)
        assert fast_out == slow_out, step
        assert _rack_state(fast_h, fast_conn) == _rack_state(slow_h, slow_conn), step
        assert _state(fast_h, fast_conn) == _state(slow_h, slow_conn), step
        segments.append(fast_conn.sender.tx.segments)
    assert segments[0] == 1  # the 64-byte reply, in C (the Python loop before)
    assert segments[2] == segments[1] + 3  # two full segments and the 300-byte tail
    assert segments[4] == segments[3] + 1 and segments[5] == segments[4]  # Nagle holds the 10 bytes
    assert segments[6] == segments[5] + 1  # and they go, from C, once the 1000 are acknowledged
    assert len(fast_conn.sender.sndbuf) == 0


def test_whole_segments_read_the_connection_through_slot_offsets():
    """The per-segment bookkeeping of a segment taken whole (FlowTable) reads Connection, Sender, TcpLayer
    and ReceiveBuffer through slot offsets learned from the first connection; the state stays the Python
    path's (``_state``: segs_in, _last_rcv, the memory charge, notification)."""
    from ustack.transport.tcp.connection import Connection
    from ustack.transport.tcp.layer import TcpLayer
    steps = [("burst", 8, 1448, "A", 0), ("read", 5000), ("round", 6, 1448, "PA", "all"), ("send", 5000),
             ("burst", 3, 1448, "PA", "all"), ("read", 100000)]
    fast_conn, slow_conn = _run_both(steps, ts=True, wscale=True, sack=True, cc="cubic")
    est = fast_conn.layer.established
    assert est.conn_layout.cls is Connection and est.layer_layout.cls is TcpLayer
    assert fast_conn.segs_fast == 17 and fast_conn.layer.mem_used == slow_conn.layer.mem_used


# -- out-of-order data in C (issue 14): a segment extending the highest out-of-order run -----------------

def _ooo_state(h: Harness, conn) -> dict:
    """``_state`` plus what reassembly and the out-of-order ACK policy keep: the runs' change stamps (SACK
    order), the latest run, the ACK counts per RCV.NXT, the D-SACK and SACK-report marks."""
    rcv = conn.receiver
    buf = rcv.rcvbuf
    return {**_state(h, conn), "ooo": (buf.tick, buf.last_run, buf.recent(8), buf.changed_since(0), rcv.ooo_acks,
                                      rcv.ooo_acks_at, rcv.dsack, rcv.sack_tick, rcv.gap_round)}


def _hole_payload(seq: int, n: int) -> bytes:
    return bytes((seq + i) * 7 & 0xFF for i in range(n))


def _apply_ooo(h: Harness, conn, step, out: list) -> None:
    """``_apply``, and ``hole``: ``gap`` bytes at the peer's SND.NXT lost, ``count`` segments of ``n`` above them
    (delivered as one poll round or one by one), then the hole filled (``fill``), half of it (``half``) or left
    open (``keep``: later segments at SND.NXT fill it, overlap the runs or land inside them)."""
    if step[0] != "hole":
        _apply(h, conn, step, out)
        return
    _, count, n, gap, in_round, end = step
    peer = h.peer
    h.layer.in_round = in_round
    base = peer.snd_nxt
    seq = (base + gap) & 0xFFFFFFFF
    for _ in range(count):
        if peer.use_ts:
            peer.ts_clock = (peer.ts_clock + 1) & 0xFFFFFFFF
        peer.send(flags="A", seq=seq, payload=_hole_payload(seq, n), advance=False)
        seq = (seq + n) & 0xFFFFFFFF
    if end != "keep":
        k = gap if end == "fill" else gap // 2
        if peer.use_ts:
            peer.ts_clock = (peer.ts_clock + 1) & 0xFFFFFFFF
        peer.send(flags="A", seq=base, payload=_hole_payload(base, k), advance=False)
        peer.snd_nxt = seq if end == "fill" else (base + k) & 0xFFFFFFFF
    h.layer.in_round = False
    h.layer.flush(h.now)
    out.append([seg for _, _, seg in h.host.out])
    h.drain()


_ooo_step = st.one_of(
    st.tuples(st.just("hole"), st.integers(1, 10), st.sampled_from([1448, 1448, 1000, 1]),
              st.sampled_from([1, 1448, 1448, 2896]), st.booleans(), st.sampled_from(["fill", "keep", "half"])),
    _step,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans(), st.booleans(), st.booleans(), st.sampled_from([4, 6]), st.lists(_ooo_step, min_size=2, max_size=30),
       st.booleans())
@example(True, True, True, 4, [("hole", 10, 1448, 1448, True, "keep"), ("hole", 4, 1448, 1448, False, "fill"),
                               ("read", 100000)], True)
def test_out_of_order_data_in_c_agrees_with_python(ts, wscale, sack, family, steps, coalesce):
    """Holes and the segments above them (the next segment extending the highest run: in C), with fills,
    overlaps and every other step: the same bytes out (SACK blocks, D-SACK, duplicate ACKs) and the same state,
    reassembly included."""
    fast = _open(True, ts, wscale, sack, "cubic", family, coalesce)
    slow = _open(False, ts, wscale, sack, "cubic", family, coalesce)
    _in_lockstep(fast, slow, steps, _apply_ooo, _ooo_state)
    assert slow[1].segs_fast == 0


@pytest.mark.parametrize("sack", [True, False])
@pytest.mark.parametrize("in_round", [True, False])
def test_segments_above_a_hole_run_in_c(sack, in_round):
    """Ten segments above a lost one, all in C: the first opens a run, the other nine extend it; the
    first three out-of-order segments at this RCV.NXT are ACKed at once (RFC 5681 4.2), with SACK the rest
    once at the round's end (or at once, outside a round), without SACK each at once; the retransmission
    fills the hole (in C: the run joins the in-order bytes) and the reader gets every byte."""
    steps = [("hole", 10, 1448, 1448, in_round, "keep"), ("seg", 0, 1448, "A", 0, 65535, "now"), ("read", 1 << 20)]
    fast_h, fast_conn = _open(True, True, True, sack, "cubic")
    slow_h, slow_conn = _open(False, True, True, sack, "cubic")
    base = fast_h.peer.snd_nxt
    outs = []
    for i, step in enumerate(steps):
        fast_out, slow_out = [], []
        for h, conn, o in ((fast_h, fast_conn, fast_out), (slow_h, slow_conn, slow_out)):
            if step[0] == "seg":  # the retransmission of the lost segment
                h.peer.ts_clock += 1
                h.peer.send(flags="A", payload=_hole_payload(base, 1448), advance=False)
                h.layer.flush(h.now)
                o.append([seg for _, _, seg in h.host.out])
                h.drain()
            else:
                _apply_ooo(h, conn, step, o)
        assert fast_out == slow_out, f"step {i} {step}"
        assert _ooo_state(fast_h, fast_conn) == _ooo_state(slow_h, slow_conn), f"step {i} {step}"
        outs.append(fast_out)
        if i == 0:
            assert fast_conn.segs_fast == 10  # the first opens the run, the others extend it
            acks = fast_out[0]
            assert len(acks) == (4 if sack and in_round else 10)
            if sack:
                blocks = [TcpHeader.parse(seg, fast_h.local, fast_h.peer.addr).sack_blocks for seg in acks]
                assert blocks[-1] == ((base + 1448, base + 1448 * 11),)
        if i == 1:
            assert fast_conn.segs_fast == 11  # the retransmission that fills the hole too
            assert fast_conn.receiver.rcvbuf.ooo_bytes == 0 and len(fast_conn.receiver.rcvbuf) == 11 * 1448
    assert outs[2][0] == _hole_payload(base, 1448) + b"".join(
        _hole_payload(base + 1448 * (k + 1), 1448) for k in range(10))
    assert fast_conn.tcb.rcv_nxt == (base + 1448 * 11) & 0xFFFFFFFF


def test_a_new_run_past_the_run_bound_is_dropped_the_python_way():
    """``max_ooo_runs`` 2: two segments above two holes open runs in C; a third above a third hole would
    open one more: the Python path drops it (``tcp.ooo_overflow``) and ACKs at once, with the same bytes."""
    fast_h, fast_conn = _open(True, True, True, True, "cubic")
    slow_h, slow_conn = _open(False, True, True, True, "cubic")
    for conn in (fast_conn, slow_conn):
        conn.configure(max_ooo_runs=2)
    steps = [("seg", 1448, 1448, "A", 0, 65535, "now"), ("seg", 4344, 1448, "A", 0, 65535, "now"),
             ("seg", 7240, 1448, "A", 0, 65535, "now"), ("seg", 5792, 1448, "A", 0, 65535, "now")]
    _in_lockstep((fast_h, fast_conn), (slow_h, slow_conn), steps, _apply_ooo, _ooo_state)
    assert fast_conn.host.stats["drop.tcp.ooo_overflow"] == 1
    assert fast_conn.segs_fast == 3  # the two new runs and the extension of the second
    assert fast_conn.receiver.rcvbuf.runs() == [(1448, 2896), (4344, 7240)]
