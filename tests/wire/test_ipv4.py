"""IPv4 (RFC 791): golden headers with options from scapy, emit checked by scapy, malformed headers."""

from __future__ import annotations

import dataclasses
import struct

import pytest
from scapy.compat import raw
from scapy.layers.inet import (
    IP,
    UDP,
    IPOption_EOL,
    IPOption_LSRR,
    IPOption_NOP,
    IPOption_Router_Alert,
    IPOption_RR,
    IPOption_Timestamp,
)
from scapy.layers.l2 import Ether

from tests.wire.frames import IP_A, IP_B, fix_ipv4_checksum, golden_frames
from ustack.wire import WireError
from ustack.wire.ipv4 import (
    IPOPT_LSRR,
    IPOPT_NOP,
    IPOPT_RA,
    IPOPT_RR,
    IPOPT_TS,
    PROTO_UDP,
    TS_AND_ADDR,
    TS_ONLY,
    TS_PRESPEC,
    Ipv4Header,
    RecordRoute,
    Timestamp,
    bytes_to_ip,
    encode_options,
    ip_to_bytes,
    parse_options,
)

PA, PB = ip_to_bytes(IP_A), ip_to_bytes(IP_B)


def scapy_checksum(header: bytes) -> int:
    """The header checksum scapy computes for these header bytes."""
    pkt = IP(header)
    del pkt.chksum
    return IP(raw(pkt)).chksum


def test_address_helpers():
    assert ip_to_bytes("198.18.0.1") == b"\xc6\x12\x00\x01"
    assert bytes_to_ip(b"\xc6\x12\x00\x01") == "198.18.0.1"
    assert bytes_to_ip(bytearray(b"\x0a\0\0\x01")) == "10.0.0.1"


@pytest.mark.parametrize("view", [bytes, bytearray, memoryview])
def test_parse_golden_plain(view):
    pkt = IP(src=IP_A, dst=IP_B, tos=0xB9, id=0xBEEF, flags="DF", ttl=17, proto=17) / (b"p" * 11)
    data = raw(pkt)
    hdr = Ipv4Header.parse(view(data))
    assert hdr == Ipv4Header(
        dscp=46, ecn=1, total_length=31, ident=0xBEEF, flags_df=True, flags_mf=False,
        frag_offset=0, ttl=17, proto=PROTO_UDP, checksum=IP(data).chksum, src=PA, dst=PB, options=b"",
    )
    assert hdr.header_len == hdr.length == 20
    assert hdr.payload_len == 11
    assert bytes(hdr.payload(data)) == b"p" * 11
    assert not hdr.is_fragment
    assert hdr.parsed_options == []


def test_parse_golden_fragment():
    frame = golden_frames()["fragment"]
    hdr = Ipv4Header.parse(frame[14:])
    assert (hdr.flags_mf, hdr.flags_df, hdr.frag_offset) == (True, False, 185 * 8)
    assert hdr.is_fragment
    assert bytes(hdr.payload(frame[14:])) == b"f" * 16


def test_trailing_ethernet_padding_is_not_payload():
    frame = golden_frames()["udp_padded"]
    assert len(frame) == 60
    ip = frame[14:]
    hdr = Ipv4Header.parse(ip)
    assert hdr.total_length == 20 + 8 + 1
    assert len(hdr.payload(ip)) == 9
    assert bytes(ip[hdr.header_len : hdr.total_length]) == raw(UDP(bytes(ip[20:29])))


def test_parse_golden_options():
    frame = golden_frames()["udp_options"]
    ip = frame[14:]
    ref = IP(ip)
    hdr = Ipv4Header.parse(ip)
    assert hdr.header_len == ref.ihl * 4 == 52
    assert hdr.options == raw(ref)[20:52]
    assert hdr.checksum == ref.chksum
    items = hdr.parsed_options
    assert [t for t, _ in items] == [IPOPT_RR, IPOPT_NOP, IPOPT_TS, IPOPT_RA]
    rr = RecordRoute.decode(*items[0])
    assert rr.pointer == 8
    assert rr.slots == tuple(ip_to_bytes(a) for a in ("198.18.0.9", "0.0.0.0", "0.0.0.0"))
    assert rr.recorded == (ip_to_bytes("198.18.0.9"),)
    ts = Timestamp.decode(items[2][1])
    assert (ts.pointer, ts.overflow, ts.flag) == (13, 0, TS_AND_ADDR)
    assert ref.options[2].pointer == 13
    assert ts.entries == ((ip_to_bytes("198.18.0.9"), 123456),)
    assert ts.recorded == ts.entries
    assert items[3] == (IPOPT_RA, b"\0\0")  # unknown to the parser: kept raw
    # The UDP datagram starts after the options.
    udp = UDP(bytes(hdr.payload(ip)))
    assert (udp.sport, bytes(udp.payload)) == (5353, b"opts")


