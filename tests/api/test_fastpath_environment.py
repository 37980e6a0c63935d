"""USTACK_FASTPATH reaches stacks through the adapters (ustack.api.environment), never through the core."""

from __future__ import annotations

import pytest

from tests.tcp.harness import FakeHost
from ustack.api import environment
from ustack.api.clock import ManualClock
from ustack.api.loopback import close_loopback, open_loopback
from ustack.api.session import Session, settings
from ustack.backends.pipe import PipeLink
from ustack.stack import Stack
from ustack.timers import TimerHeap
from ustack.transport.tcp import TcpLayer


def _fast(stack) -> bool:
    """The stack's switch, and that its receive demux really is wired to the C flow table or not."""
    assert (stack._tcp_flows is not None) == stack.tcp.fastpath
    return stack.tcp.fastpath


@pytest.mark.parametrize("value, fast", [(None, True), ("1", True), ("", True), ("yes", True), ("0", False)])
def test_the_variable_means_off_only_at_zero(value, fast):
    assert environment.fastpath({} if value is None else {"USTACK_FASTPATH": value}) is fast


def test_the_core_reads_no_environment(monkeypatch):
    monkeypatch.setenv("USTACK_FASTPATH", "0")
    clock = ManualClock(1.0)
    assert TcpLayer(FakeHost(clock, TimerHeap())).fastpath is True  # the option's default, whatever the variable
    assert TcpLayer(FakeHost(clock, TimerHeap()), fastpath=False).fastpath is False


def test_the_suites_stacks_follow_its_pass():
    # Differs between CI's two runs: on in the first, off under USTACK_FASTPATH=0 (tests/conftest.py).
    link = PipeLink(ManualClock(1.0))
    try:
        assert _fast(Stack(link.a, "198.18.0.1/24")) is environment.fastpath()
        assert _fast(Stack(link.b, "198.18.0.2/24", fastpath=True)) is True  # explicit wins in both passes
    finally:
        link.close()


@pytest.mark.parametrize("value", ["0", "1"])
def test_session_and_its_loopback_follow_the_variable(monkeypatch, value):
    monkeypatch.setenv("USTACK_FASTPATH", value)
    session = Session("pipe", "198.18.0.2/24", loopback=True)
    try:
        assert _fast(session.stack) is (value == "1")
        assert _fast(session.loopback.stack) is (value == "1")
    finally:
        session.close()
    session = Session("pipe", "198.18.0.2/24", fastpath=value == "0")  # an explicit option wins
    try:
        assert _fast(session.stack) is (value == "0")
    finally:
        session.close()


def test_open_loopback_follows_the_variable(monkeypatch):
    monkeypatch.setenv("USTACK_FASTPATH", "0")
    lo = open_loopback(ManualClock(1.0))
    try:
        assert _fast(lo.stack) is False
    finally:
        close_loopback(lo)


def test_settings_carry_the_variable_of_the_given_environment():
    env = {"USTACK_ADDR": "198.18.0.2/24", "USTACK_BACKEND": "pipe"}
    assert "fastpath" not in settings(env)  # unset: Session asks the process environment itself
    assert settings({**env, "USTACK_FASTPATH": "0"})["fastpath"] is False
    assert settings({**env, "USTACK_FASTPATH": "1"})["fastpath"] is True
