"""ustack.api.dns_message: replies are untrusted input; anything malformed is FormatError, nothing else escapes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ustack.api import dns_message as dm

from .dns_server import AAAA, CNAME, reply
from .dns_server import A as TYPE_A

QUESTION = b"\x03www\x04test\x00\x00\x01\x00\x01"


def header(qid=7, flags=0x8180, qd=1, an=0):
    return struct.pack("!HHHHHH", qid, flags, qd, an, 0, 0)


def test_query_is_the_rfc_1035_layout():
    assert dm.query(0x1234, "www.Test.", dm.TYPE_AAAA) == (b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
                                                           b"\x03www\x04Test\x00\x00\x1c\x00\x01")
    with pytest.raises(ValueError):
        dm.query(1, "a..b", dm.TYPE_A)
    with pytest.raises(ValueError):
        dm.query(1, "x" * 64 + ".test", dm.TYPE_A)
    with pytest.raises(ValueError):
        dm.query(1, ".".join(["abcdefghi"] * 26), dm.TYPE_A)  # 260 octets


def test_compressed_names_and_a_cname_chain_parse():
    # answer owners point at the question (offset 12), the CNAME target at a later name
    body = (b"\xc0\x0c" + struct.pack("!HHIH", CNAME, 1, 60, 6) + b"\x03mid\xc0\x10"
            + b"\xc0\x26" + struct.pack("!HHIH", TYPE_A, 1, 30, 4) + bytes([198, 18, 0, 5])
            + b"\xc0\x26" + struct.pack("!HHIH", AAAA, 1, 90, 16) + bytes(15) + b"\x01")
    r = dm.parse_reply(header(an=3) + QUESTION + body)
    assert (r.qid, r.qname, r.qtype, r.rcode, r.truncated) == (7, "www.test", TYPE_A, 0, False)
    assert r.answers[0] == ("www.test", CNAME, 1, 60, "mid.test")
    assert dm.addresses(r, "www.test", TYPE_A) == ("mid.test", [bytes([198, 18, 0, 5])], 30)
    assert dm.addresses(r, "www.test", AAAA) == ("mid.test", [bytes(15) + b"\x01"], 60)
    assert dm.addresses(r, "other.test", TYPE_A) == ("other.test", [], 0)


@pytest.mark.parametrize("data, reason", [
    (b"", "shorter than a DNS header"),
    (header()[:11], "shorter than a DNS header"),
    (header(flags=0x0100) + QUESTION, "not a response"),
    (header(qd=2) + QUESTION, "question count"),
    (header(qd=0), "question count"),
    (header() + b"\x03ww", "label runs past"),
    (header() + b"\x03www", "name runs past"),
    (header() + QUESTION[:-1], "question cut short"),
    (header() + b"\xc0\x0c\x00\x01\x00\x01", "pointer loops"),  # points at itself
    (header() + b"\xc0\x0e\x00\x01\x00\x01\x00", "pointer loops"),  # forward
    (header() + b"\xc0", "pointer cut short"),
    (header() + b"\x41abc\x00\x00\x01\x00\x01", "unknown label type"),
    (header() + b"\x81abc\x00\x00\x01\x00\x01", "unknown label type"),
    (header() + b"\x3f" + b"a" * 63 + b"\x3f" + b"a" * 63 + b"\x3f" + b"a" * 63 + b"\x3f" + b"a" * 63 + b"\x00"
     + b"\x00\x01\x00\x01", "longer than 255"),
    (header(an=1) + QUESTION, "name runs past"),  # a count larger than the message
    (header(an=1) + QUESTION + b"\xc0\x0c\x00\x01\x00\x01", "record cut short"),
    (header(an=1) + QUESTION + b"\xc0\x0c" + struct.pack("!HHIH", TYPE_A, 1, 5, 4) + b"\x01\x02", "runs past"),
    (header(an=1) + QUESTION + b"\xc0\x0c" + struct.pack("!HHIH", TYPE_A, 1, 5, 5) + b"\x01" * 5, "5 octets"),
    (header(an=1) + QUESTION + b"\xc0\x0c" + struct.pack("!HHIH", AAAA, 1, 5, 4) + b"\x01" * 4, "4 octets"),
    (header(an=1) + QUESTION + b"\xc0\x0c" + struct.pack("!HHIH", CNAME, 1, 5, 4) + b"\xc0\x0c\x00\x00",
     "does not match"),
])
def test_malformed_replies_are_format_errors_with_the_reason(data, reason):
    with pytest.raises(dm.FormatError, match=reason):
        dm.parse_reply(data)


def test_a_chain_of_pointers_is_bounded():
    # 40 pointers each pointing to the previous one (all backwards, so no loop): more than MAX_POINTERS
    msg = bytearray(header() + b"\x00")  # the root name at 12
    for i in range(40):
        msg += struct.pack("!H", 0xC000 | (12 if i == 0 else len(msg) - 2))
    data = bytes(msg)
    assert dm.read_name(data, len(data) - 2 * 32) == ("", len(data) - 62)  # 32 pointers: still read
    with pytest.raises(dm.FormatError, match="pointer"):
        dm.read_name(data, len(data) - 2)


def test_cname_loops_in_the_answer_end_as_a_format_error():
    records = [("a.test", CNAME, 5, "b.test"), ("b.test", CNAME, 5, "a.test")]
    r = dm.parse_reply(reply(1, QUESTION.replace(b"\x03www", b"\x01a"), records))
    with pytest.raises(dm.FormatError, match="CNAME chain"):
        dm.addresses(r, "a.test", TYPE_A)


def test_a_truncated_reply_reads_only_header_and_question():
    r = dm.parse_reply(header(flags=0x8380, an=5) + QUESTION + b"\x00garbage")
    assert r.truncated and r.answers == []


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=120))
def test_any_bytes_parse_or_are_a_format_error(data):
    try:
        r = dm.parse_reply(header(an=2) + data)
        dm.addresses(r, r.qname, TYPE_A)
    except dm.FormatError:
        pass


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 80), st.integers(0, 255))
def test_any_single_byte_change_of_a_good_reply_parses_or_is_a_format_error(index, value):
    good = bytearray(reply(3, QUESTION, [("www.test", CNAME, 5, "x.test"), ("x.test", TYPE_A, 9, "198.18.0.1")]))
    good[index % len(good)] = value
    try:
        r = dm.parse_reply(bytes(good))
        dm.addresses(r, "www.test", TYPE_A)
    except dm.FormatError:
        pass
