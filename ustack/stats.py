"""Named counters. Every drop has a name (``ipv4.bad_checksum``) and a count.

Counters hang off the Stack instance (no globals). Names are dotted:
``<layer>.<event>``; drops are counted under ``drop.<layer>.<reason>`` via
``drop()`` so a report can list every drop reason together.
"""

from __future__ import annotations

from collections import Counter


class Stats:
    __slots__ = ("counters",)

    def __init__(self):
        self.counters: Counter = Counter()

    def inc(self, name: str, n: int = 1) -> None:
        self.counters[name] += n

    def drop(self, reason: str, n: int = 1) -> None:
        """Count a dropped frame/packet under its named reason, e.g. ``ipv4.bad_checksum``."""
        self.counters["drop." + reason] += n

    def __getitem__(self, name: str) -> int:
        return self.counters.get(name, 0)

    def drops(self) -> dict[str, int]:
        return {k[5:]: v for k, v in sorted(self.counters.items()) if k.startswith("drop.") and v}

    def snapshot(self) -> dict[str, int]:
        return dict(sorted(self.counters.items()))

    def format(self) -> str:
        lines = []
        for name, value in sorted(self.counters.items()):
            if value:
                lines.append(f"{name:40s} {value}")
        return "\n".join(lines)
