"""The handshake's ACK in C (``_fastpath.HandshakePath``, issue 11): in lockstep with the Python path.

Two server stacks on the pipe (same secrets, clock and configuration, the C SYN path in both), one with the
C handshake-ACK path (the default with the fast path) and one without it (``flows.hsk = None``:
``Stack._deliver`` -> ``TcpLayer.segment_arrives`` -> ``SynReceived.segment_arrives``), are fed the same
random frames: SYNs with random option sets from IPv4 and IPv6 peers, then ACKs of our SYN-ACKs, most in the
handshake's common form and the rest adversarial (a SEG.SEQ or SEG.ACK off by one or by half the space, data
or a FIN on the ACK, RST, SYN, no timestamp, an old TSval (PAWS), TSecr zero or from the future, windows 0 to
65535); ACKs again for built connections, accept() calls, listener callbacks that accept and send or close at
once, the clock moving (SYN-ACK retransmissions build the record first: then the C path declines). After
every frame both must have sent the same bytes and hold the same counters, records, accept and SYN queues,
timers and connections (every plain field of the connection, its TCB, sender, receiver, output, RTT
estimator, controller, loss recovery and delayed-ACK state); the application must have seen the same events.
The C path must have taken handshakes.
"""

from __future__ import annotations

import random
import struct

import pytest

from ustack.backends.pipe import PipeLink
from ustack.api.clock import ManualClock
from ustack.net.addr import ANY6, parse
from ustack.stack import Stack
from ustack.transport.tcp.config import TcpConfig
from ustack.transport.tcp.connection import Connection
from ustack.transport.tcp.synrecv import SynReceived
from ustack.transport.tcp.syncookies import SynCookies
from ustack.transport.tcp.timewait import TimeWait

from tests.tcp.test_tcp_syn_c import Driven, _options, _syn

MAC_A = b"\x02\x00\x00\x00\x00\x0a"
MAC_B = b"\x02\x00\x00\x00\x00\x0b"
A4, B4 = parse("198.18.0.1"), parse("198.18.0.2")
A6, B6 = parse("fd00::1"), parse("fd00::2")
PORT = 80
_EDGES = (0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFF00, 0xFFFF0001, 0x7FFFFFFF, 0x80000000, 0)
_PLAIN = (int, float, bool, str, bytes, type(None))


def _plain(v):
    if isinstance(v, _PLAIN):
        return (type(v).__name__, v)
    if isinstance(v, tuple) and all(isinstance(x, _PLAIN) for x in v):
        return v
    return type(v).__name__  # an object: its type only (its own fields are compared where it matters)


def _fields(obj) -> dict:
    """Every slot of ``obj`` (its bases' too) as a plain value or the type name of what it holds."""
    out = {"__type__": type(obj).__name__}
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if name == "__weakref__":
                continue
            try:
                out[name] = _plain(getattr(obj, name))
            except AttributeError:
                out[name] = "<unset>"
    return out


def _conn_state(conn) -> dict:
    s, r = conn.sender, conn.receiver
    parts = {"conn": conn, "tcb": conn.tcb, "sender": s, "receiver": r, "out": conn.out, "rtt": s.rtt, "cc": s.cc,
             "recovery": s.recovery, "delack": r.delack, "space": r.space}
    state = {k: _fields(v) for k, v in parts.items()}
    state["timers"] = {name: getattr(t, "deadline", None) for name, t in (
        ("rtx", s.rtx_timer), ("keepalive", conn._keepalive_timer), ("delack", r.delack_timer),
        ("persist", s.persist_timer))}
    state["rtx_owner"] = s.rtx_timer.owner is conn if hasattr(s.rtx_timer, "owner") else None
    state["buffers"] = (len(s.sndbuf), len(r.rcvbuf), r.rcvbuf.free)
    return state


