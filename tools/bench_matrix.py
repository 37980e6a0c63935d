"""The program matrix (``ustack bench --programs``; a section of the default bench): unmodified servers
on the kernel and under ``ustack run``, against real load generators, as ratios to the kernel.

Servers (each with the defaults a program gets: Nagle on, default buffers):
``python -m http.server`` (threads, HTTP/1.0: a connection per request),
``python -m http.server -p HTTP/1.1`` (keep-alive), and from
ustack.tools.program_servers a thread-per-connection blocking echo server,
the stdlib documentation's ``selectors`` echo server, asyncio streams echo on
ustack's native loop and on the stock loop (``ustack run --asyncio stock``)
and aiohttp (HTTP/1.1; a row that says why when aiohttp is not installed).

Load, from the peer namespace, pinned to the client CPU: ``wrk`` (Debian's
package) for HTTP, GET of a ``BODY_BYTES`` file (``/`` for aiohttp), its
latency distribution; ``echo_client.c`` (beside this module, built with the
system's C compiler on first use) for echo: ``ECHO_BYTES``-byte requests,
one in flight per connection, every byte checked. At 1 connection and at 32.

Each cell runs on a fresh pair of namespaces (a kernel server that closes
first leaves thousands of TIME-WAIT sockets behind, which slow the next run
on the same addresses), the server pinned to the server CPU; the stacks of
one (program, connections) are measured back to back, kernel first, then
each ustack backend, repetition after repetition. Per cell: requests/s,
p50/p99 latency in µs, the server process's CPU (user + system, every
thread, /proc/PID/stat) per request in µs, and errors (socket errors,
non-2xx answers, a wrong echo byte). Ratios to the kernel are the medians
of the per-repetition ratios. ``hog``: a busy loop pinned to the client CPU
(the core the server is not on) for the whole run, as when a test suite runs
beside the program.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from ustack.tools.bench_program import wait_serving
from ustack.tools.bench_servers import stop_process

ECHO_SOURCE = Path(__file__).with_name("echo_client.c")
SERVERS_SCRIPT = Path(__file__).with_name("program_servers.py")
PORT = 8000
BODY_BYTES = 1024
ECHO_BYTES = 64
FILE_NAME = "page.bin"
CONNECTIONS = (1, 32)
WARMUP_SECONDS = 0.5


@dataclass(frozen=True)
class Program:
    """One matrix row: how to start the server (``module`` for ``-m``, else a program_servers kind)."""

    name: str
    load: str  # "wrk" or "echo"
    args: tuple  # after the interpreter: ("-m", ...) or (script, kind)
    run_options: tuple = ()  # more ``ustack run`` options
    path: str = "/" + FILE_NAME
    needs: Optional[str] = None  # an optional module the program imports

    def argv(self, addr: str, folder: str) -> list:
        return [a.format(addr=addr, port=PORT, folder=folder, script=str(SERVERS_SCRIPT)) for a in self.args]


def _stdlib_http(*extra: str) -> tuple:
    return ("-m", "http.server", *extra, "{port}", "--bind", "{addr}", "--directory", "{folder}")


def _ours(kind: str) -> tuple:
    return ("{script}", kind, "{addr}", "{port}")


PROGRAMS = (
    Program("http.server (HTTP/1.0)", "wrk", _stdlib_http()),
    Program("http.server -p HTTP/1.1", "wrk", _stdlib_http("-p", "HTTP/1.1")),
    Program("echo, thread per connection", "echo", _ours("echo-threads")),
    Program("echo, selectors", "echo", _ours("echo-selectors")),
    Program("echo, asyncio streams", "echo", _ours("echo-asyncio")),
    Program("echo, asyncio streams (stock loop)", "echo", _ours("echo-asyncio"), run_options=("--asyncio", "stock")),
    Program("aiohttp", "wrk", _ours("http-aiohttp"), path="/", needs="aiohttp"),
)


@dataclass
class MatrixConfig:
    seconds: float = 3.0
    reps: int = 3
    connections: tuple = CONNECTIONS
    programs: tuple = PROGRAMS
    backends: tuple = ("packet", "afxdp")
    hog: bool = False
    xdp_mode: Optional[str] = None
    extra: dict = field(default_factory=dict)


# -- the load generators ---------------------------------------------------------------------------

def build_echo_client() -> str:
    """The compiled echo client (cached by source hash). Raises LookupError without a C compiler."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        raise LookupError("no C compiler (cc/gcc) for echo_client.c")
    text = ECHO_SOURCE.read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ustack"
    target = cache / f"echo_client-{hashlib.sha256(text).hexdigest()[:16]}"
    if target.exists():
        return str(target)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        out = Path(tmp) / "echo_client"
        done = subprocess.run([cc, "-O2", "-o", str(out), str(ECHO_SOURCE)], capture_output=True, text=True)
        if done.returncode:
            raise LookupError(f"building echo_client failed: {(done.stderr.strip().splitlines() or ['?'])[0]}")
        os.replace(out, target)
    return str(target)


_UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6}


def parse_wrk(text: str) -> dict:
    """wrk --latency's report -> {"requests", "rps", "p50_us", "p99_us", "errors", "non2xx"}; ValueError if absent."""
    m = re.search(r"(\d+) requests in ([\d.]+)(\w+)", text)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if not m or not rps:
        raise ValueError(f"no wrk report in {text[-300:]!r}")
    pct = {p: float(v) * _UNITS[u] for p, v, u in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)}
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    return {"requests": int(m.group(1)), "rps": float(rps.group(1)), "p50_us": pct.get("50"), "p99_us": pct.get("99"),
            "errors": sum(map(int, socket_errors.groups())) if socket_errors else 0,
            "non2xx": int(non2xx.group(1)) if non2xx else 0}


def parse_echo(text: str) -> dict:
    """echo_client's line -> {"requests", "rps", "p50_us", "p99_us", "errors", "non2xx"}."""
    m = re.search(r"requests (\d+) seconds ([\d.]+) rps ([\d.]+) p50_us ([\d.]+) p99_us ([\d.]+) errors (\d+)", text)
    if not m:
        raise ValueError(f"no echo_client report in {text[-300:]!r}")
    return {"requests": int(m.group(1)), "rps": float(m.group(3)), "p50_us": float(m.group(4)),
            "p99_us": float(m.group(5)), "errors": int(m.group(6)), "non2xx": 0}


def load_argv(program: Program, host: str, conns: int, seconds: float, echo_client: Optional[str]) -> list:
    if program.load == "wrk":
        # wrk takes whole seconds
        return ["wrk", "--latency", "-t1", f"-c{conns}", f"-d{max(1, round(seconds))}s",
                f"http://{host}:{PORT}{program.path}"]
    return [echo_client, host, str(PORT), str(conns), str(seconds), str(ECHO_BYTES), str(WARMUP_SECONDS)]


# -- one cell ----------------------------------------------------------------------------------------

