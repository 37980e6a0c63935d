"""``ustack run`` gives an unmodified asyncio program the native loop (and the stock one with a switch)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from ustack.api.aio import EventLoop, EventLoopPolicy
from ustack.api.session import from_environment, settings

PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")
RUN_PIPE = ("run", "--backend", "pipe", "--addr", "198.18.0.2/24")


def _ustack(*argv):
    return subprocess.run([sys.executable, "-m", "ustack", *argv], capture_output=True, text=True, timeout=60,
                          cwd=PROGRAMS)


@pytest.mark.parametrize("mode, loop_module", [
    ((), "ustack.api.aio.loop"),
    (("--asyncio", "stock"), "asyncio.unix_events"),
])
def test_unmodified_asyncio_program_under_ustack_run(mode, loop_module):
    out = _ustack(*RUN_PIPE, *mode, "aio_echo.py", "198.18.0.3")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "udp datagram from asyncio 198.18.0.3 7",
        f"tcp {1 << 20} True",
        f"loop {loop_module}",
    ], out.stdout + out.stderr


def test_asyncio_mode_from_the_environment():
    assert settings({"USTACK_ADDR": "198.18.0.2/24", "USTACK_ASYNCIO": "stock"})["asyncio"] == "stock"
    with pytest.raises(ValueError, match="unknown asyncio mode"):
        from_environment({"USTACK_ADDR": "198.18.0.2/24", "USTACK_BACKEND": "pipe", "USTACK_ASYNCIO": "fast"})
    session = from_environment({"USTACK_ADDR": "198.18.0.2/24", "USTACK_BACKEND": "pipe"})
    try:
        assert isinstance(asyncio.get_event_loop_policy(), EventLoopPolicy)
        loop = asyncio.new_event_loop()
        assert isinstance(loop, EventLoop) and loop.driver is session.driver
        loop.close()
    finally:
        session.close()
    assert not isinstance(asyncio.get_event_loop_policy(), EventLoopPolicy)


def test_bench_aio_pipe_runs_both_loops_and_reports_positive_medians():
    from ustack.tools.bench_aio import run_pipe

    for native in (True, False):
        latency_us, transfer_ms = run_pipe(native, rounds=20, transfers=1)
        assert 0 < latency_us < 1e6 and 0 < transfer_ms < 1e5
