"""TCP header and options: emit dissected by scapy, golden scapy segments parsed, malformed and fuzzed input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.layers.inet import IP, TCP

from ustack.wire import WireError
from ustack.wire.ipv4 import ip_to_bytes
from ustack.wire.tcp import (
    ACK,
    CWR,
    ECE,
    FIN,
    PSH,
    RST,
    SYN,
    URG,
    TcpHeader,
    flags_from_str,
    flags_to_str,
)

IP_A, IP_B, IP_C = "198.18.0.1", "198.18.0.2", "198.19.7.9"
PA, PB, PC = ip_to_bytes(IP_A), ip_to_bytes(IP_B), ip_to_bytes(IP_C)


def scapy_segment(tcp: TCP, payload: bytes = b"", src: str = IP_A, dst: str = IP_B) -> bytes:
    """A TCP segment built (and checksummed) by scapy, the independent oracle."""
    return raw(IP(src=src, dst=dst) / tcp / payload)[20:]


def scapy_checksum(segment: bytes, src: str = IP_A, dst: str = IP_B) -> int:
    pkt = IP(src=src, dst=dst) / TCP(segment)
    del pkt[TCP].chksum
    return IP(raw(pkt))[TCP].chksum


def scapy_options(segment: bytes) -> dict:
    """Scapy's reading of the option list, as a dict by option name (NOP/EOL dropped)."""
    out: dict = {}
    for name, value in TCP(segment).options:
        if name in ("NOP", "EOL"):
            continue
        out.setdefault(name, []).append(value)
    return out


# -- emit, checked by scapy ---------------------------------------------------

EMIT_CASES = [
    TcpHeader(40000, 80, 1, 0, SYN, 64240, mss=1460, wscale=7, sack_permitted=True, timestamps=(12345, 0)),
    TcpHeader(80, 40000, 0xFFFFFFFF, 2, SYN | ACK, 65535, mss=536, sack_permitted=True),
    TcpHeader(80, 40000, 7, 8, SYN | ACK, 1000, mss=1460, wscale=14),
    TcpHeader(1, 2, 3, 4, ACK, 5, timestamps=(0xFFFFFFFF, 1)),
    TcpHeader(1, 2, 3, 4, ACK, 5, sack_permitted=True),
    TcpHeader(1, 2, 3, 4, ACK | PSH, 512, timestamps=(9, 10), sack_blocks=((100, 200), (300, 400), (500, 600))),
    TcpHeader(1, 2, 3, 4, ACK, 512, sack_blocks=((1, 2), (3, 4), (5, 6), (7, 8))),
    TcpHeader(5, 6, 7, 8, FIN | ACK | URG | ECE | CWR, 0, urgent=3),
    TcpHeader(5, 6, 7, 8, RST, 0),
    TcpHeader(5, 6, 7, 8, ACK, 9, unknown_options=((30, b"\x01\x02\x03"), (254, b""))),
]


@pytest.mark.parametrize("payload", [b"", b"x", b"even", bytes(range(256)) * 5 + b"odd"])
@pytest.mark.parametrize("hdr", EMIT_CASES, ids=lambda h: h.flag_str + str(h.header_len))
def test_emit_dissected_by_scapy(hdr, payload):
    offset = 3
    buf = bytearray(b"\x77" * (offset + hdr.header_len + len(payload) + 2))
    buf[offset + hdr.header_len : offset + hdr.header_len + len(payload)] = payload
    n = hdr.emit(buf, offset, PA, PB, len(payload))
    assert n == hdr.header_len and n % 4 == 0
    assert buf[:offset] == b"\x77" * offset and buf[-2:] == b"\x77\x77"
    seg = bytes(buf[offset : offset + n + len(payload)])
    pkt = TCP(seg)
    assert (pkt.sport, pkt.dport, pkt.seq, pkt.ack) == (hdr.src_port, hdr.dst_port, hdr.seq, hdr.ack)
    assert (int(pkt.flags), pkt.window, pkt.urgptr, pkt.dataofs * 4) == (hdr.flags, hdr.window, hdr.urgent, n)
    assert bytes(pkt.payload) == payload
    assert pkt.chksum == scapy_checksum(seg)
    opts = scapy_options(seg)
    assert opts.get("MSS") == ([hdr.mss] if hdr.mss is not None else None)
    assert opts.get("WScale") == ([hdr.wscale] if hdr.wscale is not None else None)
    assert ("SAckOK" in opts) == hdr.sack_permitted
    assert opts.get("Timestamp") == ([hdr.timestamps] if hdr.timestamps else None)
    if hdr.sack_blocks:
        assert opts["SAck"] == [tuple(edge for block in hdr.sack_blocks for edge in block)]
    else:
        assert "SAck" not in opts
    for kind, data in hdr.unknown_options:
        assert opts[kind] == [data]
    # and our own parser reads back what we wrote
    back = TcpHeader.parse(seg, PA, PB)
    assert back == TcpHeader(**{**_fields(hdr), "checksum": pkt.chksum})
    assert back.header_len == n


