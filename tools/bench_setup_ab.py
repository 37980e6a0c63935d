"""An A/B of one ``USTACK_*`` switch on ``ustack serve``'s connection setup, under a kernel connect()+close() client.

    python -m ustack.tools.bench_setup_ab [--backend afxdp] [--var USTACK_ACK_C] [--pairs 4] [--seconds 3]

One veth topology; for each of ``--pairs`` pairs, ``ustack serve`` is started with the variable at 0 and at 1
(the order alternates pair by pair), pinned to CPU 1 (this process, the client, to CPU 0), warmed up for
0.3 s, then the kernel client (``bench_clients.connect_close``) connects and closes for ``--seconds``.
Printed per run and as medians per setting: connections per second, connect() p50 as the client saw it,
and the server's CPU per connection (its utime + stime from /proc, over the timed part). Busy polling is
off by default (``ustack serve --busy-poll 0``; ``--busy-poll`` here keeps the server's default): a server that spins
after every busy round fills its saved time with spinning, so its CPU would not show the work.
Needs root (namespaces, veth, AF_XDP/AF_PACKET) and two CPUs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(backend: str, var: str, pairs: int, seconds: float, busy_poll: bool) -> dict:
    from ustack.tools.bench_clients import connect_close, widen_port_range
    from ustack.tools.bench_config import TCP_ECHO
    from ustack.tools.bench_servers import ustack_server
    from ustack.tools.netns import Topology

    saved = {var: os.environ.get(var)}
    extra = () if busy_poll else ("--busy-poll", "0")
    results: dict = {"0": [], "1": []}
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    try:
        with Topology.veth(tag="ab") as topo:
            widen_port_range(topo)
            for i in range(pairs):
                for value in ("0", "1") if i % 2 == 0 else ("1", "0"):
                    os.environ[var] = value
                    server, _ = ustack_server(topo, backend, 1000, None, extra)
                    try:
                        os.sched_setaffinity(server.proc.pid, {1})
                        connect_close(topo, topo.stack_addr, TCP_ECHO, 0.3, 10 ** 6)  # warm-up
                        c0 = _cpu_seconds(server.proc.pid)
                        r = connect_close(topo, topo.stack_addr, TCP_ECHO, seconds, 10 ** 7)
                        c1 = _cpu_seconds(server.proc.pid)
                    finally:
                        server.stop()
                    row = {"rate": r["rate"], "connect_p50_us": r["connect_p50_us"],
                           "cpu_us_per_conn": (c1 - c0) / r["completed"] * 1e6}
                    results[value].append(row)
                    print(f"pair {i + 1} {var}={value}: {row['rate']:.0f} conn/s, connect() p50 "
                          f"{row['connect_p50_us']:.0f} µs, server CPU {row['cpu_us_per_conn']:.0f} µs/conn", flush=True)
    finally:
        os.sched_setaffinity(0, cpus)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ustack.tools.bench_setup_ab", description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="afxdp", help="ustack serve's backend (afxdp, packet)")
    p.add_argument("--var", default="USTACK_ACK_C", help="the switch set to 0 and 1 (default USTACK_ACK_C)")
    p.add_argument("--pairs", type=int, default=4, help="interleaved pairs (default 4)")
    p.add_argument("--seconds", type=float, default=3.0, help="timed seconds per run (default 3)")
    p.add_argument("--busy-poll", action="store_true", help="keep the server's busy polling (default: off)")
    args = p.parse_args(argv)
    if args.pairs <= 0 or args.seconds <= 0:
        p.error("--pairs and --seconds must be positive")
    if len(os.sched_getaffinity(0)) < 2:
        print("bench_setup_ab: needs two CPUs", file=sys.stderr)
        return 2
    results = run(args.backend, args.var, args.pairs, args.seconds, args.busy_poll)
    for value in ("0", "1"):
        rows = results[value]
        print(f"{args.var}={value} medians: {statistics.median(r['rate'] for r in rows):.0f} conn/s, connect() p50 "
              f"{statistics.median(r['connect_p50_us'] for r in rows):.0f} µs, server CPU "
              f"{statistics.median(r['cpu_us_per_conn'] for r in rows):.0f} µs/conn")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
