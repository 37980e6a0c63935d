"""How ``ustack bench`` runs: machine facts, CPU placement, and one row or ring measurement at a time.

``run_row(kind, ...)`` builds a topology of its own (ustack.tools.netns),
starts the row's server in its stack namespace (ustack.tools.bench_servers),
runs every client measurement ``cfg.reps`` times (ustack.tools.bench_clients)
and returns the row: medians in ``metrics`` and (the latency suite,
``measure_latency``) in ``latency``, each repetition in ``samples``.
``run_ring(kind, ...)`` measures one backend's raw ring cost with
ustack.tools.bench_rings or ustack.tools.bench_afxdp. A row or ring that
fails is returned with its status and the reason; the others still run.

Placement: with two or more CPUs the server process is pinned to one CPU and
the client (this process) to another (taskset / sched_setaffinity); in the
ring benchmark this process is the stack side and the kernel
sender/receiver processes are pinned to the client CPU.
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Optional

from ustack.tools.host_programs import MissingProgram

from ustack.tools.bench_clients import (connect_close, connections_per_second, ping_rtts, pull, push,
                                        sized_tcp_rtts, tcp_rtts, udp_rtts, widen_port_range)
from ustack.tools.bench_config import (LATENCY_SIZES, METRICS, SEGMENT, TCP_DISCARD, TCP_ECHO, TCP_SOURCE, UDP_ECHO,
                                       BenchConfig)
from ustack.tools.bench_lwip import lwip_problem, lwip_server
from ustack.tools.bench_servers import kernel_server, pytcp_problem, pytcp_server, ustack_drops, ustack_server


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


def steer_peer_receive(topo, cpus: Optional[set]) -> bool:
    """RPS on the peer veth's receive queues: the client's kernel receive work on the client's CPUs.

    On a veth pair the receiving end's softirq runs on the CPU that transmitted
    the frame, so without this the client kernel's processing of the server's
    ACKs -- and the data it then sends from there, delivered on the same CPU
    into a user-space server's ring -- runs inside the server's TX kick, on the
    server's CPU (issue 13: IPv6 push 0.6-0.8x of IPv4 under BBR, bimodal IPv4).
    Between two hosts the client's NIC interrupts run on the client. True when set.
    """
    if not cpus:
        return False
    mask = format(sum(1 << c for c in cpus), "x")
    script = f"for q in /sys/class/net/{topo.peer_ifname}/queues/rx-*/rps_cpus; do echo {mask} > $q; done"
    try:  # sysfs shows a namespace's devices only when mounted inside it: ip netns exec does that
        done = subprocess.run(["ip", "netns", "exec", topo.peer_ns, "sh", "-c", script], capture_output=True,
                              timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def process_cpu_seconds(pid: Optional[int]) -> Optional[float]:
    """User + system CPU seconds of a process (all its threads) from /proc, or None."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _with_server_cpu(pid: Optional[int], fn, *args) -> dict:
    """``fn(*args)``'s result plus ``server_cpu_s``: the server's CPU seconds while it ran."""
    before = process_cpu_seconds(pid)
    result = fn(*args)
    after = process_cpu_seconds(pid)
    result["server_cpu_s"] = None if before is None or after is None else after - before
    return result


def server_cpu_metrics(samples: dict) -> dict:
    """Medians of the server's CPU figures (SERVER_CPU_METRICS) from the push/pull/cps samples."""
    def pct(s):
        return None if s.get("server_cpu_s") is None else 100.0 * s["server_cpu_s"] / s["seconds"]

    def per_seg(s):
        segs = s["bytes"] / SEGMENT
        return None if s.get("server_cpu_s") is None or not segs else 1e6 * s["server_cpu_s"] / segs

    def per_conn(s):
        n = s.get("completed")
        return None if s.get("server_cpu_s") is None or not n else 1e6 * s["server_cpu_s"] / n

    return {
        "push_cpu_pct": median_or_none(pct(s) for s in samples["push"]),
        "push_us_per_seg": median_or_none(per_seg(s) for s in samples["push"]),
        "pull_cpu_pct": median_or_none(pct(s) for s in samples["pull"]),
        "pull_us_per_seg": median_or_none(per_seg(s) for s in samples["pull"]),
        "conn_cpu_us": median_or_none(per_conn(s) for s in samples["cps"]),
    }


def _service_rep(topo, host: str, cfg: BenchConfig, server_pid: Optional[int]) -> dict:
    """One repetition of every service metric against ``host``."""
    return {
        "udp_rtt": udp_rtts(topo, host, UDP_ECHO, cfg.rtt_count, cfg.rtt_warmup),
        "tcp_rtt": tcp_rtts(topo, host, TCP_ECHO, cfg.rtt_count, cfg.rtt_warmup),
        "push": _with_server_cpu(server_pid, push, topo, host, TCP_DISCARD, cfg.bulk_bytes, cfg.bulk_seconds),
        "pull": _with_server_cpu(server_pid, pull, topo, host, TCP_SOURCE, cfg.bulk_bytes, cfg.bulk_seconds),
        "cps": _with_server_cpu(server_pid, connections_per_second, topo, host, TCP_ECHO, cfg.cps_seconds),
    }


