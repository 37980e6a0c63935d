"""The SYN to a listener in C (``_fastpath.SynPath``, issue 11): in lockstep with the Python path.

Two server stacks on the pipe (same secrets, same clock, same configuration), one with the C SYN path
(the default with the fast path) and one without it (``flows.syn = None``: ``Stack._deliver`` ->
``TcpLayer.segment_arrives`` -> ``Listener.segment_arrives``), are fed the same random frames: SYNs with
random option sets (MSS, window scale, SACK-permitted, timestamps on or off), to the listener's address,
the wildcard, a port nobody listens on, from IPv4 and IPv6 peers; retransmitted SYNs (a record exists),
SYNs with other flags, the handshake's ACK of a SYN-ACK, accept() calls and the clock moving (SYN-ACK
timers, backlog and SYN-queue pressure: cookies). After every frame both must have sent the same bytes and
hold the same counters, records (every ``SynReceived`` field), queues and timers; the C path must have
taken SYNs.
"""

from __future__ import annotations

import random
import struct

import pytest

from ustack.backends.pipe import PipeLink
from ustack.api.clock import ManualClock
from ustack.net.addr import ANY4, ANY6, parse
from ustack.stack import Stack
from ustack.transport.tcp.config import TcpConfig
from ustack.transport.tcp.synrecv import SynReceived
from ustack.transport.tcp.syncookies import SynCookies
from ustack.wire.checksum import ones_sum, pseudo_header_sum

MAC_A = b"\x02\x00\x00\x00\x00\x0a"
MAC_B = b"\x02\x00\x00\x00\x00\x0b"
A4, B4, C4 = parse("198.18.0.1"), parse("198.18.0.2"), parse("198.18.0.3")
A6, B6 = parse("fd00::1"), parse("fd00::2")
PORT, OTHER_PORT = 80, 81
RECORD_FIELDS = ("local", "remote", "key", "seq", "window", "mss", "wscale", "sack_permitted", "timestamps",
                 "iss", "hashes", "syn_time", "own_mss")