def _fields(hdr: TcpHeader) -> dict:
    return {name: getattr(hdr, name) for name in TcpHeader.__dataclass_fields__ if name != "header_len"}


def test_emit_byte_exact_against_scapy():
    hdr = TcpHeader(40000, 80, 1000, 2000, SYN | ACK, 29200, mss=1460, sack_permitted=True, timestamps=(7, 9), wscale=7)
    ours = hdr.to_bytes(PA, PB)
    ref = scapy_segment(TCP(sport=40000, dport=80, seq=1000, ack=2000, flags="SA", window=29200, options=[
        ("MSS", 1460), ("SAckOK", b""), ("Timestamp", (7, 9)), ("NOP", None), ("WScale", 7)]))
    assert ours == ref


def test_options_too_long_refused():
    with pytest.raises(WireError) as e:
        TcpHeader(1, 2, mss=1460, timestamps=(1, 2), sack_blocks=((1, 2), (3, 4), (5, 6)))
    assert e.value.reason == "tcp.bad_options"


def test_emit_refuses_small_buffer_and_bad_addresses():
    hdr = TcpHeader(1, 2, flags=ACK)
    with pytest.raises(ValueError):
        hdr.emit(bytearray(23), 0, PA, PB, 4)
    with pytest.raises(ValueError):
        hdr.emit(bytearray(20), 0, PA[:3], PB, 0)


def test_flag_strings():
    assert flags_from_str("SA") == SYN | ACK
    assert flags_to_str(SYN | ACK | FIN | RST | PSH | URG | ECE | CWR) == "FSRPAUEC"
    assert flags_from_str("") == 0
    with pytest.raises(ValueError):
        flags_from_str("X")


# -- golden segments built by scapy -------------------------------------------

GOLDEN = [
    ("syn_linux", TCP(sport=33000, dport=80, seq=111, flags="S", window=64240, options=[
        ("MSS", 1460), ("SAckOK", b""), ("Timestamp", (3000, 0)), ("NOP", None), ("WScale", 7)]),
     dict(mss=1460, sack_permitted=True, timestamps=(3000, 0), wscale=7)),
    ("sack_blocks", TCP(sport=1, dport=2, flags="A", options=[
        ("NOP", None), ("NOP", None), ("Timestamp", (1, 2)), ("NOP", None), ("NOP", None),
        ("SAck", (10, 20, 30, 40))]),
     dict(timestamps=(1, 2), sack_blocks=((10, 20), (30, 40)))),
    ("eol_then_garbage", TCP(sport=1, dport=2, flags="A", options=[("MSS", 1000), ("EOL", None), (99, b"zz")]),
     dict(mss=1000)),
    ("only_nops", TCP(sport=1, dport=2, flags="A", options=[("NOP", None)] * 8), {}),
    ("unknown_kinds", TCP(sport=1, dport=2, flags="PA", options=[(34, b"\x01\x02"), ("NOP", None), (253, b"")]),
     dict(unknown_options=((34, b"\x01\x02"), (253, b"")))),
    ("wscale_over_14_kept_raw", TCP(sport=1, dport=2, flags="S", options=[("WScale", 15)]), dict(wscale=15)),
    ("max_sack", TCP(sport=1, dport=2, flags="A", options=[("SAck", tuple(range(1, 9)))]),
     dict(sack_blocks=((1, 2), (3, 4), (5, 6), (7, 8)))),
    ("no_options_urgent", TCP(sport=1, dport=2, seq=5, ack=6, flags="UA", urgptr=99, window=7), {}),
]


@pytest.mark.parametrize("name,tcp,options", GOLDEN, ids=[g[0] for g in GOLDEN])
@pytest.mark.parametrize("payload", [b"", b"data!"])
def test_parse_golden(name, tcp, options, payload):
    seg = scapy_segment(tcp, payload)
    ref = TCP(seg)
    hdr = TcpHeader.parse(memoryview(seg), PA, PB)
    expect = TcpHeader(ref.sport, ref.dport, ref.seq, ref.ack, int(ref.flags), ref.window, ref.chksum, ref.urgptr,
                       **options)
    assert hdr == expect
    assert hdr.header_len == ref.dataofs * 4
    assert seg[hdr.header_len :] == payload


def test_pseudo_header_is_checked():
    seg = scapy_segment(TCP(sport=1, dport=2, flags="S"))
    with pytest.raises(WireError) as e:
        TcpHeader.parse(seg, PA, PC)
    assert e.value.reason == "tcp.bad_checksum"
    assert TcpHeader.parse(seg, PA, PC, verify_checksum=False).dst_port == 2


# -- malformed ----------------------------------------------------------------

def _seg(options: bytes, payload: bytes = b"", offset_words: int | None = None) -> bytes:
    """A segment with a raw option list and a correct checksum."""
    words = offset_words if offset_words is not None else 5 + len(options) // 4
    head = struct.pack("!HHIIBBHHH", 1, 2, 3, 4, words << 4, ACK, 100, 0, 0) + options
    seg = bytearray(head + payload)
    from ustack.wire.checksum import internet_checksum, pseudo_header_sum

    csum = internet_checksum(bytes(seg), pseudo_header_sum(PA, PB, 6, len(seg)))
    seg[16:18] = csum.to_bytes(2, "big")
    return bytes(seg)


