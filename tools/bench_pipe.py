"""CPU cost of the whole stack: a TCP bulk transfer between two Stacks over the pipe backend.

Two stacks on one ManualClock exchange ``--bytes`` one way through the
in-memory pipe (no kernel, no sleeping: simulated time); the figure is the
process CPU time of the transfer, which depends on ustack's per-segment
work alone and so compares two versions of the code far more steadily than
wall-clock figures on a shared machine. Medians of ``--runs``.

    python -m ustack.tools.bench_pipe [--bytes 20000000] [--runs 5] [--ipv6]

``--ipv6`` runs the same transfer over IPv6 (fd00::1 <- fd00::2) and prints
both families' figures and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

from ustack.api.clock import ManualClock
from ustack.backends.pipe import PipeLink
from ustack.net.addr import ANY4, ANY6, parse
from ustack.stack import Stack
from ustack.transport.tcp.tcb import State


def transfer_cpu_seconds(size: int, seed: int = 1, ipv6: bool = False) -> float:
    clock = ManualClock(1000.0)
    link = PipeLink(clock, seed=seed, delay=0.0005)
    if ipv6:
        a = Stack(link.a, ["198.18.0.1/24", "fd00::1/64"])
        b = Stack(link.b, ["198.18.0.2/24", "fd00::2/64"])
        for _ in range(300):  # duplicate address detection first (RFC 4862), in simulated time
            a.poll(clock.now), b.poll(clock.now)
            clock.set(clock.now + 0.01)
    else:
        a, b = Stack(link.a, "198.18.0.1/24"), Stack(link.b, "198.18.0.2/24")
    lst = a.tcp.listen((ANY6 if ipv6 else ANY4, 80), 4)
    conn = b.tcp.connect(None, (parse("fd00::1" if ipv6 else "198.18.0.1"), 80), clock.now)
    chunk = memoryview(bytes(65536))
    sent = got = 0
    server = None
    start = time.process_time()
    while got < size:
        now = clock.now
        deadlines = [d for d in (a.poll(now), b.poll(now)) if d is not None]
        if server is None:
            server = lst.accept()
        if sent < size and conn.state == State.ESTABLISHED:
            sent += conn.send(chunk[:min(len(chunk), size - sent)], now)
        if server is not None:
            while data := server.recv(1 << 20, now):
                got += len(data)
        nxt = min(deadlines) if deadlines else now
        clock.set(nxt if nxt > now else now + 1e-6)
    return time.process_time() - start


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ustack.tools.bench_pipe", description=__doc__.splitlines()[0])
    p.add_argument("--bytes", type=int, default=20_000_000, help="bytes to transfer (default 20 MB)")
    p.add_argument("--runs", type=int, default=5, help="runs (median reported)")
    p.add_argument("--ipv6", action="store_true", help="also over IPv6, and the ratio")
    args = p.parse_args(argv)
    if args.bytes <= 0 or args.runs <= 0:
        p.error("--bytes and --runs must be positive")
    meds = {}
    for family in ((False, True) if args.ipv6 else (False,)):
        runs = []
        for _ in range(args.runs):
            runs.append(transfer_cpu_seconds(args.bytes, ipv6=family))
        med = meds[family] = statistics.median(runs)
        print(f"TCP over {'IPv6 over ' if family else ''}the pipe, {args.bytes} bytes: median {med:.3f} s CPU "
              f"({args.bytes / med / 1e6:.1f} MB/s of CPU), runs {', '.join(f'{r:.3f}' for r in runs)}")
    if args.ipv6:
        print(f"IPv6 / IPv4 CPU: {meds[True] / meds[False]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
