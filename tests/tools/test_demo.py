"""``ustack demo``: the whole tour runs, checks its transfers, and cleans up (also on Ctrl-C)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest


def demo(args, tmp_path, until=None, sig=None, timeout=240):
    argv = [sys.executable, "-m", "ustack", "demo", "--pcap", str(tmp_path / "demo.pcap"), *args]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    hit = threading.Event()

    def reader():
        for line in p.stdout:
            lines.append(line)
            if until and until in line:
                hit.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        if until:
            assert hit.wait(timeout), "".join(lines)
            p.send_signal(sig)
        rc = p.wait(timeout)
        t.join(10)
    finally:
        if p.poll() is None:
            p.kill()
    demo.last_pid = p.pid
    return rc, "".join(lines)


def our_namespaces():
    """The namespaces the last demo process made and left (another suite's demo may run meanwhile)."""
    try:
        return [n for n in os.listdir("/var/run/netns") if n.startswith(f"usdemo{demo.last_pid}")]
    except FileNotFoundError:
        return []


def test_pipe_tour_without_root_privileges(tmp_path):
    rc, out = demo(["--pipe", "--bytes", "3000000"], tmp_path)
    assert rc == 0, out
    assert out.count("matches") == 2
    assert "HTTP/1.1 200 OK" in out
    assert "icmp_seq=3" in out
    assert (tmp_path / "demo.pcap").stat().st_size > 0


@pytest.mark.privileged
def test_kernel_tour(tmp_path):
    rc, out = demo(["--bytes", "10000000"], tmp_path)
    assert rc == 0, out
    assert out.count("matches") == 2
    assert "5 received" in out
    assert "HTTP 200" in out
    assert our_namespaces() == []


@pytest.mark.privileged
def test_ctrl_c_mid_transfer_cleans_up(tmp_path):
    rc, out = demo(["--bytes", "400000000"], tmp_path, until="pulls", sig=signal.SIGINT)
    assert rc in (130, 1), out
    assert our_namespaces() == []
