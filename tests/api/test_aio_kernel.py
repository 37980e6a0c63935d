"""The native asyncio loop against the Linux kernel over veth (root): a kernel client, an asyncio server on ustack.

An unmodified asyncio echo server (tests/api/programs/aio_echo_server.py)
runs under ``ustack run --backend packet`` in the stack's namespace; a
kernel client in the peer namespace sends 2 MB and half-closes, and must
get the same 2 MB back, byte-exact, then EOF.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.privileged

PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")

CLIENT = r'''
import hashlib, socket, sys, threading, time
host, port = sys.argv[1], int(sys.argv[2])
payload = bytes(i * 31 % 253 for i in range(2 << 20))
end = time.monotonic() + 20
while True:
    try:
        s = socket.create_connection((host, port), timeout=5)
        break
    except OSError:
        if time.monotonic() > end:
            raise
        time.sleep(0.05)
s.settimeout(30)
t = threading.Thread(target=lambda: (s.sendall(payload), s.shutdown(socket.SHUT_WR)))
t.start()
got = bytearray()
while True:
    chunk = s.recv(1 << 16)
    if not chunk:
        break
    got += chunk
t.join()
s.close()
print(len(got), hashlib.sha256(got).hexdigest() == hashlib.sha256(payload).hexdigest())
'''


@pytest.fixture
def topo():
    from ustack.tools.netns import Topology

    with Topology.veth(tag="aio") as t:
        yield t


def test_kernel_client_against_an_asyncio_server_on_the_native_loop(topo):
    server = topo.stack_popen([sys.executable, "-m", "ustack", "run", "--backend", "packet", "--ifname",
                               topo.stack_ifname, "--addr", f"{topo.stack_addr}/{topo.prefixlen}",
                               os.path.join(PROGRAMS, "aio_echo_server.py"), topo.stack_addr, "8007"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = server.stdout.readline()
        assert ready == "ready ustack.api.aio.loop\n", (ready, server.stderr.read() if server.poll() else "")
        out = topo.peer_run([sys.executable, "-c", CLIENT, topo.stack_addr, "8007"], timeout=60,
                            capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout == f"{2 << 20} True\n"
        assert server.wait(30) == 0  # the server saw the connection end and exited cleanly
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(10)
