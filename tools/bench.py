"""``ustack bench``: ustack on each backend side by side with the kernel's own stack.

    ustack bench [--quick] [--backends afxdp,packet,tap,lwip,pytcp] [--json FILE] [--png FILE]
    python -m ustack.tools.bench ...

One run measures, for every row, the same kernel client (sockets in the
peer namespace of a ustack.tools.netns topology) against a server in the stack
namespace:

- UDP and TCP 64-byte echo round-trip time, p50 and p99 (ping-pong on one
  socket / one connection, after a warm-up);
- TCP push (client -> server's discard) and pull (server's source -> client)
  throughput in MB/s at 1500 MTU, each transfer bounded in bytes and time;
- TCP connections per second: connect, one 64-byte request/response, close,
  counted over a fixed time;
- the latency suite (off with ``--no-latency``): TCP echo round trip p50/p99
  by message size (64 B, 1000 B, 2000 B, 3000 B, 20 KB, 100 KB) on one
  connection; an ICMP echo every 10 ms from the kernel client (a ping
  socket, or a raw one; a 64-byte TCP echo if neither opens), so the server
  idles between requests; connect() time p50/p99 and connect+close per
  second (no data). Printed with each stack side by side and its ratio to
  the kernel; in the JSON as each row's ``latency`` and as ``latency_table``;
  three panels of the PNG.

Rows: ``kernel`` (the kernel's own sockets serving in the stack namespace
of a veth topology of its own, so it never sees ustack's frames), ``ustack``
on each backend (``python -m ustack serve --backend B``, veth topology; TAP
topology for tap), ``lwip`` (lwIP's raw API in C over its own TAP driver,
ustack.tools.bench_lwip, built on first use when Debian's liblwip-dev is
installed) and ``pytcp`` (PyTCP, the pmd-pytcp package, on a TAP
topology) when that package is installed; an absent reference stack is a
"not available" row with the reason. For every row, the server process's
CPU during push, pull and connections is reported too (% of one CPU, µs
per 1448-byte segment, µs per connection). Figures are medians of
``--reps`` repetitions; each repetition's figure is in the JSON.

The unmodified-program rows (off with ``--no-program``): the stdlib's
``python -m http.server`` on the kernel and unchanged under ``ustack run`` on
each backend, fetched back to back by a small HTTP loop in the peer
namespace: requests per second and p50/p99 latency
(ustack.tools.bench_program); in the JSON as ``programs``.

IPv6 rows (off with ``--no-ipv6``): the kernel and each ustack backend
again on a topology whose ends also speak IPv6 (fd00::1 -> fd00::2), the
client reaching the stack's IPv6 address: the same services and metrics
(no latency suite), then a table of each IPv6 row's ratio to the same
stack's IPv4 row.

The loopback rows (off with ``--no-loopback``): 64-byte TCP
request/response RTT and bulk MB/s over 127.0.0.1 with both ends in this
process, on the kernel and on ustack's loopback interface (``ustack run
--loopback``; ustack.tools.bench_loopback); in the JSON as ``loopback``.

A second table gives the per-backend ring cost: raw 60-byte (64 on a wire)
UDP frames per second received and transmitted and this process's CPU µs
per frame, next to a kernel UDP socket, measured by ustack.tools.bench_rings (tap,
packet) and ustack.tools.bench_afxdp (afxdp, kernel socket).

Placement: with two or more CPUs the server process (ustack serve, the
kernel server, PyTCP) is pinned to one CPU and the client (this process) to
another (taskset / sched_setaffinity); in the ring benchmark this process is
the stack side and the kernel sender/receiver processes are pinned to the
client CPU. The kernel's own softirq work runs wherever the sending thread
runs. The machine is shared: the spread between repetitions is in the JSON.

Every namespace and process the run starts is removed on exit, on errors and
on Ctrl-C (ustack.tools.netns reaps topologies and the processes they started).

This module is the command line; the pieces live apart: bench_config (ports,
metrics, suites), bench_clients (the kernel client's measurements),
bench_servers (the servers and how they are started), bench_runner (rows,
rings, placement) and bench_report (table, JSON, PNG, notes).
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, replace
from typing import Optional

from ustack.tools import bench_loopback, bench_matrix
from ustack.tools.bench_config import REFERENCE_KINDS, ROW_KINDS, USTACK_BACKENDS, BenchConfig
from ustack.tools.bench_report import draw_png, format_table, latency_table, notes_for, write_json
from ustack.tools.bench_program import run_program_row
from ustack.tools.bench_runner import Placement, machine_info, run_ring, run_row
from ustack.tools.cli_types import float_range, int_range
from ustack.tools.host_programs import MissingProgram

MAX_TUNE = 10_000_000  # the largest count or number of seconds a size override takes


def _selection(text: Optional[str]) -> list[str]:
    if text is None:
        from ustack.backends.registry import available_backends

        return [k for k in USTACK_BACKENDS if k in available_backends()] + list(REFERENCE_KINDS)
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in ROW_KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown backend(s) {', '.join(unknown)} (known: {', '.join(ROW_KINDS)})")
    return kinds


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``ustack bench``'s arguments (suites, rows, sizes, outputs) to ``p``."""
    p.add_argument("--quick", action="store_true", help="the under-a-minute suite (1 rep, fewer round trips)")
    p.add_argument("--backends", metavar="LIST",
                   help=f"comma-separated rows besides the kernel's, from {','.join(ROW_KINDS)} "
                        "(default: every available backend, lwip and pytcp)")
    p.add_argument("--json", default="bench.json", metavar="FILE", help="results as JSON (default: %(default)s)")
    p.add_argument("--png", default="bench.png", metavar="FILE",
                   help="chart (needs matplotlib; default: %(default)s); '' for none")
    p.add_argument("--xdp-mode", choices=("auto", "native", "generic"), default="auto", help="afxdp attach mode")
    p.add_argument("--no-rings", action="store_true", help="skip the per-backend ring cost table")
    p.add_argument("--no-latency", action="store_true", help="skip the latency suite (sizes, ping, connect)")
    p.add_argument("--no-ipv6", action="store_true",
                   help="skip the IPv6 rows (the kernel and each ustack backend again over IPv6: RTT, MB/s, conn/s)")
    p.add_argument("--no-loopback", action="store_true",
                   help="skip the loopback rows (ustack --loopback vs the kernel's 127.0.0.1, both ends in-process)")
    p.add_argument("--no-program", action="store_true",
                   help="skip the unmodified-program rows (python -m http.server on ustack vs the kernel)")
    p.add_argument("--no-offloads", action="store_true",
                   help="skip the rows over a veth left at the kernel's default offloads (partial checksums, TSO)")
    p.add_argument("--programs", action="store_true",
                   help="only the program matrix: unmodified servers under wrk / a C echo client, at 1 and 32 "
                        "connections, on the kernel and under ustack run (ustack.tools.bench_matrix)")
    p.add_argument("--no-matrix", action="store_true", help="skip the program matrix in the default bench")
    p.add_argument("--matrix-rows", metavar="LIST",
                   help="the matrix's programs whose names contain one of these comma-separated words (default: all)")
    p.add_argument("--matrix-connections", metavar="LIST",
                   help="the matrix's connection counts (default: 1,32; with --quick in the default bench: 1)")
    p.add_argument("--hog", action="store_true",
                   help="the matrix with a busy loop pinned on the client's core (the other core busy)")
    p.add_argument("--no-loss", action="store_true",
                   help="skip the bulk-under-loss row (pipe at 1%% and 3%%, veth with nftables drops: bench_loss)")
    p.add_argument("--steer-client-rx", action="store_true",
                   help="RPS on the client's veth: its kernel receive work on the client's CPU as between two hosts "
                        "(else it runs on the CPU that sent the frame: the server's for its ACKs and data)")
    p.add_argument("--loss", type=int, default=3, metavar="PERCENT",
                   help="TCP segments the kernel side drops each way in the loss row (default: %(default)s)")
    tune = p.add_argument_group("sizes (override the suite's)")
    tune.add_argument("--reps", type=_positive(int), help="repetitions per metric (median reported)")
    tune.add_argument("--rtt-count", type=_positive(int), help="timed round trips per RTT repetition")
    tune.add_argument("--rtt-warmup", type=_positive(int, zero=True), help="untimed round trips first")
    tune.add_argument("--bulk-bytes", type=_positive(int), help="bytes per push/pull transfer")
    tune.add_argument("--bulk-seconds", type=_positive(float), help="time cap per push/pull transfer")
    tune.add_argument("--cps-seconds", type=_positive(float), help="seconds of connect/request/close per rep")
    tune.add_argument("--lat-count", type=_positive(int), help="timed round trips per message size up to 3000 B")
    tune.add_argument("--ping-count", type=_positive(int), help="pings, 10 ms apart, per repetition")
    tune.add_argument("--connect-seconds", type=_positive(float), help="seconds of connect+close per repetition")
    tune.add_argument("--program-seconds", type=_positive(float),
                      help="seconds of back-to-back HTTP requests per program-row repetition")
    tune.add_argument("--matrix-seconds", type=_positive(float), help="seconds of load per matrix cell")
    tune.add_argument("--ring-seconds", type=_positive(float), help="seconds per ring benchmark run")
    tune.add_argument("--ring-runs", type=_positive(int), help="ring benchmark runs (median reported)")


