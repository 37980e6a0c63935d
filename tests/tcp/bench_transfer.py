"""CPU cost of the pure-Python TCP engine: a 20 MB one-way transfer between two TcpLayers.

Runs on the end-to-end tests' in-memory link and manual clock (no loss, 1 ms
one-way delay, default TcpConfig: window scaling, timestamps and SACK on),
so only protocol work is timed. Prints the median CPU time of several runs.

    .venv/bin/python -m tests.tcp.bench_transfer [--size MB] [--runs N]

Not collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

import argparse
import statistics
import time

from tests.tcp.test_tcp_end_to_end import B_ADDR, World
from ustack.transport.tcp import State


def one_run(size: int, seed: int = 7) -> float:
    w = World(seed, dict(delay=0.001))
    data = bytes(range(256)) * (65536 // 256)
    lst = w.b.listen((B_ADDR, 80), 4)
    client = w.a.connect(None, (B_ADDR, 80), w.now)
    box = {"server": None, "sent": 0, "got": 0, "shut": False}

    def step(now: float) -> bool:
        if box["server"] is None:
            box["server"] = lst.accept()
        if client.state == State.ESTABLISHED and box["sent"] < size:
            while box["sent"] < size:
                n = client.send(data[: min(len(data), size - box["sent"])])
                if not n:
                    break
                box["sent"] += n
        if box["sent"] == size and not box["shut"]:
            client.shutdown(1)
            box["shut"] = True
        srv = box["server"]
        if srv is not None:
            while True:
                got = srv.recv(1 << 20)
                if not got:
                    break
                box["got"] += len(got)
            return srv.eof
        return False

    t0 = time.process_time()
    w.run(step, 3600.0)
    t1 = time.process_time()
    assert box["got"] == size, (box["got"], size)
    return t1 - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=20, help="megabytes (default 20)")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    times = [one_run(args.size * 1_000_000) for _ in range(args.runs)]
    print(" ".join(f"{t:.3f}" for t in times))
    print(f"median CPU time for {args.size} MB: {statistics.median(times):.3f} s")


if __name__ == "__main__":
    main()
