"""``ustack run --user`` and ``ustack serve --user`` (issue 25, item 8): root opens the device, nobody runs the rest.

Over a veth pair in namespaces of their own (ustack.tools.netns), against a
kernel TCP echo server / client: the program (tests/api/programs/whoami_tcp.py)
sees uid 65534, no capability in any set, no_new_privs; AF_PACKET and bpf(2)
are refused; its TCP still moves bytes exactly. After exit, what needed
privilege to undo (the XDP program, the packet backend's nftables claim) is
gone: the teardown keeper did it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from tests.conftest import require_tool

pytestmark = pytest.mark.privileged

PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")
SIZE = 300_000
NOBODY = 65534
ECHO_SERVER = """
import socket, sys
srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("listening", flush=True)
while True:
    c, _ = srv.accept()
    with c:
        while True:
            b = c.recv(65536)
            if not b:
                break
            c.sendall(b)
"""
ECHO_CLIENT = """
import hashlib, socket, sys
size = int(sys.argv[3])
payload = bytes((i * 7 + i // 251) & 0xFF for i in range(size))
with socket.create_connection((sys.argv[1], int(sys.argv[2])), 10) as s:
    s.sendall(payload)
    s.shutdown(socket.SHUT_WR)
    got = bytearray()
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
print("echo", len(got), got == payload, flush=True)
"""
NO_CAPS = ["CapInh: 0000000000000000", "CapPrm: 0000000000000000", "CapEff: 0000000000000000",
           "CapBnd: 0000000000000000", "CapAmb: 0000000000000000", "NoNewPrivs: 1"]


@pytest.fixture
def topo():
    from ustack.tools.netns import Topology

    with Topology.veth(tag="pv") as t:
        yield t


def _python_nobody_can_run() -> list[str]:
    """This interpreter when nobody can read its standard library; else the system's, with our packages.

    (A pyenv Python under /root is unreadable to nobody: ``--user nobody`` refuses it, saying so.)
    """
    from ustack.tools.privileges import readable_by, target_user

    if readable_by(os.path.dirname(os.__file__), target_user("nobody")):
        return [sys.executable, "-m", "ustack"]
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.path.exists(system):
        pytest.skip(f"no Python {sys.version_info.major}.{sys.version_info.minor} that nobody can read")
    boot = (f"import runpy, site\nfor d in {[p for p in sys.path if p]!r}:\n    site.addsitedir(d)\n"
            "runpy.run_module('ustack', run_name='__main__', alter_sys=True)")
    return [system, "-c", boot]


def _stack_argv(t, command, backend):
    return [*_python_nobody_can_run(), command, "--backend", backend, "--ifname", t.stack_ifname,
            "--addr", f"{t.stack_addr}/{t.prefixlen}"]


def _leftovers(t) -> list[str]:
    """What a privileged teardown should have removed: an XDP program on the interface, an nft claim table."""
    out = []
    link = subprocess.run(["ip", "-n", t.stack_ns, "-d", "link", "show", "dev", t.stack_ifname],
                          capture_output=True, text=True, timeout=10).stdout
    if re.search(r"\bxdp(generic|drv)?\b", link) or "prog/xdp" in link:
        out.append("xdp program still attached")
    tables = subprocess.run(["ip", "netns", "exec", t.stack_ns, "nft", "list", "tables"], capture_output=True,
                            text=True, timeout=10).stdout
    if "ustack_claim" in tables:
        out.append(f"claim table left: {tables.strip()}")
    return out


@pytest.mark.parametrize("backend", ["packet", "afxdp"])
def test_run_user_nobody_has_no_privilege_and_tcp_to_the_kernel_is_exact(topo, backend):
    require_tool("nft")
    server = topo.peer_popen([sys.executable, "-c", ECHO_SERVER, topo.peer_addr, "7007"], stdout=subprocess.PIPE,
                             text=True)
    assert server.stdout.readline().strip() == "listening"
    proc = topo.stack_popen([*_stack_argv(topo, "run", backend), "--user", "nobody",
                             os.path.join(PROGRAMS, "whoami_tcp.py"), topo.peer_addr, "7007", str(SIZE)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, out + err
    lines = out.splitlines()
    assert lines[0] == f"uid {NOBODY} {NOBODY} gid {NOBODY} {NOBODY} groups [{NOBODY}]", out
    assert sorted(lines[1:7]) == sorted(NO_CAPS), out
    assert lines[7:9] == ["AF_PACKET: PermissionError", "bpf: Operation not permitted"], out
    assert lines[9].startswith(f"echo {SIZE} True "), out
    assert "ustack: running as nobody (uid 65534, gid 65534), no capabilities, no_new_privs" in err, err
    assert "teardown" not in err, err
    assert _leftovers(topo) == []


def test_run_refuses_a_user_who_cannot_read_the_interpreter(tmp_path):
    from ustack.tools.privileges import readable_by, target_user

    if readable_by(os.path.dirname(os.__file__), target_user("nobody")):
        pytest.skip("this Python is readable by nobody")
    out = subprocess.run([sys.executable, "-m", "ustack", "run", "--backend", "pipe", "--addr", "198.18.0.2/24",
                          "--user", "nobody", os.path.join(PROGRAMS, "echo_client.py"), "0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("ustack run: --user nobody: that user cannot read this Python's standard library")


@pytest.mark.parametrize("backend", ["afxdp", "packet"])
def test_serve_user_nobody_has_no_privilege_and_its_echo_is_exact(topo, backend):
    require_tool("nft")
    proc = topo.stack_popen([*_stack_argv(topo, "serve", backend), "--tcp-echo", "7", "--user", "nobody"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.strip() == "ready":
                break
        else:
            pytest.fail("serve did not start: " + proc.stderr.read())
        with open(f"/proc/{proc.pid}/status") as f:
            status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
        assert status["Uid"].split() == [str(NOBODY)] * 4 and status["Gid"].split() == [str(NOBODY)] * 4
        assert status["Groups"].split() == [str(NOBODY)]
        for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert status[key] == "0000000000000000", (key, status[key])
        assert status["NoNewPrivs"] == "1"
        client = topo.peer_run([sys.executable, "-c", ECHO_CLIENT, topo.stack_addr, "7", str(SIZE)], timeout=60,
                               capture_output=True, text=True)
        assert client.stdout.strip() == f"echo {SIZE} True", client.stdout + client.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, out + err
    assert "teardown" not in err, err
    assert _leftovers(topo) == []


def test_under_sudo_the_default_is_the_invoking_user():
    env = dict(os.environ, SUDO_UID=str(NOBODY), SUDO_GID=str(NOBODY), SUDO_USER="nobody")
    argv = [*_python_nobody_can_run(), "run", "--backend", "pipe", "--addr", "198.18.0.2/24", "-c"]
    prog = os.path.join(PROGRAMS, "whoami_tcp.py")
    out = subprocess.run([*argv[:-1], prog, "198.18.0.3", "7", "1000"], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == f"uid {NOBODY} {NOBODY} gid {NOBODY} {NOBODY} groups [{NOBODY}]"
    assert out.stdout.splitlines()[-1].startswith("echo 1000 True "), out.stdout  # the pipe peer's echo
    kept = subprocess.run([*argv[:-1], "--keep-privileges", prog, "198.18.0.3", "7", "1000"], capture_output=True,
                          text=True, timeout=60, env=env)
    assert kept.returncode == 0 and kept.stdout.splitlines()[0].startswith("uid 0 0 gid 0 0"), kept.stdout
