"""classify's Packet record: the TCP header parsed once in C, against ustack.wire.tcp.TcpHeader.parse.

A differential test builds IPv4/TCP frames from random option lists (well
formed and malformed), random data offsets, truncations and byte flips, and
checks that the record and the wire/ reference agree field by field, or both
reject the frame with the same reason (tests/fastpath/oracle.py). A table of
hand-written option lists pins the rules (RFC 9293 3.1/3.2, RFC 7323,
RFC 2018) so that a change in both implementations at once is noticed.
"""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ustack import _fastpath as fp
from ustack.wire.checksum import internet_checksum, pseudo_header_sum
from ustack.wire.ipv4 import Ipv4Header
from ustack.wire.tcp import TcpHeader

from .oracle import BLANK, MAC, TCP_FIELDS, agree

# Derandomized whenever CI is set (tests/conftest.py loads its "ci" profile for CI=true only).
FUZZ = settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                derandomize=bool(os.environ.get("CI")))

SRC, DST = bytes([198, 18, 0, 2]), bytes([198, 18, 0, 1])
ETH = MAC + bytes.fromhex("020000000002") + b"\x08\x00"
VLAN_ETH = MAC + bytes.fromhex("020000000002") + b"\x81\x00\x00\x05\x08\x00"
KNOWN = (0, 1, 2, 3, 4, 5, 8)


def fix_checksums(buf: bytearray, l3: int) -> None:
    """Recompute the IPv4 header checksum and, when the field is there, the TCP checksum."""
    ihl = (buf[l3] & 0x0F) * 4
    buf[l3 + 10 : l3 + 12] = b"\0\0"
    buf[l3 + 10 : l3 + 12] = internet_checksum(buf[l3 : l3 + ihl]).to_bytes(2, "big")
    l4, end = l3 + ihl, l3 + int.from_bytes(buf[l3 + 2 : l3 + 4], "big")
    if end - l4 >= 18:
        buf[l4 + 16 : l4 + 18] = b"\0\0"
        seg = bytes(buf[l4:end])
        csum = internet_checksum(seg, pseudo_header_sum(bytes(buf[l3 + 12 : l3 + 16]), bytes(buf[l3 + 16 : l3 + 20]),
                                                        6, len(seg)))
        buf[l4 + 16 : l4 + 18] = csum.to_bytes(2, "big")


def tcp_frame(options: bytes, payload: bytes = b"", *, doff: int | None = None, seq=1000, ack=2000, flags=0x18,
              window=512, urgent=0, ports=(40000, 80), ttl=64, vlan=False, trailer=b"", ip_options=b"") -> bytes:
    """Ethernet + IPv4 + a TCP header carrying ``options`` as given (no padding added), checksums right."""
    hlen = 20 + len(options)
    if doff is None:
        doff = hlen // 4
    hdr = struct.pack("!HHIIBBHHH", ports[0], ports[1], seq, ack, (doff & 0xF) << 4, flags, window, 0, urgent)
    seg = hdr + options + payload
    eth = VLAN_ETH if vlan else ETH
    ip = Ipv4Header(total_length=20 + len(ip_options) + len(seg), ttl=ttl, proto=6, src=SRC, dst=DST,
                    flags_df=True, options=ip_options)
    buf = bytearray(len(eth) + ip.header_len + len(seg))
    buf[: len(eth)] = eth
    ip.emit(buf, len(eth))
    buf[len(eth) + ip.header_len :] = seg
    fix_checksums(buf, len(eth))
    return bytes(buf) + trailer


# -- the rules, one option list at a time ---------------------------------------------
TS = struct.pack("!II", 0xDEADBEEF, 7)
SACK2 = struct.pack("!IIII", 1, 2, 0xFFFFFFF0, 5)
SACK4 = struct.pack("!8I", *range(11, 19))

