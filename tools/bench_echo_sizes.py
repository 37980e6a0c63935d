"""Large-message echo RTT, ustack against the kernel in one run: the latency suite's sized echo alone.

``python -m ustack.tools.bench_echo_sizes --backends kernel,afxdp,packet --sizes 20000,100000 --reps 5``

Each repetition runs every row once, in turn (the rows interleaved, so a
noisy neighbour weighs on all of them); each row is a topology of its own,
pinned as ``ustack bench`` pins it (server on one CPU, this client on the
other), against the same echo service (``ustack serve --tcp-echo``, default
options; the kernel row's selector server). Prints each row's p50 per size
(median over the repetitions) and the ratio to the kernel row. Issue 10's
working tool: the full ``ustack bench`` stays the figure of record.

Row ``kernel-nogso``: the kernel server with ``gso_max_segs 1`` on its veth, so
its TCP hands the device one segment per skb as a user-space sender does
(one softirq, and one receive by the client, per frame) instead of 64 KB
GSO skbs segmented in one batch: what that batching is worth at each size.
Rows ``packet-gso`` / ``packet-nogso``: ``ustack serve --backend packet
--gso`` (runs of full-sized segments handed to the kernel as one
super-frame; the packet backend's default) or ``--no-gso`` (frame by frame).
Rows ``afxdp-gso`` / ``afxdp-nogso``: the same for afxdp (its runs through an
AF_PACKET socket beside the AF_XDP one; on by default in copy mode).
Beside each p50, in brackets: the client's pure ACKs per echo (the peer
namespace's TCP OutSegs less the data segments), the trace of a sender
whose frames reach the client one softirq at a time (it reads and ACKs
every one or two segments).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess

from ustack.tools.bench_clients import sized_tcp_rtts, widen_port_range
from ustack.tools.bench_config import TCP_ECHO
from ustack.tools.host_programs import MissingProgram, require
from ustack.tools.bench_runner import Placement, _topology_class
from ustack.tools.bench_servers import kernel_server, ustack_server


def one_rep(kind: str, placement: Placement, sizes: list, count: int, warmup: int) -> dict:
    Topology = _topology_class(placement)
    with Topology("veth", tag="be") as topo:
        widen_port_range(topo)
        if kind in ("kernel", "kernel-nogso"):
            if kind == "kernel-nogso":
                ip = require("ip", "the kernel-nogso row's gso_max_segs")
                subprocess.run([ip, "netns", "exec", topo.stack_ns, ip, "link", "set", "dev", topo.stack_ifname,
                                "gso_max_segs", "1"], check=True)
            server = kernel_server(topo, 1000)
        else:  # "packet-gso"/"packet-nogso": the packet backend with TCP segmentation offload on transmit or not
            backend, extra = {"packet-gso": ("packet", ["--gso"]), "packet-nogso": ("packet", ["--no-gso"]),
                              "afxdp-gso": ("afxdp", ["--gso"]), "afxdp-nogso": ("afxdp", ["--no-gso"])}.get(
                kind, (kind, []))
            server, _ = ustack_server(topo, backend, 1000, None, extra)
        out = {}
        try:
            for size in sizes:  # one connection per size, the client's segment counter read around it
                before = _client_out_segs(topo)
                got = sized_tcp_rtts(topo, topo.stack_addr, TCP_ECHO, [size], {size: count}, warmup)
                sent = _client_out_segs(topo) - before
                echoes = warmup + count
                data = echoes * -(-size // MSS)
                out[size] = (got[size]["p50"], max(0, sent - data - 4) / echoes)  # (4: SYN, ACK, FIN, last ACK)
        finally:
            server.stop()
    return out


MSS = 1448  # the client's segments on a 1500-byte veth with timestamps


def _client_out_segs(topo) -> int:
    """The peer namespace's TCP OutSegs (/proc/net/snmp): the client's segments, data and pure ACKs."""
    text = topo.peer_run(["cat", "/proc/net/snmp"], capture_output=True, text=True).stdout
    rows = [line.split() for line in text.splitlines() if line.startswith("Tcp:")]
    return int(rows[1][rows[0].index("OutSegs")])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="kernel,afxdp,packet")
    p.add_argument("--sizes", default="20000,100000")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--count", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    args = p.parse_args(argv)
    kinds = args.backends.split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    placement = Placement.plan()
    placement.pin(0, placement.client)  # this process is the client, on its own CPU (as ustack bench pins it)
    samples = {k: {s: [] for s in sizes} for k in kinds}
    acks = {k: {s: [] for s in sizes} for k in kinds}
    for rep in range(args.reps):
        for kind in list(kinds):
            try:
                got = one_rep(kind, placement, sizes, args.count, args.warmup)
            except MissingProgram as exc:  # one line naming it; that row is skipped
                print(f"{kind}: skipped: {exc}", flush=True)
                kinds.remove(kind)
                continue
            for s in sizes:
                samples[kind][s].append(got[s][0])
                acks[kind][s].append(got[s][1])
            print(f"rep {rep + 1} {kind:7s} " + "  ".join(f"{s} B {got[s][0]:7.0f}" for s in sizes), flush=True)
    print("p50 µs (median of reps), x kernel; [the client's pure ACKs per echo]")
    for kind in kinds:
        cells = []
        for s in sizes:
            med = statistics.median(samples[kind][s])
            ratio = ""
            if "kernel" in samples and kind != "kernel":
                ratio = f" ({med / statistics.median(samples['kernel'][s]):.2f}x)"
            cells.append(f"{s} B {med:7.0f}{ratio} [{statistics.median(acks[kind][s]):.1f}]")
        print(f"{kind:7s} " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
