"""The C transcriptions of the sender's arithmetic (``_fastpath.TxPath``, _fp_tx.pxi) against the Python classes.

NewReno (RFC 5681 with ABC's SMSS-per-ACK limit) and CUBIC (RFC 9438) window
growth, and the RFC 6298 estimator, are driven through the same random
event sequences twice: once by the Python methods, once by the C ones on a
twin object; every slot must be equal after every event (floats exactly:
both sides do the same IEEE double operations in the same order).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ustack import _fastpath
from ustack.transport.tcp.congestion import Cubic, NewReno
from ustack.transport.tcp.layer import TcpLayer
from ustack.transport.tcp.rtt import RttEstimator
from tests.tcp.harness import Harness

_FIELDS = {NewReno: _fastpath.NEWRENO_FIELDS, Cubic: _fastpath.CUBIC_FIELDS}


def _tx() -> _fastpath.TxPath:
    layer: TcpLayer = Harness().layer
    return layer.tx


def _slots(obj, fields) -> tuple:
    return tuple(getattr(obj, f) for f in fields)


_event = st.one_of(
    st.tuples(st.just("ack"), st.integers(1, 90000), st.sampled_from([None, 0.0, 0.0004, 0.01, 0.1, 0.35]),
              st.sampled_from([0.0, 0.0001, 0.003, 0.02, 0.2, 1.0, 7.5])),
    st.tuples(st.just("congestion"), st.integers(0, 400000)),
    st.tuples(st.just("rto"), st.integers(0, 400000)),
    st.tuples(st.just("recovery_end"), st.integers(0, 400000)),
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([NewReno, Cubic]), st.sampled_from([536, 1448, 8948]), st.lists(_event, max_size=60))
def test_c_window_growth_equals_the_python_classes(cls, mss, events):
    tx = _tx()
    py, c = cls(mss), cls(mss)
    fields = _FIELDS[cls]
    now = 100.0
    for ev in events:
        if ev[0] == "ack":
            _, acked, rtt, dt = ev
            now += dt
            py.on_ack(acked, rtt, now)
            assert tx.cc_on_ack(c, acked, rtt, now)
        else:  # reductions are Python's on both (recovery's): they move the twin into congestion avoidance
            getattr(py, "on_" + ev[0])(ev[1], now)
            getattr(c, "on_" + ev[0])(ev[1], now)
        assert _slots(c, fields) == _slots(py, fields), ev


def test_cubic_in_congestion_avoidance_grows_along_the_cubic_curve():
    """A worked case: after a reduction, C and Python take the same steps and cwnd returns toward W_max."""
    tx = _tx()
    py, c = Cubic(1448), Cubic(1448)
    for cc in (py, c):
        cc.cwnd = 100 * 1448
        cc.on_congestion(100 * 1448, 0.0)
    assert c.cwnd == 70 * 1448
    now = 0.0
    for _ in range(2000):
        now += 0.001
        py.on_ack(1448, 0.02, now)
        tx.cc_on_ack(c, 1448, 0.02, now)
    assert (c.cwnd, c.w_est, c.k, c.epoch) == (py.cwnd, py.w_est, py.k, py.epoch)
    assert 70 * 1448 < c.cwnd


def test_another_algorithm_is_left_alone():
    class Other:
        cwnd = 1

    assert _tx().cc_on_ack(Other(), 1448, None, 1.0) is False


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([(1.0, 0.2, 60.0), (3, 1, 60), (1.0, 0.0, 0.5), (3, 3, 60)]),
       st.lists(st.one_of(st.floats(-0.01, 70.0, allow_nan=False), st.sampled_from([1.0, 20.0])), max_size=30),
       st.booleans())
def test_c_rtt_estimator_equals_rfc6298_in_python(bounds, samples, backoff_first):
    tx = _tx()
    py, c = RttEstimator(*bounds), RttEstimator(*bounds)
    if backoff_first:
        py.backoff()
        c.backoff()
    for r in samples:
        py.sample(r)
        tx.rtt_sample(c, r)
        assert _slots(c, _fastpath.RTT_FIELDS) == _slots(py, _fastpath.RTT_FIELDS), r
        assert type(c.rto) is type(py.rto)  # a bound that wins is the bound itself (3 s = 1 + 2 * 1, 60 = 20 * 3)


def test_rtt_sample_wants_an_estimator():
    with pytest.raises(TypeError):
        _tx().rtt_sample(object(), 0.1)