GOOD = [
    # (option bytes, fields that differ from blank)
    (b"", {}),
    (b"\0\0\0\0", {}),
    (b"\1\1\1\1", {}),
    (b"\0\2\4\5", {}),  # after End of Option List everything is padding, even a bad MSS (RFC 9293 3.1)
    (b"\0\1\xff\xff", {}),
    (b"\2\4\5\xb4", {"mss": 1460}),
    (b"\2\4\0\1\2\4\0\2", {"mss": 2}),  # repeated: the last one counts
    (b"\3\3\x0e\0", {"wscale": 14}),
    (b"\1\3\3\xff", {"wscale": 255}),  # raw: clamping to 14 is TCP's job (RFC 7323 2.3)
    (b"\4\2\0\0", {"sack_permitted": True}),
    (b"\1\1\x08\x0a" + TS, {"timestamps": (0xDEADBEEF, 7)}),
    (b"\x08\x0a" + TS + b"\1\1", {"timestamps": (0xDEADBEEF, 7)}),
    (b"\1\1\5\x12" + SACK2, {"sack_blocks": ((1, 2), (0xFFFFFFF0, 5))}),
    (b"\1\1\5\x22" + SACK4 + b"\1\1\1\1", {"sack_blocks": ((11, 12), (13, 14), (15, 16), (17, 18))}),
    (b"\5\x0a" + SACK2[:8] + b"\5\x0a" + SACK2[8:] + b"\0\0\0\0",
     {"sack_blocks": ((0xFFFFFFF0, 5),)}),  # the last SACK option counts
    (b"\xfe\4\xab\xcd", {"unknown_options": ((254, b"\xab\xcd"),)}),
    (b"\x1e\2\x1f\3\x09\0\0\0", {"unknown_options": ((30, b""), (31, b"\x09"))}),
    (b"\2\4\5\xb4\4\2\x08\x0a" + TS + b"\1\3\3\7",  # a Linux SYN
     {"mss": 1460, "sack_permitted": True, "timestamps": (0xDEADBEEF, 7), "wscale": 7}),
    (b"\2\4\5\xb4\x22\x0e" + bytes(12) + b"\1\1\5\x0a" + SACK2[:8] + b"\x08\x0a" + TS,  # 40 octets
     {"mss": 1460, "unknown_options": ((0x22, bytes(12)),), "sack_blocks": ((1, 2),),
      "timestamps": (0xDEADBEEF, 7)}),
]

BAD = [
    b"\2\0\0\0",  # length 0
    b"\2\1\0\0",  # length 1
    b"\xfe\0\0\0",  # unknown kind, length 0
    b"\xfe\1\0\0",  # unknown kind, length 1
    b"\1\1\1\2",  # no length octet
    b"\1\1\1\xfe",
    b"\2\x08\0\0",  # runs past the header
    b"\xfe\x05\0\0",
    b"\2\3\5\0",  # MSS length 3, 5
    b"\2\5\5\xb4\0\0\0\0",
    b"\3\2\0\0",  # window scale length 2, 4
    b"\3\4\7\0",
    b"\4\3\0\0",  # SACK-permitted length 3
    b"\5\2\0\0",  # SACK with no block, 9, 11 octets
    b"\5\x09" + bytes(7) + b"\0\0\0",
    b"\5\x0b" + bytes(9) + b"\0",
    b"\x08\x09" + TS[:7] + b"\0\0\0",  # timestamps 9, 11 octets
    b"\x08\x0b" + TS + b"\0\0",
    b"\2\4\5\xb4\x08\x0a" + TS + b"\3\2",  # good options, then a bad one
]


OPTION_FIELDS = ("mss", "wscale", "sack_permitted", "sack_blocks", "timestamps", "unknown_options")


def _expect(rec, wanted: dict) -> None:
    for name in OPTION_FIELDS:
        assert getattr(rec, name) == wanted.get(name, BLANK[name]), name


@pytest.mark.parametrize("options, wanted", GOOD, ids=lambda v: v.hex() if isinstance(v, bytes) else None)
def test_good_option_lists(options, wanted):
    frame = tcp_frame(options, b"data")
    rec = agree(frame)
    assert rec.kind == fp.K_TCP and rec.header_len == 20 + len(options)
    assert rec.payload_len == 4 and frame[rec.payload_off : rec.payload_off + 4] == b"data"
    _expect(rec, wanted)


@pytest.mark.parametrize("options", BAD, ids=lambda v: v.hex())
def test_malformed_option_lists_are_dropped(options):
    for verify_l4 in (True, False):
        rec = agree(tcp_frame(options, b"xy"), verify_l4=verify_l4)
        assert (rec.kind, rec.reason_name) == (fp.K_DROP, "tcp.bad_options")
        assert rec.reason == fp.REASONS.index("tcp.bad_options")


def test_checks_run_in_tcp_header_parse_order():
    """Length, data offset, checksum, options: a frame wrong in several ways gets the first reason."""
    bad_opts = tcp_frame(b"\2\0\0\0")
    bad_csum = bytearray(bad_opts)
    bad_csum[-1] ^= 0xFF  # corrupt the last option octet: checksum and options both wrong
    assert fp.classify_one(bytes(bad_csum), MAC).reason_name == "tcp.bad_checksum"
    assert fp.classify_one(bytes(bad_csum), MAC, False).reason_name == "tcp.bad_options"
    assert agree(tcp_frame(b"", doff=4)).reason_name == "tcp.bad_data_offset"
    assert agree(tcp_frame(b"\1\1\1\1", doff=6)).kind == fp.K_TCP  # 24 octets: the whole segment
    assert agree(tcp_frame(b"\1\1\1\1", doff=7)).reason_name == "tcp.bad_data_offset"


