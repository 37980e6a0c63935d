"""Bulk TCP under random loss: ustack beside the kernel in the same run (``ustack bench``'s loss row).

    python -m ustack.tools.bench_loss [--loss 3] [--bytes 20000000] [--reps 3] [--pipe-only]
                                      [--backend packet] [--echo BYTES] [--congestion cubic,bbr]

Two parts:

- pipe (no privileges): two ustack stacks on a manual clock over the pipe
  backend (1 ms RTT) at 1% and 3% random loss each way: simulated MB/s of a
  ``--bytes`` transfer, retransmissions and retransmission timeouts
  (``bench_pipe.transfer``);
- veth (root): a veth topology losing ``--loss`` percent of TCP segments in
  each direction, always on the receiving side, so that no sender is told:
  nftables (``meta l4proto tcp numgen random mod 100 < N drop`` on the
  input hook, FACTS.md: no netem here) in a kernel receiver's namespace,
  ``RxLoss`` (a seeded Device decorator) in front of ustack's stack. A drop
  on the kernel's output hook is no loss: its TCP sees the error and sends
  the segment again at once.
  Rows, medians of ``--reps``: Linux -> Linux (a kernel sink in the stack
  namespace of a topology of its own, the same rules on its peer side),
  ustack -> kernel sink, kernel -> ustack, each ``--bytes``, in MB/s, with
  ustack's retransmissions and RTOs; with ``--echo`` also an echo through
  ustack of that many bytes each way (checked exact). Ratios to Linux ->
  Linux are printed.

  The kernel's congestion control is its default (``net.ipv4.
  tcp_congestion_control``: BBR on some machines, which does not slow down
  for random loss); when that is not ustack's algorithm, Linux -> Linux runs
  a second time with the kernel sender on ustack's algorithm
  (``TCP_CONGESTION``: CUBIC, BBR, or Reno for NewReno), row ``linux_<name>``,
  and ustack -> kernel is compared with that row as well: the same loss
  and the same congestion control. Kernel -> ustack has the kernel's
  default sender, as the ``linux`` row.
"""

from __future__ import annotations

import argparse
import functools
import random
import shutil
import socket
import statistics
import sys
import time

from ustack.tools import bench_pipe
from ustack.tools.host_programs import MissingProgram, require
from ustack.transport.tcp.congestion import ALGORITHMS

# Drops on the receiving side only: a kernel sender whose segment its own OUTPUT hook drops is told
# (NF_DROP -> -EPERM) and simply sends it again on the next ACK, without a loss or a congestion signal
# (Linux -> Linux at "3%" then retransmitted 2 of 14,000 segments): that is not a lossy wire.
NFT_RULES = """table inet ustack_loss {{
  chain input {{ type filter hook input priority 0; meta l4proto tcp numgen random mod 100 < {p} drop; }}
}}
"""
PORT = 7100
# ustack's congestion controls by the name Linux gives the same algorithm (TCP_CONGESTION)
LINUX_NAMES = {"cubic": "cubic", "newreno": "reno", "reno": "reno", "bbr": "bbr"}


