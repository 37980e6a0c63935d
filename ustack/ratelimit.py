"""Rate limiting by token bucket, time passed in (ICMP errors, RFC 5961 challenge ACKs).

One implementation for every limiter in the stack: tokens refill at ``rate``
per second up to ``burst``; ``take(now)`` spends one if there is one.
``ErrorBudget`` is the ICMP and ICMPv6 error limiter built on it.
"""

from __future__ import annotations

from typing import Optional


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


class ErrorBudget:
    """The budget of ICMP / ICMPv6 errors: a bucket per destination and one for the whole host.

    Per destination (RFC 1812 4.3.2.8, RFC 4443 2.4 (f)): ``rate`` errors a
    second, ``burst`` at once; at most ``max_buckets`` destinations are
    tracked, the oldest forgotten first (``<prefix>.ratelimit_evicted``), so
    spoofed sources cannot grow the table. Host-wide: ``global_rate`` /
    ``global_burst``, so that many spoofed sources cannot multiply the
    per-destination rate. ``allow(dst, now)`` spends a token of both, counting
    a refusal as ``<prefix>.errors_rate_limited`` or
    ``<prefix>.errors_global_limited``.
    """

    __slots__ = ("rate", "burst", "max_buckets", "global_rate", "global_burst", "stats", "prefix", "_buckets",
                 "_global")

    def __init__(self, stats, prefix: str, *, rate: float, burst: float, max_buckets: int,
                 global_rate: float, global_burst: float):
        self.rate, self.burst, self.max_buckets = rate, burst, max_buckets
        self.global_rate, self.global_burst = global_rate, global_burst
        self.stats, self.prefix = stats, prefix
        self._buckets: dict[bytes, TokenBucket] = {}
        self._global: Optional[TokenBucket] = None  # made at the first error (its clock starts there)

    def __len__(self) -> int:
        return len(self._buckets)

    def allow(self, dst: bytes, now: float) -> bool:
        buckets = self._buckets
        bucket = buckets.get(dst)
        if bucket is None:
            if len(buckets) >= self.max_buckets:
                del buckets[next(iter(buckets))]  # the oldest (dicts keep insertion order)
                self.stats.inc(f"{self.prefix}.ratelimit_evicted")
            bucket = buckets[dst] = TokenBucket(self.rate, self.burst, now)
        if not bucket.take(now):
            self.stats.inc(f"{self.prefix}.errors_rate_limited")
            return False
        if self._global is None:
            self._global = TokenBucket(self.global_rate, self.global_burst, now)
        if not self._global.take(now):
            self.stats.inc(f"{self.prefix}.errors_global_limited")
            return False
        return True