def test_header_fields_and_offsets():
    frame = tcp_frame(b"\1\1\x08\x0a" + TS, b"hello", seq=0xFFFFFFFF, ack=0x80000000, flags=0xFF, window=0xFFFF,
                      urgent=0x1234, ports=(65535, 1), ttl=3, vlan=True, trailer=b"\0" * 6,
                      ip_options=b"\1\1\1\0")
    rec = agree(frame)
    assert (rec.kind, rec.l3, rec.ihl, rec.l4, rec.ttl, rec.proto) == (fp.K_TCP, 18, 24, 42, 3, 6)
    assert (rec.src, rec.dst, rec.src_port, rec.dst_port) == (SRC, DST, 65535, 1)
    assert (rec.seq, rec.ack, rec.flags, rec.window, rec.urgent) == (0xFFFFFFFF, 0x80000000, 0xFF, 0xFFFF, 0x1234)
    assert rec.total_len == 24 + 32 + 5 and rec.header_len == 32
    assert frame[rec.payload_off : rec.payload_off + rec.payload_len] == b"hello"  # the trailer is not payload
    assert rec.checksum == int.from_bytes(frame[42 + 16 : 42 + 18], "big")
    ref = TcpHeader.parse(frame[42 : 18 + rec.total_len], SRC, DST)
    assert all(getattr(rec, name) == getattr(ref, name) for name in TCP_FIELDS)


# -- the differential test ---------------------------------------------------------
u32 = st.integers(0, 0xFFFFFFFF)

well_formed_option = st.one_of(
    st.sampled_from([b"\0", b"\1", b"\4\2"]),
    st.integers(0, 0xFFFF).map(lambda v: b"\2\4" + v.to_bytes(2, "big")),
    st.integers(0, 255).map(lambda v: bytes((3, 3, v))),
    st.lists(st.tuples(u32, u32), min_size=1, max_size=4).map(
        lambda blocks: bytes((5, 2 + 8 * len(blocks))) + b"".join(struct.pack("!II", *b) for b in blocks)),
    st.tuples(u32, u32).map(lambda t: b"\x08\x0a" + struct.pack("!II", *t)),
    st.tuples(st.sampled_from([k for k in range(256) if k not in KNOWN]), st.binary(max_size=10)).map(
        lambda kd: bytes((kd[0], 2 + len(kd[1]))) + kd[1]),
)
malformed_option = st.one_of(
    # a known kind with any length octet, and any bytes after it
    st.tuples(st.sampled_from([2, 3, 4, 5, 8]), st.integers(0, 255), st.binary(max_size=12)).map(
        lambda t: bytes(t[:2]) + t[2]),
    # any kind, length 0 or 1, or running long
    st.tuples(st.integers(2, 255), st.sampled_from([0, 1, 41, 255])).map(bytes),
    # a kind alone (no length octet if it ends the list)
    st.integers(2, 255).map(lambda k: bytes((k,))),
    st.binary(min_size=1, max_size=6),
)


@st.composite
def tcp_frames(draw):
    """An IPv4/TCP frame: a random option list (malformed in half the draws), then now and then
    a random data offset, flipped header bytes, a truncation; checksums recomputed in 9 of 10,
    then now and then a wrong TCP checksum."""
    option = st.one_of(well_formed_option, malformed_option) if draw(st.booleans()) else well_formed_option
    options = b"".join(draw(st.lists(option, max_size=8)))[:40]
    pad = -len(options) % 4
    options += draw(st.sampled_from([bytes(pad), b"\1" * pad, draw(st.binary(min_size=pad, max_size=pad))]))
    sometimes = st.integers(0, 3).map(lambda v: v == 3)  # Hypothesis favours 0: make 0 the usual case
    frame = bytearray(tcp_frame(
        options, draw(st.binary(max_size=40)), doff=draw(st.integers(0, 15)) if draw(sometimes) else None,
        seq=draw(u32), ack=draw(u32), flags=draw(st.integers(0, 255)), window=draw(st.integers(0, 0xFFFF)),
        urgent=draw(st.integers(0, 0xFFFF)), ports=(draw(st.integers(0, 0xFFFF)), draw(st.integers(0, 0xFFFF))),
        ttl=draw(st.integers(0, 255)), vlan=draw(st.booleans()), trailer=draw(st.binary(max_size=8)),
        ip_options=draw(st.sampled_from([b"", b"\1\1\1\0", b"\x94\4\0\0"])),  # none, NOPs, Router Alert
    ))
    l3 = 18 if frame[12:14] == b"\x81\x00" else 14
    l4 = l3 + (frame[l3] & 0x0F) * 4
    if draw(sometimes):  # flip bytes of the TCP header and options
        for pos, val in draw(st.lists(st.tuples(st.integers(0, 59), st.integers(0, 255)), min_size=1, max_size=3)):
            if l4 + pos < len(frame):
                frame[l4 + pos] = val
    if draw(sometimes) and draw(sometimes):  # flip a byte anywhere
        frame[draw(st.integers(0, len(frame) - 1))] = draw(st.integers(0, 255))
    if draw(sometimes):
        cut = draw(st.integers(1, 70))
        if draw(st.booleans()):
            # a short segment that says so: IPv4 total length follows the cut
            total = int.from_bytes(frame[l3 + 2 : l3 + 4], "big")
            keep = max(l4 - l3, total - cut)
            frame[l3 + 2 : l3 + 4] = keep.to_bytes(2, "big")
            del frame[l3 + keep :]
        else:
            del frame[max(0, len(frame) - cut) :]  # a frame cut short under its IPv4 total length
    if len(frame) >= l3 + 20 and draw(st.integers(0, 9)) != 9:
        fix_checksums(frame, l3)
    if draw(sometimes) and l4 + 17 < len(frame):  # a TCP checksum that does not hold
        frame[l4 + 17] ^= draw(st.integers(1, 255))
    return bytes(frame)


