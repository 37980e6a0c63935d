"""An IPv6-only ustack (``--addr fd00::2/64`` alone) and the Linux kernel over veth (packet backend).

The kernel side has both fd00::1/64 and 198.18.x.1/24. ustack serve runs
with its IPv6 address only: the kernel pings it over ICMPv6 and echoes 1 MB
over TCP, sha256-exact; its IPv4 address gets no answer (IPv4 and ARP frames
are counted as ``ipv4.disabled``); then ``ustack ping`` and ``ustack send``,
IPv6-only too, reach the kernel.
"""

from __future__ import annotations

import ast
import errno
import random
import re
import socket
import subprocess
import sys
import threading

import pytest

from tests.interop.harness import KernelSink, echoed_exactly, peer_tcp6, serving

pytestmark = pytest.mark.privileged


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    yield from serving("packet", tmp_path_factory, "v6only", ["--tcp-echo", "7", "--udp-echo", "7"], ipv4=False)


def test_serve_reports_its_ipv6_address_only(served):
    head = "".join(served.lines)
    assert f"ustack: {served.topo.stack_addr6}/{served.topo.prefixlen6} mac" in head, head
    assert served.topo.stack_addr not in head, head


def test_kernel_pings_the_ipv6_only_stack_and_not_its_ipv4_address(served):
    t = served.topo
    v6 = t.peer_popen(["ping", "-c", "10", "-i", "0.01", "-W", "2", "-q", t.stack_addr6],
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    v4 = t.peer_popen(["ping", "-c", "2", "-i", "0.2", "-W", "1", "-q", t.stack_addr],
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out6, _ = v6.communicate(timeout=60)
    out4, _ = v4.communicate(timeout=60)
    assert " 10 received" in out6, out6
    assert " 0 received" in out4, out4


def test_tcp_echo_1mb_exact(served):
    data = random.Random(6).randbytes(1_000_000)
    with peer_tcp6(served.topo, 7) as s:
        assert echoed_exactly(s, data)


def test_serve_counted_ipv4_as_disabled_then_cli_ping_and_send_ipv6_only(served):
    assert served.stop() == 0
    c = served.counters()
    assert c.get("drop.ipv4.disabled", 0) > 0 and c.get("stack.internal_error", 0) == 0, c
    assert c.get("arp.replies_sent", 0) == 0
    t = served.topo
    base = [sys.executable, "-m", "ustack"]
    opts = ["--backend", "packet", "--ifname", t.stack_ifname, "--addr", f"{t.stack_addr6}/{t.prefixlen6}"]
    p = t.stack_popen([*base, "ping", *opts, "-c", "3", "-i", "0.05", t.peer_addr6],
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and "3 received" in out, out
    # An IPv4 destination from an IPv6-only stack: a clear error, not a hang.
    p = t.stack_popen([*base, "ping", *opts, "-c", "1", t.peer_addr],
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = p.communicate(timeout=60)
    assert p.returncode != 0 and "unreachable" in out.lower(), out

    sink = KernelSink(t, t.peer_addr6, 5001)
    p = t.stack_popen([*base, "send", *opts, "--connect", f"[{t.peer_addr6}]:5001", "--bytes", "2000000"],
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = p.communicate(timeout=120)
    result = sink.close()
    assert p.returncode == 0, out
    m = re.search(r"bytes (\d+) .* sha256 ([0-9a-f]{64})", out)
    assert m, out
    assert result == {"n": 2_000_000, "sha": m.group(2), "peer": t.stack_addr6}


SCOPED_CLIENT = """
import socket, sys
host, port, ifname = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with socket.create_connection((host + "%" + ifname, port), timeout=10) as c:
    c.sendall(b"link-local")
    print(repr((c.getpeername(), c.getsockname(), socket.if_nametoindex(ifname), c.recv(100))))
s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
try:
    s.connect((host, port, 0, socket.if_nametoindex(ifname) + 100))
except OSError as e:
    print("wrong scope:", e.errno)
"""


def test_ustack_run_reaches_the_kernel_link_local_with_its_scope_id(served, tmp_path):
    """``ustack run`` (IPv6-only) connects to fe80::x%ifname; getpeername/getsockname carry the interface's
    index as scope id, the kernel's accept sees ustack's link-local address, a wrong scope id is refused."""
    from ustack.tools.netns import peer_socket

    served.stop()
    t = served.topo
    out = t.peer_run(["ip", "-6", "-o", "addr", "show", "dev", t.peer_ifname, "scope", "link"],
                     capture_output=True, text=True).stdout
    kernel_ll = re.search(r"inet6 (fe80::[0-9a-f:]+)/64", out).group(1)
    srv = peer_socket(t, socket.AF_INET6, socket.SOCK_STREAM)
    srv.bind(("::", 5002))
    srv.listen(1)
    srv.settimeout(30)
    seen = {}

    def serve_one():
        conn, addr = srv.accept()
        with conn:
            seen.update(addr=addr, data=conn.recv(100))
            conn.sendall(b"scoped back")

    th = threading.Thread(target=serve_one, daemon=True)
    th.start()
    prog = tmp_path / "scoped.py"
    prog.write_text(SCOPED_CLIENT)
    p = t.stack_popen([sys.executable, "-m", "ustack", "run", "--backend", "packet", "--ifname", t.stack_ifname,
                       "--addr", f"{t.stack_addr6}/{t.prefixlen6}", str(prog), kernel_ll, "5002", t.stack_ifname],
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = p.communicate(timeout=60)
    th.join(10)
    srv.close()
    assert p.returncode == 0, out
    first, second = out.splitlines()[:2]
    peer, local, index, data = ast.literal_eval(first)
    assert peer == (kernel_ll, 5002, 0, index) and local[0].startswith("fe80::") and local[3] == index
    assert data == b"scoped back" and seen["data"] == b"link-local"
    assert seen["addr"][0] == local[0] and seen["addr"][1] == local[1]
    assert second == f"wrong scope: {errno.ENETUNREACH}"
