"""Shared test plumbing: the privileged gate, and the suite's fast path switch.

Tests that need root and network namespaces are marked ``privileged``. They
skip with a reason when unprivileged, and fail instead when
``USTACK_REQUIRE_PRIVILEGED=1`` (CI sets it) so CI cannot pass by skipping.
"""

from __future__ import annotations

import functools
import os
import shutil

import pytest

from ustack.api import environment
from ustack.stack import Stack

_STACK_INIT = pytest.StashKey()  # Stack.__init__ as it was, while the suite runs with USTACK_FASTPATH=0


def privilege_problem() -> str | None:
    """Why privileged tests cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth, TAP, AF_PACKET)"
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun"
    if not os.path.isdir("/var/run/netns") and shutil.which("ip") is None:
        return "no network namespace support"
    return None


def require_privileged() -> None:
    problem = privilege_problem()
    if problem is None:
        return
    if os.environ.get("USTACK_REQUIRE_PRIVILEGED") == "1":
        pytest.fail(f"privileged test cannot run: {problem} (USTACK_REQUIRE_PRIVILEGED=1)")
    pytest.skip(problem)


def require_or_skip(problem: str) -> None:
    """Skip with ``problem``, but fail under USTACK_REQUIRE_PRIVILEGED=1 (CI has everything tools/run installs)."""
    if os.environ.get("USTACK_REQUIRE_PRIVILEGED") == "1":
        pytest.fail(f"{problem} (USTACK_REQUIRE_PRIVILEGED=1)")
    pytest.skip(problem)


def require_tool(name: str) -> None:
    """Skip when an external tool is missing, but fail under USTACK_REQUIRE_PRIVILEGED=1 (CI installs it)."""
    if shutil.which(name) is not None:
        return
    if os.environ.get("USTACK_REQUIRE_PRIVILEGED") == "1":
        pytest.fail(f"{name} is not installed (tools/run installs it; USTACK_REQUIRE_PRIVILEGED=1)")
    pytest.skip(f"{name} is not installed")


@pytest.fixture
def privileged():
    require_privileged()


def pytest_addoption(parser):
    parser.addoption("--fastpath", choices=("on", "off"), default=None,
                     help="TCP fast path in C on or off for every stack the tests build (sets USTACK_FASTPATH)")


def pytest_configure(config):
    choice = config.getoption("--fastpath")
    if choice is not None:
        os.environ["USTACK_FASTPATH"] = "1" if choice == "on" else "0"
    # The core reads no environment (Stack(fastpath=True) by default); the suite is an adapter like
    # ustack.api.environment: under USTACK_FASTPATH=0 every Stack a test builds without an explicit
    # ``fastpath=`` gets False, so the second CI pass runs the Python path everywhere it did before.
    if not environment.fastpath():
        config.stash[_STACK_INIT] = init = Stack.__init__

        @functools.wraps(init)
        def python_path_by_default(self, *args, fastpath=False, **kw):
            init(self, *args, fastpath=fastpath, **kw)

        Stack.__init__ = python_path_by_default


def pytest_unconfigure(config):
    init = config.stash.get(_STACK_INIT, None)
    if init is not None:
        Stack.__init__ = init



def pytest_runtest_setup(item):
    if item.get_closest_marker("privileged") is not None:
        require_privileged()


# CI runs Hypothesis derandomized: the same examples every run, so a red CI
# is a reproducible failure, not a lucky draw. Locally the search stays random.
try:
    from hypothesis import settings as _hyp_settings

    _hyp_settings.register_profile("ci", derandomize=True, print_blob=True)
    if os.environ.get("CI") == "true":
        _hyp_settings.load_profile("ci")
except ImportError:  # hypothesis is a test extra
    pass
