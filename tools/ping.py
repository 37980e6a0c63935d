"""``ustack ping``: ICMP (or ICMPv6, for an IPv6 destination) echo from the user-space stack, like ping(8).

One request every ``-i`` seconds, ``-c`` of them, ``-s`` bytes of payload,
each waited for up to ``-W`` seconds; the summary (transmitted, received,
loss, rtt min/avg/max/mdev) on exit or Ctrl-C. Exit 0 when every request was
answered, 1 otherwise, 2 when the stack cannot start or the destination is
not an address.
"""

from __future__ import annotations

import os
import signal
import statistics
import sys

from ustack.net.addr import parse as ip_addr
from ustack.tools.cli_stack import (add_stack_arguments, float_range, int_range, start_stack, stop_stack,
                                   wait_ipv6_ready)


def add_parser(subparsers):
    """Add the ``ping`` subcommand to the ``ustack`` command line."""
    p = subparsers.add_parser("ping", help="ping from the user-space stack, like ping(8)")
    add_stack_arguments(p)
    p.add_argument("dest")
    p.add_argument("-c", "--count", type=int_range(1, None, "a count"), default=4)
    p.add_argument("-i", "--interval", type=float_range(0.0), default=1.0)
    p.add_argument("-s", "--size", type=int_range(0, 65507, "a payload size"), default=56)
    p.add_argument("-W", "--timeout", type=float_range(0.0), default=2.0, help="seconds to wait for each reply")
    p.set_defaults(func=cmd_ping)
    return p


def cmd_ping(args) -> int:
    """Run ``ustack ping``: ICMP (or ICMPv6) echo requests from a stack of its own.

    Args:
        args: the parsed arguments (``DEST``, ``-c``, ``-i``, ``-s``, ``-W`` and the stack's).

    Returns:
        0 when every request was answered, 1 when some were not, 2 for a bad destination or a
        stack that could not start.
    """
    started = start_stack(args, "ping")
    if started is None:
        return 2
    stack, driver, _ = started
    clock = driver.clock
    try:
        dst = ip_addr(args.dest)
    except ValueError:
        print(f"ustack ping: {args.dest}: Name or service not known", file=sys.stderr)
        stop_stack(stack)
        return 2
    if len(dst) == 16:
        if stack.icmpv6 is None:
            print(f"ustack ping: {args.dest}: no IPv6 address (give --addr X::Y/N)", file=sys.stderr)
            stop_stack(stack)
            return 2
        icmp, overhead = stack.icmpv6, 48  # IPv6 + ICMPv6 headers
        wait_ipv6_ready(stack, driver)
    else:
        icmp, overhead = stack.icmp, 28
    ident = os.getpid() & 0xFFFF
    size = args.size
    payload = bytes((i & 0xFF) for i in range(size))
    replies: dict[int, tuple[float, int]] = {}
    icmp.echo_handlers[ident] = lambda seq, i, data, src, now, ttl: (
        replies.setdefault(seq, (now, ttl)) if data == payload and src == dst else None)
    interrupted = {"flag": False}

    def on_signal(signum, frame):
        interrupted["flag"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(f"PING {args.dest} ({args.dest}) {size}({size + overhead}) bytes of data.", flush=True)
    rtts = []
    sent_at = {}
    start = clock()
    transmitted = 0
    try:
        driver.poll()
        for seq in range(1, args.count + 1):
            if interrupted["flag"]:
                break
            t0 = clock()
            sent_at[seq] = t0
            with driver.lock:
                try:
                    icmp.ping(dst, ident, seq, clock(), payload)
                except OSError as e:
                    print(f"ping: sendmsg: {e.strerror}", flush=True)
            transmitted += 1
            ok = driver.wait_until(lambda: seq in replies or interrupted["flag"], args.timeout)
            if ok and seq in replies:
                when, ttl = replies[seq]
                rtt = (when - t0) * 1000
                rtts.append(rtt)
                print(f"{size + 8} bytes from {args.dest}: icmp_seq={seq} ttl={ttl} time={rtt:.3f} ms", flush=True)
            if seq < args.count and not interrupted["flag"]:
                remaining = args.interval - (clock() - t0)
                if remaining > 0:
                    driver.wait_until(lambda: interrupted["flag"], remaining)
    finally:
        elapsed = (clock() - start) * 1000
        received = len([s for s in replies if s in sent_at])
        loss = 100.0 * (transmitted - received) / transmitted if transmitted else 0.0
        print(f"\n--- {args.dest} ping statistics ---")
        print(f"{transmitted} packets transmitted, {received} received, {loss:.0f}% packet loss, time {elapsed:.0f}ms")
        if rtts:
            mdev = statistics.pstdev(rtts)
            print(f"rtt min/avg/max/mdev = {min(rtts):.3f}/{statistics.mean(rtts):.3f}/{max(rtts):.3f}/{mdev:.3f} ms")
        sys.stdout.flush()
        stop_stack(stack)
    return 0 if received == transmitted and transmitted else 1
