"""Scripted-peer harness for the TCP engine: a fake host on a manual clock, a peer that injects
crafted segments and checks every reply (with our parser and with scapy).

    h = Harness(delayed_ack=False)
    conn = h.layer.connect(None, (PEER, 5000), h.now)
    syn = h.peer.expect(flags="S")
    h.peer.send(flags="SA", seq=1000, ack=syn.seq + 1, win=8192, mss=1460)
    h.peer.expect(flags="A", seq=syn.seq + 1, ack=1001)
    h.advance(1.0)            # runs every timer due on the way, in order
    h.fire_next()             # jumps to the next timer deadline

The peer keeps its own view of the sequence space (``snd_nxt``: what it sends
next; ``rcv_nxt``: what it has received from us), so most calls need no
numbers; every field can be overridden.
"""

from __future__ import annotations

from dataclasses import dataclass

import ipaddress
import struct

from scapy.compat import raw
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6

from ustack import _fastpath
from ustack.api import environment
from ustack.api.clock import ManualClock
from ustack.stats import Stats
from ustack.transport.tcp import TcpConfig, TcpLayer
from ustack.transport.tcp.seq import seq_add, seq_gt, seq_le
from ustack.timers import TimerHeap
from ustack.wire.checksum import ones_sum
from ustack.wire.ipv4 import bytes_to_ip, ip_to_bytes
from ustack.wire.tcp import ACK, FIN, PSH, SYN, TcpHeader, flags_from_str, flags_to_str

MAC = bytes.fromhex("020000000001")
LOCAL = ip_to_bytes("198.18.0.1")
PEER = ip_to_bytes("198.18.0.2")
LOCAL6 = bytes.fromhex("fd000000000000000000000000000001")  # Harness(family=6)
PEER6 = bytes.fromhex("fd000000000000000000000000000002")
SECRET = bytes(range(16))

# A test configuration with round numbers: no window scaling, timestamps or SACK
# unless a test asks, buffers that fit an unscaled window.
TEST_DEFAULTS = dict(window_scaling=False, timestamps=False, sack=False, rcvbuf=64000, sndbuf=64000)


def ipv4_frame(src: bytes, dst: bytes, segment: bytes) -> bytes:
    """``segment`` in an Ethernet frame to ``MAC`` and a 20-byte IPv4 header (DF, TTL 64, protocol 6)."""
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(segment), 0, 0x4000, 64, 6, 0, src, dst))
    struct.pack_into("!H", ip, 10, ~ones_sum(ip) & 0xFFFF)
    return MAC + bytes(6) + b"\x08\x00" + bytes(ip) + segment


def ipv6_frame(src: bytes, dst: bytes, segment: bytes) -> bytes:
    """``segment`` in an Ethernet frame to ``MAC`` and a 40-byte IPv6 header (hop limit 64, next header 6)."""
    return MAC + bytes(6) + b"\x86\xdd" + struct.pack("!IHBB", 6 << 28, len(segment), 6, 64) + src + dst + segment


class FakeHost:
    """The TcpHost interface, capturing output."""

    def __init__(self, clock: ManualClock, timers: TimerHeap, addr: bytes = LOCAL, mtu: int = 1500):
        self.clock = clock
        self.timers = timers
        self.stats = Stats()
        self.isn_secret = SECRET
        self.addr = addr
        self.mtu = mtu
        self.out: list = []
        self.sink = None  # when set, segments go there instead of ``out``
        self.pushes = 0  # tcp_push() calls (a SYN-ACK asks for one)

    def tcp_output(self, src, dst, segment, now) -> None:
        seg = (bytes(src), bytes(dst), bytes(segment))
        if self.sink is not None:
            self.sink(*seg)
        else:
            self.out.append(seg)

    def tcp_output_segment(self, src, dst, sport, dport, seq, ack, flags, window, ts, payload, now) -> bool:
        return False  # no fast emitter: every segment is built by the engine and comes to tcp_output

    def tcp_output_options(self, src, dst, sport, dport, seq, ack, flags, window, options, now) -> bool:
        return False  # SYNs too are built by the engine (output.syn_segment) and come to tcp_output

    def tcp_push(self) -> None:
        self.pushes += 1  # segments reach ``out`` at once here anyway: only counted

    def route_mtu(self, dst) -> int:
        return self.mtu

    def pick_source(self, dst) -> bytes:
        return self.addr


