"""DNS messages (RFC 1035 section 4): a query written, a reply parsed as untrusted input.

``query(qid, name, qtype)`` builds a standard query (RD set, one question,
class IN). ``parse_reply(data)`` reads a reply into a ``Reply`` (id, flags,
rcode, the question, the answer section's A/AAAA/CNAME/PTR records); every
length and count is checked against the message before a field is read,
names follow compression pointers (RFC 1035 4.1.4) only strictly backwards
and at most ``MAX_POINTERS`` times, a name is at most 255 octets (RFC 1035
2.3.4). Anything malformed raises ``FormatError`` (a ValueError) with the
reason; nothing else escapes the parser (PTR data, RFC 1035 3.3.12, is a
name as CNAME's is). ``addresses(reply, qname, qtype)``
follows the CNAME chain from ``qname`` within the answer section (RFC 1034
3.6.2) and returns the addresses of its end with the smallest TTL seen.
"""

from __future__ import annotations

import struct

TYPE_A, TYPE_CNAME, TYPE_PTR, TYPE_AAAA = 1, 5, 12, 28
CLASS_IN = 1
RCODE_NOERROR, RCODE_FORMERR, RCODE_SERVFAIL, RCODE_NXDOMAIN, RCODE_NOTIMP, RCODE_REFUSED = 0, 1, 2, 3, 4, 5
FLAG_QR, FLAG_TC, FLAG_RD = 0x8000, 0x0200, 0x0100
OPCODE_MASK = 0x7800
HEADER_LEN = 12
MAX_NAME = 255  # octets on the wire, RFC 1035 2.3.4
MAX_LABEL = 63
MAX_POINTERS = 32  # compression pointers followed in one name
MAX_CNAME_CHAIN = 16
MAX_RECORDS = 256  # answer records read from one reply (a UDP reply of 512+ octets holds far fewer)

_HEADER = struct.Struct("!HHHHHH")
_RR_FIXED = struct.Struct("!HHIH")  # type, class, ttl, rdlength


class FormatError(ValueError):
    """A reply that is not a well-formed DNS message (the reason is the message)."""


class Reply:
    """A parsed reply: header fields, the (only) question, and the answer section's records."""

    __slots__ = ("qid", "flags", "rcode", "qname", "qtype", "qclass", "answers")

    def __init__(self, qid, flags, qname, qtype, qclass, answers):
        self.qid, self.flags, self.rcode = qid, flags, flags & 0xF
        self.qname, self.qtype, self.qclass = qname, qtype, qclass
        self.answers = answers  # [(owner, type, class, ttl, rdata: bytes for A/AAAA, a name for CNAME)]

    @property
    def truncated(self) -> bool:
        """``True`` when the TC bit is set (the reply did not fit a UDP datagram)."""
        return bool(self.flags & FLAG_TC)


def encode_name(name: str) -> bytes:
    """``name`` (dotted, a trailing dot optional) in wire form; ValueError for an empty label or too long."""
    name = name.rstrip(".") if name != "." else ""
    out = bytearray()
    if name:
        for label in name.split("."):
            raw = label.encode("idna") if not label.isascii() else label.encode("ascii")
            if not raw or len(raw) > MAX_LABEL:
                raise ValueError(f"bad label in name {name!r}")
            out.append(len(raw))
            out += raw
    out.append(0)
    if len(out) > MAX_NAME:
        raise ValueError(f"name too long: {name!r}")
    return bytes(out)


def query(qid: int, name: str, qtype: int) -> bytes:
    """A standard query for ``name``/``qtype``/IN with recursion desired (RFC 1035 4.1.1, 4.1.2)."""
    return _HEADER.pack(qid, FLAG_RD, 1, 0, 0, 0) + encode_name(name) + struct.pack("!HH", qtype, CLASS_IN)


