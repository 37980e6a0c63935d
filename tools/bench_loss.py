"""Bulk TCP under random loss: ustack beside the kernel in the same run (``ustack bench``'s loss row).

    python -m ustack.tools.bench_loss [--loss 3] [--bytes 20000000] [--reps 3] [--pipe-only]
                                      [--backend packet] [--echo BYTES]

Two parts:

- pipe (no privileges): two ustack stacks on a manual clock over the pipe
  backend (1 ms RTT) at 1% and 3% random loss each way: simulated MB/s of a
  ``--bytes`` transfer, retransmissions and retransmission timeouts
  (``bench_pipe.transfer``);
- veth (root): a veth topology whose kernel side drops ``--loss`` percent of
  TCP segments in each direction with nftables (``meta l4proto tcp numgen
  random mod 100 < N drop`` on input and output, FACTS.md: no netem here).
  Rows, medians of ``--reps``: Linux -> Linux (a kernel sink in the stack
  namespace of a topology of its own, the same rules on its peer side),
  ustack -> kernel sink, kernel -> ustack, each ``--bytes``, in MB/s, with
  ustack's retransmissions and RTOs; with ``--echo`` also an echo through
  ustack of that many bytes each way (checked exact). Ratios to Linux ->
  Linux are printed.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time

from ustack.tools import bench_pipe

NFT_RULES = """table inet ustack_loss {{
  chain input {{ type filter hook input priority 0; meta l4proto tcp numgen random mod 100 < {p} drop; }}
  chain output {{ type filter hook output priority 0; meta l4proto tcp numgen random mod 100 < {p} drop; }}
}}
"""
PORT = 7100


def pipe_rows(size: int, losses=(0.01, 0.03)) -> list[dict]:
    rows = []
    for loss in losses:
        t = bench_pipe.transfer(size, loss=loss)
        rows.append({"loss": loss, "mb_s_simulated": size / t.simulated / 1e6, "retransmits": t.retransmits,
                     "timeouts": t.timeouts, "exact": t.received == size})
    return rows


def _drop(topo, percent: int) -> None:
    topo.peer_run(["nft", "-f", "-"], input=NFT_RULES.format(p=percent), text=True, check=True,
                  capture_output=True)


def _sink(lsock: socket.socket, result: dict) -> None:
    try:
        conn, _ = lsock.accept()
        with conn:
            n = 0
            while chunk := conn.recv(1 << 20):
                n += len(chunk)
            result["bytes"] = n
            result["end"] = time.monotonic()
    except OSError as e:
        result["error"] = e


def linux_to_linux(size: int, percent: int) -> float:
    """A kernel sender in the peer namespace to a kernel sink in the stack namespace: MB/s."""
    from pyroute2 import IPRoute

    from ustack.tools.netns import Topology, peer_socket

    with Topology.veth(tag="bll") as topo:
        with topo.in_stack_ns(), IPRoute() as ipr:
            index = ipr.link_lookup(ifname=topo.stack_ifname)[0]
            ipr.addr("add", index=index, address=topo.stack_addr, prefixlen=topo.prefixlen)
            lsock = socket.socket()
        _drop(topo, percent)
        with lsock:
            lsock.bind((topo.stack_addr, PORT))
            lsock.listen(1)
            result: dict = {}
            t = threading.Thread(target=_sink, args=(lsock, result), daemon=True)
            t.start()
            with peer_socket(topo, socket.AF_INET, socket.SOCK_STREAM) as c:
                start = time.monotonic()
                c.connect((topo.stack_addr, PORT))
                c.sendall(bytes(size))
            t.join(600)
        if result.get("bytes") != size:
            raise RuntimeError(f"Linux -> Linux: {result}")
        return size / (result["end"] - start) / 1e6


class _Ustack:
    """A stack on ``backend`` in the stack namespace of a fresh veth topology, driven in this thread."""

    def __init__(self, backend: str, percent: int):
        from ustack.api.driver import Driver
        from ustack.stack import Stack
        from ustack.tools.netns import Topology

        self.topo = Topology.veth(tag="blu")
        self.dev = None
        try:
            self.dev = self.topo.open_device(backend)
            self.stack = Stack(self.dev, f"{self.topo.stack_addr}/{self.topo.prefixlen}")
            self.layer = self.stack.tcp
            self.driver = Driver(self.stack)
            _drop(self.topo, percent)
        except BaseException:
            self.close()
            raise

    def wait(self, predicate, timeout: float) -> None:
        layer, driver = self.layer, self.driver

        def check():
            layer.flush(driver.clock())
            return predicate()

        if not driver.wait_until(check, timeout):
            raise RuntimeError("ustack: timed out")

    def close(self) -> None:
        if self.dev is not None:
            self.dev.close()
        self.topo.close()


def ustack_to_kernel(size: int, percent: int, backend: str) -> dict:
    from ustack.tools.netns import peer_socket
    from ustack.transport.tcp import State

    u = _Ustack(backend, percent)
    try:
        lsock = peer_socket(u.topo, socket.AF_INET, socket.SOCK_STREAM)
        with lsock:
            lsock.bind((u.topo.peer_addr, PORT))
            lsock.listen(1)
            result: dict = {}
            t = threading.Thread(target=_sink, args=(lsock, result), daemon=True)
            t.start()
            start = time.monotonic()
            conn = u.layer.connect(None, (socket.inet_aton(u.topo.peer_addr), PORT), u.driver.clock())
            u.wait(lambda: conn.state == State.ESTABLISHED, 10.0)
            chunk = memoryview(bytes(1 << 16))
            sent = 0

            def pump():
                nonlocal sent
                while sent < size:
                    n = conn.send(chunk[:min(len(chunk), size - sent)])
                    if not n:
                        break
                    sent += n
                if sent == size and not conn.tcb.fin_queued:
                    conn.shutdown(socket.SHUT_WR)
                return "bytes" in result or "error" in result

            u.wait(pump, 600.0)
            t.join(10)
        if result.get("bytes") != size:
            raise RuntimeError(f"ustack -> kernel: {result}")
        info = conn.info()
        return {"mb_s": size / (result["end"] - start) / 1e6, "retransmits": info.retransmits,
                "timeouts": info.timeouts, "tlps": info.tlps, "undone": info.spurious_undone}
    finally:
        u.close()


def _client(topo, size: int, echo: bool, result: dict) -> None:
    from ustack.tools.netns import peer_socket

    try:
        with peer_socket(topo, socket.AF_INET, socket.SOCK_STREAM) as c:
            c.connect((topo.stack_addr, PORT))
            if not echo:
                c.sendall(bytes(size))
                c.shutdown(socket.SHUT_WR)
                c.recv(1)
                return
            data = bytes((i * 7 + i // 4096) % 251 for i in range(min(size, 1 << 20)))
            reps, back = size // len(data), bytearray()

            def reader():
                while len(back) < reps * len(data) and (chunk := c.recv(1 << 20)):
                    back.extend(chunk)

            r = threading.Thread(target=reader, daemon=True)
            r.start()
            for _ in range(reps):
                c.sendall(data)
            r.join(1200)
            result["exact"] = bytes(back) == data * reps
            result["bytes"] = len(back)
    except OSError as e:
        result["error"] = e


def kernel_to_ustack(size: int, percent: int, backend: str, echo: bool = False) -> dict:
    u = _Ustack(backend, percent)
    try:
        lst = u.layer.listen((bytes(4), PORT), 4)
        result: dict = {}
        t = threading.Thread(target=_client, args=(u.topo, size, echo, result), daemon=True)
        start = time.monotonic()
        t.start()
        state = {"conn": None, "got": 0, "pending": bytearray()}

        def pump():
            conn = state["conn"]
            if conn is None:
                conn = state["conn"] = lst.accept()
                if conn is None:
                    return False
            while chunk := conn.recv(1 << 20):
                state["got"] += len(chunk)
                if echo:
                    state["pending"] += chunk
            if echo and state["pending"]:
                n = conn.send(state["pending"])
                del state["pending"][:n]
            if not echo:
                return state["got"] >= size
            return "exact" in result or "error" in result

        u.wait(pump, 1200.0)
        end = time.monotonic()
        conn = state["conn"]
        if not echo:
            conn.close()
        t.join(10)
        if "error" in result or (echo and not result.get("exact")):
            raise RuntimeError(f"kernel -> ustack: {result}")
        info = conn.info()
        return {"mb_s": size / (end - start) / 1e6, "retransmits": info.retransmits, "timeouts": info.timeouts,
                "tlps": info.tlps, "undone": info.spurious_undone, "exact": result.get("exact")}
    finally:
        u.close()


def veth_rows(size: int, percent: int, reps: int, backend: str, echo: int = 0, log=print) -> dict:
    runs: dict = {"linux": [], "ustack_to_kernel": [], "kernel_to_ustack": []}
    for _ in range(reps):  # interleaved, so that the machine's load falls on every row alike
        runs["linux"].append({"mb_s": linux_to_linux(size, percent)})
        runs["ustack_to_kernel"].append(ustack_to_kernel(size, percent, backend))
        runs["kernel_to_ustack"].append(kernel_to_ustack(size, percent, backend))
    if echo:
        runs["echo"] = [kernel_to_ustack(echo, percent, backend, echo=True)]
    out = {}
    for name, rs in runs.items():
        out[name] = {"mb_s": statistics.median(r["mb_s"] for r in rs), "runs": rs}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ustack.tools.bench_loss", description=__doc__.splitlines()[0])
    p.add_argument("--loss", type=int, default=3, help="percent of TCP segments dropped each way on veth (default 3)")
    p.add_argument("--bytes", type=int, default=20_000_000, help="bytes per transfer (default 20 MB)")
    p.add_argument("--reps", type=int, default=3, help="repetitions (median reported)")
    p.add_argument("--backend", default="packet", help="ustack backend on veth (default packet)")
    p.add_argument("--echo", type=int, default=0, help="also echo this many bytes each way through ustack")
    p.add_argument("--pipe-only", action="store_true", help="only the pipe part (no privileges needed)")
    args = p.parse_args(argv)
    if not 0 <= args.loss < 100 or args.bytes <= 0 or args.reps <= 0:
        p.error("need 0 <= --loss < 100, --bytes > 0, --reps > 0")
    for r in pipe_rows(min(args.bytes, 5_000_000)):
        print(f"pipe {r['loss']:.0%} loss: {r['mb_s_simulated']:.1f} MB/s (simulated time), "
              f"{r['retransmits']} retransmitted, {r['timeouts']} RTOs, exact {r['exact']}")
    if args.pipe_only:
        return 0
    out = veth_rows(args.bytes, args.loss, args.reps, args.backend, args.echo)
    base = out["linux"]["mb_s"]
    for name, row in out.items():
        extra = ""
        if name != "linux":
            rto = statistics.median(r["timeouts"] for r in row["runs"])
            rtx = statistics.median(r["retransmits"] for r in row["runs"])
            extra = f", ustack retransmitted {rtx:.0f}, RTOs {rto:.0f}"
            if name == "echo":
                extra += f", exact {row['runs'][0]['exact']}"
        print(f"veth {args.loss}% loss each way, {name}: {row['mb_s']:.1f} MB/s "
              f"({row['mb_s'] / base:.2f}x Linux -> Linux){extra}; runs "
              + ", ".join(f"{r['mb_s']:.1f}" for r in row["runs"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
