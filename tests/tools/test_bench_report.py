"""ustack.tools.bench_report: the table, the JSON, the chart and the notes of a (made-up) bench result."""

from __future__ import annotations

import json
import sys

from ustack.tools import bench_report
from ustack.tools.bench_runner import row_result


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
            row_result("kernel", "kernel", "veth", mode="kernel sockets", metrics=metrics),
            row_result("ustack/packet", "ustack", "veth", mode="packet_ring tpacket_v3", metrics=packet,
                             server_drops={"ipv4.bad_checksum": 2}),
            row_result("pytcp/tap", "pytcp", "tap", "not available", note="pmd-pytcp is not installed"),
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


def test_table_shows_machine_placement_every_row_and_the_rings():
    text = bench_report.format_table(fake_result())
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
    bench_report.write_json(result, str(path))
    loaded = json.loads(path.read_text())
    assert loaded == json.loads(json.dumps(result))
    assert loaded["rows"][0]["metrics"]["push_mbps"] == 512.34


def test_chart_is_drawn_or_skipped_with_a_reason(tmp_path):
    path = tmp_path / "b.png"
    problem = bench_report.draw_png(fake_result(), str(path))
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
    assert bench_report.draw_png(fake_result(), str(path)).startswith("matplotlib not available")
    assert not path.exists()


def test_notes_name_the_packet_retire_timer_and_server_drops():
    result = fake_result()
    result["rows"][1]["samples"] = {"push": [{"complete": False}, {"complete": True}], "udp_rtt": [{"lost": 2}]}
    notes = bench_report.notes_for(result)
    assert any("TPACKET_V3" in n and "1 ms" in n for n in notes)
    assert "ustack/packet server drops: ipv4.bad_checksum 2" in notes
    assert any(n.startswith("ustack/packet push: 1 transfer(s) stopped at the time cap") for n in notes)
    assert "ustack/packet: 2 UDP echo requests unanswered (not timed)" in notes
