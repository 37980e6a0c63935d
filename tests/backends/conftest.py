"""Fixtures for the backend conformance suite.

``link`` / ``small_link`` are parametrized over ``LINK_FACTORIES``: one entry
per backend kind, each a callable ``(small: bool) -> link`` (see
tests/backends/link.py for the surface a link offers). Kernel-peered kinds
come from ``KERNEL_KINDS``; to run the suite on another backend add its
factory here (e.g. "afxdp" via a KERNEL_KINDS entry, or a "pipe" link with a
scripted peer).
"""

from __future__ import annotations

import pytest

from tests.backends.link import KERNEL_KINDS, KernelLink

LINK_FACTORIES = {kind: (lambda small, kind=kind: KernelLink(kind, small=small)) for kind in KERNEL_KINDS}


@pytest.fixture(params=sorted(LINK_FACTORIES))
def link(request, privileged):
    made = LINK_FACTORIES[request.param](False)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(params=sorted(LINK_FACTORIES))
def small_link(request, privileged):
    """A link whose device was opened with small RX/TX buffering (``small_opts``)."""
    made = LINK_FACTORIES[request.param](True)
    try:
        yield made
    finally:
        made.close()
