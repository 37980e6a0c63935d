"""TCP segmentation offload on transmit (ustack/_fp_gso.pxi) on a synthetic TX ring: no privileges needed.

``tpv3_tx_post_gso`` gets frames as the stack writes them, one per slot; what
it posts is segmented here in software the way the kernel does it
(tcp_gso_segment, inet_gso_segment / ipv6_gso_segment: the headers copied,
SEQ + i*MSS, the IPv4 ID + i, PSH/FIN on the last segment only, lengths and
checksums per segment) and must give back the very frames, byte for byte, in
order.
"""

from __future__ import annotations

import random
import socket
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ustack import _fastpath as fp
from ustack.wire.checksum import ones_sum

FS = 1 << 16  # slot size, as PacketRingDevice(gso=True)
H3 = 48  # tpacket3_hdr, then the virtio_net_hdr
VNET = 10
DATA = H3 + VNET
MAX_LEN = 1514
SEND_REQUEST = 1
MSS4 = 1448  # with timestamps on a 1500-byte link
SRC4, DST4 = socket.inet_aton("198.18.0.2"), socket.inet_aton("198.18.0.1")
SRC6, DST6 = socket.inet_pton(socket.AF_INET6, "fd00::2"), socket.inet_pton(socket.AF_INET6, "fd00::1")
MACS = bytes.fromhex("0200000000010200000000020800")
MACS6 = MACS[:12] + b"\x86\xdd"


def pseudo(v6: bool, src: bytes, dst: bytes, l4len: int) -> int:
    if v6:
        return ones_sum(src + dst + struct.pack("!IxxxB", l4len, 6))
    return ones_sum(src + dst + struct.pack("!xBH", 6, l4len))


def tcp_frame(seq: int, payload: bytes, *, v6=False, ident=100, flags=0x10, tsval=7, sport=19, dport=40000,
              ack=5000, window=500, ttl=64) -> bytes:
    """An Ethernet frame of one TCP segment with timestamps, every checksum right."""
    src, dst = (SRC6, DST6) if v6 else (SRC4, DST4)
    opts = b"\x01\x01\x08\x0a" + struct.pack("!II", tsval, 99)
    th = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack, (20 + len(opts)) // 4 << 4, flags, window,
                     0, 0) + opts
    seg = th + payload
    seg = seg[:16] + struct.pack("!H", 0xFFFF - ones_sum(seg, pseudo(v6, src, dst, len(seg)))) + seg[18:]
    if v6:
        return MACS6 + struct.pack("!IHBB", 6 << 28, len(seg), 6, ttl) + src + dst + seg
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(seg), ident & 0xFFFF, 0x4000, ttl, 6, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", 0xFFFF - ones_sum(ip)) + ip[12:]
    return MACS + ip + seg


