"""The in-process loopback interface for applications: a second Stack that owns 127.0.0.0/8 and ::1.

``open_loopback(clock)`` builds a ``Stack(loopback=True)`` over a
``LoopbackDevice`` (a link whose TX is its own RX) and its Driver.
``ustack.patch(driver, loopback=lo_driver)`` then puts every socket
addressed to 127/8, ::1 or "localhost" on it, so both ends of a loopback
connection are ustack sockets in this process with TCP's and UDP's full
behaviour (ephemeral ports, SO_REUSEADDR, TIME-WAIT, RST on closed ports,
ICMP port unreachable); no kernel socket carries loopback traffic.

It is a stack of its own beside the main one (the house's Stack has one
interface): a socket lives on one of them, chosen by the address of its
first bind/connect/sendto; the stack owns the whole 127/8 as Linux's
``lo`` does (``Interface.own_prefix``). A socket bound to the wildcard
(0.0.0.0, ::) is on both, as Linux's wildcard spans every interface
(``ustack.api.wildcard``).
"""

from __future__ import annotations

from typing import Optional

from ustack.api import environment
from ustack.api.driver import DEFAULT_BUSY_POLL, Driver
from ustack.backends.loopback import LoopbackDevice
from ustack.stack import Stack

LOOPBACK_ADDRS = ("127.0.0.1/8", "::1/128")


def open_loopback(clock, *, busy_poll: float = DEFAULT_BUSY_POLL, ipv6: bool = True,
                  fastpath: Optional[bool] = None) -> Driver:
    """A loopback Stack (127.0.0.1/8, and ::1/128 unless ``ipv6=False``) on its own Driver, not started;
    ``fastpath`` None follows USTACK_FASTPATH (``ustack.api.environment``)."""
    device = LoopbackDevice()
    try:
        stack = Stack(device, list(LOOPBACK_ADDRS if ipv6 else LOOPBACK_ADDRS[:1]), loopback=True,
                      fastpath=environment.fastpath() if fastpath is None else fastpath)
    except BaseException:
        device.close()
        raise
    return Driver(stack, clock, busy_poll=busy_poll)


def close_loopback(driver: Driver) -> None:
    """Stop the loopback Driver and close its stack and device."""
    driver.close()
    driver.stack.close()
    driver.stack.device.close()