class Server(Driven):
    def __init__(self, c_path: bool, cfg: dict, listen_on, backlog: int, app: str):
        self.clock = ManualClock(1000.0)
        self.link = PipeLink(self.clock, seed=1, mac_a=MAC_A, mac_b=MAC_B)
        self.stack = Stack(self.link.a, ["198.18.0.1/24", "fd00::1/64"], isn_secret=b"s" * 16,
                           tcp_config=TcpConfig(**cfg), announce=False, fastpath=True)
        if not c_path:
            self.stack.tcp.flows.hsk = None
        self.stack.tcp.cookies = SynCookies(b"s" * 16, entropy=lambda n: bytes(n))
        self.hsk = self.stack.tcp.flows.hsk
        now = self.clock.now
        self.stack.arp.learn(B4, MAC_B, now)
        self.stack.ndp._learn_stale(B6, MAC_B, now)
        self.lst = self.stack.tcp.listen((listen_on, PORT), backlog)
        self.events = []
        self.accepted = []
        self.app = app
        if app != "none":
            self.lst.on_event = self._on_listener
        self.stack.poll(now)
        self.link.b.rx_burst(64)

    def _on_listener(self, lst) -> None:
        """The application's accept loop, run from the listener's notification (inside the handshake's ACK)."""
        while True:
            conn = lst.accept()
            if conn is None:
                return
            self.accepted.append(conn)
            conn.on_event = self._on_conn
            self.events.append(("accept", conn.key, conn.state.name))
            if self.app == "send":
                conn.send(b"hello")
            elif self.app == "close":
                conn.close()
            elif self.app == "send_now":
                conn.send(b"x" * 3000, now=self.clock.now)

    def _on_conn(self, conn) -> None:
        self.events.append(("event", conn.key, conn.state.name))

    def state(self) -> dict:
        tcp = self.stack.tcp
        conns = {}
        for key, conn in tcp.connections.items():
            if type(conn) is SynReceived:
                conns[key] = ("rec", _fields(conn), conn.timer.deadline if conn.timer is not None else None)
            elif type(conn) is TimeWait:
                conns[key] = ("tw", _fields(conn))
            else:
                conns[key] = _conn_state(conn)
        for conn in self.accepted:
            if type(conn) is Connection:
                conns[("accepted",) + conn.key] = _conn_state(conn)
        lst = self.lst
        timers = self.stack.timers
        return {"counters": {k: v for k, v in self.stack.stats.counters.items()
                             if v and k.startswith(("tcp.", "ipv4.", "stack.", "drop.tcp"))},
                "connections": conns, "syn_queue": sorted(r.key for r in lst._syn_queue),
                "accept": [c.key for c in lst._accept], "flows": len(tcp.flows), "events": list(self.events),
                "timers": _tcp_timers(timers), "mem": tcp.mem_used}


def _tcp_timers(timers) -> list:
    """The armed timers of TCP's objects (connections, records, the layer), by deadline and callback; the
    stacks' MLD reports and neighbour probes run on their own random timers (not compared)."""
    out = []
    for deadline, _order, gen, timer in timers._heap:
        name = getattr(timer.callback, "__qualname__", "")
        if gen == timer._gen and timer.deadline is not None and name.startswith(("Connection", "SynReceived",
                                                                                  "TimeWait", "TcpLayer")):
            out.append((timer.deadline, name))
    return sorted(out)


def _synack_fields(f: bytes):
    """(src, dst, sport, dport, seq, ack, tsval, tsecr or None) of one of our SYN-ACKs."""
    six = f[12:14] == b"\x86\xdd"
    l3 = 14 + (40 if six else (f[14] & 15) * 4)
    s_, d_ = (f[22:38], f[38:54]) if six else (f[26:30], f[30:34])
    sp, dp, seq, ack = struct.unpack_from("!HHII", f, l3)
    hl = (f[l3 + 12] >> 4) * 4
    opts = f[l3 + 20:l3 + hl]
    ts = None
    i = 0
    while i < len(opts):
        kind = opts[i]
        if kind == 0:
            break
        if kind == 1:
            i += 1
            continue
        if kind == 8:
            ts = struct.unpack_from("!II", opts, i + 2)
        i += opts[i + 1]
    return s_, d_, sp, dp, seq, ack, ts


