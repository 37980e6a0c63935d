"""ustack.tools.bench_pipe: the whole-stack CPU benchmark runs and reports a transfer that completed."""

from ustack.tools import bench_pipe


def test_transfer_completes_and_reports_cpu_seconds(capsys):
    assert bench_pipe.main(["--bytes", "300000", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("TCP over the pipe, 300000 bytes: median ") and " s CPU " in out
    assert " s simulated, 0 retransmitted (0 timeouts), 0 duplicates at the receiver, 0 frames lost" in out


def test_ipv6_beside_ipv4_with_the_ratio(capsys):
    assert bench_pipe.main(["--bytes", "300000", "--runs", "1", "--ipv6"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("TCP over the pipe, 300000 bytes")
    assert lines[2].startswith("TCP over IPv6 over the pipe, 300000 bytes")
    assert " 0 retransmitted " in lines[1] and " 0 retransmitted " in lines[3]
    assert lines[4].startswith("IPv6 / IPv4 CPU: ")


def test_bad_arguments_are_refused(capsys):
    try:
        bench_pipe.main(["--bytes", "0"])
    except SystemExit as e:
        assert e.code == 2
    else:
        raise AssertionError("--bytes 0 was accepted")
    assert "--bytes and --runs must be positive" in capsys.readouterr().err


def test_a_clean_wire_retransmits_nothing():
    # 20 MB, 0.5 ms each way, no impairment: not one segment may be sent twice. The transfer is
    # window-bound (256 KiB of receive window per 1 ms round trip: >= 0.076 s for 20 MB). A loop that
    # jumped the clock past frames in flight (to the next timer) fired RTOs and took 112,737 s here.
    t = bench_pipe.transfer(20_000_000)
    assert (t.retransmits, t.timeouts, t.duplicates, t.lost) == (0, 0, 0, 0)
    assert 0.076 < t.simulated < 0.15


def test_five_percent_loss_costs_seconds_not_hours():
    # 5% of frames lost each way (seeded): loss recovery, not a runaway RTO backoff. Bound: the
    # Mathis et al. rate for Reno, MSS/RTT * sqrt(3/2)/sqrt(p) ~ 7.9 MB/s (2.5 s for 20 MB), plus
    # ~700 lost data segments of which Linux (SACK, 200 ms minimum RTO) repairs most by fast recovery;
    # allowing 60 of them a 200 ms timeout each adds 12 s: 20 s. The broken loop took 75,486 s.
    t = bench_pipe.transfer(20_000_000, loss=0.05)
    assert t.lost > 1000 and t.retransmits > 0
    assert t.simulated < 20.0
