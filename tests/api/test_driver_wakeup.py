"""The Driver's wait policy: busy-poll budget re-armed by rounds that did work; every sleeper woken by a kick;
one leader polls while followers sleep until their condition holds or the lead passes to them; the thread
survives poll errors."""

from __future__ import annotations

import threading
import time

import pytest

from ustack.api.driver import Driver
from ustack.stats import Stats


class StepClock:
    """Each reading is 1 µs after the last: a deterministic clock for counting spin rounds."""

    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        self.t += 1e-6
        return self.t


class NoDevice:
    def fileno(self) -> int:
        return -1


class Timers:
    """The stand-in's timer heap: its next deadline is whatever the test sets."""

    def __init__(self):
        self.next = None

    def next_deadline(self):
        return self.next


class ScriptedStack:
    """A stand-in Stack: round i 'receives a frame' when i is in ``busy_rounds``; may raise on chosen rounds."""

    def __init__(self, busy_rounds=(), raise_rounds=()):
        self.stats = Stats()
        self.timers = Timers()
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
    driver._sleep = lambda timeout, kicks=None: slept.append(stack.rounds)
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


def test_one_kick_wakes_every_sleeping_thread(monkeypatch):
    """Found by the corpus (http.server under ustack run, pinned to one CPU): with one shared wake-up pipe
    the first thread to wake drained it and poll(2) put the others back to sleep for MAX_SLEEP (0.5 s),
    a request's data waiting meanwhile. Each sleeper now has its own pipe."""
    from ustack.api import driver as driver_module

    monkeypatch.setattr(driver_module, "MAX_SLEEP", 60.0)  # a lost wake-up would be a 60 s sleep
    stack = ScriptedStack()
    stack.timers.next = 0.0  # the call that kicks armed a timer that is due at once
    driver = Driver(stack, busy_poll=0.0, auto_start=False)
    sleepers = [threading.Thread(target=driver._sleep, args=(None,)) for _ in range(3)]
    try:
        for t in sleepers:
            t.start()
        deadline = time.monotonic() + 10
        while len(driver._sleeping) < 3 and time.monotonic() < deadline:  # until all three are asleep
            time.sleep(0.001)
        assert len(driver._sleeping) == 3
        driver.kick()
        for t in sleepers:
            t.join(10)
        assert not any(t.is_alive() for t in sleepers), "a kick did not wake every sleeper"
        assert len(driver._free) == 3 and not driver._sleeping  # the pipes go back to the free list
    finally:
        driver.kick()
        for t in sleepers:
            t.join(1)
        driver.close()


def test_a_kick_that_moves_no_timer_writes_no_pipe_and_one_that_does_wakes_the_sleeper(monkeypatch):
    """A user call (a send, a recv) kicks; the poller asleep until its deadline has nothing to do sooner
    unless the call armed a timer before that deadline: only then is its pipe written (issue 30: every call
    woke the sleeping driver thread for a round with nothing in it)."""
    from ustack.api import driver as driver_module

    monkeypatch.setattr(driver_module, "MAX_SLEEP", 60.0)
    stack = ScriptedStack()
    driver = Driver(stack, busy_poll=0.0, auto_start=False)
    woke = threading.Event()
    t = threading.Thread(target=lambda: (driver._sleep(30.0), woke.set()))
    t.start()
    try:
        assert until(lambda: len(driver._sleeping) == 1)
        stack.timers.next = driver.clock() + 40.0  # a timer after the sleeper's own wake-up (30 s)
        driver.kick()
        assert not woke.wait(0.2), "a kick that moved no deadline woke the sleeper"
        stack.timers.next = driver.clock() + 1.0  # now one before it
        driver.kick()
        assert woke.wait(10), "a kick that armed an earlier timer did not wake the sleeper"
    finally:
        driver.kick(force=True)
        t.join(5)
        driver.close()


def test_a_kick_after_the_last_look_cancels_the_sleep(monkeypatch):
    from ustack.api import driver as driver_module

    monkeypatch.setattr(driver_module, "MAX_SLEEP", 60.0)
    driver = Driver(ScriptedStack(), busy_poll=0.0, auto_start=False)
    seen = driver._kicks
    driver.kick()  # nobody asleep yet: nothing to write to, only the sequence moves
    done = threading.Event()
    t = threading.Thread(target=lambda: (driver._sleep(None, seen), done.set()))
    t.start()
    try:
        assert done.wait(10), "slept although a kick came after the caller's last look"
    finally:
        driver.kick()
        t.join(1)
        driver.close()


class TickingStack(ScriptedStack):
    """Rounds 0.5 ms apart (each returns a deadline); records which thread ran each round; ``fire_at``
    is the round that 'receives the frame' a follower waits for (``arrived`` becomes True)."""

    def __init__(self):
        super().__init__()
        self.pollers: list[int] = []
        self.fire_at = None
        self.arrived = False

    def poll(self, now):
        self.rounds += 1
        self.pollers.append(threading.get_ident())
        if self.rounds == self.fire_at:
            self.arrived = True
            self.stats.inc("eth.frames_received")
        return now + 0.0005