def _ack_for(rng, f: bytes, common: float) -> bytes:
    """The peer's answer to the SYN-ACK ``f``: the handshake's ACK in its common form with probability
    ``common``, else one of its adversarial variants."""
    s_, d_, sp, dp, seq, ack, ts = _synack_fields(f)
    a_seq, a_ack, flags, window, payload = ack, (seq + 1) & 0xFFFFFFFF, 0x10, rng.choice((0, 1, 512, 65535)), b""
    tsopt = None if ts is None else [(ts[1] + rng.choice((0, 0, 1, 40))) & 0xFFFFFFFF, ts[0]]
    if rng.random() >= common:
        what = rng.choice(("seq", "ack", "flags", "data", "nots", "paws", "tsecr0", "tsecr_future", "ts_added"))
        if what == "seq":
            a_seq = (a_seq + rng.choice((1, -1, 1 << 31, 70000))) & 0xFFFFFFFF
        elif what == "ack":
            a_ack = (a_ack + rng.choice((1, -1, 1 << 31))) & 0xFFFFFFFF
        elif what == "flags":
            flags = rng.choice((0x11, 0x14, 0x04, 0x12, 0x18, 0x30, 0x50))
        elif what == "data":
            flags = rng.choice((0x10, 0x18))
            payload = b"d" * rng.choice((1, 100))
        elif what == "nots":
            tsopt = None
        elif what == "paws" and tsopt is not None:
            tsopt[0] = (ts[1] - rng.choice((1, 1000))) & 0xFFFFFFFF
        elif what == "tsecr0" and tsopt is not None:
            tsopt[1] = 0
        elif what == "tsecr_future" and tsopt is not None:
            tsopt[1] = (ts[0] + rng.choice((5, 1 << 31))) & 0xFFFFFFFF
        elif what == "ts_added" and tsopt is None:
            tsopt = [rng.getrandbits(32), rng.getrandbits(32)]
    opts = b"" if tsopt is None else b"\x01\x01" + struct.pack("!BBII", 8, 10, *tsopt)
    frame = _syn(d_, s_, dp, sp, a_seq, flags, window, opts, ack=a_ack)
    if payload:  # (rebuilt with the data after the header)
        frame = _with_payload(d_, s_, dp, sp, a_seq, a_ack, flags, window, opts, payload)
    return frame


def _with_payload(src, dst, sport, dport, seq, ack, flags, window, opts, payload) -> bytes:
    from ustack.wire.checksum import ones_sum, pseudo_header_sum
    hl = 20 + len(opts)
    seg = bytearray(struct.pack("!HHIIBBHHH", sport, dport, seq, ack, (hl // 4) << 4, flags, window, 0, 0)
                    + opts + payload)
    csum = ~ones_sum(seg, pseudo_header_sum(src, dst, 6, len(seg))) & 0xFFFF
    struct.pack_into("!H", seg, 16, csum)
    if len(src) == 4:
        ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(seg), 0, 0x4000, 64, 6, 0, src, dst))
        struct.pack_into("!H", ip, 10, ~ones_sum(ip) & 0xFFFF)
        return MAC_A + MAC_B + b"\x08\x00" + bytes(ip) + bytes(seg)
    return MAC_A + MAC_B + b"\x86\xdd" + struct.pack("!IHBB", 6 << 28, len(seg), 6, 64) + src + dst + bytes(seg)


def _is_synack(f: bytes) -> bool:
    six = f[12:14] == b"\x86\xdd"
    if f[12:14] not in (b"\x08\x00", b"\x86\xdd"):
        return False
    l3 = 14 + (40 if six else (f[14] & 15) * 4)
    return len(f) > l3 + 13 and f[l3 + 13] == 0x12


def _lockstep(seed: int, cfg: dict, listen_on, backlog: int, app: str, steps: int = 80,
              common: float = 0.7) -> int:
    rng = random.Random(seed)
    c, py = Server(True, cfg, listen_on, backlog, app), Server(False, cfg, listen_on, backlog, app)
    assert c.hsk is not None and py.hsk is None
    synacks = []
    for step in range(steps):
        r = rng.random()
        six = listen_on != A4 and (listen_on == A6 or rng.random() < 0.4)
        src, dst = (B6, A6) if six else (B4, A4)
        if r < 0.35:
            sport = rng.choice((1000, 1001, 1002, 1003)) if rng.random() < 0.3 else 20000 + step
            isn = rng.getrandbits(32) if rng.random() < 0.7 else rng.choice(_EDGES)  # (RCV.NXT + window wraps)
            frame = _syn(src, dst, sport, PORT, isn, 0x02, rng.choice((0, 512, 65535)), _options(rng))
            out = (c.feed(frame), py.feed(frame))
        elif r < 0.75 and synacks:
            frame = _ack_for(rng, rng.choice(synacks[-6:]), common)
            out = (c.feed(frame), py.feed(frame))
        elif r < 0.85:
            got = (c.lst.accept(), py.lst.accept())
            assert (got[0] is None) == (got[1] is None)
            if got[0] is not None:
                c.accepted.append(got[0])
                py.accepted.append(got[1])
            out = (c.advance(0), py.advance(0))
        else:
            dt = rng.choice((0.0001, 0.002, 0.05, 1.1, 3.5))
            out = (c.advance(dt), py.advance(dt))
        assert out[0] == out[1], f"step {step}: frames differ"
        synacks += [f for f in out[0] if _is_synack(f)]
        assert c.state() == py.state(), f"step {step}: state differs"
        _own_parts(c)
    return c.hsk.taken


