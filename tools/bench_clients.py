"""The kernel client of ``ustack bench``: one measurement each, sockets made in the peer namespace.

Each function runs in this process against a ready server at ``host``:

- ``udp_rtts`` / ``tcp_rtts``: ``MESSAGE``-byte ping-pong on one socket /
  one connection after a warm-up; p50 and p99 in µs (nearest rank);
- ``push`` (to the discard service) and ``pull`` (from the source service):
  bounded in bytes and in time; MB/s;
- ``connections_per_second``: connect, one request/response, close, for a
  fixed time.

A client that cannot go on raises ``ClientError``.
"""

from __future__ import annotations

import socket
import time

from ustack.tools.bench_config import MESSAGE


def percentile(values, q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100)
    return float(ordered[min(int(rank), len(ordered)) - 1])


class ClientError(RuntimeError):
    pass


def _client_socket(topo, kind: int) -> socket.socket:
    from ustack.tools.netns import peer_socket

    s = peer_socket(topo, type=kind)
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
    with _client_socket(topo, socket.SOCK_DGRAM) as s:
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
    with _client_socket(topo, socket.SOCK_STREAM) as s:
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
    with _client_socket(topo, socket.SOCK_STREAM) as s:
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
    with _client_socket(topo, socket.SOCK_STREAM) as s:
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
        s = _client_socket(topo, socket.SOCK_STREAM)
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


def widen_port_range(topo) -> None:
    """Closed client connections sit in TIME_WAIT: give the peer namespace the whole ephemeral range."""
    with topo.in_peer_ns():
        with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as f:
            f.write("10000 65000")
