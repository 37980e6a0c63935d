"""Two stacks joined by the pipe backend on one ManualClock: a deterministic little network."""

from __future__ import annotations

import pytest

from ustack.backends.pipe import PipeLink
from ustack.api.clock import ManualClock
from ustack.api.driver import Driver
from ustack.device import DeviceWrapper
from ustack.stack import Stack


class Recorder(DeviceWrapper):
    """Keeps a copy of every frame the stack transmits."""

    def __init__(self, inner):
        super().__init__(inner)
        self.sent: list[bytes] = []
        self._slots = []

    def tx_reserve(self, n):
        self._slots = self.inner.tx_reserve(n)
        return self._slots

    def tx_commit(self, lengths):
        self.sent.extend(bytes(s[:n]) for s, n in zip(self._slots, lengths))
        self.inner.tx_commit(lengths)


class Net:
    def __init__(self, *, seed: int = 1, mtu: int = 1500, a_addr="198.18.0.1/24", b_addr="198.18.0.2/24",
                 gateway_a=None, gateway_b=None, wrap_a=None, wrap_b=None, a_kw=None, b_kw=None, **impair):
        self.clock = ManualClock(1000.0)
        self.link = PipeLink(self.clock, seed=seed, mtu=mtu, **impair)
        # Device decorators (capture, checks) go around an end before its stack is built; a_kw/b_kw: more Stack
        # keywords for each side.
        self.a = Stack(wrap_a(self.link.a) if wrap_a else self.link.a, a_addr, gateway=gateway_a, **(a_kw or {}))
        self.b = Stack(wrap_b(self.link.b) if wrap_b else self.link.b, b_addr, gateway=gateway_b, **(b_kw or {}))
        self.stacks = [self.a, self.b]
        # Drivers on the same manual clock, for tests that use sockets (which live on a driver).
        self.da, self.db = Driver(self.a, self.clock), Driver(self.b, self.clock)

    def close(self, check: bool = True) -> None:
        self.da.close()
        self.db.close()
        self.link.close()
        if check:
            self.assert_no_internal_error()

    def assert_no_internal_error(self) -> None:
        """The exception barrier in Stack.poll never fired: no bug was hidden by it in this scenario."""
        for s in self.stacks:
            assert s.stats["stack.internal_error"] == 0, f"{s.addr}: {s.last_internal_error!r}"

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.close(check=exc_type is None)

    def step(self) -> float | None:
        """Poll every stack once at the current time; return the earliest next deadline."""
        deadlines = [s.poll(self.clock.now) for s in self.stacks]
        ds = [d for d in deadlines if d is not None]
        return min(ds) if ds else None

    def run(self, until=lambda: False, max_time: float = 60.0, max_rounds: int = 1_000_000) -> bool:
        """Advance simulated time deadline by deadline until ``until()`` or ``max_time`` elapses."""
        end = self.clock.now + max_time
        for _ in range(max_rounds):
            d = self.step()
            if until():
                return True
            # Settle everything due now before jumping ahead.
            d2 = self.step()
            if until():
                return True
            nxt = d2 if d2 is not None else d
            if nxt is None or nxt > end:
                if self.clock.now >= end:
                    return until()
                self.clock.set(end if nxt is None or nxt > end else nxt)
            elif nxt > self.clock.now:
                self.clock.set(nxt)
        return until()


@pytest.fixture(autouse=True)
def no_internal_error(monkeypatch):
    """Autouse (through a conftest): every Net made in a test ends with the exception barrier untouched."""
    made = []
    init = Net.__init__

    def tracking_init(self, *a, **kw):
        init(self, *a, **kw)
        made.append(self)

    monkeypatch.setattr(Net, "__init__", tracking_init)
    yield
    for net in made:
        net.assert_no_internal_error()
