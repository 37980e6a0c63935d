"""Our segments without data written in C (``_fastpath.emit_control``, _fp_ctl.pxi) are the ones
``Output.emit`` writes: the same bytes and the same state after every step, the FIN exchange of both
closes, FIN retransmissions, pure ACKs and the SACK case it leaves to Python."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tcp.test_tcp_fastpath_diff import _apply, _in_lockstep, _open, _state
from ustack._fastpath import emit_control
from ustack.transport.tcp.tcb import State


def _apply_close(h, conn, step, out: list) -> None:
    """``_apply``'s steps, and: ("close",) the application closes, ("shut",) it shuts down writing."""
    if step[0] == "close":
        conn.close(now=h.now)
    elif step[0] == "shut":
        try:
            conn.shutdown(1, now=h.now)
        except OSError as e:
            out.append(type(e).__name__)
    else:
        _apply(h, conn, step, out)
        return
    h.layer.flush(h.now)
    out.append([seg for _, _, seg in h.host.out])
    h.drain()


def _state_close(h, conn) -> dict:
    d = _state(h, conn)
    d["state"] = (conn.tcb.state, conn.out.segs_out)
    return d


def _pair(ts, wscale, sack, family=4):
    fast = _open(True, ts, wscale, sack, "cubic", family)
    slow = _open(False, ts, wscale, sack, "cubic", family)
    assert fast[1].out.ctl is not None and slow[1].out.ctl is None
    return fast, slow


_FIN = ("seg", 0, 0, "FA", "all", 65535, "now")
_ACK_ALL = ("seg", 0, 0, "A", "all", 65535, "now")


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("ts,wscale,sack", [(True, True, True), (False, False, False), (True, False, True)])
def test_passive_close_fin_and_last_ack(ts, wscale, sack, family, monkeypatch):
    """The peer's FIN, our close (FIN-ACK in one segment, from C), its retransmission, the last ACK."""
    from ustack.transport.tcp import output

    sent = []

    def counting(*args):
        done = emit_control(*args)
        sent.append((args[3], done))
        return done

    monkeypatch.setattr(output, "emit_control", counting)
    fast, slow = _pair(ts, wscale, sack, family)
    _in_lockstep(fast, slow, [_FIN, ("close",), ("time", 1.5), ("time", 3.0), _ACK_ALL],
                 apply=_apply_close, state=_state_close)
    assert fast[1].tcb.state == State.CLOSED and slow[1].tcb.state == State.CLOSED
    assert (0x11, True) in sent and all(done for _, done in sent)  # the FIN-ACK and its retransmissions from C


@pytest.mark.parametrize("ts,wscale,sack", [(True, True, True), (False, False, False)])
def test_active_close_after_data(ts, wscale, sack):
    """Data both ways, then our FIN first (FIN-WAIT-1/2), the peer's FIN, TIME-WAIT's ACK."""
    fast, slow = _pair(ts, wscale, sack)
    steps = [("send", 100), ("burst", 2, 1448, "PA", "all"), ("read", 5000), ("time", 0.05), ("close",),
             ("time", 0.001), _ACK_ALL, _FIN]
    _in_lockstep(fast, slow, steps, apply=_apply_close, state=_state_close)


def test_sack_blocks_are_left_to_python():
    """Out-of-order data owes SACK blocks: C declines and ``Output.emit`` writes them (same bytes)."""
    fast, slow = _pair(True, True, True)
    hole = ("seg", 1448, 1448, "A", 0, 65535, "now")
    _in_lockstep(fast, slow, [hole, ("shut",), ("time", 0.25)], apply=_apply_close, state=_state_close)


_close_step = st.one_of(st.just(("close",)), st.just(("shut",)), st.just(_FIN), st.just(_ACK_ALL),
                        st.tuples(st.just("time"), st.sampled_from([0.001, 0.05, 0.25, 1.5])),
                        st.tuples(st.just("send"), st.sampled_from([1, 1448, 5000])),
                        st.tuples(st.just("read"), st.sampled_from([1, 5000])),
                        st.tuples(st.just("burst"), st.integers(1, 3), st.sampled_from([1, 1448]),
                                  st.sampled_from(["A", "PA"]), st.sampled_from(["all", 0])))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans(), st.booleans(), st.booleans(), st.lists(_close_step, min_size=1, max_size=12))
def test_random_closes_agree(ts, wscale, sack, steps):
    fast, slow = _pair(ts, wscale, sack)
    _in_lockstep(fast, slow, steps, apply=_apply_close, state=_state_close)