def _positive(kind, zero: bool = False):
    """A count (int) or a duration (float) > 0 (>= 0 with ``zero``), finite, at most MAX_TUNE."""
    if kind is int:
        return int_range(0 if zero else 1, MAX_TUNE, "a count")
    return float_range(0.0, "a number of seconds", above=not zero, high=float(MAX_TUNE))


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``bench`` subcommand to the ``ustack`` command line."""
    p = subparsers.add_parser("bench", help="benchmark ustack on each backend side by side with the kernel",
                              description=__doc__.split("\n\n")[0].splitlines()[0])
    add_arguments(p)
    p.set_defaults(func=cmd_bench)
    return p


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m ustack.tools.bench`` (the same arguments as ``ustack bench``)."""
    p = argparse.ArgumentParser(prog="ustack bench", description=__doc__.splitlines()[0])
    add_arguments(p)
    p.set_defaults(func=cmd_bench)
    return p


def _loss_section(args, cfg, kinds: list, log) -> dict:
    """The bulk-under-loss rows (ustack.tools.bench_loss): the pipe's, then the veth's under nftables drops
    (skipped, said in one line and in ``skipped``, when a host program they need is missing)."""
    from ustack.tools import bench_loss
    from ustack.transport.tcp.config import TcpConfig
    from ustack.transport.tcp.congestion import ALGORITHMS

    size = 5_000_000 if args.quick else 20_000_000
    backend = next((k for k in kinds if k in USTACK_BACKENDS), "packet")
    log(f"ustack bench: bulk under loss ({args.loss}% each way, {backend})")
    pipe = bench_loss.pipe_rows(size)
    # ustack's default congestion control, and the kernel's default too when ustack has it (this
    # kernel's is BBR): ustack beside Linux with the same algorithm as well as with its own default
    algorithms = tuple(dict.fromkeys(a for a in (TcpConfig().congestion, bench_loss.kernel_congestion())
                                     if a in ALGORITHMS))
    skipped = ""
    try:
        veth = bench_loss.veth_rows(size, args.loss, cfg.reps, backend, algorithms=algorithms)
    except MissingProgram as exc:  # one line naming it; the veth rows are skipped, the rest runs
        log(f"ustack bench: bulk under loss over veth skipped: {exc}")
        veth, skipped = None, str(exc)
    return {"percent": args.loss, "backend": backend, "pipe": pipe, "veth": veth, "skipped": skipped,
            "lines": bench_loss.format_lines(pipe, veth, args.loss)
            + ([f"bulk under loss over veth skipped: {skipped}"] if skipped else [])}


