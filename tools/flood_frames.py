"""Hostile frames for ``ustack.tools.flood``: one generator per attack, each an endless stream of bytes.

Every generator takes a seeded ``random.Random`` and a ``Target`` (the
stack's and the kernel peer's addresses) and yields complete Ethernet frames
with correct checksums, so the stack's own checks (not a bad checksum) decide
their fate:

- ``arp``: ARP requests and unsolicited replies aimed at the stack from
  random senders (random unicast MACs; half on-link, half off-link IPs).
- ``syn``: SYNs to the TCP echo port from random on-link sources and ports
  (spoofed: nobody answers the stack's ARP for them).
- ``frag``: lone first fragments, lone middle fragments and overlapping
  pairs, from random on-link sources with random IDs.
- ``udp``: UDP to closed ports, from the kernel peer (so the ICMP port
  unreachables really go out, and their rate limit shows) and from random
  on-link sources.
- ``inject``: RST, ACK, SYN and data segments against one established
  connection, half blind (random sequence and acknowledgment numbers), half
  informed (in the receive window but never at its exact left edge, acks
  beyond what was sent, also at the exact left edge with a TSval from far
  ahead, SYNs in window): an on-path attacker's best guesses
  short of the exact RST that RFC 5961 must honour. ``oracle()`` gives the
  connection's current sequence state.
- ``reflect``: ACK reflection against the same connection: pure ACKs and
  data segments spoofed from the client, outside the window (ahead of it,
  or further behind RCV.NXT than any window reaches), with a random TSval
  (half fail PAWS): each would draw an ACK toward the client unless the
  stack rate-limits them (Linux's tcp_invalid_ratelimit).
- ``bcast``: UDP to closed ports from the kernel peer, addressed to the
  stack's IP but sent as a link-layer broadcast or multicast frame: no ICMP
  port unreachable may answer them (RFC 1122 3.2.2).
"""

from __future__ import annotations

import ipaddress
import random
import struct
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from ustack.wire.checksum import internet_checksum, pseudo_header_sum

BROADCAST = b"\xff" * 6
_ETH = struct.Struct("!6s6sH")
_IP = struct.Struct("!BBHHHBBH4s4s")
_TCP = struct.Struct("!HHIIBBHHH")
_UDP = struct.Struct("!HHHH")
_ARP = struct.Struct("!HHBBH6s4s6s4s")
SYN, RST, PSH, ACK = 0x02, 0x04, 0x08, 0x10


@dataclass(frozen=True)
class Target:
    """Who is who on the link: the user-space stack and the kernel peer."""

    stack_mac: bytes
    stack_ip: bytes
    peer_mac: bytes
    peer_ip: bytes
    prefixlen: int
    tcp_port: int = 7

    def on_link(self, rng: random.Random) -> bytes:
        """A random host address of the subnet that is neither the stack's nor the peer's."""
        net = ipaddress.ip_network(f"{ipaddress.IPv4Address(self.stack_ip)}/{self.prefixlen}", strict=False)
        base, size = int(net.network_address), net.num_addresses
        while True:
            a = (base + rng.randrange(1, size - 1)).to_bytes(4, "big")
            if a not in (self.stack_ip, self.peer_ip):
                return a


def random_mac(rng: random.Random) -> bytes:
    """A random locally administered unicast MAC."""
    first = (rng.randrange(256) & 0xFC) | 0x02
    return bytes((first,)) + rng.randbytes(5)


def ether(dst: bytes, src: bytes, ethertype: int, payload: bytes) -> bytes:
    return _ETH.pack(dst, src, ethertype) + payload


def ipv4(src: bytes, dst: bytes, proto: int, payload: bytes, *, ident: int = 0, frag: int = 0x4000,
         ttl: int = 64) -> bytes:
    """An IPv4 header (no options; ``frag`` is the flags + offset word) and ``payload``."""
    hdr = bytearray(_IP.pack(0x45, 0, 20 + len(payload), ident, frag, ttl, proto, 0, src, dst))
    struct.pack_into("!H", hdr, 10, internet_checksum(hdr))
    return bytes(hdr) + payload


def tcp(src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int, window: int = 65535,
        payload: bytes = b"", options: bytes = b"") -> bytes:
    """A TCP segment with its checksum over the IPv4 pseudo-header."""
    off = (20 + len(options)) // 4
    seg = bytearray(_TCP.pack(sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, off << 4, flags, window, 0, 0))
    seg += options + payload
    struct.pack_into("!H", seg, 16, internet_checksum(seg, pseudo_header_sum(src, dst, 6, len(seg))))
    return bytes(seg)


def udp(src: bytes, dst: bytes, sport: int, dport: int, payload: bytes) -> bytes:
    seg = bytearray(_UDP.pack(sport, dport, 8 + len(payload), 0)) + payload
    csum = internet_checksum(seg, pseudo_header_sum(src, dst, 17, len(seg))) or 0xFFFF
    struct.pack_into("!H", seg, 6, csum)
    return bytes(seg)


