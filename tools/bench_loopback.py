"""Loopback request/response latency and bulk throughput: ustack's loopback interface beside the kernel's.

    python -m ustack.tools.bench_loopback [--count N] [--bytes B] [--reps R]

Both ends in this process, as a program under ``ustack run --loopback``
has them: a server thread and the client, over 127.0.0.1. The kernel row
uses the kernel's sockets; the ustack row a ``Stack(loopback=True)``
(``ustack.api.loopback``) with its Driver thread. Figures: 64-byte TCP
request/response round trip p50/p99 (after a warm-up), and a bulk
transfer (client -> server, discarded) in MB/s; medians of ``--reps``.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time

from ustack.api.clock import MonotonicClock
from ustack.api.loopback import close_loopback, open_loopback

CHUNK = 65536


def _serve_echo(srv) -> None:
    conn, _ = srv.accept()
    with conn:
        while True:
            data = conn.recv(CHUNK)
            if not data:
                return
            conn.sendall(data)


def _serve_discard(srv, counted) -> None:
    conn, _ = srv.accept()
    with conn:
        n = 0
        while True:
            data = conn.recv(CHUNK)
            if not data:
                counted.append(n)
                return
            n += len(data)


def _pair(make, target, *extra):
    srv = make()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    t = threading.Thread(target=target, args=(srv, *extra), daemon=True)
    t.start()
    cli = make()
    cli.settimeout(30)
    cli.connect(srv.getsockname())
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return srv, cli, t


def rtt(make, count: int, warmup: int = 200) -> dict:
    srv, cli, t = _pair(make, _serve_echo)
    msg = b"x" * 64
    samples = []
    try:
        for i in range(warmup + count):
            t0 = time.perf_counter()
            cli.sendall(msg)
            got = 0
            while got < len(msg):
                got += len(cli.recv(CHUNK))
            if i >= warmup:
                samples.append(time.perf_counter() - t0)
    finally:
        cli.close()
        t.join(10)
        srv.close()
    samples.sort()
    return {"p50_us": round(samples[len(samples) // 2] * 1e6, 1),
            "p99_us": round(samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1e6, 1)}


def bulk(make, nbytes: int) -> float:
    counted: list[int] = []
    srv, cli, t = _pair(make, _serve_discard, counted)
    block = memoryview(bytes(CHUNK))
    t0 = time.perf_counter()
    try:
        sent = 0
        while sent < nbytes:
            cli.sendall(block[:min(CHUNK, nbytes - sent)])
            sent += min(CHUNK, nbytes - sent)
    finally:
        cli.close()
        t.join(60)
        srv.close()
    seconds = time.perf_counter() - t0
    if counted != [nbytes]:
        raise RuntimeError(f"the server counted {counted} bytes of {nbytes}")
    return round(nbytes / seconds / 1e6, 1)


def measure(count: int = 2000, nbytes: int = 20_000_000, reps: int = 3) -> list[dict]:
    """[{"row": "kernel"|"ustack", "rtt_p50_us", "rtt_p99_us", "bulk_MBps"}], medians of ``reps``."""
    lo = open_loopback(MonotonicClock())
    lo.start()
    rows = []
    try:
        for name, make in (("kernel", socket.socket), ("ustack", lambda: lo.socket())):
            rtts = [rtt(make, count) for _ in range(reps)]
            rates = [bulk(make, nbytes) for _ in range(reps)]
            rows.append({"row": name, "rtt_p50_us": statistics.median(r["p50_us"] for r in rtts),
                         "rtt_p99_us": statistics.median(r["p99_us"] for r in rtts),
                         "bulk_MBps": statistics.median(rates)})
    finally:
        close_loopback(lo)
    return rows


def format_rows(rows: list[dict]) -> str:
    lines = ["loopback (both ends in one process, 127.0.0.1)    64 B RTT p50 / p99 (µs)    bulk (MB/s)"]
    for r in rows:
        lines.append(f"  {r['row']:46} {r['rtt_p50_us']:9.1f} / {r['rtt_p99_us']:<9.1f}   {r['bulk_MBps']:10.1f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ustack.tools.bench_loopback", description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=2000, help="timed round trips per repetition")
    p.add_argument("--bytes", type=int, default=20_000_000, help="bytes per bulk transfer")
    p.add_argument("--reps", type=int, default=3, help="repetitions (median reported)")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args(argv)
    rows = measure(args.count, args.bytes, args.reps)
    print(format_rows(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
