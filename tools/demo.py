"""``ustack demo``: a guided tour of the whole stack with the kernel on the other side.

With root: builds a veth (or TAP) topology in fresh namespaces, starts the
user-space stack in this process on the best available backend (afxdp, else
packet, else tap), and walks through what it does with the kernel's stack
on the other side:

1. the kernel pings it;
2. a kernel HTTP client (curl, or Python's urllib) fetches a page from a
   small HTTP server written on ustack stream sockets;
3. a 100 MB TCP transfer in each direction (kernel pulls from ustack, kernel
   pushes to ustack), with throughput and a sha256 check on both ends;
4. ustack pings the kernel;
5. the per-connection TCP info and the counters, drops by reason included.

Every frame goes to a pcap file (headers only by default: ``--pcap-snaplen``).
Without root, the same tour runs between two user-space stacks over the
in-memory pipe backend in this process. Ctrl-C cleans up at any step.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time

from ustack.capture import PcapDevice
from ustack.api import environment
from ustack.api.clock import MonotonicClock
from ustack.api.driver import Driver
from ustack.net.addr import parse as ip_addr
from ustack.stack import Stack

SOURCE_PORT, SINK_PORT, HTTP_PORT = 19, 9, 8080


def say(text: str = "") -> None:
    """Print one line of the tour at once (flushed)."""
    print(text, flush=True)


def step(n: int, text: str) -> None:
    """Print the heading of step ``n`` of the tour."""
    say(f"\n[{n}] {text}")


def mbps(nbytes: int, seconds: float) -> str:
    """Format a rate: ``nbytes`` over ``seconds`` as ``'12.3 MB/s'`` (``'-'`` for no time)."""
    return f"{nbytes / seconds / 1e6:.1f} MB/s" if seconds > 0 else "-"


def stack_ping(stack, driver, dst: str, count: int = 3) -> None:
    """Ping ``dst`` from a user-space stack and print lines like ping(8)."""
    got = {}
    ident = 0x5E5E
    with driver.lock:
        stack.icmp.echo_handlers[ident] = lambda seq, i, data, src, now, ttl: got.setdefault(seq, (now, ttl))
    for seq in range(1, count + 1):
        t0 = driver.clock()
        with driver.lock:
            stack.icmp.ping(ip_addr(dst), ident, seq, driver.clock(), b"d" * 56)
        if driver.wait_until(lambda: seq in got, 2.0):
            when, ttl = got[seq]
            say(f"    64 bytes from {dst}: icmp_seq={seq} ttl={ttl} time={(when - t0) * 1000:.3f} ms")
        else:
            say(f"    no reply to icmp_seq={seq}")


# -- the user-space side ---------------------------------------------------------------------
class UstackSide:
    """The stack under demonstration, with its services, driven by a background thread."""

    def __init__(self, device, addr: str, clock, nbytes: int):
        from ustack.tools.httpd import HttpServer
        from ustack.tools.services import TcpSink, TcpSource

        self.stack = Stack(device, addr, fastpath=environment.fastpath())
        self.driver = Driver(self.stack, clock)
        with self.driver.lock:
            self.source = TcpSource(self.stack, SOURCE_PORT, nbytes)
            self.sink = TcpSink(self.stack, SINK_PORT)
        self.driver.start()
        self.http = HttpServer(self.driver, HTTP_PORT).start()
        from ustack.tools.stats_server import StatsPublisher

        self.publisher = StatsPublisher(self.stack, self.driver).start()

    def ping(self, dst: str, count: int = 3) -> None:
        """Ping ``dst`` ``count`` times from the demonstrated stack, printing each reply."""
        stack_ping(self.stack, self.driver, dst, count)

    def connection_table(self) -> list[str]:
        """The stack's TCP connections, one line each (state, addresses, cwnd...)."""
        lines = []
        with self.driver.lock:
            infos = [c.info() for c in self.stack.tcp.connections.values()]
        for i in infos:
            la = f"{'.'.join(map(str, i.local[0]))}:{i.local[1]}"
            ra = f"{'.'.join(map(str, i.remote[0]))}:{i.remote[1]}"
            lines.append(f"    {i.state:<11} {la:>21} -> {ra:<21} segs in/out {i.segs_in}/{i.segs_out}")
            lines.append(f"      {i.congestion} cwnd {i.cwnd} ssthresh {i.ssthresh} srtt {i.srtt * 1000:.2f} ms "
                         f"rttvar {i.rttvar * 1000:.2f} ms rto {i.rto * 1000:.0f} ms retrans {i.retransmits} "
                         f"mss {i.snd_mss} wscale {i.snd_wscale},{i.rcv_wscale} acked {i.bytes_acked} "
                         f"received {i.bytes_received}")
        return lines

    def counters(self) -> tuple[str, dict]:
        """The stack's address and its counters: ``(addr, {name: value})``."""
        with self.driver.lock:
            return self.stack.stats.format(), self.stack.stats.drops()

    def close(self) -> None:
        """Stop the services and the driver and close the stack and its device."""
        self.http.close()
        self.publisher.close()
        self.driver.close()
        self.stack.device.close()


