"""Temporary addresses (RFC 8981): extra SLAAC addresses with random interface identifiers and short lives.

Off by default (``use_tempaddr=0``, as Linux). With ``use_tempaddr`` 1 or
2 (an ``NdpLayer`` keyword), every autonomous /64 prefix a Router
Advertisement brings also gets a temporary address (3.4): a random
interface identifier (3.3.1), run through DAD like any address (a conflict
draws a new identifier, at most ``TEMP_IDGEN_RETRIES`` times), valid for
the lower of the prefix's valid lifetime and ``valid_lifetime``
(TEMP_VALID_LIFETIME, 2 days), preferred for the lower of the prefix's
preferred lifetime and ``preferred_lifetime`` (TEMP_PREFERRED_LIFETIME, 1
day) less a DESYNC_FACTOR drawn for each address in [0, 0.4 x
TEMP_PREFERRED_LIFETIME] (3.8). None is made when that preferred lifetime
would not outlast REGEN_ADVANCE (2 s + TEMP_IDGEN_RETRIES x DAD
transmissions x retransmission timer).

Regeneration (3.5, 3.6): REGEN_ADVANCE before an address's preferred
lifetime ends, a new one is made for the prefix (while the prefix is still
valid), so one is ready when the old one is deprecated. At the end of its
preferred lifetime the old address becomes DEPRECATED: source selection
no longer picks it for new connections (RFC 6724 rule 3) but it still
receives and keeps its connections; at the end of its valid lifetime it is
removed (``ndp.temp_*`` counters). A later RA for the prefix only ever
shortens the lifetimes (3.4: never past the TEMP_* bounds counted from
the address's creation). ``use_tempaddr=2`` also makes source selection
prefer temporary addresses (RFC 6724 rule 7); 1 prefers the public ones.
"""

from __future__ import annotations

import os
import random
from typing import Optional

from ustack.net.addr import Prefix, to_str
from ustack.net.route6 import DEPRECATED, PREFERRED, VALID_STATES, Interface6
from ustack.stats import Stats
from ustack.timers import TimerHeap

TEMP_VALID_LIFETIME = 2 * 86400.0
TEMP_PREFERRED_LIFETIME = 86400.0
TEMP_IDGEN_RETRIES = 3
MAX_DESYNC_FRACTION = 0.4  # MAX_DESYNC_FACTOR = 0.4 x TEMP_PREFERRED_LIFETIME (RFC 8981 3.8)
MAX_TEMPORARY = 32  # temporary addresses held at once (remote RAs cannot push past it)


def usable_iid(iid: bytes) -> bytes:
    """An interface identifier that is not one of RFC 5453's reserved ones (those become ::1)."""
    if iid == bytes(8) or iid[:7] == b"\xfd\xff\xff\xff\xff\xff\xff":
        return bytes(7) + b"\x01"
    return iid


def random_iid() -> bytes:
    """RFC 8981 3.3.1: 64 random bits (reserved identifiers avoided)."""
    return usable_iid(os.urandom(8))