def test_parse_timestamp_only_and_eol_padding():
    pkt = IP(src=IP_A, dst=IP_B, options=[IPOption_Timestamp(flg=0, timestamp=99, pointer=9, length=12), IPOption_EOL()])
    data = raw(pkt)
    hdr = Ipv4Header.parse(data)
    items = hdr.parsed_options
    assert len(items) == 1  # EOL and the padding after it are not listed
    ts = Timestamp.decode(items[0][1])
    assert ts.flag == TS_ONLY
    assert ts.entries[0] == (None, 99)
    assert ts.recorded == ((None, 99),)


def test_parse_source_route_kept_with_route_layout():
    pkt = IP(src=IP_A, dst=IP_B, options=[IPOption_LSRR(routers=["198.18.5.5", "198.18.6.6"])])
    hdr = Ipv4Header.parse(raw(pkt))
    (kind, data), = hdr.parsed_options
    assert kind == IPOPT_LSRR
    lsrr = RecordRoute.decode(kind, data)
    assert lsrr.slots == (ip_to_bytes("198.18.5.5"), ip_to_bytes("198.18.6.6"))


EMIT_CASES = [
    Ipv4Header(total_length=20, proto=1, src=PA, dst=PB),
    Ipv4Header(dscp=46, ecn=3, total_length=1500, ident=0xFFFF, flags_df=True, ttl=255, proto=6, src=PA, dst=PB),
    Ipv4Header(total_length=576, ident=1, flags_mf=True, frag_offset=8 * 0x1FFF, ttl=1, proto=17, src=PB, dst=PA),
    Ipv4Header(total_length=40, proto=17, src=PA, dst=PB, options=encode_options([RecordRoute.empty(3)])),
    Ipv4Header(total_length=60, proto=17, src=PA, dst=PB, options=encode_options([
        (IPOPT_NOP, b""), Timestamp(pointer=5, flag=TS_PRESPEC, entries=((PB, 0), (PA, 0))),
    ])),
    Ipv4Header(total_length=28, proto=17, src=PA, dst=PB, options=bytes((IPOPT_RA, 4, 0, 0))),
]


