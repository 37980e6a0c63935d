"""argparse types that check ranges, shared by every ``ustack`` subcommand.

A value out of range is refused by the parser itself: one line naming the
option and the accepted range, exit status 2, never a traceback from deep
inside a tool.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
from typing import Optional

MAX_PID = 1 << 22  # PID_MAX_LIMIT on 64-bit Linux


def int_range(low: int, high: Optional[int] = None, what: str = "a number"):
    """An argparse type: an integer in [low, high] (no upper bound when ``high`` is None)."""

    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            bound = f"{low}..{high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"{value} is not {what} ({bound})")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    parse.__doc__ = (f"An argparse type: {what}, an integer "
                     f"{f'in {low}..{high}' if high is not None else f'of at least {low}'}; returns it. "
                     "Raises argparse.ArgumentTypeError otherwise.")
    return parse


def float_range(low: float, what: str = "a number of seconds", *, above: bool = False,
                high: Optional[float] = None):
    """An argparse type: a finite float >= low (> low with ``above``), <= ``high`` when given."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        too_low = not (value > low) if above else not (value >= low)
        if too_low or not math.isfinite(value) or (high is not None and value > high):
            bound = f"more than {low}" if above else f"at least {low}"
            if high is not None:
                bound += f", at most {high}"
            raise argparse.ArgumentTypeError(f"{text} is not {what} ({bound})")
        return value

    parse.__name__ = what
    parse.__doc__ = (f"An argparse type: {what}, a finite float {'above' if above else 'from'} {low}"
                     f"{f' up to {high}' if high is not None else ''}; returns it. "
                     "Raises argparse.ArgumentTypeError otherwise.")
    return parse


def ipv4_address(text: str) -> str:
    """An argparse type: a dotted-quad IPv4 address, returned as given."""
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IPv4 address") from None
    return text


def ip_address(text: str) -> str:
    """An argparse type: an IPv4 or IPv6 address, returned in its normal form (IPv6 compressed, RFC 5952)."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IPv4 or IPv6 address") from None


port = int_range(1, 65535, "a port")
port_or_zero = int_range(0, 65535, "a port number")
byte_count = int_range(0, None, "a byte count")
pid = int_range(1, MAX_PID, "a process id")