def _parts(conn) -> list:
    s, r = conn.sender, conn.receiver
    return [conn.tcb, r, r.rcvbuf, r.delack, r.space, conn.out, s, s.sndbuf, s.rtt, s.cc, s.recovery]


def _own_parts(server) -> None:
    """No connection shares a part it changes with another or with its listener's prototype (a copy's own)."""
    seen = {}
    proto = server.lst.prototype
    if proto is not None:
        for part in _parts(proto.conn):
            seen[id(part)] = "prototype"
    conns = {id(c): c for c in list(server.stack.tcp.connections.values()) + server.accepted if type(c) is Connection}
    for conn in conns.values():
        for part in _parts(conn):
            assert seen.setdefault(id(part), conn.key) == conn.key, f"{type(part).__name__} shared: {conn.key}"


CONFIGS = [
    {},
    dict(window_scaling=False, sack=False, timestamps=False),
    dict(timestamps=False, mss=1000, congestion="newreno"),
    dict(sack=False, rcvbuf=32768, keepalive=True, keepidle=5.0),
    dict(loss_recovery="rfc6675", min_rto=1, max_rto=2.5, initial_rto=2),
    dict(loss_recovery="newreno", delayed_ack=False, syn_backlog=2),
]


APPS = ["none", "accept", "send", "close", "send_now"]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("listen_on", ["addr", "any6", "addr6"])
def test_handshake_ack_c_path_lockstep(cfg, listen_on):
    addr = {"addr": A4, "any6": ANY6, "addr6": A6}[listen_on]
    taken = 0
    for seed in range(5):  # (each application behaviour once per configuration and address)
        app = APPS[(seed + len(cfg) + len(listen_on)) % len(APPS)]
        taken += _lockstep(seed * 11 + len(cfg) + len(app), cfg, addr, backlog=1 + 3 * (seed % 3), app=app)
    assert taken > 0  # the C path did take handshakes


def test_handshake_ack_c_path_common_form_only():
    """Nearly every ACK in the common form: the C path takes most handshakes, the same result."""
    taken = sum(_lockstep(seed, {}, ANY6, backlog=64, app="accept", steps=120, common=1.0) for seed in range(3))
    assert taken > 20


def test_fastpath_off_has_no_handshake_path():
    clock = ManualClock(1000.0)
    stack = Stack(PipeLink(clock, seed=1).a, "198.18.0.1/24", fastpath=False, announce=False)
    assert stack.tcp.flows.hsk is None


@pytest.mark.parametrize("value, on", [(None, True), ("1", True), ("", True), ("0", False)])
def test_ack_c_variable_turns_the_path_off_in_the_cli_stack(monkeypatch, value, on):
    """USTACK_ACK_C=0 (``environment.ack_c``, read by the CLI's stack builder): the handshake's ACKs through
    the Python path, the SYN path untouched; any other value or none keeps the C path."""
    import argparse

    from ustack.api import environment
    from ustack.tools.cli_stack import open_stack

    env = {} if value is None else {"USTACK_ACK_C": value}
    assert environment.ack_c(env) is on
    if value is None:
        monkeypatch.delenv("USTACK_ACK_C", raising=False)
    else:
        monkeypatch.setenv("USTACK_ACK_C", value)
    monkeypatch.setenv("USTACK_FASTPATH", "1")
    args = argparse.Namespace(backend="pipe", mtu=None, addr=["198.18.0.1/24"], gateway=None, ifname=None)
    stack, extras = open_stack(args, ManualClock(1000.0))
    try:
        assert (stack.tcp.flows.hsk is not None) is on
        assert stack.tcp.flows.syn is not None
    finally:
        extras["link"].close()