def software_segment(vnet: bytes, frame: bytes) -> list[bytes]:
    """What the kernel makes of a posted frame (net/ipv4/tcp_offload.c and af_inet.c / ip6_offload.c)."""
    flags, gso_type, hdr_len, gso_size, csum_start, csum_offset = struct.unpack("<BBHHHH", vnet)
    if gso_type == 0:
        assert vnet == bytes(VNET)
        return [frame]
    v6 = gso_type == 4
    assert gso_type in (1, 4) and flags == 1 and csum_offset == 16
    assert csum_start == 14 + (40 if v6 else 20) and hdr_len == csum_start + (frame[csum_start + 12] >> 4) * 4
    src, dst = (frame[22:38], frame[38:54]) if v6 else (frame[26:30], frame[30:34])
    # the pseudo-header sum over the whole segment, as the kernel expects it (not complemented)
    assert struct.unpack_from("!H", frame, csum_start + 16)[0] == pseudo(v6, src, dst, len(frame) - csum_start)
    if not v6:
        assert ones_sum(frame[14:34]) == 0xFFFF  # inet_gso_segment refuses a bad IPv4 header checksum
    head, data = frame[:hdr_len], frame[hdr_len:]
    seq0 = struct.unpack_from("!I", head, csum_start + 4)[0]
    ident0 = 0 if v6 else struct.unpack_from("!H", head, 18)[0]
    pieces = [data[i:i + gso_size] for i in range(0, len(data), gso_size)]
    out = []
    for i, piece in enumerate(pieces):
        h = bytearray(head)
        th = csum_start
        struct.pack_into("!I", h, th + 4, (seq0 + i * gso_size) & 0xFFFFFFFF)
        if i != len(pieces) - 1:
            h[th + 13] &= ~0x09  # FIN and PSH only on the last segment
        if i:
            h[th + 13] &= ~0x80  # CWR only on the first
        l4len = hdr_len - th + len(piece)
        if v6:
            struct.pack_into("!H", h, 18, l4len)
        else:
            struct.pack_into("!HH", h, 16, 20 + l4len, (ident0 + i) & 0xFFFF)
            struct.pack_into("!H", h, 24, 0)
            struct.pack_into("!H", h, 24, 0xFFFF - ones_sum(bytes(h[14:34])))
        struct.pack_into("!H", h, th + 16, 0)
        seg = bytes(h[th:]) + piece
        struct.pack_into("!H", h, th + 16, 0xFFFF - ones_sum(seg, pseudo(v6, src, dst, l4len)))
        out.append(bytes(h) + piece)
    return out


def ring_with(frames, nr=8, head=0):
    ring = bytearray(FS * nr)
    for k, f in enumerate(frames):
        slot = ((head + k) % nr) * FS
        ring[slot + DATA: slot + DATA + len(f)] = f
    return ring


def post(frames, nr=8, head=0, max_bytes=65535, max_segs=64):
    """Post ``frames``; returns (result, [(vnet, frame)] as posted, ring)."""
    ring = ring_with(frames, nr, head)
    result = fp.tpv3_tx_post_gso(memoryview(ring), 0, FS, nr, head, [len(f) for f in frames], MAX_LEN,
                                 max_bytes, max_segs)
    new_head, posted = result[0], result[1]
    assert new_head == (head + posted) % nr
    out = []
    for k in range(posted):
        slot = ((head + k) % nr) * FS
        nxt, _, _, snaplen, tp_len, status = struct.unpack_from("=IIIIII", ring, slot)
        assert (nxt, status) == (0, SEND_REQUEST) and snaplen == tp_len
        out.append((bytes(ring[slot + H3: slot + DATA]), bytes(ring[slot + DATA: slot + H3 + tp_len])))
    for k in range(posted, len(frames)):  # the slots a merge freed stay the stack's
        assert struct.unpack_from("=I", ring, ((head + k) % nr) * FS + 20)[0] == 0
    return result, out, ring


def resegmented(out) -> list[bytes]:
    return [seg for vnet, frame in out for seg in software_segment(vnet, frame)]


def bulk(n, *, v6=False, seq=1000, ident=100, last=None, **kw):
    """``n`` consecutive full segments of one flow (payload bytes vary), then ``last`` payload bytes with PSH."""
    mss = 1428 if v6 else MSS4
    frames = [tcp_frame(seq + i * mss, bytes((i + j) & 0xFF for j in range(mss)), v6=v6, ident=ident + i, **kw)
              for i in range(n)]
    if last is not None:
        frames.append(tcp_frame(seq + n * mss, b"z" * last, v6=v6, ident=ident + n, flags=0x18, **kw))
    return frames