def cmd_bench(args) -> int:
    """Run ``ustack bench``: every row and suite asked for, then the tables, JSON and PNG.

    Args:
        args: the parsed arguments.

    Returns:
        0 when every row ran, 1 when one failed, 2 for a bad ``--backends`` or without root,
        130 after Ctrl-C (topologies and processes are removed in every case).
    """
    try:
        kinds = _selection(args.backends)
    except argparse.ArgumentTypeError as exc:
        print(f"ustack bench: {exc}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("ustack bench: needs root (network namespaces, veth, TAP, AF_PACKET, AF_XDP)", file=sys.stderr)
        return 2
    cfg = BenchConfig.for_args(args)
    placement = Placement.plan()
    if cfg.steer_client_rx and placement.client:
        placement.text += "; the client's own receive work on veth steered to the client's CPU (RPS)"
    result = {
        "tool": "ustack bench", "format": 1,
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine_info(), "placement": {"text": placement.text,
                                                 "client_cpus": sorted(placement.client or []),
                                                 "server_cpus": sorted(placement.server or [])},
        "config": {**asdict(cfg), "quick": args.quick, "xdp_mode": args.xdp_mode, "rows": ["kernel"] + kinds},
        "rows": [], "programs": [], "rings": [], "loopback": [], "notes": [],
    }
    if args.programs:
        return _cmd_matrix(args, kinds, cfg, placement, result)

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def on_sigterm(signum, frame):
        raise KeyboardInterrupt  # like Ctrl-C: ustack.tools.netns reaps first, then the partial report

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_sigterm)
    t0 = time.monotonic()
    home = os.sched_getaffinity(0)
    interrupted = False
    try:
        placement.pin(0, placement.client)
        log(f"ustack bench: rows kernel, {', '.join(kinds)}; {placement.text}")
        for kind in ["kernel"] + kinds:
            result["rows"].append(run_row(kind, cfg, placement, args.xdp_mode, log))
        if not args.no_ipv6:
            for kind in ["kernel"] + [k for k in kinds if k in USTACK_BACKENDS]:
                result["rows"].append(run_row(kind, cfg, placement, args.xdp_mode, log, ipv6=True))
        if not args.no_offloads:
            # the same services with the kernel client's end as the kernel leaves a new veth (tx checksumming
            # and TSO on): the kernel's own figure with offloads, and ustack taking its super-frames
            log("ustack bench: rows at the kernel's default offloads")
            bulk = replace(cfg, latency=False)
            for kind in ["kernel"] + [k for k in kinds if k in USTACK_BACKENDS]:
                result["rows"].append(run_row(kind, bulk, placement, args.xdp_mode, log, offloads="default"))
        if cfg.program:
            for kind in ["kernel"] + [k for k in kinds if k in USTACK_BACKENDS]:
                result["programs"].append(run_program_row(kind, cfg.program_seconds, cfg.reps, placement,
                                                          args.xdp_mode, log))
        if not args.no_matrix:
            log("ustack bench: program matrix (ustack.tools.bench_matrix)")
            result["matrix"] = bench_matrix.run_matrix(_matrix_config(args, kinds, cfg), placement, log)
        if cfg.rings:
            for kind in ["kernel"] + [k for k in kinds if k in USTACK_BACKENDS]:
                result["rings"].append(run_ring(kind, cfg, placement, args.xdp_mode, log))
        if not args.no_loss:
            result["loss"] = _loss_section(args, cfg, kinds, log)
            if result["loss"]["skipped"]:
                result["notes"].append(f"bulk under loss over veth skipped: {result['loss']['skipped']}")
        if not args.no_loopback:
            log("ustack bench: loopback rows (ustack --loopback vs the kernel's 127.0.0.1)")
            result["loopback"] = bench_loopback.measure(300 if args.quick else 2000,
                                                        5_000_000 if args.quick else 20_000_000, cfg.reps)
    except KeyboardInterrupt:
        interrupted = True
        result["notes"].append("interrupted: partial results")
    finally:
        placement.pin(0, home)
    result["duration_s"] = round(time.monotonic() - t0, 1)
    result["latency_table"] = latency_table(result)
    result["notes"] += notes_for(result)
    chart_problem = None
    if args.png:
        try:
            chart_problem = draw_png(result, args.png)
        except Exception as exc:  # a chart must never cost the numbers
            chart_problem = f"chart failed: {type(exc).__name__}: {exc}"
        if chart_problem:
            result["notes"].append(chart_problem)
    if args.json:
        write_json(result, args.json)
    print(format_table(result))
    if "loss" in result:
        print("\n".join(result["loss"]["lines"]))
    if result.get("loopback"):
        print(bench_loopback.format_rows(result["loopback"]))
    written = [f for f in (args.json, args.png if args.png and not chart_problem else None) if f]
    if written:
        print(f"wrote {', '.join(written)}")
    if interrupted:
        return 130
    failed = [r for r in result["rows"] + result["programs"] if r["status"] == "error"]
    return 1 if failed else 0


