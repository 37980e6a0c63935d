"""Floods over veth against a running ``ustack serve``, with a real client served meanwhile.

    python -m ustack.tools.flood {arp,syn,frag,udp,inject,reflect,bcast,all} [--frames N] [--backend packet|afxdp]
                                 [--xdp-mode native|generic] [--seed S] [--rate PPS]

As root. Each attack builds a veth topology in fresh namespaces
(``ustack.tools.netns``), starts ``ustack serve --tcp-echo 7 --udp-echo 7``
on the stack end without a gateway, connects a kernel TCP client from the
peer namespace to the echo port, then sends ``--frames`` hostile frames
(``ustack.tools.flood_frames``) from an AF_PACKET socket on the peer end
while the client keeps exchanging random messages and checks every echoed
byte. For ``syn`` the client opens a new connection for each exchange, so
it must get through the SYN cookies; for ``inject`` the frames target the
client's own connection, which must survive; for ``reflect`` (ACK reflection)
too, and the ACKs the stack sent in reply are counted (``reflected``).

It prints the frames sent and the rate, the stack's counters that moved
(from its stats socket), the serve process's RSS before and after and its
peak (``/proc/<pid>/status``), the client's exchanges during the flood and
their worst latency, whether serve survived and exited 0 on SIGTERM, and
a verdict. ``run_attack()`` returns the same as a ``FloodResult`` (the
tests in tests/hostile run short versions of each).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Optional

from ustack.tools.cli_types import float_range, int_range
from ustack.tools.flood_frames import ATTACKS, ORACLE_ATTACKS, ConnState, Target
from ustack.tools.netns import Topology, peer_socket
from ustack.tools.stats_client import StatsError, fetch

ECHO_PORT = 7
READY_TIMEOUT = 30.0
EXCHANGE_TIMEOUT = 10.0
ORACLE_EVERY = 64  # inject: frames between two reads of the victim connection's sequence state
# The counters each attack is about (prefixes); stack.internal_error and eth.frames_received always show.
RELEVANT = {
    "arp": ("arp.", "drop.arp."),
    "syn": ("tcp.syncookie", "tcp.passive_opens", "tcp.established", "drop.tcp.", "tcp.synack", "arp.pending",
            "drop.arp.", "arp.requests_rate_limited"),
    "frag": ("ipv4.frag", "drop.ipv4.frag", "ipv4.reassembled", "icmp.errors_sent", "drop.arp."),
    "udp": ("udp.", "drop.udp.", "icmp.errors", "icmp.ratelimit", "drop.arp."),
    "inject": ("tcp.challenge", "tcp.invalid_ack", "tcp.resets_received", "drop.tcp.", "tcp.in_segs"),
    "reflect": ("tcp.invalid_ack", "tcp.unacceptable", "drop.tcp.", "tcp.resets_received"),
    "bcast": ("udp.", "drop.udp.", "icmp.errors", "icmp.no_error", "drop.eth."),
}
ALWAYS = ("eth.frames_received", "stack.internal_error")


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB, from /proc/<pid>/status."""
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0])
    return values.get("VmRSS", 0), values.get("VmHWM", 0)


