"""Shared by the kernel interop tests: the backends to run on and a running ``ustack serve``."""

from __future__ import annotations

import hashlib
import re
import signal
import socket
import subprocess
import sys
import threading
import time

BACKENDS = ["tap", "packet", "packet-v3"]
# The same backends with the kernel's end of the link left as the kernel sets a new device up (a veth
# with tx checksumming and TSO on): partial checksums and TSO super-frames reach ustack.
OFFLOADED = ["packet-offloads", "afxdp-offloads", "tap-offloads"]
OFFLOADS_SUFFIX = "-offloads"


def backend_params():
    params = list(BACKENDS)
    try:
        from ustack.backends.registry import available_backends

        if "afxdp" in available_backends():
            params += ["afxdp-native", "afxdp-generic"]
    except Exception:  # registry import problems surface in the backend tests
        pass
    return params


def offloaded_params():
    """The backends to run against a kernel peer at its default offloads ("afxdp-offloads" is native mode)."""
    have = backend_params()
    return [b for b in OFFLOADED if b.replace(OFFLOADS_SUFFIX, "") in have or b == "afxdp-offloads" and "afxdp-native" in have]


def ustack_cli(topo, backend_args, *args, timeout=120):
    """Run a ``python -m ustack`` command in the stack namespace; returns (rc, output)."""
    argv = [sys.executable, "-m", "ustack", *args[:1], *backend_args, "--ifname", topo.stack_ifname, *args[1:]]
    p = topo.stack_popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        raise AssertionError(f"{args[0]} timed out:\n{out}")
    return p.returncode, out


def serving(backend: str, tmp_path_factory, name: str, serve_args, **kw):
    """A module fixture's body (``yield from serving(...)``): skip without privileges (fail under
    USTACK_REQUIRE_PRIVILEGED=1), else a running ``Served``, closed at teardown even after a failure."""
    from tests.conftest import privilege_problem, require_privileged

    if privilege_problem() is not None:
        require_privileged()
    s = Served(backend, tmp_path_factory.mktemp(name), serve_args, **kw)
    try:
        yield s
    finally:
        s.close()


