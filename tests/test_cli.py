"""The command line without privileges: serve over the pipe backend, signals, counters."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest


def run_serve_until(lines_wanted, sig):
    proc = subprocess.Popen([sys.executable, "-m", "ustack", "serve", "--backend", "pipe", "--addr", "198.18.0.2/24",
                             "--udp-echo", "7"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    done = threading.Event()

    def reader():
        for line in proc.stdout:
            lines.append(line)
            if all(any(w in l for l in lines) for w in lines_wanted):
                done.set()
        done.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        assert done.wait(30), "".join(lines)
        proc.send_signal(sig)
        rc = proc.wait(20)
        t.join(10)  # the reader ends at EOF: every line is in
    finally:
        if proc.poll() is None:
            proc.kill()
    return rc, lines


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_serve_pipe_answers_then_exits_0_with_counters(sig):
    rc, lines = run_serve_until(["ready", "udp echo from"], sig)
    text = "".join(lines)
    assert rc == 0, text
    assert "ready\n" in lines
    assert "icmp_seq=3" in text and "b'hello over the pipe'" in text
    assert "counters:" in text and "drops by reason:" in text
    assert any(l.split() == ["icmp.echo_replies_sent", "3"] for l in lines), text


def test_ping_needs_an_interface_for_real_backends():
    out = subprocess.run([sys.executable, "-m", "ustack", "ping", "--backend", "packet", "--addr", "198.18.0.2/24",
                          "198.18.0.1", "-c", "1"], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "--ifname is required" in out.stderr + out.stdout


def test_serve_reports_a_missing_interface_clearly():
    out = subprocess.run([sys.executable, "-m", "ustack", "serve", "--backend", "packet", "--ifname",
                          "nosuchif0", "--addr", "198.18.0.2/24"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "nosuchif0" in out.stderr


def test_stats_command_reads_a_running_serve(tmp_path):
    import os
    import re

    env = dict(os.environ, USTACK_STATS_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "ustack", "serve", "--backend", "pipe", "--addr", "198.18.0.2/24",
                             "--udp-echo", "7"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    ready = threading.Event()

    def reader():
        for line in proc.stdout:
            lines.append(line)
            if "udp echo from" in line:
                ready.set()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        assert ready.wait(30), "".join(lines)
        m = re.search(r"ustack stats --socket (\S+)", "".join(lines))
        assert m, "".join(lines)
        out = subprocess.run([sys.executable, "-m", "ustack", "stats", "--socket", m.group(1), "-n"],
                             capture_output=True, text=True, timeout=30, env=env)
        assert out.returncode == 0, out.stderr
        assert re.search(r"icmp\.echo_replies_sent\s+3", out.stdout), out.stdout
        auto = subprocess.run([sys.executable, "-m", "ustack", "stats", "--json"], capture_output=True, text=True,
                              timeout=30, env=env)
        assert auto.returncode == 0 and '"udp.datagrams_received": 1' in auto.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        t.join(10)
    assert not any(tmp_path.iterdir())  # the socket file is removed on exit


def test_trace_follows_a_running_serve_capture(tmp_path):
    pcap = tmp_path / "live.pcap"
    proc = subprocess.Popen([sys.executable, "-m", "ustack", "serve", "--backend", "pipe", "--addr", "198.18.0.2/24",
                             "--udp-echo", "7", "--pcap", str(pcap)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        out = subprocess.run([sys.executable, "-m", "ustack", "trace", "--follow", "-c", "8", str(pcap)],
                             capture_output=True, text=True, timeout=60)
        assert proc.poll() is None, "serve must still be running: the trace followed it live"
        lines = out.stdout.strip().splitlines()
        assert len(lines) == 8, out.stdout + out.stderr
        assert any("ICMP" in l and "echo request" in l for l in lines), out.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
