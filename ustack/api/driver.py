"""The driver: runs a Stack's poll loop for blocking callers and background threads.

This is an adapter on top of the core, so it may read a clock, sleep and
start a thread. The wait policy (DESIGN.md "How the stack runs"):

- a blocking call polls the stack itself until its condition holds or its
  timeout passes (the caller's thread becomes the poller);
- it spins on the RX ring for a ``busy_poll`` budget (like Linux's
  SO_BUSY_POLL / net.core.busy_poll), then sleeps in poll() on the device's
  fd and a wake-up pipe until the stack's next deadline. The budget is
  re-armed after every round that received frames, so a flow that keeps
  arriving is caught while spinning instead of paying a wake-up from a
  halted vCPU with cold caches each time (tens to hundreds of µs here);
  a truly idle stack spins at most once and then sleeps (~0% CPU).
  ``busy_poll=0`` never spins; a budget longer than a flow's spacing
  (e.g. 0.02 s against pings 10 ms apart) keeps the thread awake, and one
  CPU busy, for as long as that flow lasts;
- a steady spaced flow (requests every few ms, each finding the stack
  asleep) is anticipated (``anticipate``, ustack.api.arrivals): once its
  period is known the leader sleeps until just before the next request is
  due and spins through a short window around it, so the request meets an
  awake thread instead of paying the wake-up; at most a few % of one CPU
  for such a flow, nothing when idle. Sleeps are timed to the µs
  (select(2)'s timeval; poll(2) rounds its timeout up to whole ms);
- the rest of a write is waited for (``push_wait``): when a spinning
  leader's round ends on a TCP data segment without PSH (its sender's
  write goes on, RFC 9293 3.9.1.2), the next rounds take the following
  frames before the stack's TCP flush (``Stack.poll(hold=True)``), so the
  application reads the write in one piece and answers it in one burst
  (one notification, one output, one TX kick, instead of one per RX burst
  the write happened to straddle). Bounded: the flush waits at most
  ``push_wait`` after the last frame received and ``PUSH_HOLD_MAX`` in all
  (and ``PUSH_HOLD_ROUNDS`` empty rounds, whatever the clock does); only
  the leader's spin loop holds, never ``poll()``. ``push_wait=0``: never;
- one lock makes sure one thread touches the stack at a time; sleeping
  happens outside the lock, so other threads can send meanwhile, and they
  write to the wake-up pipe when they may have moved a deadline earlier;
- leader and followers: of the threads waiting at one time, one polls
  (the leader) and the others (followers) each sleep on an Event of their
  own. After every round that received frames or ran timers, the leader
  checks each follower's condition and wakes only those whose condition
  now holds (no herd, no second poller racing for the same frames); when
  the leader's own wait ends it hands the role to a follower (or to the
  background thread). An application thread takes the role from the
  background thread, so a lone blocking caller polls for itself and pays
  no thread hand-off. While it spins, a leader with followers yields the
  CPU between rounds so a woken follower gets the GIL at once instead of
  after the interpreter's 5 ms switch interval;
- ``start()`` runs a background thread that keeps timers, ACKs and
  retransmissions going for programs that do not call into their sockets;
  the first socket that hands out its ``fileno()`` (a readiness fd, see
  ``ustack.api.readiness``) starts it (``ensure_running``), since a
  program waiting in select() on socket fds polls nothing itself. An
  exception escaping ``Stack.poll`` in that thread is counted
  (``driver.poll_error.<Type>``), kept in ``last_error``, and the thread
  goes on after a short back-off instead of dying silently.
- a socket's finalizer (``__del__`` on a garbage collection) may run
  anywhere: inside the stack's own poll, in another thread, under any
  lock. It takes no lock and sends nothing: ``defer(fn)`` queues the
  release of its protocol object and wakes a sleeping poller, and the next
  round runs ``fn`` under the lock before ``Stack.poll``, whose flush then
  sends the FIN or RST.
"""

from __future__ import annotations

import collections
import os
import select
import socket
import threading
from typing import Callable, Optional

from ustack.api.arrivals import ArrivalPredictor
from ustack.api.clock import ManualClock, MonotonicClock

try:
    from ustack._fastpath import spin_wait
except ImportError:  # no compiled extension: spin in Python
    spin_wait = None

