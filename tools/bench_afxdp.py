"""AF_XDP backend benchmark: frames/s and CPU µs per 64-byte frame, next to kernel UDP.

    python -m ustack.tools.bench_afxdp [--seconds 1.5] [--runs 3] [--modes native,generic] [--burst 64]

Three parts, each the median of ``--runs`` runs:

1. ring loop alone: the Cython data path over simulated kernel rings
   (backends/afxdp/sim.py, no syscalls): rx_burst + rx_release, and
   tx_reserve + 60-byte slot write + tx_commit, in ns per frame.
2. AF_XDP on a veth pair (ustack.tools.netns), per XDP mode:
   - rx: a kernel UDP sender in the peer namespace (a Python sendto loop in a
     separate process) sends 60-byte frames (64 on a wire with the FCS); this
     process waits in select() on fileno() (need_wakeup) and drains with
     rx_burst/rx_release until a short burst. "ring µs" is the CPU time
     spent inside those drain loops only; "cpu µs" is this thread's whole CPU
     time (the select() wakeups included).
   - tx: this process writes a 60-byte UDP frame into each reserved slot and
     commits bursts as fast as it can; a kernel UDP receiver in the peer
     namespace counts arrivals. "ring µs" is the CPU time of tx_reserve and
     the slot writes; tx_commit is shown apart because its sendto() kick
     runs the kernel's copy-mode transmit (skb build, veth, the peer's
     receive) in our context.
3. kernel UDP baseline on the same veth (the stack end gets the stack address
   once the AF_XDP device is closed): the same sender into a kernel UDP
   socket read with recv_into in this process, and a sendto loop out.

CPU is this thread's (CLOCK_THREAD_CPUTIME_ID; user/system split from
getrusage(RUSAGE_THREAD)). Reading that clock is a system call (about
0.6-0.8 µs here, more than the ring work of a 3-frame wakeup): "ring µs"
takes one read, measured at start (``clock_read_ns``), out of each timed
interval, and the header line prints the value taken out. On this 2-core machine sender, receiver and other
work share the CPUs: rates move between runs, CPU per frame much less.
"""

from __future__ import annotations

import argparse
import os
import resource
import select
import socket
import statistics
import struct
import sys
import time

from pyroute2 import IPRoute

from ustack.backends.afxdp import AfXdpDevice
from ustack.backends.afxdp.sim import SimKernel
from ustack.tools.bench_rings import RECEIVER, SENDER  # the kernel-side traffic scripts, shared
from ustack.tools.netns import Topology

RX_PORT = 7000
TX_PORT = 9000
PAYLOAD = 18  # 14 + 20 + 8 + 18 = 60-byte frames, 64 on a wire


class Cpu:
    """This thread's CPU time: precise total, user/system split from getrusage."""

    def __init__(self):
        self.t0 = time.thread_time()
        r = resource.getrusage(resource.RUSAGE_THREAD)
        self.u0, self.s0 = r.ru_utime, r.ru_stime

    def stop(self) -> tuple[float, float, float]:
        total = time.thread_time() - self.t0
        r = resource.getrusage(resource.RUSAGE_THREAD)
        user, system = r.ru_utime - self.u0, r.ru_stime - self.s0
        share = user / (user + system) if user + system > 0 else 1.0
        return total, total * share, total * (1 - share)


def udp_frame(topo: Topology, sport: int, dport: int) -> bytes:
    """A complete 60-byte Ethernet/IPv4/UDP frame from the stack end to the peer."""
    payload = b"y" * PAYLOAD
    src, dst = socket.inet_aton(topo.stack_addr), socket.inet_aton(topo.peer_addr)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + len(payload), 0, 0x4000, 64, 17, 0, src, dst))
    struct.pack_into("!H", ip, 10, _checksum(ip))
    udp = bytearray(struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload)
    pseudo = src + dst + struct.pack("!BBH", 0, 17, len(udp))
    struct.pack_into("!H", udp, 6, _checksum(pseudo + udp) or 0xFFFF)
    return topo.peer_mac + topo.stack_mac + b"\x08\x00" + bytes(ip) + bytes(udp)


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


