"""The classify record checked against the pure-Python wire/ parsers, field by field.

``reference(frame)`` classifies a frame with ``ustack.wire`` (Ethernet, IPv4,
then UDP / TCP / ICMP) and returns the fields the fast path's ``Packet``
must carry for that kind, by name, or ``{"kind": K_DROP, "reason": ...}``.
``fields(rec)`` reads the same names from a ``Packet``. ``agree(frame)``
asserts the two are equal and that every field not applying to the kind
holds its blank value.

``agree`` classifies a copy of the frame that ends where an inaccessible page
begins (``guarded``): bounds checks are off in the fast path, and a read of
even one octet past the frame is a crash, not a silent pass.
"""

from __future__ import annotations

import ctypes
import mmap

from ustack import _fastpath as fp
from ustack.wire import WireError
from ustack.wire.ethernet import EthernetHeader
from ustack.wire.icmp import IcmpMessage
from ustack.wire.icmpv6 import Icmpv6Message
from ustack.wire.ipv4 import Ipv4Header
from ustack.wire.ipv6 import Ipv6Header
from ustack.wire.tcp import TcpHeader
from ustack.wire.udp import UdpHeader

MAC = bytes.fromhex("020000000001")

IP_FIELDS = ("l3", "ihl", "total_len", "proto", "ttl", "src", "dst", "l4", "payload_off", "payload_len")
PORT_FIELDS = ("src_port", "dst_port")
ICMP_FIELDS = ("icmp_type", "icmp_code")
# Everything TcpHeader has, under the same names.
TCP_FIELDS = ("src_port", "dst_port", "seq", "ack", "flags", "window", "checksum", "urgent", "header_len", "mss",
              "wscale", "sack_permitted", "sack_blocks", "timestamps", "unknown_options")

BLANK = {
    "reason": 0, "l3": 0, "ihl": 0, "total_len": 0, "proto": 0, "ttl": 0, "src": b"", "dst": b"", "l4": 0,
    "payload_off": 0, "payload_len": 0, "src_port": 0, "dst_port": 0, "icmp_type": 0, "icmp_code": 0,
    "seq": 0, "ack": 0, "flags": 0, "window": 0, "checksum": 0, "urgent": 0, "header_len": 0, "mss": None,
    "wscale": None, "sack_permitted": False, "sack_blocks": (), "timestamps": None, "unknown_options": (),
}

FIELDS_OF_KIND = {
    fp.K_DROP: ("reason",),
    fp.K_ARP: ("l3",),
    fp.K_FRAG: IP_FIELDS,
    fp.K_IP_OTHER: IP_FIELDS,
    fp.K_UDP: IP_FIELDS + PORT_FIELDS,
    fp.K_ICMP: IP_FIELDS + ICMP_FIELDS,
    fp.K_TCP: IP_FIELDS + TCP_FIELDS,
    fp.K_IP6: IP_FIELDS,
    fp.K_UDP6: IP_FIELDS + PORT_FIELDS,
    fp.K_ICMP6: IP_FIELDS + ICMP_FIELDS,
    fp.K_TCP6: IP_FIELDS + TCP_FIELDS,
}


