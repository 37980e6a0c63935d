"""TCP interop with the Linux kernel, per real backend, over veth / TAP namespaces.

Phase 1, ``ustack serve`` (echo 7, discard 9, source 19) with kernel clients:
100 MB pulled sha256-exact, 100 MB pushed through the echo and back
byte-exact, 100 concurrent connections, half-close from the kernel side,
RST for a closed port; then SIGTERM and its counters.
Phase 2, ustack as the client (``ustack send`` / ``ustack recv --connect``)
against kernel servers: 100 MB each way sha256-exact, half-close from the
ustack side (the kernel answers after ustack's FIN), connection refused, a
peer reset mid-transfer, and transfers with random drops injected by
nftables on the kernel side.
"""

from __future__ import annotations

import hashlib
import re
import select
import signal
import socket
import struct
import threading

import pytest

from tests.conftest import require_tool
from tests.interop.harness import serving, ustack_cli
from ustack.tools.services import PATTERN_BLOCK, pattern_sha256
from ustack.transport.tcp.config import ROUND_ACK_BYTES

pytestmark = pytest.mark.privileged

MB100 = 100_000_000


def tcp_backends():
    from tests.interop.harness import backend_params, offloaded_params

    # afxdp generic runs the same ring code as native, and the V3 packet ring the same stack code
    # as V2 (both are covered by the UDP/ICMP interop and the device conformance suite); then each
    # backend again against a kernel end at its default offloads (partial checksums, TSO).
    return [b for b in backend_params() if b not in ("afxdp-generic", "packet-v3")] + offloaded_params()


@pytest.fixture(scope="module", params=tcp_backends())
def served(request, tmp_path_factory):
    yield from serving(request.param, tmp_path_factory, "tcp-" + request.param,
                       ["--tcp-echo", "7", "--tcp-discard", "9", "--tcp-source", "19", "--source-bytes", str(MB100),
                        "--pcap-snaplen", "128"])


def kernel_tcp(served, timeout=30.0):
    from ustack.tools.netns import peer_socket

    s = peer_socket(served.topo, type=socket.SOCK_STREAM)
    s.settimeout(timeout)
    return s


def read_to_eof(s, h=None) -> int:
    n = 0
    buf = bytearray(1 << 20)
    while True:
        k = s.recv_into(buf)
        if not k:
            return n
        if h is not None:
            h.update(memoryview(buf)[:k])
        n += k


# -- phase 1: kernel clients, ustack server -------------------------------------------------
def test_kernel_pulls_100mb_from_ustack_sha256_exact(served):
    with kernel_tcp(served) as s:
        s.connect((served.topo.stack_addr, 19))
        h = hashlib.sha256()
        assert read_to_eof(s, h) == MB100
    assert h.hexdigest() == pattern_sha256(MB100)


def test_kernel_pushes_100mb_through_ustack_echo_byte_exact(served):
    """100 MB up and the same 100 MB back; the kernel half-closes after sending (echo closes after)."""
    with kernel_tcp(served) as s:
        s.connect((served.topo.stack_addr, 7))
        back = hashlib.sha256()
        got = [0]

        def reader():
            got[0] = read_to_eof(s, back)

        t = threading.Thread(target=reader)
        t.start()
        left = MB100
        while left:
            k = min(left, len(PATTERN_BLOCK))
            s.sendall(PATTERN_BLOCK[:k])
            left -= k
        s.shutdown(socket.SHUT_WR)  # half-close: ustack keeps sending us the echo
        t.join(120)
        assert not t.is_alive()
    assert got[0] == MB100
    assert back.hexdigest() == pattern_sha256(MB100)


def test_100_concurrent_connections(served):
    socks = []
    try:
        for i in range(100):
            s = kernel_tcp(served)
            s.connect((served.topo.stack_addr, 7))
            s.setblocking(False)
            socks.append(s)
        msgs = {s: struct.pack("!I", i) * 4096 for i, s in enumerate(socks)}  # 16 KiB each
        out = {s: memoryview(m) for s, m in msgs.items()}
        back = {s: bytearray() for s in socks}
        pending = set(socks)
        while pending:
            wr = [s for s in pending if len(out[s])]
            r, w, _ = select.select(list(pending), wr, [], 10)
            assert r or w, f"stalled with {len(pending)} connections unfinished"
            for s in w:
                n = s.send(out[s])
                out[s] = out[s][n:]
                if not len(out[s]):
                    s.shutdown(socket.SHUT_WR)
            for s in r:
                d = s.recv(65536)
                if d:
                    back[s] += d
                else:
                    pending.discard(s)
        for s in socks:
            assert bytes(back[s]) == msgs[s]
    finally:
        for s in socks:
            s.close()