# -- 1. the ring loop alone -------------------------------------------------------


def clock_read_ns(samples: int = 2001) -> float:
    """What one ``time.thread_time_ns()`` costs (CLOCK_THREAD_CPUTIME_ID is a system call, not vDSO):
    the median gap between two reads in a row. Each timed interval below holds about one such read,
    which is not the ring's work: ``ring µs`` has it taken out (the notes print the value)."""
    clock = time.thread_time_ns
    gaps = []
    for _ in range(samples):
        a = clock()
        gaps.append(clock() - a)
    return float(statistics.median(gaps))


def bench_ring_loop(burst: int, frames: int = 200_000) -> tuple[float, float]:
    """ns per frame for RX (burst + release) and TX (reserve + write + commit)."""
    sim = SimKernel(num_frames=8192, ring_size=2048)
    path = sim.path
    frame = bytes(60)
    rx_ns = rx_n = 0
    while rx_n < frames:
        while sim.receive(frame):
            pass
        t0 = time.thread_time_ns()
        while True:
            got = path.rx_burst(burst)
            if not got:
                break
            rx_n += len(got)
            path.rx_release(got)
        rx_ns += time.thread_time_ns() - t0
    tx_ns = tx_n = 0
    lengths = [60] * burst
    while tx_n < frames:
        t0 = time.thread_time_ns()
        for _ in range(16):
            slots = path.tx_reserve(burst)
            if not slots:
                break
            for slot in slots:
                slot[:60] = frame
            path.tx_commit(lengths[: len(slots)])
            tx_n += len(slots)
        tx_ns += time.thread_time_ns() - t0
        sim.transmit()
    return rx_ns / rx_n, tx_ns / tx_n


# -- 2. AF_XDP on veth --------------------------------------------------------------


def _start_sender(topo: Topology, seconds: float):
    return topo.peer_popen(
        [sys.executable, "-c", SENDER, topo.stack_addr, str(RX_PORT), str(seconds), str(PAYLOAD)],
        stdout=-1, text=True,
    )


def bench_afxdp_rx(topo: Topology, mode: str, seconds: float, burst: int, clock_ns: float = 0.0) -> dict:
    with topo.in_stack_ns():
        dev = AfXdpDevice(topo.stack_ifname, xdp_mode=mode, burst=burst)
    try:
        fd = dev.fileno()
        sender = _start_sender(topo, seconds)
        received = wakeups = 0
        ring_ns = 0
        cpu = None
        started = last = None
        give_up = time.monotonic() + seconds + 10
        while time.monotonic() < give_up:
            if not select.select([fd], [], [], 0.3)[0]:
                if started is not None or sender.poll() is not None:
                    break
                continue
            if cpu is None:
                cpu, started = Cpu(), time.monotonic()
            wakeups += 1
            t0 = time.thread_time_ns()
            while True:
                frames = dev.rx_burst(burst)
                received += len(frames)
                dev.rx_release(frames)
                if len(frames) < burst:  # drained: back to select()
                    break
            ring_ns += max(0.0, time.thread_time_ns() - t0 - clock_ns)  # less the clock read itself
            last = time.monotonic()
        total, user, system = cpu.stop() if cpu else (0.0, 0.0, 0.0)
        sent = int(sender.communicate(timeout=30)[0].strip() or 0)
        n = max(received, 1)
        return {
            "frames": received, "sent": sent, "pps": received / max((last or 0) - (started or 0), 1e-9),
            "ring_us": ring_ns / 1e3 / n, "cpu_us": total * 1e6 / n, "sys_us": system * 1e6 / n,
            "per_wakeup": received / max(wakeups, 1), "kernel_drops": dev.stats()["kernel.rx_dropped"],
        }
    finally:
        dev.close()


