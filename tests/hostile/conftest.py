"""Hostile-network scenarios: whole stacks on the pipe backend (tests/stack/netsim.py), manual clock."""

from tests.stack.netsim import no_internal_error  # noqa: F401  (autouse: the barrier stays untouched)