def kernel_congestion() -> str:
    """The kernel's default congestion control (a new namespace starts with the initial one's)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
            return f.read().strip()
    except OSError:
        return "cubic"


def pipe_rows(size: int, losses=(0.01, 0.03)) -> list[dict]:
    rows = []
    for loss in losses:
        t = bench_pipe.transfer(size, loss=loss)
        rows.append({"loss": loss, "mb_s_simulated": size / t.simulated / 1e6, "retransmits": t.retransmits,
                     "timeouts": t.timeouts, "exact": t.received == size})
    return rows


def _drop(topo, percent: int, stack_side: bool = False) -> None:
    """``percent`` of the TCP segments arriving in the peer namespace (``stack_side``: in the stack
    namespace, for Linux -> Linux's sink) are dropped before the kernel's TCP sees them."""
    nft = require("nft", "the loss rows' segment drops (nftables)")
    run = topo.peer_run if not stack_side else functools.partial(_stack_run, topo)
    run([nft, "-f", "-"], input=NFT_RULES.format(p=percent), text=True, check=True, capture_output=True)


def _stack_run(topo, argv, **kw) -> None:
    import subprocess

    proc = topo.stack_popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    out, err = proc.communicate(kw.get("input"), timeout=30)
    if proc.returncode:
        raise RuntimeError(f"{argv}: {err.strip()}")


class RxLoss:
    """A Device decorator that loses ``percent`` of the TCP frames arriving for ustack, before the
    stack sees them (seeded): the wire's loss toward ustack, which no hook on the kernel's side
    can make without telling the kernel's TCP (see NFT_RULES)."""

    def __init__(self, device, percent: int, seed: int = 1):
        self.device = device
        self.loss = percent / 100
        self.random = random.Random(seed)
        self.lost = 0

    def rx_burst(self, max_frames: int):
        frames = self.device.rx_burst(max_frames)
        loss = self.loss
        if not frames or not loss:
            return frames
        rnd = self.random.random
        kept, lost = [], []
        for f in frames:
            # Ethernet II, IPv4, protocol 6 (TCP)
            (lost if len(f) >= 34 and f[12] == 8 and f[13] == 0 and f[23] == 6 and rnd() < loss else kept).append(f)
        if lost:
            self.lost += len(lost)
            self.device.rx_release(lost)
        return kept

    def __getattr__(self, name):
        return getattr(self.device, name)


# The kernel ends run as processes of their own (no GIL shared with the stack under test); each
# prints one JSON line. time.monotonic() is CLOCK_MONOTONIC, the same clock in every process.
SINK = """
import json, socket, sys, time
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((sys.argv[1], int(sys.argv[2]))); l.listen(1); print(json.dumps({"ready": 1}), flush=True)
c, _ = l.accept(); n = 0; start = time.monotonic()
while chunk := c.recv(1 << 20):
    n += len(chunk)
print(json.dumps({"bytes": n, "start": start, "end": time.monotonic()}), flush=True)
"""
SOURCE = """
import json, socket, sys, threading, time
size, echo = int(sys.argv[3]), sys.argv[4] == "echo"
c = socket.socket()
if len(sys.argv) > 5 and sys.argv[5]:
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, sys.argv[5].encode())
c.connect((sys.argv[1], int(sys.argv[2]))); start = time.monotonic()
if not echo:
    c.sendall(bytes(size)); c.shutdown(socket.SHUT_WR); c.recv(1)
    print(json.dumps({"bytes": size, "start": start, "end": time.monotonic()}), flush=True)
    sys.exit(0)
data = bytes((i * 7 + i // 4096) % 251 for i in range(1 << 20)); reps = max(1, size // len(data))
back = bytearray()
def reader():
    while len(back) < reps * len(data) and (chunk := c.recv(1 << 20)):
        back.extend(chunk)
r = threading.Thread(target=reader); r.start()
for _ in range(reps):
    c.sendall(data)
r.join()
ok = len(back) == reps * len(data) and all(back[i:i + len(data)] == data for i in range(0, len(back), len(data)))
print(json.dumps({"bytes": len(back), "exact": ok, "start": start, "end": time.monotonic()}), flush=True)
"""


class _Answered:
    """Has the kernel end printed its line? Asked once per poll round, answered by a select(2) at most
    every ``every`` seconds: a system call in every round of the stack's busy poll took a quarter of
    its time (py-spy), which the kernel ends do not pay. When the line came is never a measurement."""

    def __init__(self, proc, every: float = 0.002):
        self.fd = proc.stdout
        self.every = every
        self.next = 0.0

    def __call__(self) -> bool:
        import select

        now = time.monotonic()
        if now < self.next:
            return False
        self.next = now + self.every
        return bool(select.select([self.fd], [], [], 0)[0])


def _json_line(proc, timeout: float) -> dict:
    import json
    import select

    if not select.select([proc.stdout], [], [], timeout)[0]:
        raise RuntimeError("kernel end: no answer")
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"kernel end exited: {proc.wait()}")
    return json.loads(line)


def _cpus() -> tuple:
    """(stack CPU, kernel end's CPU) on a machine with two or more, as ``ustack bench`` places them."""
    import os

    cpus = sorted(os.sched_getaffinity(0))
    return (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)


