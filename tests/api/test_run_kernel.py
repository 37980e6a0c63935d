"""``ustack run`` against the Linux kernel over a veth pair in namespaces (root): unmodified stdlib HTTP both ways.

- ``python -m http.server`` under ``ustack run --backend packet`` in the
  stack's namespace, fetched by curl from the kernel side, byte-exact;
- an unmodified urllib client (tests/api/programs/fetch.py) under
  ``ustack run`` fetching from a kernel ``http.server``, byte-exact.
The topology (ustack.tools.netns) kills its processes and deletes its
namespaces even when a test fails.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from tests.conftest import require_tool

pytestmark = pytest.mark.privileged

PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")


@pytest.fixture
def topo():
    from ustack.tools.netns import Topology

    with Topology.veth(tag="r") as t:
        yield t


def _content(tmp_path, size=300_000):
    body = os.urandom(size)
    (tmp_path / "blob.bin").write_bytes(body)
    return body


def _run_argv(t):
    return [sys.executable, "-m", "ustack", "run", "--backend", "packet", "--ifname", t.stack_ifname,
            "--addr", f"{t.stack_addr}/{t.prefixlen}"]


def test_unmodified_http_server_under_ustack_run_serves_the_kernel(topo, tmp_path):
    require_tool("curl")
    body = _content(tmp_path)
    server = topo.stack_popen([*_run_argv(topo), "-m", "http.server", "8000", "--bind", topo.stack_addr,
                               "--directory", str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://{topo.stack_addr}:8000/blob.bin"
    # curl retries refused connections (the server may still be starting) for at most ~20 s
    out = topo.peer_run(["curl", "-sS", "--fail", "--retry", "40", "--retry-delay", "0", "--retry-connrefused",
                         "--retry-max-time", "20", "--max-time", "30", "-o", "-", url],
                        timeout=60, capture_output=True)
    server.terminate()
    log, _ = server.communicate(timeout=20)
    assert out.returncode == 0, (out.stderr, log)
    assert len(out.stdout) == len(body) and hashlib.sha256(out.stdout).digest() == hashlib.sha256(body).digest()
    assert '"GET /blob.bin HTTP/1.1" 200' in log, log  # the server's own access log, from inside ustack run


def test_unmodified_urllib_client_under_ustack_run_fetches_from_the_kernel(topo, tmp_path):
    body = _content(tmp_path)
    server = topo.peer_popen([sys.executable, "-m", "http.server", "8001", "--bind", topo.peer_addr,
                              "--directory", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # the kernel server is up once its port answers (bounded wait from the peer side)
    ready = topo.peer_run([sys.executable, "-c", "import socket, time, sys\n"
                           "end = time.monotonic() + 20\n"
                           "while time.monotonic() < end:\n"
                           "    try:\n"
                           f"        socket.create_connection(({topo.peer_addr!r}, 8001), 1).close(); sys.exit(0)\n"
                           "    except OSError: time.sleep(0.05)\n"
                           "sys.exit(1)\n"], timeout=30)
    assert ready.returncode == 0, "the kernel http.server did not come up"
    client = topo.stack_popen([*_run_argv(topo), os.path.join(PROGRAMS, "fetch.py"),
                               f"http://{topo.peer_addr}:8001/blob.bin"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = client.communicate(timeout=60)
    finally:
        server.terminate()
    assert client.returncode == 0, err
    assert out == f"{len(body)} {hashlib.sha256(body).hexdigest()}\n", err
