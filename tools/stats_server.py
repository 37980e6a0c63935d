"""The server half of ``ustack stats``: a running stack answers snapshot requests on a Unix socket.

``StatsPublisher(stack, driver).start()`` binds ``<pid>.sock`` in the first
usable directory (ustack.tools.stats_socket; ``path=`` chooses one) and
starts a small thread. For each request it takes ``driver.lock`` only long
enough for ``Stack.snapshot(now)`` (``ustack.snapshot``) to copy the stack's state
into plain data, then adds who is answering (pid, uptime, format version)
and sends it as JSON without the lock.

Protocol: the client connects, sends one line ``snapshot\\n`` and reads one
JSON document until EOF; any other request gets ``{"error": ...}``.
"""

from __future__ import annotations

import atexit
import errno
import json
import os
import select
import socket
import stat
import threading

from ustack.tools.stats_socket import answers, private_dir, runtime_dirs, socket_name

SNAPSHOT_VERSION = 1
REQUEST_MAX = 256
CLIENT_TIMEOUT = 2.0  # seconds a slow client may hold the server thread (send/receive)


CLONE_FS = 0x00000200  # unshare(2): this thread's own root, cwd and umask


def bind_private(sock: socket.socket, path: str) -> None:
    """Bind ``sock`` to ``path`` with the socket file created 0600 (umask 0177 at bind, never a chmod after).

    The umask belongs to the whole process, and other threads (the program's,
    the driver's) may be creating files at the same moment. So the bind runs
    on a short-lived thread that first leaves the process's filesystem
    context (``unshare(CLONE_FS)``, Linux: a thread may do it alone; the
    umask is part of that context), sets umask 0177 there and binds: the
    process's umask is never changed. Where unshare is refused (a seccomp
    filter, another system), the umask is set around the bind alone in the
    calling thread and restored at once; a file another thread creates in
    that window comes out more private, never less.
    """
    outcome: list = []

    def bind_in_own_fs() -> None:
        try:
            import ctypes

            if ctypes.CDLL(None, use_errno=True).unshare(CLONE_FS) != 0:
                outcome.append(None)  # not ours to change alone: the caller falls back
                return
        except (OSError, AttributeError):
            outcome.append(None)
            return
        try:
            os.umask(0o177)
            sock.bind(path)
            outcome.append(True)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            outcome.append(e)

    t = threading.Thread(target=bind_in_own_fs, name="ustack-bind", daemon=True)
    t.start()
    t.join()
    result = outcome[0] if outcome else None
    if isinstance(result, BaseException):
        raise result
    if result is None:
        old = os.umask(0o177)
        try:
            sock.bind(path)
        finally:
            os.umask(old)


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
            bind_private(sock, self.path)
            os.chmod(self.path, 0o600)  # already 0600 from bind; kept as a second lock on the door
            self._inode = os.stat(self.path).st_ino
            sock.listen(8)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return sock

    def _default_path(self) -> str:
        for d in runtime_dirs():
            if not private_dir(d):
                continue
            for n in range(64):
                path = os.path.join(d, socket_name(self.pid, n))
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
        if stat.S_ISSOCK(st.st_mode) and not answers(path):
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

    def snapshot(self) -> dict:
        """The JSON-ready snapshot (what a client receives): the stack's, read under the driver's lock."""
        with self.driver.lock:
            snap = self.stack.snapshot(self.driver.clock())
        ident = snap.pop("stack")
        return {"version": SNAPSHOT_VERSION,
                "stack": {"pid": self.pid, **ident, "uptime": ident["now"] - self.started}, **snap}
