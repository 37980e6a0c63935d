"""``ustack demo``: a guided tour of the stack with the kernel on the other side.

With root: builds a veth (or TAP) topology in fresh namespaces, starts the
user-space stack on the best available backend (afxdp, else packet, else
tap), and shows, step by step: the kernel pinging it, a kernel UDP socket
exchanging datagrams of every size with its echo (fragmented both ways),
the user-space stack pinging the kernel, and its counters; every frame goes
to a pcap file. Without root, the same tour runs between two user-space
stacks over the in-memory pipe backend. Ctrl-C cleans up at any step.
"""

from __future__ import annotations

import os
import random
import select
import struct
import sys
import time

from ustack.capture import PcapDevice
from ustack.clock import MonotonicClock
from ustack.driver import Driver
from ustack.net.route import ip_int
from ustack.stack import Stack


def say(text: str) -> None:
    print(text, flush=True)


def step(n: int, text: str) -> None:
    say(f"\n[{n}] {text}")


def _stack_ping(stack: Stack, driver: Driver, dst: str, count: int = 3) -> None:
    got = {}
    ident = 0x5E5E
    with driver.lock:
        stack.icmp.echo_handlers[ident] = lambda seq, i, data, src, now, ttl: got.setdefault(seq, (now, ttl))
    for seq in range(1, count + 1):
        t0 = driver.clock()
        with driver.lock:
            stack.icmp.ping(ip_int(dst), ident, seq, b"d" * 56)
        if driver.wait_until(lambda: seq in got, 2.0):
            when, ttl = got[seq]
            say(f"    64 bytes from {dst}: icmp_seq={seq} ttl={ttl} time={(when - t0) * 1000:.3f} ms")
        else:
            say(f"    no reply to icmp_seq={seq}")


def _choose_backend(requested):
    from backends.registry import available_backends

    have = available_backends()
    if requested:
        return requested
    for b in ("afxdp", "packet", "tap"):
        if b in have:
            return b
    raise SystemExit("no packet backend is available here")


def run_kernel_tour(args) -> int:
    from backends.registry import open_device
    from tools.netns import Topology, peer_socket

    backend = _choose_backend(args.backend)
    clock = MonotonicClock()
    step(1, f"building a topology in fresh network namespaces ({'tap' if backend == 'tap' else 'veth'})")
    topo = Topology.tap(tag="demo") if backend == "tap" else Topology.veth(tag="demo")
    stack = driver = None
    try:
        say(f"    kernel side: {topo.peer_ns}/{topo.peer_ifname} {topo.peer_addr}/{topo.prefixlen}")
        say(f"    ustack side: {topo.stack_ns}/{topo.stack_ifname} {topo.stack_addr}/{topo.prefixlen}")
        step(2, f"starting ustack on the {backend} backend")
        with topo.in_stack_ns():
            device = open_device(backend, topo.stack_ifname)
        device = PcapDevice(device, args.pcap, clock)
        stack = Stack(device, f"{topo.stack_addr}/{topo.prefixlen}", clock=clock)
        driver = Driver(stack, clock)
        echo = stack.udp.endpoint()
        stack.udp.bind(echo, 0, 7)
        echo.on_readable = lambda: _echo_all(stack, echo)
        driver.start()
        say(f"    mode: {device.capabilities.mode}; mac {stack.iface.mac.hex(':')}; pcap -> {args.pcap}")

        step(3, "the kernel pings ustack (ping -c 5)")
        out = topo.peer_run(["ping", "-c", "5", "-i", "0.2", "-W", "2", topo.stack_addr], timeout=30,
                            capture_output=True, text=True)
        for line in out.stdout.strip().splitlines():
            say("    " + line)

        step(4, "a kernel UDP socket exchanges 2,000 datagrams of 1..8000 bytes with ustack's echo on port 7")
        rnd = random.Random(7)
        payloads = [struct.pack("!I", i) + rnd.randbytes(rnd.randrange(0, 7997)) for i in range(2000)]
        t0 = time.monotonic()
        with peer_socket(topo) as s:
            ok = _exchange(s, (topo.stack_addr, 7), payloads)
        dt = time.monotonic() - t0
        nbytes = sum(len(p) for p in payloads)
        say(f"    {ok} of {len(payloads)} came back byte-exact; {nbytes / 1e6:.1f} MB each way in {dt:.2f} s "
            f"({2 * nbytes / dt / 1e6:.1f} MB/s both ways); fragments reassembled by ustack: "
            f"{stack.stats['ipv4.reassembled']}")

        step(5, "ustack pings the kernel")
        _stack_ping(stack, driver, topo.peer_addr)

        step(6, "counters (drops by reason included)")
        driver.stop()
        with driver.lock:
            say("    " + stack.stats.format().replace("\n", "\n    "))
            drops = stack.stats.drops()
            say("    drops: " + (", ".join(f"{k}={v}" for k, v in drops.items()) or "none"))
        say(f"\nDone. Read the capture with: tcpdump -nn -r {args.pcap}  (or scapy.rdpcap)")
        return 0
    except KeyboardInterrupt:
        say("\ninterrupted: cleaning up")
        return 130
    finally:
        if driver is not None:
            driver.close()
        if stack is not None:
            stack.device.close()
        topo.close()


