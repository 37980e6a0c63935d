"""The Cython fast path against the pure-Python wire/ reference and scapy."""

from __future__ import annotations

import os
import random
from socket import AF_INET6, inet_aton, inet_pton

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import ICMPv6EchoRequest, ICMPv6ND_NS, IPv6, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop
from scapy.layers.l2 import ARP, Dot1Q, Ether

from ustack import _fastpath as fp
from ustack.wire.checksum import internet_checksum, ones_sum
from ustack.wire.tcp import TcpHeader

from .oracle import MAC, agree, reference

# Derandomized whenever CI is set (tests/conftest.py loads its "ci" profile for CI=true only).
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                derandomize=bool(os.environ.get("CI")))


# -- checksum -----------------------------------------------------------------------
@given(st.binary(max_size=3000), st.integers(0, 0xFFFF))
@FUZZ
def test_checksum_matches_reference(data, initial):
    assert fp.checksum(data, initial) == internet_checksum(data, initial)
    assert fp.ones_sum(data, initial) == ones_sum(data, initial)


@pytest.mark.parametrize("fill", ["ff", "random"])
def test_checksum_every_length_and_alignment_around_the_wide_loop(fill):
    # The C sum takes 64-byte blocks through AVX2 lanes from 128 bytes on (where the CPU has AVX2)
    # and the tail through the scalar loop: every length 0..400 at each of 4 alignments, plus a
    # 64 KiB super-frame, all against the pure-Python sum (0xff bytes push every carry).
    rnd = random.Random(7)
    big = bytes([0xFF]) * 70_000 if fill == "ff" else rnd.randbytes(70_000)
    view = memoryview(big)
    for off in range(4):
        for n in range(401):
            assert fp.ones_sum(view[off:off + n]) == ones_sum(big[off:off + n]), (off, n)
    for n in (65_535, 65_536, 69_999):
        assert fp.checksum(view[1:1 + n], 0x1234) == internet_checksum(big[1:1 + n], 0x1234)


def test_checksum_known_vector_and_edges():
    # RFC 1071-style worked example: an IPv4 header whose checksum is 0xb861.
    hdr = bytes.fromhex("450000730000400040110000c0a80001c0a800c7")
    assert fp.checksum(hdr) == 0xB861
    assert fp.checksum(b"") == 0xFFFF
    assert fp.ones_sum(b"\xff\xff") == 0xFFFF
    assert fp.checksum(b"\x01") == (~0x0100) & 0xFFFF  # odd byte is the high octet
    with pytest.raises(ValueError):
        fp.checksum(b"", 0x10000)


