"""``ustack stats``: a running stack publishes its counters and connection table; this prints them.

Server side: ``StatsPublisher(stack, driver).start()`` listens on a Unix
stream socket (``/run/ustack/<pid>.sock`` when that directory is usable,
else ``$XDG_RUNTIME_DIR/ustack/`` or ``/tmp/ustack-<uid>/``; the directory
is 0700, the socket 0600; ``$USTACK_STATS_DIR`` overrides the choice). A
small thread answers each request: it takes ``driver.lock`` only long
enough to copy the raw state (counters, ``Connection.info()`` records,
listener queue lengths, UDP queues, the ARP cache), then builds and sends
the JSON snapshot without the lock.

Protocol: the client connects, sends one line ``snapshot\\n`` and reads one
JSON document until EOF.

Client side: ``ustack stats`` (or ``python -m ustack.tools.stats``) finds the
running stack (the only socket in the default directories, or ``--pid``,
or ``--socket``) and prints an ``ss -tni``-like table of TCP connections
and listeners, the UDP sockets, the ARP cache, an ``nstat``-like counter
list (per-interval deltas with ``--watch``) and the drops by reason last.

Units as in ss: rto and rtt in milliseconds, cwnd and ssthresh in
segments of the sender MSS (ustack keeps them in bytes: ``--json`` has the
bytes).
"""

from __future__ import annotations

import argparse
import atexit
import errno
import json
import os
import select
import socket
import stat
import sys
import threading
import time
from dataclasses import fields

from ustack.net.addr import to_str as ip_str
from ustack.transport.tcp.congestion import INFINITE_SSTHRESH

SNAPSHOT_VERSION = 1
REQUEST_MAX = 256
CLIENT_TIMEOUT = 2.0  # seconds a slow client may hold the server thread (send/receive)
ENV_DIR = "USTACK_STATS_DIR"

SS_STATE = {
    "ESTABLISHED": "ESTAB", "SYN_SENT": "SYN-SENT", "SYN_RECEIVED": "SYN-RECV", "FIN_WAIT_1": "FIN-WAIT-1",
    "FIN_WAIT_2": "FIN-WAIT-2", "CLOSE_WAIT": "CLOSE-WAIT", "CLOSING": "CLOSING", "LAST_ACK": "LAST-ACK",
    "TIME_WAIT": "TIME-WAIT", "CLOSED": "CLOSED", "LISTEN": "LISTEN",
}
CLEAR = "\x1b[H\x1b[2J"
RED, BOLD, RESET = "\x1b[1;31m", "\x1b[1m", "\x1b[0m"
DESCRIPTION = ("Counters and connection table of a running ustack, like ss -tni and nstat "
               "(the stack publishes them on a Unix socket).")


class StatsError(Exception):
    """No running stack, or it did not answer: the message says which, in plain words."""


# -- where the sockets live ---------------------------------------------------

def runtime_dirs() -> list[str]:
    """The directories a publisher may use, in order of preference (the client searches them all)."""
    override = os.environ.get(ENV_DIR)
    if override:
        return [override]
    dirs = ["/run/ustack"]
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        dirs.append(os.path.join(xdg, "ustack"))
    dirs.append(f"/tmp/ustack-{os.getuid()}")
    return dirs


def _private_dir(path: str) -> bool:
    """Make ``path`` (not its parents) a 0700 directory we own; False when that is not possible."""
    try:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return False  # a symlink or someone else's directory: not ours to use
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(path, 0o700)
        return os.access(path, os.W_OK | os.X_OK)
    except OSError:
        return False


