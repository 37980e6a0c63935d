"""Dropping root once the device is open: ``ustack run --user NAME`` and ``ustack serve --user NAME``.

Opening a device needs privilege (CAP_NET_RAW for AF_PACKET, CAP_BPF and
CAP_NET_ADMIN for the XDP program, CAP_IPC_LOCK or root for RLIMIT_MEMLOCK);
running the stack on it afterwards does not: the rings are mapped, the
socket is bound, and wake-ups (sendto/poll on the open fd) need nothing.
``drop_to(target)`` then, with the process still one thread (capabilities
are per thread in the kernel: a thread started before would keep them):

1. empties the capability bounding set (PR_CAPBSET_DROP, every capability
   up to /proc/sys/kernel/cap_last_cap) and the ambient set;
2. sets the supplementary groups, then the real/effective/saved gid and uid;
3. clears the effective, permitted and inheritable sets (capset), which the
   uid change already did unless the target is uid 0;
4. sets no_new_privs (no set-uid program or file capability can give any
   back), and checks /proc/self/status says so and that setuid(0) fails.

What needed privilege later is handled before the drop: RLIMIT_MEMLOCK is
raised when the UMEM is registered (the limit stays after setuid); the XDP
program's detach and the packet backend's nftables claim removal (netlink /
nft, CAP_NET_ADMIN) are handed to a ``TeardownKeeper``: a small process
started as root before the drop, holding a copy of the program's fd and
nothing else, that waits for this process to close its device (or to die,
SIGKILL included: its end of the pipe closes) and then does them.

``target_user(name, environ)``: ``--user NAME``; by default the invoking
user when started through sudo (SUDO_UID/SUDO_GID, SUDO_USER's groups);
otherwise None: the process keeps running as it is.
"""

from __future__ import annotations

import ctypes
import json
import os
import pwd
import subprocess
import sys
from typing import NamedTuple, Optional

PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
CAP_SETPCAP = 8


class PrivilegeError(OSError):
    """The privileges could not be dropped as asked (the message says what and why)."""


class Target(NamedTuple):
    """Who to become: uid, gid, supplementary groups, and a name for messages."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    name: str


def target_user(name: Optional[str], environ=os.environ) -> Optional[Target]:
    """``--user NAME`` (a name or a numeric uid), else sudo's invoking user when root, else None."""
    if name:
        try:
            entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
        except (KeyError, ValueError):
            raise PrivilegeError(0, f"--user: no user named {name!r}") from None
        return Target(entry.pw_uid, entry.pw_gid, tuple(os.getgrouplist(entry.pw_name, entry.pw_gid)),
                      entry.pw_name)
    uid, gid = environ.get("SUDO_UID", ""), environ.get("SUDO_GID", "")
    if os.geteuid() != 0 or not uid.isdigit() or not gid.isdigit():
        return None
    user = environ.get("SUDO_USER", "")
    try:
        groups = tuple(os.getgrouplist(user, int(gid))) if user else (int(gid),)
    except OSError:
        groups = (int(gid),)
    return Target(int(uid), int(gid), groups, user or uid)


def readable_by(path: str, target: Target) -> bool:
    """Whether ``target`` can reach ``path`` (search every folder on the way) and read it, by the mode bits."""
    path = os.path.realpath(path)
    parts = path.split(os.sep)
    for i in range(1, len(parts) + 1):
        here = os.sep.join(parts[:i]) or os.sep
        try:
            st = os.stat(here)
        except OSError:
            return False
        want = 0o5 if i == len(parts) and os.path.isdir(here) else (0o4 if i == len(parts) else 0o1)
        if target.uid == 0:
            continue
        if st.st_uid == target.uid:
            bits = (st.st_mode >> 6) & 0o7
        elif st.st_gid == target.gid or st.st_gid in target.groups:
            bits = (st.st_mode >> 3) & 0o7
        else:
            bits = st.st_mode & 0o7
        if bits & want != want:
            return False
    return True


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return libc