@given(st.binary(min_size=2, max_size=200).filter(lambda b: len(b) % 2 == 0), st.data())
@FUZZ
def test_incremental_update_rfc1624(data, draw):
    """Changing one 16-bit word: the RFC 1624 update equals a full recompute."""
    buf = bytearray(data)
    i = draw.draw(st.integers(0, len(buf) // 2 - 1)) * 2
    new = draw.draw(st.integers(0, 0xFFFF))
    old_csum = fp.checksum(buf)
    old = int.from_bytes(buf[i:i + 2], "big")
    buf[i:i + 2] = new.to_bytes(2, "big")
    updated = fp.checksum_update(old_csum, old, new)
    full = fp.checksum(buf)
    # Both are valid encodings of the same sum (0x0000 and 0xffff are equivalent, RFC 1624 section 3).
    assert updated == full or {updated, full} == {0, 0xFFFF}


def test_incremental_update32_for_an_address_rewrite():
    pkt = bytearray(bytes(IP(src="198.18.0.1", dst="198.18.0.2")))
    old = fp.checksum(pkt[:20]) if False else int.from_bytes(pkt[10:12], "big")
    new_src = int.from_bytes(bytes([198, 19, 7, 9]), "big")
    old_src = int.from_bytes(pkt[12:16], "big")
    pkt[12:16] = new_src.to_bytes(4, "big")
    pkt[10:12] = fp.checksum_update32(old, old_src, new_src).to_bytes(2, "big")
    assert fp.checksum(bytes(pkt[:20])) == 0


# -- classify -----------------------------------------------------------------------
# Every record is compared field by field with the wire/ reference (tests/fastpath/oracle.py);
# the TCP header and its options have their own differential test in test_classify_tcp.py.
def golden_frames():
    e = Ether(dst="02:00:00:00:00:01", src="02:00:00:00:00:02")
    ip = IP(src="198.18.0.2", dst="198.18.0.1")
    ip6 = IPv6(src="fd00::2", dst="fd00::1", hlim=33)
    return [
        e / ip / UDP(sport=1, dport=2) / b"hello",
        e / ip / UDP(sport=1, dport=2, chksum=0) / b"nocsum",
        e / ip / TCP(sport=3, dport=4, flags="SA", options=[("MSS", 1460), ("SAckOK", b""), ("WScale", 7)]),
        e / ip / TCP(sport=3, dport=4, flags="PA") / (b"d" * 100),
        e / ip / TCP(sport=3, dport=4, flags="A", options=[("NOP", None), ("NOP", None), ("Timestamp", (7, 9))]),
        e / ip / TCP(sport=3, dport=4, flags="A", options=[("NOP", None), ("NOP", None), ("SAck", (10, 20, 30, 40))]),
        e / ip / ICMP(type=8, id=1, seq=2) / b"ping",
        e / IP(src="198.18.0.2", dst="198.18.0.1", options=[b"\x01\x01\x01\x00"]) / UDP() / b"opt",
        e / IP(src="198.18.0.2", dst="198.18.0.1", flags="MF", frag=0) / (b"f" * 64),
        e / IP(src="198.18.0.2", dst="198.18.0.1", frag=100) / (b"g" * 64),
        e / IP(src="198.18.0.2", dst="198.18.0.1", proto=47) / b"gre",
        e / Dot1Q(vlan=5) / ip / UDP(sport=9, dport=10) / b"vlan",
        e / ARP(pdst="198.18.0.1"),
        e / Dot1Q(vlan=5) / ARP(pdst="198.18.0.1"),
        Ether(dst="ff:ff:ff:ff:ff:ff") / ip / UDP() / b"bcast",
        Ether(dst="02:00:00:00:00:99") / ip / UDP() / b"not for us",
        Ether(dst="02:00:00:00:00:01", type=0x86DD) / (b"\x60" + b"\x00" * 39),
        # IPv6 (_fp_classify6.pxi): UDP/TCP/ICMPv6 after the fixed header in C, the rest K_IP6
        e / ip6 / UDP(sport=1, dport=2) / b"hello6",
        e / ip6 / UDP(sport=1, dport=2, chksum=0) / b"zero checksum is invalid over IPv6",
        e / ip6 / TCP(sport=3, dport=4, flags="SA", options=[("MSS", 1440), ("SAckOK", b""), ("WScale", 7)]),
        e / ip6 / TCP(sport=3, dport=4, flags="PA") / (b"d" * 100),
        e / ip6 / ICMPv6EchoRequest(id=1, seq=2, data=b"ping6"),
        e / ip6 / ICMPv6ND_NS(tgt="fd00::1"),
        e / ip6 / IPv6ExtHdrFragment(id=7, m=1) / (b"f" * 64),
        e / ip6 / IPv6ExtHdrHopByHop() / UDP() / b"hbh",
        e / Dot1Q(vlan=5) / ip6 / UDP(sport=9, dport=10) / b"vlan6",
        Ether(dst="33:33:ff:00:00:01") / IPv6(src="fe80::2", dst="ff02::1:ff00:1") / ICMPv6ND_NS(tgt="fd00::1"),
    ]


@pytest.mark.parametrize("pkt", golden_frames(), ids=lambda p: p.summary())
def test_classify_golden_frames_match_reference(pkt):
    agree(bytes(pkt))


def test_classify_golden_frames_match_scapy():
    """scapy as a second, independent oracle for the fields it dissects."""
    for pkt in golden_frames():
        frame = bytes(pkt)
        rec = fp.classify_one(frame, MAC)
        p = Ether(frame)
        if rec.kind == fp.K_ARP:
            assert ARP in p and rec.l3 == len(frame) - len(p[ARP])
            continue
        if rec.kind == fp.K_DROP:
            assert (IP not in p or p[Ether].dst != "02:00:00:00:00:01" and not p[Ether].dst.startswith("ff")
                    or rec.reason_name == "udp.zero_checksum")
            continue
        if IPv6 in p:
            i = p[IPv6]
            assert (rec.src, rec.dst) == (inet_pton(AF_INET6, i.src), inet_pton(AF_INET6, i.dst))
            assert (rec.proto, rec.ttl, rec.total_len, rec.ihl) == (i.nh, i.hlim, 40 + i.plen, 40)
            if rec.kind == fp.K_UDP6:
                assert (rec.src_port, rec.dst_port, rec.payload_len) == (p[UDP].sport, p[UDP].dport, p[UDP].len - 8)
            elif rec.kind == fp.K_TCP6:
                assert (rec.src_port, rec.dst_port, rec.seq, rec.flags, rec.mss) == (3, 4, p[TCP].seq, 0x12, 1440) \
                    or rec.payload_len == 100
            continue
        i = p[IP]
        assert (rec.src, rec.dst) == (inet_aton(i.src), inet_aton(i.dst))
        assert (rec.proto, rec.ttl, rec.total_len, rec.ihl) == (i.proto, i.ttl, i.len, i.ihl * 4)
        if rec.kind == fp.K_UDP:
            assert (rec.src_port, rec.dst_port, rec.payload_len) == (p[UDP].sport, p[UDP].dport, p[UDP].len - 8)
        elif rec.kind == fp.K_TCP:
            t = p[TCP]
            assert (rec.src_port, rec.dst_port, rec.seq, rec.ack, rec.flags, rec.window, rec.checksum) == (
                t.sport, t.dport, t.seq, t.ack, int(t.flags), t.window, t.chksum)
            opts = dict(t.options)
            assert rec.mss == opts.get("MSS") and rec.wscale == opts.get("WScale")
            assert rec.timestamps == opts.get("Timestamp") and rec.sack_permitted == ("SAckOK" in opts)
            sack = opts.get("SAck", ())
            assert rec.sack_blocks == tuple(zip(sack[::2], sack[1::2]))
        elif rec.kind == fp.K_ICMP:
            assert (rec.icmp_type, rec.icmp_code) == (p[ICMP].type, p[ICMP].code)


def test_classify_named_reasons():
    good = bytearray(bytes(Ether(dst="02:00:00:00:00:01") / IP(src="198.18.0.2", dst="198.18.0.1") / UDP(sport=1, dport=2) / (b"x" * 20)))
    cases = {
        "eth.truncated": bytes(good[:13]),
        "ipv4.truncated": bytes(good[:30]),
        "ipv4.bad_version": bytes(good[:14]) + bytes([0x65]) + bytes(good[15:]),
        "ipv4.bad_ihl": bytes(good[:14]) + bytes([0x44]) + bytes(good[15:]),
        "ipv4.bad_total_length": bytes(good[:16]) + (2000).to_bytes(2, "big") + bytes(good[18:]),
        "ipv4.bad_checksum": bytes(good[:24]) + bytes([good[24] ^ 1]) + bytes(good[25:]),
        "udp.bad_checksum": bytes(good[:-1]) + bytes([good[-1] ^ 1]),
    }
    for reason, frame in cases.items():
        rec = fp.classify_one(frame, MAC)
        assert (rec.kind, rec.reason_name) == (fp.K_DROP, reason)
        assert rec.reason == fp.REASONS.index(reason)
        assert reference(frame) == {"kind": fp.K_DROP, "reason": reason}


def test_classify_a_burst_keeps_order_and_verify_l4_off_skips_l4_checksums():
    frames = [bytes(p) for p in golden_frames()]
    recs = fp.classify(frames, MAC)
    assert [r.kind for r in recs] == [fp.classify_one(f, MAC).kind for f in frames]
    assert all(isinstance(r, fp.Packet) for r in recs)
    bad = bytearray(frames[0])
    bad[-1] ^= 1  # UDP payload: the UDP checksum no longer holds
    assert fp.classify_one(bytes(bad), MAC).reason_name == "udp.bad_checksum"
    rec = agree(bytes(bad), verify_l4=False)
    assert rec.kind == fp.K_UDP and rec.payload_len == 5
    assert fp.classify([], MAC) == []
    not_for_us = next(f for f in frames if f.endswith(b"not for us"))
    assert fp.classify_one(not_for_us, None).kind == fp.K_UDP  # mac=None: no unicast filter


valid_frames = st.sampled_from([bytes(p) for p in golden_frames()])


@given(valid_frames, st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 255)), max_size=6), st.integers(0, 200))
@FUZZ
def test_classify_mutated_frames_match_reference(frame, flips, cut):
    buf = bytearray(frame)
    for pos, val in flips:
        if buf:
            buf[pos % len(buf)] = val
    if cut and buf:
        buf = buf[: max(0, len(buf) - cut % len(buf))]
    agree(bytes(buf))