def arp(op: int, sha: bytes, spa: bytes, tha: bytes, tpa: bytes) -> bytes:
    return _ARP.pack(1, 0x0800, 6, 4, op, sha, spa, tha, tpa)


# -- the attacks -----------------------------------------------------------------------


def arp_frames(rng: random.Random, t: Target) -> Iterator[bytes]:
    """ARP requests for the stack and unsolicited replies to it, from random senders."""
    while True:
        mac = random_mac(rng)
        spa = t.on_link(rng) if rng.random() < 0.5 else rng.randbytes(4)
        if rng.random() < 0.5:
            yield ether(BROADCAST, mac, 0x0806, arp(1, mac, spa, b"\0" * 6, t.stack_ip))
        else:
            yield ether(t.stack_mac, mac, 0x0806, arp(2, mac, spa, t.stack_mac, t.stack_ip))


MSS_OPTION = b"\x02\x04\x05\xb4"


def syn_frames(rng: random.Random, t: Target) -> Iterator[bytes]:
    """SYNs to the TCP port from spoofed on-link sources."""
    while True:
        src = t.on_link(rng)
        seg = tcp(src, t.stack_ip, rng.randrange(1024, 65536), t.tcp_port, rng.getrandbits(32), 0, SYN,
                  options=MSS_OPTION)
        yield ether(t.stack_mac, random_mac(rng), 0x0800, ipv4(src, t.stack_ip, 6, seg, ident=rng.getrandbits(16)))


def frag_frames(rng: random.Random, t: Target) -> Iterator[bytes]:
    """Fragments that never complete: lone firsts, lone middles and overlapping pairs."""
    mf = 0x2000
    while True:
        src = t.on_link(rng)
        mac = random_mac(rng)
        ident = rng.getrandbits(16)
        kind = rng.randrange(3)
        if kind == 0:  # a first fragment whose rest never comes (a UDP header in it)
            body = udp(src, t.stack_ip, rng.randrange(1, 65536), 9, rng.randbytes(1000))[:64]
            yield ether(t.stack_mac, mac, 0x0800, ipv4(src, t.stack_ip, 17, body, ident=ident, frag=mf))
        elif kind == 1:  # a middle fragment alone
            off = rng.randrange(1, 1000)
            yield ether(t.stack_mac, mac, 0x0800,
                        ipv4(src, t.stack_ip, 17, rng.randbytes(64), ident=ident, frag=mf | off))
        else:  # two fragments of one datagram that overlap (bytes 0..63 and 32..95)
            yield ether(t.stack_mac, mac, 0x0800, ipv4(src, t.stack_ip, 17, rng.randbytes(64), ident=ident, frag=mf))
            yield ether(t.stack_mac, mac, 0x0800,
                        ipv4(src, t.stack_ip, 17, rng.randbytes(64), ident=ident, frag=mf | 4))


def udp_frames(rng: random.Random, t: Target, closed: Callable[[int], bool] = lambda p: p != 7) -> Iterator[bytes]:
    """UDP datagrams to closed ports, from the kernel peer and from random on-link sources."""
    while True:
        dport = rng.randrange(1, 65536)
        if not closed(dport):
            continue
        if rng.random() < 0.5:
            src, mac = t.peer_ip, t.peer_mac
        else:
            src, mac = t.on_link(rng), random_mac(rng)
        body = udp(src, t.stack_ip, rng.randrange(1024, 65536), dport, rng.randbytes(rng.randrange(0, 64)))
        yield ether(t.stack_mac, mac, 0x0800, ipv4(src, t.stack_ip, 17, body, ident=rng.getrandbits(16)))


@dataclass
class ConnState:
    """What an on-path attacker knows of the victim connection (stack side)."""

    local_port: int  # the stack's port
    remote_port: int  # the kernel client's port
    rcv_nxt: int
    snd_una: int
    snd_nxt: int
    rcv_wnd: int


