"""Request latency of a threaded, blocking program on ustack and on the kernel, with 1, 10 and 100 threads.

    python -m ustack.tools.bench_threads [--backend packet] [--threads 1,10,100] [--seconds 2] [--reps 3]

The program under test is the plain threaded client most applications are:
N threads, each with its own blocking TCP connection, each doing 64-byte
request/response round trips (``sendall`` then ``recv`` until the answer is
whole) for ``--seconds``. On ustack the sockets are ``driver.socket()`` of
one Stack whose Driver runs its background thread (so the threads share one
poll loop and one GIL with it); on the kernel they are ordinary sockets in
the same kind of namespace. The server is the same kernel echo server
(ustack.tools.bench_servers.kernel_serve, one selector loop) in the peer
namespace of a veth pair in both rows, each row on a topology of its own.

Printed per thread count: round trips per second (all threads), p50 and p99
of one round trip in µs, and ustack's ratio to the kernel (medians of
``--reps`` runs). Needs root (namespaces, veth, AF_PACKET / AF_XDP).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time

from ustack.tools.bench_clients import percentile
from ustack.tools.bench_config import TCP_ECHO

MESSAGE = bytes(range(64))


def _round_trips(sock, deadline: float, out: list, errors: list) -> None:
    buf = bytearray(len(MESSAGE))
    view = memoryview(buf)
    clock = time.perf_counter_ns
    try:
        while time.perf_counter() < deadline:
            t0 = clock()
            sock.sendall(MESSAGE)
            got = 0
            while got < len(MESSAGE):
                n = sock.recv_into(view[got:])
                if not n:
                    raise ConnectionError("echo server closed the connection")
                got += n
            out.append((clock() - t0) / 1e3)
            if buf != MESSAGE:
                raise AssertionError("echo answered different bytes")
    except Exception as exc:  # reported by the caller, with the thread count
        errors.append(exc)


def measure(make_socket, host: str, threads: int, seconds: float) -> dict:
    """``threads`` threads doing round trips on their own connection; returns rate, p50, p99."""
    socks = []
    try:
        for _ in range(threads):
            s = make_socket()
            s.settimeout(10)
            s.connect((host, TCP_ECHO))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks.append(s)
        results = [[] for _ in socks]
        errors: list = []
        deadline = time.perf_counter() + seconds
        workers = [threading.Thread(target=_round_trips, args=(s, deadline, r, errors)) for s, r in zip(socks, results)]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join(seconds + 30)
        elapsed = time.perf_counter() - t0
    finally:
        for s in socks:
            s.close()
    if errors:
        raise RuntimeError(f"{len(errors)} of {threads} threads failed: {errors[0]!r}")
    rtts = [x for r in results for x in r]
    if not rtts:
        raise RuntimeError("no round trip completed")
    return {"rate": len(rtts) / elapsed, "p50": percentile(rtts, 50), "p99": percentile(rtts, 99)}


def run_row(kind: str, backend: str, counts: list, seconds: float, reps: int) -> dict:
    """One row (``kind`` "kernel" or "ustack") on a topology of its own: {threads: medians}."""
    from ustack.tools.bench_clients import peer_echo_server, stack_side_sockets
    from ustack.tools.netns import Topology

    with Topology.veth(tag="bt") as topo:
        server = peer_echo_server(topo)
        try:
            with stack_side_sockets(topo, kind, backend) as make_socket:
                row = {}
                for n in counts:
                    runs = [measure(make_socket, topo.peer_addr, n, seconds) for _ in range(reps)]
                    row[n] = {k: statistics.median(r[k] for r in runs) for k in ("rate", "p50", "p99")}
                return row
        finally:
            server.terminate()
            server.wait(10)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ustack.tools.bench_threads",
                                description="request latency of a threaded blocking program: ustack vs kernel")
    p.add_argument("--backend", default="packet", choices=("packet", "afxdp", "tap"))
    p.add_argument("--threads", default="1,10,100", metavar="LIST", help="thread counts (default: %(default)s)")
    p.add_argument("--seconds", type=float, default=2.0, metavar="S", help="per run (default: %(default)s)")
    p.add_argument("--reps", type=int, default=3, metavar="N",
                   help="runs per figure, median reported (default: %(default)s)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        counts = [int(x) for x in args.threads.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or any(not 1 <= n <= 1000 for n in counts) or not 0.1 <= args.seconds <= 600 \
            or not 1 <= args.reps <= 20:
        print("bench_threads: --threads takes counts 1..1000, --seconds 0.1..600, --reps 1..20", file=sys.stderr)
        return 2
    kernel = run_row("kernel", args.backend, counts, args.seconds, args.reps)
    ours = run_row("ustack", args.backend, counts, args.seconds, args.reps)
    print(f"64-byte TCP request/response, one blocking connection per thread, {args.seconds:g} s x {args.reps} "
          f"(medians); ustack on {args.backend}")
    print(f"{'threads':>7}  {'kernel rt/s':>11} {'p50 µs':>8} {'p99 µs':>8}  {'ustack rt/s':>11} {'p50 µs':>8} "
          f"{'p99 µs':>8}  {'p50 ×kernel':>11}")
    for n in counts:
        k, u = kernel[n], ours[n]
        print(f"{n:>7}  {k['rate']:>11.0f} {k['p50']:>8.0f} {k['p99']:>8.0f}  {u['rate']:>11.0f} {u['p50']:>8.0f} "
              f"{u['p99']:>8.0f}  {u['p50'] / k['p50']:>11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
