"""Sequence number arithmetic modulo 2**32 (RFC 9293 3.4).

Comparisons are "serial number" comparisons: ``a`` is before ``b`` when the
signed 32-bit difference ``a - b`` is negative. Values must stay within
2**31 of each other, which TCP's windows guarantee.
"""

from __future__ import annotations

MOD = 1 << 32
MASK = MOD - 1
HALF = 1 << 31


def seq_add(a: int, n: int) -> int:
    """``a + n`` wrapped to 32 bits (``n`` may be negative)."""
    return (a + n) & MASK


def seq_diff(a: int, b: int) -> int:
    """Signed distance ``a - b`` in sequence space, in [-2**31, 2**31)."""
    d = (a - b) & MASK
    return d - MOD if d >= HALF else d


def seq_lt(a: int, b: int) -> bool:
    return ((a - b) & MASK) >= HALF


def seq_le(a: int, b: int) -> bool:
    return a == b or ((a - b) & MASK) >= HALF


def seq_gt(a: int, b: int) -> bool:
    return a != b and ((a - b) & MASK) < HALF


def seq_ge(a: int, b: int) -> bool:
    return ((a - b) & MASK) < HALF


def seq_max(a: int, b: int) -> int:
    return a if seq_ge(a, b) else b


def seq_min(a: int, b: int) -> int:
    return a if seq_le(a, b) else b


def seq_in(x: int, lo: int, hi: int) -> bool:
    """``lo <= x < hi`` in sequence space (an empty range when lo == hi)."""
    return ((x - lo) & MASK) < ((hi - lo) & MASK)