def _prctl(libc, what: str, option: int, arg2: int = 0) -> None:
    if libc.prctl(option, arg2, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise PrivilegeError(err, f"{what}: {os.strerror(err)}")


def _capset_empty(libc) -> None:
    """capset(2) with every set empty (version 3: two 32-bit words per set)."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    header = Header(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (Data * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        err = ctypes.get_errno()
        raise PrivilegeError(err, f"capset: {os.strerror(err)}")


def threads() -> int:
    """Kernel threads of this process (Python's count misses threads a C library started)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def status() -> dict[str, str]:
    """/proc/self/status as a dict (Uid, Gid, Groups, CapEff, CapBnd, NoNewPrivs ...)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def check_can_drop(target: Target) -> None:
    """Raise PrivilegeError when dropping to ``target`` now would fail or leave the program unable to run."""
    if threads() > 1:
        raise PrivilegeError(0, f"cannot drop privileges with {threads()} threads running (capabilities are "
                                "per thread): drop before starting any")
    stdlib = os.path.dirname(os.__file__)
    if not readable_by(stdlib, target):
        raise PrivilegeError(0, f"--user {target.name}: that user cannot read this Python's standard library "
                                f"({stdlib}): the program could not import it; run a Python installed where "
                                f"{target.name} can read it")


def drop_to(target: Target) -> None:
    """Become ``target`` with no capability left in any set and no_new_privs (see the module docstring)."""
    check_can_drop(target)
    libc = _libc()
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    try:
        _prctl(libc, "clearing the ambient capabilities", PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except PrivilegeError:
        pass  # a kernel before 4.3 has no ambient set
    for cap in range(last + 1):
        if cap != CAP_SETPCAP:  # needed for the drops themselves: it goes last
            _prctl(libc, f"dropping capability {cap} from the bounding set", PR_CAPBSET_DROP, cap)
    _prctl(libc, "dropping CAP_SETPCAP from the bounding set", PR_CAPBSET_DROP, CAP_SETPCAP)
    try:
        os.setgroups(list(target.groups))
        os.setresgid(target.gid, target.gid, target.gid)
        os.setresuid(target.uid, target.uid, target.uid)
    except OSError as e:
        raise PrivilegeError(e.errno, f"becoming {target.name} (uid {target.uid}): {e.strerror}") from None
    _capset_empty(libc)
    _prctl(libc, "setting no_new_privs", PR_SET_NO_NEW_PRIVS, 1)
    check_dropped(target)


def check_dropped(target: Target) -> None:
    """Raise PrivilegeError unless /proc says we are ``target`` with no capability and no_new_privs."""
    st = status()
    caps = {k: int(st.get(k, "0"), 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    left = {k: hex(v) for k, v in caps.items() if v}
    if left or st.get("NoNewPrivs") != "1":
        raise PrivilegeError(0, f"capabilities left after the drop: {left or 'none'}, "
                                f"NoNewPrivs {st.get('NoNewPrivs')}")
    if [int(x) for x in st["Uid"].split()] != [target.uid] * 4 or \
            [int(x) for x in st["Gid"].split()] != [target.gid] * 4:
        raise PrivilegeError(0, f"ids after the drop: Uid {st['Uid']}, Gid {st['Gid']}")
    if target.uid != 0:
        try:
            os.setuid(0)
        except PermissionError:
            return
        raise PrivilegeError(0, "setuid(0) still succeeds after the drop")


def teardown_of(device) -> tuple[list[dict], list[int]]:
    """The privileged teardown ``device`` (through its decorators) asks for, taken over from it."""
    actions, fds = [], []
    while device is not None:
        hand_over = getattr(device, "hand_over_teardown", None)
        if hand_over is not None:
            more, more_fds = hand_over()
            actions += more
            fds += more_fds
        device = getattr(device, "inner", None)
    return actions, fds


_KEEPER_BOOT = """import json, site, sys
for folder in json.loads(sys.argv[2]):
    site.addsitedir(folder)
from ustack.tools.teardown_keeper import main
sys.exit(main(sys.argv[1:2]))
"""


class TeardownKeeper:
    """A root process that runs ``actions`` once this process closes its end of a pipe (see the docstring)."""

    def __init__(self, actions: list[dict], fds: list[int]):
        self.actions = actions
        # The keeper imports from where this process did (its sys.path, .pth files included: an editable
        # install's finder), whatever the interpreter and the folder it was started from.
        self.proc = subprocess.Popen([sys.executable, "-c", _KEEPER_BOOT, json.dumps(actions),
                                      json.dumps([p for p in sys.path if p])],
                                     stdin=subprocess.PIPE, pass_fds=tuple(fds), close_fds=True,
                                     start_new_session=True)  # a Ctrl-C to the terminal is not for it

    def finish(self, timeout: float = 10.0) -> int:
        """Let the keeper run the teardown now (this process has closed its device); its exit status."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return -1


def add_arguments(p) -> None:
    """``--user`` and ``--keep-privileges`` for the commands that run a program or a service on a stack."""
    p.add_argument("--user", metavar="NAME",
                   help="once the device is open, run as this user (a name or uid) with no capabilities and "
                        "no_new_privs (default: the invoking user under sudo, else unchanged)")
    p.add_argument("--keep-privileges", action="store_true",
                   help="under sudo, keep running as root (the default drops to SUDO_UID)")


def drop_for_command(stack, args, name: str):
    """``drop_after_open`` for a command: (ok, keeper); a failure is reported in one line."""
    try:
        return True, drop_after_open(stack, getattr(args, "user", None), getattr(args, "keep_privileges", False))
    except PrivilegeError as e:
        print(f"ustack {name}: {e.strerror or e}", file=sys.stderr)
        return False, None


def drop_after_open(stack, user: Optional[str], keep: bool = False, environ=os.environ):
    """For the CLI: once the stack's device is open, become ``user`` (or sudo's user); the keeper or None.

    Prints one line saying who the process now runs as. Raises PrivilegeError.
    """
    target = None if keep else target_user(user, environ)
    if target is None:
        return None
    check_can_drop(target)
    actions, fds = teardown_of(stack.device)
    keeper = TeardownKeeper(actions, fds) if actions else None
    try:
        drop_to(target)
    except BaseException:
        if keeper is not None:
            keeper.finish()
        raise
    print(f"ustack: running as {target.name} (uid {target.uid}, gid {target.gid}), no capabilities, "
          f"no_new_privs", file=sys.stderr, flush=True)
    return keeper
