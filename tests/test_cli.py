"""The command line without privileges: serve over the pipe backend, signals, counters."""

from __future__ import annotations

import os
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


# -- issue 12, item 7: a user's mistake is one line and exit status 2, never a traceback ----------------
PIPE = ["--backend", "pipe", "--addr", "198.18.0.2/24"]


@pytest.mark.parametrize("argv, what", [
    (["serve", *PIPE, "--udp-echo", "70000"], "--udp-echo: 70000 is not a port"),
    (["serve", *PIPE, "--udp-echo", "-5"], "--udp-echo: -5 is not a port"),
    (["serve", *PIPE, "--tcp-echo", "70000"], "--tcp-echo: 70000 is not a port"),
    (["serve", *PIPE, "--tcp-discard", "0"], "--tcp-discard: 0 is not a port"),
    (["serve", *PIPE, "--tcp-source", "x"], "--tcp-source: 'x' is not an integer"),
    (["serve", *PIPE, "--source-bytes", "-1"], "--source-bytes: -1 is not a byte count"),
    (["recv", *PIPE, "--listen", "70000"], "--listen: 70000 is not a port"),
    (["serve", *PIPE, "--pcap-snaplen", "-1"], "--pcap-snaplen: -1 is not a snap length"),
    (["serve", *PIPE, "--pcap-max-bytes", "10"], "--pcap-max-bytes: 10 is not a file size"),
    (["serve", *PIPE, "--mtu", "24"], "--mtu: 24 is not an IPv4 MTU (68..65535)"),
    (["serve", *PIPE, "--mtu", "100000"], "--mtu: 100000 is not an IPv4 MTU (68..65535)"),
    (["send", *PIPE, "--connect", "198.18.0.1:7", "--bytes", "-5"], "--bytes: -5 is not a byte count"),
    (["ping", *PIPE, "198.18.0.1", "-c", "0"], "--count: 0 is not a count"),
    (["ping", *PIPE, "198.18.0.1", "-i", "-1"], "--interval: -1 is not a number of seconds"),
    (["ping", *PIPE, "198.18.0.1", "-s", "70000"], "--size: 70000 is not a payload size"),
    (["serve", *PIPE, "--busy-poll", "-0.001"], "--busy-poll: -0.001 is not a number of seconds"),
    (["run", *PIPE, "--busy-poll", "nan", "x.py"], "--busy-poll: nan is not a number of seconds"),
    (["demo", "--pcap-snaplen", "0"], "--pcap-snaplen: 0 is not a snap length"),
    (["demo", "--bytes", "-5"], "--bytes: -5 is not a transfer size"),
    (["demo", "--bytes", "lots"], "--bytes: 'lots' is not an integer"),
    (["stats", "--pid", "0"], "--pid: 0 is not a process id"),
    (["stats", "--pid", "99999999"], "--pid: 99999999 is not a process id"),
    (["stats", "--watch", "0"], "--watch: 0 is not an interval in seconds"),
    (["stats", "--watch", "inf"], "--watch: inf is not an interval in seconds"),
    (["stats", "--count", "-1"], "--count: -1 is not a count"),
    (["trace", "x.pcap", "--port", "70000"], "--port: 70000 is not a port number"),
    (["trace", "x.pcap", "-c", "0"], "--count: 0 is not a count"),
    (["trace", "x.pcap", "--host", "300.1.1.1"], "--host: '300.1.1.1' is not an IPv4 or IPv6 address"),
    (["trace", "x.pcap", "--interval", "-1"], "--interval: -1 is not an interval in seconds"),
    (["bench", "--reps", "0"], "--reps: 0 is not a count"),
    (["bench", "--rtt-warmup", "-1"], "--rtt-warmup: -1 is not a count"),
    (["bench", "--bulk-seconds", "nan"], "--bulk-seconds: nan is not a number of seconds"),
    (["bench", "--bulk-bytes", "1e99"], "--bulk-bytes: '1e99' is not an integer"),
])
def test_bad_values_are_refused_by_the_parser_in_one_line(argv, what, capsys):
    from ustack.tools.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert what in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def ustack(*argv, timeout=30, **kw):
    return subprocess.run([sys.executable, "-m", "ustack", *argv], capture_output=True, text=True,
                          timeout=timeout, **kw)


def test_send_without_a_route_fails_at_once_with_enetunreach():
    out = ustack("send", *PIPE, "--connect", "10.9.9.9:80", "--bytes", "10")
    assert out.returncode == 1
    assert "Network is unreachable" in out.stderr and "Traceback" not in out.stderr