def _flip(data: bytes, at: int) -> bytes:
    b = bytearray(data)
    b[at] ^= 0x01
    return bytes(b)


MALFORMED = [
    ("tcp.bad_data_offset", _seg(b"", offset_words=4)),
    ("tcp.bad_data_offset", _seg(b"", offset_words=0)),
    ("tcp.bad_data_offset", _seg(b"", b"abc", offset_words=6)),  # header runs past the segment
    ("tcp.bad_checksum", _flip(_seg(b"", b"payload"), 25)),
    ("tcp.bad_checksum", _flip(_seg(b""), 16)),
    ("tcp.bad_checksum", _flip(_seg(b""), 0)),
    ("tcp.bad_options", _seg(b"\x02\x03\x05\x00")),  # MSS length 3
    ("tcp.bad_options", _seg(b"\x03\x04\x07\x00")),  # window scale length 4
    ("tcp.bad_options", _seg(b"\x04\x03\x00\x00")),  # SACK-permitted length 3
    ("tcp.bad_options", _seg(b"\x05\x09" + bytes(7) + b"\x00\x00\x00")),  # SACK length 9
    ("tcp.bad_options", _seg(b"\x05\x02\x00\x00")),  # SACK with no block
    ("tcp.bad_options", _seg(b"\x08\x09" + bytes(7) + b"\x00\x00\x00")),  # timestamps length 9
    ("tcp.bad_options", _seg(b"\x1e\x00\x00\x00")),  # length 0
    ("tcp.bad_options", _seg(b"\x1e\x01\x00\x00")),  # length 1
    ("tcp.bad_options", _seg(b"\x1e\x08\x00\x00")),  # runs past the header
    ("tcp.bad_options", _seg(b"\x01\x01\x01\x1e")),  # no length octet before the end
]


@pytest.mark.parametrize("reason,data", MALFORMED)
def test_malformed(reason, data):
    with pytest.raises(WireError) as e:
        TcpHeader.parse(data, PA, PB)
    assert e.value.reason == reason


@pytest.mark.parametrize("n", range(20))
def test_truncated_at_every_length(n):
    with pytest.raises(WireError) as e:
        TcpHeader.parse(_seg(b"")[:n], PA, PB)
    assert e.value.reason == "tcp.truncated"


def test_option_truncated_by_short_segment_is_bad_offset():
    seg = scapy_segment(TCP(sport=1, dport=2, flags="S", options=[("MSS", 1460), ("WScale", 2)]))
    with pytest.raises(WireError) as e:
        TcpHeader.parse(seg[:-2], PA, PB)
    assert e.value.reason == "tcp.bad_data_offset"


# -- fuzz ---------------------------------------------------------------------

def _parse_only_wire_errors(data: bytes, verify: bool) -> None:
    try:
        hdr = TcpHeader.parse(data, PA, PB, verify_checksum=verify)
    except WireError as e:
        assert e.reason.startswith("tcp.")
        return
    assert 20 <= hdr.header_len <= len(data)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=80), st.booleans())
def test_random_bytes_raise_only_wire_errors(data, verify):
    _parse_only_wire_errors(data, verify)


_BASE = [
    scapy_segment(tcp, b"payload bytes") for _, tcp, _ in GOLDEN
]


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(_BASE), st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=6),
       st.integers(0, 120), st.booleans())
def test_mutated_segments_raise_only_wire_errors(base, edits, cut, verify):
    data = bytearray(base)
    for at, value in edits:
        if at < len(data):
            data[at] = value
    _parse_only_wire_errors(bytes(data[: max(0, len(data) - cut)]), verify)


_u32 = st.integers(0, 0xFFFFFFFF)
_u16 = st.integers(0, 0xFFFF)


@st.composite
def headers(draw):
    # Either SYN-like options or ACK-like ones (timestamps + SACK): both fit in 40 bytes.
    ts = draw(st.none() | st.tuples(_u32, _u32))
    syn_like = draw(st.booleans())
    return TcpHeader(
        draw(_u16), draw(_u16), draw(_u32), draw(_u32), draw(st.integers(0, 255)), draw(_u16), 0, draw(_u16),
        mss=draw(st.none() | _u16) if syn_like else None,
        wscale=draw(st.none() | st.integers(0, 14)) if syn_like else None,
        sack_permitted=draw(st.booleans()) if syn_like else False,
        sack_blocks=() if syn_like else tuple(draw(st.lists(st.tuples(_u32, _u32), max_size=3 if ts else 4))),
        timestamps=ts,
    )


@settings(max_examples=300, deadline=None)
@given(headers(), st.binary(max_size=40))
def test_roundtrip(hdr, payload):
    seg = hdr.to_bytes(PA, PB, payload)
    back = TcpHeader.parse(seg, PA, PB)
    assert _fields(back) == {**_fields(hdr), "checksum": back.checksum}
    assert back.checksum == TCP(seg).chksum == scapy_checksum(seg)
    assert seg[back.header_len :] == payload