def _cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (threads that ended included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_argv(program: Program, stack: str, topo, folder: str, xdp_mode: Optional[str]) -> list:
    prog = program.argv(topo.stack_addr, folder)
    if stack == "kernel":
        return [sys.executable, *prog]
    run = [sys.executable, "-m", "ustack", "run", "--backend", stack, "--ifname", topo.stack_ifname,
           "--addr", f"{topo.stack_addr}/{topo.prefixlen}", *program.run_options]
    if stack == "afxdp" and xdp_mode:
        run += ["--xdp-mode", xdp_mode]
    return [*run, *prog]


def _tail(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return " | ".join(f.read().strip().splitlines()[-4:]) or "(no output)"
    except OSError:
        return "(no output)"


def check_page(host: str, body: bytes) -> None:
    """GET the page once (Connection: close, read to EOF); AssertionError unless 200 with exactly ``body``."""
    with socket.create_connection((host, PORT), 5.0) as s:
        s.sendall(f"GET /{FILE_NAME} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    head, _, got = b"".join(chunks).partition(b"\r\n\r\n")
    if not re.match(rb"HTTP/1\.[01] 200 ", head) or got != body:
        raise AssertionError(f"bad response: {head[:80]!r}, {len(got)} bytes of body")


def run_cell(program: Program, stack: str, conns: int, cfg: MatrixConfig, placement, folder: str,
             body: bytes, echo_client: Optional[str]) -> dict:
    """One measured run on a fresh pair of namespaces: the server started, warmed, loaded, stopped."""
    from ustack.tools.bench_clients import widen_port_range
    from ustack.tools.bench_program import _add_stack_address
    from ustack.tools.bench_runner import _topology_class

    cell = {"program": program.name, "stack": stack, "connections": conns, "status": "ok", "note": ""}
    with tempfile.NamedTemporaryFile("w+", prefix="ustack-matrix-", suffix=".log") as log, \
            _topology_class(placement)("veth", tag="bm") as topo:
        widen_port_range(topo)
        if stack == "kernel":
            _add_stack_address(topo)
        proc = topo.stack_popen(server_argv(program, stack, topo, folder, cfg.xdp_mode),
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_serving(topo, proc, port=PORT, detail=lambda: f": {_tail(log.name)}")
            if program.load == "wrk" and program.path == "/" + FILE_NAME:
                with topo.in_peer_ns():
                    check_page(topo.stack_addr, body)  # the answer, byte for byte, once
            taskset = shutil.which("taskset")
            pin = [taskset, "-c", ",".join(map(str, sorted(placement.client)))] if taskset and placement.client else []
            warm = load_argv(program, topo.stack_addr, conns, 1.0, echo_client)
            if program.load == "wrk":
                topo.peer_run([*pin, *warm], timeout=60, capture_output=True)
            cpu0 = _cpu_seconds(proc.pid)
            done = topo.peer_run([*pin, *load_argv(program, topo.stack_addr, conns, cfg.seconds, echo_client)],
                                 timeout=cfg.seconds + 60, capture_output=True, text=True)
            cpu1 = _cpu_seconds(proc.pid)
            result = (parse_wrk if program.load == "wrk" else parse_echo)(done.stdout)
            # the echo client's warm-up requests also cost CPU: count the measured window's share only
            window = cfg.seconds + (WARMUP_SECONDS if program.load == "echo" else 0.0)
            cell.update(result)
            cell["cpu_us"] = (cpu1 - cpu0) * (cfg.seconds / window) * 1e6 / max(1, result["requests"])
            if result["errors"] or result["non2xx"]:
                cell["note"] = f"{result['errors']} errors, {result['non2xx']} non-2xx; {done.stderr.strip()[-200:]}"
            if proc.poll() is not None:
                raise RuntimeError(f"the server died (status {proc.returncode}): {_tail(log.name)}")
        finally:
            stop_process(proc, 10)
    return cell


# -- the matrix ------------------------------------------------------------------------------------------

def program_problem(program: Program, echo_client: Optional[str], echo_problem: Optional[str]) -> Optional[str]:
    if program.needs:
        done = subprocess.run([sys.executable, "-c", f"import {program.needs}"], capture_output=True)
        if done.returncode:
            return f"{program.needs} is not installed (pip install {program.needs})"
    if program.load == "wrk" and shutil.which("wrk") is None:
        return "wrk is not installed (apt-get install wrk)"
    if program.load == "echo" and echo_client is None:
        return echo_problem
    return None


class CpuHog:
    """A busy loop pinned to ``cpus`` while the with-block runs (the other core busy)."""

    def __init__(self, cpus):
        self.cpus = cpus
        self.proc = None

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        if self.cpus:
            os.sched_setaffinity(self.proc.pid, self.cpus)
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def run_matrix(cfg: MatrixConfig, placement, log: Callable[[str], None]) -> dict:
    """Every (program, connections), stacks back to back per repetition; returns the JSON section."""
    try:
        echo_client, echo_problem = build_echo_client(), None
    except LookupError as exc:
        echo_client, echo_problem = None, str(exc)
    stacks = ["kernel", *cfg.backends]
    body = os.urandom(BODY_BYTES)
    out = {"seconds": cfg.seconds, "reps": cfg.reps, "stacks": stacks, "hog": cfg.hog,
           "load": os.getloadavg(), "rows": []}
    hog = CpuHog(placement.client) if cfg.hog else None
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, FILE_NAME), "wb") as f:
            f.write(body)
        if hog:
            hog.__enter__()
        try:
            for program in cfg.programs:
                problem = program_problem(program, echo_client, echo_problem)
                for conns in cfg.connections:
                    row = {"program": program.name, "connections": conns, "status": "ok", "note": problem or "",
                           "cells": {s: [] for s in stacks}}
                    out["rows"].append(row)
                    if problem:
                        row["status"] = "skipped"
                        log(f"  {program.name}: skipped ({problem})")
                        break
                    for rep in range(cfg.reps):
                        for stack in stacks:
                            try:
                                cell = run_cell(program, stack, conns, cfg, placement, folder, body, echo_client)
                            except KeyboardInterrupt:
                                raise
                            except Exception as exc:  # a failing cell is reported, the others still run
                                cell = {"stack": stack, "status": "error", "note": f"{type(exc).__name__}: {exc}"}
                            row["cells"][stack].append(cell)
                            log(f"  {program.name} c{conns} rep {rep + 1} {stack}: " + (
                                f"{cell['rps']:.0f} req/s p50 {cell['p50_us'] or 0:.0f} p99 {cell['p99_us'] or 0:.0f} "
                                f"µs cpu {cell['cpu_us']:.0f} µs/req" + (f" ({cell['note']})" if cell["note"] else "")
                                if cell["status"] == "ok" else f"error: {cell['note']}"))
                    summarize(row, stacks)
        finally:
            if hog:
                hog.__exit__()
    out["load_after"] = os.getloadavg()
    return out


_FIGURES = ("rps", "p50_us", "p99_us", "cpu_us")


def summarize(row: dict, stacks: list) -> None:
    """Medians per stack, and per-repetition ratios to the kernel (req/s, CPU per request), their medians."""
    kernel = row["cells"]["kernel"]
    row["median"], row["ratio"] = {}, {}
    for stack in stacks:
        ok = [c for c in row["cells"][stack] if c.get("status") == "ok"]
        if not ok:
            continue
        row["median"][stack] = {k: statistics.median(c[k] or 0.0 for c in ok) for k in _FIGURES}
        row["median"][stack]["errors"] = sum(c["errors"] + c["non2xx"] for c in ok)
        if stack == "kernel":
            continue
        pairs = [(c, k) for c, k in zip(row["cells"][stack], kernel)
                 if c.get("status") == "ok" and k.get("status") == "ok" and k["rps"] and k["cpu_us"]]
        if pairs:
            row["ratio"][stack] = {"rps": statistics.median(c["rps"] / k["rps"] for c, k in pairs),
                                   "cpu_us": statistics.median(c["cpu_us"] / k["cpu_us"] for c, k in pairs)}


def format_matrix(section: dict) -> list:
    """The table: a line per (program, connections, stack), with ratios to the kernel."""
    if not section or not section.get("rows"):
        return []
    load = section.get("load") or (0, 0, 0)
    out = ["", f"program matrix: unmodified servers, stack defaults; wrk (HTTP, {BODY_BYTES} B answers) / echo_client "
               f"({ECHO_BYTES} B echo); {section['seconds']:g} s per cell, median of {section['reps']}, fresh namespaces "
               f"per cell{'; CPU hog on the client core' if section.get('hog') else ''}; load {load[0]:.2f} at the start",
           f"{'program':36} {'conns':>5} {'stack':14} {'req/s':>8} {'p50 µs':>8} {'p99 µs':>8} {'cpu µs/req':>10} "
           f"{'vs kernel: req/s':>16} {'cpu':>6}"]
    for row in section["rows"]:
        if row["status"] != "ok":
            out.append(f"{row['program']:36} {'':>5} {row['status']}: {row['note']}")
            continue
        for stack in section["stacks"]:
            m = row["median"].get(stack)
            if m is None:
                errs = "; ".join(c["note"] for c in row["cells"][stack] if c.get("status") != "ok")
                out.append(f"{row['program']:36} {row['connections']:>5} {stack:14} error: {errs[:120]}")
                continue
            r = row["ratio"].get(stack)
            ratio = f"{r['rps']:>15.2f}x {r['cpu_us']:>5.2f}x" if r else ""
            errs = f"  ({m['errors']} errors)" if m["errors"] else ""
            out.append(f"{row['program']:36} {row['connections']:>5} {stack:14} {m['rps']:>8.0f} {m['p50_us']:>8.0f} "
                       f"{m['p99_us']:>8.0f} {m['cpu_us']:>10.1f} {ratio}{errs}")
    return out


def select_programs(text: Optional[str]) -> tuple:
    """A comma-separated list of row-name substrings -> the programs (all when None)."""
    if not text:
        return PROGRAMS
    keys = [k.strip().lower() for k in text.split(",") if k.strip()]
    return tuple(p for p in PROGRAMS if any(k in p.name.lower() for k in keys))
