"""Request/response latency in simulated time: two stacks over the pipe backend on a manual clock.

A client sends a ``--size``-byte request; the server either echoes bytes as
they arrive (``--mode echo``, like ``ustack serve --tcp-echo``) or answers
with ``--size`` bytes once the whole request is in (``--mode rpc``). Default
options on both sides (Nagle on, delayed ACK on). The pipe delays every frame
by ``--delay`` seconds, so the round trip is pure protocol timing: 4 x delay
when nothing waits for a timer, ~40 ms more per delayed-ACK stall.

    .venv/bin/python -m tests.tcp.bench_rpc [--size 2000] [--count 20] [--mode rpc|echo]

Not collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

import argparse
import statistics

from tests.stack.netsim import Net

A = b"\xc6\x12\x00\x01"


def run(size: int, count: int, mode: str, delay: float) -> list[float]:
    with Net(delay=delay) as net:
        lst = net.a.tcp.listen((A, 7000), 4)
        box = {"srv": None, "pending": 0}

        def serve(conn) -> None:
            while True:
                data = conn.recv(1 << 16)
                if not data:
                    break
                if mode == "echo":
                    conn.send(data)
                else:
                    box["pending"] += len(data)
                    if box["pending"] >= size:
                        box["pending"] -= size
                        conn.send(b"r" * size)

        def accept(listener) -> None:
            conn = listener.accept()
            if conn is not None:
                box["srv"] = conn
                conn.on_event = serve

        lst.on_event = accept
        cli = net.b.tcp.connect(None, (A, 7000), net.clock.now)
        assert net.run(until=lambda: cli.connected and box["srv"] is not None, max_time=5)
        rtts = []
        for _ in range(count):
            net.run(max_time=0.5)  # think time between requests
            t0 = net.clock.now
            cli.send(b"q" * size, now=t0)
            got = [0]

            def done() -> bool:
                got[0] += len(cli.recv(1 << 16))
                return got[0] >= size

            assert net.run(until=done, max_time=5)
            rtts.append(net.clock.now - t0)
        return rtts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=2000)
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--mode", choices=("rpc", "echo"), default="rpc")
    ap.add_argument("--delay", type=float, default=15e-6, help="one-way pipe delay (s)")
    args = ap.parse_args()
    rtts = run(args.size, args.count, args.mode, args.delay)
    print(f"{args.mode} {args.size} B x {args.count}: median {statistics.median(rtts) * 1e3:.3f} ms, "
          f"min {min(rtts) * 1e3:.3f} ms, max {max(rtts) * 1e3:.3f} ms (simulated; one-way delay "
          f"{args.delay * 1e6:.0f} us)")


if __name__ == "__main__":
    main()
