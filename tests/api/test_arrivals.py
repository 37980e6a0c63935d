"""Arrival prediction (ustack.api.arrivals) and the driver's use of it: a steady spaced flow is met by a
poller that woke just before each request; aperiodic, stopped, too fast or absent traffic is not."""

from __future__ import annotations

import random

import pytest

from ustack.api.arrivals import INITIAL_WAKE_LATENCY, MAX_MISSES, MAX_WAKE_LATENCY, ArrivalPredictor
from ustack.api.driver import Driver
from ustack.stats import Stats

from .test_driver_wakeup import NoDevice, StepClock

P = 0.010  # the flow's period: a request every 10 ms


def learned(times, **kw) -> ArrivalPredictor:
    p = ArrivalPredictor(**kw)
    for t in times:
        p.received(t)
    return p


def steady(n, start=1.0, period=P):
    return [start + i * period for i in range(n)]


def test_a_first_prediction_after_three_agreeing_gaps():
    p = ArrivalPredictor()
    for t in steady(3):
        p.received(t)
        assert p.window(t + 0.001) is None  # up to 2 gaps seen: not yet
    p.received(1.03)
    assert p.period() == pytest.approx(P)


def test_early_on_every_gap_must_agree_later_all_but_two():
    early = learned([1.0, 1.01, 1.02, 1.034, 1.04])  # the 4th arrival 4 ms late, 4 gaps seen
    assert early.period() is None
    later = learned(steady(6) + [1.064, 1.07])  # the same with 6 gaps seen: two spoiled, four agree
    assert later.period() == pytest.approx(P)


def test_the_window_opens_lead_plus_wake_latency_before_the_next_arrival_and_ends_lag_after():
    p = learned(steady(7), lead=150e-6, lag=200e-6)
    start, end = p.window(1.0605)
    assert start == pytest.approx(1.07 - 150e-6 - INITIAL_WAKE_LATENCY)
    assert end == pytest.approx(1.07 + 200e-6)


def test_frames_of_one_burst_are_one_arrival():
    p = ArrivalPredictor()
    for t in steady(7):
        p.received(t)
        p.received(t + 0.0002)  # the rest of the request, 200 µs later: same arrival
    assert p.period() == pytest.approx(P)


def test_an_arrival_inside_its_window_is_reported_met_one_outside_missed():
    p = learned(steady(7))
    assert p.received(1.0701) is True  # 100 µs late: inside the lag
    assert p.received(1.0805) is False  # 500 µs late: outside
    fresh = ArrivalPredictor()
    assert fresh.received(1.0) is None  # nothing predicted yet


def test_one_late_arrival_does_not_shift_the_predictions_after_it():
    p = learned(steady(7) + [1.074])  # the 8th request came 4 ms late
    start, end = p.window(1.0741)
    assert start < 1.08 < end  # the next is still expected on the lattice, at 1.08


def test_a_jittery_flow_is_met_mostly_inside_a_window_that_stays_within_the_share():
    rng = random.Random(7)
    JITTER = 150e-6
    p = ArrivalPredictor()
    met = widths = 0
    results = []
    for i in range(300):
        at = 1.0 + i * P + rng.uniform(-JITTER, JITTER) + (4e-3 if i % 50 == 25 else 0.0)  # and a late outlier
        window = p.window(at - 0.004)
        if window is not None:
            widths = max(widths, window[1] - window[0])
        results.append(p.received(at))
    predicted = [r for r in results if r is not None]
    assert len(predicted) > 250
    assert sum(predicted) / len(predicted) > 0.8  # +-150 µs of jitter: most arrivals inside their window
    assert widths <= 0.05 * P + 1e-9  # never more than max_share of the period, wake latency included


def test_aperiodic_gaps_predict_nothing():
    p = learned([1.0, 1.010, 1.013, 1.030, 1.031, 1.052, 1.060, 1.075])
    assert p.period() is None and p.window(1.08) is None


def test_a_stopped_flow_is_given_up_after_max_misses_windows():
    p = learned(steady(7))
    last = 1.06
    for k in range(1, MAX_MISSES + 1):
        start, end = p.window(last + (k - 1) * P + 0.001)
        assert start < last + k * P < end
    assert p.window(last + MAX_MISSES * P + 0.001) is None


def test_no_prediction_when_the_window_would_cost_more_than_max_share_of_the_period():
    # 2 ms apart: 150 + 150 µs of spinning + the wake latency is over 5% of 2 ms
    assert learned(steady(7, period=0.002)).period() is None
    assert learned(steady(7, period=0.002), max_share=0.25).period() == pytest.approx(0.002)


def test_gaps_below_a_millisecond_or_above_a_second_are_not_a_spaced_flow():
    assert learned(steady(7, period=0.0005), max_share=1.0).period() is None
    assert learned(steady(7, period=2.0)).period() is None


