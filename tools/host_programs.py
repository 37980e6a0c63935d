"""Host programs the tools run (nft, ip, cc, taskset ...): found on PATH, or named in one line.

``require(name, purpose)`` returns the program's path, or raises
``MissingProgram`` (a FileNotFoundError) whose message names it and says
what it was for: ``nft is not installed (needed for: ...)``. A benchmark
catches it around one row or one section, prints that line and goes on
with the others (``ustack bench``: the row is "not available", the section
a note), instead of a traceback from deep inside ``subprocess``.
"""

from __future__ import annotations

import errno
import shutil


class MissingProgram(FileNotFoundError):
    """A host program a measurement needs is not on PATH."""

    def __init__(self, name: str, purpose: str):
        super().__init__(errno.ENOENT, f"{name} is not installed (needed for: {purpose})")
        self.program = name

    def __str__(self) -> str:
        return self.strerror


def require(name: str, purpose: str) -> str:
    """The path of host program ``name``; MissingProgram when it is not on PATH."""
    path = shutil.which(name)
    if path is None:
        raise MissingProgram(name, purpose)
    return path
