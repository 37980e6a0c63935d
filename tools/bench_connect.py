"""Connection setup through the socket layer: ustack's stream sockets against the kernel's, both sides.

    python -m ustack.tools.bench_connect [--backend afxdp] [--side connect,accept] [--seconds 2] [--reps 3]

``connect``: this process is the client. One thread does connect() then
close() (no data) for ``--seconds`` against the kernel echo server
(``bench_servers.kernel_serve``) in the peer namespace of a veth pair: on
ustack with ``driver.socket()`` of one Stack (its Driver's background
thread running, as a program that mixes threads would have it), on the
kernel with ordinary sockets in the stack namespace.

``accept``: this process is the server. One thread accept()s and closes
each connection (a listening ``driver.socket()`` on ustack, an ordinary
socket on the kernel) while a kernel client in the peer namespace does
connect()+close() for ``--seconds``. The server may close first, so its
end can be the one in TIME-WAIT; on the kernel row a later SYN that meets
such a record now and then waits for a 1 s retransmission, which pulls the
rate down: compare connect() p50 and CPU per connection on that side.

Printed per side and row (medians of ``--reps`` runs): connections per
second, connect() p50 (µs, as the client saw it) and this process's CPU
time per connection (µs, every thread: the stack's work on ustack, the
system calls on the kernel), with ustack's ratio to the kernel. Each row
has a topology of its own. Needs root (namespaces, veth, AF_XDP/AF_PACKET).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time

from ustack.tools.bench_clients import percentile
from ustack.tools.bench_config import TCP_ECHO

_CLIENT = """
import json, socket, sys, time
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
times, failed = [], 0
t0 = time.perf_counter()
while time.perf_counter() < t0 + seconds:
    s = socket.socket()
    s.settimeout(3.0)
    try:
        c0 = time.perf_counter_ns()
        s.connect((host, port))
        times.append((time.perf_counter_ns() - c0) / 1e3)
    except OSError:
        failed += 1
    finally:
        s.close()
print(json.dumps({"times": times, "failed": failed, "seconds": time.perf_counter() - t0}), flush=True)
"""


def connect_side(make_socket, host: str, seconds: float) -> dict:
    """connect()+close() from this process for ``seconds``: rate, connect() p50, CPU per connection."""
    times, failed = [], 0
    clock = time.perf_counter_ns
    cpu0, t0 = time.process_time(), time.perf_counter()
    while time.perf_counter() < t0 + seconds:
        s = make_socket()
        try:
            s.settimeout(3.0)
            c0 = clock()
            s.connect((host, TCP_ECHO))
            times.append((clock() - c0) / 1e3)
        except OSError:
            failed += 1
            if failed > 20 and failed > len(times):
                raise
        finally:
            s.close()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return _result(times, failed, elapsed, cpu)


def accept_side(topo, listener, seconds: float) -> dict:
    """A kernel client in the peer namespace connects and closes for ``seconds``; this process accepts."""
    stop = threading.Event()
    accepted = [0]

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, BlockingIOError):
                continue
            except OSError:
                if stop.is_set():
                    return
                raise
            accepted[0] += 1
            conn.close()

    server = threading.Thread(target=serve, daemon=True)
    cpu0 = time.process_time()
    server.start()
    host = listener.getsockname()[0]
    if host in ("0.0.0.0", "::"):
        host = topo.stack_addr
    out = topo.peer_run([sys.executable, "-c", _CLIENT, host, str(listener.getsockname()[1]), str(seconds)],
                        timeout=seconds + 60, capture_output=True, text=True)
    stop.set()
    server.join(5)
    cpu = time.process_time() - cpu0
    if out.returncode != 0:
        raise RuntimeError(f"the kernel client failed: {out.stderr.strip()[-400:]}")
    res = json.loads(out.stdout)
    return _result(res["times"], res["failed"], res["seconds"], cpu)


def _result(times: list, failed: int, elapsed: float, cpu: float) -> dict:
    if not times:
        raise RuntimeError(f"no connect() completed ({failed} failed)")
    return {"rate": len(times) / elapsed, "connect_p50": percentile(times, 50),
            "cpu_per_conn": cpu / len(times) * 1e6, "failed": failed}


def run_row(kind: str, backend: str, sides: list, seconds: float, reps: int, thread: bool = True) -> dict:
    """One row (``kind`` "kernel" or "ustack") on a topology of its own: {side: medians}.

    ``thread``: ustack's Driver runs its background thread (else the calling threads alone poll).
    """
    from ustack.tools.bench_clients import peer_echo_server, stack_side_sockets, widen_port_range
    from ustack.tools.netns import Topology

    with Topology.veth(tag="bc") as topo:
        widen_port_range(topo)
        server = peer_echo_server(topo) if "connect" in sides else None
        try:
            with stack_side_sockets(topo, kind, backend, thread) as make_socket:
                row = {}
                for side in sides:
                    runs = []
                    for _ in range(reps):
                        if side == "connect":
                            runs.append(connect_side(make_socket, topo.peer_addr, seconds))
                        else:
                            lst = make_socket()
                            lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                            lst.bind((topo.stack_addr, 0))
                            lst.listen(128)
                            try:
                                runs.append(accept_side(topo, lst, seconds))
                            finally:
                                lst.close()
                    row[side] = {k: statistics.median(r[k] for r in runs)
                                 for k in ("rate", "connect_p50", "cpu_per_conn")}
                    row[side]["runs"] = [round(r["rate"]) for r in runs]
                return row
        finally:
            if server is not None:
                server.terminate()
                server.wait(10)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ustack.tools.bench_connect",
                                description="connection setup through the socket layer: ustack vs kernel")
    p.add_argument("--backend", default="afxdp", help="ustack's backend (afxdp, packet)")
    p.add_argument("--side", default="connect,accept", help="connect (ustack client), accept (ustack server)")
    p.add_argument("--seconds", type=float, default=2.0, help="seconds per run")
    p.add_argument("--reps", type=int, default=3, help="runs per side (median reported)")
    p.add_argument("--rows", default="kernel,ustack", help="kernel, ustack or both")
    p.add_argument("--no-thread", action="store_true",
                   help="no Driver background thread on ustack: the blocked caller alone polls")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    sides = [s for s in args.side.split(",") if s]
    kinds = [k for k in args.rows.split(",") if k]
    if (not sides or any(s not in ("connect", "accept") for s in sides) or not kinds
            or any(k not in ("kernel", "ustack") for k in kinds) or args.seconds <= 0 or args.reps <= 0):
        build_parser().error("--side takes connect and/or accept, --rows kernel and/or ustack; "
                             "--seconds and --reps must be positive")
    rows = {kind: run_row(kind, args.backend, sides, args.seconds, args.reps, not args.no_thread)
            for kind in kinds}
    for side in sides:
        for kind, row in rows.items():
            r = row[side]
            ratio = ""
            if kind != "kernel" and "kernel" in rows:
                k = rows["kernel"][side]
                ratio = (f"  (x kernel: rate {r['rate'] / k['rate']:.2f}, connect() {r['connect_p50'] / k['connect_p50']:.2f},"
                         f" CPU {r['cpu_per_conn'] / k['cpu_per_conn']:.2f})")
            name = kind if kind == "kernel" else f"ustack/{args.backend}"
            print(f"{side:8s} {name:14s} {r['rate']:7.0f} conn/s  connect() p50 {r['connect_p50']:6.0f} µs  "
                  f"CPU {r['cpu_per_conn']:5.0f} µs/conn  runs {r['runs']}{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
