"""Two stacks over the pipe backend on one manual clock, and the loop that drives a transfer between them.

The benchmarks (``bench_pipe``, ``bench_lending``) and the tests that move
bytes between whole stacks without a kernel share it::

    pair = PipePair(seed=1, delay=0.0005, loss=0.01)
    listener, client = pair.connect(80)
    pair.run(step, done=lambda: got == size)

``run`` polls both stacks at the clock's time and calls ``step(now)``, the
applications' turn (send, accept, read), which returns True when it did
something: what it did (segments, a window update, a timer armed) is not in
the deadlines the polls returned, so the same instant is polled again.
Otherwise the clock jumps to the earliest stack deadline or frame arrival on
either pipe end (a frame one stack sent after the other polled is due then,
not at the next timer: skipping to the timer would fire RTOs before the
ACKs arrive). ``fastpath`` None follows USTACK_FASTPATH
(``ustack.api.environment``), as every stack a tool builds does.
"""

from __future__ import annotations

from typing import Callable, Optional

from ustack.api import environment
from ustack.api.clock import ManualClock
from ustack.backends.pipe import PipeLink
from ustack.net.addr import ANY4, ANY6, parse
from ustack.stack import Stack

A4, B4, A6, B6 = "198.18.0.1", "198.18.0.2", "fd00::1", "fd00::2"


class PipePair:
    """Stack ``a`` (198.18.0.1, fd00::1 with ``ipv6``) and ``b`` (.2, ::2) over ``link`` on ``clock``."""

    def __init__(self, *, seed: int = 1, ipv6: bool = False, fastpath: Optional[bool] = None,
                 a_kw: Optional[dict] = None, b_kw: Optional[dict] = None, start: float = 1000.0, **link_kw):
        self.clock = clock = ManualClock(start)
        self.link = link = PipeLink(clock, seed=seed, **link_kw)
        self.ipv6 = ipv6
        fastpath = environment.fastpath() if fastpath is None else fastpath
        self.a = Stack(link.a, [f"{A4}/24", f"{A6}/64"] if ipv6 else f"{A4}/24", fastpath=fastpath, **(a_kw or {}))
        self.b = Stack(link.b, [f"{B4}/24", f"{B6}/64"] if ipv6 else f"{B4}/24", fastpath=fastpath, **(b_kw or {}))

    def settle(self, rounds: int, step: float) -> None:
        """``rounds`` polls of both stacks ``step`` seconds apart (duplicate address detection, RFC 4862)."""
        clock = self.clock
        for _ in range(rounds):
            self.a.poll(clock.now), self.b.poll(clock.now)
            clock.set(clock.now + step)

    def connect(self, port: int = 80, backlog: int = 4, **knobs):
        """A listener on ``a`` and a connection from ``b`` toward it (over IPv6 with ``ipv6``): (listener, client)."""
        ipv6 = self.ipv6
        lst = self.a.tcp.listen((ANY6 if ipv6 else ANY4, port), backlog, **knobs)
        conn = self.b.tcp.connect(None, (parse(A6 if ipv6 else A4), port), self.clock.now, **knobs)
        return lst, conn

    def run(self, step: Callable[[float], bool], done: Callable[[], bool],
            max_time: Optional[float] = None) -> bool:
        """Drive both stacks until ``done()``: True, or False when ``max_time`` simulated seconds passed first."""
        clock, a, b, end_a, end_b = self.clock, self.a, self.b, self.link.a, self.link.b
        end = None if max_time is None else clock.now + max_time
        while not done():
            now = clock.now
            if end is not None and now >= end:
                return False
            deadlines = [a.poll(now), b.poll(now)]
            if step(now):
                continue
            deadlines += (end_a.poll_at(now), end_b.poll_at(now))
            nxt = min((d for d in deadlines if d is not None), default=now)
            clock.set(nxt if nxt > now else now + 1e-6)
        return True

    def close(self) -> None:
        self.a.close()
        self.b.close()
        self.link.close()