@pytest.mark.parametrize("v6", [False, True])
def test_a_burst_becomes_one_super_frame_that_segments_back_exactly(v6):
    frames = bulk(20, v6=v6, last=300)
    (head, posted, supers, merged), out, _ = post(frames, nr=32)
    assert (posted, supers, merged) == (1, 1, 21)
    vnet, sf = out[0]
    l3 = 40 if v6 else 20
    hl = 14 + l3 + 32
    mss = 1428 if v6 else MSS4
    assert struct.unpack("<BBHHHH", vnet) == (1, 4 if v6 else 1, hl, mss, 14 + l3, 16)
    assert len(sf) == hl + 20 * mss + 300
    assert sf[:14 + l3][:14] == frames[0][:14]
    assert sf[14 + l3 + 13] == 0x18  # the last segment's PSH
    assert sf[hl:] == b"".join(f[hl:] for f in frames)
    assert resegmented(out) == frames


def test_the_ip_datagram_stays_within_65535_bytes_and_max_segs():
    frames = bulk(60)
    (_, posted, supers, merged), out, _ = post(frames, nr=64)
    # 45 segments of 1448 + 52 bytes of headers + 20 of IP = 65232; a 46th would pass 65535
    assert [len(f) - 14 for _, f in out] == [20 + 32 + 45 * MSS4, 20 + 32 + 15 * MSS4]
    assert (posted, supers, merged) == (2, 2, 60)
    assert resegmented(out) == frames
    (_, posted, supers, merged), out, _ = post(frames, nr=64, max_segs=8)
    assert [len(f) for _, f in out] == [66 + 8 * MSS4] * 7 + [66 + 4 * MSS4]
    assert resegmented(out) == frames
    (_, posted, _, _), out, _ = post(frames, nr=64, max_bytes=20 + 32 + 10 * MSS4)
    assert [(len(f) - 66) // MSS4 for _, f in out] == [10] * 6
    assert resegmented(out) == frames


def test_wraps_round_the_ring_and_compacts_the_slots():
    frames = bulk(3) + [tcp_frame(1, b"", flags=0x11, ident=1)] + bulk(4, seq=9000, ident=7)
    (head, posted, supers, merged), out, ring = post(frames, nr=16, head=13)
    assert (head, posted, supers, merged) == ((13 + 3) % 16, 3, 2, 7)
    assert [struct.unpack_from("<B", v, 1)[0] for v, _ in out] == [1, 0, 1]
    assert resegmented(out) == frames


BREAKERS = {
    "another flow": dict(sport=20),
    "another ACK number": dict(ack=5001),
    "another window": dict(window=501),
    "another TSval": dict(tsval=8),
    "another TTL": dict(ttl=63),
    "a FIN": dict(flags=0x11),
    "an URG": dict(flags=0x30),
    "a CWR": dict(flags=0x90),
}


@pytest.mark.parametrize("why", sorted(BREAKERS))
def test_a_segment_that_the_kernel_could_not_rebuild_starts_a_new_frame(why):
    frames = bulk(3)
    odd = tcp_frame(1000 + 3 * MSS4, b"q" * MSS4, ident=103, **{**dict(flags=0x10), **BREAKERS[why]})
    frames = frames + [odd] + bulk(2, seq=1000 + 4 * MSS4, ident=104)
    (_, posted, supers, merged), out, _ = post(frames)
    assert posted >= 3 and resegmented(out) == frames
    assert struct.unpack_from("<H", out[0][0], 4)[0] == MSS4 and len(out[0][1]) == 66 + 3 * MSS4


@pytest.mark.parametrize("case", ["seq gap", "ident gap", "short in the middle", "psh in the middle", "pure ack",
                                  "retransmission"])
def test_runs_end_where_the_segments_stop_being_consecutive(case):
    frames = bulk(4)
    if case == "seq gap":
        frames[2] = tcp_frame(1000 + 2 * MSS4 + 1, frames[2][66:], ident=102)
    elif case == "ident gap":
        frames[2] = tcp_frame(1000 + 2 * MSS4, frames[2][66:], ident=150)
    elif case == "short in the middle":
        frames[1] = tcp_frame(1000 + MSS4, b"s" * 100, ident=101)
    elif case == "psh in the middle":
        frames[1] = tcp_frame(1000 + MSS4, frames[1][66:], ident=101, flags=0x18)
    elif case == "pure ack":
        frames.insert(2, tcp_frame(1000 + 2 * MSS4, b"", ident=102))
    else:
        frames.insert(2, tcp_frame(1000, frames[0][66:], ident=102))
    (_, posted, supers, _), out, _ = post(frames)
    assert posted >= 2 and resegmented(out) == frames
    if case in ("short in the middle", "psh in the middle"):  # such a segment ends a run: it is its last
        assert len(out[0][1]) == 66 + MSS4 + (100 if case == "short in the middle" else MSS4)


def test_frames_that_are_not_tcp_over_ethernet_go_alone():
    arp = MACS[:12] + b"\x08\x06" + bytes(28)
    udp = bytearray(tcp_frame(1, b"x" * 100))
    udp[23] = 17
    options = bytearray(tcp_frame(1, b"x" * 100))
    options[14] = 0x46
    frames = [arp, bytes(udp), bytes(options), MACS + b"\x45"] + bulk(2)
    (_, posted, supers, merged), out, _ = post(frames)
    assert (posted, supers, merged) == (5, 1, 2)
    assert [f for _, f in out[:4]] == frames[:4] and all(v == bytes(VNET) for v, _ in out[:4])


def test_bad_lengths_post_nothing():
    frames = bulk(3)
    ring = ring_with(frames)
    before = bytes(ring)
    for lengths in ([len(frames[0]), 13, 100], [len(frames[0]), MAX_LEN + 1]):
        with pytest.raises(ValueError):
            fp.tpv3_tx_post_gso(memoryview(ring), 0, FS, 8, 0, lengths, MAX_LEN, 65535, 64)
        assert bytes(ring) == before
    with pytest.raises(ValueError):  # a frame size that leaves no room for the virtio_net_hdr
        fp.tpv3_tx_post_gso(memoryview(ring), 0, FS, 8, 0, [60], FS - H3 - 9, 65535, 64)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_random_bursts_segment_back_to_what_the_stack_wrote(data):
    """Interleaved flows of both families, sizes, flags, gaps and retransmissions: whatever merges, the
    kernel's segmentation of what is posted gives the stack's frames back, in order."""
    rnd = random.Random(data.draw(st.integers(0, 2**32 - 1)))
    flows = [dict(v6=False, sport=1, seq=rnd.randrange(2**32), ident=rnd.randrange(65536)),
             dict(v6=True, sport=2, seq=rnd.randrange(2**32), ident=0),
             dict(v6=False, sport=3, seq=2**32 - 3 * MSS4, ident=65534)]  # SEQ and ID wrap
    frames = []
    for _ in range(rnd.randrange(1, 60)):
        fl = rnd.choice(flows)
        mss = 1428 if fl["v6"] else MSS4
        kind = rnd.random()
        size = mss if kind < 0.7 else rnd.choice([0, 1, 500, mss - 1])
        flags = 0x18 if rnd.random() < 0.1 else (0x11 if rnd.random() < 0.03 else 0x10)
        if rnd.random() < 0.05:
            fl["seq"] -= mss  # a retransmission
        frames.append(tcp_frame(fl["seq"], bytes(rnd.randrange(256) for _ in range(size)), v6=fl["v6"],
                                ident=fl["ident"], flags=flags, sport=fl["sport"],
                                tsval=7 if rnd.random() < 0.95 else 8))
        fl["seq"] = (fl["seq"] + size) % 2**32
        fl["ident"] = (fl["ident"] + (1 if rnd.random() < 0.97 else 2)) % 65536
    nr = 64
    (_, posted, supers, merged), out, _ = post(frames, nr=nr, head=rnd.randrange(nr),
                                               max_segs=rnd.choice([2, 5, 64]))
    assert resegmented(out) == frames
    assert posted == len(frames) - merged + supers