# -- the other side: the kernel ------------------------------------------------------------------
KERNEL_PULL = r"""
import hashlib, socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection((host, port), timeout=30)
h = hashlib.sha256(); got = 0; buf = bytearray(1 << 20); t0 = time.monotonic(); mark = n // 4
while True:
    k = s.recv_into(buf)
    if not k: break
    h.update(memoryview(buf)[:k]); got += k
    if got >= mark and mark:
        print(f"      ... {got // 1000000} MB", flush=True); mark = mark + n // 4 if mark + n // 4 < n else 0
dt = time.monotonic() - t0
print(f"RESULT {got} {dt:.3f} {h.hexdigest()}", flush=True)
"""

KERNEL_PUSH = r"""
import socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
block = bytes(range(256)) * 256
s = socket.create_connection((host, port), timeout=30)
t0 = time.monotonic(); left = n; mark = n - n // 4
while left:
    k = min(left, len(block)); s.sendall(block[:k]); left -= k
    if left <= mark and mark > 0:
        print(f"      ... {(n - left) // 1000000} MB", flush=True); mark -= n // 4
s.shutdown(socket.SHUT_WR)
reply = b""
while True:
    d = s.recv(4096)
    if not d: break
    reply += d
dt = time.monotonic() - t0
print(f"RESULT {n} {dt:.3f} {reply.decode().strip()}", flush=True)
"""


class KernelSide:
    """The kernel's side of the tour, run in the peer namespace of a veth topology.

    Args:
        topo: the ``ustack.tools.netns.Topology`` whose peer end the kernel owns.
    """
    def __init__(self, topo):
        self.topo = topo

    def _run(self, argv, timeout=300):
        p = self.topo.peer_popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        result = None
        for line in p.stdout:
            if line.startswith("RESULT "):
                result = line.split()[1:]
            else:
                say(line.rstrip("\n"))
        p.wait(timeout)
        return result

    def ping(self, dst: str) -> None:
        """Run the kernel's ``ping`` against ``dst`` (5 requests) and print its output."""
        out = self.topo.peer_run(["ping", "-c", "5", "-i", "0.2", "-W", "2", dst], timeout=30,
                                 capture_output=True, text=True)
        for line in out.stdout.strip().splitlines():
            say("    " + line)

    def http_get(self, url: str) -> None:
        """Fetch ``url`` with curl (or urllib without it) from the kernel side and print the result."""
        if shutil.which("curl"):
            argv = ["curl", "-sS", "-o", "/dev/null", "-w",
                    "    curl: HTTP %{http_code}, %{size_download} bytes in %{time_total} s\n", url]
        else:
            argv = [sys.executable, "-c",
                    "import sys, time, urllib.request as u; t = time.monotonic(); r = u.urlopen(sys.argv[1], "
                    "timeout=10); b = r.read(); print(f'    urllib: HTTP {r.status}, {len(b)} bytes in "
                    "{time.monotonic() - t:.3f} s; title:', b.split(b'<h1>')[1].split(b'</h1>')[0].decode())", url]
        out = self.topo.peer_run(argv, timeout=30, capture_output=True, text=True)
        say((out.stdout + out.stderr).rstrip())

    def pull(self, host: str, port: int, n: int):
        """Read ``n`` bytes from ``host:port`` with a kernel socket; returns the ``RESULT`` fields or None."""
        return self._run([sys.executable, "-c", KERNEL_PULL, host, str(port), str(n)])

    def push(self, host: str, port: int, n: int):
        """Write ``n`` bytes to ``host:port`` with a kernel socket; returns the ``RESULT`` fields or None."""
        return self._run([sys.executable, "-c", KERNEL_PUSH, host, str(port), str(n)])