@given(st.binary(max_size=200))
@FUZZ
def test_classify_random_bytes_never_crash_and_match(data):
    agree(data)
    agree(b"\x02\x00\x00\x00\x00\x01" + b"\x02" * 6 + b"\x08\x00" + data)
    agree(b"\x02\x00\x00\x00\x00\x01" + b"\x02" * 6 + b"\x86\xdd" + data)


def test_classify_rejects_non_contiguous_or_wrong_mac():
    with pytest.raises(ValueError):
        fp.classify([b"x" * 60], mac=b"short")
    with pytest.raises(ValueError):
        fp.classify_one(b"x" * 60, mac=b"toolong")
    with pytest.raises(BufferError):
        fp.classify([memoryview(b"x" * 120)[::2]])
    with pytest.raises(TypeError):
        fp.classify([12345])


# -- emit ---------------------------------------------------------------------------
def test_emit_udp_is_what_scapy_expects():
    tmpl = bytes(Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01") / IP(src="198.18.0.1", dst="198.18.0.2", ttl=64) / UDP(sport=1000, dport=2000))[:42]
    slot = bytearray(1600)
    for payload in (b"", b"a", os.urandom(1472)):
        n = fp.emit_udp(slot, tmpl, 0x1234, payload)
        frame = bytes(slot[:n])
        pkt = Ether(frame)
        assert pkt[IP].len == 28 + len(payload) and pkt[IP].id == 0x1234
        assert pkt[UDP].len == 8 + len(payload) and bytes(pkt[UDP].payload) == payload
        ref = Ether(frame)
        del ref[IP].chksum
        del ref[UDP].chksum
        ref = Ether(bytes(ref))
        assert ref[IP].chksum == pkt[IP].chksum
        assert ref[UDP].chksum == pkt[UDP].chksum or (ref[UDP].chksum == 0 and pkt[UDP].chksum == 0xFFFF)


def test_emit_ipv4_fragment_fields_and_bounds():
    tmpl = bytes(Ether() / IP(src="198.18.0.1", dst="198.18.0.2", proto=17, ttl=5))[:34]
    slot = bytearray(200)
    n = fp.emit_ipv4(slot, tmpl, 77, 0x2000 | 10, b"z" * 80)
    pkt = Ether(bytes(slot[:n]))
    assert (pkt[IP].id, pkt[IP].flags, pkt[IP].frag, pkt[IP].len, pkt[IP].ttl) == (77, 1, 10, 100, 5)
    assert fp.checksum(bytes(slot[14:34])) == 0
    with pytest.raises(ValueError):
        fp.emit_ipv4(bytearray(50), tmpl, 1, 0, b"z" * 80)
    with pytest.raises(ValueError):
        fp.emit_udp(bytearray(1600), tmpl, 1, b"")


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFFFFFF),
       st.integers(0, 0xFF), st.integers(0, 0xFFFF), st.one_of(st.none(), st.tuples(st.integers(0, 0xFFFFFFFF),
                                                                                     st.integers(0, 0xFFFFFFFF))),
       st.binary(max_size=1400), st.integers(0, 0xFFFF))
