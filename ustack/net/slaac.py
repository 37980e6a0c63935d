"""The lifetimes of SLAAC addresses (RFC 4862 5.5.3, 5.5.4) on the stack's clock.

An autonomous /64 prefix in a Router Advertisement's Prefix Information
gives an address (``ustack.net.ndp`` forms it); this keeps its two
lifetimes as absolute times on the address (``valid_until``,
``preferred_until``; None is the infinite 0xffffffff, RFC 4861 4.6.2):

- a new address takes the option's preferred and valid lifetimes (5.5.3 d);
- a later option for the prefix resets the preferred lifetime, and the
  valid lifetime by the two-hour rule (5.5.3 e), which keeps a forged RA
  from cutting an address short: a valid lifetime over two hours, or over
  what remains, is taken; else, if no more than two hours remain, the
  option's valid lifetime is ignored; else two hours remain from now;
- at the end of its preferred lifetime the address becomes DEPRECATED (still
  valid: it receives and keeps its connections, new ones choose another
  source, RFC 6724 rule 3; a later preferred lifetime makes it preferred
  again); at the end of its valid lifetime it is removed (5.5.4).

One timer, armed at the next of these events (``ndp.slaac_deprecated``,
``ndp.slaac_expired`` count them).
"""

from __future__ import annotations

from typing import Optional

from ustack.net.route6 import DEPRECATED, PREFERRED, Address, Interface6
from ustack.stats import Stats
from ustack.timers import TimerHeap

INFINITE = 0xFFFFFFFF  # RFC 4861 4.6.2: all ones is infinity
TWO_HOURS = 7200.0  # RFC 4862 5.5.3 e


def _until(lifetime: int, now: float) -> Optional[float]:
    return None if lifetime == INFINITE else now + lifetime


class SlaacLifetimes:
    """Preferred and valid lifetimes of the interface's SLAAC addresses (origin "slaac")."""

    def __init__(self, iface: Interface6, timers: TimerHeap, stats: Stats):
        self.iface = iface
        self.stats = stats
        self._timer = timers.timer(self._tick)

    def configure(self, entry: Address, valid: int, preferred: int, now: float) -> None:
        """A new address from a prefix (5.5.3 d): its lifetimes are the option's."""
        entry.valid_until = _until(valid, now)
        entry.preferred_until = _until(preferred, now)
        self._arm(now)

    def inherit(self, entry: Address, old: Address, now: float) -> None:
        """The next identifier after a DAD failure (RFC 7217 6) keeps the lifetimes its prefix gave."""
        entry.valid_until, entry.preferred_until = old.valid_until, old.preferred_until
        self._arm(now)

    def update(self, entry: Address, valid: int, preferred: int, now: float) -> None:
        """A later option for the address's prefix (5.5.3 e)."""
        entry.preferred_until = _until(preferred, now)
        remaining = None if entry.valid_until is None else entry.valid_until - now
        if valid == INFINITE or valid > TWO_HOURS or (remaining is not None and valid > remaining):
            entry.valid_until = _until(valid, now)
        elif remaining is not None and remaining <= TWO_HOURS:
            self.stats.inc("ndp.slaac_valid_ignored")  # e.2: no shortening below two hours by an RA
        else:
            entry.valid_until = now + TWO_HOURS  # e.3
        if entry.state == DEPRECATED and (entry.preferred_until is None or entry.preferred_until > now):
            self.iface.set_state(entry.addr, PREFERRED)  # preferred again
        self._tick(now)

    def dad_passed(self, entry: Address, now: float) -> str:
        """The state an address takes when DAD succeeds: DEPRECATED if its preferred lifetime ran out meanwhile."""
        until = entry.preferred_until
        return DEPRECATED if until is not None and until <= now else PREFERRED

    def _tick(self, now: float) -> None:
        iface, stats = self.iface, self.stats
        for entry in [e for e in iface.addresses.values() if e.origin == "slaac"]:
            if entry.valid_until is not None and entry.valid_until <= now:
                iface.remove(entry.addr)
                stats.inc("ndp.slaac_expired")
            elif entry.state == PREFERRED and entry.preferred_until is not None and entry.preferred_until <= now:
                iface.set_state(entry.addr, DEPRECATED)
                stats.inc("ndp.slaac_deprecated")
        self._arm(now)

    def _arm(self, now: float) -> None:
        """The timer at the next lifetime event of any SLAAC address."""
        events = []
        for e in self.iface.addresses.values():
            if e.origin == "slaac":
                if e.valid_until is not None:
                    events.append(e.valid_until)
                # (a tentative address too: DAD may pass before it; one past it is DEPRECATED when DAD passes)
                if e.state != DEPRECATED and e.preferred_until is not None and e.preferred_until > now:
                    events.append(e.preferred_until)
        if events:
            self._timer.arm(min(events))
        else:
            self._timer.cancel()
