"""Golden frames built with scapy, the independent oracle, shared by the wire tests.

Scapy is imported per layer (not ``scapy.all``) to keep start-up short.
"""

from __future__ import annotations

import struct

from scapy.compat import raw
from scapy.layers.inet import (
    ICMP,
    IP,
    UDP,
    IPOption_NOP,
    IPOption_Router_Alert,
    IPOption_RR,
    IPOption_Timestamp,
)
from scapy.layers.l2 import ARP, Dot1Q, Ether

from ustack.wire.checksum import internet_checksum

MAC_A = "02:00:00:00:00:0a"
MAC_B = "02:00:00:00:00:0b"
IP_A = "198.18.0.1"
IP_B = "198.18.0.2"
IP_C = "198.19.7.9"


def pad60(frame: bytes) -> bytes:
    """Ethernet minimum-size padding, as a sender's NIC would add it."""
    return frame + b"\0" * max(0, 60 - len(frame))


def fix_ipv4_checksum(header: bytearray) -> bytearray:
    """Recompute the header checksum of a hand-crafted IPv4 header in place."""
    ihl = (header[0] & 0x0F) * 4
    header[10:12] = b"\0\0"
    header[10:12] = struct.pack("!H", internet_checksum(bytes(header[:ihl])))
    return header


def golden_frames() -> dict[str, bytes]:
    """A set of valid frames covering every parser, keyed by a short name."""
    eth = Ether(src=MAC_A, dst=MAC_B)
    ab = IP(src=IP_A, dst=IP_B)
    udp_opts = eth / IP(
        src=IP_A,
        dst=IP_B,
        options=[
            IPOption_RR(routers=["198.18.0.9", "0.0.0.0", "0.0.0.0"], pointer=8),
            IPOption_NOP(),
            IPOption_Timestamp(flg=1, internet_address="198.18.0.9", timestamp=123456, pointer=13),
            IPOption_Router_Alert(),
        ],
    ) / UDP(sport=5353, dport=5353) / b"opts"
    quoted = raw(IP(src=IP_B, dst=IP_A, ttl=1) / UDP(sport=33434, dport=33435) / (b"q" * 20))
    from_c = eth / IP(src=IP_C, dst=IP_B)
    return {
        "udp": raw(eth / IP(src=IP_A, dst=IP_B, id=7, flags="DF") / UDP(sport=40000, dport=7) / b"hello, world"),
        "udp_padded": pad60(raw(eth / ab / UDP(sport=1, dport=2) / b"x")),
        "udp_options": raw(udp_opts),
        "udp_nochecksum": raw(eth / ab / UDP(sport=9, dport=9, chksum=0) / b"abc"),
        "vlan_udp": raw(eth / Dot1Q(vlan=42, prio=5) / ab / UDP(sport=1000, dport=2000) / b"tagged"),
        "icmp_echo": raw(eth / ab / ICMP(type=8, id=0x1234, seq=3) / b"ping data 0123456789"),
        "icmp_unreach": raw(from_c / ICMP(type=3, code=3) / quoted[:28]),
        "icmp_ttl": raw(from_c / ICMP(type=11, code=0) / quoted),
        "fragment": raw(eth / IP(src=IP_A, dst=IP_B, proto=17, flags="MF", frag=185) / (b"f" * 16)),
        "arp_who_has": pad60(raw(
            Ether(src=MAC_A, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=MAC_A, psrc=IP_A, pdst=IP_B)
        )),
        "arp_is_at": pad60(raw(
            Ether(src=MAC_B, dst=MAC_A) / ARP(op=2, hwsrc=MAC_B, psrc=IP_B, hwdst=MAC_A, pdst=IP_A)
        )),
    }
