"""The kernel client of ``ustack bench``: one measurement each, sockets made in the peer namespace.

Each function runs in this process against a ready server at ``host``:

- ``udp_rtts`` / ``tcp_rtts``: ``MESSAGE``-byte ping-pong on one socket /
  one connection after a warm-up; p50 and p99 in µs (nearest rank);
- ``push`` (to the discard service) and ``pull`` (from the source service):
  bounded in bytes and in time; MB/s;
- ``connections_per_second``: connect, one request/response, close, for a
  fixed time;
- the latency suite: ``sized_tcp_rtts`` (echo round trips of each message
  size on one connection), ``ping_rtts`` (ICMP echo at a fixed spacing, so
  the server idles between requests; a 64-byte TCP echo when no ICMP socket
  can be had) and ``connect_close`` (connect() time and connect+close per
  second, no data).

A client that cannot go on raises ``ClientError``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time

from ustack.tools.bench_config import MESSAGE

# TIME_WAIT sockets the client namespace keeps (widen_port_range).
CLIENT_TIME_WAIT = 4096


def percentile(values, q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100)
    return float(ordered[min(int(rank), len(ordered)) - 1])


class ClientError(RuntimeError):
    pass


def _client_socket(topo, kind: int, host: str = "") -> socket.socket:
    """A kernel socket in the peer namespace, of the family of ``host`` (IPv6 if it has a colon)."""
    from ustack.tools.netns import peer_socket

    s = peer_socket(topo, family=socket.AF_INET6 if ":" in host else socket.AF_INET, type=kind)
    if kind == socket.SOCK_STREAM:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _recv_exactly(s: socket.socket, n: int) -> None:
    got = 0
    while got < n:
        chunk = s.recv(n - got)
        if not chunk:
            raise ClientError("connection closed in the middle of an echo")
        got += len(chunk)


def udp_rtts(topo, host: str, port: int, count: int, warmup: int, timeout: float = 1.0) -> dict:
    """Ping-pong ``count`` 64-byte datagrams after ``warmup``; RTTs in µs. Lost ones are counted, not timed."""
    payload = bytes(MESSAGE)
    with _client_socket(topo, socket.SOCK_DGRAM, host) as s:
        s.settimeout(timeout)
        s.connect((host, port))
        rtts, lost, in_a_row = [], 0, 0
        clock = time.perf_counter_ns
        for i in range(warmup + count):
            t0 = clock()
            s.send(payload)
            try:
                while len(s.recv(2048)) != MESSAGE:
                    pass
            except TimeoutError:
                lost += 1
                in_a_row += 1
                if in_a_row >= 10:
                    raise ClientError(f"UDP echo: 10 requests in a row unanswered ({lost} lost)")
                continue
            in_a_row = 0
            if i >= warmup:
                rtts.append((clock() - t0) / 1e3)
    if not rtts:
        raise ClientError("UDP echo: no replies")
    return {"p50": percentile(rtts, 50), "p99": percentile(rtts, 99), "n": len(rtts), "lost": lost}


def tcp_rtts(topo, host: str, port: int, count: int, warmup: int, timeout: float = 5.0) -> dict:
    """Ping-pong 64-byte messages on one connection to the echo service; RTTs in µs."""
    payload = bytes(MESSAGE)
    with _client_socket(topo, socket.SOCK_STREAM, host) as s:
        s.settimeout(timeout)
        s.connect((host, port))
        rtts = []
        clock = time.perf_counter_ns
        for i in range(warmup + count):
            t0 = clock()
            s.sendall(payload)
            _recv_exactly(s, MESSAGE)
            if i >= warmup:
                rtts.append((clock() - t0) / 1e3)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # the echo closes after our FIN
    return {"p50": percentile(rtts, 50), "p99": percentile(rtts, 99), "n": len(rtts)}


def push(topo, host: str, port: int, nbytes: int, seconds: float) -> dict:
    """Send up to ``nbytes`` (or for ``seconds``) to the discard service, half-close, wait for its FIN."""
    from ustack.tools.services import PATTERN_BLOCK

    block = memoryview(PATTERN_BLOCK)
    with _client_socket(topo, socket.SOCK_STREAM, host) as s:
        s.settimeout(seconds + 10)
        s.connect((host, port))
        sent = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while sent < nbytes and time.perf_counter() < deadline:
            chunk = block[:min(len(block), nbytes - sent)]
            s.sendall(chunk)
            sent += len(chunk)
        s.shutdown(socket.SHUT_WR)
        if s.recv(1):  # the discard service closes after our FIN, once it has read everything
            raise ClientError("discard service sent data")
        elapsed = time.perf_counter() - t0
    return {"bytes": sent, "seconds": elapsed, "mbps": sent / elapsed / 1e6, "complete": sent >= nbytes}


def pull(topo, host: str, port: int, nbytes: int, seconds: float) -> dict:
    """Read the source service's stream to EOF (``nbytes`` expected) or for ``seconds``."""
    buf = bytearray(1 << 18)
    with _client_socket(topo, socket.SOCK_STREAM, host) as s:
        s.settimeout(seconds + 10)
        s.connect((host, port))
        got = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        complete = False
        while time.perf_counter() < deadline:
            k = s.recv_into(buf)
            if not k:
                complete = True
                break
            got += k
        elapsed = time.perf_counter() - t0
    if complete and got != nbytes:
        raise ClientError(f"source sent {got} bytes, expected {nbytes}")
    return {"bytes": got, "seconds": elapsed, "mbps": got / elapsed / 1e6, "complete": complete}


