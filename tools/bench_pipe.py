"""CPU cost of the whole stack: a TCP bulk transfer between two Stacks over the pipe backend.

Two stacks on one ManualClock exchange ``--bytes`` one way through the
in-memory pipe (no kernel, no sleeping: simulated time); the figure is the
process CPU time of the transfer, which depends on ustack's per-segment
work alone and so compares two versions of the code far more steadily than
wall-clock figures on a shared machine. Medians of ``--runs``.

    python -m ustack.tools.bench_pipe [--bytes 20000000] [--runs 5] [--ipv6] [--loss 0.05]

Each family also gets one line of how the transfer went: simulated seconds,
segments retransmitted, duplicates the receiver dropped, frames the wire
lost (``--loss``, each way). A clean wire must show no retransmission.
The loop drives the clock as a driver must: after the application sends or
reads it polls again at the same instant, and it jumps only to the earliest
of both stacks' timers and both pipe ends' next arrivals.

``--ipv6`` runs the same transfer over IPv6 (fd00::1 <- fd00::2) and prints
both families' figures and their ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from ustack.tools.pipe_pair import PipePair
from ustack.transport.tcp.tcb import State


@dataclasses.dataclass
class Transfer:
    """What one transfer cost and how it went."""
    cpu: float  # process CPU seconds
    simulated: float  # seconds of the manual clock, from connect() to the last byte read
    retransmits: int  # segments the sender sent again (conn.info().retransmits)
    timeouts: int  # retransmission timeouts at the sender
    duplicates: int  # segments the receiver dropped as unacceptable (RFC 9293 3.10.7.4: old duplicates)
    lost: int  # frames the pipe dropped on purpose (``--loss``)
    received: int  # bytes the receiving application read


def transfer(size: int, seed: int = 1, ipv6: bool = False, loss: float = 0.0, coalesce: bool = True) -> Transfer:
    """``size`` bytes from b to a over a PipeLink with 0.5 ms one-way delay and ``loss`` each way.

    ``coalesce`` False: the receiver ACKs every second segment as it arrives, as a Linux receiver does,
    instead of once per poll round (so the sender handles an ACK per two segments, as against the kernel).
    """
    pair = PipePair(seed=seed, ipv6=ipv6, delay=0.0005, loss=loss)
    if ipv6:
        pair.settle(300, 0.01)  # duplicate address detection first (RFC 4862), in simulated time
    clock, link, a = pair.clock, pair.link, pair.a
    t0 = clock.now
    lst, conn = pair.connect(80) if coalesce else pair.connect(80, ack_coalescing=False)
    chunk = memoryview(bytes(65536))
    sent = got = 0
    server = None

    def step(now: float) -> bool:
        nonlocal sent, got, server
        if server is None:
            server = lst.accept()
        acted = False
        if sent < size and conn.state == State.ESTABLISHED:
            n = conn.send(chunk[:min(len(chunk), size - sent)], now)
            sent += n
            acted = n > 0
        if server is not None:
            while data := server.recv(1 << 20, now):
                got += len(data)
                acted = True
        return acted

    start = time.process_time()
    pair.run(step, lambda: got >= size)
    cpu = time.process_time() - start
    info = conn.info()
    return Transfer(cpu=cpu, simulated=clock.now - t0, retransmits=info.retransmits, timeouts=info.timeouts,
                    duplicates=a.stats["drop.tcp.unacceptable"],
                    lost=link.a.counters["lost"] + link.b.counters["lost"], received=got)


def transfer_cpu_seconds(size: int, seed: int = 1, ipv6: bool = False) -> float:
    return transfer(size, seed, ipv6).cpu


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ustack.tools.bench_pipe", description=__doc__.splitlines()[0])
    p.add_argument("--bytes", type=int, default=20_000_000, help="bytes to transfer (default 20 MB)")
    p.add_argument("--runs", type=int, default=5, help="runs (median reported)")
    p.add_argument("--ipv6", action="store_true", help="also over IPv6, and the ratio")
    p.add_argument("--loss", type=float, default=0.0, help="fraction of frames the pipe drops each way (default 0)")
    p.add_argument("--no-coalesce", action="store_true",
                   help="the receiver ACKs every second segment (as Linux does), not once per poll round")
    args = p.parse_args(argv)
    if args.bytes <= 0 or args.runs <= 0:
        p.error("--bytes and --runs must be positive")
    if not 0.0 <= args.loss < 1.0:
        p.error("--loss must be in [0, 1)")
    meds = {}
    for family in ((False, True) if args.ipv6 else (False,)):
        runs = []
        for _ in range(args.runs):
            t = transfer(args.bytes, ipv6=family, loss=args.loss, coalesce=not args.no_coalesce)  # same seed: same segments, same figures
            runs.append(t.cpu)
        med = meds[family] = statistics.median(runs)
        print(f"TCP over {'IPv6 over ' if family else ''}the pipe, {args.bytes} bytes: median {med:.3f} s CPU "
              f"({args.bytes / med / 1e6:.1f} MB/s of CPU), runs {', '.join(f'{r:.3f}' for r in runs)}")
        print(f"  {t.simulated:.3f} s simulated, {t.retransmits} retransmitted ({t.timeouts} timeouts), "
              f"{t.duplicates} duplicates at the receiver, {t.lost} frames lost on the wire")
    if args.ipv6:
        print(f"IPv6 / IPv4 CPU: {meds[True] / meds[False]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