def test_a_pcap_path_that_cannot_be_written_is_one_line(tmp_path):
    for path in ("/proc/version", str(tmp_path / "no" / "such" / "dir.pcap"), str(tmp_path)):
        out = ustack("serve", *PIPE, "--pcap", path)
        assert out.returncode == 2, out.stderr
        assert path in out.stderr and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_pcap_symlink_is_refused_and_its_target_untouched(tmp_path):
    target = tmp_path / "target"
    target.write_text("keep")
    (tmp_path / "cap.pcap").symlink_to(target)
    out = ustack("serve", *PIPE, "--pcap", str(tmp_path / "cap.pcap"))
    assert out.returncode == 2 and "symbolic link" in out.stderr and "Traceback" not in out.stderr
    assert target.read_text() == "keep"


def test_an_existing_pcap_is_refused_unless_pcap_overwrite(tmp_path):
    from ustack.pcap import read_pcap

    pcap = tmp_path / "cap.pcap"
    pcap.write_bytes(b"someone's file")
    out = ustack("run", *PIPE, "--pcap", str(pcap), "echo_client.py", "0", cwd=PROGRAMS)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().splitlines() == [
        f"ustack run: {pcap}: exists: refusing to overwrite it (--pcap-overwrite replaces it)"], out.stderr
    assert pcap.read_bytes() == b"someone's file"
    out = ustack("run", *PIPE, "--pcap", str(pcap), "--pcap-overwrite", "echo_client.py", "0", cwd=PROGRAMS)
    assert out.returncode == 0, out.stderr
    assert len(list(read_pcap(str(pcap)))) > 10 and os.stat(pcap).st_mode & 0o777 == 0o600


