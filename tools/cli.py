"""The ``ustack`` command line: one subcommand per tool, each in its own module.

Usage::

    ustack serve --backend {pipe,tap,packet,afxdp} --ifname IF --addr 198.18.0.2/24
                 [--gateway IP] [--pcap FILE] [--udp-echo PORT]
    ustack serve ... [--tcp-echo PORT] [--tcp-discard PORT] [--tcp-source PORT [--source-bytes N]]
    ustack send  --backend B --ifname IF --addr A/N --connect HOST:PORT --bytes N
    ustack recv  --backend B --ifname IF --addr A/N {--listen PORT | --connect HOST:PORT}
    ustack demo  [--backend B] [--pipe] [--pcap FILE]
    ustack ping  --backend B --ifname IF --addr A/N [--gateway IP] DEST [-c N] [-i S] [-s SIZE] [-W S]
    ustack stats [--pid PID | --socket PATH] [--watch [S]] [--json]
    ustack trace FILE [--follow] [-c N] [--port P] [--host A]
    ustack bench [--quick] [--backends LIST]
    ustack run   [--backend B] [--ifname IF] --addr A/N [--gateway IP] [--pcap FILE] (SCRIPT | -m MODULE) [ARGS...]

serve (ustack.tools.serve), send and recv (transfer), ping, demo, stats,
trace, bench and run (run_program: a Python program on ustack sockets); the options shared by the commands that run a stack are in
ustack.tools.cli_stack. ``python -m ustack`` is the same command line.
A mistake on the command line is one line and exit status 2; Ctrl-C is
"interrupted" and exit status 130; neither prints a traceback.
"""

from __future__ import annotations

import argparse
import sys

from ustack.tools import bench, ping, run_program, serve, stats, trace, transfer


def cmd_demo(args) -> int:
    """Run ``ustack demo`` (:func:`ustack.tools.demo.main`).

    Args:
        args: the parsed ``argparse.Namespace``.

    Returns:
        The exit status.
    """
    from ustack.tools.demo import main as demo_main

    return demo_main(args)


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error: 'ustack serve: error: argument --mtu: ...', exit status 2."""

    def error(self, message):
        """Print ``PROG: error: MESSAGE (see PROG --help)`` on one line and exit.

        Raises:
            SystemExit: always, with status 2.
        """
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """Build the ``ustack`` parser with every subcommand (serve, send, recv, demo, stats, trace,
    bench, ping, run); each sets ``func``, the function that runs it.

    Returns:
        The :class:`Parser`.
    """
    parser = Parser(prog="ustack", description="A user-space TCP/UDP/IPv4 stack for Python.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve.add_parser(sub)
    transfer.add_parsers(sub)
    demo = sub.add_parser("demo", help="a guided tour: the kernel and ustack talking (root), or two stacks (no root)")
    from ustack.tools.demo import add_arguments as demo_arguments

    demo_arguments(demo)
    demo.set_defaults(func=cmd_demo)
    stats.add_parser(sub)
    trace.add_parser(sub)
    bench.add_parser(sub)
    ping.add_parser(sub)
    run_program.add_parser(sub)
    return parser


def main(argv=None) -> int:
    """Run the ``ustack`` command line (the console script and ``python -m ustack``).

    Args:
        argv: the arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The subcommand's exit status; 130 after Ctrl-C (``interrupted``, no traceback).

    Raises:
        SystemExit: status 2 for a mistake on the command line (one line, from :class:`Parser`),
            0 for ``--help``.
    """
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:  # Ctrl-C where a command has no handler of its own: no traceback
        print(f"ustack {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
