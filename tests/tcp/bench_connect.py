"""CPU cost of TCP connection setup and teardown: connect, accept, close between two whole Stacks.

Two Stacks on one ManualClock over the in-memory pipe (no loss, 50 µs
one-way delay, default TcpConfig). Each of ``--conns`` connections is
opened by the client (a ephemeral port picked per RFC 6056), accepted by
the server's listener, closed by the client first (it goes to TIME_WAIT)
and then by the server; the next one starts once both ends are done. Only
the process CPU time of the whole loop is counted, so the figure depends on
ustack's own work and compares two versions of the code steadily on a
shared machine. Prints connections per CPU-second, the median and the best
of ``--runs`` runs (the best is the steadier figure when other work shares
the CPU).

    .venv/bin/python -m tests.tcp.bench_connect [--conns 2000] [--runs 5] [--profile] [--rounds [--no-syn-c] [--no-ack-c]]

``--rounds``: the server side alone, as ``ustack serve`` runs it (a ``TcpEcho``
service on its listener): the wall time of each of its poll rounds (one
thread, nothing else running in it), grouped by the TCP flags of the
segments the round received (``S``: the SYN, ``A open``: the handshake's
ACK, ``FA``: the client's FIN, ``A close``: the last ACK), medians over the
run after its first tenth; their sum is the server's CPU per connection
less the empty rounds.

Not collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

from ustack.net.addr import ANY4, parse
from ustack.tools.pipe_pair import PipePair
from ustack.transport.tcp.tcb import State

SERVER, PORT = "198.18.0.1", 80


def connect_close_cpu_seconds(conns: int, seed: int = 1) -> float:
    """Open and close ``conns`` connections one after the other; the process CPU seconds they took."""
    return connect_close(conns, seed)[0]


def connect_close(conns: int, seed: int = 1) -> tuple[float, float]:
    """Open and close ``conns`` connections one after the other: (CPU seconds, simulated seconds)."""
    pair = PipePair(seed=seed, delay=0.00005)
    clock, a, b = pair.clock, pair.a, pair.b
    lst = a.tcp.listen((ANY4, PORT), 128)
    remote = (parse(SERVER), PORT)

    def run_until(done, limit: float = 10.0) -> None:
        # step: done() right after the polls, before the clock jumps (the simulated figure ends there)
        if not pair.run(lambda now: done(), done, limit):
            raise RuntimeError("bench_connect: stuck")

    gc.collect()  # what earlier runs left for the collector is not this run's cost
    start = time.process_time()
    for _ in range(conns):
        client = b.tcp.connect(None, remote, clock.now)
        box = []

        def accepted() -> bool:
            if not box:
                srv = lst.accept()
                if srv is not None:
                    box.append(srv)
            return bool(box) and client.state == State.ESTABLISHED

        run_until(accepted)
        server = box[0]
        client.close(clock.now)
        run_until(lambda: server.eof)
        server.close(clock.now)
        run_until(lambda: server.state == State.CLOSED and client.state in (State.TIME_WAIT, State.CLOSED))
    return time.process_time() - start, clock.now - 1000.0


_FLAGS = {0x02: "S", 0x10: "A", 0x11: "FA", 0x18: "PA", 0x19: "FPA", 0x04: "R", 0x14: "RA"}


def server_rounds(conns: int, seed: int = 1, syn_c: bool = True, ack_c: bool = True) -> dict:
    """{(flags of the round's segments, phase): [ns per round]} for the server's poll rounds (see ``--rounds``);
    ``syn_c=False``: the server's SYNs through the Python path (``flows.syn = None``), for an A/B in one tree;
    ``ack_c=False``: the handshake's ACKs through the Python path (``flows.hsk = None``)."""
    from ustack.tools.services import TcpEcho

    pair = PipePair(seed=seed, delay=0.00005)
    clock, a, b = pair.clock, pair.a, pair.b
    if not syn_c:
        a.tcp.flows.syn = None
    if not ack_c:
        a.tcp.flows.hsk = None
    service = TcpEcho(a, PORT)
    remote = (parse(SERVER), PORT)
    a.poll(clock.now)
    device, poll = a.device, a.poll
    seen = {"flags": None, "phase": "open"}
    times: dict = {}

    def rx_burst(n):
        frames = device_rx(n)
        if frames:
            names = []
            for f in frames:
                if len(f) >= 54 and f[12:14] == b"\x08\x00" and f[23] == 6:
                    names.append(_FLAGS.get(f[14 + (f[14] & 15) * 4 + 13], "?"))
                else:
                    names.append("other")
            seen["flags"] = "+".join(names)
        return frames

    def timed_poll(now):
        seen["flags"] = None
        t0 = time.perf_counter_ns()
        deadline = poll(now)
        if seen["flags"] is not None:
            times.setdefault((seen["flags"], seen["phase"]), []).append(time.perf_counter_ns() - t0)
        return deadline

    device_rx = device.rx_burst
    device.rx_burst = rx_burst
    a.poll = timed_poll
    macs = {parse(SERVER): pair.link.a.capabilities.mac, parse("198.18.0.2"): pair.link.b.capabilities.mac}

    def run_until(done) -> None:
        if not pair.run(lambda now: False, done, 10.0):
            raise RuntimeError("bench_connect: stuck")

    gc.collect()
    for _ in range(conns):
        # (the clock jumps over timers between connections: both ends would ARP again, not what is measured)
        b.arp.learn(parse(SERVER), macs[parse(SERVER)], clock.now)
        a.arp.learn(parse("198.18.0.2"), macs[parse("198.18.0.2")], clock.now)
        seen["phase"] = "open"
        client = b.tcp.connect(None, remote, clock.now)
        run_until(lambda: client.state == State.ESTABLISHED and bool(service.active))
        seen["phase"] = "close"
        client.close(clock.now)
        run_until(lambda: client.state in (State.TIME_WAIT, State.CLOSED) and not service.active)
    return times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.tcp.bench_connect", description=__doc__.splitlines()[0])
    p.add_argument("--conns", type=int, default=2000, help="connections per run (default 2000)")
    p.add_argument("--runs", type=int, default=5, help="runs (median reported)")
    p.add_argument("--profile", action="store_true", help="one run under cProfile; print the top 30 by own time")
    p.add_argument("--rounds", action="store_true", help="the server's time per poll round by what it received")
    p.add_argument("--no-syn-c", action="store_true",
                   help="with --rounds: the server's SYNs through the Python path (no _fastpath.SynPath)")
    p.add_argument("--no-ack-c", action="store_true",
                   help="with --rounds: the handshake's ACKs through the Python path (no _fastpath.HandshakePath)")
    args = p.parse_args(argv)
    if args.conns <= 0 or args.runs <= 0:
        p.error("--conns and --runs must be positive")
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.runcall(connect_close_cpu_seconds, args.conns)
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return 0
    if args.rounds:
        times = server_rounds(args.conns, syn_c=not args.no_syn_c, ack_c=not args.no_ack_c)
        total = 0.0
        print(f"server poll rounds (TcpEcho), {args.conns} connections over the pipe: median µs by segments received")
        for (flags, phase), ns in sorted(times.items(), key=lambda kv: -len(kv[1])):
            ns = ns[len(ns) // 10:]
            if len(ns) < args.conns // 4:
                continue
            med = statistics.median(ns) / 1e3
            if "other" not in flags:
                total += med * len(ns) / (args.conns - args.conns // 10)
            print(f"  {flags + ' ' + phase:16s} {med:6.1f} µs  ({len(ns)} rounds)")
        print(f"  sum per connection of the TCP rounds {total:.1f} µs")
        return 0
    results = [connect_close(args.conns) for _ in range(args.runs)]
    runs = [cpu for cpu, _ in results]
    rates = sorted(args.conns / r for r in runs)
    print(f"TCP connect+accept+close over the pipe, {args.conns} connections: median "
          f"{statistics.median(rates):.0f} connections per CPU-second "
          f"({statistics.median(runs) / args.conns * 1e6:.0f} µs CPU each), best {rates[-1]:.0f}; "
          f"runs {', '.join(f'{r:.0f}' for r in rates)}; "
          f"{results[0][1] / args.conns * 1e3:.2f} ms simulated each")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
