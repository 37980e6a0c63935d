"""Issue 12, items 1 and 5 against a real ``ustack serve`` (AF_PACKET on a veth in namespaces):
frames that used to stop serve (replies with no route back) and martian sources are dropped by
name, serve keeps answering the kernel, and exits 0 with the barrier untouched."""

from __future__ import annotations

import ipaddress
import signal
import socket

import pytest

from tests.conftest import privilege_problem, require_privileged
from tests.interop.harness import Served

pytestmark = pytest.mark.privileged


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    if privilege_problem() is not None:
        require_privileged()
    s = Served("packet", tmp_path_factory.mktemp("hostile"), ["--udp-echo", "7"])
    yield s
    s.close()


def test_serve_survives_unroutable_and_martian_frames(served):
    from scapy.layers.inet import ICMP, IP, TCP, UDP
    from scapy.layers.l2 import Ether

    t = served.topo
    eth = Ether(dst=served.mac, src=t.peer_mac.hex(":"))
    subnet_broadcast = str(ipaddress.ip_interface(f"{t.stack_addr}/{t.prefixlen}").network.broadcast_address)
    cases = [
        ("icmp.echo_no_route", eth / IP(src="10.9.9.9", dst=t.stack_addr) / ICMP(type=8, id=1, seq=1)),
        ("icmp.error_no_route", eth / IP(src="10.9.9.9", dst=t.stack_addr) / UDP(sport=5, dport=9)),
        ("icmp.error_no_route", eth / IP(src="10.9.9.9", dst=t.stack_addr, proto=253) / b"?"),
        ("ipv4.martian_source.unspecified", eth / IP(src="0.0.0.0", dst=t.stack_addr) / ICMP(type=8, id=1, seq=1)),
        ("ipv4.martian_source.broadcast", eth / IP(src="255.255.255.255", dst=t.stack_addr) / TCP(dport=7, flags="S")),
        ("ipv4.martian_source.broadcast", eth / IP(src=subnet_broadcast, dst=t.stack_addr) / ICMP(type=8)),
        ("ipv4.martian_source.ours", eth / IP(src=t.stack_addr, dst=t.stack_addr) / TCP(sport=7, dport=7, flags="S")),
        ("ipv4.martian_source.loopback", eth / IP(src="127.0.0.1", dst=t.stack_addr) / UDP(sport=5, dport=7) / b"x"),
    ]
    expected: dict[str, int] = {}
    with t.in_peer_ns():
        raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        raw.bind((t.peer_ifname, 0))
        for reason, frame in cases:
            raw.send(bytes(frame))
            expected["drop." + reason] = expected.get("drop." + reason, 0) + 1
    finally:
        raw.close()
    # Still serving: the kernel's pings are answered after all of them.
    out = t.peer_run(["ping", "-c", "3", "-i", "0.05", "-W", "2", "-q", t.stack_addr], timeout=20,
                     capture_output=True, text=True)
    assert " 3 received" in out.stdout, out.stdout + "".join(served.lines)
    assert served.proc.poll() is None, "".join(served.lines)
    rc = served.stop(signal.SIGTERM)
    text = "".join(served.lines)
    assert rc == 0, text
    counters = served.counters()
    for name, n in expected.items():
        assert counters.get(name, 0) >= n, (name, text)
    assert "stack.internal_error" not in counters, text
