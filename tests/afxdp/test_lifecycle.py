"""Teardown of an AF_XDP device when its process ends: exit, SIGTERM, SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.afxdp.helpers import REPO, open_device, xdp_prog_id

pytestmark = pytest.mark.privileged

CHILD = """
import sys, time
sys.path.insert(0, {repo!r})
from ustack.backends.afxdp import AfXdpDevice
dev = AfXdpDevice({ifname!r})
print("ready", dev.capabilities.extra["xdp_prog_id"], flush=True)
if {ending!r} == "exit":
    sys.exit(0)  # no close(): atexit must do it
time.sleep(60)
"""


def _child(topo, ending: str) -> tuple[subprocess.Popen, int]:
    code = CHILD.format(repo=REPO, ifname=topo.stack_ifname, ending=ending)
    proc = topo.stack_popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline().split()
    assert line and line[0] == "ready", proc.stderr.read()
    return proc, int(line[1])


def test_exit_without_close_detaches(topo):
    proc, prog = _child(topo, "exit")
    assert proc.wait(timeout=30) == 0
    assert prog != 0 and xdp_prog_id(topo) == 0


def test_sigterm_tears_down(topo):
    proc, prog = _child(topo, "sleep")
    assert xdp_prog_id(topo) == prog
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM  # SystemExit from our handler
    assert xdp_prog_id(topo) == 0
    with open_device(topo) as dev:  # queue free again
        assert dev.capabilities.extra["xdp_prog_owned"] is True


def test_program_left_by_a_killed_process_is_adopted(topo):
    proc, prog = _child(topo, "sleep")
    proc.kill()  # SIGKILL: no teardown possible, the program stays attached
    proc.wait(timeout=30)
    assert xdp_prog_id(topo) == prog
    with open_device(topo) as dev:
        # reused (same program), and adopted because its owner is dead
        assert dev.capabilities.extra["xdp_prog_id"] == prog
        assert dev.capabilities.extra["xdp_prog_owned"] is True
    assert xdp_prog_id(topo) == 0
