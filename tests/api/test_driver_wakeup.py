"""The Driver's wait policy: busy-poll budget re-armed by rounds that did work; the thread survives poll errors."""

from __future__ import annotations

import threading

import pytest

from ustack.api.driver import Driver
from ustack.stats import Stats


class StepClock:
    """Each reading is 1 µs after the last: a deterministic clock for counting spin rounds."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1e-6
        return self.t


class NoDevice:
    def fileno(self) -> int:
        return -1


class ScriptedStack:
    """A stand-in Stack: round i 'receives a frame' when i is in ``busy_rounds``; may raise on chosen rounds."""

    def __init__(self, busy_rounds=(), raise_rounds=()):
        self.stats = Stats()
        self.device = NoDevice()
        self.rounds = 0
        self.busy_rounds = set(busy_rounds)
        self.raise_rounds = set(raise_rounds)
        self.polled = threading.Event()

    def poll(self, now):
        self.rounds += 1
        if self.rounds in self.raise_rounds:
            raise ZeroDivisionError("a bug in the stack")
        if self.rounds in self.busy_rounds:
            self.stats.inc("eth.frames_received")
        if self.rounds > max(self.raise_rounds, default=0):
            self.polled.set()
        return None


def sleeps_during(stack, busy_poll, rounds=60):
    """Drive wait_until for ``rounds`` rounds; the rounds after which it went to sleep."""
    driver = Driver(stack, StepClock(), busy_poll=busy_poll, auto_start=False)
    slept = []
    driver._sleep = lambda timeout: slept.append(stack.rounds)
    driver.wait_until(lambda: stack.rounds >= rounds, None)
    driver.close()
    return slept


def test_the_budget_is_rearmed_after_every_round_that_received_frames():
    stack = ScriptedStack(busy_rounds=range(1, 21))  # frames keep arriving for 20 rounds, then nothing
    slept = sleeps_during(stack, busy_poll=6e-6)  # ~3 rounds of spinning on the step clock
    assert slept, "an idle stack must go to sleep"
    assert 20 < slept[0] <= 24, slept  # spun through the busy rounds, slept soon after the last one
    assert slept == list(range(slept[0], 60)), slept  # idle afterwards: every round ends in a sleep


def test_without_work_the_budget_is_spent_once_then_it_sleeps():
    slept = sleeps_during(ScriptedStack(), busy_poll=6e-6)
    assert 1 <= slept[0] <= 4 and slept == list(range(slept[0], 60)), slept


def test_busy_poll_zero_never_spins():
    slept = sleeps_during(ScriptedStack(busy_rounds=range(1, 21)), busy_poll=0.0)
    assert slept == list(range(1, 60))  # the 60th round meets the predicate: no sleep


def test_busy_poll_must_be_a_nonnegative_number():
    with pytest.raises(ValueError):
        Driver(ScriptedStack(), StepClock(), busy_poll=-1e-6)
    with pytest.raises(ValueError):
        Driver(ScriptedStack(), StepClock(), busy_poll=float("nan"))


def test_the_thread_counts_an_exception_from_stack_poll_and_keeps_polling():
    stack = ScriptedStack(raise_rounds={1, 2})
    driver = Driver(stack, busy_poll=0.0)
    driver.start()
    try:
        assert stack.polled.wait(10), "the driver thread died on the exception"
        assert driver._thread.is_alive()
    finally:
        driver.close()
    assert stack.stats["driver.poll_error.ZeroDivisionError"] == 2
    assert isinstance(driver.last_error, ZeroDivisionError)
