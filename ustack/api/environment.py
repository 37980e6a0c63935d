"""The ``USTACK_*`` variables that set core options, read here on the core's behalf.

The core (``ustack.stack`` and below) reads no environment: its options are
arguments. The adapters that build stacks (``Session``, ``open_loopback``,
the ``ustack`` tools, the test suite) ask this module, so one variable
still reaches every stack a program builds:

- ``USTACK_FASTPATH=0``: ``Stack(fastpath=False)``, TCP receive header
  prediction in C off (debugging; the suite's second run). Any other value,
  or none, leaves it on.
- ``USTACK_SYN_C=0``: the SYN to a listener through the Python path even with
  the fast path on (``stack.tcp.flows.syn = None``, ``_fastpath.SynPath``
  off; ``ustack serve``'s A/B). Read by ``syn_c``.
- ``USTACK_ACK_C=0``: the handshake's ACK through the Python path even with
  the fast path on (``stack.tcp.flows.hsk = None``, ``_fastpath.HandshakePath``
  off). Read by ``ack_c``.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional


def fastpath(environ: Optional[Mapping[str, str]] = None) -> bool:
    """The ``fastpath`` a stack gets under ``environ`` (default: this process's environment)."""
    return (os.environ if environ is None else environ).get("USTACK_FASTPATH", "1") != "0"


def syn_c(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether a fast-path stack keeps its SYN path in C (``_fastpath.SynPath``) under ``environ``."""
    return (os.environ if environ is None else environ).get("USTACK_SYN_C", "1") != "0"


def ack_c(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether a fast-path stack keeps the handshake's ACK in C (``_fastpath.HandshakePath``) under ``environ``."""
    return (os.environ if environ is None else environ).get("USTACK_ACK_C", "1") != "0"