@dataclass
class Seg:
    """One segment the engine emitted."""

    src: bytes
    dst: bytes
    hdr: TcpHeader
    payload: bytes

    def __getattr__(self, name):
        return getattr(self.hdr, name)

    @property
    def flag_str(self) -> str:
        return flags_to_str(self.hdr.flags)

    @property
    def seg_len(self) -> int:
        return len(self.payload) + (1 if self.hdr.flags & SYN else 0) + (1 if self.hdr.flags & FIN else 0)

    def __repr__(self) -> str:
        h = self.hdr
        return (f"<Seg {h.src_port}->{h.dst_port} {flags_to_str(h.flags)} seq={h.seq} ack={h.ack} win={h.window} "
                f"len={len(self.payload)} mss={h.mss} ws={h.wscale} ts={h.timestamps} sack={h.sack_blocks}>")


def scapy_check(src: bytes, dst: bytes, segment: bytes, hdr: TcpHeader) -> None:
    """Scapy, the independent oracle, must read the same header and find the checksum right."""
    pkt = TCP(segment)
    assert (pkt.sport, pkt.dport, pkt.seq, pkt.ack) == (hdr.src_port, hdr.dst_port, hdr.seq, hdr.ack)
    assert (int(pkt.flags), pkt.window, pkt.dataofs * 4) == (hdr.flags, hdr.window, hdr.header_len)
    if len(src) == 16:
        full = IPv6(src=str(ipaddress.IPv6Address(src)), dst=str(ipaddress.IPv6Address(dst))) / TCP(segment)
        del full[TCP].chksum
        assert IPv6(raw(full))[TCP].chksum == pkt.chksum, "checksum differs from scapy's"
    else:
        full = IP(src=bytes_to_ip(src), dst=bytes_to_ip(dst)) / TCP(segment)
        del full[TCP].chksum
        assert IP(raw(full))[TCP].chksum == pkt.chksum, "checksum differs from scapy's"
    opts = {name: value for name, value in pkt.options if name not in ("NOP", "EOL")}
    assert opts.get("MSS") == hdr.mss
    assert opts.get("WScale") == hdr.wscale
    assert ("SAckOK" in opts) == hdr.sack_permitted
    assert opts.get("Timestamp") == hdr.timestamps
    if hdr.sack_blocks:
        assert opts["SAck"] == tuple(e for b in hdr.sack_blocks for e in b)