class _GuardPage:
    """Anonymous memory whose last page is PROT_NONE; frames are copied to end at its start."""

    def __init__(self, data_pages: int = 16):
        self.page = mmap.PAGESIZE
        self.size = data_pages * self.page
        self.mm = mmap.mmap(-1, self.size + self.page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self.view = memoryview(self.mm)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        if libc.mprotect(ctypes.c_void_p(addr + self.size), self.page, 0) != 0:  # PROT_NONE
            raise OSError(ctypes.get_errno(), "mprotect")

    def __call__(self, frame: bytes) -> memoryview:
        if len(frame) > self.size:
            raise ValueError("frame larger than the guarded area")
        start = self.size - len(frame)
        self.view[start : self.size] = frame
        return self.view[start : self.size]


guarded = _GuardPage()


def reference(frame: bytes, mac=MAC, verify_l4: bool = True) -> dict:
    """What classify must say about ``frame``, from the wire/ Repr parsers."""
    try:
        eth = EthernetHeader.parse(frame)
        if mac is not None and not (eth.dst[0] & 1) and eth.dst != mac:
            return {"kind": fp.K_DROP, "reason": "eth.not_for_us"}
        l3 = eth.header_len
        if eth.ethertype == 0x0806:
            return {"kind": fp.K_ARP, "l3": l3}
        if eth.ethertype == 0x86DD:
            return _reference6(frame, l3, verify_l4)
        if eth.ethertype != 0x0800:
            return {"kind": fp.K_DROP, "reason": "eth.unknown_ethertype"}
        ip = Ipv4Header.parse(frame[l3:])
        l4 = l3 + ip.header_len
        body = frame[l4 : l3 + ip.total_length]
        out = {"l3": l3, "ihl": ip.header_len, "total_len": ip.total_length, "proto": ip.proto, "ttl": ip.ttl,
               "src": ip.src, "dst": ip.dst, "l4": l4, "payload_off": l4, "payload_len": len(body)}
        if ip.is_fragment:
            return {"kind": fp.K_FRAG, **out}
        if ip.proto == 17:
            u = UdpHeader.parse(body, ip.src, ip.dst, verify_checksum=verify_l4)
            return {**out, "kind": fp.K_UDP, "src_port": u.src_port, "dst_port": u.dst_port,
                    "payload_off": l4 + 8, "payload_len": u.length - 8}
        if ip.proto == 6:
            t = TcpHeader.parse(body, ip.src, ip.dst, verify_checksum=verify_l4)
            return {**out, "kind": fp.K_TCP, **{name: getattr(t, name) for name in TCP_FIELDS},
                    "payload_off": l4 + t.header_len, "payload_len": len(body) - t.header_len}
        if ip.proto == 1:
            m = IcmpMessage.parse(body)
            return {**out, "kind": fp.K_ICMP, "icmp_type": m.type, "icmp_code": m.code,
                    "payload_off": l4 + 8, "payload_len": len(body) - 8}
        return {"kind": fp.K_IP_OTHER, **out}
    except WireError as e:
        return {"kind": fp.K_DROP, "reason": e.reason}


def _reference6(frame: bytes, l3: int, verify_l4: bool) -> dict:
    """IPv6: UDP, TCP, ICMPv6 right after the fixed header; anything else is K_IP6 (may raise WireError)."""
    ip = Ipv6Header.parse(frame[l3:])
    l4 = l3 + 40
    body = frame[l4 : l4 + ip.payload_len]
    out = {"l3": l3, "ihl": 40, "total_len": 40 + ip.payload_len, "proto": ip.next_header, "ttl": ip.hop_limit,
           "src": ip.src, "dst": ip.dst, "l4": l4, "payload_off": l4, "payload_len": len(body)}
    if ip.next_header == 17:
        u = UdpHeader.parse(body, ip.src, ip.dst, verify_checksum=False)
        if u.checksum == 0:
            raise WireError("udp.zero_checksum")
        UdpHeader.parse(body, ip.src, ip.dst, verify_checksum=verify_l4)
        return {**out, "kind": fp.K_UDP6, "src_port": u.src_port, "dst_port": u.dst_port,
                "payload_off": l4 + 8, "payload_len": u.length - 8}
    if ip.next_header == 6:
        t = TcpHeader.parse(body, ip.src, ip.dst, verify_checksum=verify_l4)
        return {**out, "kind": fp.K_TCP6, **{name: getattr(t, name) for name in TCP_FIELDS},
                "payload_off": l4 + t.header_len, "payload_len": len(body) - t.header_len}
    if ip.next_header == 58:
        m = Icmpv6Message.parse(body, ip.src, ip.dst)
        return {**out, "kind": fp.K_ICMP6, "icmp_type": m.type, "icmp_code": m.code,
                "payload_off": l4 + 8, "payload_len": len(body) - 8}
    return {"kind": fp.K_IP6, **out}


def fields(rec) -> dict:
    """The record's fields for its kind, by name (the reason by its name)."""
    out = {"kind": rec.kind}
    for name in FIELDS_OF_KIND[rec.kind]:
        out[name] = rec.reason_name if name == "reason" else getattr(rec, name)
    return out


def check_blanks(rec) -> None:
    """Fields that do not apply to the record's kind hold their blank value."""
    used = FIELDS_OF_KIND[rec.kind]
    for name, blank in BLANK.items():
        if name not in used:
            assert getattr(rec, name) == blank, (name, getattr(rec, name))
    assert rec.reason_name == fp.REASONS[rec.reason]
    assert (rec.reason == 0) == (rec.kind != fp.K_DROP)


def agree(frame: bytes, mac=MAC, verify_l4: bool = True) -> fp.Packet:
    """Assert that classify and the wire/ reference agree on ``frame``; returns the record."""
    rec = fp.classify_one(guarded(frame), mac, verify_l4)
    check_blanks(rec)
    got, ref = fields(rec), reference(frame, mac, verify_l4)
    if ref.get("reason") == "ipv4.bad_options" and got["kind"] != fp.K_DROP:
        # Known, deliberate difference: the fast path checks the option list's
        # structure only; the wire reference also validates RR/TS internals,
        # which the stack never acts on.
        return rec
    assert got == ref, (frame.hex(), got, ref)
    return rec
