"""ustack.wire.push.data_without_push (RFC 9293 3.9.1.2's PSH), asked of classified segments: data and none of
PSH, FIN, SYN, RST. What is not a valid TCP segment never gets that far (``Stack._mid_write``: only K_TCP and
K_TCP6 records of our connections)."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from ustack._fastpath import K_TCP, K_TCP6, classify_one
from ustack.wire.push import data_without_push

E = Ether(src="02:00:00:00:00:0b", dst="02:00:00:00:00:0a")


def v4(flags, payload=b"", **opts):
    return bytes(E / IP(src="198.18.0.2", dst="198.18.0.1") / TCP(flags=flags, **opts) / payload)


def v6(flags, payload=b"", **opts):
    return bytes(E / IPv6(src="fd00::2", dst="fd00::1") / TCP(flags=flags, **opts) / payload)


@pytest.mark.parametrize("ip", [v4, v6])
def test_data_without_psh_is_mid_write_and_nothing_else_is(ip):
    def ask(flags, payload=b"", **opts):
        rec = classify_one(ip(flags, payload, **opts))
        assert rec.kind in (K_TCP, K_TCP6)
        return data_without_push(rec)

    assert ask("A", b"x" * 100)
    assert ask("A", b"x", options=[("Timestamp", (1, 2))])  # with options
    assert not ask("PA", b"x" * 100)  # PSH: the write's end
    assert not ask("A")  # a pure ACK
    assert not ask("A", options=[("Timestamp", (1, 2))])
    for other in ("FA", "SA", "RA"):
        assert not ask(other, b"x" * 10)


def test_ethernet_padding_is_not_data():
    frame = v4("A")
    assert len(frame) == 54
    assert not data_without_push(classify_one(frame + bytes(6)))  # a 60-byte minimum frame's padding
