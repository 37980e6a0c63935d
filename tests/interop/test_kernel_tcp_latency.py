"""Request/response latency against the Linux kernel over veth (AF_PACKET): no delayed-ACK stalls.

With classic RFC 896 Nagle, the short tail of a 1449..2895-byte message
waits for the ACK of the full segment before it, and a Linux peer in
interactive (ping-pong) mode delays that ACK by ~40 ms. Nagle in Minshall's
variant (ustack's, as Linux's) sends the tail at once. Both directions:

- a kernel client and ``ustack serve --tcp-echo`` (default options, Nagle on);
- a ustack client (sockets on a Driver, in this process) and a kernel
  request/response server that answers once the whole request is in.

Each runs 20 requests of sizes across 1449..2895 bytes, checks every byte and
asserts the median round trip is far below one delayed-ACK timeout.
"""

from __future__ import annotations

import socket
import statistics
import struct
import threading
import time

import pytest

from tests.conftest import require_privileged
from tests.interop.harness import serving

pytestmark = pytest.mark.privileged

SIZES = [1449 + (2895 - 1449) * i // 19 for i in range(20)]  # 1449 ... 2895
MEDIAN_LIMIT = 0.010  # a delayed-ACK stall costs >= 40 ms


def message(n: int, salt: int) -> bytes:
    """``n`` bytes: the length (4 bytes) then a pattern that differs per request."""
    body = bytes((salt + i * 7) % 251 for i in range(n - 4))
    return struct.pack("!I", n) + body


def recv_exact(recv, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = recv(n - len(buf))
        if not chunk:
            raise AssertionError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    yield from serving("packet", tmp_path_factory, "tcp-latency", ["--tcp-echo", "7"])


def test_kernel_client_gets_ustack_echo_responses_without_delayed_ack_stalls(served):
    from ustack.tools.netns import peer_socket

    s = peer_socket(served.topo, type=socket.SOCK_STREAM)
    s.settimeout(10)
    rtts = []
    with s:
        s.connect((served.topo.stack_addr, 7))
        for i, n in enumerate(SIZES):
            msg = message(n, i)
            t0 = time.perf_counter()
            s.sendall(msg)
            got = recv_exact(s.recv, n)
            rtts.append(time.perf_counter() - t0)
            assert got == msg
    med = statistics.median(rtts)
    print(f"kernel client -> ustack echo, 1449..2895 B: median {med * 1e3:.3f} ms, max {max(rtts) * 1e3:.3f} ms")
    assert med < MEDIAN_LIMIT, [round(r * 1e3, 3) for r in rtts]


@pytest.fixture
def world():
    require_privileged()
    from ustack.api.driver import Driver
    from ustack.stack import Stack
    from ustack.tools.netns import Topology

    topo = Topology.veth(tag="tl")
    dev = driver = None
    try:
        dev = topo.open_device("packet")
        stack = Stack(dev, f"{topo.stack_addr}/{topo.prefixlen}")
        driver = Driver(stack)
        yield topo, driver
    finally:
        if driver is not None:
            driver.close()
        if dev is not None:
            dev.close()
        topo.close()


def _rpc_server(lsock: socket.socket, errors: list) -> None:
    """Reads a whole request (its first 4 bytes give its length), then answers with as many bytes."""
    try:
        conn, _ = lsock.accept()
        with conn:
            conn.settimeout(10)
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    break
                (n,) = struct.unpack("!I", head)
                body = recv_exact(conn.recv, n - 4)
                conn.sendall(head + body[::-1])
    except Exception as e:  # reported by the test
        errors.append(e)


def test_ustack_client_gets_kernel_responses_without_delayed_ack_stalls(world):
    from ustack.api.socket import socket as usocket
    from ustack.tools.netns import peer_socket

    topo, driver = world
    lsock = peer_socket(topo, socket.AF_INET, socket.SOCK_STREAM)
    lsock.bind((topo.peer_addr, 7000))
    lsock.listen(1)
    errors: list = []
    t = threading.Thread(target=_rpc_server, args=(lsock, errors), daemon=True)
    t.start()
    rtts = []
    try:
        s = usocket(driver)
        s.settimeout(10)
        s.connect((topo.peer_addr, 7000))
        for i, n in enumerate(SIZES):
            msg = message(n, i)
            t0 = time.perf_counter()
            s.sendall(msg)
            got = recv_exact(s.recv, n)
            rtts.append(time.perf_counter() - t0)
            assert got == msg[:4] + msg[4:][::-1]
        s.close()
    finally:
        lsock.close()
    t.join(10)
    assert not errors, errors
    med = statistics.median(rtts)
    print(f"ustack client -> kernel rpc, 1449..2895 B: median {med * 1e3:.3f} ms, max {max(rtts) * 1e3:.3f} ms")
    assert med < MEDIAN_LIMIT, [round(r * 1e3, 3) for r in rtts]
