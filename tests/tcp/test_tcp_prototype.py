"""Passive connections copied from a listener's prototype (transport/tcp/prototype.py) are the connections
``Connection.__init__`` builds: object by object, field by field, and no two copies share a part."""

from __future__ import annotations

import enum
import types
from collections import deque

import pytest

from tests.tcp.harness import LOCAL, PEER, Harness
from ustack._fastpath import SlotCopier
from ustack.timers import Timer
from ustack.transport.tcp.connection import Connection
from ustack.transport.tcp.prototype import Copiers, Prototype, passive_connection

# classes of which every connection must have instances of its own
_OWN = ("Connection", "Tcb", "Receiver", "Sender", "Output", "ReceiveBuffer", "SendRing", "ChunkQueue",
        "DelayedAck", "ReceiveSpace", "RttEstimator", "Cubic", "NewReno", "NewRenoRecovery", "RackRecovery",
        "SackRecovery", "Prr", "Timer", "FlowEmitter")
_VALUES = (int, float, bool, str, bytes, tuple, type(None), enum.Enum)


def _slots(obj) -> tuple:
    try:
        return SlotCopier(type(obj)).names
    except TypeError:
        return ()


def _same(a, b, pairs: dict, path: str) -> None:
    """``a`` (built by ``Connection.__init__``) and ``b`` (copied) are the same graph: values equal,
    shared objects identical, per-connection objects distinct but alike (recursively)."""
    if id(a) in pairs:
        assert pairs[id(a)] is b, f"{path}: the two graphs are wired differently"
        return
    pairs[id(a)] = b
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, _VALUES):
        assert a == b, f"{path}: {a!r} != {b!r}"
        return
    if isinstance(a, (types.MethodType, types.BuiltinMethodType)) and not isinstance(a.__self__, types.ModuleType):
        assert getattr(a, "__func__", a.__name__) == getattr(b, "__func__", b.__name__), path
        _same(a.__self__, b.__self__, pairs, path + ".__self__")
        return
    if isinstance(a, (list, dict, set, deque, bytearray)):
        assert a is not b and a == b, f"{path}: a {type(a).__name__} shared, or not alike"
        return
    name = type(a).__name__
    if name not in _OWN:
        assert a is b, f"{path}: {name} should be shared"
        return
    assert a is not b, f"{path}: a {name} shared between two connections"
    for slot in _slots(a):
        has = hasattr(a, slot)
        assert has == hasattr(b, slot), f"{path}.{slot}: set in one only"
        if has:
            _same(getattr(a, slot), getattr(b, slot), pairs, f"{path}.{slot}")
    if isinstance(a, Timer):
        return
    for attr in ("capacity", "nbytes", "builds", "refusals"):  # the C parts: what they show
        if hasattr(a, attr):
            assert getattr(a, attr) == getattr(b, attr), f"{path}.{attr}"


def _own_parts(conn) -> set:
    """ids of every per-connection object reachable from ``conn``."""
    seen: set = set()
    todo = [conn]
    out = set()
    while todo:
        o = todo.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, (types.MethodType, types.BuiltinMethodType)):
            todo.append(o.__self__)
            continue
        if isinstance(o, (list, dict, set, deque, bytearray)):
            out.add(id(o))  # (a container a part holds is that connection's too)
        elif type(o).__name__ in _OWN:
            out.add(id(o))
            todo.extend(getattr(o, s) for s in _slots(o) if hasattr(o, s))
    return out


CONFIGS = [
    {},
    {"sack": False},
    {"timestamps": False, "window_scaling": False},
    {"congestion": "newreno", "nodelay": True, "loss_recovery": "rfc6675"},
    {"rcvbuf": 4096, "sndbuf": 8192, "delayed_ack": False, "keepalive": True},
]


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("knobs", CONFIGS)
def test_copy_is_the_connection_init_builds(knobs, family):
    h = Harness(family=family, **knobs)
    layer = h.layer
    lst = layer.listen((h.local, 80), 8)
    cfg = lst.config
    proto = Prototype(layer, Copiers(), cfg, 1400, len(h.local))
    local, remote = (h.local, 80), (h.peer.addr, 5000)
    built = Connection(layer, cfg, local, remote, listener=lst, hashes=(123456, 789), own_mss=1400)
    copy = proto.make(layer, local, remote, lst, (123456, 789))
    pairs: dict = {}
    _same(built, copy, pairs, "conn")
    assert len(pairs) > 50  # (the walk went through every part)
    other = proto.make(layer, local, (h.peer.addr, 5001), lst, (1, 2))
    mine, theirs, protos = _own_parts(copy), _own_parts(other), _own_parts(proto.conn)
    assert len(mine) > 12 and not mine & theirs and not mine & protos
    assert other.key == (h.local, 80, h.peer.addr, 5001) and other._isn_f == 1 and other.tcb.ts_offset == 2


