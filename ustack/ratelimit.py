"""Rate limiting by token bucket, time passed in (ICMP errors, RFC 5961 challenge ACKs).

One implementation for every limiter in the stack: tokens refill at ``rate``
per second up to ``burst``; ``take(now)`` spends one if there is one.
"""

from __future__ import annotations


class TokenBucket:
    """Tokens refill at ``rate`` per second up to ``burst``; time is passed in."""

    __slots__ = ("rate", "burst", "tokens", "last")

    def __init__(self, rate: float, burst: float, now: float = 0.0):
        self.rate, self.burst, self.tokens, self.last = rate, burst, burst, now

    def take(self, now: float) -> bool:
        if now > self.last:
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
            self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False
