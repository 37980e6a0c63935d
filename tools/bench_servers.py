"""The servers ``ustack bench`` measures, one process each in the stack-side namespace.

What runs in the server process:

- ``kernel_serve``: the kernel row: UDP echo and TCP echo/discard/source on
  the kernel's own sockets, one selector loop;
- ``pytcp_serve``: the PyTCP row (pmd-pytcp, an optional extra): its stack on
  a TAP with the same four services on its asyncio API;
- the ustack rows run ``python -m ustack serve`` with the same services.

They print ``ready`` once listening and run until SIGTERM. How the bench
process starts them: ``ustack_server``, ``kernel_server`` and
``pytcp_server`` return a ``Server`` (the process, its output, ready/stop);
``pytcp_problem`` says why the PyTCP row cannot run; ``ustack_drops`` reads
the drops by reason that ``ustack serve`` prints when it stops. Ports and
sizes come from ustack.tools.bench_config.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import threading
from typing import Optional, Sequence

from ustack.tools.bench_config import TCP_DISCARD, TCP_ECHO, TCP_SOURCE, UDP_ECHO

PYTCP_MIN_VERSION = "0.3"


def kernel_serve(addr: str, source_bytes: int) -> None:
    """The kernel row's server: UDP echo, TCP echo/discard/source on kernel sockets, one selector loop.

    Same services and same single-threaded event-driven shape as ustack.tools.services
    in ``ustack serve``; runs until SIGTERM/SIGINT.
    """
    from ustack.tools.services import PATTERN_BLOCK

    sel = selectors.DefaultSelector()
    stop = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.append(1))
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    udp = socket.socket(family, socket.SOCK_DGRAM)
    udp.bind((addr, UDP_ECHO))
    udp.setblocking(False)
    sel.register(udp, selectors.EVENT_READ, ("udp", None))
    for port, kind in ((TCP_ECHO, "echo"), (TCP_DISCARD, "discard"), (TCP_SOURCE, "source")):
        lst = socket.socket(family, socket.SOCK_STREAM)
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind((addr, port))
        lst.listen(256)
        lst.setblocking(False)
        sel.register(lst, selectors.EVENT_READ, ("listen", kind))
    state: dict = {}  # conn -> [kind, pending bytes (echo) or bytes sent (source)]
    buf = bytearray(1 << 18)
    block = memoryview(PATTERN_BLOCK)

    def close(conn) -> None:
        sel.unregister(conn)
        state.pop(conn, None)
        conn.close()

    print("ready", flush=True)
    while not stop:
        for key, events in sel.select(0.5):
            sock, (what, kind) = key.fileobj, key.data
            try:
                if what == "udp":
                    while True:
                        try:
                            n, peer = sock.recvfrom_into(buf)
                        except BlockingIOError:
                            break
                        sock.sendto(memoryview(buf)[:n], peer)
                elif what == "listen":
                    while True:
                        try:
                            conn, _ = sock.accept()
                        except BlockingIOError:
                            break
                        conn.setblocking(False)
                        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        state[conn] = [kind, bytearray() if kind == "echo" else 0]
                        mask = selectors.EVENT_READ | (selectors.EVENT_WRITE if kind == "source" else 0)
                        sel.register(conn, mask, ("conn", kind))
                elif kind == "source":
                    _source_step(sock, events, state, block, source_bytes, close)
                else:
                    _stream_step(sock, kind, state, buf, sel, close)
            except (ConnectionError, OSError):
                if what == "conn" and sock in state:
                    close(sock)


def _stream_step(conn, kind, state, buf, sel, close) -> None:
    pending = state[conn][1]
    if pending:
        try:
            del pending[:conn.send(pending)]
        except BlockingIOError:
            pass
    while not pending:
        try:
            n = conn.recv_into(buf)
        except BlockingIOError:
            break
        if not n:
            close(conn)
            return
        if kind == "echo":
            try:
                k = conn.send(memoryview(buf)[:n])
            except BlockingIOError:
                k = 0
            pending += buf[k:n]
    want = selectors.EVENT_WRITE if pending else selectors.EVENT_READ
    if sel.get_key(conn).events != want:
        sel.modify(conn, want, ("conn", kind))


def _source_step(conn, events, state, block, nbytes, close) -> None:
    if events & selectors.EVENT_READ:
        try:
            if not conn.recv(65536):
                pass  # the client's FIN; keep sending
        except BlockingIOError:
            pass
    sent = state[conn][1]
    while sent < nbytes:
        start = sent % 256
        try:
            n = conn.send(block[start:start + min(nbytes - sent, len(block) - start)])
        except BlockingIOError:
            break
        sent += n
    state[conn][1] = sent
    if sent >= nbytes:
        close(conn)


def pytcp_serve(ifname: str, addr: str, mac: str, source_bytes: int) -> None:
    """The PyTCP row's server: PyTCP's stack on a TAP with the same four services, on its asyncio API."""
    import asyncio

    from pmd_net_addr import Ip4IfAddr, MacAddress
    from pmd_pytcp import stack
    from pmd_pytcp.socket import AddressFamily, SocketType
    from pmd_pytcp.socket import socket as pytcp_socket

    from ustack.tools.services import PATTERN_BLOCK

    stack.LOG__CHANNEL = set()  # no per-packet logging

    async def serve_udp(sock) -> None:
        while True:
            data, peer = await sock.recvfrom()
            await sock.sendto(data, peer)

    async def serve_tcp(port: int, handler) -> None:
        lst = pytcp_socket(AddressFamily.INET4, SocketType.STREAM)
        lst.bind(("0.0.0.0", port))
        lst.listen()
        while True:
            conn, _ = await lst.accept()
            asyncio.get_running_loop().create_task(handler(conn))

    async def echo(conn) -> None:
        with contextlib.suppress(OSError):
            while data := await conn.recv():
                await conn.send(data)
        conn.close()

    async def discard(conn) -> None:
        with contextlib.suppress(OSError):
            while await conn.recv():
                pass
        conn.close()

    async def source(conn) -> None:
        sent = 0
        with contextlib.suppress(OSError):
            while sent < source_bytes:
                start = sent % 256
                sent += await conn.send(PATTERN_BLOCK[start:start + min(source_bytes - sent, len(PATTERN_BLOCK) - start)])
        conn.close()

    async def main() -> None:
        stack.init()
        ifindex = stack.add_interface(**stack.initialize_interface__tap(ifname, mac_address=MacAddress(mac)),
                                      ip4_dhcp=False, ip6_support=False, ip6_gua_autoconfig=False,
                                      ip6_lla_autoconfig=False)
        # Installed through the address API: a static ip4_host would first go
        # through ~10 s of RFC 5227 probing.
        stack.address.interface(ifindex).add(ifaddr=Ip4IfAddr(addr))
        await stack.start()
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, done.set)
        udp = pytcp_socket(AddressFamily.INET4, SocketType.DGRAM)
        udp.bind(("0.0.0.0", UDP_ECHO))
        tasks = [loop.create_task(serve_udp(udp)), loop.create_task(serve_tcp(TCP_ECHO, echo)),
                 loop.create_task(serve_tcp(TCP_DISCARD, discard)), loop.create_task(serve_tcp(TCP_SOURCE, source))]
        print(f"pytcp: {addr} on {ifname}", flush=True)
        print("ready", flush=True)
        await done.wait()
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(stack.stop(), 5)

    asyncio.run(main())


# -- rows --------------------------------------------------------------------------------------


# -- starting them (from the bench process) ---------------------------------------------------


class Server:
    """A server process: collects its output, knows when it is ready, stops it with SIGTERM."""

    ready_line = "ready"

    def __init__(self, topo, argv: list, env: Optional[dict] = None):
        self.topo = topo
        self.lines: list[str] = []
        self._ready = threading.Event()
        self.proc = topo.stack_popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     bufsize=1, env={**os.environ, **(env or {})})
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.strip() == self.ready_line:
                self._ready.set()
        self._ready.set()  # EOF: the process is gone

    def wait_ready(self, timeout: float = 30.0) -> None:
        if not self._ready.wait(timeout) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError(f"server did not become ready: {' | '.join(self.lines[-8:]) or '(no output)'}")

    @property
    def cpus(self) -> list:
        try:
            return sorted(os.sched_getaffinity(self.proc.pid))
        except OSError:
            return []

    def stop(self) -> int:
        return stop_process(self.proc)


def stop_process(proc: subprocess.Popen, timeout: float = 15) -> int:
    """SIGTERM a server we started (unless it has exited), wait up to ``timeout``, then SIGKILL; its status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(5)