def test_rst_for_a_closed_port(served):
    with kernel_tcp(served) as s:
        with pytest.raises(ConnectionRefusedError):
            s.connect((served.topo.stack_addr, 1))


def test_serve_exits_0_with_counters(served):
    rc = served.stop(signal.SIGTERM)
    text = "".join(served.lines)
    assert rc == 0, text
    c = served.counters()
    assert c.get("tcp.passive_opens", 0) >= 102, text
    assert c.get("drop.tcp.no_socket", 0) == 1, text  # the SYN to the closed port, answered with RST
    assert "drops by reason:" in text


def check_emitted_tcp(pcap: str) -> tuple[int, set]:
    """Every TCP segment ustack (198.18.0.2) sent in ``pcap`` (cut at 128 bytes) is dissected by scapy
    and by our parser, and they agree on ports, sequence numbers, flags, window, data offset and
    options. The checksums of these segments are proven by the kernel, which drops bad ones, and by
    the sha256-exact transfers; the pipe tests verify every checksum directly. Returns (count, flags)."""
    from scapy.layers.inet import TCP
    from scapy.utils import RawPcapReader

    from ustack.wire.tcp import TcpHeader

    ours = bytes([198, 18, 0, 2])
    n = 0
    flags_seen = set()
    for frame, _ in RawPcapReader(pcap):
        if frame[12:14] != b"\x08\x00" or frame[23] != 6 or frame[26:30] != ours:
            continue
        ihl = (frame[14] & 15) * 4
        seg = frame[14 + ihl:]
        hdr = TcpHeader.parse(seg, frame[26:30], frame[30:34], verify_checksum=False)
        assert 20 <= hdr.header_len <= 60
        n += 1
        flags_seen.add(hdr.flags)
        p = TCP(seg)
        assert (p.sport, p.dport, p.seq, p.ack, int(p.flags), p.window, p.dataofs * 4) == (
            hdr.src_port, hdr.dst_port, hdr.seq, hdr.ack, hdr.flags, hdr.window, hdr.header_len)
        opts = {k: v for k, v in p.options if isinstance(k, str)}
        if hdr.timestamps is not None:
            assert opts["Timestamp"] == tuple(hdr.timestamps)
        if hdr.sack_blocks:
            assert tuple(opts["SAck"]) == tuple(edge for block in hdr.sack_blocks for edge in block)
        if hdr.flags & 0x02:  # SYN or SYN-ACK: our MSS, window scale, SACK-permitted
            assert opts["MSS"] == hdr.mss == 1460 and opts["WScale"] == hdr.wscale and "SAckOK" in opts
    return n, flags_seen


def test_every_emitted_tcp_header_is_well_formed(served):
    assert served.proc.poll() is not None
    n, flags_seen = check_emitted_tcp(served.pcap)
    assert n > 100_000
    assert 0x12 in flags_seen  # SYN-ACK
    assert any(f & 0x01 for f in flags_seen)  # FIN
    assert 0x14 in flags_seen  # RST-ACK for the closed port


