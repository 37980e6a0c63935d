"""``ustack trace FILE``: print a pcap capture one line per frame, with TCP analysis.

    ustack trace FILE [--follow] [-c N] [--port P]... [--host A]... [-S] [-N]
    python -m ustack.tools.trace FILE ...

The command line over three modules: ``trace_records`` reads the file
(pcap through ``ustack.pcap``, pcapng through scapy), ``trace_format`` turns
each record into a ``tcpdump -nn``-like line (its docstring describes the
lines and the filters) and ``trace_tcp`` supplies relative sequence numbers
and the analysis markers (``[retransmission]``, ``[dup ack #n]``...).

``--port P`` and ``--host A`` filter (repeating an option means any of
them; the two kinds combine with "and"); ``-c N`` stops after N printed
frames; ``-S`` prints raw sequence numbers; ``-N`` numbers the lines.

``--follow`` reads a capture that is still being written (``ustack serve
--pcap FILE``): it waits for the file and its header to appear, prints
each complete record as it arrives (a partial record at the end is left
until the rest is written), sleeps a short interval whenever there is
nothing new, starts over if the file is truncated or replaced, and runs
until Ctrl-C (exit 0) or -c N. It reads pcap only.

Exit status: 0 when every record was read; 1 when the file ends inside a
record or a record header is corrupt (every frame before it is printed
first); 2 for a file that is missing, unreadable or not a capture, and for
usage errors; 130 for Ctrl-C without --follow.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import sys
import threading
import time

from ustack.tools.cli_types import float_range, int_range, ip_address, port_or_zero
from ustack.tools.trace_format import Tracer
from ustack.tools.trace_records import CaptureError, Restart, read_records

EXIT_OK = 0
EXIT_DAMAGED = 1
EXIT_USAGE = 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``ustack trace``'s arguments (FILE, ``--follow``, ``-c``, ``--port``, ``--host``) to ``p``."""
    p.add_argument("file", help="pcap (or pcapng) capture file")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep reading as the file grows (a running `ustack serve --pcap FILE`), until Ctrl-C")
    p.add_argument("-c", "--count", type=int_range(1, None, "a count"), metavar="N", help="stop after N printed frames")
    p.add_argument("--port", type=port_or_zero, action="append", default=[], metavar="P",
                   help="only TCP/UDP frames from or to port P (repeatable: any of them)")
    p.add_argument("--host", type=ip_address, action="append", default=[], metavar="A",
                   help="only frames from or to IPv4 or IPv6 address A (repeatable: any of them)")
    p.add_argument("-S", "--absolute", action="store_true", help="raw TCP sequence and ack numbers")
    p.add_argument("-N", "--number", action="store_true", help="start each line with the frame number")
    p.add_argument("--interval", type=float_range(0.0, "an interval in seconds", above=True, high=60.0),
                   default=0.1, metavar="S",
                   help="--follow: seconds to sleep when there is nothing new (default: %(default)s)")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``trace`` subcommand to the ``ustack`` command line."""
    p = subparsers.add_parser("trace", help="print a pcap capture one line per frame, with TCP analysis",
                              description="Print a pcap capture one line per frame, with TCP analysis.")
    add_arguments(p)
    p.set_defaults(func=cmd_trace)
    return p


def _check_args(args) -> str | None:
    for host in args.host:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return f"--host {host}: not an IPv4 or IPv6 address"
    for port in args.port:
        if not 0 <= port <= 65535:
            return f"--port {port}: not a port number"
    if args.count is not None and args.count < 1:
        return f"-c {args.count}: must be 1 or more"
    if args.interval <= 0:
        return f"--interval {args.interval}: must be positive"
    return None


def cmd_trace(args, out=None, err=None) -> int:
    """Run ``ustack trace``; returns the exit status."""
    try:
        return _trace(args, out or sys.stdout, err or sys.stderr)
    except BrokenPipeError:
        # The reader went away (| head): stop quietly, as tcpdump does.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


class _Interrupted(Exception):
    """Ctrl-C while following: raised at a clean point (between records, or around a sleep)."""


def _trace(args, out, err) -> int:
    problem = _check_args(args)
    if problem:
        print(f"ustack trace: {problem}", file=err)
        return EXIT_USAGE
    hosts = [str(ipaddress.ip_address(h)) for h in args.host]  # IPv6 compressed as the lines print it
    tracer = Tracer(hosts=hosts, ports=args.port, absolute=args.absolute, number=args.number)

    def note(text):
        print(f"ustack trace: {text}", file=err, flush=True)

    pending: list = []
    stop: list = []  # SIGINT seen (follow mode)

    def sleep(interval: float) -> None:
        _flush(out, pending)  # show what we have before waiting for more
        if not stop:
            time.sleep(interval)
        if stop:
            raise _Interrupted

    follow = args.follow
    old_handler = None
    if follow and threading.current_thread() is threading.main_thread():
        old_handler = signal.signal(signal.SIGINT, lambda signum, frame: stop.append(signum))
    printed = 0
    limit = args.count
    code = EXIT_OK
    try:
        records = read_records(args.file, follow=follow, interval=args.interval, note=note, sleep=sleep)
        try:
            for rec in records:
                if rec is Restart:
                    _flush(out, pending)
                    note(f"{args.file} was truncated or replaced: starting over")
                    tracer.reset()
                    continue
                line = tracer.frame(*rec)
                if line is not None:
                    pending.append(line)
                    printed += 1
                    if limit is not None and printed >= limit:
                        break
                    if len(pending) >= 512:
                        _flush(out, pending)
                if stop:
                    break
        finally:
            records.close()
    except CaptureError as e:
        _flush(out, pending)
        note(str(e))
        code = EXIT_DAMAGED if e.damaged else EXIT_USAGE
    except _Interrupted:
        pass
    except KeyboardInterrupt:  # batch mode: as any command interrupted
        code = 130
    finally:
        if old_handler is not None:
            signal.signal(signal.SIGINT, old_handler)
    _flush(out, pending)
    return code


def _flush(out, pending: list) -> None:
    if pending:
        out.write("\n".join(pending))
        out.write("\n")
        pending.clear()
    out.flush()


def main(argv=None) -> int:
    """Run ``ustack trace`` from ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    parser = argparse.ArgumentParser(prog="ustack trace",
                                     description="Print a pcap capture one line per frame, with TCP analysis.")
    add_arguments(parser)
    return cmd_trace(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