def _start_receiver(topo: Topology):
    receiver = topo.peer_popen([sys.executable, "-c", RECEIVER, topo.peer_addr, str(TX_PORT)], stdout=-1, text=True)
    if receiver.stdout.readline().strip() != "ready":
        raise RuntimeError("peer receiver did not start")
    return receiver


def bench_afxdp_tx(topo: Topology, mode: str, seconds: float, burst: int, clock_ns: float = 0.0) -> dict:
    with topo.in_stack_ns():
        dev = AfXdpDevice(topo.stack_ifname, xdp_mode=mode, burst=burst)
    receiver = _start_receiver(topo)
    try:
        frame = udp_frame(topo, 5000, TX_PORT)
        length = len(frame)
        lengths = [length] * burst
        sent = waits = 0
        fill_ns = commit_ns = 0
        fd = dev.fileno()
        clock = time.thread_time_ns
        cpu = Cpu()
        t0 = time.monotonic()
        end = t0 + seconds
        while time.monotonic() < end:
            for _ in range(16):
                a = clock()
                slots = dev.tx_reserve(burst)
                if not slots:
                    waits += 1
                    dev.flush()
                    select.select([], [fd], [], 0.01)
                    continue
                for slot in slots:
                    slot[:length] = frame
                b = clock()
                dev.tx_commit(lengths[: len(slots)])
                commit_ns += clock() - b
                fill_ns += max(0.0, b - a - clock_ns)  # less the clock read itself
                sent += len(slots)
        total, user, system = cpu.stop()
        elapsed = time.monotonic() - t0
        received = int(receiver.communicate(timeout=30)[0].split()[-1])
        n = max(sent, 1)
        return {
            "frames": sent, "received": received, "pps": sent / elapsed, "ring_us": fill_ns / 1e3 / n,
            "commit_us": commit_ns / 1e3 / n, "cpu_us": total * 1e6 / n, "sys_us": system * 1e6 / n,
            "waits": waits,
        }
    finally:
        dev.close()


# -- 3. kernel UDP baseline --------------------------------------------------------


def give_stack_end_an_address(topo: Topology) -> None:
    with topo.in_stack_ns(), IPRoute() as ipr:
        index = ipr.link_lookup(ifname=topo.stack_ifname)[0]
        ipr.addr("add", index=index, address=topo.stack_addr, prefixlen=topo.prefixlen)


def bench_kernel_rx(topo: Topology, seconds: float, burst: int) -> dict:
    with topo.in_stack_ns():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        sock.bind((topo.stack_addr, RX_PORT))
        sock.setblocking(False)
        buf = bytearray(2048)
        sender = _start_sender(topo, seconds)
        received = 0
        cpu = None
        started = last = None
        give_up = time.monotonic() + seconds + 10
        while time.monotonic() < give_up:
            if not select.select([sock], [], [], 0.3)[0]:
                if started is not None or sender.poll() is not None:
                    break
                continue
            if cpu is None:
                cpu, started = Cpu(), time.monotonic()
            while True:
                try:
                    sock.recv_into(buf, 2048)
                except BlockingIOError:
                    break
                received += 1
            last = time.monotonic()
        total, user, system = cpu.stop() if cpu else (0.0, 0.0, 0.0)
        sent = int(sender.communicate(timeout=30)[0].strip() or 0)
        n = max(received, 1)
        return {"frames": received, "sent": sent, "pps": received / max((last or 0) - (started or 0), 1e-9),
                "cpu_us": total * 1e6 / n, "sys_us": system * 1e6 / n}
    finally:
        sock.close()


