"""``ustack stats``: the counters and connection table of a running stack, like ``ss -tni`` and ``nstat``.

    ustack stats [--pid PID | --socket PATH] [--watch [S]] [--count N] [--json] [-t] [-n] [-a]
    python -m ustack.tools.stats ...

A running stack publishes snapshots on a Unix socket
(ustack.tools.stats_server, started by ``ustack serve`` and ``ustack demo``);
this finds it (the only one running, ``--pid`` or ``--socket``;
ustack.tools.stats_client), fetches a snapshot and prints it
(ustack.tools.stats_render), once or every ``--watch`` seconds with
per-interval counter deltas. ``--json`` prints the snapshot as it came.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ustack.tools.cli_types import float_range, int_range, pid
from ustack.tools.stats_client import StatsError, fetch, find_socket
from ustack.tools.stats_render import CLEAR, printable, render

DESCRIPTION = ("Counters and connection table of a running ustack, like ss -tni and nstat "
               "(the stack publishes them on a Unix socket).")


def _add_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--pid", type=pid, help="the stack running in process PID")
    where.add_argument("--socket", metavar="PATH", help="the publisher's socket (default: the only one running)")
    p.add_argument("--watch", nargs="?", type=float_range(0.0, "an interval in seconds", above=True, high=86400.0),
                   const=1.0, metavar="SECONDS",
                   help="refresh every SECONDS (default 1) until Ctrl-C; counters show per-interval deltas")
    p.add_argument("--count", type=int_range(1, None, "a count"), metavar="N", help="with --watch: stop after N rounds")
    p.add_argument("--json", action="store_true", help="print the raw snapshot (one JSON line per round with --watch)")
    p.add_argument("-t", "--tcp", action="store_true", help="TCP connections and listeners only")
    p.add_argument("-n", "--counters", action="store_true", help="counters and drops only")
    p.add_argument("-a", "--all", action="store_true",
                   help="everything: zero counters, totals beside deltas, sequence numbers, cookie counts")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``stats`` subcommand to the ``ustack`` command line."""
    p = subparsers.add_parser("stats", help="counters and connection table of a running stack (like ss -tni, nstat)",
                              description=DESCRIPTION)
    _add_arguments(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    """Run ``ustack stats``: ask a running stack for its snapshot once, or ``--watch`` it.

    Args:
        args: the parsed arguments (``--pid``, ``--socket``, ``--watch``, ``--count``, ``--json``).

    Returns:
        0 on success, 1 when no stack was found or its answer was refused (one line on stderr).
    """
    try:
        path = args.socket or find_socket(args.pid)
    except StatsError as e:
        print(f"ustack stats: {e}", file=sys.stderr)
        return 1
    interval = args.watch
    if interval is None and args.count:
        interval = 1.0
    out = sys.stdout
    tty = out.isatty()
    show_tcp = args.tcp or not args.counters
    show_counters = args.counters or not args.tcp
    prev = None
    rounds = 0
    next_at = time.monotonic()
    try:
        while True:
            snap = fetch(path)
            if args.json:
                out.write(json.dumps(snap, indent=None if interval is not None else 2) + "\n")
            else:
                try:
                    text = render(snap, prev, tcp=show_tcp, udp=not (args.tcp or args.counters),
                                  counters=show_counters, everything=args.all, color=tty)
                except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
                    raise StatsError(f"the ustack at {path} sent a malformed snapshot "
                                     f"({type(e).__name__}: {printable(str(e))})") from None
                if interval is not None and tty:
                    text = CLEAR + text
                elif interval is not None and rounds:
                    text = "\n" + text
                out.write(text)
            out.flush()
            rounds += 1
            if interval is None or (args.count and rounds >= args.count):
                return 0
            prev = snap
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the refresh interval itself
            else:
                next_at = time.monotonic()
    except KeyboardInterrupt:
        return 0
    except StatsError as e:
        print(f"ustack stats: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0


def main(argv=None) -> int:
    """Run ``ustack stats`` from ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = argparse.ArgumentParser(prog="ustack stats", description=DESCRIPTION)
    _add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
