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

from ustack.api import environment
from ustack.api.clock import ManualClock
from ustack.backends.pipe import PipeLink
from ustack.net.addr import ANY4, ANY6, parse
from ustack.stack import Stack
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


def transfer(size: int, seed: int = 1, ipv6: bool = False, loss: float = 0.0) -> Transfer:
    """``size`` bytes from b to a over a PipeLink with 0.5 ms one-way delay and ``loss`` each way."""
    clock = ManualClock(1000.0)
    link = PipeLink(clock, seed=seed, delay=0.0005, loss=loss)
    fastpath = environment.fastpath()
    if ipv6:
        a = Stack(link.a, ["198.18.0.1/24", "fd00::1/64"], fastpath=fastpath)
        b = Stack(link.b, ["198.18.0.2/24", "fd00::2/64"], fastpath=fastpath)
        for _ in range(300):  # duplicate address detection first (RFC 4862), in simulated time
            a.poll(clock.now), b.poll(clock.now)
            clock.set(clock.now + 0.01)
    else:
        a, b = Stack(link.a, "198.18.0.1/24", fastpath=fastpath), Stack(link.b, "198.18.0.2/24", fastpath=fastpath)
    lst = a.tcp.listen((ANY6 if ipv6 else ANY4, 80), 4)
    t0 = clock.now
    conn = b.tcp.connect(None, (parse("fd00::1" if ipv6 else "198.18.0.1"), 80), clock.now)
    chunk = memoryview(bytes(65536))
    sent = got = 0
    server = None
    start = time.process_time()
    while got < size:
        now = clock.now
        deadlines = [a.poll(now), b.poll(now)]
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
        if acted:
            # What the application just did (segments, a window update, a timer armed) is not in the
            # deadlines the polls above returned: poll again at this same instant before jumping ahead.
            continue
        # b's poll may have put frames toward a after a's poll had told its deadline: the wire's own
        # next arrival on either end counts too, or the clock would jump past it to a timer (an RTO).
        deadlines += (link.a.poll_at(), link.b.poll_at())
        nxt = min((d for d in deadlines if d is not None), default=now)
        clock.set(nxt if nxt > now else now + 1e-6)
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
    args = p.parse_args(argv)
    if args.bytes <= 0 or args.runs <= 0:
        p.error("--bytes and --runs must be positive")
    if not 0.0 <= args.loss < 1.0:
        p.error("--loss must be in [0, 1)")
    meds = {}
    for family in ((False, True) if args.ipv6 else (False,)):
        runs = []
        for _ in range(args.runs):
            t = transfer(args.bytes, ipv6=family, loss=args.loss)  # same seed: same segments, same figures
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