def bench_kernel_tx(topo: Topology, seconds: float) -> dict:
    with topo.in_stack_ns():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver = _start_receiver(topo)
    try:
        payload = b"y" * PAYLOAD
        dst = (topo.peer_addr, TX_PORT)
        sent = 0
        cpu = Cpu()
        t0 = time.monotonic()
        end = t0 + seconds
        while time.monotonic() < end:
            for _ in range(1000):
                try:
                    sock.sendto(payload, dst)
                    sent += 1
                except OSError:
                    pass
        total, user, system = cpu.stop()
        elapsed = time.monotonic() - t0
        received = int(receiver.communicate(timeout=30)[0].split()[-1])
        n = max(sent, 1)
        return {"frames": sent, "received": received, "pps": sent / elapsed, "cpu_us": total * 1e6 / n,
                "sys_us": system * 1e6 / n}
    finally:
        sock.close()


# -- report -------------------------------------------------------------------------


def median_run(fn, runs: int) -> dict:
    results = [fn() for _ in range(runs)]
    keys = [k for k, v in results[0].items() if isinstance(v, (int, float))]
    return {k: statistics.median(r[k] for r in results) for k in keys}


def row(label: str, r: dict, note: str) -> str:
    ring = f"{r['ring_us']:8.3f}" if "ring_us" in r else f"{'-':>8}"
    return (f"{label:22} {r['frames']:9.0f} {r['pps'] / 1e3:8.0f} {ring} {r['cpu_us']:8.2f} "
            f"{r['sys_us']:7.2f}  {note}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default="native,generic")
    parser.add_argument("--burst", type=int, default=64)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root (network namespaces, bpf)", file=sys.stderr)
        return 2

    rx_ns = statistics.median(bench_ring_loop(args.burst)[0] for _ in range(args.runs))
    tx_ns = statistics.median(bench_ring_loop(args.burst)[1] for _ in range(args.runs))
    print(f"ring loop alone (simulated kernel, burst {args.burst}, median of {args.runs}):")
    print(f"  rx_burst + rx_release              {rx_ns / 1e3:6.3f} µs/frame")
    print(f"  tx_reserve + 60 B write + tx_commit {tx_ns / 1e3:6.3f} µs/frame")
    print()
    clock_ns = clock_read_ns()
    print(f"veth, 60-byte UDP frames, {args.seconds:g} s per run, median of {args.runs} runs "
          f"(ring µs: CPU in the ring calls, one thread_time_ns() read of {clock_ns:.0f} ns taken out per timed "
          f"interval):")
    print(f"{'path':22} {'frames':>9} {'kpps':>8} {'ring µs':>8} {'cpu µs':>8} {'sys µs':>7}  notes")
    with Topology.veth(tag="b") as topo:
        topo.add_peer_neighbour()
        for mode in args.modes.split(","):
            with topo.in_stack_ns():
                with AfXdpDevice(topo.stack_ifname, xdp_mode=mode) as probe:
                    label = probe.capabilities.mode
            rx = median_run(lambda: bench_afxdp_rx(topo, mode, args.seconds, args.burst, clock_ns), args.runs)
            print(row(f"afxdp {mode} rx", rx, f"sender sent {rx['sent']:.0f}, {rx['per_wakeup']:.0f} frames/wakeup, "
                                              f"kernel drops {rx['kernel_drops']:.0f} [{label}]"))
            tx = median_run(lambda: bench_afxdp_tx(topo, mode, args.seconds, args.burst, clock_ns), args.runs)
            print(row(f"afxdp {mode} tx", tx, f"peer kernel received {tx['received']:.0f}, {tx['waits']:.0f} waits, "
                                              f"tx_commit incl. kick {tx['commit_us']:.2f} µs/frame"))
        give_stack_end_an_address(topo)
        krx = median_run(lambda: bench_kernel_rx(topo, args.seconds, args.burst), args.runs)
        print(row("kernel UDP rx", krx, f"sender sent {krx['sent']:.0f}; recv_into per datagram"))
        ktx = median_run(lambda: bench_kernel_tx(topo, args.seconds), args.runs)
        print(row("kernel UDP tx", ktx, f"peer kernel received {ktx['received']:.0f}; sendto per datagram"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