class Served:
    """``ustack serve`` on the stack end of a fresh veth topology."""

    def __init__(self, backend: str = "packet", xdp_mode: Optional[str] = None):
        self.topo = Topology.veth(tag="fl")
        self.lines: list[str] = []
        self.ready = threading.Event()
        try:
            t = self.topo
            argv = [sys.executable, "-m", "ustack", "serve", "--backend", backend, "--ifname", t.stack_ifname,
                    "--addr", f"{t.stack_addr}/{t.prefixlen}", "--tcp-echo", str(ECHO_PORT),
                    "--udp-echo", str(ECHO_PORT)]
            if backend == "afxdp" and xdp_mode:
                argv += ["--xdp-mode", xdp_mode]
            self.proc = t.stack_popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
            threading.Thread(target=self._reader, daemon=True).start()
            if not self.ready.wait(READY_TIMEOUT):
                raise RuntimeError("ustack serve did not start:\n" + "".join(self.lines))
            head = "".join(self.lines)
            mac = re.search(r"mac ([0-9a-f:]{17})", head)
            path = re.search(r"--socket (\S+)", head)
            if not (mac and path):
                raise RuntimeError("unexpected ustack serve banner:\n" + head)
            self.mac = bytes.fromhex(mac.group(1).replace(":", ""))
            self.stats_path = path.group(1)
        except BaseException:
            self.close()
            raise

    def _reader(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.strip() == "ready":
                self.ready.set()

    def snapshot(self) -> dict:
        return fetch(self.stats_path)

    def stop(self) -> Optional[int]:
        """SIGTERM; the exit status (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            return None

    def close(self) -> None:
        try:
            proc = getattr(self, "proc", None)
            if proc is not None and proc.poll() is None:
                self.stop()
        finally:
            self.topo.close()


@dataclass
class ClientLog:
    """What the legitimate client did: exchanges (each echoed exactly), timings, the first failure."""

    exchanges: int = 0
    during: int = 0  # exchanges completed while the flood was being sent
    connections: int = 0
    bytes_echoed: int = 0
    worst: float = 0.0  # seconds, the slowest exchange during the flood
    error: Optional[str] = None
    local_port: int = 0


class LegitClient(threading.Thread):
    """A kernel TCP client in the peer namespace exchanging random messages with serve's echo port.

    ``reconnect``: a new connection for every exchange (through SYN cookies
    during a SYN flood); otherwise one connection for the whole run.
    """

    def __init__(self, topo: Topology, *, reconnect: bool, seed: int):
        super().__init__(daemon=True)
        self.topo = topo
        self.reconnect = reconnect
        self.rng = random.Random(seed)
        self.log = ClientLog()
        self.stop_flag = threading.Event()
        self.flooding = threading.Event()
        self.first = threading.Event()  # one exchange done (the connection is up)
        self.sock: Optional[socket.socket] = None

    def _connect(self) -> socket.socket:
        s = peer_socket(self.topo, socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(EXCHANGE_TIMEOUT)
        s.connect((self.topo.stack_addr, ECHO_PORT))
        self.log.connections += 1
        self.log.local_port = s.getsockname()[1]
        return s

    def _exchange(self, s: socket.socket) -> None:
        msg = self.rng.randbytes(self.rng.randrange(1, 1400))
        s.sendall(msg)
        got = bytearray()
        while len(got) < len(msg):
            chunk = s.recv(len(msg) - len(got))
            if not chunk:
                raise ConnectionError(f"echo closed after {len(got)} of {len(msg)} bytes")
            got += chunk
        if got != msg:
            raise AssertionError(f"echo differs from what was sent ({len(msg)} bytes)")
        self.log.bytes_echoed += len(msg)

    def run(self) -> None:
        log = self.log
        s = None
        try:
            while not self.stop_flag.is_set():
                if s is None:
                    s = self.sock = self._connect()
                during = self.flooding.is_set()
                t0 = time.monotonic()
                self._exchange(s)
                took = time.monotonic() - t0
                log.exchanges += 1
                if during and self.flooding.is_set():
                    log.during += 1
                    log.worst = max(log.worst, took)
                self.first.set()
                if self.reconnect:
                    s.close()
                    s = None
        except Exception as e:  # noqa: BLE001 - the verdict reports it
            log.error = f"{type(e).__name__}: {e}"
        finally:
            self.first.set()
            if s is not None:
                s.close()


@dataclass
class FloodResult:
    attack: str
    frames: int
    seconds: float
    counters: dict[str, int]  # deltas of the relevant counters
    rss_before_kib: int
    rss_after_kib: int
    peak_kib: int
    client: ClientLog
    exit_status: Optional[int]
    arp_entries: int = 0
    listener: dict = field(default_factory=dict)

    @property
    def reflected(self) -> int:
        """``reflect``: the ACKs the stack sent in reply to unacceptable segments and PAWS drops (each such
        drop draws one unless rate-limited; the client's own retransmissions, answered at once, count too)."""
        c = self.counters
        return (c.get("drop.tcp.unacceptable", 0) + c.get("drop.tcp.paws", 0)
                - c.get("tcp.invalid_ack_ratelimited", 0))

    @property
    def ok(self) -> bool:
        c = self.client
        return (c.error is None and c.during > 0 and self.exit_status == 0
                and self.counters.get("stack.internal_error", 0) == 0)

    def report(self) -> str:
        rate = self.frames / self.seconds if self.seconds else 0.0
        c = self.client
        lines = [f"flood {self.attack}: {self.frames} frames sent in {self.seconds:.2f} s ({rate:,.0f} frames/s)",
                 f"  serve RSS {self.rss_before_kib / 1024:.1f} MiB before, {self.rss_after_kib / 1024:.1f} MiB "
                 f"after (+{(self.rss_after_kib - self.rss_before_kib) / 1024:.1f}), peak {self.peak_kib / 1024:.1f} MiB",
                 f"  legitimate client: {c.during} exchanges echoed exactly during the flood ({c.exchanges} in all, "
                 f"{c.connections} connection(s), {c.bytes_echoed} bytes), slowest {c.worst * 1000:.1f} ms"
                 + (f"; FAILED: {c.error}" if c.error else ""),
                 f"  serve exit status on SIGTERM: {self.exit_status}"]
        if self.attack == "arp":
            lines.append(f"  ARP cache after: {self.arp_entries} entries")
        if self.attack == "reflect":
            lines.append(f"  ACKs reflected toward the client: {self.reflected} for {self.frames} spoofed segments")
        if self.listener:
            lines.append("  listener: " + " ".join(f"{k}:{v}" for k, v in self.listener.items()))
        lines.append("  counters (delta):")
        for name, v in sorted(self.counters.items()):
            lines.append(f"    {name:44s} {v}")
        lines.append(f"  verdict: {'OK' if self.ok else 'FAILED'}")
        return "\n".join(lines)


def _deltas(before: dict, after: dict, prefixes: tuple[str, ...]) -> dict[str, int]:
    out = {}
    for name, value in after.items():
        d = value - before.get(name, 0)
        if name in ALWAYS or (d and name.startswith(prefixes)):
            out[name] = d
    for name in ALWAYS:
        out.setdefault(name, 0)
    return out


def _victim_oracle(served: Served, client: LegitClient):
    """For ``inject``: the client's connection as the stack sees it, refreshed every ORACLE_EVERY frames."""
    state: dict = {"n": 0, "st": None}
    remote = f"{served.topo.peer_addr}:{client.log.local_port}"

    def oracle() -> Optional[ConnState]:
        if state["st"] is None or state["n"] % ORACLE_EVERY == 0:
            snap = served.snapshot()
            for c in snap["tcp"]:
                if c["remote"] == remote and c["state"] == "ESTABLISHED":
                    state["st"] = ConnState(local_port=int(c["local"].rsplit(":", 1)[1]),
                                            remote_port=client.log.local_port, rcv_nxt=c["rcv_nxt"],
                                            snd_una=c["snd_una"], snd_nxt=c["snd_nxt"], rcv_wnd=c["rcv_wnd"])
                    break
            else:
                state["st"] = None  # the victim is gone: stop injecting (the verdict will say so)
        state["n"] += 1
        return state["st"]

    return oracle


def run_attack(attack: str, frames: int, *, backend: str = "packet", xdp_mode: Optional[str] = None,
               seed: int = 1, rate: Optional[float] = None, out=None) -> FloodResult:
    """One flood against a fresh ``ustack serve``; the topology is always removed afterwards."""
    served = Served(backend, xdp_mode)
    try:
        t = served.topo
        target = Target(served.mac, socket.inet_aton(t.stack_addr), t.peer_mac, socket.inet_aton(t.peer_addr),
                        t.prefixlen, ECHO_PORT)
        client = LegitClient(t, reconnect=(attack == "syn"), seed=seed)
        client.start()
        if not client.first.wait(EXCHANGE_TIMEOUT * 2) or client.log.error:
            raise RuntimeError(f"the legitimate client could not start: {client.log.error}")
        before = served.snapshot()
        rss_before, _ = rss_kib(served.proc.pid)
        rng = random.Random(seed)
        gen = ATTACKS[attack](rng, target, _victim_oracle(served, client)) if attack in ORACLE_ATTACKS else \
            ATTACKS[attack](rng, target)
        with t.in_peer_ns():
            raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        sent = 0
        try:
            raw.bind((t.peer_ifname, 0))
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
            client.flooding.set()
            t0 = time.monotonic()
            spacing = 1.0 / rate if rate else 0.0
            for frame in gen:
                if sent >= frames:
                    break
                try:
                    raw.send(frame)
                except (BlockingIOError, OSError) as e:
                    if getattr(e, "errno", None) not in (105, 11):  # ENOBUFS, EAGAIN: the qdisc is full
                        raise
                    time.sleep(0.0005)  # back off, then go on with the next frame
                    continue
                sent += 1
                if spacing and sent % 64 == 0:
                    behind = t0 + sent * spacing - time.monotonic()
                    if behind > 0:
                        time.sleep(behind)  # --rate pacing
            # The client must complete at least one exchange while the flood is on: give it a bounded wait.
            deadline = time.monotonic() + EXCHANGE_TIMEOUT
            while client.log.during == 0 and client.log.error is None and time.monotonic() < deadline:
                time.sleep(0.01)
            seconds = time.monotonic() - t0
            client.flooding.clear()
        finally:
            raw.close()
        # Let the client prove the stack still serves after the flood as well, then stop it.
        done = client.log.exchanges
        deadline = time.monotonic() + EXCHANGE_TIMEOUT
        while client.log.exchanges < done + 3 and client.log.error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        client.stop_flag.set()
        client.join(EXCHANGE_TIMEOUT + 5)
        after = served.snapshot()
        rss_after, peak = rss_kib(served.proc.pid)
        listener = {}
        for lst in after["listeners"]:
            if lst["local"].endswith(f":{ECHO_PORT}"):
                listener = {k: lst[k] for k in ("syn_queue", "accept_queue", "cookies_sent", "cookies_accepted",
                                                "cookies_rejected", "overflows")}
        status = served.stop()
        result = FloodResult(attack, sent, seconds, _deltas(before["counters"], after["counters"], RELEVANT[attack]),
                             rss_before, rss_after, peak, client.log, status, len(after["arp"]),
                             listener if attack == "syn" else {})
        if out is not None:
            print(result.report(), file=out, flush=True)
        return result
    finally:
        served.close()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ustack.tools.flood", description=__doc__.split("\n\n")[0])
    p.add_argument("attack", choices=(*ATTACKS, "all"))
    p.add_argument("--frames", type=int_range(1, 10 ** 9, "a frame count"), default=200_000)
    p.add_argument("--backend", choices=("packet", "afxdp"), default="packet")
    p.add_argument("--xdp-mode", choices=("native", "generic"), help="afxdp: XDP attach mode")
    p.add_argument("--seed", type=int_range(0, 2 ** 63, "a seed"), default=1)
    p.add_argument("--rate", type=float_range(0.0, "a rate in frames/s", above=True), metavar="PPS",
                   help="pace the flood (default: as fast as the socket takes them)")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("flood: needs root (namespaces, veth, AF_PACKET)", file=sys.stderr)
        return 2
    attacks = list(ATTACKS) if args.attack == "all" else [args.attack]
    failed = 0
    for attack in attacks:
        try:
            result = run_attack(attack, args.frames, backend=args.backend, xdp_mode=args.xdp_mode, seed=args.seed,
                                rate=args.rate, out=sys.stdout)
        except (RuntimeError, StatsError, OSError) as e:
            print(f"flood {attack}: could not run: {e}", file=sys.stderr)
            failed += 1
            continue
        failed += not result.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
