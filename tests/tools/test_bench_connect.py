"""``ustack.tools.bench_connect``: connection setup through the socket layer, both sides, a short real run."""

from __future__ import annotations

import pytest

from ustack.tools import bench_connect


def test_bad_arguments_are_refused(capsys):
    for argv in (["--side", "listen"], ["--rows", "lwip"], ["--seconds", "0"], ["--reps", "0"], ["--side", ""]):
        with pytest.raises(SystemExit) as exc:
            bench_connect.main(argv)
        assert exc.value.code == 2
    assert "--side takes connect and/or accept" in capsys.readouterr().err


@pytest.mark.privileged
@pytest.mark.parametrize("thread", [True, False], ids=["driver-thread", "caller-polls"])
def test_both_sides_complete_connections_on_ustack(privileged, thread):
    row = bench_connect.run_row("ustack", "packet", ["connect", "accept"], 0.3, 1, thread=thread)
    for side in ("connect", "accept"):
        r = row[side]
        assert r["rate"] > 20, (side, r)  # hundreds per second even on a loaded machine
        assert 0 < r["connect_p50"] < 100_000 and r["cpu_per_conn"] > 0, (side, r)
        assert len(r["runs"]) == 1
