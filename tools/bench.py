"""``ustack bench``: ustack on each backend side by side with the kernel's own stack.

    ustack bench [--quick] [--backends afxdp,packet,tap,pytcp] [--json FILE] [--png FILE]
    python -m ustack.tools.bench ...

One run measures, for every row, the same kernel client (sockets in the
peer namespace of a ustack.tools.netns topology) against a server in the stack
namespace:

- UDP and TCP 64-byte echo round-trip time, p50 and p99 (ping-pong on one
  socket / one connection, after a warm-up);
- TCP push (client -> server's discard) and pull (server's source -> client)
  throughput in MB/s at 1500 MTU, each transfer bounded in bytes and time;
- TCP connections per second: connect, one 64-byte request/response, close,
  counted over a fixed time.

Rows: ``kernel`` (the kernel's own sockets serving in the stack namespace
of a veth topology of its own, so it never sees ustack's frames), ``ustack``
on each backend (``python -m ustack serve --backend B``, veth topology; TAP
topology for tap), and ``pytcp`` (PyTCP, the pmd-pytcp package, on a TAP
topology) when that package is installed. Figures are medians of
``--reps`` repetitions; each repetition's figure is in the JSON.

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
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

REPO_ROOT = Path(__file__).resolve().parents[1]
USTACK_BACKENDS = ("afxdp", "packet", "tap")
ROW_KINDS = USTACK_BACKENDS + ("pytcp",)
UDP_ECHO, TCP_ECHO, TCP_DISCARD, TCP_SOURCE = 7, 7, 9, 19
MESSAGE = 64  # bytes of payload in every echo request
PYTCP_MIN_VERSION = "0.3"

# (key, column header, unit); RTTs in µs, throughput in MB/s (10^6 bytes), connections/s.
METRICS = (
    ("udp_rtt_p50_us", "UDP p50", "µs"),
    ("udp_rtt_p99_us", "UDP p99", "µs"),
    ("tcp_rtt_p50_us", "TCP p50", "µs"),
    ("tcp_rtt_p99_us", "TCP p99", "µs"),
    ("push_mbps", "push", "MB/s"),
    ("pull_mbps", "pull", "MB/s"),
    ("conn_per_s", "conn/s", "1/s"),
)
RING_METRICS = (
    ("rx_kpps", "rx kpps", "kpps"),
    ("rx_cpu_us", "rx µs/frame", "µs"),
    ("tx_kpps", "tx kpps", "kpps"),
    ("tx_cpu_us", "tx µs/frame", "µs"),
)


@dataclass
class BenchConfig:
    """Sizes and repetitions; ``for_args`` picks the default or the --quick suite."""

    reps: int = 3
    rtt_count: int = 2000
    rtt_warmup: int = 200
    bulk_bytes: int = 50_000_000
    bulk_seconds: float = 8.0  # a transfer stops here even if bulk_bytes are not through
    cps_seconds: float = 2.0
    ring_seconds: float = 1.0
    ring_runs: int = 3
    rings: bool = True

    @classmethod
    def for_args(cls, args) -> "BenchConfig":
        if args.quick:
            cfg = cls(reps=1, rtt_count=300, rtt_warmup=50, bulk_bytes=4_000_000, bulk_seconds=3.0,
                      cps_seconds=1.0, ring_seconds=0.5, ring_runs=1)
        else:
            cfg = cls()
        for name in ("reps", "rtt_count", "rtt_warmup", "bulk_bytes", "bulk_seconds", "cps_seconds",
                     "ring_seconds", "ring_runs"):
            value = getattr(args, name, None)
            if value is not None:
                setattr(cfg, name, value)
        cfg.rings = not args.no_rings
        return cfg


# -- machine, placement ----------------------------------------------------------------------


def machine_info() -> dict:
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = os.getloadavg()
    except OSError:
        load = (0.0, 0.0, 0.0)
    return {
        "cpu_model": model,
        "cpus": os.cpu_count(),
        "cpus_allowed": sorted(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_at_start": [round(x, 2) for x in load],
    }


@dataclass
class Placement:
    client: Optional[set]
    server: Optional[set]
    text: str

    @classmethod
    def plan(cls) -> "Placement":
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            return cls(None, None, f"one CPU ({cpus[0] if cpus else '?'}): server and client share it, not pinned")
        client, server = {cpus[0]}, {cpus[1]}
        return cls(client, server, f"server (ustack serve / kernel server / PyTCP; ring bench: this process) on CPU "
                                   f"{cpus[1]}, client (this process; ring bench: kernel sender/receiver) on CPU "
                                   f"{cpus[0]}; kernel softirq work runs on the sending side's CPU")

    def spawn(self, popen, argv, cpus: Optional[set], **kw):
        """``popen(argv)`` pinned to ``cpus``: under taskset when there is one, else pinned right after the start."""
        taskset = shutil.which("taskset")
        if cpus and taskset:
            return popen([taskset, "-c", ",".join(map(str, sorted(cpus))), *argv], **kw)
        proc = popen(argv, **kw)
        self.pin(proc.pid, cpus)
        return proc

    @staticmethod
    def pin(pid: int, cpus: Optional[set]) -> None:
        if cpus:
            try:
                os.sched_setaffinity(pid, cpus)
            except OSError:
                pass


def _topology_class(placement: Placement):
    """A ustack.tools.netns Topology whose child processes are pinned: peer side -> client CPU, stack side -> server CPU."""
    from ustack.tools.netns import Topology

    class PinnedTopology(Topology):
        def peer_popen(self, argv, **kw):
            return placement.spawn(super().peer_popen, argv, placement.client, **kw)

        def stack_popen(self, argv, **kw):
            return placement.spawn(super().stack_popen, argv, placement.server, **kw)

    return PinnedTopology


# -- statistics --------------------------------------------------------------------------------


def percentile(values, q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100)
    return float(ordered[min(int(rank), len(ordered)) - 1])


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


# -- the kernel client (runs in this process, sockets made in the peer namespace) -------------


class ClientError(RuntimeError):
    pass


def _client_socket(topo, kind: int) -> socket.socket:
    from ustack.tools.netns import peer_socket

    s = peer_socket(topo, type=kind)
    if kind == socket.SOCK_STREAM:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _recv_exactly(s: socket.socket, n: int) -> None:
    got = 0
    while got < n:
        chunk = s.recv(n - got)
        if not chunk:
            raise ClientError("connection closed in the middle of an echo")
        got += len(chunk)


def udp_rtts(topo, host: str, port: int, count: int, warmup: int, timeout: float = 1.0) -> dict:
    """Ping-pong ``count`` 64-byte datagrams after ``warmup``; RTTs in µs. Lost ones are counted, not timed."""
    payload = bytes(MESSAGE)
    with _client_socket(topo, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.connect((host, port))
        rtts, lost, in_a_row = [], 0, 0
        clock = time.perf_counter_ns
        for i in range(warmup + count):
            t0 = clock()
            s.send(payload)
            try:
                while len(s.recv(2048)) != MESSAGE:
                    pass
            except TimeoutError:
                lost += 1
                in_a_row += 1
                if in_a_row >= 10:
                    raise ClientError(f"UDP echo: 10 requests in a row unanswered ({lost} lost)")
                continue
            in_a_row = 0
            if i >= warmup:
                rtts.append((clock() - t0) / 1e3)
    if not rtts:
        raise ClientError("UDP echo: no replies")
    return {"p50": percentile(rtts, 50), "p99": percentile(rtts, 99), "n": len(rtts), "lost": lost}


def tcp_rtts(topo, host: str, port: int, count: int, warmup: int, timeout: float = 5.0) -> dict:
    """Ping-pong 64-byte messages on one connection to the echo service; RTTs in µs."""
    payload = bytes(MESSAGE)
    with _client_socket(topo, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect((host, port))
        rtts = []
        clock = time.perf_counter_ns
        for i in range(warmup + count):
            t0 = clock()
            s.sendall(payload)
            _recv_exactly(s, MESSAGE)
            if i >= warmup:
                rtts.append((clock() - t0) / 1e3)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # the echo closes after our FIN
    return {"p50": percentile(rtts, 50), "p99": percentile(rtts, 99), "n": len(rtts)}


def push(topo, host: str, port: int, nbytes: int, seconds: float) -> dict:
    """Send up to ``nbytes`` (or for ``seconds``) to the discard service, half-close, wait for its FIN."""
    from ustack.tools.services import PATTERN_BLOCK

    block = memoryview(PATTERN_BLOCK)
    with _client_socket(topo, socket.SOCK_STREAM) as s:
        s.settimeout(seconds + 10)
        s.connect((host, port))
        sent = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while sent < nbytes and time.perf_counter() < deadline:
            chunk = block[:min(len(block), nbytes - sent)]
            s.sendall(chunk)
            sent += len(chunk)
        s.shutdown(socket.SHUT_WR)
        if s.recv(1):  # the discard service closes after our FIN, once it has read everything
            raise ClientError("discard service sent data")
        elapsed = time.perf_counter() - t0
    return {"bytes": sent, "seconds": elapsed, "mbps": sent / elapsed / 1e6, "complete": sent >= nbytes}


def pull(topo, host: str, port: int, nbytes: int, seconds: float) -> dict:
    """Read the source service's stream to EOF (``nbytes`` expected) or for ``seconds``."""
    buf = bytearray(1 << 18)
    with _client_socket(topo, socket.SOCK_STREAM) as s:
        s.settimeout(seconds + 10)
        s.connect((host, port))
        got = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        complete = False
        while time.perf_counter() < deadline:
            k = s.recv_into(buf)
            if not k:
                complete = True
                break
            got += k
        elapsed = time.perf_counter() - t0
    if complete and got != nbytes:
        raise ClientError(f"source sent {got} bytes, expected {nbytes}")
    return {"bytes": got, "seconds": elapsed, "mbps": got / elapsed / 1e6, "complete": complete}