class PipePeerSide:
    """Without root: a second user-space stack plays the kernel's part."""

    def __init__(self, device, addr: str, clock):
        self.stack = Stack(device, addr, fastpath=environment.fastpath())
        self.driver = Driver(self.stack, clock)
        self.driver.start()  # answers ustack's pings and keeps its TCP timers going

    def ping(self, dst: str) -> None:
        """Ping ``dst`` 5 times from the peer stack."""
        stack_ping(self.stack, self.driver, dst, 5)

    def _sock(self, host, port):
        from ustack.api.socket import socket as usocket

        s = usocket(self.driver)
        s.settimeout(30)
        s.connect((host, port))
        return s

    def http_get(self, url: str) -> None:
        """Fetch ``url`` with a socket of the peer stack and print the status and size."""
        host, port = url.split("//")[1].split("/")[0].split(":")
        t0 = time.monotonic()
        with self._sock(host, int(port)) as s:
            s.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            resp = bytearray()
            while True:
                d = s.recv(65536)
                if not d:
                    break
                resp += d
        head, _, body = bytes(resp).partition(b"\r\n\r\n")
        status = head.split(b"\r\n")[0].decode()
        say(f"    {status}, {len(body)} bytes in {time.monotonic() - t0:.3f} s")

    def pull(self, host: str, port: int, n: int):
        """Read ``n`` bytes from ``host:port`` over the peer stack; returns ``[bytes, seconds, sha256]``."""
        t0 = time.monotonic()
        h = hashlib.sha256()
        got = 0
        with self._sock(host, port) as s:
            buf = bytearray(1 << 18)
            while True:
                k = s.recv_into(buf)
                if not k:
                    break
                h.update(memoryview(buf)[:k])
                got += k
        return [str(got), f"{time.monotonic() - t0:.3f}", h.hexdigest()]

    def push(self, host: str, port: int, n: int):
        """Write ``n`` bytes to ``host:port`` over the peer stack; returns ``[bytes, seconds, *the sink's reply]``."""
        from ustack.tools.services import PATTERN_BLOCK

        t0 = time.monotonic()
        with self._sock(host, port) as s:
            left = n
            while left:
                k = min(left, len(PATTERN_BLOCK))
                s.sendall(memoryview(PATTERN_BLOCK)[:k])
                left -= k
            s.shutdown(1)
            reply = b""
            while True:
                d = s.recv(4096)
                if not d:
                    break
                reply += d
        return [str(n), f"{time.monotonic() - t0:.3f}", *reply.decode().split()]

    def close(self) -> None:
        """Stop the peer's driver and close its stack."""
        self.driver.close()
        self.stack.device.close()