def _echo_all(stack: Stack, ep) -> None:
    while ep.queue:
        payload, src, sport = ep.pop()
        try:
            ep.sendto(payload, src, sport, stack.now)
        except OSError:
            stack.stats.inc("udp.echo_send_errors")


def _exchange(sock, dst, payloads, window=8) -> int:
    got = sent = 0
    while got < len(payloads):
        while sent < len(payloads) and sent - got < window:
            sock.sendto(payloads[sent], dst)
            sent += 1
        r, _, _ = select.select([sock], [], [], 3.0)
        if not r:
            break
        data, _ = sock.recvfrom(65535)
        idx = struct.unpack_from("!I", data)[0]
        got += data == payloads[idx]
    return got


def run_pipe_tour(args) -> int:
    from backends.pipe import PipeLink
    from ustack.socket import SOCK_DGRAM, socket as usocket

    say("(not root: touring between two user-space stacks over the in-memory pipe backend)")
    clock = MonotonicClock()
    step(1, "two stacks on an in-memory link: 198.18.0.1 <-> 198.18.0.2")
    link = PipeLink(clock, seed=1)
    a = Stack(PcapDevice(link.a, args.pcap, clock), "198.18.0.1/24", clock=clock)
    b = Stack(link.b, "198.18.0.2/24", clock=clock)
    da, db = Driver(a, clock), Driver(b, clock)
    echo = a.udp.endpoint()
    a.udp.bind(echo, 0, 7)
    echo.on_readable = lambda: _echo_all(a, echo)
    da.start()
    try:
        step(2, "b pings a")
        _stack_ping(b, db, "198.18.0.1")
        step(3, "b exchanges 500 UDP datagrams of 1..8000 bytes with a's echo (fragmented both ways)")
        rnd = random.Random(7)
        ok = 0
        with usocket(b, type=SOCK_DGRAM) as s:
            s.settimeout(2.0)
            for i in range(500):
                p = struct.pack("!I", i) + rnd.randbytes(rnd.randrange(0, 7997))
                s.sendto(p, ("198.18.0.1", 7))
                ok += s.recv(65535) == p
        say(f"    {ok} of 500 came back byte-exact")
        step(4, "counters of a")
        da.stop()
        say("    " + a.stats.format().replace("\n", "\n    "))
        say(f"\nDone. The capture of a's side is in {args.pcap}")
        return 0
    except KeyboardInterrupt:
        say("\ninterrupted")
        return 130
    finally:
        da.close()
        db.close()
        a.device.close()
        link.close()


def main(args) -> int:
    if os.geteuid() == 0 and not args.pipe:
        return run_kernel_tour(args)
    return run_pipe_tour(args)


if __name__ == "__main__":
    sys.exit(main(None))
