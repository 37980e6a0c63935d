"""Interop with the Linux kernel's own stack, per real backend, over veth / TAP namespaces.

For each backend, ``ustack serve`` runs in the stack's namespace and the
kernel on the other side:
- pings it 100 times (all answered);
- exchanges 10,000 UDP datagrams of 0..8,000 bytes with its echo (fragmented
  both ways), byte-exact;
- sends crafted bad frames (bad checksums, truncated headers, IHL < 5,
  total length beyond the frame, overlapping fragments, ARP garbage, runts):
  each is dropped under its named reason and counted, and the stack keeps
  answering;
then SIGTERM makes serve exit 0 with its counters, every frame it emitted
(pcap) is checked by scapy, and ``ustack ping`` pings the kernel.
"""

from __future__ import annotations

import random
import re
import select
import signal
import socket
import struct
import subprocess
import sys

import pytest

from tests.interop.harness import backend_params, offloaded_params, serving

pytestmark = pytest.mark.privileged

@pytest.fixture(scope="module", params=backend_params() + offloaded_params())
def served(request, tmp_path_factory):
    yield from serving(request.param, tmp_path_factory, request.param, ["--udp-echo", "7"])


def _udp_exchange(sock, dst, payloads, window=8, timeout=5.0):
    """Send payloads (each starts with a 4-byte index) keeping `window` outstanding; return echoes by index."""
    got: dict[int, bytes] = {}
    sent = 0
    n = len(payloads)
    while len(got) < n:
        while sent < n and sent - len(got) < window:
            sock.sendto(payloads[sent], dst)
            sent += 1
        r, _, _ = select.select([sock], [], [], timeout)
        if not r:
            raise AssertionError(f"echo stalled: {len(got)} of {n} back, {sent} sent")
        data, addr = sock.recvfrom(65535)
        assert addr == dst
        idx = struct.unpack_from("!I", data)[0]
        assert data == payloads[idx], f"datagram {idx} came back different"
        got[idx] = data
    return got


def test_kernel_pings_ustack_100_of_100(served):
    t = served.topo
    out = t.peer_run(["ping", "-c", "100", "-i", "0.002", "-W", "2", "-q", t.stack_addr], timeout=60, capture_output=True, text=True)
    if " 100 received" not in out.stdout:
        served.stop()  # its counters (drops by reason, ring and kick counters) say where the echo went
        pytest.fail(out.stdout + out.stderr + "".join(served.lines))