# -- the tour -----------------------------------------------------------------------------------------
def tour(us: UstackSide, other, ustack_addr: str, other_addr: str, nbytes: int, pcap: str) -> int:
    """Walk through the tour: ping both ways, HTTP, a pull and a push, the connection table and counters.

    Returns:
        0 when every step worked, 1 otherwise.
    """
    from ustack.tools.services import pattern_sha256

    want = pattern_sha256(nbytes)
    ok = True
    step(3, f"the other side pings ustack at {ustack_addr}")
    other.ping(ustack_addr)

    step(4, f"an HTTP client fetches http://{ustack_addr}:{HTTP_PORT}/ from a server on ustack sockets")
    other.http_get(f"http://{ustack_addr}:{HTTP_PORT}/")

    step(5, f"TCP: the other side pulls {nbytes // 1_000_000} MB from ustack (port {SOURCE_PORT})")
    r = other.pull(ustack_addr, SOURCE_PORT, nbytes)
    if r:
        got, secs, digest = int(r[0]), float(r[1]), r[2]
        good = got == nbytes and digest == want
        ok &= good
        say(f"    {got} bytes in {secs:.2f} s = {mbps(got, secs)}; sha256 {digest[:16]}... "
            f"{'matches' if good else 'DOES NOT MATCH'} the pattern")
    else:
        ok = False
        say("    transfer failed")

    step(6, f"TCP: the other side pushes {nbytes // 1_000_000} MB to ustack (port {SINK_PORT})")
    r = other.push(ustack_addr, SINK_PORT, nbytes)
    if r and len(r) >= 4:
        sent, secs, got, digest = int(r[0]), float(r[1]), int(r[2]), r[3]
        good = got == nbytes and digest == want
        ok &= good
        say(f"    {sent} bytes in {secs:.2f} s = {mbps(sent, secs)}; ustack received {got} bytes, sha256 "
            f"{digest[:16]}... {'matches' if good else 'DOES NOT MATCH'}")
    else:
        ok = False
        say("    transfer failed")

    step(7, f"ustack pings {other_addr}")
    us.ping(other_addr)

    step(8, "TCP connections (like ss -tni) and counters (drops by reason included)")
    for line in us.connection_table() or ["    (none left)"]:
        say(line)
    text, drops = us.counters()
    say("    " + text.replace("\n", "\n    "))
    say("    drops: " + (", ".join(f"{k}={v}" for k, v in drops.items()) or "none"))
    say(f"\n{'Done' if ok else 'Done, WITH ERRORS'}. The capture is in {pcap} "
        f"(tcpdump -nn -r {pcap}, or: ustack trace {pcap})")
    return 0 if ok else 1


def run_kernel_tour(args) -> int:
    """The tour against the kernel over a fresh veth topology (root).

    Returns:
        The tour's status; 2 when the topology or the device could not be set up; 130 after Ctrl-C.
    """
    from ustack.backends.registry import available_backends, open_device
    from ustack.tools.netns import Topology

    have = available_backends()
    backend = args.backend or next((b for b in ("afxdp", "packet", "tap") if b in have), None)
    if backend is None:
        say("no packet backend is available here")
        return 2
    clock = MonotonicClock()
    kind = "tap" if backend == "tap" else "veth"
    offloads = "the kernel's default offloads" if args.offloads == "default" else "offloads off on both ends"
    step(1, f"building a topology in fresh network namespaces ({kind}, {offloads})")
    topology = Topology.tap if backend == "tap" else Topology.veth
    topo = topology(tag="demo", offloads=args.offloads)
    us = None
    try:
        say(f"    kernel side: {topo.peer_ns}/{topo.peer_ifname} {topo.peer_addr}/{topo.prefixlen}")
        say(f"    ustack side: {topo.stack_ns}/{topo.stack_ifname} {topo.stack_addr}/{topo.prefixlen}")
        step(2, f"starting ustack on the {backend} backend")
        opts = {"mac": topo.stack_mac, "create": False} if backend == "tap" else {}
        with topo.in_stack_ns():
            device = open_device(backend, topo.stack_ifname, **opts)
        if backend == "tap":
            topo.wait_running()
        device = PcapDevice(device, args.pcap, clock, snaplen=args.pcap_snaplen, overwrite=args.pcap_overwrite)
        us = UstackSide(device, f"{topo.stack_addr}/{topo.prefixlen}", clock, args.bytes)
        say(f"    mode: {device.capabilities.mode}; mac {us.stack.iface.mac.hex(':')}; pcap -> {args.pcap}")
        say(f"    live stats while it runs: ustack stats --socket {us.publisher.path}")
        return tour(us, KernelSide(topo), topo.stack_addr, topo.peer_addr, args.bytes, args.pcap)
    except KeyboardInterrupt:
        say("\ninterrupted: cleaning up")
        return 130
    finally:
        if us is not None:
            us.close()
        topo.close()


