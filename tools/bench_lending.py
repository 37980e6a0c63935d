"""Copies on the socket path: a TCP bulk transfer over the pipe with each send and receive API.

Two stacks on one ManualClock (as ``bench_pipe``) move ``--bytes`` one way;
the sender uses ``send`` (its data already in a buffer of its own: the
call copies it into the send ring) or ``send_reserve``/``send_commit``
(it produces the data straight into the ring: the same fill, no copy);
the receiver uses ``recv`` (new bytes per call), ``recv_into`` (one
preallocated buffer) or ``recv_views`` (views into the RX frames, released
after reading; the reader touches every byte through a hash-free
``memoryview`` comparison-free pass, ``len``). The figure is the process
CPU time of the transfer, reported as CPU MB/s and ns per byte; medians of
``--runs``, the modes interleaved run by run so that load affects them alike.

    python -m ustack.tools.bench_lending [--bytes 20000000] [--runs 3] [--mtu 9000]
    python -m ustack.tools.bench_lending --exact [--bytes 20000000]

``--exact`` instead runs one transfer with the lending API on both sides
at 5% loss each way with reordering, duplication and corruption (fast
path on) and checks the bytes received against the bytes sent (SHA-256).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time

from ustack.tools.pipe_pair import PipePair
from ustack.transport.tcp.tcb import State

SENDERS = ("send", "reserve")
RECEIVERS = ("recv", "recv_into", "recv_views")


def transfer(size: int, sender: str, receiver: str, seed: int = 1, impair: dict | None = None,
             check: bool = False, mtu: int = 1500) -> dict:
    """``size`` bytes from b to a; returns the CPU seconds, the digests when ``check`` and a's counters."""
    pair = PipePair(seed=seed, delay=0.0005, mtu=mtu, **(impair or {}))
    link, a = pair.link, pair.a
    lst, conn = pair.connect(80)
    pattern = hashlib.sha256(str(seed).encode()).digest() * 2048  # 64 KiB the sender "produces" from
    plen = len(pattern)
    own = bytearray(plen)  # the sender's own buffer (``send`` mode)
    sink = bytearray(1 << 20)
    sent = got = 0
    server = None
    h_out, h_in = hashlib.sha256(), hashlib.sha256()

    def step(now: float) -> bool:
        nonlocal sent, got, server
        if server is None:
            server = lst.accept()
        acted = False
        if sent < size and conn.state == State.ESTABLISHED:
            want = min(plen - sent % plen, size - sent)
            if sender == "send":
                own[:want] = pattern[sent % plen:sent % plen + want]  # produce
                n = conn.send(memoryview(own)[:want], now)
            else:
                view = conn.send_reserve(want)
                n = len(view)
                if n:
                    view[:] = pattern[sent % plen:sent % plen + n]  # produce, in place
                    conn.send_commit(n, now)
            if check and n:
                h_out.update(pattern[sent % plen:sent % plen + n])
            sent += n
            acted = n > 0
        if server is not None:
            if receiver == "recv":
                while data := server.recv(1 << 20, now):
                    got += len(data)
                    acted = True
                    if check:
                        h_in.update(data)
            elif receiver == "recv_into":
                while k := server.recv_into(sink, now):
                    got += k
                    acted = True
                    if check:
                        h_in.update(memoryview(sink)[:k])
            else:
                while True:
                    lent = server.recv_views(1 << 20, now)
                    if not lent.nbytes:
                        break
                    if check:
                        for v in lent.views:
                            h_in.update(v)
                    got += lent.nbytes
                    lent.release()
                    acted = True
        return acted

    start = time.process_time()
    pair.run(step, lambda: got >= size)
    cpu = time.process_time() - start
    return {"cpu": cpu, "exact": h_out.digest() == h_in.digest() if check else None, "received": got,
            "retransmits": conn.info().retransmits, "copied": a.stats["rx_hold.copied"],
            "reclaims": a.stats["rx_hold.reclaims"], "bad_checksum": sum(
                v for k, v in a.stats.drops().items() if k.endswith("bad_checksum")),
            "lost": link.a.counters["lost"] + link.b.counters["lost"], "segs_fast": server.segs_fast}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ustack.tools.bench_lending", description=__doc__.splitlines()[0])
    p.add_argument("--bytes", type=int, default=20_000_000, help="bytes to transfer (default 20 MB)")
    p.add_argument("--runs", type=int, default=3, help="runs per mode (median reported)")
    p.add_argument("--mtu", type=int, default=1500, help="the pipe's MTU (9000: jumbo frames, 6x the bytes a segment)")
    p.add_argument("--exact", action="store_true", help="one lending transfer at 5%% loss etc., checked exact")
    args = p.parse_args(argv)
    if args.bytes <= 0 or args.runs <= 0:
        p.error("--bytes and --runs must be positive")
    if args.exact:
        impair = dict(loss=0.05, duplicate=0.01, reorder=0.02, corrupt=0.005, jitter=0.001)
        r = transfer(args.bytes, "reserve", "recv_views", seed=7, impair=impair, check=True)
        print(f"{args.bytes} bytes, send_reserve -> recv_views, 5% loss + reorder + duplication + corruption: "
              f"{'EXACT' if r['exact'] else 'MISMATCH'} ({r['received']} received, {r['retransmits']} "
              f"retransmitted, {r['lost']} frames lost, {r['bad_checksum']} corrupt frames dropped, "
              f"{r['segs_fast']} segments on the fast path, {r['copied']} payloads copied at the hold bound, "
              f"{r['cpu']:.2f} s CPU)")
        return 0 if r["exact"] else 1
    modes = [("send", "recv"), ("send", "recv_into"), ("send", "recv_views"), ("reserve", "recv_into"),
             ("reserve", "recv_views")]
    cpu = {m: [] for m in modes}
    for _ in range(args.runs):
        for m in modes:
            cpu[m].append(transfer(args.bytes, *m, mtu=args.mtu)["cpu"])
    base = statistics.median(cpu[("send", "recv_into")])
    print(f"TCP over the pipe (MTU {args.mtu}), {args.bytes} bytes, medians of {args.runs} (CPU of both stacks and both apps):")
    for m in modes:
        med = statistics.median(cpu[m])
        print(f"  {m[0]:>8} -> {m[1]:<10} {med:7.3f} s CPU  {args.bytes / med / 1e6:6.1f} MB/s  "
              f"{med / args.bytes * 1e9:6.2f} ns/B  x{med / base:.3f} of send->recv_into  "
              f"(runs {', '.join(f'{c:.3f}' for c in cpu[m])})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