def _log_rep(log: Callable[[str], None], label: str, last: dict) -> None:
    log(f"    {label}: udp p50 {last['udp_rtt']['p50']:.0f} µs, "
        f"tcp p50 {last['tcp_rtt']['p50']:.0f} µs, push {last['push']['mbps']:.1f} MB/s, "
        f"pull {last['pull']['mbps']:.1f} MB/s, {last['cps']['rate']:.0f} conn/s")


def _service_metrics(samples: dict) -> dict:
    s = samples
    return {
        "udp_rtt_p50_us": median_or_none(x["p50"] for x in s["udp_rtt"]),
        "udp_rtt_p99_us": median_or_none(x["p99"] for x in s["udp_rtt"]),
        "tcp_rtt_p50_us": median_or_none(x["p50"] for x in s["tcp_rtt"]),
        "tcp_rtt_p99_us": median_or_none(x["p99"] for x in s["tcp_rtt"]),
        "push_mbps": median_or_none(x["mbps"] for x in s["push"]),
        "pull_mbps": median_or_none(x["mbps"] for x in s["pull"]),
        "conn_per_s": median_or_none(x["rate"] for x in s["cps"]),
        **server_cpu_metrics(samples),
    }


def measure_services(topo, host: str, cfg: BenchConfig, log: Callable[[str], None],
                     server_pid: Optional[int] = None) -> tuple[dict, dict]:
    """Every service metric against a ready server; returns (medians, per-repetition samples).

    With ``server_pid``, push, pull and connections also record the server process's CPU seconds.
    """
    samples: dict = {"udp_rtt": [], "tcp_rtt": [], "push": [], "pull": [], "cps": []}
    for rep in range(cfg.reps):
        last = _service_rep(topo, host, cfg, server_pid)
        for k, v in last.items():
            samples[k].append(v)
        _log_rep(log, f"rep {rep + 1}/{cfg.reps}", last)
    return _service_metrics(samples), samples


def measure_families(topo, hosts: dict, cfg: BenchConfig, log: Callable[[str], None],
                     server_pid: Optional[int] = None) -> dict:
    """The service metrics for each address of one server, interleaved repetition by repetition.

    ``hosts`` maps a label ("4", "6") to the address to reach. Each repetition
    measures every address in turn, in an order that rotates from one repetition
    to the next, so the machine's drift (a shared, noisy box) falls on each
    family alike and the IPv6 / IPv4 ratio compares the same server at the same
    time. Returns {label: (medians, per-repetition samples)}.
    """
    labels = list(hosts)
    samples = {label: {"udp_rtt": [], "tcp_rtt": [], "push": [], "pull": [], "cps": []} for label in labels}
    for rep in range(cfg.reps):
        shift = rep % len(labels)
        for label in labels[shift:] + labels[:shift]:
            last = _service_rep(topo, hosts[label], cfg, server_pid)
            for k, v in last.items():
                samples[label][k].append(v)
            _log_rep(log, f"rep {rep + 1}/{cfg.reps} IPv{label}", last)
    return {label: (_service_metrics(samples[label]), samples[label]) for label in labels}


def measure_latency(topo, host: str, cfg: BenchConfig, log: Callable[[str], None]) -> tuple[dict, list]:
    """The latency suite against a ready server: RTT by message size, a spaced ping, connect() and connect+close.

    Returns (medians over the repetitions, per-repetition samples). The
    medians: ``rtt`` {size (str, JSON keys): {"p50", "p99"}} in µs, ``ping``
    {"p50", "p99", "method", "lost"}, ``connect_p50_us``, ``connect_p99_us``
    and ``connect_close_per_s``.
    """
    counts = {size: cfg.lat_count_for(size) for size in LATENCY_SIZES}
    samples = []
    for rep in range(cfg.reps):
        sized = sized_tcp_rtts(topo, host, TCP_ECHO, LATENCY_SIZES, counts, cfg.lat_warmup)
        ping = ping_rtts(topo, host, cfg.ping_count, cfg.ping_interval, TCP_ECHO)
        conn = connect_close(topo, host, TCP_ECHO, cfg.connect_seconds, cfg.connect_max)
        samples.append({"rtt": {str(k): v for k, v in sized.items()}, "ping": ping, "connect": conn})
        log(f"    latency rep {rep + 1}/{cfg.reps}: " + ", ".join(
            f"{size} B {sized[size]['p50']:.0f}" for size in LATENCY_SIZES)
            + f" µs; ping ({ping['method']}) {ping['p50']:.0f} µs; connect() {conn['connect_p50_us']:.0f} µs, "
              f"{conn['rate']:.0f} connect+close/s")
    latency = {
        "rtt": {str(size): {q: median_or_none(s["rtt"][str(size)][q] for s in samples) for q in ("p50", "p99")}
                for size in LATENCY_SIZES},
        "ping": {"p50": median_or_none(s["ping"]["p50"] for s in samples),
                 "p99": median_or_none(s["ping"]["p99"] for s in samples),
                 "method": samples[0]["ping"]["method"], "lost": sum(s["ping"]["lost"] for s in samples)},
        "connect_p50_us": median_or_none(s["connect"]["connect_p50_us"] for s in samples),
        "connect_p99_us": median_or_none(s["connect"]["connect_p99_us"] for s in samples),
        "connect_close_per_s": median_or_none(s["connect"]["rate"] for s in samples),
    }
    return latency, samples