def connections_per_second(topo, host: str, port: int, seconds: float) -> dict:
    """Connect, one 64-byte request/response, close, for ``seconds``; count completed connections."""
    payload = bytes(MESSAGE)
    done = failed = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        s = _client_socket(topo, socket.SOCK_STREAM)
        try:
            s.settimeout(3.0)
            s.connect((host, port))
            s.sendall(payload)
            _recv_exactly(s, MESSAGE)
            done += 1
        except (OSError, ClientError):
            failed += 1
            if failed >= 20 and failed > done:
                raise ClientError(f"{failed} connections failed ({done} completed)")
        finally:
            s.close()
    elapsed = time.perf_counter() - t0
    return {"completed": done, "failed": failed, "seconds": elapsed, "rate": done / elapsed}


def _widen_port_range(topo) -> None:
    """Closed client connections sit in TIME_WAIT: give the peer namespace the whole ephemeral range."""
    with topo.in_peer_ns():
        with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as f:
            f.write("10000 65000")


# -- servers (each a process in the stack namespace) ------------------------------------------


class Server:
    """A server process: collects its output, knows when it is ready, stops it with SIGTERM."""

    ready_line = "ready"

    def __init__(self, topo, argv: list, env: Optional[dict] = None):
        self.topo = topo
        self.lines: list[str] = []
        self._ready = threading.Event()
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), full_env.get("PYTHONPATH")]))
        full_env.update(env or {})
        self.proc = topo.stack_popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     bufsize=1, cwd=str(REPO_ROOT), env=full_env)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.strip() == self.ready_line:
                self._ready.set()
        self._ready.set()  # EOF: the process is gone

    def wait_ready(self, timeout: float = 30.0) -> None:
        if not self._ready.wait(timeout) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError(f"server did not become ready: {' | '.join(self.lines[-8:]) or '(no output)'}")

    @property
    def cpus(self) -> list:
        try:
            return sorted(os.sched_getaffinity(self.proc.pid))
        except OSError:
            return []

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(5)
        return rc