@FUZZ
def test_emit_tcp_matches_the_wire_reference_byte_for_byte(sport, dport, seq, ack, flags, window, ts, payload, ident):
    src, dst = bytes([198, 18, 0, 1]), bytes([198, 18, 0, 2])
    tmpl = bytes(Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01") / IP(src="198.18.0.1", dst="198.18.0.2",
                                                                           proto=6, ttl=64))[:34]
    slot = bytearray(1600)
    n = fp.emit_tcp(slot, tmpl, ident, sport, dport, seq, ack, flags, window,
                    None if ts is None else ts[0], 0 if ts is None else ts[1], payload)
    hdr = TcpHeader(sport, dport, seq, ack, flags, window, 0, 0, timestamps=ts)
    seg = bytearray(hdr.header_len + len(payload))
    seg[hdr.header_len:] = payload
    hdr.emit(seg, 0, src, dst, len(payload))
    ref = bytearray(1600)
    m = fp.emit_ipv4(ref, tmpl, ident, 0x4000, bytes(seg))
    assert bytes(slot[:n]) == bytes(ref[:m])


def test_emit_tcp_is_what_scapy_expects_and_refuses_bad_input():
    tmpl = bytes(Ether() / IP(src="198.18.0.1", dst="198.18.0.2", proto=6))[:34]
    slot = bytearray(1600)
    n = fp.emit_tcp(slot, tmpl, 9, 1234, 80, 1000, 2000, 0x18, 512, 77, 88, b"hello")
    p = Ether(bytes(slot[:n]))
    assert (p[TCP].sport, p[TCP].dport, p[TCP].seq, p[TCP].ack, str(p[TCP].flags), p[TCP].window) == (
        1234, 80, 1000, 2000, "PA", 512)
    assert dict(p[TCP].options)["Timestamp"] == (77, 88) and bytes(p[TCP].payload) == b"hello"
    q = Ether(bytes(slot[:n]))
    del q[IP].chksum
    del q[TCP].chksum
    q = Ether(bytes(q))
    assert (q[IP].chksum, q[TCP].chksum) == (p[IP].chksum, p[TCP].chksum)
    with pytest.raises(ValueError):
        fp.emit_tcp(bytearray(40), tmpl, 9, 1, 2, 3, 4, 0x10, 5, None, 0, b"")  # slot too small
    with pytest.raises(ValueError):
        fp.emit_tcp(slot, tmpl[:20], 9, 1, 2, 3, 4, 0x10, 5, None, 0, b"")  # bad template
    with pytest.raises(ValueError):
        fp.emit_tcp(slot, tmpl, 9, 70000, 2, 3, 4, 0x10, 5, None, 0, b"")  # port out of range