def read_name(data: bytes, pos: int) -> tuple[str, int]:
    """The name at ``pos`` (lower case, no trailing dot) and the offset just past it in the message."""
    labels: list[str] = []
    end = None  # where the name ends in the message (after the first pointer)
    total = 0
    jumps = 0
    n = len(data)
    while True:
        if pos >= n:
            raise FormatError("name runs past the end of the message")
        length = data[pos]
        kind = length & 0xC0
        if kind == 0xC0:
            if pos + 1 >= n:
                raise FormatError("compression pointer cut short")
            target = ((length & 0x3F) << 8) | data[pos + 1]
            if end is None:
                end = pos + 2
            jumps += 1
            if target >= pos or jumps > MAX_POINTERS:  # only backwards: no loop can form
                raise FormatError("compression pointer loops or points forward")
            pos = target
            continue
        if kind:
            raise FormatError(f"unknown label type 0x{kind:02x}")  # RFC 6891 removed 0x40; 0x80 reserved
        pos += 1
        total += length + 1
        if total > MAX_NAME:
            raise FormatError("name longer than 255 octets")
        if length == 0:
            break
        if pos + length > n:
            raise FormatError("label runs past the end of the message")
        labels.append(data[pos:pos + length].decode("latin-1").lower())
        pos += length
    return ".".join(labels), (end if end is not None else pos)


def parse_reply(data: bytes) -> Reply:
    """``data`` as a reply to a one-question query; FormatError when malformed."""
    if len(data) < HEADER_LEN:
        raise FormatError("shorter than a DNS header")
    qid, flags, qdcount, ancount, _nscount, _arcount = _HEADER.unpack_from(data)
    if not flags & FLAG_QR:
        raise FormatError("not a response (QR clear)")
    if qdcount != 1:
        raise FormatError(f"question count {qdcount}, not 1")
    qname, pos = read_name(data, HEADER_LEN)
    if pos + 4 > len(data):
        raise FormatError("question cut short")
    qtype, qclass = struct.unpack_from("!HH", data, pos)
    pos += 4
    answers = []
    if flags & FLAG_TC:  # a truncated reply's sections may be cut anywhere: only the header and question count
        return Reply(qid, flags, qname, qtype, qclass, answers)
    for _ in range(min(ancount, MAX_RECORDS)):
        owner, pos = read_name(data, pos)
        if pos + _RR_FIXED.size > len(data):
            raise FormatError("resource record cut short")
        rtype, rclass, ttl, rdlength = _RR_FIXED.unpack_from(data, pos)
        pos += _RR_FIXED.size
        if pos + rdlength > len(data):
            raise FormatError("record data runs past the end of the message")
        if rtype == TYPE_A and rdlength != 4 or rtype == TYPE_AAAA and rdlength != 16:
            raise FormatError(f"address record of type {rtype} with {rdlength} octets")
        if rtype in (TYPE_CNAME, TYPE_PTR):
            target, after = read_name(data, pos)
            if after != pos + rdlength:
                raise FormatError("CNAME/PTR data length does not match its name")
            rdata = target
        else:
            rdata = bytes(data[pos:pos + rdlength])
        pos += rdlength
        answers.append((owner, rtype, rclass, ttl & 0x7FFFFFFF, rdata))  # RFC 2181 8: top bit set means 0
    if ancount > MAX_RECORDS:
        raise FormatError(f"{ancount} answer records")
    return Reply(qid, flags, qname, qtype, qclass, answers)


def addresses(reply: Reply, qname: str, qtype: int) -> tuple[str, list[bytes], int]:
    """(canonical name, addresses of ``qtype``, smallest TTL) following CNAMEs from ``qname`` in the answers."""
    name = qname.rstrip(".").lower()
    ttl = None
    for _ in range(MAX_CNAME_CHAIN + 1):
        found = [(t, rd) for owner, rtype, rclass, t, rd in reply.answers
                 if owner == name and rclass == CLASS_IN and rtype == qtype]
        if found:
            ttl = min([t for t, _ in found] + ([ttl] if ttl is not None else []))
            return name, [rd for _, rd in found], ttl
        alias = [(t, rd) for owner, rtype, rclass, t, rd in reply.answers
                 if owner == name and rclass == CLASS_IN and rtype == TYPE_CNAME]
        if not alias:
            return name, [], ttl if ttl is not None else 0
        t, name = alias[0]
        ttl = t if ttl is None else min(ttl, t)
    raise FormatError("CNAME chain too long")
