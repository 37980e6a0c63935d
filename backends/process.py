"""Processes seen from outside: whether a pid still names a live process.

Used where a resource is named after the process that made it (an XDP
program's map, a stats socket ``<pid>.sock``) to tell a live owner from one
that died and left the resource behind.
"""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """A process with this pid exists (signal 0 reaches it, or it exists but belongs to someone else)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
