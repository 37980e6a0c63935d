"""Where the ``ustack stats`` sockets live: directories, names, and who is listening.

A publisher binds ``<dir>/<pid>.sock`` (``<pid>.<n>.sock`` for a second
stack in the same process) in the first usable directory of
``runtime_dirs()``: ``/run/ustack``, then ``$XDG_RUNTIME_DIR/ustack``, then
``/tmp/ustack-<uid>``; ``$USTACK_STATS_DIR`` replaces the list. The
directory is ours and 0700 (``private_dir``); the client searches them all,
but only those it can trust (``untrusted_dir``: a real directory, not a
symlink, owned by the user or root, writable by nobody else unless sticky) and only
sockets owned by the user or root (``untrusted_socket``).
"""

from __future__ import annotations

import os
import socket
import stat

ENV_DIR = "USTACK_STATS_DIR"


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


def private_dir(path: str) -> bool:
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


def untrusted_dir(path: str) -> str | None:
    """Why the client must not trust the directory ``path`` (None when it may)."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return e.strerror or str(e)
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid not in (os.getuid(), 0):
        return f"is owned by uid {st.st_uid}, not by you or root"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        # Sticky (/tmp): others may add entries but not replace ours; untrusted_socket checks the owner.
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def untrusted_socket(path: str) -> str | None:
    """Why the client must not talk to ``path`` (None when it may): a socket of the user or root, no symlink."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None  # fetch() says "no such socket" itself
    except OSError as e:
        return e.strerror or str(e)
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISSOCK(st.st_mode):
        return "is not a socket"
    if st.st_uid not in (os.getuid(), 0):
        return f"is owned by uid {st.st_uid}, not by you or root"
    return None


def socket_name(pid: int, n: int = 0) -> str:
    """The file name of a process's ``n``-th stats socket."""
    return f"{pid}.sock" if n == 0 else f"{pid}.{n}.sock"


def socket_pid(name: str) -> int | None:
    """The pid in a socket file name: ``<pid>.sock`` or ``<pid>.<n>.sock``."""
    if not name.endswith(".sock"):
        return None
    head = name[:-5].split(".", 1)[0]
    return int(head) if head.isdigit() else None


def answers(path: str) -> bool:
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