def _syn(src, dst, sport, dport, seq, flags, window, opts, ack=0) -> bytes:
    """An Ethernet frame to the server with a TCP segment (checksums filled)."""
    hl = 20 + len(opts)
    seg = bytearray(struct.pack("!HHIIBBHHH", sport, dport, seq, ack, (hl // 4) << 4, flags, window, 0, 0) + opts)
    csum = ~ones_sum(seg, pseudo_header_sum(src, dst, 6, hl)) & 0xFFFF
    struct.pack_into("!H", seg, 16, csum)
    if len(src) == 4:
        ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + hl, 0, 0x4000, 64, 6, 0, src, dst))
        struct.pack_into("!H", ip, 10, ~ones_sum(ip) & 0xFFFF)
        return MAC_A + MAC_B + b"\x08\x00" + bytes(ip) + bytes(seg)
    return MAC_A + MAC_B + b"\x86\xdd" + struct.pack("!IHBB", 6 << 28, hl, 6, 64) + src + dst + bytes(seg)


def _options(rng) -> bytes:
    opts = b""
    if rng.random() < 0.8:
        opts += struct.pack("!BBH", 2, 4, rng.choice((536, 1220, 1400, 1460, 8960, 100)))
    if rng.random() < 0.6:
        opts += b"\x04\x02" if rng.random() < 0.8 else b"\x01\x01"
    if rng.random() < 0.6:
        opts += struct.pack("!BBII", 8, 10, rng.getrandbits(32), 0)
    if rng.random() < 0.6:
        opts += bytes((1, 3, 3, rng.choice((0, 7, 14, 15))))
    return opts + b"\x00" * (-len(opts) % 4)


def _tcp_only(frames) -> list:
    """The TCP frames (the stacks' own MLD reports and neighbour probes run on their own random timers)."""
    return [bytes(f) for f in frames
            if (f[12:14] == b"\x08\x00" and f[23] == 6) or (f[12:14] == b"\x86\xdd" and f[20] == 6)]


class Driven:
    """A stack on a pipe link and a manual clock, fed one frame at a time: what it sent back (TCP only)."""

    def feed(self, frame: bytes) -> list:
        self.link.a._deliver(self.clock.now, frame)
        self.stack.poll(self.clock.now)
        return _tcp_only(self.link.b.rx_burst(64))

    def advance(self, dt: float) -> list:
        self.clock.set(self.clock.now + dt)
        self.stack.poll(self.clock.now)
        return _tcp_only(self.link.b.rx_burst(64))


class Server(Driven):
    def __init__(self, c_path: bool, cfg: dict, listen_on, backlog: int, reuseport: bool = False):
        self.clock = ManualClock(1000.0)
        self.link = PipeLink(self.clock, seed=1, mac_a=MAC_A, mac_b=MAC_B)
        self.stack = Stack(self.link.a, ["198.18.0.1/24", "fd00::1/64"], isn_secret=b"s" * 16,
                           tcp_config=TcpConfig(**cfg), announce=False, fastpath=True)
        if not c_path:
            self.stack.tcp.flows.syn = None
        # the cookie keys' entropy the same in both (a fresh random key per period otherwise)
        self.stack.tcp.cookies = SynCookies(b"s" * 16, entropy=lambda n: bytes(n))
        self.syn = self.stack.tcp.flows.syn
        now = self.clock.now
        self.stack.arp.learn(B4, MAC_B, now)
        self.stack.arp.learn(C4, MAC_B, now)
        self.stack.ndp._learn_stale(B6, MAC_B, now)
        self.lst4 = self.stack.tcp.listen((listen_on, PORT), backlog, reuseport=reuseport)
        if reuseport:  # an SO_REUSEPORT group of two: its SYNs take the Python path (the group picks)
            self.stack.tcp.listen((listen_on, PORT), backlog, reuseport=True)
        self.stack.poll(now)
        self.link.b.rx_burst(64)

    def state(self) -> dict:
        tcp = self.stack.tcp
        recs = {}
        for key, conn in tcp.connections.items():
            if type(conn) is SynReceived:
                recs[key] = ("rec", tuple(getattr(conn, f) for f in RECORD_FIELDS), conn.conn is None,
                             conn.timer.deadline if conn.timer is not None else None, conn.emitter is not None,
                             conn.listener is self.lst4)
            else:
                recs[key] = (type(conn).__name__, conn.state)
        lst = self.lst4
        # (IPv6's own MLD reports and neighbour probes run on their own random timers: not compared)
        return {"counters": {k: v for k, v in self.stack.stats.counters.items()
                             if v and k.startswith(("tcp.", "ipv4.", "stack.", "drop.tcp"))},
                "records": recs, "syn_queue": sorted(r.key for r in lst._syn_queue),
                "accept": [c.key for c in lst._accept], "cookies": (lst.cookies_sent, lst.last_cookie_sent),
                "flows": len(tcp.flows)}


def _lockstep(seed: int, cfg: dict, listen_on, backlog: int, steps: int = 60, reuseport: bool = False) -> int:
    rng = random.Random(seed)
    c, py = Server(True, cfg, listen_on, backlog, reuseport), Server(False, cfg, listen_on, backlog, reuseport)
    assert c.syn is not None and py.syn is None
    synacks = []
    for step in range(steps):
        r = rng.random()
        six = rng.random() < (0.8 if len(listen_on) == 16 and listen_on != ANY6 else 0.4)
        src, dst = (B6, A6) if six else (rng.choice((B4, B4, C4)), A4)
        sport = rng.choice((1000, 1001, 1002, 1003, 1004, 1005, 40000 + step))
        if r < 0.6:
            flags = 0x02 if rng.random() < 0.85 else rng.choice((0x42, 0xC2, 0x12, 0x06, 0x03))
            dport = PORT if rng.random() < 0.9 else OTHER_PORT
            frame = _syn(src, dst, sport, dport, rng.getrandbits(32), flags, rng.choice((0, 512, 65535)),
                         _options(rng))
            out = (c.feed(frame), py.feed(frame))
        elif r < 0.8 and synacks:
            f = rng.choice(synacks)  # the handshake's ACK of one of our SYN-ACKs
            six_f = f[12:14] == b"\x86\xdd"
            l3 = 14 + (40 if six_f else (f[14] & 15) * 4)
            s_, d_ = (f[22:38], f[38:54]) if six_f else (f[26:30], f[30:34])
            sp, dp, seq, ack = struct.unpack_from("!HHII", f, l3)
            frame = _syn(d_, s_, dp, sp, ack, 0x10, 65535, b"", ack=(seq + 1) & 0xFFFFFFFF)
            out = (c.feed(frame), py.feed(frame))
        elif r < 0.9:
            got = (c.lst4.accept(), py.lst4.accept())
            assert (got[0] is None) == (got[1] is None)
            out = (c.advance(0), py.advance(0))
        else:
            dt = rng.choice((0.001, 0.3, 1.1, 3.0))
            out = (c.advance(dt), py.advance(dt))
        assert out[0] == out[1], f"step {step}: frames differ"
        for f in out[0]:
            if len(f) > 40:
                six_f = f[12:14] == b"\x86\xdd"
                l3 = 14 + (40 if six_f else (f[14] & 15) * 4)
                if f[12:14] in (b"\x08\x00", b"\x86\xdd") and f[l3 + 13] == 0x12:
                    synacks.append(f)
        assert c.state() == py.state(), f"step {step}: state differs"
    return c.syn.taken


CONFIGS = [
    {},
    dict(window_scaling=False, sack=False, timestamps=False),
    dict(timestamps=False, mss=1000),
    dict(sack=False, rcvbuf=32768, syn_backlog=2),
    dict(syncookies=False, syn_backlog=1),
]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("listen_on", ["addr", "any4", "any6", "addr6"])
def test_syn_c_path_lockstep(cfg, listen_on):
    addr = {"addr": A4, "any4": ANY4, "any6": ANY6, "addr6": A6}[listen_on]
    taken = 0
    for seed in range(6):
        taken += _lockstep(seed * 7 + len(cfg), cfg, addr, backlog=1 + seed % 4)
    assert taken > 0  # the C path did take SYNs


def test_reuseport_group_syns_take_the_python_path():
    for seed in range(4):
        assert _lockstep(seed, {}, A4, backlog=2, reuseport=True) == 0


def test_fastpath_off_has_no_syn_path():
    clock = ManualClock(1000.0)
    link = PipeLink(clock, seed=1)
    stack = Stack(link.a, "198.18.0.1/24", fastpath=False, announce=False)
    assert stack.tcp.flows.syn is None


@pytest.mark.parametrize("secret", [b"s" * 16, bytes(range(20)), bytes(range(32))])
def test_syn_path_digest_is_the_layers(secret):
    """The SYN path's BLAKE2s in C gives ``KeyedHash.connection_hashes``' values (F, the timestamp offset) for
    IPv4 and IPv6 4-tuples, and follows the host's secret when it is replaced."""
    clock = ManualClock(1000.0)
    stack = Stack(PipeLink(clock).a, ["198.18.0.1/24", "fd00::1/64"], isn_secret=secret, announce=False,
                  fastpath=True)
    syn = stack.tcp.flows.syn
    rng = random.Random(len(secret))
    for i in range(500):
        if i == 250:
            stack._tcp_host.isn_secret = bytes(reversed(secret))  # (the layer renews its keyed hash: so does C)
            stack.tcp.keyed
        n = rng.choice((4, 16))
        la, ra = rng.randbytes(n), rng.randbytes(n)
        lp, rp = rng.randrange(65536), rng.randrange(65536)
        assert syn.connection_hashes(la, lp, ra, rp) == stack.tcp.keyed.connection_hashes(la, lp, ra, rp)
