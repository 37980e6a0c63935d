"""Layer-wide limits against hostile peers: the challenge-ACK budget (RFC 5961 section 7).

A fixed per-second budget of challenge ACKs is a side channel: an
off-path attacker who spoofs segments and counts the challenge ACKs it
then receives itself learns whether a spoofed guess hit a connection
(CVE-2016-5696). As Linux does since, each second's budget is
``limit / 2 + random(0 .. limit - 1)``; the random source is seeded from
the stack's secret, so it is unpredictable off the host and reproducible
in tests that fix the secret.
"""

from __future__ import annotations

import hashlib
import random


class ChallengeAckBudget:
    """At most a randomized ``limit`` challenge ACKs per second, layer-wide."""

    __slots__ = ("limit", "_rng", "_second", "_left")

    def __init__(self, limit: int, secret: bytes):
        if limit <= 0:
            raise ValueError("the challenge-ACK limit must be positive")
        self.limit = limit
        self._rng = random.Random(hashlib.blake2s(bytes(secret), person=b"chackrng").digest())
        self._second = None
        self._left = 0

    def take(self, now: float) -> bool:
        """One challenge ACK more this second, if the budget allows."""
        second = int(now)
        if second != self._second:
            self._second = second
            self._left = self.limit // 2 + self._rng.randrange(self.limit)
        if self._left <= 0:
            return False
        self._left -= 1
        return True