def ustack_server(topo, backend: str, source_bytes: int, xdp_mode: Optional[str],
                  extra: Sequence[str] = ()) -> tuple[Server, str]:
    """``python -m ustack serve`` on the topology's stack end; returns (server, mode it reported).

    On an IPv6 topology (``topo.ipv6``) the stack gets ``stack_addr6`` too and serves both families.
    ``extra``: more ``ustack serve`` options (a tool's variant, e.g. ``--no-claim``).
    """
    addrs = ["--addr", f"{topo.stack_addr}/{topo.prefixlen}"]
    if getattr(topo, "ipv6", False):
        addrs += ["--addr", f"{topo.stack_addr6}/{topo.prefixlen6}"]
    argv = [sys.executable, "-m", "ustack", "serve", "--backend", backend, "--ifname", topo.stack_ifname,
            *addrs, "--udp-echo", str(UDP_ECHO),
            "--tcp-echo", str(TCP_ECHO), "--tcp-discard", str(TCP_DISCARD), "--tcp-source", str(TCP_SOURCE),
            "--source-bytes", str(source_bytes)]
    if backend == "afxdp" and xdp_mode:
        argv += ["--xdp-mode", xdp_mode]
    argv += list(extra)
    server = Server(topo, argv)
    server.wait_ready()
    mode = backend
    for line in server.lines:
        m = re.match(r"ustack: .* on \S+ \((.*)\)$", line)
        if m:
            mode = m.group(1)
    return server, mode


