"""``ustack run``: run an unmodified Python program with its IPv4 networking on a ustack stack.

    ustack run [--backend B] [--ifname IF] --addr A/N [--gateway G] [--pcap F] [stack options]
               (SCRIPT | -m MODULE) [ARGS...]

The program runs in this process as ``python SCRIPT ARGS`` / ``python -m
MODULE ARGS`` would run it: ``sys.argv``, ``sys.path[0]`` (the script's
folder, or the current folder for ``-m``), ``__main__`` through runpy, its
exit status (``sys.exit(3)`` -> 3), an uncaught exception's traceback on
stderr and status 1, SIGINT raising KeyboardInterrupt (uncaught: traceback,
then death by SIGINT as python does). Before it starts, the stack is opened
as the other subcommands open theirs (ustack.tools.cli_stack), its Driver
thread started (ARP, ping, timers go on while the program computes) and
``ustack.patch(driver)`` installed, and asyncio's event loop policy set to
ustack's native loop (``ustack.api.aio``: ``asyncio.run()`` polls the stack
itself; ``--asyncio stock`` keeps asyncio's own loop on the sockets'
readiness fds, for comparison); after it ends, non-daemon threads are
joined (as the interpreter does at exit), its connections closed and their
closing handshakes given up to EXIT_LINGER seconds to finish (the kernel
finishes them after a process exits; ``finish_connections``), the patch
removed and the stack closed.

``--loopback`` gives the program an in-process loopback interface
(``ustack.api.loopback``): a second stack owning 127.0.0.0/8 and ::1 whose
device delivers its TX to its own RX, so sockets addressed to 127/8, ::1 or
"localhost" are ustack sockets too and no kernel socket carries loopback
traffic (without it, loopback stays on the kernel). A socket bound to
the wildcard, or listening unbound, is on both stacks
(``ustack.api.wildcard``) as on Linux; ``--wildcard`` only picks the stack
of a socket decided with no address at all (an unbound UDP ``recv``).

``--backend pipe`` needs no privileges: a peer stack on the other end of the
in-memory link (the next address, as ``ustack serve --backend pipe`` makes
it) offers echo (RFC 862) over UDP and TCP on port 7.
"""

from __future__ import annotations

import argparse
import io
import os
import runpy
import signal
import sys
import threading
import types
import zipfile

from ustack.tools import privileges
from ustack.tools.cli_stack import add_stack_arguments, start_stack, stop_stack, wait_ipv6_ready

ECHO_PORT = 7  # RFC 862
EXIT_LINGER = 1.0  # seconds the stack outlives the program for closing handshakes (finish_connections)
ASYNCIO_MODES = ("native", "stock")


def add_parser(subparsers):
    """Add the ``run`` subcommand to the ``ustack`` command line."""
    p = subparsers.add_parser("run", help="run a Python program (SCRIPT or -m MODULE) on a ustack stack",
                              usage="%(prog)s [stack options] (SCRIPT | -m MODULE) [ARGS...]")
    add_stack_arguments(p)
    privileges.add_arguments(p)
    p.add_argument("--asyncio", choices=ASYNCIO_MODES, default="native",
                   help="native (default): asyncio's loops poll the stack themselves (ustack.api.aio); "
                        "stock: asyncio's own loop on the sockets' readiness fds and the driver thread")
    p.add_argument("--loopback", action="store_true",
                   help="127.0.0.0/8 and ::1 on an in-process ustack loopback interface instead of the kernel's")
    p.add_argument("--wildcard", choices=("main", "loopback"), default="main",
                   help="with --loopback: the stack of a socket decided with no address at all (default: main); "
                        "wildcard binds and unbound listens are on both stacks")
    p.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE [ARGS]",
                   help="run library module MODULE as a script; everything after it is its arguments")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS...]",
                   help="the script and its arguments (with -m: the module's arguments)")
    p.set_defaults(func=cmd_run)
    return p


