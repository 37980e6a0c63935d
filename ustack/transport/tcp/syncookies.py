"""SYN cookie keys that rotate, and when a listener may expect cookie ACKs (RFC 4987 3.6).

The cookie layout is ``isn.py``'s (5 bits of a 64-second period counter,
3 bits of MSS index, a 24-bit MAC); here the MAC's key is not one fixed
secret but a fresh random key per period: the key of the current period
and of the previous one are kept (a cookie is good for the period it was
made in and the next), older ones are forgotten, so a key that leaks is
worthless two periods later and nothing derivable from the stack's ISN
secret validates a cookie.

A listener validates an ACK as a cookie only within ``COOKIE_VALID``
seconds after it actually sent cookies (Linux: after a recent SYN-queue
overflow, TCP_SYNCOOKIE_VALID); otherwise a blind attacker's ACK gets a
RST without reaching the MAC check (``tcp.syncookie_not_expected``), and
the 2**24 guesses the MAC allows cannot even be tried.
"""

from __future__ import annotations

import hashlib
import os

from ustack.transport.tcp.isn import COOKIE_PERIOD, _PORTS, _key

COOKIE_VALID = 2 * COOKIE_PERIOD  # seconds after the last cookie sent during which cookie ACKs are checked


class SynCookies:
    """The rotating cookie keys of one TCP layer (``entropy(n)`` gives n random bytes)."""

    __slots__ = ("_master", "_entropy", "_keys", "rotations")

    def __init__(self, master: bytes, entropy=os.urandom):
        self._master = _key(master)
        self._entropy = entropy
        self._keys: dict[int, object] = {}  # absolute period -> keyed BLAKE2s state (current, previous)
        self.rotations = 0

    def _state_for(self, period: int, create: bool):
        state = self._keys.get(period)
        if state is None and create:
            seed = hashlib.blake2s(self._entropy(16) + period.to_bytes(8, "big"), key=self._master,
                                   person=b"ckrotate").digest()
            state = hashlib.blake2s(key=seed, digest_size=4, person=b"cookie")
            self._keys = {p: s for p, s in self._keys.items() if p == period - 1}
            self._keys[period] = state
            self.rotations += 1
        return state

    def _mac(self, state, laddr: bytes, lport: int, raddr: bytes, rport: int, client_isn: int, t: int) -> int:
        h = state.copy()
        h.update(bytes(laddr) + bytes(raddr) + _PORTS.pack(lport, rport) + client_isn.to_bytes(4, "big")
                 + bytes((t,)))
        return int.from_bytes(h.digest(), "big") & 0xFFFFFF

    def make(self, laddr: bytes, lport: int, raddr: bytes, rport: int, client_isn: int, mss_index: int,
             now: float) -> int:
        """The ISS of a cookie SYN-ACK, keyed with this period's key."""
        period = int(now // COOKIE_PERIOD)
        t = period & 31
        mac = self._mac(self._state_for(period, True), laddr, lport, raddr, rport, client_isn, t)
        return (t << 27) | ((mss_index & 7) << 24) | mac

    def check(self, laddr: bytes, lport: int, raddr: bytes, rport: int, client_isn: int, cookie: int,
              now: float) -> int | None:
        """The MSS index ``cookie`` encodes, or None when it is forged, expired or of a forgotten key."""
        t = cookie >> 27
        period = int(now // COOKIE_PERIOD)
        for made in (period, period - 1):
            if made & 31 == t:
                state = self._state_for(made, False)
                if state is None:
                    return None
                if self._mac(state, laddr, lport, raddr, rport, client_isn, t) != cookie & 0xFFFFFF:
                    return None
                return (cookie >> 24) & 7
        return None
