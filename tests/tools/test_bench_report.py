"""ustack.tools.bench_report: the table, the JSON, the chart and the notes of a (made-up) bench result."""

from __future__ import annotations

import json
import sys

import pytest

from ustack.tools import bench_config, bench_report
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


def latency(scale: float, rate: float, method: str = "icmp") -> dict:
    return {"rtt": {str(size): {"p50": scale * (50 + i * 10), "p99": scale * (100 + i * 10)}
                    for i, size in enumerate(bench_config.LATENCY_SIZES)},
            "ping": {"p50": scale * 45, "p99": scale * 90, "method": method, "lost": 0},
            "connect_p50_us": scale * 20, "connect_p99_us": scale * 60, "connect_close_per_s": rate}


def with_latency() -> dict:
    result = fake_result()
    result["config"]["ping_interval"] = 0.01
    result["rows"][0]["latency"] = latency(1.0, 30000.0)
    result["rows"][1]["latency"] = latency(2.5, 6000.0)
    return result


def test_latency_table_puts_each_stack_beside_the_kernel_with_a_ratio():
    table = bench_report.latency_table(with_latency())
    assert [e["key"] for e in table] == [f"rtt {s}" for s in bench_config.LATENCY_SIZES] + [
        "ping", "connect", "connect_close"]
    assert [e["what"] for e in table][:6] == ["TCP echo 64 B", "TCP echo 1000 B", "TCP echo 2000 B",
                                              "TCP echo 3000 B", "TCP echo 20 KB", "TCP echo 100 KB"]
    assert list(table[0]["rows"]) == ["kernel", "ustack/packet"]  # the row that is not available is left out
    assert table[0]["rows"]["kernel"] == {"p50": 50.0, "p99": 100.0, "ratio": None}
    assert table[5]["rows"]["ustack/packet"] == {"p50": 250.0, "p99": 375.0, "ratio": 2.5}
    ping = table[6]
    assert ping["what"] == "ping 10 ms apart, icmp" and ping["unit"] == "µs"
    assert ping["rows"]["ustack/packet"]["p50"] == 112.5 and ping["rows"]["ustack/packet"]["ratio"] == 2.5
    assert table[7]["rows"]["ustack/packet"] == {"p50": 50.0, "p99": 150.0, "ratio": 2.5}
    assert table[8]["unit"] == "1/s" and table[8]["rows"]["ustack/packet"] == {"p50": 6000.0, "p99": None,
                                                                              "ratio": 0.2}
    assert bench_report.latency_table(fake_result()) == []  # no row ran the suite


def test_latency_table_text():
    text = bench_report.format_table(with_latency())
    lines = text.splitlines()
    head = next(i for i, l in enumerate(lines) if l.startswith("latency:"))
    assert lines[head + 1].split() == ["kernel", "ustack/packet"]
    assert lines[head + 2].split() == ["p50", "p99", "p50", "p99", "×kernel"]
    body = {l.split(" (")[0]: l.rsplit(")", 1)[1].split() for l in lines[head + 3:head + 12]}
    assert body["TCP echo 64 B"] == ["50", "100", "125", "250", "2.50"]
    assert body["TCP echo 100 KB"] == ["100", "150", "250", "375", "2.50"]
    assert body["ping 10 ms apart, icmp"] == ["45", "90", "112", "225", "2.50"]
    assert body["connect()"] == ["20", "60", "50", "150", "2.50"]
    assert body["connect+close"] == ["30000", "-", "6000", "-", "0.20"]
    assert lines[head + 12] == "" and "ring cost" in lines[head + 13]
    assert "latency:" not in bench_report.format_table(fake_result())


def test_latency_without_a_kernel_row_has_no_ratio():
    result = with_latency()
    result["rows"][0]["status"] = "error"
    table = bench_report.latency_table(result)
    assert list(table[0]["rows"]) == ["ustack/packet"] and table[0]["rows"]["ustack/packet"]["ratio"] is None


def test_latency_notes_say_how_the_ping_was_sent():
    result = with_latency()
    result["rows"][1]["latency"]["ping"]["lost"] = 3
    notes = bench_report.notes_for(result)
    assert any(n.startswith("ping: icmp echo requests from the kernel client") and "every 10 ms" in n
               for n in notes)
    assert "ustack/packet: 3 pings unanswered (not timed)" in notes