def cmd_run(args) -> int:
    """Run ``ustack run``: the program (a script or ``-m MODULE``) on a stack of its own.

    Opens the stack, patches ``socket``, runs the program as ``python`` would (``sys.argv``,
    exit status, tracebacks), then closes its connections as the kernel would at exit.

    Args:
        args: the parsed arguments.

    Returns:
        The program's exit status; 2 when the stack could not be started or no program was given.
    """
    if args.module is not None:
        if not args.module:
            print("ustack run: error: argument -m: expected a module name", file=sys.stderr)
            return 2
        module, program = args.module[0], args.module[1:]
    elif args.program:
        module, program = None, args.program
    else:
        print("ustack run: error: a SCRIPT or -m MODULE is required", file=sys.stderr)
        return 2
    started = start_stack(args, "run")
    if started is None:
        return 2
    stack, driver, extras = started
    ok, keeper = privileges.drop_for_command(stack, args, "run")  # before any thread starts
    if not ok:
        stop_stack(stack)
        return 2
    peer = lo = None
    from ustack.api.aio import install_policy, uninstall_policy
    from ustack.api.loopback import close_loopback, open_loopback
    from ustack.api.patch import patch, unpatch

    try:
        if args.backend == "pipe":
            peer = PipeEchoPeer(stack, extras["link"], driver.clock)
        if args.loopback:
            lo = open_loopback(driver.clock, busy_poll=driver.busy_poll)
            lo.start()
        driver.start()
        wait_ipv6_ready(stack, driver)  # RFC 4862 5.4: an IPv6 address is used once DAD has settled
        if peer is not None:
            wait_ipv6_ready(peer.stack, peer.driver)
        patch(driver, loopback=lo, wildcard=args.wildcard if lo is not None else "main")
        if args.asyncio == "native":
            install_policy(driver, *((lo,) if lo is not None else ()))
        status, interrupted = run_program(module, program)
        finish_connections(driver)
        if lo is not None:
            finish_connections(lo)
    finally:
        uninstall_policy()
        unpatch()
        if lo is not None:
            close_loopback(lo)
        driver.close()
        if peer is not None:
            peer.close()
        stop_stack(stack)
        if keeper is not None:
            keeper.finish()  # the XDP detach / nft claim removal that needs the root we gave up
    sys.stdout.flush()
    sys.stderr.flush()
    if interrupted:  # as python: an uncaught KeyboardInterrupt ends the process by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return status


def finish_connections(driver, timeout: float = EXIT_LINGER) -> bool:
    """At exit, what the kernel does for a process's sockets, within ``timeout`` seconds.

    The kernel closes an exiting process's sockets and lets the closing
    handshakes finish after it is gone (orphans); our stack goes with the
    process. So: listeners close (connections waiting to be accepted are
    reset), connections the program left open close (FIN, or RST with unread
    data), and the stack keeps running until no connection is still
    exchanging FINs and ACKs (FIN-WAIT-1/2, CLOSING, LAST-ACK) or the time is
    up. Without this, a peer whose FIN arrives just after we exit stays in
    LAST-ACK, and its port cannot be bound again for a while. TIME-WAIT is not
    waited for. Returns whether every closing handshake finished.
    """
    from ustack.transport.tcp.tcb import State

    closing = (State.FIN_WAIT_1, State.FIN_WAIT_2, State.CLOSING, State.LAST_ACK)
    stack = driver.stack
    tcp = stack.tcp
    with driver.lock, stack.tx_batch():
        now = driver.clock()
        for entry in list(tcp.listeners.values()):
            for lst in getattr(entry, "members", (entry,)):  # a SO_REUSEPORT group: each member
                lst.close(now)
        for conn in list(tcp.connections.values()):
            if not conn.orphaned:
                conn.close(now)
        tcp.flush(now)
    return driver.wait_until(lambda: not any(c.state in closing for c in tcp.connections.values()), timeout)


