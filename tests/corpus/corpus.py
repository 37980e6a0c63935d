"""The corpus of unmodified programs (tests/corpus/programs) and how a server/client pair of them is run.

Each program takes ``server HOST PORT`` or ``client HOST PORT`` (TLS adds
certificate files). A server prints ``listening HOST PORT`` once it accepts
traffic and ``stopped`` when SIGINT ends it (exit status 0); a client checks
every byte it got against the deterministic payload (payload.py) and exits 0
only if all matched, printing the SHA-256 of what it received. No program
names ustack: under ``ustack run`` the patched socket module carries them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs")
LISTEN_TIMEOUT = 30.0
CLIENT_TIMEOUT = 60.0


@dataclass(frozen=True)
class Pair:
    """A server program and the client program that talks to it."""

    name: str
    server: str
    client: str
    tls: bool = False
    echo: bool = False  # the client speaks plain echo (RFC 862): it also runs against the pipe peer's echo
    needs: str = ""  # a library from the test extra the programs import

    def server_argv(self, host, port, certs):
        extra = [certs.cert, certs.key] if self.tls else []
        return [os.path.join(PROGRAMS, self.server + ".py"), "server", host, str(port), *extra]

    def client_argv(self, host, port, certs):
        extra = [certs.cert] if self.tls else []
        return [os.path.join(PROGRAMS, self.client + ".py"), "client", host, str(port), *extra]


PAIRS = [
    Pair("http_server+urllib", "http_server", "http_server"),
    Pair("http_keepalive+http.client", "http_keepalive", "http_keepalive"),
    Pair("http_server+requests", "http_server", "requests_client", needs="requests"),
    Pair("socketserver_tcp", "socketserver_tcp", "socketserver_tcp", echo=True),
    Pair("socketserver_udp", "socketserver_udp", "socketserver_udp", echo=True),
    Pair("xmlrpc", "xmlrpc_app", "xmlrpc_app"),
    Pair("selectors_echo", "selectors_echo", "selectors_echo", echo=True),
    Pair("asyncio_streams", "asyncio_streams", "asyncio_streams", echo=True),
    Pair("asyncio_datagram", "asyncio_datagram", "asyncio_datagram", echo=True),
    Pair("asyncio_sock", "asyncio_sock", "asyncio_sock"),
    Pair("tls", "tls_echo", "tls_echo", tls=True),
    Pair("aiohttp", "aiohttp_app", "aiohttp_app", needs="aiohttp"),
    Pair("threaded_chat", "threaded_chat", "threaded_chat"),
    Pair("wsgiref", "wsgiref_app", "wsgiref_app"),
    Pair("sendfile", "sendfile_app", "sendfile_app"),
    Pair("ftplib", "ftp_app", "ftp_app"),
    Pair("smtplib", "smtp_app", "smtp_app"),
]


@dataclass
class Outcome:
    """What one run of a pair produced."""

    pair: str
    where: str  # "ustack-server", "ustack-client" or "kernel" (both on the kernel)
    client_rc: int | None = None
    client_out: str = ""
    client_err: str = ""
    server_rc: int | None = None
    server_out: str = ""
    seconds: float = 0.0
    problem: str = ""

    def describe(self) -> str:
        return (f"{self.pair} [{self.where}] {self.problem}\nclient rc={self.client_rc}\n{self.client_out}"
                f"{self.client_err[-3000:]}\nserver rc={self.server_rc}\n{self.server_out[-3000:]}")


class Lines:
    """A process's merged stdout/stderr read by a thread; wait_for(text) waits for a line starting with it."""

    def __init__(self, proc):
        self.proc, self.lines, self.cond = proc, [], threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()
        with self.cond:
            self.lines.append(None)
            self.cond.notify_all()

    def wait_for(self, prefix: str, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: any(l is None or l.startswith(prefix) for l in self.lines), timeout) \
                and any(l is not None and l.startswith(prefix) for l in self.lines)

    def text(self) -> str:
        self.thread.join(10)
        return "".join(l for l in self.lines if l is not None)


def run_pair(pair: Pair, where: str, server_popen, client_popen, server_cmd, client_cmd) -> Outcome:
    """Start the server, wait for it to listen, run the client to completion, stop the server with SIGINT."""
    out = Outcome(pair.name, where)
    start = time.monotonic()
    server = server_popen(server_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = Lines(server)
    try:
        if not lines.wait_for("listening", LISTEN_TIMEOUT):
            out.problem = "the server did not print 'listening'"
            return out
        client = client_popen(client_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out.client_out, out.client_err = client.communicate(timeout=CLIENT_TIMEOUT)
        except subprocess.TimeoutExpired:
            client.kill()
            out.client_out, out.client_err = client.communicate()
            out.problem = "the client timed out"
        out.client_rc = client.returncode
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGINT)
        try:
            out.server_rc = server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            out.server_rc = server.wait(5)
            out.problem = out.problem or "the server did not stop on SIGINT"
        out.server_out = lines.text()
        out.seconds = time.monotonic() - start
    return out


def python(*argv) -> list[str]:
    return [sys.executable, *argv]


@dataclass
class Certs:
    """A self-signed certificate (key and cert in PEM) valid for the addresses the corpus uses."""

    cert: str
    key: str
    addresses: tuple = field(default=())


def make_certs(folder, addresses) -> Certs:
    """Generate the certificate with the openssl command line (an EC P-256 key, 1 day, IP SANs)."""
    cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    san = ",".join(f"IP:{a}" for a in addresses)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=ustack-corpus", "-addext", f"subjectAltName={san}",
                    "-keyout", key, "-out", cert], check=True, capture_output=True, timeout=30)
    return Certs(cert, key, tuple(addresses))