class Peer:
    """The scripted remote end, talking to the harness's layer."""

    def __init__(self, harness: "Harness", addr: bytes = PEER, port: int = 5000, local_port: int = 80):
        self.h = harness
        self.addr = addr
        self.port = port
        self.local_port = local_port
        self.snd_nxt = 1000  # next sequence number the peer sends
        self.rcv_nxt = 0  # next sequence number the peer expects from us
        self.use_ts = False  # add a timestamps option to every segment
        self.ts_recent = 0  # last TSval seen from us
        self.ts_clock = 5000  # the peer's TSval

    # -- injecting -------------------------------------------------------

    def send(self, flags: str | int = "A", seq: int | None = None, ack: int | None = None, win: int = 65535,
             payload: bytes = b"", mss: int | None = None, wscale: int | None = None, sack_perm: bool = False,
             ts=None, sack=(), bad_checksum: bool = False, advance: bool = True, src_port: int | None = None,
             dst_port: int | None = None, urgent: int = 0) -> bytes:
        fl = flags_from_str(flags) if isinstance(flags, str) else flags
        if seq is None:
            seq = self.snd_nxt
        if ack is None:
            ack = self.rcv_nxt if fl & ACK else 0
        if ts is None and self.use_ts:
            ts = (self.ts_clock, self.ts_recent)
        elif ts is False:
            ts = None
        hdr = TcpHeader(src_port or self.port, dst_port or self.local_port, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                        fl, win, 0, urgent, mss=mss, wscale=wscale, sack_permitted=sack_perm,
                        sack_blocks=tuple(sack), timestamps=ts)
        seg = bytearray(hdr.to_bytes(self.addr, self.h.local, payload))
        if bad_checksum:
            seg[16] ^= 0xFF
        if advance:
            end = seq_add(seq, len(payload) + (1 if fl & SYN else 0) + (1 if fl & FIN else 0))
            if (end - self.snd_nxt) & 0xFFFFFFFF < 0x80000000:
                self.snd_nxt = end
        self.h.deliver(self.addr, self.h.local, bytes(seg))
        return bytes(seg)

    # -- checking --------------------------------------------------------

    def expect(self, flags: str | None = None, seq: int | None = None, ack: int | None = None,
               win: int | None = None, payload: bytes | None = None, psh: bool | None = None,
               length: int | None = None, **options) -> Seg:
        """The next segment the engine emitted must match. PSH is ignored unless ``psh`` is given."""
        out = self.h.host.out
        assert out, f"expected a segment ({flags}), got nothing"
        seg = self.h.pop()
        hdr = seg.hdr
        if flags is not None:
            want = flags_from_str(flags)
            got = hdr.flags if psh is not None or want & PSH else hdr.flags & ~PSH
            assert got == want, f"flags {flags_to_str(hdr.flags)} != {flags}: {seg}"
        if psh is not None:
            assert bool(hdr.flags & PSH) == psh, f"PSH {bool(hdr.flags & PSH)} != {psh}: {seg}"
        if seq is not None:
            assert hdr.seq == seq & 0xFFFFFFFF, f"seq {hdr.seq} != {seq & 0xFFFFFFFF}: {seg}"
        if ack is not None:
            assert hdr.ack == ack & 0xFFFFFFFF, f"ack {hdr.ack} != {ack & 0xFFFFFFFF}: {seg}"
        if win is not None:
            assert hdr.window == win, f"window {hdr.window} != {win}: {seg}"
        if payload is not None:
            assert seg.payload == payload, f"payload {seg.payload[:40]!r}... != {payload[:40]!r}...: {seg}"
        if length is not None:
            assert len(seg.payload) == length, f"length {len(seg.payload)} != {length}: {seg}"
        for name, value in options.items():
            assert getattr(hdr, name) == value, f"{name} {getattr(hdr, name)} != {value}: {seg}"
        return seg

    def expect_nothing(self) -> None:
        assert not self.h.host.out, f"expected nothing, got {[self.h.peek(i) for i in range(len(self.h.host.out))]}"

    def ack(self, **kw) -> bytes:
        """A pure ACK of everything received so far."""
        return self.send(flags="A", **kw)


