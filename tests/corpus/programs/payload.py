"""Deterministic test payloads shared by the corpus programs: the same seed gives the same bytes everywhere."""

import hashlib
import random


def blob(size, seed=0):
    """``size`` pseudo-random bytes from ``seed`` (identical on every run and every machine)."""
    return random.Random(seed).randbytes(size)


def digest(data):
    return hashlib.sha256(data).hexdigest()
