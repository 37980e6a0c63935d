"""IPv4 against IPv6 bulk push into one dual-stack ``ustack serve`` (issue 13): alternated, medians.

``python -m ustack.tools.bench_family [--backend packet] [--reps 10] [--bytes 10000000] [--cc NAME]
[--rt] [--steer] [--no-claim]`` builds the bench's veth topology (``bench_runner``: server
and client pinned to their own CPUs), starts one server with both families, and pushes ``--bytes``
from a kernel socket in the peer namespace (``bench_clients.push``: the bench's own client,
TCP_NODELAY, 64 KiB writes) to the discard service, IPv4 and IPv6 in turn, the order swapped every
repetition. Per family: median MB/s and the client thread's CPU per push (its ``sendmsg`` work plus
the kernel's softirq work that runs on its CPU). ``--cc`` sets the client socket's congestion
control (TCP_CONGESTION; default: the namespace's, BBR on this kernel). ``--rt`` runs this process
and the server SCHED_FIFO, so that other processes on a shared machine do not preempt them (what a
quiet machine measures).

What it showed (tools/MEASUREMENTS.md, the IPv6 / IPv4 paragraphs): ustack is the bottleneck of a push in both families
(busy all through), and the rate depends on where the kernel sender transmits. On a veth pair the
client kernel processes ustack's ACK in the softirq of ustack's own ``sendto``, on ustack's CPU; a
sender that waits for ACKs (its send buffer full) then sends from there too, and that data reaches
ustack's ring on the same CPU. A sender slower than ustack stays app-limited and sends from its own
CPU. IPv6's client path was the cheaper one: on the packet backend the kernel of the server's
namespace ran its IPv4 input (route lookup, ip_error) on every frame ustack receives, on the
client's CPU, while its IPv6 is off. The packet backend now keeps the kernel's input off frames to
its addresses (``backends.claim``, ``ustack serve`` by default), and IPv4 falls to IPv6's rate;
``--no-claim`` runs the server without it, as before. Under CUBIC both families send from ustack's CPU
and IPv6 / IPv4 is 1.0; with the client's receive work on the client's CPU (``--steer``: RPS on the
peer veth, ``ustack bench --steer-client-rx``, as between two hosts) both send from their own.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

from ustack.tools.bench_clients import push, widen_port_range
from ustack.tools.bench_config import TCP_DISCARD
from ustack.tools.bench_runner import Placement, _topology_class, steer_peer_receive
from ustack.tools.bench_servers import ustack_drops, ustack_server


def _with_cc(cc: str | None):
    """``bench_clients.push`` with the client socket's TCP_CONGESTION set (None: left as it is)."""
    if not cc:
        return push
    from ustack.tools import netns

    real = netns.peer_socket

    def peer_socket(*a, **kw):
        s = real(*a, **kw)
        if kw.get("type") == socket.SOCK_STREAM:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        return s

    def push_cc(*a):
        netns.peer_socket = peer_socket
        try:
            return push(*a)
        finally:
            netns.peer_socket = real
    return push_cc


def run(backend: str, reps: int, nbytes: int, cc: str | None, steer: bool = False, claim: bool = True) -> dict:
    placement = Placement.plan()
    placement.pin(0, placement.client)
    pusher = _with_cc(cc)
    out = {"4": [], "6": []}
    with _topology_class(placement)("veth", tag="bf", ipv6=True) as topo:
        widen_port_range(topo)
        if steer and not steer_peer_receive(topo, placement.client):
            raise RuntimeError("could not set RPS on the peer veth")
        server, mode = ustack_server(topo, backend, 1000, None, () if claim else ("--no-claim",))
        try:
            hosts = [("4", topo.stack_addr), ("6", topo.stack_addr6)]
            for rep in range(reps):
                for fam, host in hosts[rep % 2:] + hosts[:rep % 2]:
                    cpu = time.thread_time()
                    r = pusher(topo, host, TCP_DISCARD, nbytes, 10.0)
                    out[fam].append((r["mbps"], (time.thread_time() - cpu) * 1e3))
        finally:
            server.stop()
    return {"mode": mode, "samples": out, "drops": ustack_drops(server.lines)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="packet", choices=("packet", "afxdp"))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--bytes", type=int, default=10_000_000)
    ap.add_argument("--cc", default=None, help="the client's congestion control (TCP_CONGESTION), e.g. cubic")
    ap.add_argument("--rt", action="store_true", help="SCHED_FIFO for this process and the server")
    ap.add_argument("--steer", action="store_true",
                    help="the client's receive work on its own CPU (RPS on the peer veth), "
                         "as ustack bench --steer-client-rx")
    ap.add_argument("--no-claim", dest="claim", action="store_false",
                    help="packet: the server leaves the kernel's IP input on frames to its addresses (ustack serve "
                         "--no-claim): the server namespace's kernel runs IPv4 input on every frame")
    args = ap.parse_args(argv)
    if args.rt:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))  # the server inherits it
    res = run(args.backend, args.reps, args.bytes, args.cc, args.steer, args.claim)
    print(f"{args.backend} ({res['mode']}), {args.reps} x {args.bytes} B per family, client cc {args.cc or 'default'}"
          f"{', client receive steered to its CPU' if args.steer else ''}"
          f"{'' if args.claim else ', the kernel IP input of the stack namespace on (--no-claim)'}")
    med = {}
    for fam in "46":
        mbps = [m for m, _ in res["samples"][fam]]
        cpu = [c for _, c in res["samples"][fam]]
        med[fam] = statistics.median(mbps)
        print(f"  IPv{fam}: push {med[fam]:7.1f} MB/s (min {min(mbps):.0f}, max {max(mbps):.0f}), "
              f"client CPU {statistics.median(cpu):.2f} ms per push")
    print(f"  IPv6 / IPv4: {med['6'] / med['4']:.2f}; server drops {res['drops'] or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