@pytest.mark.parametrize("hdr", EMIT_CASES)
def test_emit_dissected_by_scapy(hdr):
    buf = bytearray(b"\xaa" * 100)
    n = hdr.emit(memoryview(buf), 5)
    assert n == hdr.header_len
    assert buf[:5] == b"\xaa" * 5 and buf[5 + n :] == b"\xaa" * (95 - n)
    header = bytes(buf[5 : 5 + n])
    pkt = IP(header)
    assert (pkt.version, pkt.ihl, pkt.tos, pkt.len, pkt.id) == (4, n // 4, hdr.dscp << 2 | hdr.ecn, hdr.total_length, hdr.ident)
    assert pkt.flags.DF == hdr.flags_df and pkt.flags.MF == hdr.flags_mf and not pkt.flags.evil
    assert (pkt.frag * 8, pkt.ttl, pkt.proto) == (hdr.frag_offset, hdr.ttl, hdr.proto)
    assert (pkt.src, pkt.dst) == (bytes_to_ip(hdr.src), bytes_to_ip(hdr.dst))
    assert pkt.chksum == scapy_checksum(header)
    assert header[20:] == hdr.options
    # And back through our parser (the header alone: partial datagram).
    assert Ipv4Header.parse(header, partial=True) == dataclasses.replace(hdr, checksum=pkt.chksum)


def test_emit_options_dissected_by_scapy():
    opts = encode_options([RecordRoute.empty(2), (IPOPT_NOP, b""), Timestamp(flag=TS_ONLY, entries=((None, 0),) * 2)])
    hdr = Ipv4Header(total_length=20 + len(opts), proto=17, src=PA, dst=PB, options=opts)
    buf = bytearray(hdr.header_len)
    hdr.emit(buf)
    pkt = IP(bytes(buf))
    rr, nop, ts = pkt.options[:3]
    assert isinstance(rr, IPOption_RR) and (rr.length, rr.pointer, rr.routers) == (11, 4, ["0.0.0.0", "0.0.0.0"])
    assert isinstance(nop, IPOption_NOP)
    assert isinstance(ts, IPOption_Timestamp) and (ts.length, ts.pointer, ts.flg) == (12, 5, 0)


def test_emit_pads_options_with_eol():
    hdr = Ipv4Header(total_length=24, proto=17, src=PA, dst=PB, options=bytes((IPOPT_NOP, IPOPT_NOP, IPOPT_NOP)))
    assert hdr.header_len == 24
    buf = bytearray(b"\xff" * 24)
    assert hdr.emit(buf) == 24
    assert buf[20:24] == b"\x01\x01\x01\x00"
    assert IP(bytes(buf)).chksum == scapy_checksum(bytes(buf))


def test_encode_options_matches_scapy():
    ours = encode_options([RecordRoute(IPOPT_RR, 8, (PA, b"\0" * 4)), (IPOPT_NOP, b""), (IPOPT_RA, b"\0\0")])
    theirs = raw(IP(options=[IPOption_RR(routers=[IP_A, "0.0.0.0"], pointer=8), IPOption_NOP(), IPOption_Router_Alert()]))[20:]
    assert ours == theirs
    assert parse_options(ours) == [(IPOPT_RR, b"\x08" + PA + b"\0" * 4), (IPOPT_NOP, b""), (IPOPT_RA, b"\0\0")]
    with pytest.raises(ValueError):
        encode_options([RecordRoute.empty(10)])  # 43 bytes > 40


def test_emit_refuses_bad_values():
    hdr = Ipv4Header(total_length=20, proto=17, src=PA, dst=PB)
    with pytest.raises(ValueError):
        hdr.emit(bytearray(19))
    for bad in (
        dataclasses.replace(hdr, frag_offset=12),
        dataclasses.replace(hdr, frag_offset=65536),
        dataclasses.replace(hdr, options=b"\x01" * 41),
        dataclasses.replace(hdr, src=b"\0" * 3),
        dataclasses.replace(hdr, dscp=64),
    ):
        with pytest.raises(ValueError):
            bad.emit(bytearray(64))


def _header(ver=4, ihl=5, total=None, options=b"", extra=b"", fix=True) -> bytes:
    """A crafted header with a correct checksum (unless fix=False) followed by ``extra``."""
    body = bytearray(struct.pack("!BBHHHBBH4s4s", (ver << 4) | ihl, 0, 0, 1, 0, 64, 17, 0, PA, PB)) + options
    length = len(body) + len(extra) if total is None else total
    body[2:4] = struct.pack("!H", length)
    if fix:
        fix_ipv4_checksum(body) if (ihl * 4) <= len(body) else None
    return bytes(body) + extra


def _flip_checksum(data: bytes) -> bytes:
    b = bytearray(data)
    b[10] ^= 0x01
    return bytes(b)


MALFORMED = [
    ("ipv4.truncated", b""),
    ("ipv4.truncated", _header()[:19]),
    ("ipv4.bad_version", _header(ver=6)),
    ("ipv4.bad_version", _header(ver=0)),
    ("ipv4.bad_ihl", _header(ihl=4)),
    ("ipv4.bad_ihl", _header(ihl=0)),
    ("ipv4.bad_ihl", _header(ihl=6)),  # options word beyond the 20-byte buffer
    ("ipv4.bad_ihl", _header(ihl=15, options=b"\x01" * 36)),  # 56 of 60 bytes present
    ("ipv4.bad_total_length", _header(total=19)),
    ("ipv4.bad_total_length", _header(ihl=6, options=b"\x01" * 4, total=22)),  # shorter than IHL*4
    ("ipv4.bad_total_length", _header(total=29, extra=b"\0" * 8)),  # beyond the frame
    ("ipv4.bad_total_length", _header(total=0xFFFF)),
    ("ipv4.bad_checksum", _flip_checksum(_header(extra=b"data"))),
    ("ipv4.bad_checksum", _header(fix=False, extra=b"data")),
    ("ipv4.bad_options", _header(ihl=6, options=bytes((IPOPT_RA, 1, 0, 0)))),  # length < 2
    ("ipv4.bad_options", _header(ihl=6, options=bytes((IPOPT_RA, 0, 0, 0)))),  # length 0
    ("ipv4.bad_options", _header(ihl=6, options=bytes((IPOPT_RA, 5, 0, 0)))),  # runs past the header
    ("ipv4.bad_options", _header(ihl=6, options=bytes((IPOPT_NOP, IPOPT_NOP, IPOPT_NOP, IPOPT_RA)))),  # no length octet
    ("ipv4.bad_options", _header(ihl=7, options=bytes((IPOPT_RR, 7, 3)) + PA + b"\0")),  # RR pointer < 4
    ("ipv4.bad_options", _header(ihl=7, options=bytes((IPOPT_RR, 6, 4, 1, 2, 3, 0, 0)))),  # RR partial slot
    ("ipv4.bad_options", _header(ihl=7, options=bytes((IPOPT_RR, 2, 0, 0, 0, 0, 0, 0)))),  # RR without pointer
    ("ipv4.bad_options", _header(ihl=7, options=bytes((IPOPT_TS, 8, 5, 2, 0, 0, 0, 0)))),  # TS flag 2 undefined
    ("ipv4.bad_options", _header(ihl=7, options=bytes((IPOPT_TS, 8, 5, 1, 0, 0, 0, 0)))),  # TS addr+ts needs 8-byte slots
    ("ipv4.bad_options", _header(ihl=7, options=bytes((IPOPT_TS, 8, 4, 0, 0, 0, 0, 0)))),  # TS pointer < 5
    ("ipv4.bad_options", _header(ihl=7, options=bytes((IPOPT_TS, 3, 5, 0, 0, 0, 0, 0)))),  # TS without flag octet
    ("ipv4.bad_options", _header(ihl=7, options=bytes((IPOPT_RR, 7, 5)) + PA + b"\0")),  # RR pointer splits a slot
    # TS pointer 9 in a one-entry address+timestamp option (scapy's default) splits the slot.
    ("ipv4.bad_options", _header(ihl=8, options=bytes((IPOPT_TS, 12, 9, 1)) + bytes(8))),
]


@pytest.mark.parametrize("reason,data", MALFORMED, ids=[f"{i}-{r}" for i, (r, _) in enumerate(MALFORMED)])
def test_malformed(reason, data):
    with pytest.raises(WireError) as e:
        Ipv4Header.parse(data)
    assert e.value.reason == reason


@pytest.mark.parametrize("n", range(20))
def test_truncated_at_every_length(n):
    data = golden_frames()["udp_options"][14:]
    with pytest.raises(WireError) as e:
        Ipv4Header.parse(data[:n])
    assert e.value.reason == "ipv4.truncated"


@pytest.mark.parametrize("n", range(20, 52))
def test_cut_inside_options_is_bad_ihl(n):
    data = golden_frames()["udp_options"][14:]
    with pytest.raises(WireError) as e:
        Ipv4Header.parse(data[:n])
    assert e.value.reason == "ipv4.bad_ihl"


def test_cut_inside_payload_is_bad_total_length_unless_partial():
    data = golden_frames()["udp"][14:]
    with pytest.raises(WireError) as e:
        Ipv4Header.parse(data[:-1])
    assert e.value.reason == "ipv4.bad_total_length"
    hdr = Ipv4Header.parse(data[:28], partial=True)  # as quoted in an ICMP error
    assert hdr.total_length == len(data)


def test_verify_checksum_false_skips_only_the_checksum():
    data = _flip_checksum(_header(extra=b"data"))
    hdr = Ipv4Header.parse(data, verify_checksum=False)
    assert hdr.checksum == struct.unpack("!H", data[10:12])[0]
    with pytest.raises(WireError) as e:
        Ipv4Header.parse(_header(ihl=6, options=bytes((IPOPT_RA, 1, 0, 0)), fix=False), verify_checksum=False)
    assert e.value.reason == "ipv4.bad_options"


def test_full_frame_from_our_emitters_dissected_by_scapy():
    from ustack.wire.ethernet import ETHERTYPE_IPV4, EthernetHeader, mac_to_bytes

    payload = b"payload!"
    ip = Ipv4Header(total_length=20 + len(payload), ident=3, ttl=64, proto=253, src=PA, dst=PB)
    buf = bytearray(14 + ip.total_length)
    off = EthernetHeader(mac_to_bytes("02:00:00:00:00:02"), mac_to_bytes("02:00:00:00:00:01"), ETHERTYPE_IPV4).emit(buf)
    off += ip.emit(buf, off)
    buf[off:] = payload
    pkt = Ether(bytes(buf))
    assert pkt[IP].proto == 253 and bytes(pkt[IP].payload) == payload
    assert pkt[IP].chksum == scapy_checksum(bytes(buf[14:34]))


def test_full_route_and_timestamp_are_accepted():
    # A pointer just past the option means "full" (RFC 791), not an error.
    opts = bytes((IPOPT_RR, 7, 8)) + PA + bytes((IPOPT_TS, 12, 13, 0x11)) + PB + bytes(4) + b"\0"
    hdr = Ipv4Header.parse(_header(ihl=5 + len(opts) // 4, options=opts))
    (rr_kind, rr_data), (ts_kind, ts_data) = hdr.parsed_options
    assert RecordRoute.decode(rr_kind, rr_data).recorded == (PA,)
    ts = Timestamp.decode(ts_data)
    assert (ts.overflow, ts.flag, ts.recorded) == (1, TS_AND_ADDR, ((PB, 0),))