def ustack_drops(lines: list[str]) -> dict:
    """The ``drops by reason`` block that ``ustack serve`` prints when it stops."""
    drops, inside = {}, False
    for line in lines:
        if line.startswith("drops by reason"):
            inside = True
            continue
        m = re.match(r"^\s+(\S+)\s+(\d+)$", line) if inside else None
        if m:
            drops[m.group(1)] = int(m.group(2))
    return drops


def kernel_server(topo, source_bytes: int) -> Server:
    """The kernel's own sockets in the stack namespace; on an IPv6 topology they serve both families."""
    from pyroute2 import IPRoute

    from ustack.tools.netns import IFA_F_NODAD, _sysctl_ipv6_on

    ipv6 = getattr(topo, "ipv6", False)
    with topo.in_stack_ns(), IPRoute() as ipr:
        index = ipr.link_lookup(ifname=topo.stack_ifname)[0]
        ipr.addr("add", index=index, address=topo.stack_addr, prefixlen=topo.prefixlen)
        if ipv6:
            _sysctl_ipv6_on(topo.stack_ifname)
            ipr.addr("add", index=index, address=topo.stack_addr6, prefixlen=topo.prefixlen6, flags=IFA_F_NODAD)
    code = "import sys; from ustack.tools.bench_servers import kernel_serve; kernel_serve(sys.argv[1], int(sys.argv[2]))"
    # On an IPv6 topology one dual-stack socket per service (``::``, IPV6_V6ONLY off as Linux's
    # default) serves both families, as ustack's server does: the IPv6 row measures both, interleaved.
    server = Server(topo, [sys.executable, "-c", code, "::" if ipv6 else topo.stack_addr,
                           str(source_bytes)])
    server.wait_ready()
    return server


def _version_tuple(text: str) -> tuple:
    return tuple(int(m) for m in re.findall(r"\d+", text)[:2])


def pytcp_problem() -> Optional[str]:
    """Why the PyTCP row cannot run, or None."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("pmd-pytcp")
        except PackageNotFoundError:
            return "pmd-pytcp is not installed (pip install 'ustack[bench]')"
        import pmd_pytcp.stack  # noqa: F401
        import pmd_pytcp.socket  # noqa: F401
    except Exception as exc:  # an import failing for any reason makes the row unavailable
        return f"pmd-pytcp cannot be imported: {exc!r}"
    if _version_tuple(found) < _version_tuple(PYTCP_MIN_VERSION):
        return f"pmd-pytcp {found} is older than {PYTCP_MIN_VERSION} (different API)"
    return None


def pytcp_server(topo, source_bytes: int) -> tuple[Server, str]:
    from importlib.metadata import version

    from ustack.tools.netns import TAP_STACK_MAC

    code = ("import sys; from ustack.tools.bench_servers import pytcp_serve; "
            "pytcp_serve(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))")
    server = Server(topo, [sys.executable, "-c", code, topo.stack_ifname, f"{topo.stack_addr}/{topo.prefixlen}",
                           TAP_STACK_MAC.hex(":"), str(source_bytes)])
    server.wait_ready(60)
    topo.wait_running()
    return server, f"pmd-pytcp {version('pmd-pytcp')} on TAP, asyncio"