MAX_SLEEP = 0.5  # never sleep longer than this without re-checking (signals, stop requests)
DEFAULT_BUSY_POLL = 50e-6  # seconds of spinning after a round that received frames
DEFAULT_PUSH_WAIT = 10e-6  # a held TCP flush waits this long for the next frame of the write
PUSH_HOLD_MAX = 100e-6  # and this long in all
PUSH_HOLD_ROUNDS = 64  # and at most this many rounds that received nothing (a clock that does not move)
ERROR_BACKOFF = 0.01  # the background thread's pause after Stack.poll raised (no hot error loop)
STEP_DOWN_FOLLOWERS = 2  # a leader steps down for a woken follower only with this few followers (_lead)
_STEPPED_DOWN = object()  # _lead's answer when it gave the lead to the background thread
_RX_COUNTER = "eth.frames_received"  # the Stack counts every received frame here: "the round did work"
TIMER_SLACK_NS = 1000  # a polling thread's timer slack (prctl PR_SET_TIMERSLACK; Linux's default: 50 µs)
_SELECT_FD_LIMIT = 1024  # FD_SETSIZE: select(2) takes fds below it; poll(2) any (but rounds timeouts to ms)


class Driver:
    """Who polls one Stack: the clock, the lock, blocking waits and the optional background thread.

    Sockets are made on a driver (``driver.socket(...)`` or
    ``ustack.api.socket.socket(driver, ...)``); every socket of a stack
    shares its one driver.

    Args:
        stack: the :class:`~ustack.stack.Stack` to poll.
        clock: a callable returning seconds (default: a new :class:`~ustack.api.clock.MonotonicClock`;
            a :class:`~ustack.api.clock.ManualClock` for simulated time).
        busy_poll: seconds to spin on the device before sleeping (default 50 µs).
        auto_start: start the background thread when a socket hands out its readiness fd
            (default: on).
        anticipate: sleep only until just before the next request of a steady spaced flow.
        push_wait: how long a round may hold the TCP flush for the rest of a split write (default 10 µs).

    Raises:
        ValueError: a negative ``busy_poll``, or ``push_wait`` outside 0..100 µs.
    """

    def __init__(self, stack, clock=None, *, busy_poll: float = DEFAULT_BUSY_POLL,
                 auto_start: Optional[bool] = None, anticipate=False, push_wait: float = DEFAULT_PUSH_WAIT):
        if not busy_poll >= 0:
            raise ValueError(f"busy_poll must be a number of seconds >= 0, not {busy_poll!r}")
        if not 0 <= push_wait <= PUSH_HOLD_MAX:
            raise ValueError(f"push_wait must be 0..{PUSH_HOLD_MAX} seconds, not {push_wait!r}")
        self.push_wait = push_wait if hasattr(stack, "flush_held") else 0.0  # a stack that can hold its flush
        self._held_since: Optional[float] = None  # the first round of a held TCP flush, its last frame's round
        self._held_rx = 0.0
        self._held_empty = 0
        self.stack = stack
        # True: anticipate steady spaced flows with the default predictor; False/None (the default,
        # as Linux's busy polling is opt-in): never;
        # or an ArrivalPredictor of one's own (its lead, lag and CPU share)
        self.arrivals: Optional[ArrivalPredictor] = (
            ArrivalPredictor() if anticipate is True else (anticipate or None))
        # None: start on demand unless time is manual (a test driving a ManualClock polls by itself,
        # and a thread waiting for a clock that does not move would spin)
        self.auto_start = not isinstance(clock, ManualClock) if auto_start is None else auto_start
        self.clock = clock or MonotonicClock()
        self.busy_poll = busy_poll
        self.lock = StackLock()
        # each sleeping thread waits on a wake-up pipe of its own (taken from a free list): with one
        # shared pipe, the first thread to wake drains it and poll(2) puts the others back to sleep
        self._sleeping: set[_Waker] = set()
        self._free: list[_Waker] = []
        self._sleepers_lock = threading.Lock()
        self._closed = False
        self._kicks = 0  # bumped by every kick(): a waiter that saw an older value does not go to sleep
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        # leader and followers (guarded by self.lock): the thread polling now, the others waiting
        self._leader: Optional[int] = None
        self._followers: dict[int, _Follower] = {}
        self._bg_ident: Optional[int] = None
        self._bg_event = threading.Event()  # the background thread's turn to lead
        self.deadline: Optional[float] = None
        self.last_error: Optional[BaseException] = None  # the last exception the background thread survived
        self._woken = 0  # followers woken by rounds so far (a leader that woke one steps down: _lead)
        self._deferred: collections.deque = collections.deque()  # finalizers' releases, for the next round
        # the device's "frames are waiting" word, for a busy-poll without the GIL (ustack._fastpath.spin_wait);
        # None for a device without one (the pipe, TAP, a decorator): then the spin is a Python loop
        watch = getattr(stack.device, "rx_watch", None) if spin_wait is not None else None
        self._rx_watch: Optional[Callable[[], object]] = watch

    def socket(self, family: int = socket.AF_INET, type: int = socket.SOCK_STREAM, proto: int = 0):
        """A stdlib-shaped socket on this driver's stack (see ``ustack.api.socket``).

        Args:
            family: ``AF_INET`` (default) or ``AF_INET6``.
            type: ``SOCK_STREAM`` (default) or ``SOCK_DGRAM``, with SOCK_NONBLOCK / SOCK_CLOEXEC.
            proto: 0 or the protocol's number.

        Returns:
            A :class:`~ustack.api.stream.StreamSocket` or :class:`~ustack.api.dgram.DatagramSocket`.

        Raises:
            OSError: EAFNOSUPPORT for another family, EPROTONOSUPPORT for another type.
        """
        from ustack.api.socket import socket as make_socket

        return make_socket(self, family, type, proto)

    # -- one round ------------------------------------------------------------
    def poll(self) -> Optional[float]:
        """One round of the stack (under the lock); returns its next deadline.

        Returns:
            The next deadline on the driver's clock, or ``None`` when nothing is scheduled.
        """
        return self._round()[0]

    def _round(self, hold: bool = False) -> tuple[Optional[float], bool]:
        """One round: (next deadline, whether it received frames).

        A round that received frames or ran timers wakes the followers whose condition now holds.
        """
        with self.lock:
            self.run_deferred()
            stats = self.stack.stats
            received = stats[_RX_COUNTER]
            now = self.clock()
            due = self.deadline is not None and now >= self.deadline
            if hold and self.push_wait and (self._held_since is None or self._may_hold(now)):
                self.deadline = self.stack.poll(now, hold=True)
                worked = stats[_RX_COUNTER] != received
                if self.stack.flush_held or self._held_since is not None:
                    self._note_hold(now, worked)
            else:
                self.deadline = self.stack.poll(now)
                worked = stats[_RX_COUNTER] != received
                self._held_since = None
            if worked and self.arrivals is not None:
                met = self.arrivals.received(now)
                if met is not None:  # an arrival of a steady flow: did it find the poller awake?
                    stats.inc("driver.anticipated" if met else "driver.anticipation_missed")
            if (worked or due) and self._followers:
                self._wake_followers()
            return self.deadline, worked

    def _unhold(self, result: bool) -> bool:
        """A leader leaving its loop flushes what its rounds held (under the lock); returns ``result``."""
        if self.push_wait and self.stack.flush_held:
            self._round()
        return result

    def _may_hold(self, now: float) -> bool:
        """May this round leave the TCP flush to a later one (a flush already held: within the bounds)?"""
        since = self._held_since
        return (now - self._held_rx < self.push_wait and now - since < PUSH_HOLD_MAX
                and self._held_empty < PUSH_HOLD_ROUNDS)

    def _note_hold(self, now: float, worked: bool) -> None:
        if not self.stack.flush_held:
            self._held_since = None
            return
        if self._held_since is None:
            self._held_since = now
            self._held_empty = 0
        if worked:
            self._held_rx = now
        else:
            self._held_empty += 1

    def defer(self, fn: Callable[[], None]) -> None:
        """Have the next round run ``fn()`` under the lock, before ``Stack.poll`` (whose flush sends
        what it produced). Safe in a finalizer: no lock, no I/O but a wake-up pipe byte."""
        self._deferred.append(fn)  # deque.append is atomic
        self._kicks += 1
        self._wake_sleepers()

    def run_deferred(self) -> None:
        """Under the lock, outside ``Stack.poll``: run what finalizers deferred (each at most once)."""
        deferred = self._deferred
        while deferred:
            try:
                fn = deferred.popleft()
            except IndexError:  # emptied meanwhile
                return
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - a finalizer's release fails quietly, as in __del__, but counted
                self.stack.stats.inc(f"driver.finalizer_error.{type(e).__name__}")

    def kick(self, force: bool = False) -> None:
        """The stack's state changed outside a round (a user call): wake the sleeping pollers whose sleep
        would outlast the stack's next timer (a call may have armed an earlier one: a retransmission, a
        delayed ACK), every ``wake_fd`` (event loops keep their own deadline), all of them with
        ``force``; and the followers whose condition now holds. A call that moved no deadline writes no
        pipe: the poller asleep until its deadline has nothing to do sooner (what a call sends leaves in
        the call itself). A poller between its last round and its sleep sees the kick counter move and
        looks again instead of sleeping."""
        self._kicks += 1
        if self._sleeping:
            with self.lock:
                due = None if force else self.stack.timers.next_deadline()
            self._wake_sleepers(due, force)
        if self._followers:
            with self.lock:
                self._wake_followers()

    def wake_fd(self) -> "_Waker":
        """A wake-up pipe of one's own that every ``kick()`` makes readable, for a poller that sleeps
        in a selector of its own (an event loop): watch ``.r``, call ``.drain()`` when it is readable,
        give it back with ``release_wake_fd``. Registered for good, so no kick can slip in between
        the caller's last look at the stack and its sleep."""
        waker = _Waker()
        with self._sleepers_lock:
            self._sleeping.add(waker)
        return waker

    def release_wake_fd(self, waker: "_Waker") -> None:
        """Give back a waker from :meth:`wake_fd`: kicks stop reaching it and its pipe is closed.

        Args:
            waker: the object ``wake_fd`` returned.
        """
        with self._sleepers_lock:
            self._sleeping.discard(waker)
        waker.close()

    def _wake_sleepers(self, due: Optional[float] = None, force: bool = True) -> None:
        # No lock here: kick() runs from socket finalizers (__del__ on a garbage collection), which may
        # start inside any allocation, also one made under _sleepers_lock; taking that (plain) lock
        # again deadlocked the thread. A copy of the set is enough: a sleeper added after it looked
        # at the stack after this change anyway (the kicks counter), one removed meanwhile is awake.
        for _ in range(8):
            try:
                wakers = tuple(self._sleeping)
                break
            except RuntimeError:  # the set changed size while copied (another thread slept or woke)
                continue
        else:
            wakers = ()
        for waker in wakers:
            if force or waker.until is None or (due is not None and due < waker.until):
                waker.wake()  # (until None: a wake_fd's event loop, which keeps its own deadline)

    def _wake_followers(self) -> None:
        """Under the lock: set the Event of every follower whose condition holds."""
        for follower in list(self._followers.values()):
            try:
                ready = follower.predicate()
            except Exception:  # let the follower run it and meet the exception in its own thread
                ready = True
            if ready:
                follower.event.set()
                self._woken += 1

    def _hand_off(self) -> None:
        """Under the lock, with no leader: wake a follower to lead (else the background thread)."""
        for ident, follower in self._followers.items():
            if ident != self._bg_ident:
                follower.event.set()
                return
        if self._thread is not None:
            self._bg_event.set()
            self._wake_sleepers()  # it may still be asleep on the device fd from when it last led

    def _sleep(self, timeout: Optional[float], kicks: Optional[int] = None) -> bool:
        """Sleep in select(2)/poll(2) on the device fd and this sleep's wake-up pipe, at most MAX_SLEEP.

        Back at once if a kick came since ``kicks`` was read (the caller's last look at the stack).
        True when the device or the pipe ended it, False when the timeout did.
        """
        if timeout is None or timeout > MAX_SLEEP:
            timeout = MAX_SLEEP
        with self._sleepers_lock:
            waker = self._free.pop() if self._free else _Waker()
            waker.until = self.clock() + max(timeout, 0.0)  # a kick that moves no timer before this lets it sleep
            self._sleeping.add(waker)
        try:
            if kicks is not None and self._kicks != kicks:
                return True  # kicked after our last look at the stack: look again instead of sleeping
            fd = self.stack.device.fileno()
            fds = [waker.r] if fd < 0 else [waker.r, fd]
            timeout = max(timeout, 0.0)
            if not _thread_state.slack_set:
                _thread_state.slack_set = True
                _tighten_timer_slack()
            if max(fds) < _SELECT_FD_LIMIT:
                ready = select.select(fds, (), (), timeout)[0]  # a timeval: sleeps end on time, to the µs
            else:
                p = select.poll()  # poll(2): no FD_SETSIZE limit, but a timeout in whole ms (rounded up)
                for f in fds:
                    p.register(f, select.POLLIN)
                ready = [f for f, _ in p.poll(timeout * 1000.0)]
            if waker.r in ready:
                waker.drain()
            return bool(ready)
        finally:
            with self._sleepers_lock:
                self._sleeping.discard(waker)
                if self._closed:
                    waker.close()
                else:
                    self._free.append(waker)

    # -- blocking waits ---------------------------------------------------------
    def wait_until(self, predicate: Callable[[], bool], timeout: Optional[float]) -> bool:
        """Until ``predicate()`` holds (True) or ``timeout`` seconds pass (False): lead or follow.

        With no other thread polling, this thread leads: it polls the stack,
        spinning for ``busy_poll`` at the start and after every round that
        received frames, sleeping otherwise. With another thread leading, it
        sleeps on its own Event until the leader finds its condition true or
        hands it the lead.

        Args:
            predicate: a cheap check of the stack's state, called under the lock.
            timeout: seconds at most; ``None`` waits without a limit.

        Returns:
            ``True`` once ``predicate()`` holds, ``False`` when the time ran out.
        """
        clock = self.clock
        me = threading.get_ident()
        end = None if timeout is None else clock() + timeout
        follower: Optional[_Follower] = None
        stepped_down = False
        try:
            while True:
                with self.lock:
                    if predicate():
                        return True
                    leader = self._leader
                    nested = leader == me  # a wait inside our own lead (a predicate that waits): keep it
                    if (leader is None or leader == self._bg_ident) and not stepped_down:
                        self._leader = me
                    elif not nested:
                        if follower is None:
                            follower = self._followers[me] = _Follower(predicate)
                        if not stepped_down or leader is not None:
                            follower.event.clear()
                        else:
                            follower.event.set()  # the lead we gave up came back free: take it again
                    stepped_down = False
                if nested:
                    return self._lead(predicate, end)
                if self._leader == me:
                    try:
                        result = self._lead(predicate, end, may_step_down=True)
                    finally:
                        with self.lock:
                            if self._leader == me:
                                self._leader = None
                                self._hand_off()
                    if result is not _STEPPED_DOWN:
                        return result
                    stepped_down = True
                    continue
                now = clock()
                if end is not None and now >= end:
                    return False
                follower.event.wait(MAX_SLEEP if end is None else min(MAX_SLEEP, end - now))
        finally:
            if follower is not None:
                with self.lock:
                    self._followers.pop(me, None)
                    if self._leader is None:
                        self._hand_off()  # we may have been woken to lead and are leaving instead

    def _lead(self, predicate: Callable[[], bool], end: Optional[float], may_step_down: bool = False):
        """The leader's loop: rounds, the busy-poll budget, sleeps until the stack's next deadline.

        ``may_step_down``: after a round that woke a follower (its data came) while this thread's own
        condition still does not hold, give the lead to the background thread and return
        ``_STEPPED_DOWN`` (the caller then waits as a follower); only with at most ``STEP_DOWN_FOLLOWERS``
        followers: with many, the next frame is rarely the woken thread's, and each step-down would cost
        a wake-up of the background thread (32 connection threads: 0.92x req/s). The woken thread, when it next waits,
        takes the lead from the background thread and polls for itself: the thread whose data comes
        next is then usually the one polling, and it runs at once instead of after a hand-off through
        another thread (a thread blocked in accept() no longer relays every request of the connection
        threads)."""
        clock = self.clock
        spin_end = clock() + self.busy_poll
        while True:
            with self.lock:
                if predicate():
                    return self._unhold(True)
                woken = self._woken
                deadline, worked = self._round(hold=True)
                kicks = self._kicks
                if predicate():
                    return self._unhold(True)
                if (may_step_down and self._woken != woken and len(self._followers) <= STEP_DOWN_FOLLOWERS
                        and self._thread is not None and self._bg_ident):
                    self._leader = self._bg_ident
                    self._bg_event.set()
                    return self._unhold(_STEPPED_DOWN)
                others = bool(self._followers) or self.lock.waiting
                watch = self._rx_watch() if self._rx_watch is not None else None
            now = clock()
            if end is not None and now >= end:
                with self.lock:
                    return self._unhold(False)
            spin_end = self._pause(now, deadline, worked, kicks, others, spin_end, end, watch)

    def _pause(self, now: float, deadline: Optional[float], worked: bool, kicks: int, others: bool,
               spin_end: float, end: Optional[float] = None, watch=None) -> float:
        """After a round: spin on within the busy-poll budget (re-armed by a round that received frames)
        or an anticipated arrival's window, yielding to other threads; past it, sleep until the stack's
        next deadline (or ``end``, or the next anticipated window). Returns the budget's end.

        With the device's ``watch`` (``rx_watch()``), the spin is ``ustack._fastpath.spin_wait``: a C
        loop on the ring's status word without the GIL, yielding the CPU between looks, back as soon as
        a frame is there or the budget (or the stack's next deadline) is over; application threads run
        meanwhile. Without one, a Python loop: a round per turn, ``sched_yield`` when others wait."""
        if worked:
            spin_end = now + self.busy_poll
        window = None
        if now >= spin_end and self.arrivals is not None:
            window = self.arrivals.window(now)
            if window is not None and window[0] <= now:
                spin_end = window[1]  # a request of a steady flow is due: meet it awake
        if now < spin_end:
            if watch is not None:
                if deadline is not None and deadline <= now:
                    return spin_end  # the round asked for another at once (a full burst, a held flush)
                until = spin_end if deadline is None else min(spin_end, deadline)
                if end is not None:
                    until = min(until, end)
                spin_wait(watch, until - now)
                return spin_end
            if others:
                os.sched_yield()  # releases the GIL: a woken follower or a thread after the lock runs now
            return spin_end
        wait = None if deadline is None else deadline - now
        if end is not None:
            wait = end - now if wait is None else min(wait, end - now)
        toward_window = window is not None and (wait is None or window[0] - now <= wait)
        if toward_window:
            wait = window[0] - now
        if wait is None or wait > 0:
            if not self._sleep(wait, kicks) and toward_window and wait <= MAX_SLEEP:
                self.arrivals.woke_late(self.clock() - window[0])  # the timer ended it: how late
        return spin_end

    def run_for(self, seconds: float) -> None:
        """Drive the stack for ``seconds`` (tools, demos).

        Args:
            seconds: how long to poll (the predicate never holds).
        """
        self.wait_until(lambda: False, seconds)

    # -- background thread --------------------------------------------------------
    def start(self) -> None:
        """Start the background thread that polls the stack (``ustack-driver``, a daemon thread).

        Blocking socket calls then wait on their own readiness instead of polling; calling it again
        while the thread runs does nothing.
        """
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="ustack-driver", daemon=True)
        self._thread.start()

    def ensure_running(self) -> None:
        """Start the background thread unless it runs (a socket handed out its readiness fd).

        The policy: an application that waits in select()/poll()/epoll on
        socket fds does not call into ustack, so someone else must poll the
        stack; the thread sleeps in poll(2) on the device fd until the next
        deadline, so an idle program costs no CPU. ``auto_start=False``
        leaves it to the program (``start()``, ``poll()``).
        """
        if self.auto_start and self._thread is None:
            with self.lock:  # two sockets' first fileno() in two threads: one thread
                self.start()

    def _run(self) -> None:
        clock = self.clock
        stats = self.stack.stats
        me = self._bg_ident = threading.get_ident()
        spin_end = clock() + self.busy_poll
        try:
            while not self._stop.is_set():
                with self.lock:
                    if self._leader is not None and self._leader != me:
                        self._bg_event.clear()  # an application thread leads; ours when it hands off
                        follow = True
                    else:
                        self._leader = me
                        follow = False
                if follow:
                    self._bg_event.wait(MAX_SLEEP)
                    spin_end = clock() + self.busy_poll
                    continue
                try:
                    with self.lock:
                        deadline, worked = self._round()
                        kicks = self._kicks
                        others = bool(self._followers) or self.lock.waiting
                        watch = self._rx_watch() if self._rx_watch is not None else None
                except Exception as e:  # a bug in the stack must not silently stop all networking
                    self.last_error = e
                    stats.inc(f"driver.poll_error.{type(e).__name__}")
                    self._sleep(ERROR_BACKOFF)
                    continue
                spin_end = self._pause(clock(), deadline, worked, kicks, others, spin_end, None, watch)
        finally:
            with self.lock:
                if self._leader == me:
                    self._leader = None
                    self._hand_off()

    def stop(self) -> None:
        """Stop the background thread (waits up to 5 s for it); nothing when it is not running."""
        if self._thread is None:
            return
        self._stop.set()
        self._bg_event.set()
        self.kick(force=True)
        self._thread.join(5)
        self._thread = None
        self._bg_ident = None

    def close(self) -> None:
        """Stop the background thread and close the wake-up pipes. Idempotent.

        The stack and its device are not closed: ``stack.close()`` and ``stack.device.close()`` do that.
        """
        self.stop()
        with self._sleepers_lock:
            self._closed = True
            free, self._free = self._free, []
        for waker in free:
            waker.close()


