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


def _frame(stack, emit) -> bytes:
    """The frame ``emit()`` writes into the stack's next TX slot (read before the batch posts it)."""
    link = stack.link
    with stack.tx_batch():
        assert emit()
        frame = bytes(link._slots[len(link._lens) - 1][:link._lens[-1]])
    return frame


@pytest.mark.parametrize("ipv6", [False, True])
@given(st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFF), st.booleans(),
       st.sampled_from([None, 0, 7, 14]), st.booleans())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_synack_from_the_flow_template_is_the_ip_layers_frame(ipv6, iss, ack, window, sack, wscale, ts):
    """``FlowEmitter.options`` (the SYN-ACK from the flow's template, kept as the connection's emitter)
    writes the bytes ``emit_tcp_options`` writes: same IP ID counter, checksums and options."""
    from ustack.tools.pipe_pair import PipePair
    from ustack.transport.tcp.output import syn_options

    pair = PipePair(ipv6=ipv6)
    if ipv6:
        pair.settle(40, 0.1)
    a, b = pair.a, pair.b
    lst, client = pair.connect()
    assert pair.run(lambda now: False, lambda: client.tcb.state == State.ESTABLISHED, 5)
    src, dst = bytes(client.remote_addr), bytes(client.local_addr)  # a's address, b's
    opts = syn_options(1400, wscale, sack, (123456, 654321) if ts else None)
    host = a.tcp.host
    ip = host.ip6 if ipv6 else host.ip
    counters = None if ipv6 else ip.idents.counters
    saved = list(counters) if counters is not None else None
    emitter = host.tcp_emitter()
    via_template = _frame(a, lambda: emitter.options(src, dst, 80, 4242, iss, ack, 0x12, window, opts, pair.clock.now))
    if counters is not None:
        counters[:] = saved  # the same IP ID again
    via_ip = _frame(a, lambda: ip.emit_tcp_options(src, dst, 80, 4242, iss, ack, 0x12, window, opts, pair.clock.now))
    assert via_template == via_ip and emitter.builds == 1
