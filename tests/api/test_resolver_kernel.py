"""``ustack run`` resolves a name over ustack's UDP (root, veth): a kernel DNS responder in the peer namespace.

An unmodified urllib client (tests/api/programs/fetch.py) under ``ustack
run --backend packet`` fetches ``http://web.resolver.test:PORT/`` from a
kernel ``http.server``; the name is in neither hosts file nor resolv.conf's
search list, so it must be asked of the nameserver that ``USTACK_RESOLV_CONF``
names: a UDP responder on the kernel peer (written in tests/api/dns_server.py,
running in this process on a socket made in the peer namespace). The query
must come from the stack's address, byte-exact body fetched.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from .dns_server import A as TYPE_A
from .dns_server import DnsServer

pytestmark = pytest.mark.privileged

PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")
HTTP_PORT = 8003


@pytest.fixture
def topo():
    from ustack.tools.netns import Topology

    with Topology.veth(tag="d") as t:
        yield t


def test_ustack_run_fetches_by_name_resolved_over_ustack_udp(topo, tmp_path):
    from ustack.tools.netns import peer_socket

    body = os.urandom(100_000)
    (tmp_path / "blob.bin").write_bytes(body)
    (tmp_path / "resolv.conf").write_text(f"nameserver {topo.peer_addr}\noptions timeout:2 attempts:3\n")
    (tmp_path / "hosts").write_text("")
    sock = peer_socket(topo)
    sock.bind((topo.peer_addr, 53))
    dns = DnsServer(sock, {"web.resolver.test": [(TYPE_A, 60, topo.peer_addr)]})
    server = topo.peer_popen([sys.executable, "-m", "http.server", str(HTTP_PORT), "--bind", topo.peer_addr,
                              "--directory", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        ready = topo.peer_run([sys.executable, "-c", "import socket, time, sys\n"
                               "end = time.monotonic() + 20\n"
                               "while time.monotonic() < end:\n"
                               "    try:\n"
                               f"        socket.create_connection(({topo.peer_addr!r}, {HTTP_PORT}), 1).close()\n"
                               "        sys.exit(0)\n"
                               "    except OSError: time.sleep(0.05)\n"
                               "sys.exit(1)\n"], timeout=30)
        assert ready.returncode == 0, "the kernel http.server did not come up"
        env = dict(os.environ, USTACK_RESOLV_CONF=str(tmp_path / "resolv.conf"), USTACK_HOSTS=str(tmp_path / "hosts"))
        client = topo.stack_popen([sys.executable, "-m", "ustack", "run", "--backend", "packet",
                                   "--ifname", topo.stack_ifname, "--addr", f"{topo.stack_addr}/{topo.prefixlen}",
                                   os.path.join(PROGRAMS, "fetch.py"),
                                   f"http://web.resolver.test:{HTTP_PORT}/blob.bin"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        out, err = client.communicate(timeout=60)
    finally:
        server.terminate()
        server.communicate(timeout=20)
        dns.close()
    assert client.returncode == 0, err
    assert out == f"{len(body)} {hashlib.sha256(body).hexdigest()}\n", err
    assert dns.queries, "no query reached the kernel responder"
    src, sport, _, qname, qtype = dns.queries[0]
    assert (src, qname, qtype) == (topo.stack_addr, "web.resolver.test", TYPE_A) and sport >= 1024
