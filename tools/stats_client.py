"""The client half of ``ustack stats``: find the running stack's socket and fetch one snapshot.

``find_socket(pid=None)`` looks for ``<pid>.sock`` files of live processes
in every directory of ``ustack.tools.stats_socket.runtime_dirs()``: the one
running stack, or the one of ``pid``. ``fetch(path)`` sends ``snapshot`` and
returns the decoded JSON document. Both raise ``StatsError`` with a message
in plain words when there is no stack, more than one, or no answer.

The publisher is another process, so nothing it sends is trusted: the
directories searched and the socket must belong to the user or root and be
writable by nobody else (no symlinks: ``stats_socket.untrusted_dir`` /
``untrusted_socket``); an answer longer than ``MAX_RESPONSE`` is cut off
with an error; one that is not JSON or not shaped like a snapshot
(``check_snapshot``) is a plain-words error, never a traceback. Strings are
escaped before they reach a terminal by the renderer (``stats_render``).
"""

from __future__ import annotations

import json
import os
import socket
import stat

from ustack.backends.process import pid_alive
from ustack.tools.stats_render import printable
from ustack.tools.stats_socket import runtime_dirs, socket_pid, untrusted_dir, untrusted_socket

MAX_RESPONSE = 64 << 20  # bytes: a snapshot of 65,536 connections fits; a publisher that sends more is refused


class StatsError(Exception):
    """No running stack, or it did not answer: the message says which, in plain words."""


def find_socket(pid: int | None = None) -> str:
    """The socket of the one running stack (or of ``pid``); raises StatsError otherwise."""
    found = []
    refused = []
    for d in runtime_dirs():
        if not os.path.lexists(d):
            continue
        why = untrusted_dir(d)
        if why is not None:
            refused.append(f"{d} {why}")
            continue
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            p = socket_pid(name)
            if p is None or (pid is not None and p != pid):
                continue
            path = os.path.join(d, name)
            try:
                if not stat.S_ISSOCK(os.lstat(path).st_mode):
                    continue
            except OSError:
                continue
            why = untrusted_socket(path)
            if why is not None:
                refused.append(f"{path} {why}")
                continue
            if pid_alive(p):
                found.append(path)
    where = ", ".join(runtime_dirs())
    if not found:
        who = f"ustack with pid {pid}" if pid is not None else "running ustack"
        ignored = "".join(f"; ignored {r}" for r in refused)
        raise StatsError(f"no {who} found (looked for <pid>.sock in {where}{ignored}); "
                         f"start one with `ustack serve` or give --socket PATH")
    if len(found) > 1:
        raise StatsError("several ustacks are running; pick one with --pid or --socket:\n  " + "\n  ".join(found))
    return found[0]


def fetch(path: str, timeout: float = 5.0, max_bytes: int = MAX_RESPONSE) -> dict:
    """One snapshot from the publisher at ``path``; StatsError when there is none or it fails."""
    why = untrusted_socket(path)
    if why is not None:
        raise StatsError(f"refusing {path}: it {why}")
    if os.path.lexists(path):
        folder = os.path.dirname(os.path.abspath(path))
        why = untrusted_dir(folder)
        if why is not None:
            raise StatsError(f"refusing {path}: its directory {folder} {why}")
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
        size = 0
        try:
            s.sendall(b"snapshot\n")
            while True:
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                size += len(chunk)
                if size > max_bytes:
                    raise StatsError(f"the ustack at {path} sent more than {max_bytes} bytes: not a snapshot")
                chunks.append(chunk)
        except OSError as e:
            raise StatsError(f"the ustack at {path} did not answer: {e.strerror or e}") from None
    finally:
        s.close()
    try:
        snap = json.loads(b"".join(chunks))
    except (ValueError, RecursionError) as e:
        what = "is not JSON" if isinstance(e, ValueError) else "is nested too deeply"
        raise StatsError(f"the ustack at {path} sent no valid snapshot (its answer {what})") from None
    if isinstance(snap, dict) and "error" in snap and len(snap) == 1:
        raise StatsError(f"the ustack at {path} refused: {printable(str(snap['error']))}")
    problem = check_snapshot(snap)
    if problem is not None:
        raise StatsError(f"the ustack at {path} sent a malformed snapshot: {problem}")
    return snap


# The shape render() relies on: top-level sections and the header's fields with their JSON types.
_SECTIONS = {"stack": dict, "counters": dict, "drops": dict, "tcp": list, "listeners": list, "udp": list, "arp": list}
_HEADER = {"addr": str, "prefixlen": int, "mac": str, "mtu": int, "mode": str, "now": (int, float),
           "pid": int, "uptime": (int, float)}


def check_snapshot(snap) -> str | None:
    """What is wrong with the shape of a decoded snapshot (None when render() can print it)."""
    if not isinstance(snap, dict):
        return f"a JSON {type(snap).__name__}, not an object"
    for key, kind in _SECTIONS.items():
        if not isinstance(snap.get(key), kind):
            return f"{key!r} missing or not a JSON {'object' if kind is dict else 'array'}"
    for key, kind in _HEADER.items():
        value = snap["stack"].get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"stack.{key} missing or of the wrong type"
    for section in ("counters", "drops"):
        for name, value in snap[section].items():
            if not isinstance(value, int) or isinstance(value, bool):
                return f"{section}[{printable(name)!r}] is not an integer"
    for section in ("tcp", "listeners", "udp", "arp"):
        if not all(isinstance(item, dict) for item in snap[section]):
            return f"an entry of {section!r} is not an object"
    return None