def run_pipe_tour(args) -> int:
    """The tour between two user-space stacks over the pipe backend (no root).

    Returns:
        The tour's status; 130 after Ctrl-C.
    """
    from ustack.backends.pipe import PipeLink

    say("(not root: the tour runs between two user-space stacks over the in-memory pipe backend)")
    clock = MonotonicClock()
    step(1, "two stacks on an in-memory link: ustack 198.18.0.2 <-> peer stack 198.18.0.1")
    link = PipeLink(clock, seed=1)
    us = peer = None
    try:
        step(2, "starting ustack and its services (HTTP, TCP source and sink)")
        device = PcapDevice(link.b, args.pcap, clock, snaplen=args.pcap_snaplen, overwrite=args.pcap_overwrite)
        us = UstackSide(device, "198.18.0.2/24", clock, args.bytes)
        peer = PipePeerSide(link.a, "198.18.0.1/24", clock)
        return tour(us, peer, "198.18.0.2", "198.18.0.1", args.bytes, args.pcap)
    except KeyboardInterrupt:
        say("\ninterrupted")
        return 130
    finally:
        if peer is not None:
            peer.close()
        if us is not None:
            us.close()
        link.close()


def main(args) -> int:
    """Run ``ustack demo``: against the kernel as root (unless ``--pipe``), two stacks otherwise.

    Args:
        args: the parsed arguments.

    Returns:
        The exit status (0: every step worked; 2: the capture file exists and ``--pcap-overwrite`` was not given).
    """
    if os.path.lexists(args.pcap) and not args.pcap_overwrite:
        print(f"ustack demo: {args.pcap}: exists: refusing to overwrite it (--pcap-overwrite replaces it)",
              file=sys.stderr)
        return 2
    if os.geteuid() == 0 and not args.pipe:
        return run_kernel_tour(args)
    return run_pipe_tour(args)


def add_arguments(p) -> None:
    """Add ``ustack demo``'s arguments (``--backend``, ``--pipe``, ``--pcap``, ``--bytes``) to ``p``."""
    from ustack.tools.cli_types import int_range

    p.add_argument("--backend", choices=("afxdp", "packet", "tap"), help="default: the best available")
    p.add_argument("--pipe", action="store_true", help="tour over the pipe backend even as root")
    p.add_argument("--offloads", choices=("default", "off"), default="default",
                   help="the kernel's end of the link: as the kernel sets a new device up (partial checksums, "
                        "TSO super-frames: the default) or with checksum and segmentation offloads off")
    p.add_argument("--pcap", default="ustack-demo.pcap", help="capture file (default: %(default)s)")
    p.add_argument("--pcap-overwrite", action="store_true", help="replace an existing --pcap file (unlink, create anew)")
    p.add_argument("--pcap-snaplen", type=int_range(1, 262144, "a snap length"), default=128, help="bytes of each frame kept (default: %(default)s)")
    p.add_argument("--bytes", type=int_range(1, 1 << 40, "a transfer size"), default=100_000_000, help="size of each TCP transfer (default: 100 MB)")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="ustack demo")
    add_arguments(ap)
    sys.exit(main(ap.parse_args()))
