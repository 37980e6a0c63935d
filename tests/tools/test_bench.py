"""``ustack bench`` (tools/bench.py): the command line's arguments and exit codes, then one real quick run."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ustack.tools import bench, bench_config

REPO = Path(__file__).resolve().parents[2]


# -- arguments ------------------------------------------------------------------------------------------------


def test_defaults_and_default_suite():
    args = bench.build_parser().parse_args([])
    assert (args.json, args.png, args.quick, args.backends, args.xdp_mode, args.no_rings) == (
        "bench.json", "bench.png", False, None, "auto", False)
    assert bench_config.BenchConfig.for_args(args) == bench_config.BenchConfig()


def test_quick_suite_and_overrides():
    args = bench.build_parser().parse_args(["--quick", "--rtt-count", "50", "--bulk-bytes", "1000", "--no-rings",
                                            "--cps-seconds", "0.5", "--rtt-warmup", "0"])
    cfg = bench_config.BenchConfig.for_args(args)
    assert (cfg.reps, cfg.rtt_count, cfg.rtt_warmup, cfg.bulk_bytes, cfg.cps_seconds, cfg.rings) == (
        1, 50, 0, 1000, 0.5, False)
    assert cfg.bulk_seconds == 3.0  # the quick suite's, not overridden
    assert (cfg.latency, cfg.lat_count, cfg.ping_count, cfg.connect_seconds) == (True, 60, 40, 0.5)
    args = bench.build_parser().parse_args(["--lat-count", "7", "--ping-count", "9", "--connect-seconds", "0.25"])
    cfg = bench_config.BenchConfig.for_args(args)
    assert (cfg.latency, cfg.lat_count, cfg.ping_count, cfg.connect_seconds, cfg.reps) == (True, 7, 9, 0.25, 3)
    assert bench_config.BenchConfig.for_args(bench.build_parser().parse_args(["--no-latency"])).latency is False
    cfg = bench_config.BenchConfig.for_args(bench.build_parser().parse_args(["--no-program", "--program-seconds", "2"]))
    assert (cfg.program, cfg.program_seconds) == (False, 2.0)
    assert bench_config.BenchConfig.for_args(bench.build_parser().parse_args(["--quick"])).program_seconds == 1.0
    assert bench_config.BenchConfig.for_args(bench.build_parser().parse_args([])).steer_client_rx is False
    assert bench_config.BenchConfig.for_args(bench.build_parser().parse_args(["--steer-client-rx"])).steer_client_rx


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
    assert default[-2:] == ["lwip", "pytcp"] and set(default[:-2]) <= set(bench_config.USTACK_BACKENDS)


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


# -- a real quick run -----------------------------------------------------------------------------------------------


@pytest.mark.privileged
def test_quick_run_on_packet_measures_every_metric(tmp_path):
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    argv = [sys.executable, "-m", "ustack.tools.bench", "--quick", "--backends", "packet", "--rtt-count", "100",
            "--rtt-warmup", "20", "--bulk-bytes", "1000000", "--bulk-seconds", "3", "--cps-seconds", "0.5",
            "--ring-seconds", "0.3", "--ring-runs", "1", "--lat-count", "20", "--ping-count", "10",
            "--connect-seconds", "0.3", "--program-seconds", "0.3", "--json", str(out_json), "--png", str(out_png)]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        table, log = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, table + log
    result = json.loads(out_json.read_text())
    rows = {r["name"]: r for r in result["rows"]}
    assert list(rows) == ["kernel", "ustack/packet", "kernel v6", "ustack/packet v6",
                          "kernel +offloads", "ustack/packet +offloads"]
    for name in ("kernel +offloads", "ustack/packet +offloads"):  # a veth at the kernel's default offloads
        row = rows.pop(name)
        assert row["status"] == "ok" and row["offloads"] == "default", row
        assert all(row["metrics"][key] > 0 for key, _, _ in bench_config.METRICS), row["metrics"]
        assert all(s["complete"] for s in row["samples"]["pull"]) and "latency" not in row
    assert rows["ustack/packet"]["offloads"] == "off"
    for name in ("kernel v6", "ustack/packet v6"):  # the same services over IPv6 (no latency suite there)
        six = rows.pop(name)
        assert six["status"] == "ok" and six["family"] == 6, six
        assert all(six["metrics"][key] > 0 for key, _, _ in bench_config.METRICS), six["metrics"]
        assert all(s["complete"] for s in six["samples"]["pull"]) and "latency" not in six
    assert "\nIPv6 beside IPv4 (ratio" in table and "\nustack/packet v6 " in table
    for name, row in rows.items():
        assert row["status"] == "ok", row
        for key, _, _ in bench_config.METRICS:
            assert row["metrics"][key] > 0, (name, key, row["metrics"])
        assert row["metrics"]["udp_rtt_p99_us"] >= row["metrics"]["udp_rtt_p50_us"]
        assert all(s["complete"] for s in row["samples"]["pull"]), row["samples"]["pull"]
        lat = row["latency"]
        for size in bench_config.LATENCY_SIZES:
            assert 0 < lat["rtt"][str(size)]["p50"] <= lat["rtt"][str(size)]["p99"], (name, size, lat)
        assert lat["ping"]["method"] in ("icmp", "icmp raw", "tcp 64 B") and lat["ping"]["p50"] > 0
        assert lat["connect_p50_us"] > 0 and lat["connect_close_per_s"] > 0
    assert [e["key"] for e in result["latency_table"]][-3:] == ["ping", "connect", "connect_close"]
    assert result["latency_table"][0]["rows"]["ustack/packet"]["ratio"] > 0
    assert rows["ustack/packet"]["mode"].startswith("packet")
    programs = {r["name"]: r for r in result["programs"]}  # python -m http.server, unmodified, on each stack
    assert list(programs) == ["kernel", "ustack/packet"]
    for name, row in programs.items():
        assert row["status"] == "ok", row
        assert row["metrics"]["rps"] > 0 and 0 < row["metrics"]["p50_us"] <= row["metrics"]["p99_us"], row
        assert all(s["requests"] > 0 for s in row["samples"])
    assert "\nunmodified program: python -m http.server" in table
    matrix = {(r["program"], r["connections"]): r for r in result["matrix"]["rows"]}  # --quick: two rows, 1 conn
    assert list(matrix) == [("http.server (HTTP/1.0)", 1), ("echo, thread per connection", 1)]
    for row in matrix.values():
        assert row["status"] == "ok" and set(row["cells"]) == {"kernel", "packet"}, row
        assert all(c["status"] == "ok" and c["requests"] > 0 and not c["errors"] for cells in row["cells"].values()
                   for c in cells), row
        assert row["ratio"]["packet"]["rps"] > 0
    assert "\nprogram matrix: unmodified servers" in table
    rings = {r["name"]: r for r in result["rings"]}
    assert set(rings) == {"kernel UDP socket", "packet"}
    for ring in rings.values():
        assert ring["status"] == "ok", ring
        assert all(ring[k] > 0 for k, _, _ in bench_config.RING_METRICS), ring
    assert result["machine"]["kernel"] == os.uname().release
    assert "UDP p50" in table and "\nkernel " in table and "\nustack/packet " in table
    assert "placement:" in table
    assert "\nlatency: p50/p99" in table and "\nTCP echo 100 KB (µs)" in table and "\nconnect+close (1/s)" in table
    from pyroute2 import netns

    left = [n for n in netns.listnetns() if n.startswith((f"usbn{proc.pid}", f"usbr{proc.pid}"))]
    assert not left, left  # every namespace the run made is gone


@pytest.mark.privileged
def test_the_client_receive_work_is_steered_to_the_client_cpus():
    """steer_peer_receive: RPS on every receive queue of the peer veth, the client's CPU mask; none: untouched."""
    from ustack.tools.bench_runner import steer_peer_receive
    from ustack.tools.netns import Topology

    def masks(topo) -> set:
        out = subprocess.run(["ip", "netns", "exec", topo.peer_ns, "sh", "-c",
                              f"cat /sys/class/net/{topo.peer_ifname}/queues/rx-*/rps_cpus"],
                             capture_output=True, text=True, check=True).stdout
        return {int(m.replace(",", ""), 16) for m in out.split()}

    with Topology.veth(tag="rps") as topo:
        assert masks(topo) == {0}
        assert steer_peer_receive(topo, None) is False and masks(topo) == {0}
        assert steer_peer_receive(topo, {0}) is True and masks(topo) == {1}
        assert steer_peer_receive(topo, {0, 1}) is True and masks(topo) == {3}


