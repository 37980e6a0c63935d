"""``ustack.tools.bench_setup_ab``: an A/B of a USTACK_* switch on ustack serve's connection setup."""

from __future__ import annotations

import os

import pytest

from ustack.tools import bench_setup_ab


def test_bad_arguments_are_refused():
    for argv in (["--pairs", "0"], ["--seconds", "0"]):
        with pytest.raises(SystemExit) as exc:
            bench_setup_ab.main(argv)
        assert exc.value.code == 2


@pytest.mark.privileged
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pins the server and the client to two CPUs")
def test_one_pair_completes_connections_and_restores_the_variable(privileged, monkeypatch):
    monkeypatch.delenv("USTACK_ACK_C", raising=False)
    cpus = os.sched_getaffinity(0)
    res = bench_setup_ab.run("packet", "USTACK_ACK_C", 1, 0.3, busy_poll=False)
    for value in ("0", "1"):
        (row,) = res[value]
        assert row["rate"] > 20 and 0 < row["connect_p50_us"] < 100_000 and row["cpu_us_per_conn"] > 0, row
    assert "USTACK_ACK_C" not in os.environ and os.sched_getaffinity(0) == cpus