def _socket_pid(name: str) -> int | None:
    """The pid in a socket file name: ``<pid>.sock`` or ``<pid>.<n>.sock``."""
    if not name.endswith(".sock"):
        return None
    head = name[:-5].split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _answers(path: str) -> bool:
    """Someone is listening on the Unix socket ``path``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(1.0)
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def find_socket(pid: int | None = None) -> str:
    """The socket of the one running stack (or of ``pid``); raises StatsError otherwise."""
    found = []
    for d in runtime_dirs():
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            p = _socket_pid(name)
            if p is None or (pid is not None and p != pid):
                continue
            path = os.path.join(d, name)
            try:
                if not stat.S_ISSOCK(os.lstat(path).st_mode):
                    continue
            except OSError:
                continue
            if _pid_alive(p):
                found.append(path)
    where = ", ".join(runtime_dirs())
    if not found:
        who = f"ustack with pid {pid}" if pid is not None else "running ustack"
        raise StatsError(f"no {who} found (looked for <pid>.sock in {where}); "
                         f"start one with `ustack serve` or give --socket PATH")
    if len(found) > 1:
        raise StatsError("several ustacks are running; pick one with --pid or --socket:\n  " + "\n  ".join(found))
    return found[0]


# -- the publisher ------------------------------------------------------------

class StatsPublisher:
    """Serves JSON snapshots of ``stack`` on a Unix socket from a small thread (see the module docstring)."""

    def __init__(self, stack, driver, path: str | None = None, *, started: float | None = None):
        self.stack = stack
        self.driver = driver
        self.path = path
        self.pid = os.getpid()
        # Uptime counts from ``started`` (a driver.clock() reading), by default from now.
        self.started = driver.clock() if started is None else started
        self.requests = 0  # snapshots served
        self.errors = 0  # requests that failed (client gone, bad request)
        self._sock = None
        self._inode = None
        self._thread = None
        self._stop = threading.Event()
        self._wake_r = self._wake_w = -1
        self._closed = False

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    # -- lifecycle ------------------------------------------------------------
    def start(self) -> "StatsPublisher":
        """Bind the socket and start the server thread; returns self (``.path`` is then set)."""
        if self._thread is not None:
            return self
        if self._closed:
            raise RuntimeError("StatsPublisher was closed")
        sock = self._bind()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="ustack-stats", daemon=True)
        self._thread.start()
        atexit.register(self.close)
        return self

    def _bind(self) -> socket.socket:
        if self.path is None:
            self.path = self._default_path()
        else:
            self._clear_stale(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self.path)
            # The directory is 0700; the socket is made 0600 right after bind (no umask games with threads).
            os.chmod(self.path, 0o600)
            self._inode = os.stat(self.path).st_ino
            sock.listen(8)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return sock

    def _default_path(self) -> str:
        for d in runtime_dirs():
            if not _private_dir(d):
                continue
            for n in range(64):
                path = os.path.join(d, f"{self.pid}.sock" if n == 0 else f"{self.pid}.{n}.sock")
                if self._clear_stale(path):
                    return path
        raise OSError(errno.EACCES, "no usable directory for the stats socket: " + ", ".join(runtime_dirs()))

    @staticmethod
    def _clear_stale(path: str) -> bool:
        """True when ``path`` is free (a dead socket there is removed); EADDRINUSE when a live one is."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return True
        if stat.S_ISSOCK(st.st_mode) and not _answers(path):
            os.unlink(path)
            return True
        if stat.S_ISSOCK(st.st_mode):
            return False
        raise OSError(errno.EEXIST, f"{path} exists and is not a socket")

    def close(self) -> None:
        """Stop the thread and remove the socket file (idempotent; also run at exit)."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        self._stop.set()
        if self._thread is not None:
            try:
                os.write(self._wake_w, b"\0")
            except OSError:
                pass
            self._thread.join(5)
        if self._sock is not None:
            self._sock.close()
            try:
                if os.stat(self.path).st_ino == self._inode:  # still ours, not a successor's
                    os.unlink(self.path)
            except OSError:
                pass
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1

    # -- serving --------------------------------------------------------------
    def _serve(self) -> None:
        sock, wake = self._sock, self._wake_r
        poller = select.poll()  # poll(2), not select(2): no FD_SETSIZE limit in busy processes
        poller.register(sock.fileno(), select.POLLIN)
        poller.register(wake, select.POLLIN)
        while not self._stop.is_set():
            try:
                ready = [fd for fd, _ in poller.poll()]
            except OSError:
                return
            if self._stop.is_set():
                return
            if sock.fileno() not in ready:
                continue
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                return
            with conn:
                self._handle(conn)

    def _handle(self, conn: socket.socket) -> None:
        try:
            conn.setblocking(True)
            conn.settimeout(CLIENT_TIMEOUT)
            request = b""
            while b"\n" not in request and len(request) < REQUEST_MAX:
                chunk = conn.recv(REQUEST_MAX - len(request))
                if not chunk:
                    break
                request += chunk
            word = request.split(b"\n", 1)[0].strip()
            if word in (b"", b"snapshot"):
                try:
                    reply = self.snapshot()
                except Exception as e:  # noqa: BLE001 - the thread must outlive a bad snapshot
                    self.errors += 1
                    reply = {"error": f"snapshot failed: {type(e).__name__}: {e}"}
                else:
                    self.requests += 1
            else:
                self.errors += 1
                reply = {"error": f"unknown request {word[:40].decode('ascii', 'replace')!r}"}
            conn.sendall(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
        except OSError:
            self.errors += 1  # the client went away or stalled

    def _collect(self) -> tuple:
        """Copy the raw state under the driver's lock; nothing here formats or allocates much."""
        stack = self.stack
        tcp = stack.tcp
        udp = stack.udp
        with self.driver.lock:
            now = self.driver.clock()
            counters = stack.stats.snapshot()
            conns = [c.info() for c in tcp.connections.values()]
            listeners = [(lst.local, lst.backlog, lst.pending, lst.syn_backlog, lst.half_open, lst.overflows,
                          lst.cookies_sent, lst.cookies_accepted, lst.cookies_rejected)
                         for lst in tcp.listeners.values()]
            eps = {id(ep): ep for ep in list(udp.bound.values()) + list(udp.connected.values())}
            endpoints = [(ep.local_addr, ep.local_port, ep.remote, ep.queued_bytes, len(ep.queue), ep.rcvbuf,
                          ep.drops) for ep in eps.values()]
            arp = stack.arp.entries(now)
        return now, counters, conns, listeners, endpoints, arp

    def snapshot(self) -> dict:
        """The JSON-ready snapshot (what a client receives)."""
        now, counters, conns, listeners, endpoints, arp = self._collect()
        stack = self.stack
        iface = stack.iface
        return {
            "version": SNAPSHOT_VERSION,
            "stack": {
                "pid": self.pid,
                "addr": stack.addr,
                "prefixlen": iface.prefixlen,
                "gateway": ip_str(iface.gateway) if iface.gateway is not None else None,
                "mac": iface.mac.hex(":"),
                "mtu": iface.mtu,
                "mode": stack.device.capabilities.mode,
                "now": now,
                "uptime": now - self.started,
            },
            "counters": counters,
            "drops": {k[5:]: v for k, v in counters.items() if k.startswith("drop.") and v},
            "tcp": [_conn_json(info) for info in conns],
            "listeners": [_listener_json(*row) for row in listeners],
            "udp": [_udp_json(*row) for row in endpoints],
            "arp": [{"ip": ip, "mac": mac, "expires": round(left, 3)} for ip, mac, left in arp],
        }


