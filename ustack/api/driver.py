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
- one lock makes sure one thread touches the stack at a time; sleeping
  happens outside the lock, so other threads can send meanwhile, and they
  write to the wake-up pipe when they may have moved a deadline earlier;
- ``start()`` runs a background thread that keeps timers, ACKs and
  retransmissions going for programs that do not call into their sockets;
  the first socket that hands out its ``fileno()`` (a readiness fd, see
  ``ustack.api.readiness``) starts it (``ensure_running``), since a
  program waiting in select() on socket fds polls nothing itself. An
  exception escaping ``Stack.poll`` in that thread is counted
  (``driver.poll_error.<Type>``), kept in ``last_error``, and the thread
  goes on after a short back-off instead of dying silently.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from typing import Callable, Optional

from ustack.api.clock import ManualClock, MonotonicClock

MAX_SLEEP = 0.5  # never sleep longer than this without re-checking (signals, stop requests)
DEFAULT_BUSY_POLL = 50e-6  # seconds of spinning after a round that received frames
ERROR_BACKOFF = 0.01  # the background thread's pause after Stack.poll raised (no hot error loop)
_RX_COUNTER = "eth.frames_received"  # the Stack counts every received frame here: "the round did work"


class Driver:
    """Who polls one Stack: the clock, the lock, blocking waits and the optional background thread.

    Sockets are made on a driver (``driver.socket(...)`` or
    ``ustack.api.socket.socket(driver, ...)``); every socket of a stack
    shares its one driver.
    """

    def __init__(self, stack, clock=None, *, busy_poll: float = DEFAULT_BUSY_POLL,
                 auto_start: Optional[bool] = None):
        if not busy_poll >= 0:
            raise ValueError(f"busy_poll must be a number of seconds >= 0, not {busy_poll!r}")
        self.stack = stack
        # None: start on demand unless time is manual (a test driving a ManualClock polls by itself,
        # and a thread waiting for a clock that does not move would spin)
        self.auto_start = not isinstance(clock, ManualClock) if auto_start is None else auto_start
        self.clock = clock or MonotonicClock()
        self.busy_poll = busy_poll
        self.lock = threading.RLock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sleepers = 0
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self.deadline: Optional[float] = None
        self.last_error: Optional[BaseException] = None  # the last exception the background thread survived

    def socket(self, family: int = socket.AF_INET, type: int = socket.SOCK_STREAM, proto: int = 0):
        """A stdlib-shaped socket on this driver's stack (see ``ustack.api.socket``)."""
        from ustack.api.socket import socket as make_socket

        return make_socket(self, family, type, proto)

    # -- one round ------------------------------------------------------------
    def poll(self) -> Optional[float]:
        with self.lock:
            self.deadline = self.stack.poll(self.clock())
            return self.deadline

    def kick(self) -> None:
        """Tell sleeping pollers that the stack's state changed (a new deadline, new data)."""
        if self._sleepers:
            try:
                os.write(self._wake_w, b"\0")
            except BlockingIOError:
                pass

    def _poller(self):
        """A poll object on the wake-up pipe and the device fd (poll(2): no FD_SETSIZE limit).

        One per sleep: several threads may sleep at once, and a poll object
        refuses concurrent use.
        """
        p = select.poll()
        p.register(self._wake_r, select.POLLIN)
        fd = self.stack.device.fileno()
        if fd >= 0:
            p.register(fd, select.POLLIN)
        return p

    def _sleep(self, timeout: Optional[float]) -> None:
        if timeout is None or timeout > MAX_SLEEP:
            timeout = MAX_SLEEP
        poller = self._poller()
        self._sleepers += 1
        try:
            ready = [fd for fd, _ in poller.poll(max(timeout, 0.0) * 1000.0)]
        finally:
            self._sleepers -= 1
        if self._wake_r in ready:
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except BlockingIOError:
                pass

    # -- blocking waits ---------------------------------------------------------
    def wait_until(self, predicate: Callable[[], bool], timeout: Optional[float]) -> bool:
        """Poll until ``predicate()`` holds (True) or ``timeout`` seconds pass (False).

        Spins for ``busy_poll`` at the start and again after every round
        that received frames; sleeps otherwise.
        """
        clock = self.clock
        stats = self.stack.stats
        start = clock()
        end = None if timeout is None else start + timeout
        spin_end = start + self.busy_poll
        while True:
            with self.lock:
                if predicate():
                    return True
                received = stats[_RX_COUNTER]
                now = clock()
                deadline = self.deadline = self.stack.poll(now)
                if predicate():
                    return True
                worked = stats[_RX_COUNTER] != received
            now = clock()
            if end is not None and now >= end:
                return False
            if worked:
                spin_end = now + self.busy_poll
            if now < spin_end:
                continue
            wait = None
            if deadline is not None:
                wait = deadline - now
            if end is not None:
                wait = end - now if wait is None else min(wait, end - now)
            if wait is None or wait > 0:
                self._sleep(wait)

    def run_for(self, seconds: float) -> None:
        """Drive the stack for ``seconds`` (tools, demos)."""
        self.wait_until(lambda: False, seconds)

    # -- background thread --------------------------------------------------------
    def start(self) -> None:
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
        spin_end = clock() + self.busy_poll
        while not self._stop.is_set():
            received = stats[_RX_COUNTER]
            try:
                deadline = self.poll()
            except Exception as e:  # a bug in the stack must not silently stop all networking
                self.last_error = e
                stats.inc(f"driver.poll_error.{type(e).__name__}")
                self._sleep(ERROR_BACKOFF)
                continue
            now = clock()
            if stats[_RX_COUNTER] != received:
                spin_end = now + self.busy_poll
            if now < spin_end:
                continue
            wait = None if deadline is None else deadline - now
            if wait is None or wait > 0:
                self._sleep(wait)

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._sleepers += 1
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass
        finally:
            self._sleepers -= 1
        self._thread.join(5)
        self._thread = None

    def close(self) -> None:
        self.stop()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