def test_a_late_timer_opens_the_window_earlier_and_the_estimate_is_capped():
    p = learned(steady(7))
    before = p.window(1.0605)[0]
    for _ in range(20):
        p.woke_late(200e-6)
    assert p.wake_latency == pytest.approx(200e-6, rel=0.01)
    assert p.window(1.0605)[0] == pytest.approx(before - (p.wake_latency - INITIAL_WAKE_LATENCY))
    for _ in range(50):
        p.woke_late(5.0)  # a thread descheduled for seconds: not the timer's lateness
    assert p.wake_latency <= MAX_WAKE_LATENCY


def test_a_very_late_timer_keeps_the_prediction_but_not_more_than_max_share_of_spinning():
    p = learned(steady(7))
    for _ in range(30):
        p.woke_late(800e-6)  # a loaded machine: timed sleeps end 0.8 ms late
    start, end = p.window(1.0605)
    assert start < 1.07 < end
    assert end - start <= 0.05 * P + 1e-9  # a prompt wake-up would spin at most 5% of the period


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        ArrivalPredictor(lead=-1e-6)
    with pytest.raises(ValueError):
        ArrivalPredictor(max_share=float("nan"))
    with pytest.raises(ValueError):
        ArrivalPredictor(history=1)


# -- the driver -----------------------------------------------------------------


class PeriodicStack:
    """A stand-in Stack: a request arrives at each of ``arrivals``; a round receives those due by its start."""

    def __init__(self, arrivals):
        self.stats = Stats()
        self.device = NoDevice()
        self.pending = list(arrivals)
        self.seen_at = []  # (arrival, the time of the round that received it)
        self.slept = 0.0  # simulated seconds the driver spent asleep

    def poll(self, now):
        while self.pending and self.pending[0] <= now:
            self.seen_at.append((self.pending.pop(0), now))
            self.stats.inc("eth.frames_received")
        return None


def drive(arrivals, anticipate=True, until=None):
    """Run a driver over ``arrivals`` on simulated time, frames waking it from a sleep as a device fd would."""
    clock = StepClock(1.0)
    stack = PeriodicStack(arrivals)
    driver = Driver(stack, clock, busy_poll=50e-6, auto_start=False, anticipate=anticipate)
    sleeps = []

    def sleep(timeout, kicks=None):
        before = clock.t
        try:
            return _sleep(timeout)
        finally:
            stack.slept += clock.t - before

    def _sleep(timeout):
        wake = clock.t + (timeout if timeout is not None else 0.5)
        due = stack.pending[0] if stack.pending else None
        if due is not None and due < wake:
            clock.t = due + 40e-6  # woken by the frame: 40 µs of wake-up latency after it arrived
            sleeps.append((timeout, "frame", wake - (timeout or 0.5)))
            return True
        clock.t = wake + 30e-6  # the timer: 30 µs late
        sleeps.append((timeout, "timer", wake - (timeout or 0.5)))
        return False

    driver._sleep = sleep
    end = until if until is not None else arrivals[-1] + 0.005
    driver.wait_until(lambda: clock.t >= end, None)
    driver.close()
    return stack, sleeps


def test_the_driver_meets_a_steady_flow_awake_once_it_has_learned_it():
    arrivals = steady(30, start=1.01)
    stack, sleeps = drive(arrivals)
    delays = [seen - at for at, seen in stack.seen_at]
    assert all(d >= 40e-6 for d in delays[:4])  # learning: each request wakes the sleeping poller
    assert max(delays[4:]) < 10e-6  # then each is seen within a spin round or so
    assert stack.stats["driver.anticipated"] == len(arrivals) - 4
    assert stack.stats["driver.anticipation_missed"] == 0
    woken_by_frame = [s for s in sleeps if s[1] == "frame"]
    assert len(woken_by_frame) == 4  # afterwards the sleeps end by their timers, before the requests


def test_the_driver_spins_a_bounded_share_of_each_period():
    arrivals = steady(40, start=1.01)
    stack, _ = drive(arrivals)
    span = arrivals[-1] + 0.005 - 1.0
    assert 0 < (span - stack.slept) / span < 0.05  # awake (spinning or working) under 5% of the time


def test_without_anticipation_every_request_finds_the_poller_asleep():
    stack, _ = drive(steady(30, start=1.01), anticipate=False)
    assert all(seen - at >= 40e-6 for at, seen in stack.seen_at)
    assert stack.stats["driver.anticipated"] == 0


def test_a_stopped_flow_costs_at_most_max_misses_windows_then_the_driver_sleeps():
    arrivals = steady(20, start=1.01)
    stack, sleeps = drive(arrivals, until=arrivals[-1] + 0.2)
    after = [timeout for timeout, _, at in sleeps if at > arrivals[-1]]
    # after the last request: a sleep up to each of the MAX_MISSES windows, then until told otherwise
    assert all(t is not None and t < P for t in after[:MAX_MISSES])
    assert all(t is None for t in after[MAX_MISSES:]) and len(after) > MAX_MISSES
