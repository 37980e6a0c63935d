"""Every whole-stack scenario here ends with the exception barrier untouched (stack.internal_error == 0)."""

from .netsim import no_internal_error  # noqa: F401  (autouse)