# -- issue 25, item 11d: a missing host program is one line and a skipped row, never a traceback -------------
def test_require_names_the_program_and_its_purpose():
    from ustack.tools.host_programs import MissingProgram, require

    assert require("sh", "x").endswith("/sh")
    with pytest.raises(FileNotFoundError) as err:
        require("no-such-program-ustack", "the loss rows")
    assert isinstance(err.value, MissingProgram)
    assert str(err.value) == "no-such-program-ustack is not installed (needed for: the loss rows)"


@pytest.mark.privileged
def test_bench_without_nft_names_it_in_one_line_and_skips_the_loss_rows(tmp_path, monkeypatch, capsys):
    from ustack.tools import bench_loss, bench_runner

    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no nft (nor taskset, nor anything else) on this PATH
    monkeypatch.setattr(bench, "run_row", lambda kind, *a, **kw: bench_runner.row_result(
        kind, kind, "veth", "not available", note="not measured in this test"))
    monkeypatch.setattr(bench_loss, "pipe_rows", lambda size: [])
    out_json = tmp_path / "b.json"
    rc = bench.main(["--quick", "--backends", "packet", "--no-ipv6", "--no-program", "--no-rings", "--no-loopback",
                     "--json", str(out_json), "--png", ""])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "Traceback" not in captured.err
    named = [line for line in captured.err.splitlines() if "nft" in line]
    assert named == ["ustack bench: bulk under loss over veth skipped: nft is not installed (needed for: the "
                     "loss rows' segment drops (nftables))"], captured.err
    result = json.loads(out_json.read_text())
    assert result["loss"]["veth"] is None and "nft is not installed" in result["loss"]["skipped"]
    assert any("nft is not installed" in n for n in result["notes"])