def until(cond, seconds=10.0):
    end = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.0005)
    return True


@pytest.fixture
def no_long_sleeps(monkeypatch):
    """A lost wake-up or a missed hand-off would now be a 60 s sleep: the joins below catch it."""
    from ustack.api import driver as driver_module

    monkeypatch.setattr(driver_module, "MAX_SLEEP", 60.0)


def test_a_follower_is_woken_by_the_leaders_round_that_makes_its_condition_true(no_long_sleeps):
    stack = TickingStack()
    driver = Driver(stack, busy_poll=0.0, auto_start=False)
    stop_leader = threading.Event()
    leader = threading.Thread(target=driver.wait_until, args=(stop_leader.is_set, 30))
    got = []
    follower = threading.Thread(target=lambda: got.append(driver.wait_until(lambda: stack.arrived, 30)))
    try:
        leader.start()
        assert until(lambda: driver._leader == leader.ident)
        follower.start()
        assert until(lambda: follower.ident in driver._followers)
        stack.fire_at = stack.rounds + 10
        follower.join(10)
        assert got == [True], "the follower was not woken when its condition came true"
        assert follower.ident not in stack.pollers  # it never polled: the leader's round woke it
        assert driver._leader == leader.ident and not driver._followers
    finally:
        stop_leader.set()
        leader.join(10)
        follower.join(1)
        driver.close()
    assert not leader.is_alive()


def test_the_lead_passes_to_a_follower_when_the_leader_is_done(no_long_sleeps):
    stack = TickingStack()
    driver = Driver(stack, busy_poll=0.0, auto_start=False)
    stop_leader = threading.Event()
    leader = threading.Thread(target=driver.wait_until, args=(stop_leader.is_set, 30))
    follower = threading.Thread(target=driver.wait_until, args=(lambda: stack.rounds >= 400, 30))
    try:
        leader.start()
        assert until(lambda: driver._leader == leader.ident)
        follower.start()
        assert until(lambda: follower.ident in driver._followers)
        stop_leader.set()
        leader.join(10)
        follower.join(10)  # it must lead to see round 400 come
        assert not follower.is_alive(), "the lead was not handed to the waiting follower"
        assert follower.ident in stack.pollers and driver._leader is None
    finally:
        stop_leader.set()
        driver.close()


def test_a_blocking_caller_takes_the_lead_from_the_background_thread_and_gives_it_back(no_long_sleeps):
    stack = TickingStack()
    driver = Driver(stack, busy_poll=0.0)
    driver.start()
    try:
        assert until(lambda: driver._leader == driver._bg_ident is not None)
        me = threading.get_ident()
        target = stack.rounds + 20
        assert driver.wait_until(lambda: stack.rounds >= target, 10)
        assert stack.pollers[-20:].count(me) >= 15  # this thread polled (the thread may finish a round)
        assert until(lambda: driver._leader == driver._bg_ident), "the background thread did not lead again"
    finally:
        driver.close()


def test_a_wake_fd_is_made_readable_by_every_kick_until_released():
    import select

    driver = Driver(ScriptedStack(), busy_poll=0.0, auto_start=False)
    waker = driver.wake_fd()
    try:
        assert select.select([waker.r], [], [], 0)[0] == []
        driver.kick()
        assert select.select([waker.r], [], [], 1)[0] == [waker.r]
        waker.drain()
        assert select.select([waker.r], [], [], 0)[0] == []
    finally:
        driver.release_wake_fd(waker)
        driver.close()
    assert waker not in driver._sleeping


def test_a_kick_from_a_finalizer_inside_the_sleepers_lock_does_not_deadlock():
    """Found by a CI run: a socket's __del__ (a garbage collection starting inside an allocation made
    under the driver's sleepers lock) called kick(), which took the same plain lock again and hung the
    thread. kick() no longer takes it."""
    driver = Driver(ScriptedStack(), busy_poll=0.0, auto_start=False)
    waker = driver.wake_fd()
    done = threading.Event()

    def finalizer_during_sleep_bookkeeping():
        with driver._sleepers_lock:  # as _sleep() holds it while it takes a waker
            driver.kick()  # what SocketBase.__del__ -> close() does
        done.set()

    t = threading.Thread(target=finalizer_during_sleep_bookkeeping, daemon=True)
    t.start()
    try:
        assert done.wait(10), "kick() deadlocked on the sleepers lock"
        import select

        assert select.select([waker.r], [], [], 1)[0] == [waker.r]  # and it still woke the sleeper
    finally:
        driver.release_wake_fd(waker)
        driver.close()
    waker.wake()  # a late wake of a released waker writes nowhere


