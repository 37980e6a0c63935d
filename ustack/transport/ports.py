"""Local ports: the one place for the port rules of UDP and TCP alike.

- Ephemeral ports come from one range for both transports, Linux's default
  ``ip_local_port_range`` (32768-60999), chosen by RFC 6056 section 3.3.3
  (Algorithm 3, "simple hash-based"): a keyed hash of (local address, remote
  address, remote port) gives a per-destination offset, a counter moves it
  on, and the first free port from there is taken. Ports are hard to guess
  from outside, yet one destination sees them advance in order.
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

    __slots__ = ("_key", "_label", "counter", "low", "high")

    def __init__(self, secret: bytes, label: bytes, low: int = EPHEMERAL_LOW, high: int = EPHEMERAL_HIGH):
        if len(secret) < 16:
            raise ValueError("the port secret must be at least 16 bytes")
        self._key = bytes(secret[:32])
        self._label = label[:8]
        self.counter = 0
        self.low, self.high = low, high

    def _offset(self, laddr: bytes, raddr: bytes, rport: int) -> int:
        h = hashlib.blake2s(key=self._key, digest_size=4, person=self._label)
        h.update(bytes(laddr) + bytes(raddr) + rport.to_bytes(2, "big"))
        return int.from_bytes(h.digest(), "big")

    def pick(self, laddr: bytes, raddr: bytes, rport: int, taken: Callable[[int], bool]) -> int:
        """The first port from this destination's offset for which ``taken(port)`` is False."""
        num = self.high - self.low + 1
        offset = self._offset(laddr, raddr, rport) + self.counter
        for i in range(num):
            port = self.low + (offset + i) % num
            if not taken(port):
                self.counter += i + 1
                return port
        raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address (no free ephemeral port)")
