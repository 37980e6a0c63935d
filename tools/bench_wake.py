"""What a ping 10 ms apart costs on this machine, by who answers it (issue 10, the spaced ping).

Rows, each in a veth topology of its own, server on CPU 1 and this process (the kernel ping
client) on CPU 0, as ``ustack bench`` places them:

- ``kernel``: the kernel's own answer (it runs in the client's softirq: nothing wakes up);
- ``probe sleep`` / ``probe spin``: ``wake_probe.c`` (beside this module, built with the system's C
  compiler into a temporary directory), the smallest responder there is: an AF_PACKET socket, no
  stack; sleeping in poll(2) between requests, or spinning on recv(2). ``sleep`` is the floor of any
  server that sleeps between requests; ``spin`` what is left without the wake-up;
- ``ustack/<backend>``: ``ustack serve`` with its defaults (and ``--anticipate`` with ``--anticipate``).

Usage: ``python -m ustack.tools.bench_wake [--count 200] [--reps 3] [--backends afxdp,packet]
[--anticipate]``; prints the median p50 per row (µs), its ratio to the kernel's, the server's CPU
share during the pings and, for the probe, the median time of its send(2).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SOURCE = Path(__file__).with_name("wake_probe.c")
SERVER_CPU, CLIENT_CPU = 1, 0


def build_probe(directory: str) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("bench_wake: no C compiler (cc/gcc) for wake_probe.c")
    out = os.path.join(directory, "wake_probe")
    subprocess.run([cc, "-O2", "-o", out, str(SOURCE)], check=True)
    return out


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _pinned(argv: list) -> list:
    taskset = shutil.which("taskset")
    return [taskset, "-c", str(SERVER_CPU), *argv] if taskset else argv


def one_row(row: str, count: int, probe: str, anticipate: bool) -> dict:
    """One repetition of one row: ping p50 (µs), server CPU share (%), probe send() median (µs)."""
    from ustack.tools import bench_servers
    from ustack.tools.bench_clients import ping_rtts
    from ustack.tools.bench_config import TCP_ECHO
    from ustack.tools.netns import Topology

    with Topology.veth(tag="wk") as topo:
        server, proc, note = None, None, {}
        if row == "kernel":
            server = bench_servers.kernel_server(topo, 1000)
        elif row.startswith("probe"):
            proc = topo.stack_popen(_pinned([probe, topo.stack_ifname, topo.stack_addr, row.split()[1], "600"]),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"wake_probe did not start: {proc.stderr.read()}")
        else:
            backend = row.split("/", 1)[1]
            argv_hook = bench_servers.Server.__init__

            def pinned_init(self, topo_, argv, env=None, _init=argv_hook):
                _init(self, topo_, _pinned(list(argv) + (["--anticipate"] if anticipate else [])), env)

            bench_servers.Server.__init__ = pinned_init
            try:
                server, _ = bench_servers.ustack_server(topo, backend, 1000, None)
            finally:
                bench_servers.Server.__init__ = argv_hook
        pid = proc.pid if proc is not None else server.proc.pid
        try:
            ticks, wall = _cpu_ticks(pid), time.monotonic()
            result = ping_rtts(topo, topo.stack_addr, count, 0.01, TCP_ECHO)
            cpu = (_cpu_ticks(pid) - ticks) / os.sysconf("SC_CLK_TCK") / (time.monotonic() - wall) * 100
        finally:
            if proc is not None:
                proc.terminate()
                _, err = proc.communicate(timeout=10)
                for line in err.splitlines():
                    if line.startswith("send() median"):
                        note["send_us"] = int(line.split()[2]) / 1e3
            if server is not None:
                server.stop()
        return {"p50": result["p50"], "cpu": 0.0 if row == "kernel" else cpu, **note}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=200, help="pings per repetition (10 ms apart)")
    p.add_argument("--reps", type=int, default=3, help="repetitions, rows interleaved (medians reported)")
    p.add_argument("--backends", default="afxdp,packet", help="ustack rows (comma-separated; '' for none)")
    p.add_argument("--anticipate", action="store_true", help="the ustack rows with --anticipate")
    args = p.parse_args(argv)
    os.sched_setaffinity(0, {CLIENT_CPU})
    rows = ["kernel", "probe sleep", "probe spin"] + [f"ustack/{b}" for b in args.backends.split(",") if b]
    results: dict = {row: [] for row in rows}
    with tempfile.TemporaryDirectory() as tmp:
        probe = build_probe(tmp)
        for rep in range(args.reps):
            for row in rows:
                r = one_row(row, args.count, probe, args.anticipate)
                results[row].append(r)
                print(f"  rep {rep + 1}/{args.reps} {row}: ping p50 {r['p50']:.0f} µs, server CPU {r['cpu']:.1f}%"
                      + (f", send() {r['send_us']:.1f} µs" if "send_us" in r else ""), flush=True)
    kernel = statistics.median(r["p50"] for r in results["kernel"])
    print(f"{'row':16s} {'ping p50 µs':>12s} {'x kernel':>9s} {'CPU %':>6s} {'send() µs':>10s}")
    for row in rows:
        p50 = statistics.median(r["p50"] for r in results[row])
        cpu = statistics.median(r["cpu"] for r in results[row])
        sends = [r["send_us"] for r in results[row] if "send_us" in r]
        print(f"{row:16s} {p50:12.0f} {p50 / kernel:9.2f} {cpu:6.1f} "
              f"{statistics.median(sends) if sends else float('nan'):10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
