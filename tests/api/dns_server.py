"""A tiny scripted DNS server for the resolver's tests: a UDP socket (ustack's or the kernel's) in a thread.

Replies are built here byte by byte (not with ustack.api.dns_message) so the
resolver's parser is checked against an independent writer. ``zone`` maps a
lower-case name to records ``(type, ttl, value)`` (value: an address string
for A/AAAA, a name for CNAME); ``script`` (qname -> callable(query bytes,
qid, qname, qtype) -> list of datagrams) overrides the zone for hostile
answers. Every query is recorded as ``(source address, source port, qid,
qname, qtype)``.
"""

from __future__ import annotations

import socket
import struct
import threading

A, CNAME, PTR, AAAA = 1, 5, 12, 28


def name_bytes(name: str) -> bytes:
    out = b""
    for label in name.rstrip(".").split("."):
        if label:
            out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def parse_query(data: bytes):
    qid, = struct.unpack_from("!H", data)
    pos, labels = 12, []
    while data[pos]:
        labels.append(data[pos + 1:pos + 1 + data[pos]].decode())
        pos += 1 + data[pos]
    qtype, = struct.unpack_from("!H", data, pos + 1)
    return qid, ".".join(labels).lower(), qtype, data[12:pos + 5]


def reply(qid: int, question: bytes, records=(), rcode=0, flags=0x8180, ancount=None) -> bytes:
    """A response: header, the question as asked, and ``records`` [(owner, type, ttl, value)]."""
    body = b""
    for owner, rtype, ttl, value in records:
        if rtype == A:
            rdata = socket.inet_pton(socket.AF_INET, value)
        elif rtype == AAAA:
            rdata = socket.inet_pton(socket.AF_INET6, value)
        else:
            rdata = name_bytes(value)
        body += name_bytes(owner) + struct.pack("!HHIH", rtype, 1, ttl, len(rdata)) + rdata
    count = len(records) if ancount is None else ancount
    return struct.pack("!HHHHHH", qid, flags | rcode, 1, count, 0, 0) + question + body


class DnsServer:
    """Answers queries on ``sock`` (bound) from ``zone``/``script`` until closed."""

    def __init__(self, sock, zone=None, script=None):
        self.sock, self.zone, self.script = sock, dict(zone or {}), dict(script or {})
        self.queries: list = []
        self._stop = False
        sock.settimeout(0.1)
        self._thread = threading.Thread(target=self._serve, name="test-dns", daemon=True)
        self._thread.start()

    def answer(self, data: bytes):
        qid, qname, qtype, question = parse_query(data)
        if qname in self.script:
            return self.script[qname](data, qid, qname, qtype)
        if qname not in self.zone:
            return [reply(qid, question, rcode=3)]
        records, name = [], qname
        for _ in range(8):  # the CNAME chain, then the records of the type asked for
            entries = self.zone.get(name, [])
            alias = [e for e in entries if e[0] == CNAME]
            if alias and qtype != CNAME:
                records.append((name, CNAME, alias[0][1], alias[0][2]))
                name = alias[0][2]
                continue
            records += [(name, t, ttl, v) for t, ttl, v in entries if t == qtype]
            break
        return [reply(qid, question, records)]

    def _serve(self) -> None:
        while not self._stop:
            try:
                data, src = self.sock.recvfrom(2048)
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            qid, qname, qtype, _ = parse_query(data)
            self.queries.append((src[0], src[1], qid, qname, qtype))
            for datagram in self.answer(data):
                self.sock.sendto(datagram, src)

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        self.sock.close()
