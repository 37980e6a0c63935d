"""ustack.tools.bench_matrix: the program matrix (unmodified servers under wrk / the C echo client)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading

import pytest

from ustack.tools import bench_matrix
from ustack.tools.bench_runner import Placement

WRK_REPORT = """Running 1s test @ http://198.18.0.2:8000/page.bin
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   620.50us  101.11us   2.10ms   90.00%
  Latency Distribution
     50%  612.00us
     75%  650.00us
     90%  700.00us
     99%    1.25ms
  5121 requests in 1.00s, 6.10MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:   5120.50
Transfer/sec:      6.10MB
"""


def test_parse_wrk_reads_rate_percentiles_and_every_error():
    got = bench_matrix.parse_wrk(WRK_REPORT)
    assert got == {"requests": 5121, "rps": 5120.5, "p50_us": 612.0, "p99_us": 1250.0, "errors": 3, "non2xx": 4}
    with pytest.raises(ValueError, match="no wrk report"):
        bench_matrix.parse_wrk("unable to connect to 198.18.0.2:8000 Connection refused")


def test_format_matrix_gives_each_stack_its_ratios_to_the_kernel():
    row = {"program": "echo, selectors", "connections": 32, "status": "ok", "note": "", "cells": {
        "kernel": [{"status": "ok", "rps": 1000.0, "p50_us": 30.0, "p99_us": 60.0, "cpu_us": 20.0, "errors": 0,
                    "non2xx": 0}] * 3,
        "packet": [{"status": "ok", "rps": r, "p50_us": 40.0, "p99_us": 90.0, "cpu_us": 30.0, "errors": 0,
                    "non2xx": 0} for r in (500.0, 900.0, 800.0)]}}
    bench_matrix.summarize(row, ["kernel", "packet"])
    assert row["ratio"]["packet"] == {"rps": 0.8, "cpu_us": 1.5}
    text = "\n".join(bench_matrix.format_matrix({"rows": [row], "stacks": ["kernel", "packet"], "seconds": 1.0,
                                                 "reps": 3, "load": (0.5, 0, 0)}))
    assert "echo, selectors                         32 packet              800       40       90       30.0" \
           "            0.80x  1.50x" in text


def test_select_programs_by_name():
    assert [p.name for p in bench_matrix.select_programs("thread,aiohttp")] == ["echo, thread per connection",
                                                                                 "aiohttp"]
    assert bench_matrix.select_programs(None) == bench_matrix.PROGRAMS


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")
def test_echo_client_counts_checked_requests_and_refuses_a_wrong_byte():
    """Against kernel echo servers on loopback (unprivileged): one right, one that changes a byte."""
    client = bench_matrix.build_echo_client()

    def serve(lst, corrupt):
        conn, _ = lst.accept()
        with conn, contextlib.suppress(ConnectionError):  # the client resets once it has seen the bad byte
            while data := conn.recv(65536):
                conn.sendall(data[:-1] + bytes([data[-1] ^ 1]) if corrupt else data)

    for corrupt in (False, True):
        lst = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=serve, args=(lst, corrupt), daemon=True).start()
        done = subprocess.run([client, "127.0.0.1", str(lst.getsockname()[1]), "1", "0.2", "64", "0.05"],
                              capture_output=True, text=True, timeout=30)
        lst.close()
        got = bench_matrix.parse_echo(done.stdout)
        if corrupt:
            assert done.returncode == 1 and got["errors"] == 1 and "byte 63 differs" in done.stderr
        else:
            assert done.returncode == 0 and got["errors"] == 0 and got["requests"] > 10, done


@pytest.mark.privileged
def test_one_tiny_row_on_the_kernel_and_packet(privileged):
    """The threaded echo server at one connection, kernel vs ``ustack run`` on packet: both measured, a ratio."""
    cfg = bench_matrix.MatrixConfig(seconds=0.3, reps=1, connections=(1,), backends=("packet",),
                                    programs=bench_matrix.select_programs("thread"))
    section = bench_matrix.run_matrix(cfg, Placement.plan(), lambda text: None)
    (row,) = section["rows"]
    for stack in ("kernel", "packet"):
        (cell,) = row["cells"][stack]
        assert cell["status"] == "ok" and cell["errors"] == 0 and cell["requests"] > 10, cell
        assert cell["cpu_us"] > 0 and 0 < cell["p50_us"] <= cell["p99_us"]
    assert row["ratio"]["packet"]["rps"] > 0
    source = open(bench_matrix.SERVERS_SCRIPT).read()
    assert "import ustack" not in source and "from ustack" not in source  # the servers are plain stdlib programs


def test_the_ab_tool_refuses_a_row_that_does_not_exist(capsys):
    from ustack.tools import bench_matrix_ab

    with pytest.raises(SystemExit) as exc:
        bench_matrix_ab.main(["no such row", "1", "packet"])
    assert exc.value.code == 2 and "no matrix row matches" in capsys.readouterr().err