def ustack_server(topo, backend: str, source_bytes: int, xdp_mode: Optional[str]) -> tuple[Server, str]:
    """``python -m ustack serve`` on the topology's stack end; returns (server, mode it reported)."""
    argv = [sys.executable, "-m", "ustack", "serve", "--backend", backend, "--ifname", topo.stack_ifname,
            "--addr", f"{topo.stack_addr}/{topo.prefixlen}", "--udp-echo", str(UDP_ECHO),
            "--tcp-echo", str(TCP_ECHO), "--tcp-discard", str(TCP_DISCARD), "--tcp-source", str(TCP_SOURCE),
            "--source-bytes", str(source_bytes)]
    if backend == "afxdp" and xdp_mode:
        argv += ["--xdp-mode", xdp_mode]
    server = Server(topo, argv)
    server.wait_ready()
    mode = backend
    for line in server.lines:
        m = re.match(r"ustack: .* on \S+ \((.*)\)$", line)
        if m:
            mode = m.group(1)
    return server, mode


def ustack_drops(lines: list[str]) -> dict:
    """The ``drops by reason`` block that ``ustack serve`` prints when it stops."""
    drops, inside = {}, False
    for line in lines:
        if line.startswith("drops by reason"):
            inside = True
            continue
        m = re.match(r"^\s+(\S+)\s+(\d+)$", line) if inside else None
        if m:
            drops[m.group(1)] = int(m.group(2))
    return drops


