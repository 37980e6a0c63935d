"""The client half of ``ustack stats``: find the running stack's socket and fetch one snapshot.

``find_socket(pid=None)`` looks for ``<pid>.sock`` files of live processes
in every directory of ``ustack.tools.stats_socket.runtime_dirs()``: the one
running stack, or the one of ``pid``. ``fetch(path)`` sends ``snapshot`` and
returns the decoded JSON document. Both raise ``StatsError`` with a message
in plain words when there is no stack, more than one, or no answer.
"""

from __future__ import annotations

import json
import os
import socket
import stat

from ustack.backends.process import pid_alive
from ustack.tools.stats_socket import runtime_dirs, socket_pid


class StatsError(Exception):
    """No running stack, or it did not answer: the message says which, in plain words."""


def find_socket(pid: int | None = None) -> str:
    """The socket of the one running stack (or of ``pid``); raises StatsError otherwise."""
    found = []
    for d in runtime_dirs():
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
            if pid_alive(p):
                found.append(path)
    where = ", ".join(runtime_dirs())
    if not found:
        who = f"ustack with pid {pid}" if pid is not None else "running ustack"
        raise StatsError(f"no {who} found (looked for <pid>.sock in {where}); "
                         f"start one with `ustack serve` or give --socket PATH")
    if len(found) > 1:
        raise StatsError("several ustacks are running; pick one with --pid or --socket:\n  " + "\n  ".join(found))
    return found[0]


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