def test_json_round_trips(tmp_path):
    result = fake_result()
    path = tmp_path / "b.json"
    bench_report.write_json(result, str(path))
    loaded = json.loads(path.read_text())
    assert loaded == json.loads(json.dumps(result))
    assert loaded["rows"][0]["metrics"]["push_mbps"] == 512.34
    result = with_latency()
    result["latency_table"] = bench_report.latency_table(result)
    bench_report.write_json(result, str(path))
    loaded = json.loads(path.read_text())
    assert loaded["rows"][1]["latency"]["rtt"]["100000"] == {"p50": 250.0, "p99": 375.0}
    assert loaded["rows"][1]["latency"]["connect_close_per_s"] == 6000.0
    assert loaded["latency_table"][8]["rows"]["ustack/packet"]["ratio"] == 0.2


@pytest.mark.parametrize("make", [fake_result, with_latency])
def test_chart_is_drawn_or_skipped_with_a_reason(tmp_path, make):
    path = tmp_path / "b.png"
    problem = bench_report.draw_png(make(), str(path))
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


def test_ipv6_rows_are_set_beside_their_ipv4_rows_as_ratios():
    from ustack.tools.bench_report import format_families

    def row(name, family, udp, push):
        metrics = {k: None for k, _, _ in bench_config.METRICS}
        metrics.update(udp_rtt_p50_us=udp, tcp_rtt_p50_us=udp, push_mbps=push, pull_mbps=push, conn_per_s=100.0)
        return row_result(name, "ustack", "veth", metrics=metrics, family=family)

    result = {"rows": [row("ustack/packet", 4, 50.0, 20.0), row("ustack/packet v6", 6, 55.0, 18.0),
                       row("kernel v6", 6, 40.0, 100.0)]}  # no IPv4 kernel row: left out
    lines = format_families(result)
    assert lines[-1].split() == ["ustack/packet", "v6", "1.10", "1.10", "0.90", "0.90", "1.00"]
    assert not any(line.startswith("kernel v6") for line in lines)
    assert format_families({"rows": [row("ustack/packet", 4, 50.0, 20.0)]}) == []


def test_an_ipv6_row_is_compared_with_its_own_interleaved_ipv4_measurement():
    from ustack.tools.bench_report import format_families

    def metrics(rtt, mbps):
        m = {k: None for k, _, _ in bench_config.METRICS}
        m.update(udp_rtt_p50_us=rtt, tcp_rtt_p50_us=rtt, push_mbps=mbps, pull_mbps=mbps, conn_per_s=100.0)
        return m

    # The separate IPv4 row ran minutes earlier (a quieter machine: 40 µs); the IPv6 row's own
    # IPv4 repetitions, interleaved with its IPv6 ones, saw 60 µs: the ratio uses those.
    six = row_result("kernel v6", "kernel", "veth", metrics=metrics(66.0, 90.0), family=6,
                     paired_v4={"metrics": metrics(60.0, 100.0), "samples": {}})
    result = {"rows": [row_result("kernel", "kernel", "veth", metrics=metrics(40.0, 200.0), family=4), six]}
    assert format_families(result)[-1].split() == ["kernel", "v6", "1.10", "1.10", "0.90", "0.90", "1.00"]


def test_family_ratios_are_the_median_of_the_repetitions_own_ratios():
    """Each repetition measured IPv4 and IPv6 back to back: a slow repetition (the machine busy) is slow for
    both, so the ratio within it stands, where the ratio of the medians would mix two repetitions."""
    from ustack.tools.bench_report import format_families

    def metrics(mbps):
        m = {k: None for k, _, _ in bench_config.METRICS}
        m.update(udp_rtt_p50_us=50.0, tcp_rtt_p50_us=50.0, push_mbps=mbps, pull_mbps=mbps, conn_per_s=100.0)
        return m

    def samples(push):
        return {"push": [{"mbps": x} for x in push], "pull": [{"mbps": 1.0}] * len(push)}

    four_push, six_push = [100.0, 400.0, 200.0], [110.0, 420.0, 100.0]  # ratios 1.10, 1.05, 0.50
    six = row_result("ustack/packet v6", "ustack", "veth", metrics=metrics(110.0), family=6, samples=samples(six_push),
                     paired_v4={"metrics": metrics(200.0), "samples": samples(four_push)})
    cells = format_families({"rows": [six]})[-1].split()
    assert cells[:2] == ["ustack/packet", "v6"]
    assert cells[4] == "1.05"  # push: median of 1.10, 1.05, 0.50 (the medians' ratio would be 0.55)
    assert cells[5] == "1.00"  # pull from the samples too
    assert cells[2] == "1.00" and cells[6] == "1.00"  # no RTT or cps samples: the medians' ratio
