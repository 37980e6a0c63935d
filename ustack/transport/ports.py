"""Local ports: the one place for the port rules of UDP and TCP alike.

- Ephemeral ports come from one range for both transports, Linux's default
  ``ip_local_port_range`` (32768-60999), chosen by RFC 6056 section 3.3.3
  (Algorithm 3, "simple hash-based"): a keyed hash of (local address, remote
  address, remote port) gives a per-destination offset, a counter moves it
  on, and the first free port from there is taken. Ports are hard to guess
  from outside, yet one destination sees them advance in order.
- A bind to port 0 with no destination yet (an unconnected UDP socket, a
  DNS query's source port, RFC 5452 9.2) has no destination to key on, so
  Algorithm 3 would hand such binds out in order and one port seen would
  tell the next. ``pick_unconnected`` starts each search at a keyed hash of
  its own counter instead (RFC 6056 3.3.1's random start, drawn from the
  stack's secret): successive binds land far apart and unpredictably.
- Two bindings on the same port overlap when their local addresses are equal
  or either is the wildcard (0.0.0.0 / ::): ``overlaps``. The transports ask
  ``conflicts`` with their own tables before they bind.
"""

from __future__ import annotations

import errno
import hashlib
from typing import Callable, Iterable

from ustack.net.addr import is_any

EPHEMERAL_LOW, EPHEMERAL_HIGH = 32768, 60999


def overlaps(a: bytes, b: bytes) -> bool:
    """Two local addresses compete for a port: equal, or one is the wildcard."""
    return a == b or is_any(a) or is_any(b)


def conflicts(addr: bytes, port: int, bound: Iterable[tuple]) -> bool:
    """Whether binding (``addr``, ``port``) overlaps one of ``bound`` ((addr, port, ...) keys)."""
    return any(k[1] == port and overlaps(k[0], addr) for k in bound)


def check_port(port) -> int:
    """The stdlib's checks on a port number (TypeError, OverflowError)."""
    if not isinstance(port, int) or isinstance(port, bool):
        raise TypeError("'str' object cannot be interpreted as an integer" if isinstance(port, str)
                        else "port must be an integer")
    if not 0 <= port <= 0xFFFF:
        raise OverflowError("port must be 0-65535.")
    return port


class EphemeralPorts:
    """RFC 6056 Algorithm 3 over [EPHEMERAL_LOW, EPHEMERAL_HIGH] for one transport."""

    __slots__ = ("_key", "_label", "_state", "counter", "draws", "low", "high")

    def __init__(self, secret: bytes, label: bytes, low: int = EPHEMERAL_LOW, high: int = EPHEMERAL_HIGH):
        if len(secret) < 16:
            raise ValueError("the port secret must be at least 16 bytes")
        self._key = bytes(secret[:32])
        self._label = label[:8]
        # Keying BLAKE2s costs about as much as hashing: key it once, copy the state per draw.
        self._state = hashlib.blake2s(key=self._key, digest_size=4, person=self._label)
        self.counter = 0
        self.draws = 0  # pick_unconnected's counter
        self.low, self.high = low, high

    def _offset(self, laddr: bytes, raddr: bytes, rport: int) -> int:
        h = self._state.copy()
        h.update(bytes(laddr) + bytes(raddr) + rport.to_bytes(2, "big"))
        return int.from_bytes(h.digest(), "big")

    def pick(self, laddr: bytes, raddr: bytes, rport: int, taken: Callable[[int], bool]) -> int:
        """The first port from this destination's offset for which ``taken(port)`` is False."""
        offset = self._offset(laddr, raddr, rport) + self.counter
        tried = self._search(offset, taken)
        self.counter += tried
        return self.low + (offset + tried - 1) % (self.high - self.low + 1)

    def pick_unconnected(self, laddr: bytes, taken: Callable[[int], bool]) -> int:
        """A free port for a bind with no destination: the search starts at a fresh keyed-hash draw."""
        self.draws += 1
        offset = self._offset(laddr, self.draws.to_bytes(8, "big"), 0)
        return self.low + (offset + self._search(offset, taken) - 1) % (self.high - self.low + 1)

    def _search(self, offset: int, taken: Callable[[int], bool]) -> int:
        """How many ports from ``offset`` on were looked at to find a free one (the last of them is free)."""
        num = self.high - self.low + 1
        for i in range(num):
            if not taken(self.low + (offset + i) % num):
                return i + 1
        raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address (no free ephemeral port)")
