"""Differential test of connection teardown in C (issues 10/11): ``_fastpath.FinPath`` and the C demux of
flows in every state, against the Python path.

Two identical connections, one with the fast path (``FlowTable`` demux for every state, the peer's FIN
taken by ``FinPath``) and one without, get the same segments, clock steps and user calls, in lockstep:
random sequences around the close (the peer's FIN alone, with data, with PSH, out of order, repeated,
with RST or SYN, with a stale or missing timestamp, acknowledging half of our data or data never sent;
our close before, after or at the same time: simultaneous close) and an application that closes when
it sees EOF from its event callback, as ``TcpEcho`` does. After every step both must have emitted the
same bytes and be in the same state (TCB, receiver, sender, timers, counters), and the application must
have heard the same events in the same states.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tcp.test_tcp_fastpath_diff import _apply, _open, _state
from ustack.transport.tcp.tcb import State


def _watch(conn, close_on_eof: bool) -> list:
    """Record the application's events (the state each one saw); with ``close_on_eof``, close at EOF from
    the callback, as an echo service does."""
    events = []

    def on_event(c):
        events.append((c.tcb.state, c.eof, len(c.receiver.rcvbuf)))
        if close_on_eof and c.eof and c.tcb.state == State.CLOSE_WAIT:
            c.close(None)

    conn.on_event = on_event
    return events


def _teardown_apply(h, conn, step, out: list) -> None:
    kind = step[0]
    if kind == "close":
        conn.close(h.now)
        h.layer.flush(h.now)
        out.append([seg for _, _, seg in h.host.out])
        h.drain()
    elif kind == "shutdown":
        conn.shutdown(1, h.now)
        h.layer.flush(h.now)
        out.append([seg for _, _, seg in h.host.out])
        h.drain()
    elif kind == "ackall":  # the peer acknowledges everything we sent (our FIN included), at its RCV.NXT
        h.peer.send(flags="A", ack=h.peer.rcv_nxt)
        h.layer.flush(h.now)
        out.append([seg for _, _, seg in h.host.out])
        h.drain()
    else:
        _apply(h, conn, step, out)


def _teardown_state(h, conn) -> dict:
    d = _state(h, conn)
    d["layer"] = (conn.key in h.layer.connections, type(h.layer.connections.get(conn.key)).__name__,
                  h.layer.flows.lookup(*conn.key) is conn, conn.eof)
    return d


def _pair(ts, wscale, sack, cc, family, close_on_eof):
    fast_h, fast_conn = _open(True, ts, wscale, sack, cc, family)
    slow_h, slow_conn = _open(False, ts, wscale, sack, cc, family)
    return (fast_h, fast_conn, _watch(fast_conn, close_on_eof)), (slow_h, slow_conn, _watch(slow_conn, close_on_eof))


def _lockstep(fast, slow, steps) -> None:
    (fast_h, fast_conn, fast_ev), (slow_h, slow_conn, slow_ev) = fast, slow
    assert _teardown_state(fast_h, fast_conn) == _teardown_state(slow_h, slow_conn)
    for i, step in enumerate(steps):
        fast_out, slow_out = [], []
        _teardown_apply(fast_h, fast_conn, step, fast_out)
        _teardown_apply(slow_h, slow_conn, step, slow_out)
        assert fast_out == slow_out, f"step {i} {step}: emitted bytes differ"
        assert _teardown_state(fast_h, fast_conn) == _teardown_state(slow_h, slow_conn), f"step {i} {step}: state"
        assert fast_ev == slow_ev, f"step {i} {step}: events differ"
    assert slow_h.layer.flows.fin.taken == slow_h.layer.flows.fin.final_acks == 0


# the peer's FIN in its forms: (kind, seq offset, length, flags, ack offset, window, timestamp mode)
_fin = st.tuples(st.just("seg"),
                 st.sampled_from([0, 0, 0, 0, 1, 1448, -1]),
                 st.sampled_from([0, 0, 0, 1, 100]),
                 st.sampled_from(["FA", "FA", "FA", "FPA", "F", "RFA", "SFA", "FUA", "EFA"]),
                 st.sampled_from(["all", "all", "all", 0, "half", 1, -1, 100000]),
                 st.sampled_from([65535, 65535, 0, 1000]),
                 st.sampled_from(["now", "now", "now", "same", "old", "none", "jump"]))
_PLAIN_FIN = ("seg", 0, 0, "FA", "all", 65535, "now")
_step = st.one_of(
    _fin, _fin, st.just(_PLAIN_FIN), st.just(_PLAIN_FIN),
    st.tuples(st.just("close")), st.tuples(st.just("shutdown")), st.tuples(st.just("ackall")),
    st.tuples(st.just("seg"), st.sampled_from([0, 0, 1448]), st.sampled_from([0, 100, 1448]),
              st.sampled_from(["A", "PA", "R"]), st.sampled_from([0, "all"]), st.sampled_from([65535, 0]),
              st.sampled_from(["now", "old"])),
    st.tuples(st.just("time"), st.sampled_from([0.0, 0.001, 0.05, 0.25, 1.5])),
    st.tuples(st.just("read"), st.sampled_from([1, 100000])),
    st.tuples(st.just("send"), st.sampled_from([1, 100, 5000])),
    st.tuples(st.just("acks"), st.integers(1, 3), st.sampled_from(["all", 1448]), st.sampled_from([65535, 0]),
              st.sampled_from([0.0, 0.002])),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans(), st.booleans(), st.booleans(), st.sampled_from(["newreno", "cubic"]), st.sampled_from([4, 6]),
       st.booleans(), st.lists(_step, min_size=1, max_size=25))
def test_teardown_fast_and_python_paths_agree(ts, wscale, sack, cc, family, close_on_eof, steps):
    _lockstep(*_pair(ts, wscale, sack, cc, family, close_on_eof), steps)



@pytest.mark.parametrize("data", [True, False])
@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("ts,sack,cc", [(True, True, "cubic"), (False, False, "newreno"), (True, False, "newreno")])
def test_the_echo_close_is_taken_in_c_and_agrees(ts, sack, cc, family, data):
    """The echo service's teardown: data both ways (or none: RACK's records still at the SYN's SND.UNA),
    the peer's FIN, our FIN from the event callback, the last ACK (CLOSED): the FIN in C (FinPath), the
    last ACK demuxed in C, the same bytes and states."""
    fast, slow = _pair(ts, True, sack, cc, family, True)
    steps = [("seg", 0, 100, "PA", "all", 65535, "now"), ("read", 100000), ("send", 100),
             ("acks", 1, "all", 65535, 0.002)] if data else []
    steps += [("time", 0.01), _PLAIN_FIN, ("time", 0.3), ("ackall",)]
    _lockstep(fast, slow, steps)
    (fast_h, fast_conn, fast_ev), (slow_h, slow_conn, _) = fast, slow
    assert fast_h.layer.flows.fin.taken == 1 and fast_h.layer.flows.fin.final_acks == 1
    # our FIN from the callback's close() written in C too under RACK-TLP (SACK on), by Sender.output otherwise
    assert fast_h.layer.flows.fin.fins_sent == (1 if sack else 0)
    assert fast_conn.tcb.state == slow_conn.tcb.state == State.CLOSED
    assert fast_conn.key not in fast_h.layer.connections and fast_h.layer.flows.lookup(*fast_conn.key) is None
    states = [e[0] for e in fast_ev if e[0] != State.ESTABLISHED]
    assert states[:2] == [State.CLOSE_WAIT, State.LAST_ACK] and states[-1] == State.CLOSED  # (a retransmission's)


@pytest.mark.parametrize("steps,taken", [
    ([("send", 100), _PLAIN_FIN], 1),  # our data outstanding: the FIN acknowledges it (TxPath.on_ack)
    ([("send", 100), ("time", 0.3), _PLAIN_FIN], 1),  # ... after an RTO (Sender.on_ack's Python way)
    ([("send", 100), ("seg", 0, 0, "FA", "half", 65535, "now")], 0),  # ... part of it: SEG.ACK = SND.MAX needed
    ([("seg", 0, 0, "A", 0, 0, "now"), _PLAIN_FIN], 0),  # a window opening from zero (persist's work)
    ([("seg", 0, 0, "FPA", "all", 65535, "now")], 0),  # PSH: the general path
    ([("seg", 1, 0, "FA", "all", 65535, "now"), ("seg", -1, 1, "A", "all", 65535, "now")], 0),  # early FIN
    ([("seg", 0, 0, "FA", "all", 65535, "old")], 0),  # PAWS
    ([("close",), _PLAIN_FIN, ("ackall",)], 0),  # simultaneous close: FIN-WAIT-1's
    ([_PLAIN_FIN, _PLAIN_FIN, ("close",), ("ackall",)], 1),  # a repeated FIN (CLOSE-WAIT's), the app closes later
])
def test_fins_in_other_forms_go_the_python_way_and_agree(steps, taken):
    fast, slow = _pair(True, True, True, "cubic", 4, False)
    _lockstep(fast, slow, steps)
    assert fast[0].layer.flows.fin.taken == taken


@pytest.mark.parametrize("data", [True, False])
@pytest.mark.parametrize("family", [4, 6])
def test_our_close_first_sends_the_lone_fin_in_c_and_agrees(family, data):
    """The application closes first (FIN-WAIT-1) with nothing buffered: ``Sender.output``'s lone FIN is
    written in C (``_fastpath.lone_fin``), the same FIN, RACK record and timer as the Python loop's; then
    the peer's ACK and FIN (FIN-WAIT-2, TIME-WAIT) and a retransmission-free end, in lockstep."""
    from ustack import _fastpath

    calls = []
    real = _fastpath.lone_fin

    def counting(ep, sender, now):
        sent = real(ep, sender, now)
        calls.append(sent)
        return sent

    fast, slow = _pair(True, True, True, "cubic", family, False)
    steps = [("seg", 0, 100, "PA", "all", 65535, "now"), ("read", 100000), ("send", 100),
             ("acks", 1, "all", 65535, 0.002)] if data else []
    import ustack.transport.tcp.sender as sender_mod
    sender_mod.lone_fin = counting
    try:
        _lockstep(fast, slow, steps + [("time", 0.01), ("close",), ("time", 0.01), ("ackall",), _PLAIN_FIN,
                                       ("time", 0.5)])
    finally:
        sender_mod.lone_fin = real
    assert calls[0] is True  # the fast one's FIN (the slow one has no TxPath: lone_fin is not asked)
    assert fast[1].tcb.state == slow[1].tcb.state