def _spawn(popen, script: str, *args, stack_side: bool = False) -> "subprocess.Popen":
    """A kernel end on the kernel ends' CPU (``stack_side``: on the stack's, for Linux -> Linux's sink)."""
    import subprocess
    import sys

    argv = [sys.executable, "-c", script, *map(str, args)]
    other = _cpus()[0 if stack_side else 1]
    taskset = shutil.which("taskset")
    if other is not None and taskset is not None:  # without taskset the kernel end runs where it is placed
        argv = [taskset, "-c", str(other)] + argv
    return popen(argv, stdout=subprocess.PIPE, text=True)


class _Pinned:
    """This process on the stack's CPU for the with-block (the kernel ends run on the other)."""

    def __enter__(self):
        import os

        self.home = os.sched_getaffinity(0)
        cpu = _cpus()[0]
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        return self

    def __exit__(self, *exc):
        import os

        os.sched_setaffinity(0, self.home)


def linux_to_linux(size: int, percent: int, congestion: str | None = None) -> float:
    """A kernel sender in the peer namespace to a kernel sink in the stack namespace: MB/s.
    ``congestion``: the sender's congestion control by its Linux name (None: the kernel's default)."""
    from pyroute2 import IPRoute

    from ustack.tools.netns import Topology

    with Topology.veth(tag="bll") as topo:
        with topo.in_stack_ns(), IPRoute() as ipr:
            index = ipr.link_lookup(ifname=topo.stack_ifname)[0]
            ipr.addr("add", index=index, address=topo.stack_addr, prefixlen=topo.prefixlen)
        _drop(topo, percent)
        _drop(topo, percent, stack_side=True)
        sink = _spawn(topo.stack_popen, SINK, topo.stack_addr, PORT, stack_side=True)
        _json_line(sink, 10)
        src = _spawn(topo.peer_popen, SOURCE, topo.stack_addr, PORT, size, "bulk", congestion or "")
        sent = _json_line(src, 600)
        got = _json_line(sink, 60)
        if got["bytes"] != size:
            raise RuntimeError(f"Linux -> Linux: {got}")
        return size / (got["end"] - sent["start"]) / 1e6


class _Ustack:
    """A stack on ``backend`` in the stack namespace of a fresh veth topology, driven in this thread."""

    def __init__(self, backend: str, percent: int):
        from ustack.api.driver import Driver
        from ustack.api import environment
        from ustack.stack import Stack
        from ustack.tools.netns import Topology

        self.topo = Topology.veth(tag="blu")
        self.dev = None
        try:
            self.dev = self.topo.open_device(backend)
            self.stack = Stack(RxLoss(self.dev, percent), f"{self.topo.stack_addr}/{self.topo.prefixlen}",
                               fastpath=environment.fastpath())
            self.layer = self.stack.tcp
            self.driver = Driver(self.stack)
            _drop(self.topo, percent)
        except BaseException:
            self.close()
            raise

    def wait(self, predicate, timeout: float) -> None:
        """Busy-poll the stack (this process is the stack's, as a dedicated server would be) until
        ``predicate()``; what it sends goes out in the same round."""
        clock, stack, layer = self.driver.clock, self.stack, self.layer
        end = clock() + timeout
        while True:
            now = clock()
            stack.poll(now)
            if predicate():
                return
            with stack.tx_batch():  # as the socket API sends: one kick per round, not per segment
                layer.flush(clock())
            if now > end:
                raise RuntimeError("ustack: timed out")

    def close(self) -> None:
        if self.dev is not None:
            self.dev.close()
        self.topo.close()


def ustack_to_kernel(size: int, percent: int, backend: str, **knobs) -> dict:
    from ustack.transport.tcp import State

    u = _Ustack(backend, percent)
    try:
        sink = _spawn(u.topo.peer_popen, SINK, u.topo.peer_addr, PORT)
        _json_line(sink, 10)
        answered = _Answered(sink)
        conn = u.layer.connect(None, (socket.inet_aton(u.topo.peer_addr), PORT), u.driver.clock(), **knobs)
        u.wait(lambda: conn.state == State.ESTABLISHED, 10.0)
        # From the established connection, as the kernel source's figures (its connect() has returned):
        # a lost SYN or SYN-ACK (6% here) added ustack's 1 s initial RTO to its row alone.
        start = time.monotonic()
        handshake = conn.info().timeouts
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
            return answered()

        u.wait(pump, 600.0)
        got = _json_line(sink, 10)
        if got["bytes"] != size:
            raise RuntimeError(f"ustack -> kernel: {got}")
        info = conn.info()
        return {"mb_s": size / (got["end"] - start) / 1e6, "bytes": size, "retransmits": info.retransmits,
                "timeouts": info.timeouts - handshake, "tlps": info.tlps, "undone": info.spurious_undone}
    finally:
        u.close()


