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
    # (One ACK per poll round (ack_coalescing) took 0.168 s while slow start grew cwnd by at most SMSS
    # per ACK; counting every byte a stretch ACK covers, as Linux, it is 0.097 s again.)
    t = bench_pipe.transfer(20_000_000)
    assert t.received == 20_000_000
    assert (t.retransmits, t.timeouts, t.duplicates, t.lost) == (0, 0, 0, 0)
    assert 0.076 < t.simulated < 0.15


def test_five_percent_loss_costs_seconds_not_hours():
    # 5% of frames lost each way (seeded): loss recovery, not a runaway RTO backoff. The bound: Linux
    # (SACK, RACK-TLP, 200 ms minimum RTO) would run near the Mathis et al. rate, MSS/RTT * sqrt(3/2p)
    # ~ 7.9 MB/s at 1 ms RTT, ~2.5 s for 20 MB. ustack recovers by RFC 6675 without RACK-TLP: a lost
    # retransmission, or a loss below RecoveryPoint after a timeout (RFC 6675 5.1), waits for a 200 ms
    # RTO (60 of them in this seeded run: 16.3 s). 20 s admits that and nothing like a runaway (Padhye's
    # model of a Reno TCP whose losses end in timeouts: ~64 s; the loop that missed arrivals: 72,542 s).
    t = bench_pipe.transfer(20_000_000, loss=0.05)
    assert t.received == 20_000_000
    assert t.lost > 1000 and t.retransmits > 0
    assert t.simulated < 20.0
