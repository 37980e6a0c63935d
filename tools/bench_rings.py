"""Micro-benchmark of the TAP and AF_PACKET-ring backends: CPU µs per 64-byte frame.

    python -m ustack.tools.bench_rings [--seconds 2] [--backends tap,packet] [--burst 64]

For each backend, in a fresh ustack.tools.netns topology:

- rx: a kernel UDP sender in the peer namespace (a Python sendto loop in a
  separate process) sends 60-byte frames (64 on a wire with the FCS) to the
  stack address; this process waits in select() on the device's fileno(),
  then rx_burst/rx_release until the sender stops.
- tx: this process fills reserved slots with a 60-byte UDP frame and commits
  bursts as fast as it can; a kernel UDP receiver in the peer namespace
  counts what arrives.

CPU is this thread's (getrusage RUSAGE_THREAD) split into user and system
time. On TX the system time includes the kernel's work delivering the frames
(veth/tun and the peer's UDP receive run in the caller's context); on RX the
kernel's copy into the ring is charged to the sender. Not a test: numbers
depend on the machine and on whatever else runs on it.
"""

from __future__ import annotations

import argparse
import os
import resource
import select
import socket
import sys
import time

from ustack.tools.netns import Topology
from ustack.wire.ethernet import ETHERTYPE_IPV4, EthernetHeader
from ustack.wire.ipv4 import Ipv4Header
from ustack.wire.udp import HEADER_LEN as UDP_HEADER_LEN
from ustack.wire.udp import PROTO_UDP, UdpHeader

RX_PORT = 7000
TX_PORT = 9000
PAYLOAD = 18  # 14 + 20 + 8 + 18 = 60-byte frames

SENDER = """
import socket, sys, time
dst, seconds = (sys.argv[1], int(sys.argv[2])), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
payload = b"x" * int(sys.argv[4])
n = 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    for _ in range(1000):
        try:
            s.sendto(payload, dst)
        except OSError:
            pass
    n += 1000
print(n)
"""

RECEIVER = """
import socket, sys, select
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
buf = bytearray(2048)
n = 0
while select.select([s], [], [], 1.0)[0]:
    while True:
        try:
            s.recv_into(buf, 2048, socket.MSG_DONTWAIT)
        except BlockingIOError:
            break
        n += 1
print(n, flush=True)
"""


def cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime, usage.ru_stime


def udp_frame(src_mac: bytes, dst_mac: bytes, src_ip: str, dst_ip: str, sport: int, dport: int,
              payload: bytes) -> bytes:
    """Ethernet + IPv4 (DF) + UDP with both checksums, built by the wire/ reference emitters."""
    src, dst = socket.inet_aton(src_ip), socket.inet_aton(dst_ip)
    udp_len = UDP_HEADER_LEN + len(payload)
    frame = bytearray(14 + 20 + udp_len)
    off = EthernetHeader(dst_mac, src_mac, ETHERTYPE_IPV4).emit(frame)
    off += Ipv4Header(total_length=20 + udp_len, flags_df=True, proto=PROTO_UDP, src=src, dst=dst).emit(frame, off)
    UdpHeader(sport, dport, udp_len).emit(frame, off, src, dst, payload)
    return bytes(frame)


def frame_for(topo: Topology) -> bytes:
    return udp_frame(topo.stack_mac, topo.peer_mac, topo.stack_addr, topo.peer_addr, 5000, TX_PORT, b"y" * PAYLOAD)


def bench_rx(kind: str, topo: Topology, seconds: float, burst: int) -> dict:
    dev = topo.open_device(kind)
    try:
        fd = dev.fileno()
        sender = topo.peer_popen(
            [sys.executable, "-c", SENDER, topo.stack_addr, str(RX_PORT), str(seconds), str(PAYLOAD)], stdout=-1, text=True
        )
        frames_total = 0
        wakeups = 0
        started = None
        u0 = s0 = 0.0
        t_last = time.monotonic()
        while True:
            ready = select.select([fd], [], [], 0.3)[0]
            if not ready:
                if started is not None or sender.poll() is not None or time.monotonic() - t_last > 10:
                    break
                continue
            wakeups += 1
            if started is None:
                started = time.monotonic()
                u0, s0 = cpu()
            while True:
                frames = dev.rx_burst(burst)
                if not frames:
                    break
                frames_total += len(frames)
                dev.rx_release(frames)
            t_last = time.monotonic()
        u1, s1 = cpu()
        sent = int(sender.communicate(timeout=30)[0].strip() or 0)
        elapsed = max(t_last - (started or t_last), 1e-9)
        return {
            "frames": frames_total,
            "sent": sent,
            "pps": frames_total / elapsed,
            "user_us": (u1 - u0) * 1e6 / max(frames_total, 1),
            "sys_us": (s1 - s0) * 1e6 / max(frames_total, 1),
            "frames_per_wakeup": frames_total / max(wakeups, 1),
        }
    finally:
        dev.close()


def bench_tx(kind: str, topo: Topology, seconds: float, burst: int) -> dict:
    dev = topo.open_device(kind)
    receiver = topo.peer_popen([sys.executable, "-c", RECEIVER, topo.peer_addr, str(TX_PORT)], stdout=-1, text=True)
    try:
        assert receiver.stdout.readline().strip() == "ready"
        frame = frame_for(topo)
        length = len(frame)
        lengths = [length] * burst
        sent = 0
        waits = 0
        fd = dev.fileno()
        u0, s0 = cpu()
        t0 = time.monotonic()
        end = t0 + seconds
        while time.monotonic() < end:
            for _ in range(16):
                slots = dev.tx_reserve(burst)
                if not slots:
                    # ring full: the kernel frees slots as the peer consumes;
                    # a packet ring polls writable when one is free
                    waits += 1
                    select.select([], [fd], [], 0.1)
                    continue
                for slot in slots:
                    slot[:length] = frame
                dev.tx_commit(lengths[: len(slots)])
                sent += len(slots)
        u1, s1 = cpu()
        elapsed = time.monotonic() - t0
        received = int(receiver.communicate(timeout=30)[0].split()[-1])
        return {
            "frames": sent,
            "received": received,
            "pps": sent / elapsed,
            "user_us": (u1 - u0) * 1e6 / max(sent, 1),
            "sys_us": (s1 - s0) * 1e6 / max(sent, 1),
            "waits": waits,
        }
    finally:
        dev.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--backends", default="tap,packet")
    parser.add_argument("--burst", type=int, default=64)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 2
    print(f"{'backend':8} {'dir':3} {'frames':>9} {'kpps':>7} {'user µs':>8} {'sys µs':>7} {'total µs':>8}  notes")
    for kind in args.backends.split(","):
        make = Topology.tap if kind == "tap" else Topology.veth
        with make(tag="r") as topo:
            topo.add_peer_neighbour()
            rx = bench_rx(kind, topo, args.seconds, args.burst)
            print(
                f"{kind:8} rx  {rx['frames']:9d} {rx['pps'] / 1e3:7.0f} {rx['user_us']:8.2f} {rx['sys_us']:7.2f} "
                f"{rx['user_us'] + rx['sys_us']:8.2f}  sender sent {rx['sent']}, {rx['frames_per_wakeup']:.0f} frames/wakeup"
            )
            tx = bench_tx(kind, topo, args.seconds, args.burst)
            print(
                f"{kind:8} tx  {tx['frames']:9d} {tx['pps'] / 1e3:7.0f} {tx['user_us']:8.2f} {tx['sys_us']:7.2f} "
                f"{tx['user_us'] + tx['sys_us']:8.2f}  kernel receiver got {tx['received']}, {tx['waits']} waits for free slots"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