def test_udp_echo_10000_datagrams_0_to_8000_bytes_exact(served):
    from ustack.tools.netns import peer_socket

    t = served.topo
    rnd = random.Random(2026)
    payloads = []
    for i in range(10_000):
        size = 4 + rnd.randrange(0, 7997) if i % 10 else (4, 8000, 1472, 1473, 0)[i // 10 % 5]
        body = struct.pack("!I", i) + rnd.randbytes(max(0, size - 4))
        payloads.append(body[:max(size, 4)])
    # datagram 0..3 bytes cannot carry the index: exercise an empty datagram separately
    with peer_socket(t) as s:
        s.bind((t.peer_addr, 0))
        s.settimeout(5)
        s.sendto(b"", (t.stack_addr, 7))
        assert s.recvfrom(100) == (b"", (t.stack_addr, 7))
        got = _udp_exchange(s, (t.stack_addr, 7), payloads)
    assert len(got) == 10_000
    assert max(len(p) for p in payloads) == 8000


def _raw_frames(served):
    """Crafted bad frames and the named drop each must produce."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import ARP, Ether

    t = served.topo
    eth = Ether(dst=served.mac, src=t.peer_mac.hex(":"))
    good = eth / IP(src=t.peer_addr, dst=t.stack_addr) / UDP(sport=4000, dport=7) / (b"ok" * 20)
    raw = bytearray(bytes(good))
    cases = []
    bad = bytearray(raw)
    bad[24] ^= 0xFF
    cases.append(("ipv4.bad_checksum", bytes(bad)))
    bad = bytearray(raw)
    bad[-1] ^= 0xFF
    cases.append(("udp.bad_checksum", bytes(bad)))
    cases.append(("ipv4.truncated", bytes(raw[:14 + 12])))  # IP header cut short
    cases.append(("ipv4.truncated", bytes(raw[:14])))  # runt: Ethernet header alone
    bad = bytearray(raw)
    bad[14] = 0x44  # IHL 4
    cases.append(("ipv4.bad_ihl", bytes(bad)))
    bad = bytearray(bytes(eth / IP(src=t.peer_addr, dst=t.stack_addr, len=1400) / UDP(sport=4000, dport=7) / b"short"))
    cases.append(("ipv4.bad_total_length", bytes(bad)))
    udp = bytes(UDP(sport=4000, dport=7, len=8 + 64) / (b"A" * 64))
    f1 = eth / IP(src=t.peer_addr, dst=t.stack_addr, id=4242, flags="MF", frag=0, proto=17) / udp[:48]
    f2 = eth / IP(src=t.peer_addr, dst=t.stack_addr, id=4242, frag=4, proto=17) / (b"EVIL" * 10)
    cases.append((None, bytes(f1)))
    cases.append(("ipv4.frag_overlap", bytes(f2)))
    cases.append(("arp.bad_hardware", bytes(Ether(dst=served.mac, src=t.peer_mac.hex(":")) / ARP(hwtype=7, hwlen=6, plen=4, pdst=t.stack_addr))))
    cases.append(("arp.truncated", bytes(Ether(dst=served.mac, src=t.peer_mac.hex(":"), type=0x0806) / (b"\x00\x01\x08\x00" * 2))))
    cases.append(("udp.bad_length", bytes(eth / IP(src=t.peer_addr, dst=t.stack_addr) / UDP(sport=4000, dport=7, len=300) / b"x")))
    return cases


def test_bad_frames_are_dropped_named_counted_and_stack_keeps_answering(served):
    from ustack.tools.netns import peer_socket

    t = served.topo
    cases = _raw_frames(served)
    with t.in_peer_ns():
        raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        raw.bind((t.peer_ifname, 0))
        for _ in range(3):
            for reason, frame in cases:
                raw.send(frame)
                if reason:
                    served.expected_drops[reason] = served.expected_drops.get(reason, 0) + 1
    finally:
        raw.close()
    # Still answering, byte-exact, after the garbage.
    with peer_socket(t) as s:
        s.settimeout(5)
        for size in (10, 3000):
            s.sendto(b"z" * size, (t.stack_addr, 7))
            assert s.recvfrom(65535)[0] == b"z" * size
    out = t.peer_run(["ping", "-c", "3", "-i", "0.05", "-W", "2", "-q", t.stack_addr], timeout=20, capture_output=True, text=True)
    assert " 3 received" in out.stdout, out.stdout


def test_sigterm_exits_0_with_named_drop_counters(served):
    rc = served.stop(signal.SIGTERM)
    text = "".join(served.lines)
    assert rc == 0, text
    assert "drops by reason:" in text
    counters = served.counters()
    assert served.expected_drops, "the bad-frame test must run first"
    for reason, n in served.expected_drops.items():
        assert counters.get(reason, 0) == n, (reason, n, text)
    assert counters.get("icmp.echo_replies_sent", 0) >= 103


def test_every_emitted_frame_is_valid_for_scapy(served):
    """Every frame serve emitted: IPv4 header and L4 checksums verified by the pure-Python
    reference (independent of the C fast path that wrote them); a sample re-dissected and
    rebuilt by scapy, whose recomputed checksums must match."""
    from scapy.layers.inet import ICMP, IP, UDP
    from scapy.layers.l2 import ARP, Ether
    from scapy.utils import RawPcapReader

    from ustack.wire.checksum import internet_checksum, pseudo_header_sum

    assert served.proc.poll() is not None, "serve must have stopped (previous test)"
    mac = bytes.fromhex(served.mac.replace(":", ""))
    frames = [bytes(f) for f, _ in RawPcapReader(served.pcap) if f[6:12] == mac]
    assert len(frames) > 20_000
    kinds = {"arp": 0, "icmp": 0, "udp": 0, "fragment": 0}
    for f in frames:
        if f[12:14] == b"\x08\x06":
            kinds["arp"] += 1
            continue
        assert f[12:14] == b"\x08\x00"
        ihl = (f[14] & 15) * 4
        tot = int.from_bytes(f[16:18], "big")
        assert internet_checksum(f[14:14 + ihl]) == 0
        if int.from_bytes(f[20:22], "big") & 0x3FFF:
            kinds["fragment"] += 1
            continue
        l4 = f[14 + ihl:14 + tot]
        if f[23] == 17:
            kinds["udp"] += 1
            assert internet_checksum(l4, pseudo_header_sum(f[26:30], f[30:34], 17, len(l4))) == 0
        elif f[23] == 1:
            kinds["icmp"] += 1
            assert internet_checksum(l4) == 0
    assert all(kinds.values()), kinds
    for f in random.Random(1).sample(frames, 300):
        p = Ether(f)
        q = Ether(f)
        for layer in (IP, UDP, ICMP):
            if layer in q and not (IP in q and (q[IP].flags.MF or q[IP].frag)):
                del q[layer].chksum
        q = Ether(bytes(q))
        for layer in (IP, UDP, ICMP):
            if layer in p and layer in q:
                assert p[layer].chksum == q[layer].chksum, p.summary()
        if ARP in p:
            assert p[ARP].psrc == served.topo.stack_addr


def test_ustack_pings_the_kernel(served):
    t = served.topo
    assert served.proc.poll() is not None
    argv = [sys.executable, "-m", "ustack", "ping", *served.cli_backend(), "--ifname", t.stack_ifname,
            "--addr", f"198.18.0.3/{t.prefixlen}", "-c", "5", "-i", "0.1", t.peer_addr]
    out = t.stack_popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    text, _ = out.communicate(timeout=60)
    assert out.returncode == 0, text
    assert "5 packets transmitted, 5 received, 0% packet loss" in text
    assert re.search(r"bytes from 198\.18\.0\.1: icmp_seq=5 ttl=64 time=[\d.]+ ms", text), text
