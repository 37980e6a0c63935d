"""The lwIP reference row of ``ustack bench``: built from tools/lwip_server.c, serving what ustack serve serves.

The build is checked for its reasons when it cannot run; the server itself
runs on a TAP topology and is held to the same exactness as ustack's rows:
TCP echo and UDP echo byte for byte, the source's pattern stream to the
last byte, connections opened and closed.
"""

from __future__ import annotations

import hashlib
import os
import socket

import pytest

from ustack.tools import bench_lwip
from ustack.tools.bench_config import TCP_DISCARD, TCP_ECHO, TCP_SOURCE, UDP_ECHO
from ustack.tools.services import pattern_sha256

from ..conftest import require_privileged


def require_lwip() -> None:
    problem = bench_lwip.lwip_problem()
    if problem is None:
        return
    if os.environ.get("USTACK_REQUIRE_PRIVILEGED") == "1":
        pytest.fail(f"the lwIP row cannot be built: {problem} (tools/run installs liblwip-dev)")
    pytest.skip(problem)


def test_missing_pkg_config_is_a_reason_not_a_crash(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no pkg-config, no compiler
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    problem = bench_lwip.lwip_problem()
    assert problem is not None and ("compiler" in problem or "pkg-config" in problem)


def test_build_is_cached_by_source_hash(tmp_path, monkeypatch):
    require_lwip()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = bench_lwip.build()
    assert first.parent == tmp_path / "ustack" and os.access(first, os.X_OK)
    mtime = first.stat().st_mtime_ns
    assert bench_lwip.build() == first and first.stat().st_mtime_ns == mtime  # not rebuilt


@pytest.mark.privileged
def test_lwip_server_serves_the_bench_services_exactly():
    require_privileged()
    require_lwip()
    from ustack.tools.netns import Topology

    source_bytes = 3_000_001
    with Topology.tap(tag="lw") as topo:
        server, mode = bench_lwip.lwip_server(topo, source_bytes)
        try:
            assert "lwIP" in mode and "raw API" in mode
            with topo.in_peer_ns():
                data = hashlib.sha256(b"x").digest() * 2000  # 64,000 bytes
                with socket.create_connection((topo.stack_addr, TCP_ECHO), timeout=5) as s:
                    got = bytearray()
                    for i in range(0, len(data), 8000):
                        s.sendall(data[i:i + 8000])
                        while len(got) < i + 8000:
                            chunk = s.recv(65536)
                            assert chunk, "echo closed early"
                            got += chunk
                    assert bytes(got) == data
                with socket.create_connection((topo.stack_addr, TCP_SOURCE), timeout=10) as s:
                    h, n = hashlib.sha256(), 0
                    while chunk := s.recv(1 << 18):
                        h.update(chunk)
                        n += len(chunk)
                    assert n == source_bytes and h.hexdigest() == pattern_sha256(source_bytes)
                with socket.create_connection((topo.stack_addr, TCP_DISCARD), timeout=5) as s:
                    s.sendall(data)
                    s.shutdown(socket.SHUT_WR)
                    assert s.recv(1) == b""  # discard closes after our FIN, having sent nothing
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                    u.settimeout(5)
                    u.sendto(data[:1200], (topo.stack_addr, UDP_ECHO))
                    assert u.recvfrom(2048)[0] == data[:1200]
                for _ in range(20):
                    socket.create_connection((topo.stack_addr, TCP_ECHO), timeout=5).close()
        finally:
            assert server.stop() == 0
