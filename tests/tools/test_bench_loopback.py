"""tools/bench_loopback.py: both rows measured, every byte of the bulk transfer counted by the server."""

from __future__ import annotations

from ustack.tools import bench, bench_loopback


def test_kernel_and_ustack_rows_with_figures():
    rows = bench_loopback.measure(count=20, nbytes=300_000, reps=1)  # bulk() raises unless all bytes arrived
    assert [r["row"] for r in rows] == ["kernel", "ustack"]
    for r in rows:
        assert 0 < r["rtt_p50_us"] <= r["rtt_p99_us"] and r["bulk_MBps"] > 0
    text = bench_loopback.format_rows(rows)
    assert "ustack" in text and "kernel" in text
    assert bench.build_parser().parse_args(["--no-loopback"]).no_loopback is True