class Harness:
    """A TcpLayer on a fake host with a manual clock, and one scripted peer (IPv4, or IPv6 with ``family=6``:
    ``local`` and the peer's ``addr`` are then ``LOCAL6`` and ``PEER6``)."""

    def __init__(self, start: float = 100.0, mtu: int = 1500, family: int = 4, **config):
        self.clock = ManualClock(start)
        self.timers = TimerHeap()
        self.local = LOCAL if family == 4 else LOCAL6
        self.host = FakeHost(self.clock, self.timers, addr=self.local, mtu=mtu)
        cfg = dict(TEST_DEFAULTS)
        cfg.update(config)
        self.layer = TcpLayer(self.host, TcpConfig(**cfg), environment.fastpath())  # the suite's --fastpath
        self.peer = Peer(self, addr=PEER if family == 4 else PEER6)

    @property
    def now(self) -> float:
        return self.clock.now

    def deliver(self, src: bytes, dst: bytes, segment: bytes) -> None:
        """One segment in, as the stack delivers it: classified in C into a ``Packet`` record (so the
        fast path sees what it sees on a device), established flows demuxed in C (``TcpLayer.flows``)
        when the layer's fast path is on; what classify drops goes through ``TcpLayer.input``
        so that the wire parser's drop reasons stay the ones tests assert."""
        frame = ipv4_frame(src, dst, segment) if len(dst) == 4 else ipv6_frame(src, dst, segment)
        pkt = _fastpath.classify_one(frame, MAC, True)
        if pkt.kind in (_fastpath.K_TCP, _fastpath.K_TCP6):
            layer = self.layer
            # As the stack does: established flows through the C demux first (when the fast path is on)
            if not (layer.fastpath and layer.flows.input(pkt, memoryview(frame), self.now)):
                off = pkt.payload_off
                layer.segment_arrives(src, dst, pkt, memoryview(frame)[off:off + pkt.payload_len], self.now)
        else:
            self.layer.input(src, dst, memoryview(segment), self.now)
        if not self.layer.in_round:  # in a round the caller flushes at its end, as Stack.poll does
            self.layer.flush(self.now)

    @property
    def stats(self):
        return self.host.stats

    def pop(self) -> Seg:
        """The oldest emitted segment (checked by scapy); the peer notes what it received."""
        seg = self._parse(*self.host.out.pop(0))
        self._observe(seg)
        return seg

    def peek(self, i: int = 0) -> Seg:
        return self._parse(*self.host.out[i])

    def drain(self) -> list:
        return [self.pop() for _ in range(len(self.host.out))]

    def _parse(self, src, dst, data) -> Seg:
        hdr = TcpHeader.parse(data, src, dst)
        scapy_check(src, dst, data, hdr)
        return Seg(src, dst, hdr, data[hdr.header_len :])

    def _observe(self, seg: Seg) -> None:
        peer = self.peer
        hdr = seg.hdr
        if hdr.dst_port != peer.port:
            return
        if seg.seg_len:
            end = seq_add(hdr.seq, seg.seg_len)
            if hdr.flags & SYN:
                peer.rcv_nxt = end
            elif seq_le(hdr.seq, peer.rcv_nxt) and seq_gt(end, peer.rcv_nxt):
                peer.rcv_nxt = end
        if hdr.timestamps is not None:
            peer.ts_recent = hdr.timestamps[0]

    def advance(self, dt: float) -> None:
        """Move the clock forward by ``dt``, firing every timer due on the way at its own deadline."""
        target = self.clock.now + dt
        while True:
            nd = self.timers.next_deadline()
            if nd is None or nd > target:
                break
            self.clock.set(max(nd, self.clock.now))
            self.timers.run(self.clock.now)
            self.layer.flush(self.clock.now)
        self.clock.set(target)
        self.timers.run(target)
        self.layer.flush(target)

    def fire_next(self) -> float:
        """Jump to the next timer deadline and run it; returns how far the clock moved."""
        nd = self.timers.next_deadline()
        assert nd is not None, "no timer armed"
        start = self.clock.now
        self.clock.set(max(nd, start))
        self.timers.run(self.clock.now)
        self.layer.flush(self.clock.now)
        return self.clock.now - start

    # -- common openings -------------------------------------------------

    def open_active(self, peer_win: int = 65535, peer_mss: int = 1460, peer_iss: int = 1000,
                    peer_options: dict | None = None, **opts):
        """connect() and complete the handshake with the scripted peer; returns the connection.

        ``peer_options`` go on the peer's SYN-ACK (``wscale=``, ``sack_perm=``, ``ts=``).
        """
        conn = self.layer.connect(None, (self.peer.addr, self.peer.port), self.now, **opts)
        self.peer.local_port = conn.local_port
        syn = self.peer.expect(flags="S")
        self.peer.snd_nxt = peer_iss
        self.peer.send(flags="SA", ack=syn.seq + 1, win=peer_win, mss=peer_mss, **(peer_options or {}))
        self.peer.expect(flags="A", seq=syn.seq + 1, ack=peer_iss + 1)
        assert conn.state.name == "ESTABLISHED"
        return conn

    def open_passive(self, peer_win: int = 65535, peer_mss: int = 1460, peer_iss: int = 1000, backlog: int = 5,
                     **opts):
        """listen(), let the peer connect, accept(); returns (listener, connection)."""
        lst = self.layer.listen((self.local, self.peer.local_port), backlog, **opts)
        self.peer.snd_nxt = peer_iss
        self.peer.send(flags="S", win=peer_win, mss=peer_mss)
        synack = self.peer.expect(flags="SA", ack=peer_iss + 1)
        self.peer.send(flags="A", ack=synack.seq + 1, win=peer_win)
        self.peer.expect_nothing()
        conn = lst.accept()
        assert conn is not None and conn.state.name == "ESTABLISHED"
        return lst, conn
