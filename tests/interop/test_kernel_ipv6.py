"""IPv6 interop with the Linux kernel over veth (packet, AF_XDP native and generic) and TAP, in namespaces.

``ustack serve`` runs with an IPv4 and an IPv6 address on the same
interface (and its own SLAAC link-local one); the kernel on the other side,
IPv6 on, with fd00::1/64:
- pings ustack's global and link-local addresses, and its IPv4 address at
  the same time;
- TCP echo: 10 MB to ustack and the same 10 MB back, sha256-exact; 100 MB
  pulled from ustack's source service, sha256-exact;
- UDP echo of datagrams 0..8000 bytes (fragmented both ways), byte-exact;
then serve exits 0, and ``ustack ping`` pings the kernel's fd00::1.
"""

from __future__ import annotations

import hashlib
import random
import re
import socket
import struct
import subprocess
import sys

import pytest

from tests.interop.harness import KernelSink, backend_params, echoed_exactly, offloaded_params, peer_tcp6, serving

pytestmark = pytest.mark.privileged
MB100 = 100_000_000


@pytest.fixture(scope="module", params=[b for b in backend_params()
                                        if b in ("packet", "tap", "afxdp-native", "afxdp-generic")]
                + offloaded_params())
def served(request, tmp_path_factory):
    yield from serving(request.param, tmp_path_factory, request.param,
                       ["--udp-echo", "7", "--tcp-echo", "7", "--tcp-source", "19", "--source-bytes", str(MB100)],
                       ipv6=True)


def _link_local(served) -> str:
    m = re.search(r"IPv6 .*?(fe80::[0-9a-f:]+)/64", "".join(served.lines))
    assert m, "".join(served.lines)
    return m.group(1)


def test_kernel_pings_global_link_local_and_ipv4_at_once(served):
    t = served.topo
    procs = [t.peer_popen(["ping", "-c", "20", "-i", "0.01", "-W", "2", "-q", addr], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
             for addr in (t.stack_addr6, f"{_link_local(served)}%{t.peer_ifname}", t.stack_addr)]
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert " 20 received" in out, out


def test_tcp_echo_10mb_exact_both_directions(served):
    data = random.Random(13).randbytes(10_000_000)
    with peer_tcp6(served.topo, 7) as s:
        assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG) <= 1440
        assert echoed_exactly(s, data)


def test_kernel_pulls_100mb_over_ipv6_sha256_exact(served):
    from ustack.tools.services import pattern_sha256

    h, n = hashlib.sha256(), 0
    with peer_tcp6(served.topo, 19) as s:
        while chunk := s.recv(1 << 20):
            h.update(chunk)
            n += len(chunk)
    assert n == MB100 and h.hexdigest() == pattern_sha256(MB100)


def test_udp_echo_0_to_8000_bytes_fragmented_exact(served):
    from ustack.tools.netns import peer_socket

    t = served.topo
    rnd = random.Random(6)
    sizes = [0, 1, 1232, 1452, 1453, 3000, 8000] + [rnd.randrange(0, 8001) for _ in range(200)]
    dst = (t.stack_addr6, 7)
    with peer_socket(t, socket.AF_INET6, socket.SOCK_DGRAM) as s:
        s.settimeout(5)
        for i, n in enumerate(sizes):
            body = (struct.pack("!I", i) + rnd.randbytes(n))[:n]
            s.sendto(body, dst)
            back, addr = s.recvfrom(65535)
            assert back == body and addr[:2] == dst, f"datagram {i} ({n} bytes)"


def test_serve_exits_0_then_ustack_pings_the_kernel_over_ipv6(served):
    assert served.stop() == 0
    c = served.counters()
    assert c.get("ipv6.reassembled", 0) > 0 and c.get("ipv6.fragments_sent", 0) > 0
    assert c.get("stack.internal_error", 0) == 0
    t = served.topo
    argv = [sys.executable, "-m", "ustack", "ping", *served.cli_backend(), "--ifname", t.stack_ifname,
            "--addr", f"{t.stack_addr}/{t.prefixlen}", "--addr", f"{t.stack_addr6}/{t.prefixlen6}",
            "-c", "3", "-i", "0.05", t.peer_addr6]
    p = t.stack_popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and "3 received" in out, out


def test_ustack_send_to_a_kernel_sink_over_ipv6_exact(served):
    """``ustack send --connect [fd00::1]:5001``: 10 MB into a kernel socket, sha256 compared."""
    served.stop()
    t = served.topo
    sink = KernelSink(t, t.peer_addr6, 5001)
    argv = [sys.executable, "-m", "ustack", "send", *served.cli_backend(), "--ifname", t.stack_ifname,
            "--addr", f"{t.stack_addr}/{t.prefixlen}", "--addr", f"{t.stack_addr6}/{t.prefixlen6}",
            "--connect", f"[{t.peer_addr6}]:5001", "--bytes", "10000000"]
    p = t.stack_popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = p.communicate(timeout=120)
    result = sink.close()
    assert p.returncode == 0, out
    m = re.search(r"bytes (\d+) .* sha256 ([0-9a-f]{64}) peer \[fd00::1\]:5001", out)
    assert m, out
    assert result == {"n": 10_000_000, "sha": m.group(2), "peer": t.stack_addr6}