def _matrix_config(args, kinds: list, cfg: BenchConfig) -> "bench_matrix.MatrixConfig":
    # the default bench's --quick section: two rows at one connection (the whole matrix is --programs)
    small = args.quick and not args.programs
    try:
        conns = (tuple(int(c) for c in args.matrix_connections.split(",")) if args.matrix_connections
                 else (1,) if small else bench_matrix.CONNECTIONS)
    except ValueError:
        conns = bench_matrix.CONNECTIONS
    rows = args.matrix_rows or ("HTTP/1.0,thread per connection" if small else None)
    seconds = args.matrix_seconds or (1.0 if args.quick else 3.0)
    return bench_matrix.MatrixConfig(seconds=seconds, reps=cfg.reps, connections=conns,
                                     programs=bench_matrix.select_programs(rows),
                                     backends=tuple(k for k in kinds if k in ("packet", "afxdp")),
                                     hog=args.hog, xdp_mode=args.xdp_mode)


def _cmd_matrix(args, kinds: list, cfg: BenchConfig, placement, result: dict) -> int:
    """``ustack bench --programs``: the program matrix alone (table on stdout, JSON in --json)."""
    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    t0 = time.monotonic()
    home = os.sched_getaffinity(0)
    mcfg = _matrix_config(args, kinds, cfg)
    log(f"ustack bench --programs: stacks kernel, {', '.join(mcfg.backends)}; {placement.text}; "
        f"load average {os.getloadavg()[0]:.2f}")
    try:
        placement.pin(0, placement.client)
        result["matrix"] = bench_matrix.run_matrix(mcfg, placement, log)
    except KeyboardInterrupt:
        return 130
    finally:
        placement.pin(0, home)
    result["duration_s"] = round(time.monotonic() - t0, 1)
    if args.json:
        write_json(result, args.json)
    print("\n".join(bench_matrix.format_matrix(result["matrix"])))
    print(f"\ntook {result['duration_s']:.0f} s, load average {os.getloadavg()[0]:.2f} at the end")
    failed = [c for row in result["matrix"]["rows"] for cells in row["cells"].values() for c in cells
              if c.get("status") == "error"]
    return 1 if failed else 0


def main(argv=None) -> int:
    """Run ``python -m ustack.tools.bench`` from ``argv``; returns the exit status."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