def peer_tcp6(topo, port: int, timeout: float = 30.0) -> socket.socket:
    """A kernel TCP socket in the peer namespace, connected to the stack's IPv6 address and ``port``."""
    from ustack.tools.netns import peer_socket

    s = peer_socket(topo, socket.AF_INET6, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect((topo.stack_addr6, port))
    except BaseException:
        s.close()
        raise
    return s


class Served:
    """A running ``ustack serve`` and the topology around it."""

    def __init__(self, backend: str, tmp_path, serve_args, ipv6: bool = False, ipv4: bool = True):
        from ustack.tools.netns import Topology

        self.backend = backend
        # "<backend>-offloads": the kernel's end keeps the offloads a new device has (Topology offloads="default")
        self.offloads = "default" if backend.endswith(OFFLOADS_SUFFIX) else "off"
        if self.offloads == "default":
            backend = backend[:-len(OFFLOADS_SUFFIX)]
            backend = "afxdp-native" if backend == "afxdp" else backend
        self.base = backend
        self.ipv6 = ipv6 = ipv6 or not ipv4
        self.ipv4 = ipv4
        kind = "tap" if backend in ("tap", "tap-gso") else "veth"
        topology = Topology.tap if kind == "tap" else Topology.veth
        self.topo = topology(tag="i", ipv6=ipv6, offloads=self.offloads)
        self.pcap = str(tmp_path / f"serve-{backend}.pcap")
        self.lines: list[str] = []
        self.expected_drops: dict[str, int] = {}
        self.proc = None
        self.serve_args = list(serve_args)
        self.start()

    def cli_backend(self):
        b = self.base
        if b in ("afxdp-gso", "afxdp-nogso"):
            return ["--backend", "afxdp", "--" + b.split("-", 1)[1]]
        if b.startswith("afxdp"):
            return ["--backend", "afxdp", "--xdp-mode", b.split("-", 1)[1]]
        if b == "packet-v3":
            return ["--backend", "packet", "--rx-version", "3"]
        if b == "packet-gso":
            return ["--backend", "packet", "--gso"]
        if b == "tap-gso":
            return ["--backend", "tap", "--gso"]
        return ["--backend", b]

    def start(self):
        t = self.topo
        argv = [sys.executable, "-m", "ustack", "serve", *self.cli_backend(), "--ifname", t.stack_ifname,
                "--addr", f"{t.stack_addr}/{t.prefixlen}", *self.serve_args, "--pcap", self.pcap]
        if self.ipv6:
            argv[argv.index("--addr") + 2:argv.index("--addr") + 2] = ["--addr", f"{t.stack_addr6}/{t.prefixlen6}"]
        if not self.ipv4:  # an IPv6-only ustack
            del argv[argv.index("--addr"):argv.index("--addr") + 2]
        self.proc = t.stack_popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, bufsize=1)
        self.ready = threading.Event()
        threading.Thread(target=self._reader, daemon=True).start()
        if not self.ready.wait(30):
            self.stop()
            raise AssertionError("ustack serve did not print 'ready':\n" + "".join(self.lines))
        head = "".join(self.lines)
        m = re.search(r"mac ([0-9a-f:]{17})", head)
        assert m, head
        expected_mode = {"packet": "tpacket_v2 rx", "packet-v3": "tpacket_v3 rx", "packet-gso": "tpacket_v3 tx gso", "tap-gso": "tap (/dev/net/tun, one read/write per frame) vnet_hdr gso", "afxdp-native": "afxdp native", "afxdp-gso": "copy need_wakeup sg gso", "afxdp-nogso": "copy need_wakeup sg",
                         "afxdp-generic": "afxdp generic", "tap": "tap"}[self.base]
        assert expected_mode in head, head
        self.mac = m.group(1)

    def _reader(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.strip() == "ready":
                self.ready.set()

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(20)
        except Exception:
            self.proc.kill()
            rc = self.proc.wait(5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any("drops by reason" in l for l in self.lines):
            time.sleep(0.01)
        return rc

    def counters(self) -> dict[str, int]:
        out = {}
        for line in self.lines:
            m = re.match(r"^(\S+)\s+(\d+)$", line.strip())
            if m:
                out[m.group(1)] = int(m.group(2))
        return out

    def close(self):
        try:
            self.stop()
        finally:
            self.topo.close()




class KernelSink:
    """A kernel TCP listener in the peer namespace: takes one connection, hashes all it receives."""

    def __init__(self, topo, host: str, port: int, family: int = socket.AF_INET6):
        from ustack.tools.netns import peer_socket

        self.sock = peer_socket(topo, family, socket.SOCK_STREAM)
        self.sock.bind((host, port))
        self.sock.listen(1)
        self.sock.settimeout(30)
        self.result: dict = {}
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        conn, addr = self.sock.accept()
        h, n = hashlib.sha256(), 0
        with conn:
            while chunk := conn.recv(1 << 20):
                h.update(chunk)
                n += len(chunk)
        self.result.update(n=n, sha=h.hexdigest(), peer=addr[0])

    def close(self, timeout: float = 30) -> dict:
        """Wait for the connection to end; returns {n, sha, peer} (empty when none came)."""
        self.thread.join(timeout)
        self.sock.close()
        return self.result


def echoed_exactly(sock, data: bytes, timeout: float = 30) -> bool:
    """Send ``data`` on a connected socket from a thread while reading the echo; True when the same bytes
    came back (compared by sha256, so a large transfer needs no second copy)."""
    sender = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
    sender.start()
    h = hashlib.sha256()
    got = 0
    while got < len(data):
        chunk = sock.recv(1 << 20)
        assert chunk, f"EOF after {got} bytes"
        h.update(chunk)
        got += len(chunk)
    sender.join(timeout)
    return got == len(data) and h.hexdigest() == hashlib.sha256(data).hexdigest()