class _ThreadState(threading.local):
    slack_set = False


_thread_state = _ThreadState()


def _tighten_timer_slack() -> None:
    """Have this thread's timed sleeps end within ~1 µs of their deadline (Linux lets them run up to
    50 µs late by default, to batch wake-ups): a poller sleeping toward an anticipated arrival or a
    protocol timer wants its deadline. Best effort: no prctl (not Linux), no change."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(29, TIMER_SLACK_NS, 0, 0, 0)  # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass


class StackLock:
    """The driver's re-entrant lock, counting the threads blocked on it: a leader spinning on the
    RX ring yields the CPU (and so the GIL) while someone waits, instead of taking the lock back
    at once round after round (CPython's locks are not fair) and starving a sender for the whole
    busy-poll budget."""

    __slots__ = ("_lock", "waiting")

    def __init__(self):
        self._lock = threading.RLock()
        self.waiting = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock, as ``threading.RLock.acquire``, counting the threads that wait.

        Args:
            blocking: wait for it (``False``: try once).
            timeout: seconds to wait at most (-1: no limit).

        Returns:
            ``True`` when taken.
        """
        if self._lock.acquire(False):
            return True
        if not blocking:
            return False
        self.waiting += 1
        try:
            return self._lock.acquire(True, timeout)
        finally:
            self.waiting -= 1

    def release(self) -> None:
        """Release the lock once (it is re-entrant).

        Raises:
            RuntimeError: the calling thread does not hold it.
        """
        self._lock.release()

    def __enter__(self) -> "StackLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()


class _Follower:
    """A thread waiting while another leads: its condition and the Event the leader sets."""

    __slots__ = ("predicate", "event")

    def __init__(self, predicate: Callable[[], bool]):
        self.predicate = predicate
        self.event = threading.Event()


class _Waker:
    """A non-blocking pipe one sleeping thread waits on; ``wake()`` makes its read end readable.

    ``wake`` may run in any thread, on a waker copied by ``_wake_sleepers`` just before its owner released
    it: the check of the fd and the write to it happen under the waker's own lock, and ``close`` takes the
    same lock, so a wake never writes to (nor a drain reads from) a number the kernel has handed out again.
    """

    __slots__ = ("r", "w", "_lock", "until")

    def __init__(self):
        self.until: Optional[float] = None  # when its sleeper wakes by itself (None: an event loop's, unknown)
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        os.set_blocking(self.w, False)
        self._lock = threading.Lock()

    def wake(self) -> None:
        with self._lock:
            w = self.w
            if w < 0:
                return  # closed (a waker copied by _wake_sleepers just before it was released)
            try:
                os.write(w, b"\0")
            except (BlockingIOError, OSError):
                pass  # full: a wake-up is pending anyway

    def drain(self) -> None:
        with self._lock:
            r = self.r
            try:
                while r >= 0 and os.read(r, 4096):
                    pass
            except (BlockingIOError, OSError):
                pass

    def close(self) -> None:
        with self._lock:
            fds = (self.r, self.w)
            self.r = self.w = -1
            for fd in fds:
                if fd < 0:
                    continue
                try:
                    os.close(fd)
                except OSError:
                    pass