class TempAddresses:
    """The temporary addresses of one interface; ``start_dad(addr, now)`` is NDP's (it runs DAD)."""

    def __init__(self, iface: Interface6, timers: TimerHeap, stats: Stats, start_dad, *, mode: int,
                 dad_transmits: int, retrans_timer: float, valid_lifetime: float = TEMP_VALID_LIFETIME,
                 preferred_lifetime: float = TEMP_PREFERRED_LIFETIME, rng: Optional[random.Random] = None):
        if mode not in (1, 2):
            raise ValueError("use_tempaddr is 0 (off), 1 (temporary addresses, public ones preferred) or 2 "
                             "(temporary ones preferred)")
        if not 0 < preferred_lifetime <= valid_lifetime:
            raise ValueError("temporary addresses need 0 < preferred_lifetime <= valid_lifetime")
        self.iface = iface
        self.stats = stats
        self.start_dad = start_dad
        self.valid_lifetime = valid_lifetime
        self.preferred_lifetime = preferred_lifetime
        self.regen_advance = 2.0 + TEMP_IDGEN_RETRIES * dad_transmits * retrans_timer
        self.rng = rng or random.SystemRandom()
        iface.prefer_temporary = mode == 2
        self.prefixes: dict[bytes, tuple[float, float]] = {}  # /64 prefix -> (valid until, preferred until)
        self.created: dict[bytes, float] = {}  # temporary address -> when it was made
        self._timer = timers.timer(self._tick)

    def prefix_seen(self, prefix: bytes, valid: float, preferred: float, now: float) -> None:
        """An RA's autonomous /64 prefix with its lifetimes (RFC 4862 5.5.3 / RFC 8981 3.4)."""
        prefix = bytes(prefix[:8])
        self.prefixes[prefix] = (now + valid, now + preferred)
        current = False
        for entry in self._of(prefix):
            born = self.created[entry.addr]
            entry.valid_until = min(entry.valid_until, now + valid, born + self.valid_lifetime)
            entry.preferred_until = min(entry.preferred_until, now + preferred)
            if entry.state != DEPRECATED and not entry.regenerated:
                current = True
        if not current and preferred > 0:
            self._create(prefix, now, 0)
        self._arm()

    def _of(self, prefix: bytes) -> list:
        return [e for e in self.iface.addresses.values() if e.temporary and e.addr[:8] == prefix]

    def _create(self, prefix: bytes, now: float, attempt: int) -> None:
        stats = self.stats
        valid_until, preferred_until = self.prefixes.get(prefix, (now, now))
        desync = self.rng.uniform(0, MAX_DESYNC_FRACTION * self.preferred_lifetime)
        valid = min(valid_until - now, self.valid_lifetime)
        preferred = min(preferred_until - now, self.preferred_lifetime - desync, valid)
        if preferred <= self.regen_advance:  # RFC 8981 3.4 step 5: it would be deprecated before its successor
            stats.inc("ndp.temp_lifetime_too_short")
            return
        if sum(1 for e in self.iface.addresses.values() if e.temporary) >= MAX_TEMPORARY:
            stats.drop("ndp.temp_table_full")
            return
        addr = prefix + random_iid()
        if addr in self.iface.addresses:
            return
        entry = self.iface.add(Prefix(f"{to_str(addr)}/64"), "temporary")
        entry.valid_until, entry.preferred_until, entry.attempt = now + valid, now + preferred, attempt
        self.created[addr] = now
        stats.inc("ndp.temp_created")
        self.start_dad(addr, now)
        self._arm()

    def dad_failed(self, entry, now: float) -> None:
        """Someone else has the identifier we drew: a new one, at most TEMP_IDGEN_RETRIES times (3.4)."""
        self.iface.remove(entry.addr)
        self.created.pop(entry.addr, None)
        if entry.attempt < TEMP_IDGEN_RETRIES:
            self._create(entry.addr[:8], now, entry.attempt + 1)
        else:
            self.stats.inc("ndp.temp_idgen_failed")

    def _tick(self, now: float) -> None:
        iface, stats = self.iface, self.stats
        for entry in [e for e in iface.addresses.values() if e.temporary]:
            if entry.valid_until <= now:
                iface.remove(entry.addr)
                self.created.pop(entry.addr, None)
                stats.inc("ndp.temp_expired")
                continue
            if entry.preferred_until <= now and entry.state == PREFERRED:
                iface.set_state(entry.addr, DEPRECATED)
                stats.inc("ndp.temp_deprecated")
            if (not entry.regenerated and entry.state in VALID_STATES
                    and now >= entry.preferred_until - self.regen_advance):
                entry.regenerated = True  # RFC 8981 3.5: the successor, while the prefix is still valid
                prefix = entry.addr[:8]
                if self.prefixes.get(prefix, (0.0, 0.0))[0] > now:
                    stats.inc("ndp.temp_regenerated")
                    self._create(prefix, now, 0)
        for prefix in [p for p, (valid, _) in self.prefixes.items() if valid <= now]:
            del self.prefixes[prefix]
        self._arm()

    def _arm(self) -> None:
        """The timer at the next lifetime event of any temporary address."""
        events = []
        for e in self.iface.addresses.values():
            if e.temporary:
                events.append(e.valid_until)
                if e.state == PREFERRED:
                    events.append(e.preferred_until)
                if not e.regenerated:
                    events.append(e.preferred_until - self.regen_advance)
        if events:
            self._timer.arm(min(events))
        else:
            self._timer.cancel()