def run_program(module, program) -> tuple[int, bool]:
    """Run SCRIPT or -m MODULE as ``__main__``; returns (exit status, ended by KeyboardInterrupt)."""
    saved_argv, saved_path0 = sys.argv, sys.path[0] if sys.path else None
    try:
        if module is not None:
            sys.argv = ["-m", *program]  # runpy puts the module's file in argv[0], as python does
            sys.path[0] = os.getcwd()
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            script = program[0]
            sys.argv = list(program)
            sys.path[0] = os.path.dirname(os.path.abspath(script))
            _run_script(script)
        _join_threads()
        return 0, False
    except SystemExit as e:
        _join_threads()
        return _exit_status(e.code), False
    except BaseException as e:  # noqa: B902 - the program's uncaught exception, reported as python would
        _print_uncaught(e)
        return 1, isinstance(e, KeyboardInterrupt)
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None:
            sys.path[0] = saved_path0


def _run_script(script: str) -> None:
    """``python SCRIPT``: argv[0] as given, ``__file__`` absolute, a fresh ``__main__`` module.

    runpy.run_path would put its own path in argv[0]; it still runs what is
    not a plain file (a folder or zip with ``__main__.py``).
    """
    path = os.path.abspath(script)
    if not os.path.isfile(path) or zipfile.is_zipfile(path):
        runpy.run_path(script, run_name="__main__")
        return
    with io.open_code(path) as f:
        code = compile(f.read(), path, "exec", dont_inherit=True)  # the coding cookie is honoured
    main = types.ModuleType("__main__")
    main.__file__, main.__cached__, main.__loader__, main.__spec__ = path, None, None, None
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        sys.modules["__main__"] = saved


def _exit_status(code) -> int:
    """What the interpreter makes of ``sys.exit(code)``: None 0, an int itself, anything else printed and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _print_uncaught(e: BaseException) -> None:
    """The program's traceback from its own frames on (ours and runpy's are cut off), via sys.excepthook."""
    tb = e.__traceback__
    ours = (__name__, runpy.__name__)  # our frames and runpy's
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_globals.get("__name__") in ours:
        tb = tb.tb_next
    sys.excepthook(type(e), e.with_traceback(tb), tb)


def _join_threads() -> None:
    """Wait for the program's non-daemon threads, as the interpreter does before it exits."""
    me = threading.current_thread()
    for t in threading.enumerate():
        if t is not me and not t.daemon and t.is_alive():
            t.join()


class PipeEchoPeer:
    """For ``--backend pipe``: a stack on the other end of the link with UDP and TCP echo on port 7."""

    def __init__(self, stack, link, clock):
        from ustack.api.driver import Driver
        from ustack.net.addr import ANY4, ANY6
        from ustack.tools.serve import _pipe_peer
        from ustack.tools.services import TcpEcho

        self.stack = _pipe_peer(stack, link, clock)
        self.driver = Driver(self.stack, clock)
        self.tcp_echo = TcpEcho(self.stack, ECHO_PORT)
        self.udp = self.stack.udp.endpoint()
        self.stack.udp.bind(self.udp, ANY6 if self.stack.ipv6 is not None else ANY4, ECHO_PORT)  # :: hears IPv4 too
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="ustack-pipe-peer", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        driver, udp, stack = self.driver, self.udp, self.stack
        while not self._stop.is_set():
            driver.wait_until(lambda: self._stop.is_set() or bool(udp.queue), 0.25)
            with driver.lock, stack.tx_batch():
                now = driver.clock()
                while udp.queue:
                    payload, src, sport = udp.pop()
                    try:
                        udp.sendto(payload, src, sport, now)
                    except OSError as e:
                        stack.stats.inc(f"udp.echo_send_error.{type(e).__name__}")

    def close(self) -> None:
        """Stop the peer's poll thread and close its driver and stack."""
        self._stop.set()
        self.driver.kick()
        self._thread.join(5)
        self.driver.close()
        self.stack.close()
