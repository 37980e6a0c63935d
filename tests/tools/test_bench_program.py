"""ustack.tools.bench_program: the unmodified-program rows (python -m http.server on ustack vs the kernel)."""

from __future__ import annotations

import http.server
import threading

import pytest

from ustack.tools import bench_program


def test_server_argv_runs_http_server_as_is_or_under_ustack_run():
    class Topo:
        stack_addr, stack_ifname, prefixlen = "198.18.0.2", "veth0", 24

    kernel = bench_program.server_argv("kernel", Topo, "/srv", None)
    assert kernel[1:] == ["-m", "http.server", "8000", "--bind", "198.18.0.2", "--directory", "/srv"]
    ours = bench_program.server_argv("afxdp", Topo, "/srv", "generic")
    assert ours[1:4] == ["-m", "ustack", "run"] and ours[-7:] == kernel[1:]
    assert ["--backend", "afxdp"] == ours[4:6] and "--xdp-mode" in ours and "198.18.0.2/24" in ours


def test_the_load_loop_checks_every_response_byte_for_byte(tmp_path):
    """Against a kernel http.server on loopback (unprivileged): right body counted, a wrong one refused."""
    body = bytes(range(256)) * 4
    (tmp_path / "page.bin").write_bytes(body)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(tmp_path), **kw)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        result = bench_program.load("127.0.0.1", port, "/page.bin", body, 0.2, warmup=2)
        assert result["requests"] > 0 and result["rps"] > 0 and result["p50_us"] <= result["p99_us"]
        with pytest.raises(AssertionError, match="bad response"):
            bench_program.fetch("127.0.0.1", port, "/page.bin", body[:-1] + b"x")
        with pytest.raises(AssertionError, match="bad response"):
            bench_program.fetch("127.0.0.1", port, "/missing", body)
    finally:
        server.shutdown()
        server.server_close()


def test_format_programs_gives_each_row_its_ratio_to_the_kernel():
    rows = [{"name": "kernel", "status": "ok", "metrics": {"rps": 1000.0, "p50_us": 500.0, "p99_us": 900.0}},
            {"name": "ustack/packet", "status": "ok", "metrics": {"rps": 800.0, "p50_us": 600.0, "p99_us": 1500.0}},
            {"name": "ustack/afxdp", "status": "error", "note": "RuntimeError: boom"}]
    text = "\n".join(bench_program.format_programs({"programs": rows}))
    assert "python -m http.server" in text
    assert "ustack/packet       800       600      1500  0.80x req/s" in text
    assert "ustack/afxdp   error: RuntimeError: boom" in text
    assert bench_program.format_programs({"programs": []}) == []