def _endpoint(addr, port) -> str:
    a = ip_str(bytes(addr))
    return f"{a}:{port}"


def _conn_json(info) -> dict:
    d = {f.name: getattr(info, f.name) for f in fields(info)}
    d["local"] = _endpoint(*info.local)
    d["remote"] = _endpoint(*info.remote)
    opts = []
    if info.timestamps:
        opts.append("ts")
    if info.sack:
        opts.append("sack")
    if info.snd_wscale or info.rcv_wscale:
        opts.append("wscale")
    d["options"] = opts
    return d


def _listener_json(local, backlog, pending, syn_backlog, half_open, overflows, c_sent, c_acc, c_rej) -> dict:
    return {"local": _endpoint(*local), "state": "LISTEN", "accept_queue": pending, "backlog": backlog,
            "syn_queue": half_open, "syn_backlog": syn_backlog, "overflows": overflows,
            "cookies_sent": c_sent, "cookies_accepted": c_acc, "cookies_rejected": c_rej}


def _udp_json(laddr, lport, remote, queued_bytes, datagrams, rcvbuf, drops) -> dict:
    return {"local": _endpoint(laddr, lport), "remote": _endpoint(*remote) if remote else None,
            "state": "ESTAB" if remote else "UNCONN", "recv_q": queued_bytes, "datagrams": datagrams,
            "rcvbuf": rcvbuf, "drops": drops}


# -- the client ---------------------------------------------------------------