def test_prototype_serves_only_its_configuration():
    h = Harness()
    layer = h.layer
    lst = layer.listen((LOCAL, 80), 8)
    local, remote = (LOCAL, 80), (PEER, 5000)
    first = passive_connection(layer, lst.config, local, remote, lst, (1, 2), 1460)
    proto = lst.prototype
    assert proto is not None and proto.fits(layer, lst.config, 1460, 4)
    assert not proto.fits(layer, lst.config, 1400, 4) and not proto.fits(layer, lst.config, 1460, 16)
    lst.config.rcvbuf = 8192  # a knob changed in place: the prototype no longer fits
    assert not proto.fits(layer, lst.config, 1460, 4)
    second = passive_connection(layer, lst.config, local, (PEER, 5001), lst, (1, 2), 1460)
    assert lst.prototype is not proto and second.receiver.rcvbuf.capacity == 8192
    assert first.receiver.rcvbuf.capacity != 8192
    _same(Connection(layer, lst.config, local, (PEER, 5002), listener=lst, hashes=(1, 2), own_mss=1460),
          lst.prototype.make(layer, local, (PEER, 5002), lst, (1, 2)), {}, "conn")


def test_a_pacing_controller_is_always_built():
    h = Harness(congestion="bbr")
    lst = h.layer.listen((LOCAL, 80), 8)
    conn = passive_connection(h.layer, lst.config, (LOCAL, 80), (PEER, 5000), lst, (1, 2), 1460)
    assert lst.prototype is None and conn.sender.rs is not None and conn.sender.pacer is not None


def _state(conn) -> dict:
    tcb, sender = conn.tcb, conn.sender
    return {"state": tcb.state, "snd_wnd": tcb.snd_wnd, "wscale": (tcb.snd_wscale, tcb.rcv_wscale),
            "mss": (tcb.snd_mss, tcb.rcv_mss, tcb.mss_base), "ts_ok": tcb.ts_ok, "sack_ok": tcb.sack_ok,
            "cwnd": sender.cc.cwnd, "rto": sender.rtt.rto, "srtt": sender.rtt.srtt,
            "recovery": type(sender.recovery).__name__, "rcv_adv": tcb.rcv_adv - tcb.rcv_nxt,
            "timers": (sender.rtx_timer.deadline, sender.persist_timer, sender.cork_timer)}


def test_second_passive_open_is_copied_and_behaves_the_same():
    """The first handshake on a listener builds its connection (and the prototype); the second, from
    another port, is copied: the same SYN-ACK options, the same established state, and data both ways."""
    h = Harness(sack=True, timestamps=True)
    h.peer.use_ts = True
    lst, first = h.open_passive()
    assert lst.prototype is not None
    synacks, conns = [], [first]
    h.peer.port = 5001
    h.peer.snd_nxt = 1000
    h.peer.send(flags="S", win=65535, mss=1460)
    synack = h.peer.expect(flags="SA", ack=1001)
    h.peer.send(flags="A", ack=synack.seq + 1, win=65535)
    second = lst.accept()
    conns.append(second)
    assert second is not None and second.key[3] == 5001
    assert _state(first) == _state(second)
    for conn in conns:
        assert conn.send(b"x" * 100) == 100
    h.layer.flush(h.now)
    out = h.drain()
    assert sorted(len(s.payload) for s in out) == [100, 100]


def test_copied_connection_takes_the_syn_acks_timer_and_makes_none():
    """A copied connection's retransmission timer is the SYN-ACK's (the record's, as ``adopt`` leaves
    it): ``make`` creates no timer of its own for it, and the timer's deadline and callback are kept."""
    h = Harness(sack=True, timestamps=True)
    h.peer.use_ts = True
    lst, _ = h.open_passive()
    assert lst.prototype is not None
    h.peer.port = 5001
    h.peer.snd_nxt = 1000
    h.peer.send(flags="S", win=65535, mss=1460)
    synack = h.peer.expect(flags="SA", ack=1001)
    rec = h.layer.connections[(LOCAL, 80, PEER, 5001)]
    timer = rec.timer
    assert isinstance(timer, Timer) and timer.deadline is not None
    made = []
    original = type(h.timers).timer

    def counting(timers, callback, owner=None):
        made.append(callback)
        return original(timers, callback, owner)

    type(h.timers).timer = counting
    try:
        conn = rec.build()
    finally:
        type(h.timers).timer = original
    assert conn.sender.rtx_timer is timer and timer.owner is conn
    assert timer.callback is Connection._on_rtx_timer
    assert Connection._on_rtx_timer not in made
    h.peer.send(flags="A", ack=synack.seq + 1, win=65535)
    assert lst.accept() is conn and conn.state.name == "ESTABLISHED"
