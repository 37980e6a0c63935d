"""``ustack bench`` (tools/bench.py): argument parsing, statistics and the report, then one real quick run."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ustack.tools import bench

REPO = Path(__file__).resolve().parents[2]


def fake_result() -> dict:
    metrics = {"udp_rtt_p50_us": 61.5, "udp_rtt_p99_us": 240.0, "tcp_rtt_p50_us": 70.25, "tcp_rtt_p99_us": 310.0,
               "push_mbps": 512.34, "pull_mbps": 498.0, "conn_per_s": 3120.0}
    packet = {"udp_rtt_p50_us": 999.0, "udp_rtt_p99_us": 1500.0, "tcp_rtt_p50_us": 1001.0, "tcp_rtt_p99_us": 2100.0,
              "push_mbps": 20.4, "pull_mbps": 41.44, "conn_per_s": 370.0}
    return {
        "tool": "ustack bench", "format": 1, "started": "2026-01-02T03:04:05+00:00", "duration_s": 187.0,
        "machine": {"cpu_model": "Test CPU @ 1GHz", "cpus": 2, "cpus_allowed": [0, 1], "kernel": "6.18.0",
                    "python": "3.11.7", "loadavg_at_start": [0.5, 0.25, 0.0]},
        "placement": {"text": "server on CPU 1, client on CPU 0", "client_cpus": [0], "server_cpus": [1]},
        "config": {"reps": 3, "rtt_count": 2000, "rtt_warmup": 200, "bulk_bytes": 20_000_000, "bulk_seconds": 8.0,
                   "cps_seconds": 2.0, "ring_seconds": 1.0, "ring_runs": 3, "rings": True, "quick": False},
        "rows": [
            bench.row_result("kernel", "kernel", "veth", mode="kernel sockets", metrics=metrics),
            bench.row_result("ustack/packet", "ustack", "veth", mode="packet_ring tpacket_v3", metrics=packet,
                             server_drops={"ipv4.bad_checksum": 2}),
            bench.row_result("pytcp/tap", "pytcp", "tap", "not available", note="pmd-pytcp is not installed"),
        ],
        "rings": [
            {"name": "kernel UDP socket", "status": "ok", "rx_kpps": 448.2, "rx_cpu_us": 0.84, "tx_kpps": 262.0,
             "tx_cpu_us": 1.77},
            {"name": "packet", "status": "ok", "rx_kpps": 377.0, "rx_cpu_us": 0.18, "tx_kpps": 407.0,
             "tx_cpu_us": 1.44},
            {"name": "afxdp", "status": "error", "note": "DeviceError: no XDP"},
        ],
        "notes": ["a note"],
    }


# -- arguments ------------------------------------------------------------------------------------------------


def test_defaults_and_default_suite():
    args = bench.build_parser().parse_args([])
    assert (args.json, args.png, args.quick, args.backends, args.xdp_mode, args.no_rings) == (
        "bench.json", "bench.png", False, None, "auto", False)
    assert bench.BenchConfig.for_args(args) == bench.BenchConfig()


def test_quick_suite_and_overrides():
    args = bench.build_parser().parse_args(["--quick", "--rtt-count", "50", "--bulk-bytes", "1000", "--no-rings",
                                            "--cps-seconds", "0.5", "--rtt-warmup", "0"])
    cfg = bench.BenchConfig.for_args(args)
    assert (cfg.reps, cfg.rtt_count, cfg.rtt_warmup, cfg.bulk_bytes, cfg.cps_seconds, cfg.rings) == (
        1, 50, 0, 1000, 0.5, False)
    assert cfg.bulk_seconds == 3.0  # the quick suite's, not overridden


@pytest.mark.parametrize("argv", [["--reps", "0"], ["--rtt-count", "-3"], ["--bulk-seconds", "0"],
                                  ["--xdp-mode", "turbo"], ["--reps", "x"]])
def test_bad_numbers_and_choices_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.build_parser().parse_args(argv)
    assert exc.value.code == 2


def test_backend_selection():
    assert bench._selection("packet") == ["packet"]
    assert bench._selection(" tap , pytcp,afxdp") == ["tap", "pytcp", "afxdp"]
    with pytest.raises(argparse.ArgumentTypeError, match="unknown backend.*pipe"):
        bench._selection("packet,pipe")
    default = bench._selection(None)
    assert default[-1] == "pytcp" and set(default[:-1]) <= set(bench.USTACK_BACKENDS)


def test_add_parser_adds_the_bench_subcommand():
    parser = argparse.ArgumentParser(prog="ustack")
    sub = parser.add_subparsers(dest="command", required=True)
    bench.add_parser(sub)
    args = parser.parse_args(["bench", "--quick", "--backends", "packet", "--json", "x.json"])
    assert args.func is bench.cmd_bench
    assert (args.quick, args.backends, args.json) == (True, "packet", "x.json")


def test_unknown_backend_and_no_root_exit_2(monkeypatch, capsys):
    assert bench.main(["--backends", "nope"]) == 2
    assert "unknown backend" in capsys.readouterr().err
    monkeypatch.setattr(bench.os, "geteuid", lambda: 1000)
    assert bench.main(["--backends", "packet"]) == 2
    assert "needs root" in capsys.readouterr().err


# -- statistics and parsing -------------------------------------------------------------------------------------


def test_percentile_is_nearest_rank():
    values = list(range(100, 0, -1))  # 1..100, unordered
    assert bench.percentile(values, 50) == 50.0
    assert bench.percentile(values, 99) == 99.0
    assert bench.percentile(values, 100) == 100.0
    assert bench.percentile([7], 99) == 7.0
    assert bench.percentile([1, 2, 3], 50) == 2.0
    with pytest.raises(ValueError):
        bench.percentile([], 50)


def test_median_or_none_ignores_missing():
    assert bench.median_or_none([3, None, 1, 2]) == 2
    assert bench.median_or_none([None]) is None


def test_ustack_drops_are_read_from_serve_output():
    lines = ["ustack: 198.18.0.2/24 mac 02:00:00:00:00:01 mtu 1500 on packet:x (packet_ring)", "ready", "counters:",
             "  rx.frames 10", "drops by reason:", "  ipv4.bad_checksum                      3",
             "  arp.bad_hardware                       1"]
    assert bench.ustack_drops(lines) == {"ipv4.bad_checksum": 3, "arp.bad_hardware": 1}
    assert bench.ustack_drops(["drops by reason:", "  (none)"]) == {}


# -- the report ---------------------------------------------------------------------------------------------------


def test_table_shows_machine_placement_every_row_and_the_rings():
    text = bench.format_table(fake_result())
    lines = text.splitlines()
    assert lines[0].startswith("machine: Test CPU @ 1GHz, 2 CPUs, kernel 6.18.0, Python 3.11.7")
    assert "placement: server on CPU 1, client on CPU 0" in text
    header = next(l for l in lines if l.startswith("row"))
    assert header.split()[:8] == ["row", "UDP", "p50", "UDP", "p99", "TCP", "p50", "TCP"]
    kernel = next(l for l in lines if l.startswith("kernel "))
    assert kernel.split()[1:8] == ["62", "240", "70", "310", "512.3", "498.0", "3120"]
    assert kernel.rstrip().endswith("kernel sockets")
    packet = next(l for l in lines if l.startswith("ustack/packet"))
    assert packet.split()[1:8] == ["999", "1500", "1001", "2100", "20.4", "41.4", "370"]
    assert "pytcp/tap" in text and "not available: pmd-pytcp is not installed" in text
    ring = next(l for l in lines if l.startswith("packet "))
    assert ring.split()[1:] == ["377", "0.18", "407", "1.44"]
    assert "afxdp" in text and "error: DeviceError: no XDP" in text
    assert "- a note" in text and "took 187 s" in text


def test_json_round_trips(tmp_path):
    result = fake_result()
    path = tmp_path / "b.json"
    bench.write_json(result, str(path))
    loaded = json.loads(path.read_text())
    assert loaded == json.loads(json.dumps(result))
    assert loaded["rows"][0]["metrics"]["push_mbps"] == 512.34


def test_chart_is_drawn_or_skipped_with_a_reason(tmp_path):
    path = tmp_path / "b.png"
    problem = bench.draw_png(fake_result(), str(path))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert problem.startswith("matplotlib not available") and not path.exists()
    else:
        assert problem is None
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_chart_without_matplotlib_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    path = tmp_path / "b.png"
    assert bench.draw_png(fake_result(), str(path)).startswith("matplotlib not available")
    assert not path.exists()


def test_notes_name_the_packet_retire_timer_and_server_drops():
    result = fake_result()
    result["rows"][1]["samples"] = {"push": [{"complete": False}, {"complete": True}], "udp_rtt": [{"lost": 2}]}
    notes = bench.notes_for(result)
    assert any("TPACKET_V3" in n and "1 ms" in n for n in notes)
    assert "ustack/packet server drops: ipv4.bad_checksum 2" in notes
    assert any(n.startswith("ustack/packet push: 1 transfer(s) stopped at the time cap") for n in notes)
    assert "ustack/packet: 2 UDP echo requests unanswered (not timed)" in notes


# -- a real quick run -----------------------------------------------------------------------------------------------


@pytest.mark.privileged
def test_quick_run_on_packet_measures_every_metric(tmp_path):
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    argv = [sys.executable, "-m", "ustack.tools.bench", "--quick", "--backends", "packet", "--rtt-count", "100",
            "--rtt-warmup", "20", "--bulk-bytes", "1000000", "--bulk-seconds", "3", "--cps-seconds", "0.5",
            "--ring-seconds", "0.3", "--ring-runs", "1", "--json", str(out_json), "--png", str(out_png)]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        table, log = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, table + log
    result = json.loads(out_json.read_text())
    rows = {r["name"]: r for r in result["rows"]}
    assert list(rows) == ["kernel", "ustack/packet"]
    for name, row in rows.items():
        assert row["status"] == "ok", row
        for key, _, _ in bench.METRICS:
            assert row["metrics"][key] > 0, (name, key, row["metrics"])
        assert row["metrics"]["udp_rtt_p99_us"] >= row["metrics"]["udp_rtt_p50_us"]
        assert all(s["complete"] for s in row["samples"]["pull"]), row["samples"]["pull"]
    assert rows["ustack/packet"]["mode"].startswith("packet")
    rings = {r["name"]: r for r in result["rings"]}
    assert set(rings) == {"kernel UDP socket", "packet"}
    for ring in rings.values():
        assert ring["status"] == "ok", ring
        assert all(ring[k] > 0 for k, _, _ in bench.RING_METRICS), ring
    assert result["machine"]["kernel"] == os.uname().release
    assert "UDP p50" in table and "\nkernel " in table and "\nustack/packet " in table
    assert "placement:" in table
    from pyroute2 import netns

    left = [n for n in netns.listnetns() if n.startswith((f"usbn{proc.pid}", f"usbr{proc.pid}"))]
    assert not left, left  # every namespace the run made is gone