def kernel_to_ustack(size: int, percent: int, backend: str, echo: bool = False, **knobs) -> dict:
    u = _Ustack(backend, percent)
    try:
        lst = u.layer.listen((bytes(4), PORT), 4, **knobs)
        src = _spawn(u.topo.peer_popen, SOURCE, u.topo.stack_addr, PORT, size, "echo" if echo else "bulk")
        answered = _Answered(src)
        state = {"conn": None, "got": 0, "pending": bytearray(), "end": None}

        def pump():
            conn = state["conn"]
            if conn is None:
                conn = state["conn"] = lst.accept()
                if conn is None:
                    return False
                state["handshake"] = conn.info().timeouts  # SYN-ACK retransmissions are not the transfer's
            while chunk := conn.recv(1 << 20):
                state["got"] += len(chunk)
                if echo:
                    state["pending"] += chunk
            if echo and state["pending"]:
                n = conn.send(state["pending"])
                del state["pending"][:n]
            if not echo and state["got"] >= size and state["end"] is None:
                state["end"] = time.monotonic()
                conn.close()
            return answered()

        u.wait(pump, 1800.0)
        res = _json_line(src, 10)
        if echo and not res.get("exact"):
            raise RuntimeError(f"echo through ustack not exact: {res}")
        end = res["end"] if echo else state["end"]
        info = state["conn"].info()
        return {"mb_s": res["bytes"] / (end - res["start"]) / 1e6, "bytes": res["bytes"], "retransmits": info.retransmits,
                "timeouts": info.timeouts - state["handshake"], "tlps": info.tlps, "undone": info.spurious_undone,
                "exact": res.get("exact")}
    finally:
        u.close()


def veth_rows(size: int, percent: int, reps: int, backend: str, echo: int = 0, algorithms: tuple = (),
              kernel_default: str | None = None, **knobs) -> dict:
    """Rows of medians over ``reps``; with ``algorithms`` (congestion controls) the ustack rows once per
    algorithm, named ``ustack_to_kernel_<name>`` and ``kernel_to_ustack_<name>``, all interleaved.
    Linux -> Linux runs with the kernel's default (``kernel_default``, read from the kernel when
    None), and again, as ``linux_<name>``, with each of ustack's algorithms the default is not."""
    from ustack.transport.tcp.config import TcpConfig

    default = kernel_default or kernel_congestion()
    runs: dict = {"linux": []}
    linux_as = [a for a in dict.fromkeys(algorithms or (TcpConfig().congestion,))
                if LINUX_NAMES.get(a.lower()) not in (None, default)]
    for a in linux_as:
        runs["linux_" + a] = []
    variants = [(f"_{a}", dict(knobs, congestion=a)) for a in algorithms] or [("", knobs)]
    for suffix, _ in variants:
        runs["ustack_to_kernel" + suffix] = []
    # kernel -> ustack once, with the first algorithm: ustack only receives (its controller never acts)
    runs["kernel_to_ustack" + variants[0][0]] = []
    with _Pinned():
        for _ in range(reps):  # interleaved, so that the machine's load falls on every row alike
            runs["linux"].append({"mb_s": linux_to_linux(size, percent)})
            for a in linux_as:
                runs["linux_" + a].append({"mb_s": linux_to_linux(size, percent, LINUX_NAMES[a.lower()])})
            for suffix, kn in variants:
                runs["ustack_to_kernel" + suffix].append(ustack_to_kernel(size, percent, backend, **kn))
            runs["kernel_to_ustack" + variants[0][0]].append(kernel_to_ustack(size, percent, backend,
                                                                              **variants[0][1]))
        knobs = variants[0][1]
        if echo:
            runs["echo"] = [kernel_to_ustack(echo, percent, backend, echo=True, **knobs)]
    out = {}
    for name, rs in runs.items():
        out[name] = {"mb_s": statistics.median(r["mb_s"] for r in rs), "runs": rs}
    out["linux"]["congestion"] = default
    return out


