"""IPv4 Identification per destination (RFC 7739 section 5.4): ustack.net.ipid and the IPv4 layer's use of it."""

from __future__ import annotations

from ustack.api.clock import ManualClock
from ustack.backends.pipe import PipeLink
from ustack.net.addr import parse as ip_addr
from ustack.net.ipid import IpIdents
from ustack.stack import Stack
from ustack.wire.proto import PROTO_TCP, PROTO_UDP

SECRET = bytes(range(16))
A = ip_addr("198.18.0.1")
PEERS = [ip_addr(f"198.18.0.{n}") for n in range(2, 12)]


def test_each_destination_counts_on_its_own():
    ids = IpIdents(SECRET)
    first = {d: ids.next(A, d, PROTO_UDP) for d in PEERS}
    # Sending 500 datagrams to PEERS[0] does not move what the others see (unless they share its bucket).
    for _ in range(500):
        ids.next(A, PEERS[0], PROTO_UDP)
    shared = {d for d in PEERS if ids.bucket(A, d, PROTO_UDP) == ids.bucket(A, PEERS[0], PROTO_UDP)}
    assert shared == {PEERS[0]}  # ten keys in 2048 buckets: a collision here would be a broken hash
    for d in PEERS[1:]:
        assert ids.next(A, d, PROTO_UDP) == (first[d] + 1) & 0xFFFF
    assert ids.next(A, PEERS[0], PROTO_UDP) == (first[PEERS[0]] + 501) & 0xFFFF


def test_starts_are_secret_and_not_one_counter():
    a, b = IpIdents(SECRET), IpIdents(bytes(range(1, 17)))
    seq_a = [a.next(A, d, PROTO_TCP) for d in PEERS]
    seq_b = [b.next(A, d, PROTO_TCP) for d in PEERS]
    assert seq_a != seq_b  # another secret, other IDs
    # Not a global counter: consecutive datagrams to different destinations are not consecutive IDs.
    steps = {(y - x) & 0xFFFF for x, y in zip(seq_a, seq_a[1:])}
    assert steps != {1}
    assert len(set(seq_a)) == len(seq_a)
    # Same secret, same IDs (deterministic for tests), and the 16 bits wrap.
    again = IpIdents(SECRET)
    assert [again.next(A, d, PROTO_TCP) for d in PEERS] == seq_a
    for _ in range(0x10000):
        again.next(A, PEERS[0], PROTO_TCP)
    assert again.next(A, PEERS[0], PROTO_TCP) == (seq_a[0] + 1) & 0xFFFF


def test_table_is_bounded_whatever_the_destinations():
    ids = IpIdents(SECRET, buckets=64)
    for n in range(20000):
        ids.next(A, n.to_bytes(4, "big"), PROTO_UDP)
    assert len(ids.counters) == 64
    assert len(ids._cache) <= 4096


def test_stack_frames_carry_per_destination_ids():
    """Datagrams from one stack to three on-link peers: each peer's IDs are consecutive, interleaving hidden."""
    clock = ManualClock(1000.0)
    link = PipeLink(clock)
    stack = Stack(link.a, "198.18.0.1/24", isn_secret=SECRET, announce=False)
    peers = PEERS[:3]
    for i, d in enumerate(peers):
        stack.arp.learn(d, bytes((2, 0, 0, 0, 0, i + 2)), clock.now)
    ep = stack.udp.endpoint()
    stack.udp.bind(ep, ip_addr("0.0.0.0"), 5000)
    order = [peers[i % 3] for i in range(30)]
    for d in order:
        ep.sendto(b"x" * 10, d, 9, clock.now)
        stack.poll(clock.now)
    seen: dict[bytes, list[int]] = {}
    for _ in range(10):
        frames = link.b.rx_burst(64)
        for f in frames:
            f = bytes(f)
            if f[12:14] == b"\x08\x00":
                seen.setdefault(f[30:34], []).append(int.from_bytes(f[18:20], "big"))
        link.b.rx_release(frames)
        clock.advance(0.01)
    assert sorted(seen) == sorted(peers)
    for d, got in seen.items():
        assert len(got) == 10
        assert got == [(got[0] + i) & 0xFFFF for i in range(10)], d
    expected = IpIdents(SECRET)  # the stack keys the table with its secret
    assert [seen[d][0] for d in peers] == [expected.next(ip_addr("198.18.0.1"), d, PROTO_UDP) for d in peers]