def kernel_server(topo, source_bytes: int) -> Server:
    from pyroute2 import IPRoute

    with topo.in_stack_ns(), IPRoute() as ipr:
        index = ipr.link_lookup(ifname=topo.stack_ifname)[0]
        ipr.addr("add", index=index, address=topo.stack_addr, prefixlen=topo.prefixlen)
    code = "import sys; from ustack.tools.bench_servers import kernel_serve; kernel_serve(sys.argv[1], int(sys.argv[2]))"
    server = Server(topo, [sys.executable, "-c", code, topo.stack_addr, str(source_bytes)])
    server.wait_ready()
    return server


def _version_tuple(text: str) -> tuple:
    return tuple(int(m) for m in re.findall(r"\d+", text)[:2])


def pytcp_problem() -> Optional[str]:
    """Why the PyTCP row cannot run, or None."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("pmd-pytcp")
        except PackageNotFoundError:
            return "pmd-pytcp is not installed (pip install 'ustack[bench]')"
        import pmd_pytcp.stack  # noqa: F401
        import pmd_pytcp.socket  # noqa: F401
    except Exception as exc:  # an import failing for any reason makes the row unavailable
        return f"pmd-pytcp cannot be imported: {exc!r}"
    if _version_tuple(found) < _version_tuple(PYTCP_MIN_VERSION):
        return f"pmd-pytcp {found} is older than {PYTCP_MIN_VERSION} (different API)"
    return None


def pytcp_server(topo, source_bytes: int) -> tuple[Server, str]:
    from importlib.metadata import version

    from ustack.tools.netns import TAP_STACK_MAC

    code = ("import sys; from ustack.tools.bench_servers import pytcp_serve; "
            "pytcp_serve(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))")
    server = Server(topo, [sys.executable, "-c", code, topo.stack_ifname, f"{topo.stack_addr}/{topo.prefixlen}",
                           TAP_STACK_MAC.hex(":"), str(source_bytes)])
    server.wait_ready(60)
    topo.wait_running()
    return server, f"pmd-pytcp {version('pmd-pytcp')} on TAP, asyncio"


def measure_services(topo, host: str, cfg: BenchConfig, log: Callable[[str], None]) -> tuple[dict, dict]:
    """Every service metric against a ready server; returns (medians, per-repetition samples)."""
    samples: dict = {"udp_rtt": [], "tcp_rtt": [], "push": [], "pull": [], "cps": []}
    for rep in range(cfg.reps):
        samples["udp_rtt"].append(udp_rtts(topo, host, UDP_ECHO, cfg.rtt_count, cfg.rtt_warmup))
        samples["tcp_rtt"].append(tcp_rtts(topo, host, TCP_ECHO, cfg.rtt_count, cfg.rtt_warmup))
        samples["push"].append(push(topo, host, TCP_DISCARD, cfg.bulk_bytes, cfg.bulk_seconds))
        samples["pull"].append(pull(topo, host, TCP_SOURCE, cfg.bulk_bytes, cfg.bulk_seconds))
        samples["cps"].append(connections_per_second(topo, host, TCP_ECHO, cfg.cps_seconds))
        last = {k: v[-1] for k, v in samples.items()}
        log(f"    rep {rep + 1}/{cfg.reps}: udp p50 {last['udp_rtt']['p50']:.0f} µs, "
            f"tcp p50 {last['tcp_rtt']['p50']:.0f} µs, push {last['push']['mbps']:.1f} MB/s, "
            f"pull {last['pull']['mbps']:.1f} MB/s, {last['cps']['rate']:.0f} conn/s")
    metrics = {
        "udp_rtt_p50_us": median_or_none(s["p50"] for s in samples["udp_rtt"]),
        "udp_rtt_p99_us": median_or_none(s["p99"] for s in samples["udp_rtt"]),
        "tcp_rtt_p50_us": median_or_none(s["p50"] for s in samples["tcp_rtt"]),
        "tcp_rtt_p99_us": median_or_none(s["p99"] for s in samples["tcp_rtt"]),
        "push_mbps": median_or_none(s["mbps"] for s in samples["push"]),
        "pull_mbps": median_or_none(s["mbps"] for s in samples["pull"]),
        "conn_per_s": median_or_none(s["rate"] for s in samples["cps"]),
    }
    return metrics, samples


def row_result(name: str, stack: str, topology: str, status: str = "ok", **extra) -> dict:
    return {"name": name, "stack": stack, "topology": topology, "status": status, "mode": extra.pop("mode", ""),
            "note": extra.pop("note", ""), "metrics": extra.pop("metrics", {k: None for k, _, _ in METRICS}),
            **extra}


def run_row(kind: str, cfg: BenchConfig, placement: Placement, xdp_mode: Optional[str],
            log: Callable[[str], None]) -> dict:
    """One row: a topology of its own, a server in its stack namespace, the client here."""
    Topology = _topology_class(placement)
    if kind == "kernel":
        name, stack, topo_kind = "kernel", "kernel", "veth"
    elif kind == "pytcp":
        name, stack, topo_kind = "pytcp/tap", "pytcp", "tap"
        problem = pytcp_problem()
        if problem:
            return row_result(name, stack, topo_kind, "not available", note=problem)
    else:
        name, stack, topo_kind = f"ustack/{kind}", "ustack", "tap" if kind == "tap" else "veth"
    log(f"  {name} ({topo_kind} topology)")
    t0 = time.monotonic()
    try:
        with Topology(topo_kind, tag="bn") as topo:
            _widen_port_range(topo)
            server = None
            try:
                if kind == "kernel":
                    server, mode = kernel_server(topo, cfg.bulk_bytes), "kernel sockets"
                elif kind == "pytcp":
                    server, mode = pytcp_server(topo, cfg.bulk_bytes)
                else:
                    server, mode = ustack_server(topo, kind, cfg.bulk_bytes, xdp_mode)
                cpus = server.cpus
                metrics, samples = measure_services(topo, topo.stack_addr, cfg, log)
            finally:
                rc = server.stop() if server is not None else None
            extra = {}
            if stack == "ustack":
                extra["server_drops"] = ustack_drops(server.lines)
            note = "" if rc in (0, None) else f"server exited with status {rc}"
            return row_result(name, stack, topo_kind, mode=mode, metrics=metrics, samples=samples,
                              server_cpus=cpus, seconds=round(time.monotonic() - t0, 1), note=note, **extra)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # a row that fails is reported, the others still run
        log(f"    failed: {exc!r}")
        return row_result(name, stack, topo_kind, "error", note=f"{type(exc).__name__}: {exc}",
                          seconds=round(time.monotonic() - t0, 1))


# -- ring cost (tools/bench_rings.py and tools/bench_afxdp.py) --------------------------------


def _ring_median(fn, runs: int) -> dict:
    results = [fn() for _ in range(runs)]
    keys = [k for k, v in results[0].items() if isinstance(v, (int, float))]
    return {k: statistics.median(r[k] for r in results) for k in keys}


def run_ring(kind: str, cfg: BenchConfig, placement: Placement, xdp_mode: Optional[str],
             log: Callable[[str], None]) -> dict:
    """Raw 60-byte UDP frames through one backend's rings (or a kernel UDP socket), this process as the stack."""
    Topology = _topology_class(placement)
    name = "kernel UDP socket" if kind == "kernel" else kind
    log(f"  ring {name}")
    try:
        if kind in ("tap", "packet"):
            from ustack.tools import bench_rings

            burst = 64
            rx_fn = lambda topo: bench_rings.bench_rx(kind, topo, cfg.ring_seconds, burst)  # noqa: E731
            tx_fn = lambda topo: bench_rings.bench_tx(kind, topo, cfg.ring_seconds, burst)  # noqa: E731
            cpu_of = lambda r: r["user_us"] + r["sys_us"]  # noqa: E731
            source = "ustack.tools.bench_rings"
        else:
            from ustack.tools import bench_afxdp

            mode = xdp_mode or "auto"
            if kind == "afxdp":
                rx_fn = lambda topo: bench_afxdp.bench_afxdp_rx(topo, mode, cfg.ring_seconds, 64)  # noqa: E731
                tx_fn = lambda topo: bench_afxdp.bench_afxdp_tx(topo, mode, cfg.ring_seconds, 64)  # noqa: E731
            else:
                rx_fn = lambda topo: bench_afxdp.bench_kernel_rx(topo, cfg.ring_seconds, 64)  # noqa: E731
                tx_fn = lambda topo: bench_afxdp.bench_kernel_tx(topo, cfg.ring_seconds)  # noqa: E731
            cpu_of = lambda r: r["cpu_us"]  # noqa: E731
            source = "ustack.tools.bench_afxdp"
    except Exception as exc:  # e.g. bench_afxdp cannot import the afxdp backend
        return {"name": name, "status": "not available", "note": f"{type(exc).__name__}: {exc}"}
    home = os.sched_getaffinity(0)
    try:
        placement.pin(0, placement.server)  # this thread is the stack side here
        with Topology("tap" if kind == "tap" else "veth", tag="br") as topo:
            topo.add_peer_neighbour()
            if kind == "kernel":
                with topo.in_stack_ns():
                    from pyroute2 import IPRoute

                    with IPRoute() as ipr:
                        index = ipr.link_lookup(ifname=topo.stack_ifname)[0]
                        ipr.addr("add", index=index, address=topo.stack_addr, prefixlen=topo.prefixlen)
            rx = _ring_median(lambda: rx_fn(topo), cfg.ring_runs)
            tx = _ring_median(lambda: tx_fn(topo), cfg.ring_runs)
        result = {"name": name, "status": "ok", "source": source,
                  "rx_kpps": rx["pps"] / 1e3, "rx_cpu_us": cpu_of(rx), "tx_kpps": tx["pps"] / 1e3,
                  "tx_cpu_us": cpu_of(tx), "rx": rx, "tx": tx}
        log(f"    rx {result['rx_kpps']:.0f} kpps {result['rx_cpu_us']:.2f} µs/frame, "
            f"tx {result['tx_kpps']:.0f} kpps {result['tx_cpu_us']:.2f} µs/frame")
        return result
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        log(f"    failed: {exc!r}")
        return {"name": name, "status": "error", "note": f"{type(exc).__name__}: {exc}"}
    finally:
        placement.pin(0, home)