def format_lines(pipe: list, veth: dict | None, percent: int) -> list[str]:
    lines = [f"bulk under loss, pipe {r['loss']:.0%} each way: {r['mb_s_simulated']:.1f} MB/s (simulated time), "
             f"{r['retransmits']} retransmitted, {r['timeouts']} RTOs, exact {r['exact']}" for r in pipe]
    if not veth:
        return lines
    base = veth["linux"]["mb_s"]
    default = veth["linux"].get("congestion")
    from ustack.transport.tcp.config import TcpConfig

    ustack_default = TcpConfig().congestion
    for name, row in veth.items():
        extra = ""
        # ustack -> kernel beside Linux -> Linux on the same congestion control, when that row ran
        alg = name[len("ustack_to_kernel_"):] if name.startswith("ustack_to_kernel_") else ustack_default
        same = veth.get("linux_" + alg) if name.startswith("ustack_to_kernel") else None
        also = f"; {row['mb_s'] / same['mb_s']:.2f}x Linux -> Linux {alg}" if same else ""
        if not name.startswith("linux"):
            rto = statistics.median(r["timeouts"] for r in row["runs"])
            rtx = statistics.median(r["retransmits"] for r in row["runs"])
            per10 = statistics.median(r["timeouts"] / r["bytes"] * 10e6 for r in row["runs"])
            tlps = statistics.median(r["tlps"] for r in row["runs"])
            extra = f", ustack retransmitted {rtx:.0f}, RTOs {rto:.0f} ({per10:.1f} per 10 MB), TLPs {tlps:.0f}"
            if name == "echo":
                extra += f", exact {row['runs'][0]['exact']}"
        runs = ", ".join(f"{r['mb_s']:.1f}" for r in row["runs"])
        label = name.replace('_', ' ') + (f" ({default})" if name == "linux" and default else "")
        if name.startswith("kernel_to_ustack"):
            # the kernel sends (its default algorithm acts), ustack only receives: named by the sender's
            label = f"kernel ({default}) to ustack" if default else "kernel to ustack"
        lines.append(f"bulk under loss, veth {percent}% each way, {label}: {row['mb_s']:.1f} MB/s "
                     f"({row['mb_s'] / base:.2f}x Linux -> Linux{also}){extra}; runs {runs}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ustack.tools.bench_loss", description=__doc__.splitlines()[0])
    p.add_argument("--loss", type=int, default=3, help="percent of TCP segments dropped each way on veth (default 3)")
    p.add_argument("--bytes", type=int, default=20_000_000, help="bytes per transfer (default 20 MB)")
    p.add_argument("--reps", type=int, default=3, help="repetitions (median reported)")
    p.add_argument("--backend", default="packet", help="ustack backend on veth (default packet)")
    p.add_argument("--echo", type=int, default=0, help="also echo this many bytes each way through ustack")
    p.add_argument("--pipe-only", action="store_true", help="only the pipe part (no privileges needed)")
    p.add_argument("--congestion", default=None,
                   help="ustack's congestion control on veth: cubic, newreno or bbr (default: the stack's, cubic); "
                        "a comma-separated list (cubic,bbr) runs ustack -> kernel once per algorithm, interleaved "
                        "(kernel -> ustack and the echo with the first)")
    args = p.parse_args(argv)
    if not 0 <= args.loss < 100 or args.bytes <= 0 or args.reps <= 0:
        p.error("need 0 <= --loss < 100, --bytes > 0, --reps > 0")
    pipe = pipe_rows(min(args.bytes, 5_000_000))
    algorithms = tuple(a.strip() for a in args.congestion.split(",")) if args.congestion else ()
    unknown = [a for a in algorithms if a.lower() not in ALGORITHMS]
    if unknown:
        p.error(f"unknown congestion control {', '.join(unknown)} (known: {', '.join(ALGORITHMS)})")
    veth = None
    if not args.pipe_only:
        try:
            veth = veth_rows(args.bytes, args.loss, args.reps, args.backend, args.echo, algorithms)
        except MissingProgram as exc:  # one line naming it; the veth rows are skipped
            print(f"bench_loss: veth rows skipped: {exc}", file=sys.stderr)
    print("\n".join(format_lines(pipe, veth, args.loss)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