# -- issue 25, item 11c: a wake racing its waker's close never writes to a reused fd number -------------------
def test_a_wake_racing_a_close_never_writes_to_the_fd_number_reused_after_it(monkeypatch):
    import os

    from ustack.api import driver as driver_module

    waker = driver_module._Waker()
    old_w = waker.w
    closer_blocked, closer_done, either = threading.Event(), threading.Event(), threading.Event()
    reused = {}

    class Watched:
        """The waker's lock, telling the test when the closer is waiting on it."""

        def __init__(self, lock):
            self.lock = lock

        def __enter__(self):
            if threading.current_thread() is closer:
                closer_blocked.set()
                either.set()
            return self.lock.__enter__()

        def __exit__(self, *exc):
            return self.lock.__exit__(*exc)

    if hasattr(waker, "_lock"):
        waker._lock = Watched(waker._lock)

    def close_and_reuse():
        waker.close()
        r, w = os.pipe()  # POSIX: the lowest free numbers, the waker's own
        os.set_blocking(r, False)
        reused.update(r=r, w=w)
        closer_done.set()
        either.set()

    closer = threading.Thread(target=close_and_reuse)
    real_write = os.write

    def write(fd, data):
        if fd == old_w and not closer.is_alive() and not closer_done.is_set():
            closer.start()  # the close comes between the wake's look at the fd and its write
            assert either.wait(10)
        return real_write(fd, data)

    monkeypatch.setattr(driver_module.os, "write", write)
    waker.wake()
    closer.join(10)
    assert closer_done.is_set() and reused["w"] == old_w  # the number was handed out again
    try:
        stray = os.read(reused["r"], 16)
    except BlockingIOError:
        stray = b""
    finally:
        os.close(reused["r"])
        os.close(reused["w"])
    assert stray == b""  # the wake's byte went to its own pipe, before the close: not into the new one
    assert closer_blocked.is_set()


class WatchedDevice(NoDevice):
    """A device with a receive ring word (``rx_watch``): the leader's spin waits on it in C."""

    def __init__(self):
        from ustack._fastpath import RxWatch

        self.ring = bytearray(64)
        self.watch = RxWatch.tp_status(self.ring)
        self.watch.at(0)

    def rx_watch(self):
        return self.watch


def test_the_busy_poll_waits_on_the_devices_ring_word_without_the_gil(monkeypatch):
    """Between rounds the leader spins in ustack._fastpath.spin_wait on the device's RxWatch (no Python
    round per turn, the GIL free); it ends on time when no frame comes, and the budget still ends in a sleep."""
    from ustack.api import driver as driver_mod

    stack = ScriptedStack(busy_rounds=range(1, 4))
    stack.device = WatchedDevice()
    waits = []
    real = driver_mod.spin_wait
    monkeypatch.setattr(driver_mod, "spin_wait", lambda w, s: waits.append((w, s)) or real(w, s))
    driver = Driver(stack, StepClock(), busy_poll=6e-6, auto_start=False)
    slept = []
    driver._sleep = lambda timeout, kicks=None: slept.append(stack.rounds)
    driver.wait_until(lambda: stack.rounds >= 12, None)
    driver.close()
    assert waits and all(w is stack.device.watch and 0 < s <= 6e-6 for w, s in waits), waits
    assert 3 <= len(waits) <= 8 and slept and slept[0] >= 3, (waits, slept)  # rounds 1-3 re-armed the budget


def test_a_leader_that_wakes_its_one_follower_gives_the_lead_up_so_the_woken_thread_polls_next(no_long_sleeps):
    """An accept()-like leader whose round brings a connection thread its data steps down to the background
    thread and waits as a follower; the connection thread's next wait takes the lead and its next data is
    found by its own round: it runs at once, with no hand-off through the accepting thread (issue 30)."""
    stack = TickingStack()
    driver = Driver(stack, busy_poll=0.0)
    driver.start()
    stop_acceptor = threading.Event()
    acceptor = threading.Thread(target=driver.wait_until, args=(stop_acceptor.is_set, 30))
    firsts, seconds = [], []

    def connection_thread():
        firsts.append(driver.wait_until(lambda: stack.arrived, 30))  # its first request: the leader relays it
        stack.arrived = False
        stack.fire_at = stack.rounds + 10
        seconds.append(driver.wait_until(lambda: stack.arrived, 30))  # its next: found by its own rounds

    conn = threading.Thread(target=connection_thread)
    try:
        acceptor.start()
        assert until(lambda: driver._leader == acceptor.ident)
        conn.start()
        assert until(lambda: conn.ident in driver._followers)
        stack.fire_at = stack.rounds + 10
        conn.join(10)
        assert firsts == [True] and seconds == [True]
        fired = stack.fire_at
        assert stack.pollers[fired - 1] == conn.ident, "the second request was relayed by another thread"
        assert until(lambda: acceptor.ident in driver._followers)  # the acceptor waits on, as a follower
    finally:
        stop_acceptor.set()
        driver.kick(force=True)
        acceptor.join(10)
        conn.join(1)
        driver.close()
    assert not acceptor.is_alive()