# -- output ------------------------------------------------------------------------------------


def _fmt(value, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "MB/s":
        return f"{value:.1f}"
    if unit == "µs" and value < 10:
        return f"{value:.2f}"
    return f"{value:.0f}"


def format_table(result: dict) -> str:
    """The human-readable report: machine, placement, both tables, notes."""
    m = result["machine"]
    out = [
        f"machine: {m['cpu_model']}, {m['cpus']} CPUs, kernel {m['kernel']}, Python {m['python']}, "
        f"load {' '.join(str(x) for x in m.get('loadavg_at_start', []))} (shared machine: expect noise)",
        f"placement: {result['placement']['text']}",
        f"suite: {'quick' if result['config'].get('quick') else 'default'}, median of {result['config']['reps']} "
        f"reps; RTT over {result['config']['rtt_count']} round trips of {MESSAGE} B; bulk "
        f"{result['config']['bulk_bytes'] / 1e6:g} MB (capped at {result['config']['bulk_seconds']:g} s) at 1500 MTU; "
        f"conn/s over {result['config']['cps_seconds']:g} s",
        "",
    ]
    heads = [h for _, h, _ in METRICS]
    units = [u for _, _, u in METRICS]
    width = max([len("row")] + [len(r["name"]) for r in result["rows"]])
    out.append(f"{'row':{width}}  " + "  ".join(f"{h:>8}" for h in heads) + "  mode")
    out.append(f"{'':{width}}  " + "  ".join(f"{u:>8}" for u in units))
    for row in result["rows"]:
        if row["status"] != "ok":
            out.append(f"{row['name']:{width}}  {row['status']}: {row['note']}")
            continue
        cells = "  ".join(f"{_fmt(row['metrics'].get(k), u):>8}" for k, _, u in METRICS)
        out.append(f"{row['name']:{width}}  {cells}  {row['mode']}" + (f" ({row['note']})" if row["note"] else ""))
    if result.get("rings"):
        out += ["", "ring cost, 60-byte UDP frames (64 on a wire); CPU of the stack-side thread per frame:"]
        width = max([len("path")] + [len(r["name"]) for r in result["rings"]])
        out.append(f"{'path':{width}}  " + "  ".join(f"{h:>11}" for _, h, _ in RING_METRICS))
        for ring in result["rings"]:
            if ring["status"] != "ok":
                out.append(f"{ring['name']:{width}}  {ring['status']}: {ring['note']}")
                continue
            out.append(f"{ring['name']:{width}}  " + "  ".join(
                f"{(f'{ring[k]:.0f}' if u == 'kpps' else f'{ring[k]:.2f}'):>11}" for k, _, u in RING_METRICS))
    if result.get("notes"):
        out += ["", "notes:"] + [f"- {n}" for n in result["notes"]]
    out.append(f"\ntook {result.get('duration_s', 0):.0f} s")
    return "\n".join(out)


def write_json(result: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(result, f, indent=2, sort_keys=False, default=str)
        f.write("\n")


def draw_png(result: dict, path: str) -> Optional[str]:
    """Bar charts of every metric; returns None on success or why no chart was drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:  # not installed (an optional extra) or broken
        return f"matplotlib not available ({type(exc).__name__}: {exc}); no chart (pip install 'ustack[bench]')"
    rows = [r for r in result["rows"] if r["status"] == "ok"]
    rings = [r for r in result.get("rings", []) if r["status"] == "ok"]
    panels = [
        ("UDP echo RTT (µs, log)", [("p50", "udp_rtt_p50_us"), ("p99", "udp_rtt_p99_us")], True),
        ("TCP echo RTT (µs, log)", [("p50", "tcp_rtt_p50_us"), ("p99", "tcp_rtt_p99_us")], True),
        ("TCP throughput (MB/s, log)", [("push", "push_mbps"), ("pull", "pull_mbps")], True),
        ("TCP connections/s", [("conn/s", "conn_per_s")], False),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    axes = axes.ravel()
    names = [r["name"] for r in rows]
    for ax, (title, series, logy) in zip(axes, panels):
        _bars(ax, names, [(label, [r["metrics"].get(key) for r in rows]) for label, key in series], title, logy)
    ring_names = [r["name"] for r in rings]
    _bars(axes[4], ring_names, [("rx", [r["rx_kpps"] for r in rings]), ("tx", [r["tx_kpps"] for r in rings])],
          "ring: 60-byte frames (kpps)", False)
    _bars(axes[5], ring_names, [("rx", [r["rx_cpu_us"] for r in rings]), ("tx", [r["tx_cpu_us"] for r in rings])],
          "ring: CPU µs per frame", False)
    m = result["machine"]
    fig.suptitle(f"ustack bench vs the kernel — {m['cpu_model']}, {m['cpus']} CPUs, kernel {m['kernel']}, "
                 f"Python {m['python']} — {result['started'][:16]}", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def _bars(ax, names, series, title, logy) -> None:
    if not names:
        ax.set_title(title, fontsize=10)
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(names))]
        ys = [v if v is not None else 0 for v in values]
        bars = ax.bar(xs, ys, width, label=label)
        for bar, v in zip(bars, values):
            if v is not None:
                ax.annotate(f"{v:.0f}" if v >= 10 else f"{v:.2f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                            va="bottom", fontsize=7)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20, fontsize=8)
    ax.set_title(title, fontsize=10)
    if logy:
        ax.set_yscale("log")
    if len(series) > 1:
        ax.legend(fontsize=8)


def notes_for(result: dict) -> list[str]:
    """Observations worth a line under the tables."""
    notes = []
    rows = {r["name"]: r for r in result["rows"] if r["status"] == "ok"}
    packet = rows.get("ustack/packet")
    if packet and packet["metrics"]["udp_rtt_p50_us"] and packet["metrics"]["udp_rtt_p50_us"] > 700:
        notes.append("ustack/packet RTTs sit near 1 ms: a lone frame waits in a half-empty TPACKET_V3 block "
                     "until the kernel's block-retire timer (1 ms, the smallest it accepts) hands the block over")
    if "kernel" in rows:
        notes.append("the client is one Python process on kernel sockets and the kernel row's server is Python too "
                     "(one selector loop): the kernel row is bounded by them, not by the kernel stack alone")
    if any(row["stack"] == "ustack" for row in rows.values()):
        notes.append("ustack serve busy-polls its device for 50 µs (ustack.api.driver) before it sleeps; the kernel "
                     "server sleeps in epoll and pays a wake-up per request, so ping-pong RTTs of ustack can come "
                     "out below the kernel's")
    on_tap = [name for name, row in rows.items() if row["topology"] == "tap"]
    if on_tap:
        notes.append(f"{', '.join(on_tap)} ran over a TAP topology (the kernel client reaches the stack through the "
                     f"tun driver in the same namespace); the other rows over a veth pair")
    for row in rows.values():
        drops = row.get("server_drops") or {}
        if drops:
            top = ", ".join(f"{k} {v}" for k, v in sorted(drops.items(), key=lambda kv: -kv[1])[:4])
            notes.append(f"{row['name']} server drops: {top}")
        for what in ("push", "pull"):
            incomplete = [s for s in row.get("samples", {}).get(what, []) if not s.get("complete", True)]
            if incomplete:
                notes.append(f"{row['name']} {what}: {len(incomplete)} transfer(s) stopped at the time cap "
                             f"(rate from the bytes moved)")
        lost = sum(s.get("lost", 0) for s in row.get("samples", {}).get("udp_rtt", []))
        if lost:
            notes.append(f"{row['name']}: {lost} UDP echo requests unanswered (not timed)")
    return notes


# -- command line ------------------------------------------------------------------------------


def _selection(text: Optional[str]) -> list[str]:
    if text is None:
        from ustack.backends.registry import available_backends

        return [k for k in USTACK_BACKENDS if k in available_backends()] + ["pytcp"]
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in ROW_KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown backend(s) {', '.join(unknown)} (known: {', '.join(ROW_KINDS)})")
    return kinds


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="the under-a-minute suite (1 rep, fewer round trips)")
    p.add_argument("--backends", metavar="LIST",
                   help=f"comma-separated rows besides the kernel's, from {','.join(ROW_KINDS)} "
                        "(default: every available backend, and pytcp)")
    p.add_argument("--json", default="bench.json", metavar="FILE", help="results as JSON (default: %(default)s)")
    p.add_argument("--png", default="bench.png", metavar="FILE",
                   help="chart (needs matplotlib; default: %(default)s); '' for none")
    p.add_argument("--xdp-mode", choices=("auto", "native", "generic"), default="auto", help="afxdp attach mode")
    p.add_argument("--no-rings", action="store_true", help="skip the per-backend ring cost table")
    tune = p.add_argument_group("sizes (override the suite's)")
    tune.add_argument("--reps", type=_positive(int), help="repetitions per metric (median reported)")
    tune.add_argument("--rtt-count", type=_positive(int), help="timed round trips per RTT repetition")
    tune.add_argument("--rtt-warmup", type=_positive(int, zero=True), help="untimed round trips first")
    tune.add_argument("--bulk-bytes", type=_positive(int), help="bytes per push/pull transfer")
    tune.add_argument("--bulk-seconds", type=_positive(float), help="time cap per push/pull transfer")
    tune.add_argument("--cps-seconds", type=_positive(float), help="seconds of connect/request/close per rep")
    tune.add_argument("--ring-seconds", type=_positive(float), help="seconds per ring benchmark run")
    tune.add_argument("--ring-runs", type=_positive(int), help="ring benchmark runs (median reported)")


def _positive(kind, zero: bool = False):
    def parse(text: str):
        value = kind(text)
        if value < 0 or (value == 0 and not zero):
            raise argparse.ArgumentTypeError(f"must be {'>= 0' if zero else '> 0'}: {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``bench`` subcommand to the ``ustack`` command line."""
    p = subparsers.add_parser("bench", help="benchmark ustack on each backend side by side with the kernel",
                              description=__doc__.split("\n\n")[0].splitlines()[0])
    add_arguments(p)
    p.set_defaults(func=cmd_bench)
    return p


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ustack bench", description=__doc__.splitlines()[0])
    add_arguments(p)
    p.set_defaults(func=cmd_bench)
    return p


def cmd_bench(args) -> int:
    try:
        kinds = _selection(args.backends)
    except argparse.ArgumentTypeError as exc:
        print(f"ustack bench: {exc}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("ustack bench: needs root (network namespaces, veth, TAP, AF_PACKET, AF_XDP)", file=sys.stderr)
        return 2
    if str(REPO_ROOT) not in sys.path and (REPO_ROOT / "tests").is_dir():
        sys.path.insert(0, str(REPO_ROOT))  # ustack.tools.bench_rings builds its TX frame with tests.backends.link
    cfg = BenchConfig.for_args(args)
    placement = Placement.plan()
    result = {
        "tool": "ustack bench", "format": 1,
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine_info(), "placement": {"text": placement.text,
                                                 "client_cpus": sorted(placement.client or []),
                                                 "server_cpus": sorted(placement.server or [])},
        "config": {**asdict(cfg), "quick": args.quick, "xdp_mode": args.xdp_mode, "rows": ["kernel"] + kinds},
        "rows": [], "rings": [], "notes": [],
    }

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
        if cfg.rings:
            for kind in ["kernel"] + [k for k in kinds if k in USTACK_BACKENDS]:
                result["rings"].append(run_ring(kind, cfg, placement, args.xdp_mode, log))
    except KeyboardInterrupt:
        interrupted = True
        result["notes"].append("interrupted: partial results")
    finally:
        placement.pin(0, home)
    result["duration_s"] = round(time.monotonic() - t0, 1)
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
    written = [f for f in (args.json, args.png if args.png and not chart_problem else None) if f]
    if written:
        print(f"wrote {', '.join(written)}")
    if interrupted:
        return 130
    failed = [r for r in result["rows"] if r["status"] == "error"]
    return 1 if failed else 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