def connections_per_second(topo, host: str, port: int, seconds: float) -> dict:
    """Connect, one 64-byte request/response, close, for ``seconds``; count completed connections."""
    payload = bytes(MESSAGE)
    done = failed = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        s = _client_socket(topo, socket.SOCK_STREAM, host)
        try:
            s.settimeout(3.0)
            s.connect((host, port))
            s.sendall(payload)
            _recv_exactly(s, MESSAGE)
            done += 1
        except (OSError, ClientError):
            failed += 1
            if failed >= 20 and failed > done:
                raise ClientError(f"{failed} connections failed ({done} completed)")
        finally:
            s.close()
    elapsed = time.perf_counter() - t0
    return {"completed": done, "failed": failed, "seconds": elapsed, "rate": done / elapsed}


def _pattern(size: int) -> bytes:
    return bytes(i * 7 & 0xFF for i in range(256)) * (size // 256) + bytes(i * 7 & 0xFF for i in range(size % 256))


def sized_tcp_rtts(topo, host: str, port: int, sizes, counts, warmup: int, timeout: float = 10.0) -> dict:
    """For each size: ``warmup`` then ``counts[size]`` echo round trips on one connection (TCP_NODELAY).

    Each echo is checked byte for byte after its clock stops. Returns
    ``{size: {"p50", "p99", "n"}}`` in µs.
    """
    out = {}
    clock = time.perf_counter_ns
    with _client_socket(topo, socket.SOCK_STREAM, host) as s:
        s.settimeout(timeout)
        s.connect((host, port))
        for size in sizes:
            payload = _pattern(size)
            buf = bytearray(size)
            view = memoryview(buf)
            rtts = []
            for i in range(warmup + counts[size]):
                t0 = clock()
                s.sendall(payload)
                got = 0
                while got < size:
                    k = s.recv_into(view[got:])
                    if not k:
                        raise ClientError(f"connection closed in the middle of a {size}-byte echo")
                    got += k
                t1 = clock()
                if buf != payload:
                    raise ClientError(f"a {size}-byte echo came back different")
                if i >= warmup:
                    rtts.append((t1 - t0) / 1e3)
            out[size] = {"p50": percentile(rtts, 50), "p99": percentile(rtts, 99), "n": len(rtts)}
        s.shutdown(socket.SHUT_WR)
        s.recv(1)
    return out


def _icmp_socket(topo):
    """An ICMP socket in the peer namespace and its kind: a ping socket ("icmp"), else a raw one ("icmp raw")."""
    from ustack.tools.netns import peer_socket

    try:
        with topo.in_peer_ns():
            with open("/proc/sys/net/ipv4/ping_group_range", "w") as f:
                f.write(f"0 {2 ** 31 - 2}")  # ping sockets for every group in this namespace (ours alone)
        return peer_socket(topo, type=socket.SOCK_DGRAM, proto=socket.IPPROTO_ICMP), "icmp"
    except OSError:
        pass
    try:
        return peer_socket(topo, type=socket.SOCK_RAW, proto=socket.IPPROTO_ICMP), "icmp raw"
    except OSError:
        return None, None


def _echo_request(ident: int, seq: int, payload: bytes) -> bytes:
    from ustack.wire.checksum import internet_checksum

    head = bytes((8, 0, 0, 0)) + ident.to_bytes(2, "big") + seq.to_bytes(2, "big")
    csum = internet_checksum(head + payload)
    return head[:2] + csum.to_bytes(2, "big") + head[4:] + payload


def ping_rtts(topo, host: str, count: int, interval: float, tcp_port: int, timeout: float = 1.0) -> dict:
    """``count`` echo requests ``interval`` apart (the server idles in between); RTTs in µs.

    ICMP echo (56 bytes of data, like ping) from a ping socket, or a raw
    socket when ping sockets are refused; without either, a 64-byte TCP echo
    on one connection at the same spacing. ``method`` says which.
    """
    sock, method = _icmp_socket(topo)
    clock = time.perf_counter_ns
    rtts, lost = [], 0
    if sock is None:
        with _client_socket(topo, socket.SOCK_STREAM, host) as s:
            s.settimeout(5.0)
            s.connect((host, tcp_port))
            payload = bytes(MESSAGE)
            next_at = time.perf_counter()
            for _ in range(count):
                next_at += interval
                time.sleep(max(0.0, next_at - time.perf_counter()))
                t0 = clock()
                s.sendall(payload)
                _recv_exactly(s, MESSAGE)
                rtts.append((clock() - t0) / 1e3)
        return {"p50": percentile(rtts, 50), "p99": percentile(rtts, 99), "n": len(rtts), "lost": 0,
                "method": f"tcp {MESSAGE} B"}
    payload = bytes(range(56))
    ident = os.getpid() & 0xFFFF
    with sock:
        sock.settimeout(timeout)
        sock.connect((host, 0))
        next_at = time.perf_counter()
        for seq in range(1, count + 1):
            next_at += interval
            time.sleep(max(0.0, next_at - time.perf_counter()))
            t0 = clock()
            sock.send(_echo_request(ident, seq, payload))
            deadline = t0 + int(timeout * 1e9)
            while True:
                try:
                    reply = sock.recv(2048)
                except TimeoutError:
                    lost += 1
                    break
                if method == "icmp raw":  # the IP header comes too; any ICMP message to us does
                    reply = reply[(reply[0] & 0xF) * 4:] if reply else reply
                    ok = len(reply) >= 8 and reply[0] == 0 and reply[4:6] == ident.to_bytes(2, "big")
                else:  # a ping socket gets its own echo replies only (the kernel rewrote the identifier)
                    ok = len(reply) >= 8 and reply[0] == 0
                if ok and reply[6:8] == seq.to_bytes(2, "big") and reply[8:] == payload:
                    rtts.append((clock() - t0) / 1e3)
                    break
                if clock() > deadline:
                    lost += 1
                    break
            if lost >= 10 and not rtts:
                raise ClientError(f"ping: {lost} echo requests unanswered")
    if not rtts:
        raise ClientError("ping: no replies")
    return {"p50": percentile(rtts, 50), "p99": percentile(rtts, 99), "n": len(rtts), "lost": lost,
            "method": method}


def connect_close(topo, host: str, port: int, seconds: float, max_count: int) -> dict:
    """connect() then close(), no data, for ``seconds`` (at most ``max_count``): connect() time and the rate."""
    times = []
    failed = 0
    clock = time.perf_counter_ns
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline and len(times) < max_count:
        s = _client_socket(topo, socket.SOCK_STREAM, host)
        try:
            s.settimeout(3.0)
            c0 = clock()
            s.connect((host, port))
            times.append((clock() - c0) / 1e3)
        except OSError:
            failed += 1
            if failed >= 20 and failed > len(times):
                raise ClientError(f"{failed} connects failed ({len(times)} completed)")
        finally:
            s.close()
    elapsed = time.perf_counter() - t0
    if not times:
        raise ClientError("no connect() completed")
    return {"connect_p50_us": percentile(times, 50), "connect_p99_us": percentile(times, 99),
            "completed": len(times), "failed": failed, "seconds": elapsed, "rate": len(times) / elapsed}


def widen_port_range(topo) -> None:
    """Closed client connections sit in TIME_WAIT: give the peer namespace the whole ephemeral range,
    let connect() reuse a TIME_WAIT port after a second (timestamps tell the old segments apart), and
    keep at most ``CLIENT_TIME_WAIT`` of them.

    Without the cap the client runs out of ports, not the server of speed: connect() takes even
    ports first, so after ~27,500 connections (55,000 ports / 2) every connect() searches the
    whole range for a TIME_WAIT it may reuse, about 4 ms each; whichever row had made the most
    connections by then collapsed (lwIP's connect+close: 14k/s, 13k/s, then 220/s, in any run
    long enough). The cap is the client's namespace only (``tcp_max_tw_buckets`` is per network
    namespace): a closed connection past it frees its port at once, as with no TIME_WAIT at all;
    the server side, where the stacks under test are, is not touched.
    """
    with topo.in_peer_ns():
        with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as f:
            f.write("10000 65000")
        with open("/proc/sys/net/ipv4/tcp_tw_reuse", "w") as f:
            f.write("1")
        with open("/proc/sys/net/ipv4/tcp_max_tw_buckets", "w") as f:
            f.write(str(CLIENT_TIME_WAIT))


def peer_echo_server(topo) -> subprocess.Popen:
    """``bench_servers.kernel_serve`` (the kernel echo server) in the peer namespace, started and ready."""
    code = ("import sys; from ustack.tools.bench_servers import kernel_serve; "
            "kernel_serve(sys.argv[1], 0)")
    proc = topo.peer_popen([sys.executable, "-c", code, topo.peer_addr], stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise RuntimeError("the kernel echo server did not start")
    return proc


@contextlib.contextmanager
def stack_side_sockets(topo, kind: str, backend: str, thread: bool = True):
    """A maker of the stack side's TCP sockets for a socket-layer benchmark: ``kind`` "kernel" gives
    kernel sockets in the stack's namespace (its address added), "ustack" the sockets of a Driver over
    ``backend`` (its background thread started when ``thread``), closed with its device afterwards."""
    from pyroute2 import IPRoute

    from ustack.api import environment
    from ustack.api.driver import Driver
    from ustack.stack import Stack

    if kind == "kernel":
        with topo.in_stack_ns(), IPRoute() as ipr:
            index = ipr.link_lookup(ifname=topo.stack_ifname)[0]
            ipr.addr("add", index=index, address=topo.stack_addr, prefixlen=topo.prefixlen)

        def make_socket():
            with topo.in_stack_ns():  # a kernel socket lives in the namespace it was made in
                return socket.socket(socket.AF_INET, socket.SOCK_STREAM)

        yield make_socket
        return
    stack = Stack(topo.open_device(backend), f"{topo.stack_addr}/{topo.prefixlen}", fastpath=environment.fastpath())
    driver = Driver(stack)
    try:
        if thread:
            driver.start()
        yield driver.socket
    finally:
        driver.close()
        stack.device.close()
