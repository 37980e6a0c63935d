"""``ustack bench`` rows for an unmodified program: ``python -m http.server`` on ustack vs on the kernel.

The server is the stdlib's own ``python -m http.server PORT --bind ADDR
--directory D`` (ThreadingHTTPServer, HTTP/1.0: one connection per request,
one thread per connection), started in the stack namespace of a topology of
its own:

- ``kernel``: as is, on the kernel's sockets (the stack end of the veth gets
  the address, as the kernel ring row does);
- ``ustack/B``: unchanged under ``python -m ustack run --backend B`` (veth
  topology; TAP topology for tap).

The load is a small HTTP loop in the peer namespace (this process, one
thread): connect, ``GET /FILE`` (``BODY_BYTES`` of data), read to EOF,
close, the next request at once; for ``seconds`` per repetition after a
warm-up. Each request's latency runs from connect() to EOF and every
response is checked (status 200 and the whole body, byte for byte). Figures:
requests per second and latency p50/p99 in µs, medians over the
repetitions; each repetition in ``samples``.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Optional

from ustack.tools.bench_clients import widen_port_range
from ustack.tools.bench_servers import stop_process
from ustack.tools.host_programs import MissingProgram

HTTP_PORT = 8000
BODY_BYTES = 1024
FILE_NAME = "page.bin"
PROGRAM_METRICS = (
    ("rps", "req/s", "1/s"),
    ("p50_us", "p50", "µs"),
    ("p99_us", "p99", "µs"),
)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fetch(host: str, port: int, path: str, body: bytes, timeout: float = 5.0) -> None:
    """One HTTP/1.0 GET on a new connection, read to EOF; AssertionError unless 200 with exactly ``body``."""
    s = socket.create_connection((host, port), timeout)
    try:
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        chunks = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        s.close()
    response = b"".join(chunks)
    head, _, got = response.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.0 200") or got != body:
        raise AssertionError(f"bad response: {head[:80]!r}, {len(got)} bytes of body")


def load(host: str, port: int, path: str, body: bytes, seconds: float, warmup: int = 20) -> dict:
    """Requests back to back for ``seconds``: {"requests", "rps", "p50_us", "p99_us"} (the caller's namespace)."""
    for _ in range(warmup):
        fetch(host, port, path, body)
    latencies = []
    start = time.perf_counter()
    end = start + seconds
    now = start
    while now < end:
        fetch(host, port, path, body)
        done = time.perf_counter()
        latencies.append((done - now) * 1e6)
        now = done
    elapsed = now - start
    return {"requests": len(latencies), "rps": len(latencies) / elapsed,
            "p50_us": _percentile(latencies, 0.50), "p99_us": _percentile(latencies, 0.99)}


def server_argv(kind: str, topo, folder: str, xdp_mode: Optional[str]) -> list[str]:
    """The command that serves ``folder``: http.server as is (kernel) or under ``ustack run --backend kind``."""
    program = ["-m", "http.server", str(HTTP_PORT), "--bind", topo.stack_addr, "--directory", folder]
    if kind == "kernel":
        return [sys.executable, *program]
    run = [sys.executable, "-m", "ustack", "run", "--backend", kind, "--ifname", topo.stack_ifname,
           "--addr", f"{topo.stack_addr}/{topo.prefixlen}"]
    if kind == "afxdp" and xdp_mode:
        run += ["--xdp-mode", xdp_mode]
    return [*run, *program]


def _add_stack_address(topo) -> None:
    from pyroute2 import IPRoute

    with topo.in_stack_ns(), IPRoute() as ipr:
        index = ipr.link_lookup(ifname=topo.stack_ifname)[0]
        ipr.addr("add", index=index, address=topo.stack_addr, prefixlen=topo.prefixlen)


def wait_serving(topo, proc, timeout: float = 30.0, port: int = HTTP_PORT,
                 detail: Callable[[], str] = lambda: "") -> None:
    """Until a connection to the server on ``port`` succeeds from the peer namespace (bounded by ``timeout``).

    Raises RuntimeError when the server exits first or does not accept in time; ``detail()`` (say, the
    tail of its log) is added to the message."""
    deadline = time.monotonic() + timeout
    with topo.in_peer_ns():
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with status {proc.returncode}{detail()}")
            try:
                socket.create_connection((topo.stack_addr, port), 1.0).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not accept connections within {timeout:.0f} s"
                                       f"{detail()}") from None
                time.sleep(0.02)


