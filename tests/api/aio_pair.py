"""Two stacks over the pipe, each with a native ustack event loop (tests/api/test_aio_*.py).

Host A (198.18.0.1) is patched (``ustack.patch``), so asyncio's own
``start_server``/``open_connection``/``create_datagram_endpoint`` reach it
by address; its loop runs in the test's thread. Host B (198.18.0.2) runs
its loop in a thread and is reached through ``sock=`` arguments (its
sockets made with ``driver.socket()``). ``b_run(coro)`` runs a coroutine
on B's loop and waits for its result from A's.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings

from ustack.api.aio import EventLoop
from ustack.api.clock import MonotonicClock
from ustack.api.driver import Driver
from ustack.api.patch import patch, unpatch
from ustack.backends.pipe import PipeLink
from ustack.stack import Stack

A, B = "198.18.0.1", "198.18.0.2"
BOUND = 20.0  # seconds any one test step may take before it fails


class Pair:
    def __init__(self):
        self.clock = clock = MonotonicClock()
        self.link = PipeLink(clock, delay=0.0002)
        self.sa = Stack(self.link.a, f"{A}/24")
        self.sb = Stack(self.link.b, f"{B}/24")
        self.da, self.db = Driver(self.sa, clock), Driver(self.sb, clock)
        self.la, self.lb = EventLoop(self.da), EventLoop(self.db)
        self._tb = threading.Thread(target=self.lb.run_forever, name="loop-b", daemon=True)
        self._tb.start()
        patch(self.da)

    def run(self, coro, timeout: float = BOUND):
        """Run ``coro`` on A's loop (this thread), bounded."""
        return self.la.run_until_complete(asyncio.wait_for(coro, timeout))

    async def b_run(self, coro):
        """Run ``coro`` on B's loop; awaitable from A's loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.lb))

    def b_socket(self, *args):
        s = self.db.socket(*args)
        s.setblocking(False)
        return s

    def close(self):
        unpatch()
        self.lb.call_soon_threadsafe(self.lb.stop)
        self._tb.join(5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            for loop in (self.la, self.lb):
                if not loop.is_closed():
                    loop.run_until_complete(loop.shutdown_asyncgens())
                    loop.close()
            gc.collect()
        self.da.close()
        self.db.close()
        self.link.close()