def row_result(name: str, stack: str, topology: str, status: str = "ok", **extra) -> dict:
    return {"name": name, "stack": stack, "topology": topology, "status": status, "mode": extra.pop("mode", ""),
            "note": extra.pop("note", ""), "metrics": extra.pop("metrics", {k: None for k, _, _ in METRICS}),
            **extra}


def run_row(kind: str, cfg: BenchConfig, placement: Placement, xdp_mode: Optional[str],
            log: Callable[[str], None], ipv6: bool = False, offloads: str = "off") -> dict:
    """One row: a topology of its own, a server in its stack namespace, the client here.

    ``ipv6``: the same row over IPv6 (the client reaches ``stack_addr6``; the latency suite is left out).
    ``offloads``: "off" (both ends of the link without checksum and segmentation offloads, a wire's
    frames) or "default" (as the kernel sets a new veth up: the kernel client's end sends partial
    checksums and TSO super-frames; the row is named "... +offloads").
    """
    Topology = _topology_class(placement)
    if kind == "kernel":
        name, stack, topo_kind = "kernel", "kernel", "veth"
    elif kind == "pytcp":
        name, stack, topo_kind = "pytcp/tap", "pytcp", "tap"
        problem = pytcp_problem()
        if problem:
            return row_result(name, stack, topo_kind, "not available", note=problem)
    elif kind == "lwip":
        name, stack, topo_kind = "lwip/tap", "lwip", "tap"
        problem = lwip_problem()
        if problem:
            return row_result(name, stack, topo_kind, "not available", note=problem)
    else:
        name, stack, topo_kind = f"ustack/{kind}", "ustack", "tap" if kind == "tap" else "veth"
    if ipv6:
        name += " v6"
    if offloads != "off":
        name += " +offloads"
    log(f"  {name} ({topo_kind} topology)")
    t0 = time.monotonic()
    try:
        with Topology(topo_kind, tag="bn", ipv6=ipv6, offloads=offloads) as topo:
            widen_port_range(topo)
            if topo_kind == "veth" and cfg.steer_client_rx and not steer_peer_receive(topo, placement.client):
                log("    could not steer the client's receive work (RPS): left where it was")
            server = None
            try:
                if kind == "kernel":
                    server, mode = kernel_server(topo, cfg.bulk_bytes), "kernel sockets"
                elif kind == "pytcp":
                    server, mode = pytcp_server(topo, cfg.bulk_bytes)
                elif kind == "lwip":
                    server, mode = lwip_server(topo, cfg.bulk_bytes)
                else:
                    server, mode = ustack_server(topo, kind, cfg.bulk_bytes, xdp_mode)
                cpus = server.cpus
                if ipv6:
                    # Both families against this one server, interleaved: the ratio is the same
                    # server at the same time, not two rows minutes apart on a noisy machine.
                    both = measure_families(topo, {"4": topo.stack_addr, "6": topo.stack_addr6}, cfg, log,
                                            server.proc.pid)
                    metrics, samples = both["6"]
                    paired_v4 = {"metrics": both["4"][0], "samples": both["4"][1]}
                else:
                    metrics, samples = measure_services(topo, topo.stack_addr, cfg, log, server.proc.pid)
                latency = None
                if cfg.latency and not ipv6:
                    latency, samples["latency"] = measure_latency(topo, topo.stack_addr, cfg, log)
            finally:
                rc = server.stop() if server is not None else None
            extra = {}
            if stack == "ustack":
                extra["server_drops"] = ustack_drops(server.lines)
            note = "" if rc in (0, None) else f"server exited with status {rc}"
            if latency is not None:
                extra["latency"] = latency
            if ipv6:
                extra["paired_v4"] = paired_v4
            return row_result(name, stack, topo_kind, mode=mode, metrics=metrics, samples=samples,
                              server_cpus=cpus, seconds=round(time.monotonic() - t0, 1), note=note,
                              family=6 if ipv6 else 4, offloads=offloads, **extra)
    except KeyboardInterrupt:
        raise
    except MissingProgram as exc:  # one line naming it; the row is skipped, the others run
        log(f"    skipped: {exc}")
        return row_result(name, stack, topo_kind, "not available", note=str(exc))
    except Exception as exc:  # a row that fails is reported, the others still run
        log(f"    failed: {exc!r}")
        return row_result(name, stack, topo_kind, "error", note=f"{type(exc).__name__}: {exc}",
                          seconds=round(time.monotonic() - t0, 1))


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