@given(tcp_frames(), st.booleans())
@FUZZ
def test_tcp_record_agrees_with_tcp_header_parse(frame, verify_l4):
    rec = agree(frame, verify_l4=verify_l4)
    event(rec.reason_name if rec.kind == fp.K_DROP else f"kind {rec.kind}")
    if rec.kind == fp.K_TCP:
        event("tcp options: " + ",".join(n for n in ("mss", "wscale", "timestamps", "sack_blocks", "unknown_options")
                                         if getattr(rec, n) not in (None, ())) or "tcp options: none")


def test_differential_generator_reaches_every_tcp_outcome():
    """The random frames above exercise every TCP outcome (guards the generator, not classify)."""
    seen = set()

    @given(tcp_frames())
    @settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    def collect(frame):
        rec = fp.classify_one(frame, MAC)
        seen.add(rec.reason_name)
        if rec.kind == fp.K_TCP:
            seen.update(n for n in ("mss", "wscale", "timestamps", "sack_blocks", "unknown_options", "sack_permitted")
                        if getattr(rec, n) not in (None, (), False))

    collect()
    wanted = {"ok", "tcp.truncated", "tcp.bad_data_offset", "tcp.bad_checksum", "tcp.bad_options",
              "ipv4.bad_total_length", "mss", "wscale", "timestamps", "sack_blocks", "unknown_options",
              "sack_permitted"}
    assert wanted <= seen, wanted - seen


# -- the record itself ---------------------------------------------------------------
def test_record_is_read_only_and_made_by_classify_only():
    rec = fp.classify_one(tcp_frame(b"\1\1\x08\x0a" + TS), MAC)
    with pytest.raises(TypeError):
        fp.Packet()
    with pytest.raises(AttributeError):
        rec.seq = 1
    with pytest.raises(AttributeError):
        rec.anything = 1
    assert not hasattr(rec, "__dict__")
    assert rec.timestamps == (0xDEADBEEF, 7) and rec.sack_blocks == () and rec.unknown_options == ()
    assert rec.mss is None and rec.wscale is None and rec.sack_permitted is False
    assert "K_TCP" in repr(rec) and "tcp.bad_options" in repr(fp.classify_one(tcp_frame(b"\2\0\0\0"), MAC))


def test_record_keeps_no_hold_on_the_frame():
    """Rings reuse frame memory once a burst is released: records copy what they need."""
    buf = bytearray(tcp_frame(b"\1\1\5\x0a" + SACK2[:8] + b"\xfe\3\x77\0", b"payload"))
    rec = fp.classify([buf], MAC)[0]
    before = {name: getattr(rec, name) for name in TCP_FIELDS + ("src", "dst")}
    buf[:] = bytes(len(buf))
    buf.extend(b"resizable: no buffer export is left behind")
    assert {name: getattr(rec, name) for name in TCP_FIELDS + ("src", "dst")} == before
    assert before["sack_blocks"] == ((1, 2),) and before["unknown_options"] == ((0xFE, b"\x77"),)


def test_kinds_and_reasons_are_exported_once():
    assert (fp.K_DROP, fp.K_ARP, fp.K_UDP, fp.K_TCP, fp.K_ICMP, fp.K_FRAG, fp.K_IP_OTHER) == tuple(range(7))
    assert fp.REASONS[0] == "ok" and "tcp.bad_options" in fp.REASONS
    assert len(set(fp.REASONS)) == len(fp.REASONS)