# -- phase 2: ustack clients, kernel servers ----------------------------------------------------
class KernelServer:
    """A kernel TCP server in the peer namespace running ``handler(conn)`` for one connection."""

    def __init__(self, served, handler):
        from ustack.tools.netns import peer_socket

        self.sock = peer_socket(served.topo, type=socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((served.topo.peer_addr, 0))
        self.sock.listen(4)
        self.sock.settimeout(60)
        self.port = self.sock.getsockname()[1]
        self.result = None
        self.error = None
        self.thread = threading.Thread(target=self._run, args=(handler,), daemon=True)
        self.thread.start()

    def _run(self, handler):
        try:
            conn, _ = self.sock.accept()
            conn.settimeout(60)
            with conn:
                self.result = handler(conn)
        except Exception as e:  # reported by join()
            self.error = e

    def join(self):
        self.thread.join(120)
        self.sock.close()
        if self.error is not None:
            raise self.error
        return self.result


def stopped(served):
    assert served.proc.poll() is not None, "phase 1 must have stopped serve"
    return served


def run_send(served, port, nbytes, timeout=180):
    """``ustack send`` to a kernel server; every TCP segment it emits is checked afterwards."""
    t = served.topo
    pcap = served.pcap + f".send-{port}.pcap"
    rc, out = ustack_cli(t, served.cli_backend(), "send", "--addr", f"198.18.0.2/{t.prefixlen}",
                         "--connect", f"{t.peer_addr}:{port}", "--bytes", str(nbytes),
                         "--pcap", pcap, "--pcap-snaplen", "128", timeout=timeout)
    n, flags = check_emitted_tcp(pcap)
    assert n > 0 and 0x02 in flags, out  # at least our SYN went out, well formed
    return rc, out


def sink_then_reply(conn):
    """Read to EOF (ustack's FIN), then answer on the still-open direction and close."""
    h = hashlib.sha256()
    n = read_to_eof(conn, h)
    conn.sendall(f"got {n} {h.hexdigest()}".encode())
    return n, h.hexdigest()


def test_ustack_sends_100mb_to_kernel_and_hears_back_after_half_close(served):
    stopped(served)
    srv = KernelServer(served, sink_then_reply)
    rc, out = run_send(served, srv.port, MB100)
    n, digest = srv.join()
    assert rc == 0, out
    assert n == MB100 and digest == pattern_sha256(MB100)
    assert f"sha256 {digest}" in out
    assert f"reply got {MB100} {digest}" in out  # data after ustack's FIN: half-close works


def test_ustack_pulls_100mb_from_kernel(served):
    stopped(served)

    def source(conn):
        left = MB100
        while left:
            k = min(left, len(PATTERN_BLOCK))
            conn.sendall(PATTERN_BLOCK[:k])
            left -= k

    srv = KernelServer(served, source)
    t = served.topo
    pcap = served.pcap + ".recv.pcap"
    rc, out = ustack_cli(t, served.cli_backend(), "recv", "--addr", f"198.18.0.2/{t.prefixlen}",
                         "--connect", f"{t.peer_addr}:{srv.port}", "--pcap", pcap, "--pcap-snaplen", "128",
                         timeout=180)
    srv.join()
    n, _ = check_emitted_tcp(pcap)
    # the ACKs of 100 MB: one per poll round (receive ACK coalescing), and one at once whenever a round's
    # unacknowledged bytes reach ROUND_ACK_BYTES, so one per ROUND_ACK_BYTES + a segment at least
    assert n > MB100 // (ROUND_ACK_BYTES + 1448)
    assert rc == 0, out
    assert f"bytes {MB100} " in out and f"sha256 {pattern_sha256(MB100)}" in out


def test_ustack_connect_to_closed_kernel_port_is_refused(served):
    stopped(served)
    rc, out = run_send(served, 1, 1000, timeout=60)
    assert rc == 1
    assert "Connection refused" in out


def test_kernel_reset_mid_transfer_is_reported(served):
    stopped(served)

    def reset_after_1mb(conn):
        n = 0
        while n < 1_000_000:
            d = conn.recv(65536)
            if not d:
                break
            n += len(d)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        return n  # close() with linger 0 sends a RST

    srv = KernelServer(served, reset_after_1mb)
    rc, out = run_send(served, srv.port, MB100)
    assert srv.join() >= 1_000_000
    assert rc == 1, out
    assert re.search(r"Connection reset by peer|Broken pipe", out), out


def test_byte_exact_with_random_drops_injected_by_nftables(served):
    require_tool("nft")
    stopped(served)
    t = served.topo
    rules = ("table inet ustest {\n"
             " chain out { type filter hook output priority 0; meta l4proto tcp numgen random mod 100 < 2 drop; }\n"
             " chain in { type filter hook input priority 0; meta l4proto tcp numgen random mod 100 < 2 drop; }\n"
             "}\n")
    r = t.peer_run(["nft", "-f", "-"], input=rules, capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    try:
        srv = KernelServer(served, sink_then_reply)
        rc, out = run_send(served, srv.port, 20_000_000)
        n, digest = srv.join()
        assert rc == 0, out
        assert n == 20_000_000 and digest == pattern_sha256(20_000_000)
        retrans = int(re.search(r"retransmits (\d+)", out).group(1))
        assert retrans > 0, out  # drops really happened and were repaired
        counters = t.peer_run(["nft", "list", "ruleset"], capture_output=True, text=True, timeout=20)
        assert "ustest" in counters.stdout
    finally:
        t.peer_run(["nft", "delete", "table", "inet", "ustest"], capture_output=True, text=True, timeout=20)
