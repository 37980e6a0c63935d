"""asyncio echo on ustack: the native loop (ustack.api.aio) against asyncio's stock loop on readiness fds.

    python -m ustack.tools.bench_aio pipe [--rounds N]      # two stacks over the pipe, no privileges
    python -m ustack.tools.bench_aio veth [--rounds N]      # root: ustack run server, kernel client over veth

Each run: an asyncio echo server (start_server; read 64 KiB, write, drain)
and an asyncio client that measures request/response latency (64-byte
messages, one at a time) and the time to send 1 MB and read its echo
back. ``pipe``: both ends are ustack stacks in this process, each with
its loop in its own thread (native: ustack's loop on each; stock:
asyncio's SelectorEventLoop with the driver threads and readiness fds).
``veth``: the server runs under ``ustack run --backend packet
[--asyncio stock]`` in one namespace, the client is a kernel asyncio
program in the other. Figures are medians; runs of the two loops alternate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time

PORT = 7007
MB = 1 << 20

async def _client(reader, writer, rounds, transfers):
    msg = b"x" * 64
    lat = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        writer.write(msg)
        await reader.readexactly(64)
        lat.append(time.perf_counter() - t0)
    big = os.urandom(MB)
    xfer = []
    for _ in range(transfers):
        t0 = time.perf_counter()
        writer.write(big)
        got = await reader.readexactly(len(big))
        xfer.append(time.perf_counter() - t0)
        if got != big:
            raise AssertionError("echo differs")
    writer.close()
    await writer.wait_closed()
    return statistics.median(lat) * 1e6, statistics.median(xfer) * 1e3


async def _echo(reader, writer):
    while True:
        data = await reader.read(65536)
        if not data:
            break
        writer.write(data)
        await writer.drain()
    writer.close()


async def _serve(host: str, port: int, seconds: float) -> None:
    """The veth run's server, run by ``ustack run -m`` in the stack's namespace."""
    srv = await asyncio.start_server(_echo, host, port)
    print("ready", flush=True)
    await asyncio.sleep(seconds)
    srv.close()


async def _connect_and_measure(host: str, port: int, rounds: int, transfers: int):
    """The veth run's client, on the kernel's stack in the peer namespace."""
    for _ in range(200):
        try:
            reader, writer = await asyncio.open_connection(host, port)
            break
        except OSError:
            await asyncio.sleep(0.05)
    else:
        raise RuntimeError(f"cannot connect to {host}:{port}")
    return await _client(reader, writer, rounds, transfers)


def run_pipe(native: bool, rounds: int, transfers: int, busy_poll=None) -> tuple[float, float]:
    """One pipe run: (median latency µs, median 1 MB echo ms)."""
    from ustack.api.aio import EventLoop
    from ustack.api.clock import MonotonicClock
    from ustack.api.driver import Driver
    from ustack.api.patch import patch, unpatch
    from ustack.backends.pipe import PipeLink
    from ustack.api import environment
    from ustack.stack import Stack

    clock = MonotonicClock()
    link = PipeLink(clock)
    fastpath = environment.fastpath()
    sa, sb = Stack(link.a, "198.18.0.1/24", fastpath=fastpath), Stack(link.b, "198.18.0.2/24", fastpath=fastpath)
    kw = {} if busy_poll is None else {"busy_poll": busy_poll}
    da, db = Driver(sa, clock, **kw), Driver(sb, clock, **kw)
    if native:
        la, lb = EventLoop(da), EventLoop(db)
    else:
        da.start()
        db.start()
        la, lb = asyncio.SelectorEventLoop(), asyncio.SelectorEventLoop()
    patch(da)
    result = []

    async def client():
        s = db.socket()
        if native:
            s.setblocking(False)
            await lb.sock_connect(s, ("198.18.0.1", PORT))
        else:
            s.settimeout(5)
            s.connect(("198.18.0.1", PORT))
            s.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=s)
        result.append(await _client(reader, writer, rounds, transfers))

    async def server():
        handled = la.create_future()

        async def echo(reader, writer):
            await _echo(reader, writer)
            await writer.wait_closed()
            handled.set_result(None)

        srv = await asyncio.start_server(echo, "198.18.0.1", PORT)
        t = threading.Thread(target=lambda: lb.run_until_complete(client()))
        t.start()
        await handled  # the client closed and the server's side of the connection is done
        t.join()
        srv.close()
        await srv.wait_closed()

    try:
        la.run_until_complete(server())
    finally:
        unpatch()
        la.close()
        lb.close()
        da.close()
        db.close()
        link.close()
    return result[0]


def run_veth(native: bool, rounds: int, transfers: int, busy_poll=None) -> tuple[float, float]:
    from ustack.tools.netns import Topology

    with Topology.veth(tag="ab") as t:
        argv = [sys.executable, "-m", "ustack", "run", "--backend", "packet", "--ifname", t.stack_ifname,
                "--addr", f"{t.stack_addr}/{t.prefixlen}"]
        if not native:
            argv += ["--asyncio", "stock"]
        if busy_poll is not None:
            argv += ["--busy-poll", str(busy_poll)]
        server = t.stack_popen([*argv, "-m", __spec__.name, "_serve", t.stack_addr, str(PORT), "60"],
                               stdout=subprocess.PIPE, text=True)
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the server did not start")
        out = t.peer_run([sys.executable, "-m", __spec__.name, "_client", t.stack_addr, str(PORT), str(rounds),
                          str(transfers)],
                         capture_output=True, text=True, timeout=120)
        server.terminate()
        server.wait(10)
        if out.returncode:
            raise RuntimeError(out.stderr)
        lat, xfer = map(float, out.stdout.split())
        return lat, xfer


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_serve"]:  # the two ends of a veth run (run_veth starts them)
        asyncio.run(_serve(argv[1], int(argv[2]), float(argv[3])))
        return 0
    if argv[:1] == ["_client"]:
        lat, xfer = asyncio.run(_connect_and_measure(argv[1], int(argv[2]), int(argv[3]), int(argv[4])))
        print(lat, xfer)
        return 0
    p = argparse.ArgumentParser(prog="bench_aio", description=__doc__.splitlines()[0])
    p.add_argument("where", choices=("pipe", "veth"))
    p.add_argument("--rounds", type=int, default=2000, help="request/response rounds per run")
    p.add_argument("--transfers", type=int, default=5, help="1 MB echoes per run")
    p.add_argument("--runs", type=int, default=3, help="runs per loop kind (medians of their medians)")
    p.add_argument("--busy-poll", type=float, help="the ustack side's busy-poll budget in seconds (default: "
                                                   "the Driver's)")
    args = p.parse_args(argv)
    run = run_pipe if args.where == "pipe" else run_veth
    got: dict = {True: [], False: []}
    for _ in range(args.runs):  # interleaved, so a change in the machine's load hits both alike
        for native in (True, False):
            got[native].append(run(native, args.rounds, args.transfers, args.busy_poll))
    rows = {"native" if native else "stock": (statistics.median(g[0] for g in runs),
                                              statistics.median(g[1] for g in runs))
            for native, runs in got.items()}
    print(f"{args.where}: asyncio echo, medians of {args.runs} runs")
    print(f"{'loop':8} {'64 B req/resp (µs)':>20} {'1 MB echo (ms)':>16}")
    for name, (lat, xfer) in rows.items():
        print(f"{name:8} {lat:20.1f} {xfer:16.1f}")
    n, s = rows["native"], rows["stock"]
    print(f"{'stock/native':8} {s[0] / n[0]:20.2f} {s[1] / n[1]:16.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