def inject_frames(rng: random.Random, t: Target, oracle: Callable[[], Optional[ConnState]]) -> Iterator[bytes]:
    """Segments against one established connection (from the kernel client's address and MAC).

    Informed guesses stay at least a quarter of the window away from the
    exact RCV.NXT so a sequence number that moved on since ``oracle()`` was
    read cannot make one of them the exact RST that RFC 5961 3.2 honours;
    acknowledgments of unsent data and data "beyond the window" stay
    ``FAR`` (1 MiB) beyond, so the connection's progress since the last read
    of ``oracle()`` cannot turn them into a valid ACK or in-window data
    (which TCP accepts from anyone who knows the window: not a defect).
    """
    far = 1 << 20
    n = 0
    while True:
        st = oracle()
        if st is None:
            return
        n += 1
        blind = n & 1
        sport, dport = st.remote_port, st.local_port
        wnd = max(st.rcv_wnd, 4)
        in_window = (st.rcv_nxt + rng.randrange(wnd // 4, wnd)) & 0xFFFFFFFF
        kind = rng.randrange(6)
        if blind:
            seq, ack = rng.getrandbits(32), rng.getrandbits(32)
        else:
            seq, ack = in_window, st.snd_nxt
        payload = b""
        if kind == 0:
            flags = RST
        elif kind == 1:
            flags = RST | ACK
        elif kind == 2:  # an ACK for data never sent (RFC 5961 5.2) or far in the past
            flags = ACK
            if not blind:
                ack = (st.snd_nxt + far + rng.randrange(1 << 29)) if rng.random() < 0.5 else (st.snd_una - (1 << 30))
        elif kind == 3:  # a SYN in the window (RFC 5961 4)
            flags = SYN
        elif kind == 5:  # an ACK at the exact left edge acking unsent data: must not plant its TSval
            flags = ACK
            if not blind:
                seq, ack = st.rcv_nxt, st.snd_nxt + far + rng.randrange(1 << 29)
        else:  # data outside or inside the window at the wrong place
            flags = PSH | ACK
            payload = rng.randbytes(rng.randrange(1, 64))
            if not blind:
                seq = (st.rcv_nxt + wnd + far + rng.randrange(1 << 20)) & 0xFFFFFFFF  # beyond the window
        # Informed non-RSTs carry a timestamp (a random TSval: half pass PAWS, RFC 7323 5.3) so they reach
        # the window checks; without one they stop at RFC 7323 3.2's drop of a TS-less segment.
        opts = b"" if blind or flags & RST else b"\x01\x01\x08\x0a" + rng.randbytes(4) + b"\0\0\0\0"
        seg = tcp(t.peer_ip, t.stack_ip, sport, dport, seq, ack, flags, payload=payload, options=opts)
        yield ether(t.stack_mac, t.peer_mac, 0x0800, ipv4(t.peer_ip, t.stack_ip, 6, seg, ident=rng.getrandbits(16)))


def reflect_frames(rng: random.Random, t: Target, oracle: Callable[[], Optional[ConnState]]) -> Iterator[bytes]:
    """Unacceptable segments spoofed from the victim connection's client, each an ACK to reflect.

    Sequence numbers lie beyond the window (1 MiB past its right edge) or more than 1 GiB behind RCV.NXT,
    past any window a scale of 14 can offer (a retransmission there is not plausible, so the stack's
    exemption for old data does not apply); the connection's progress since ``oracle()`` was read cannot
    bring them into the window.
    """
    far = 1 << 20
    while True:
        st = oracle()
        if st is None:
            return
        wnd = max(st.rcv_wnd, 4)
        if rng.random() < 0.5:
            seq = st.rcv_nxt + wnd + far + rng.randrange(1 << 20)
        else:
            seq = st.rcv_nxt - (1 << 30) - rng.randrange(1 << 29)
        if rng.random() < 0.5:
            flags, payload = ACK, b""
        else:
            flags, payload = PSH | ACK, rng.randbytes(rng.randrange(1, 64))
        opts = b"\x01\x01\x08\x0a" + rng.randbytes(4) + b"\0\0\0\0"  # a TSval: half fail PAWS (RFC 7323 5.3)
        seg = tcp(t.peer_ip, t.stack_ip, st.remote_port, st.local_port, seq, st.snd_nxt, flags, payload=payload,
                  options=opts)
        yield ether(t.stack_mac, t.peer_mac, 0x0800, ipv4(t.peer_ip, t.stack_ip, 6, seg, ident=rng.getrandbits(16)))


GROUP_MACS = (BROADCAST, b"\x01\x00\x5e\x00\x00\x01", b"\x33\x33\x00\x00\x00\x01")


def bcast_frames(rng: random.Random, t: Target, closed: Callable[[int], bool] = lambda p: p != 7) -> Iterator[bytes]:
    """UDP to closed ports of the stack's address from the kernel peer, in broadcast and multicast frames."""
    while True:
        dport = rng.randrange(1, 65536)
        if not closed(dport):
            continue
        body = udp(t.peer_ip, t.stack_ip, rng.randrange(1024, 65536), dport, rng.randbytes(rng.randrange(0, 64)))
        yield ether(rng.choice(GROUP_MACS), t.peer_mac, 0x0800,
                    ipv4(t.peer_ip, t.stack_ip, 17, body, ident=rng.getrandbits(16)))


ATTACKS = {
    "arp": arp_frames,
    "syn": syn_frames,
    "frag": frag_frames,
    "udp": udp_frames,
    "inject": inject_frames,
    "reflect": reflect_frames,
    "bcast": bcast_frames,
}
# The attacks that aim at the legitimate client's connection (their generators take an ``oracle``).
ORACLE_ATTACKS = ("inject", "reflect")
