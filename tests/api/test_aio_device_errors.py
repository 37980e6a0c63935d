"""The native asyncio loop survives a device error (issue 25, item 11a), as the driver's thread does.

Host A's device fails ``rx_burst`` and ``tx_commit`` a few times while an
asyncio program on A's native loop exchanges 100 KB with a TCP echo service
on host B (pipe backend, B polled by its driver's thread). Before, the first
DeviceError left ``run_until_complete``; now each is counted
(``driver.poll_error.DeviceError``), kept in ``driver.last_error``, reported
to the loop's exception handler, and the bytes still arrive exact.
"""

from __future__ import annotations

import asyncio
import hashlib

from ustack.api.aio import EventLoop
from ustack.api.clock import MonotonicClock
from ustack.api.driver import Driver
from ustack.api.patch import patch, unpatch
from ustack.backends.pipe import PipeLink
from ustack.device import DeviceError, DeviceWrapper
from ustack.stack import Stack
from ustack.tools.services import TcpEcho


class Flaky(DeviceWrapper):
    """Raises DeviceError from the next ``fail_rx`` rx_burst and ``fail_tx`` tx_commit calls."""

    def __init__(self, inner):
        super().__init__(inner)
        self.fail_rx = self.fail_tx = 0

    def rx_burst(self, max_frames):
        if self.fail_rx:
            self.fail_rx -= 1
            raise DeviceError(100, "rx ring gone (injected)")  # ENETDOWN
        return self.inner.rx_burst(max_frames)

    def tx_commit(self, lengths):
        if self.fail_tx and lengths:
            self.fail_tx -= 1
            raise DeviceError(105, "tx ring full (injected)")  # ENOBUFS
        self.inner.tx_commit(lengths)


def test_device_errors_do_not_stop_the_native_loop_and_the_transfer_is_exact():
    clock = MonotonicClock()
    link = PipeLink(clock, delay=0.0002)
    flaky = Flaky(link.a)
    sa, sb = Stack(flaky, "198.18.0.1/24"), Stack(link.b, "198.18.0.2/24")
    da, db = Driver(sa, clock), Driver(sb, clock)
    TcpEcho(sb, 7)
    db.start()
    loop = EventLoop(da)
    patch(da)
    reported = []
    loop.set_exception_handler(lambda lp, context: reported.append(context))
    data = hashlib.sha256(b"x").digest() * 3125  # 100,000 bytes

    async def exchange():
        r, w = await asyncio.open_connection("198.18.0.2", 7)
        flaky.fail_rx, flaky.fail_tx = 3, 2  # now, with a connection up and data about to flow
        w.write(data)
        await w.drain()
        got = await r.readexactly(len(data))
        w.close()
        await w.wait_closed()
        return got

    try:
        got = loop.run_until_complete(asyncio.wait_for(exchange(), 20))
    finally:
        unpatch()
        loop.close()
        da.close()
        db.close()
        link.close()
    assert got == data
    assert flaky.fail_rx == 0 and flaky.fail_tx == 0
    assert sa.stats["driver.poll_error.DeviceError"] == 5
    assert isinstance(da.last_error, DeviceError)
    assert reported and isinstance(reported[0]["exception"], DeviceError)
    assert "the loop goes on" in reported[0]["message"]