def fetch(path: str, timeout: float = 5.0) -> dict:
    """One snapshot from the publisher at ``path``; StatsError when there is none or it fails."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(path)
        except FileNotFoundError:
            raise StatsError(f"no ustack at {path} (no such socket)") from None
        except ConnectionRefusedError:
            raise StatsError(f"no ustack at {path} (stale socket: the stack is not running)") from None
        except OSError as e:
            raise StatsError(f"cannot connect to {path}: {e.strerror or e}") from None
        chunks = []
        try:
            s.sendall(b"snapshot\n")
            while True:
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        except OSError as e:
            raise StatsError(f"the ustack at {path} did not answer: {e.strerror or e}") from None
    finally:
        s.close()
    try:
        snap = json.loads(b"".join(chunks))
    except ValueError:
        raise StatsError(f"the ustack at {path} sent no valid snapshot") from None
    if not isinstance(snap, dict) or "error" in snap:
        raise StatsError(f"the ustack at {path} refused: {snap.get('error') if isinstance(snap, dict) else snap}")
    return snap


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}".rstrip("0").rstrip(".")


def _rate(bits_per_s: float) -> str:
    for unit, scale in (("Gbps", 1e9), ("Mbps", 1e6), ("Kbps", 1e3)):
        if bits_per_s >= scale:
            return f"{bits_per_s / scale:.1f}{unit}"
    return f"{bits_per_s:.0f}bps"


def tcp_detail(c: dict, everything: bool = False) -> str:
    """The indented ``ss -i`` line of one connection."""
    mss = c["snd_mss"] or 1
    parts = list(c.get("options", []))
    parts = [p for p in parts if p != "wscale"]
    parts.append(c["congestion"])
    parts.append(f"wscale:{c['snd_wscale']},{c['rcv_wscale']}")
    parts.append(f"rto:{_ms(c['rto'])}")
    if c["srtt"] is not None:
        parts.append(f"rtt:{_ms(c['srtt'])}/{_ms(c['rttvar'])}")
    parts += [f"mss:{c['snd_mss']}", f"rcvmss:{c['rcv_mss']}", f"cwnd:{c['cwnd'] // mss}"]
    if c["ssthresh"] < INFINITE_SSTHRESH:
        parts.append(f"ssthresh:{c['ssthresh'] // mss}")
    parts += [f"bytes_acked:{c['bytes_acked']}", f"bytes_received:{c['bytes_received']}",
              f"segs_out:{c['segs_out']}", f"segs_in:{c['segs_in']}"]
    if c["srtt"]:
        parts.append(f"send {_rate(c['cwnd'] * 8 / c['srtt'])}")
    parts += [f"inflight:{c['bytes_in_flight']}", f"peer_wnd:{c['snd_wnd']}", f"rcv_wnd:{c['rcv_wnd']}"]
    for key, label in (("unsent", "unsent"), ("ooo_bytes", "ooo"), ("timeouts", "timeouts"),
                       ("fast_retransmits", "fast_retrans"), ("dup_acks", "dupacks"),
                       ("challenge_acks", "challenge_acks")):
        if c[key] or everything:
            parts.append(f"{label}:{c[key]}")
    parts.append(f"retrans:{c['backoff']}/{c['retransmits']}")
    if c["in_recovery"]:
        parts.append("recovery")
    if everything:
        parts += [f"cwnd_bytes:{c['cwnd']}", f"snd_una:{c['snd_una']}", f"snd_nxt:{c['snd_nxt']}",
                  f"snd_max:{c['snd_max']}", f"rcv_nxt:{c['rcv_nxt']}"]
    return " ".join(parts)


def _table(rows: list[tuple], header: tuple) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header] + [r for r, _ in rows]) for i in range(len(header))]
    right = {1, 2}  # the queue columns, right-aligned like ss
    lines = []

    def fmt(cells):
        return " ".join(str(v).rjust(w) if i in right else str(v).ljust(w)
                        for i, (v, w) in enumerate(zip(cells, widths))).rstrip()

    lines.append(fmt(header))
    for cells, detail in rows:
        lines.append(fmt(cells))
        if detail:
            lines.append("\t " + detail)
    return lines


SS_HEADER = ("State", "Recv-Q", "Send-Q", "Local Address:Port", "Peer Address:Port")


def render_header(snap: dict) -> str:
    s = snap["stack"]
    gw = f" gateway {s['gateway']}" if s.get("gateway") else ""
    return (f"ustack pid {s['pid']}  {s['addr']}/{s['prefixlen']}{gw}  mac {s['mac']}  mtu {s['mtu']}  "
            f"backend {s['mode']}  uptime {_uptime(s['uptime'])}")


def _uptime(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def render_tcp(snap: dict, everything: bool = False) -> list[str]:
    rows = []
    for lst in snap["listeners"]:
        detail = (f"accept_q:{lst['accept_queue']}/{lst['backlog']} syn_q:{lst['syn_queue']}/{lst['syn_backlog']}"
                  f" overflows:{lst['overflows']}")
        if everything or lst["cookies_sent"]:
            detail += (f" cookies_sent:{lst['cookies_sent']} cookies_accepted:{lst['cookies_accepted']}"
                       f" cookies_rejected:{lst['cookies_rejected']}")
        rows.append((("LISTEN", lst["accept_queue"], lst["backlog"], lst["local"], "0.0.0.0:*"), detail))
    for c in sorted(snap["tcp"], key=lambda c: (c["local"], c["remote"])):
        rows.append(((SS_STATE.get(c["state"], c["state"]), c["recv_queue"], c["send_queue"], c["local"],
                      c["remote"]), tcp_detail(c, everything)))
    if not rows:
        return ["TCP: no connections, no listeners"]
    return ["TCP"] + _table(rows, SS_HEADER)


def render_udp(snap: dict) -> list[str]:
    rows = [((u["state"], u["recv_q"], 0, u["local"], u["remote"] or "0.0.0.0:*"),
             f"datagrams:{u['datagrams']} rcvbuf:{u['rcvbuf']} drops:{u['drops']}")
            for u in sorted(snap["udp"], key=lambda u: u["local"])]
    if not rows:
        return ["UDP: no sockets"]
    return ["UDP"] + _table(rows, SS_HEADER)


def render_arp(snap: dict) -> list[str]:
    if not snap["arp"]:
        return ["ARP: cache empty"]
    return ["ARP"] + [f"{e['ip']:<15} lladdr {e['mac']} expires {e['expires']:.1f}s" for e in snap["arp"]]


def render_counters(snap: dict, prev: dict | None = None, everything: bool = False, color: bool = False) -> list[str]:
    """nstat-like: totals on the first round, per-interval deltas and rates after (``prev``)."""
    cur = snap["counters"]
    names = [n for n in cur if not n.startswith("drop.")]
    width = max([40] + [len(n) for n in cur])
    lines = []
    if prev is None:
        lines.append(f"#counters since start ({_uptime(snap['stack']['uptime'])})")
        shown = [(n, cur[n]) for n in names if cur[n] or everything]
        lines += [f"{n:<{width}} {v:>14}" for n, v in shown]
    else:
        old = prev["counters"]
        interval = max(snap["stack"]["now"] - prev["stack"]["now"], 1e-9)
        lines.append(f"#counters: deltas over {interval:.2f}s" + ("   (delta, rate/s, total)" if everything
                                                                  else "   (delta, rate/s)"))
        for n in names:
            d = cur[n] - old.get(n, 0)
            if d or everything:
                tail = f" {cur[n]:>14}" if everything else ""
                lines.append(f"{n:<{width}} {d:>14} {d / interval:>12.1f}{tail}")
    drops = snap["drops"]
    total = sum(drops.values())
    head = f"drops by reason ({total} total)" if drops else "drops by reason: none"
    lines.append("")
    lines.append(f"{RED}{head}{RESET}" if color and drops else head)
    old_drops = prev["drops"] if prev is not None else {}
    for reason, count in drops.items():
        delta = count - old_drops.get(reason, 0)
        line = f"{reason:<{width}} {count:>14}" + (f" {'+' + str(delta):>12}" if prev is not None else "")
        lines.append(f"{BOLD}{line}{RESET}" if color and (prev is None or delta) else line)
    return lines


def render(snap: dict, prev: dict | None = None, *, tcp: bool = True, udp: bool = True, counters: bool = True,
           everything: bool = False, color: bool = False) -> str:
    out = [render_header(snap), ""]
    if tcp:
        out += render_tcp(snap, everything) + [""]
    if udp:
        out += render_udp(snap) + [""] + render_arp(snap) + [""]
    if counters:
        out += render_counters(snap, prev, everything, color)
    return "\n".join(out).rstrip("\n") + "\n"


# -- command line ------------------------------------------------------------

def _add_arguments(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--pid", type=int, help="the stack running in process PID")
    where.add_argument("--socket", metavar="PATH", help="the publisher's socket (default: the only one running)")
    p.add_argument("--watch", nargs="?", type=float, const=1.0, metavar="SECONDS",
                   help="refresh every SECONDS (default 1) until Ctrl-C; counters show per-interval deltas")
    p.add_argument("--count", type=int, metavar="N", help="with --watch: stop after N rounds")
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
    try:
        path = args.socket or find_socket(args.pid)
    except StatsError as e:
        print(f"ustack stats: {e}", file=sys.stderr)
        return 1
    interval = args.watch
    if interval is None and args.count:
        interval = 1.0
    if interval is not None and interval <= 0:
        print("ustack stats: --watch needs a positive interval", file=sys.stderr)
        return 2
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
                text = render(snap, prev, tcp=show_tcp, udp=not (args.tcp or args.counters),
                              counters=show_counters, everything=args.all, color=tty)
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
    parser = argparse.ArgumentParser(prog="ustack stats", description=DESCRIPTION)
    _add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
