"""A seeded model of a bad wire: loss, duplication, corruption, delay, jitter and reordering.

One implementation for every simulated link in the project (the pipe
backend between two stacks, the TCP tests' wire between two TcpLayers).
``carry(data, now)`` decides the fate of one frame or segment and returns
the copies to deliver as ``(when, data)`` pairs: none when it is lost, two
when it is duplicated; each copy may have one bit flipped (corruption) and
is delivered after ``delay`` plus up to ``jitter`` seconds, plus
``reorder_delay`` when it is held back (reordering). Every draw comes from
one ``random.Random(seed)``: a run is reproducible. ``counters`` says what
happened (lost, duplicated, reordered, corrupted).
"""

from __future__ import annotations

import random


class Impairment:
    __slots__ = ("loss", "duplicate", "reorder", "reorder_delay", "corrupt", "delay", "jitter", "random",
                 "counters")

    def __init__(self, *, seed: int = 0, loss: float = 0.0, duplicate: float = 0.0, reorder: float = 0.0,
                 reorder_delay: float = 0.005, corrupt: float = 0.0, delay: float = 0.0, jitter: float = 0.0):
        for name, p in (("loss", loss), ("duplicate", duplicate), ("reorder", reorder), ("corrupt", corrupt)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1]")
        if delay < 0 or jitter < 0 or reorder_delay < 0:
            raise ValueError("delays must be >= 0")
        self.loss, self.duplicate, self.reorder, self.corrupt = loss, duplicate, reorder, corrupt
        self.reorder_delay, self.delay, self.jitter = reorder_delay, delay, jitter
        self.random = random.Random(seed)
        self.counters = {"lost": 0, "duplicated": 0, "reordered": 0, "corrupted": 0}

    def carry(self, data: bytes, now: float) -> list[tuple[float, bytes]]:
        """The copies of ``data`` that arrive, with their arrival times."""
        rnd = self.random
        counters = self.counters
        if self.loss and rnd.random() < self.loss:
            counters["lost"] += 1
            return []
        copies = 1
        if self.duplicate and rnd.random() < self.duplicate:
            copies = 2
            counters["duplicated"] += 1
        out = []
        for _ in range(copies):
            piece = data
            if self.corrupt and piece and rnd.random() < self.corrupt:
                pos = rnd.randrange(len(piece))
                piece = piece[:pos] + bytes((piece[pos] ^ (1 << rnd.randrange(8)),)) + piece[pos + 1:]
                counters["corrupted"] += 1
            when = now + self.delay
            if self.jitter:
                when += rnd.uniform(0, self.jitter)
            if self.reorder and rnd.random() < self.reorder:
                when += self.reorder_delay
                counters["reordered"] += 1
            out.append((when, piece))
        return out