def test_serve_pcap_max_bytes_caps_the_capture(tmp_path):
    from ustack.pcap import read_pcap

    pcap = tmp_path / "cap.pcap"
    proc = subprocess.Popen([sys.executable, "-m", "ustack", "serve", *PIPE, "--udp-echo", "7", "--pcap", str(pcap),
                             "--pcap-max-bytes", "300"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "udp echo from" in line:
                break
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(lines) + rest
    assert proc.returncode == 0, text
    assert os.path.getsize(pcap) <= 300
    assert len(list(read_pcap(str(pcap)))) >= 1
    assert os.stat(pcap).st_mode & 0o777 == 0o600
    assert "pcap: capture stopped at --pcap-max-bytes" in text, text


def test_ctrl_c_during_send_is_one_line_not_a_traceback():
    # Nobody answers ARP on the pipe's other end: send waits in connect until interrupted.
    proc = subprocess.Popen([sys.executable, "-m", "ustack", "send", *PIPE, "--connect", "198.18.0.1:9",
                             "--bytes", "10"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()
        assert "connecting to 198.18.0.1:9" in first, first
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err, err


# -- ustack run: an unmodified program on a ustack stack (pipe backend: no privileges) -----------------
PROGRAMS = os.path.join(os.path.dirname(__file__), "api", "programs")
RUN_PIPE = ("run", "--backend", "pipe", "--addr", "198.18.0.2/24")


def test_run_programs_under_test_do_not_know_ustack():
    for name in os.listdir(PROGRAMS):
        if name.endswith(".py"):
            with open(os.path.join(PROGRAMS, name)) as f:
                assert "ustack" not in f.read().lower(), name


def test_run_script_talks_to_the_pipe_peer_argv_and_exit_status_exact():
    out = ustack(*RUN_PIPE, "echo_client.py", "3", "198.18.0.3", "--not-ours", cwd=PROGRAMS)
    assert out.returncode == 3, out.stderr
    assert out.stdout.splitlines() == [
        "argv ['3', '198.18.0.3', '--not-ours']",
        "udp datagram over the wire 198.18.0.3 7",
        "tcp 100000 True",
    ], out.stdout + out.stderr
    assert out.stderr == ""


def test_run_sys_argv_and_main_are_what_python_gives(tmp_path):
    prog = tmp_path / "show.py"
    prog.write_text("import sys, json\nprint(json.dumps([sys.argv, __name__, __file__, sys.path[0]]))\n")
    for form in (["show.py"], ["-m", "show"]):
        argv = [*form, "a", "-b", "--addr", "x y"]
        ours = ustack(*RUN_PIPE, *argv, cwd=tmp_path)
        python = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=30, cwd=tmp_path)
        assert ours.returncode == python.returncode == 0, ours.stderr
        assert ours.stdout == python.stdout, (form, ours.stdout, python.stdout)


def test_run_module_form_reaches_the_peer_and_exit_status_0():
    out = ustack(*RUN_PIPE, "-m", "echo_client", "0", cwd=PROGRAMS)
    assert out.returncode == 0, out.stderr
    assert "tcp 100000 True" in out.stdout and "udp datagram over the wire 198.18.0.3 7" in out.stdout


def test_run_uncaught_exception_prints_the_programs_traceback_status_1():
    out = ustack(*RUN_PIPE, "fails.py", cwd=PROGRAMS)
    python = subprocess.run([sys.executable, "fails.py"], capture_output=True, text=True, timeout=30, cwd=PROGRAMS)
    assert out.returncode == python.returncode == 1
    assert out.stderr == python.stderr  # the program's frames only: none of ustack's or runpy's
    assert out.stderr.startswith("Traceback (most recent call last):\n")
    assert out.stderr.endswith("ValueError: the program's own error\n")


@pytest.mark.parametrize("code, status, err", [("None", 0, ""), ("256 + 7", 7, ""), ("'bye'", 1, "bye\n")])
def test_run_sys_exit_values_map_as_python_maps_them(tmp_path, code, status, err):
    (tmp_path / "ex.py").write_text(f"import sys\nsys.exit({code})\n")
    out = ustack(*RUN_PIPE, "ex.py", cwd=tmp_path)
    assert (out.returncode, out.stderr) == (status, err)


def test_run_sigint_is_keyboardinterrupt_in_the_program():
    proc = subprocess.Popen([sys.executable, "-m", "ustack", *RUN_PIPE, "waits_for_sigint.py"], cwd=PROGRAMS,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert out == "finally ran\n"
    assert err.startswith("Traceback (most recent call last):\n") and err.endswith("KeyboardInterrupt\n"), err
    assert "waits_for_sigint.py" in err
    assert proc.returncode == -signal.SIGINT  # as python: an uncaught KeyboardInterrupt ends it by SIGINT


def test_run_busy_poll_reaches_the_driver(tmp_path):
    (tmp_path / "bp.py").write_text("import socket\nprint(socket.socket._driver.busy_poll)\n")
    out = ustack("run", "--busy-poll", "0.002", *RUN_PIPE[1:], "bp.py", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, "0.002\n"), out.stderr


def test_run_needs_a_program():
    out = ustack(*RUN_PIPE)
    assert out.returncode == 2 and "SCRIPT or -m MODULE" in out.stderr
    out = ustack(*RUN_PIPE, "-m")
    assert out.returncode == 2 and "expected a module name" in out.stderr


def test_run_missing_script_is_pythons_error(tmp_path):
    out = ustack(*RUN_PIPE, "nosuch.py", cwd=tmp_path)
    assert out.returncode != 0 and "nosuch.py" in out.stderr


def test_ipv6_only_serve_and_run_over_the_pipe(tmp_path):
    """--addr fd00::2/64 alone: serve answers the pipe peer's ICMPv6 pings and UDP echo; run reaches its echo."""
    proc = subprocess.Popen([sys.executable, "-m", "ustack", "serve", "--backend", "pipe", "--addr", "fd00::2/64",
                             "--udp-echo", "7"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "udp echo" in line or "timed out" in line:
                break
        proc.send_signal(signal.SIGTERM)
        lines += proc.stdout.readlines()
        assert proc.wait(20) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(lines)
    assert "ustack: fd00::2/64 mac" in text and "pipe peer fd00::3: 64 bytes from fd00::2: icmp_seq=3" in text, text
    assert "pipe peer fd00::3: udp echo from fd00::2:7: b'hello over the pipe'" in text, text
    assert any(l.split() == ["icmpv6.echo_replies_sent", "3"] for l in lines), text
    prog = tmp_path / "six.py"
    prog.write_text("import socket\n"
                    "with socket.create_connection(('fd00::3', 7), timeout=5) as c:\n"
                    "    c.sendall(b'six' * 1000)\n    c.shutdown(socket.SHUT_WR)\n"
                    "    got = c.makefile('rb').read()\n"
                    "    print(got == b'six' * 1000, c.getsockname()[0], c.getpeername()[:2])\n")
    out = ustack("run", "--backend", "pipe", "--addr", "fd00::2/64", "six.py", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == "True fd00::2 ('fd00::3', 7)\n", out.stdout + out.stderr
