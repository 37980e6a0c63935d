"""ustack.tools.bench_pipe: the whole-stack CPU benchmark runs and reports a transfer that completed."""

from ustack.tools import bench_pipe


def test_transfer_completes_and_reports_cpu_seconds(capsys):
    assert bench_pipe.main(["--bytes", "300000", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("TCP over the pipe, 300000 bytes: median ") and " s CPU " in out


def test_ipv6_beside_ipv4_with_the_ratio(capsys):
    assert bench_pipe.main(["--bytes", "300000", "--runs", "1", "--ipv6"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("TCP over the pipe, 300000 bytes")
    assert lines[1].startswith("TCP over IPv6 over the pipe, 300000 bytes")
    assert lines[2].startswith("IPv6 / IPv4 CPU: ")


def test_bad_arguments_are_refused(capsys):
    try:
        bench_pipe.main(["--bytes", "0"])
    except SystemExit as e:
        assert e.code == 2
    else:
        raise AssertionError("--bytes 0 was accepted")
    assert "--bytes and --runs must be positive" in capsys.readouterr().err