def run_program_row(kind: str, seconds: float, reps: int, placement, xdp_mode: Optional[str],
                    log: Callable[[str], None]) -> dict:
    """One row: http.server on ``kind`` ("kernel" or a ustack backend), loaded from the peer namespace."""
    from ustack.tools.bench_runner import _topology_class

    name = "kernel" if kind == "kernel" else f"ustack/{kind}"
    topo_kind = "tap" if kind == "tap" else "veth"
    log(f"  http.server on {name} ({topo_kind} topology)")
    body = os.urandom(BODY_BYTES)
    row = {"name": name, "program": "python -m http.server", "topology": topo_kind, "status": "ok", "note": "",
           "metrics": {k: None for k, _, _ in PROGRAM_METRICS}, "samples": []}
    try:
        with tempfile.TemporaryDirectory() as folder, _topology_class(placement)(topo_kind, tag="bh") as topo:
            with open(os.path.join(folder, FILE_NAME), "wb") as f:
                f.write(body)
            widen_port_range(topo)
            if kind == "kernel":
                _add_stack_address(topo)
            proc = topo.stack_popen(server_argv(kind, topo, folder, xdp_mode), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            try:
                wait_serving(topo, proc)
                with topo.in_peer_ns():
                    for rep in range(reps):
                        sample = load(topo.stack_addr, HTTP_PORT, "/" + FILE_NAME, body, seconds)
                        row["samples"].append(sample)
                        log(f"    rep {rep + 1}/{reps}: {sample['rps']:.0f} req/s, p50 {sample['p50_us']:.0f} µs, "
                            f"p99 {sample['p99_us']:.0f} µs")
            finally:
                stop_process(proc, 10)
        row["metrics"] = {k: statistics.median(s[k] for s in row["samples"]) for k, _, _ in PROGRAM_METRICS}
    except KeyboardInterrupt:
        raise
    except MissingProgram as exc:  # one line naming it; the row is skipped, the others run
        log(f"    skipped: {exc}")
        row.update(status="not available", note=str(exc))
    except Exception as exc:  # a row that fails is reported, the others still run
        log(f"    failed: {exc!r}")
        row.update(status="error", note=f"{type(exc).__name__}: {exc}")
    return row


def format_programs(result: dict) -> list[str]:
    """The table of program rows, each with its ratio to the kernel row (requests per second)."""
    rows = result.get("programs") or []
    if not rows:
        return []
    kernel = next((r for r in rows if r["name"] == "kernel" and r["status"] == "ok"), None)
    out = ["", f"unmodified program: python -m http.server, GET of {BODY_BYTES} B, one connection per request, "
               f"back to back from the peer namespace:"]
    width = max([len("row")] + [len(r["name"]) for r in rows])
    out.append(f"{'row':{width}}  " + "  ".join(f"{h:>8}" for _, h, _ in PROGRAM_METRICS) + "  vs kernel")
    for r in rows:
        if r["status"] != "ok":
            out.append(f"{r['name']:{width}}  {r['status']}: {r['note']}")
            continue
        m = r["metrics"]
        ratio = f"{m['rps'] / kernel['metrics']['rps']:.2f}x req/s" if kernel and r is not kernel else ""
        out.append(f"{r['name']:{width}}  {m['rps']:>8.0f}  {m['p50_us']:>8.0f}  {m['p99_us']:>8.0f}  {ratio}")
    return out
