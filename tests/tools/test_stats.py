"""``ustack stats``: a StatsPublisher (stats_server) on a live stack, read back by ``ustack.tools.stats.main``.

Two stacks over the pipe backend on a real clock. Stack A connects to a
listener on B, sends 3000 bytes, has a UDP socket holding three datagrams
from B, and receives crafted frames that it drops under named reasons. The
drivers' threads are not running: each wait polls the stacks itself, so
once set up the stacks are frozen and a snapshot can be compared exactly.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import stat
import sys
import threading

import pytest

from ustack.backends.pipe import PipeLink
from ustack.tools import stats as ustats
from ustack.tools import stats_client, stats_render, stats_server, stats_socket
from ustack.api.clock import MonotonicClock
from ustack.api.driver import Driver
from ustack.net.addr import ANY4, parse as ip_addr
from ustack.stack import Stack
from ustack.transport.tcp.tcb import State
from ustack.wire.checksum import internet_checksum

ANY = b"\0\0\0\0"
A_IP, B_IP = "198.18.0.1", "198.18.0.2"
B = bytes(int(x) for x in B_IP.split("."))
TCP_PORT, UDP_PORT, B_UDP_PORT = 5001, 7, 9999
WAIT = 5.0


def ipv4_frame(dst_mac: bytes, src_mac: bytes, src: str, dst: str, proto: int, payload: bytes,
               bad_checksum: bool = False) -> bytes:
    hdr = bytearray(20)
    hdr[0], hdr[8], hdr[9] = 0x45, 64, proto
    hdr[2:4] = (20 + len(payload)).to_bytes(2, "big")
    hdr[12:16] = ip_addr(src)
    hdr[16:20] = ip_addr(dst)
    csum = internet_checksum(bytes(hdr))
    hdr[10:12] = (csum ^ (0x0101 if bad_checksum else 0)).to_bytes(2, "big")
    return dst_mac + src_mac + b"\x08\x00" + bytes(hdr) + payload


class Pair:
    """Stack A (published) and stack B over one pipe link; every wait polls both stacks."""

    def __init__(self):
        self.clock = MonotonicClock()
        self.link = PipeLink(self.clock)
        self.a = Stack(self.link.a, f"{A_IP}/24")
        self.b = Stack(self.link.b, f"{B_IP}/24")
        self.da, self.db = Driver(self.a, self.clock), Driver(self.b, self.clock)

    def wait(self, predicate, timeout: float = WAIT) -> bool:
        def both():
            self.db.poll()
            return predicate()

        return self.da.wait_until(both, timeout)

    def inject(self, frame: bytes) -> None:
        """A raw frame from B's end of the wire to A."""
        with self.db.lock:
            slot = self.link.b.tx_reserve(1)[0]
            slot[:len(frame)] = frame
            self.link.b.tx_commit([len(frame)])

    def udp_from_b(self, payload: bytes) -> None:
        with self.db.lock:
            self.b_ep.sendto(payload, ip_addr(A_IP), UDP_PORT, self.clock())

    def setup(self) -> None:
        now = self.clock()
        with self.db.lock:
            self.listener = self.b.tcp.listen((ANY, TCP_PORT), 16)
            self.b_ep = self.b.udp.endpoint()
            self.b.udp.bind(self.b_ep, ANY4, B_UDP_PORT)
        with self.da.lock:
            self.conn = self.a.tcp.connect(None, (B, TCP_PORT), now)
            self.a_ep = self.a.udp.endpoint()
            self.a.udp.bind(self.a_ep, ANY4, UDP_PORT)
        assert self.wait(lambda: self.conn.state == State.ESTABLISHED and self.listener.pending == 1)
        with self.da.lock:
            assert self.conn.send(b"x" * 3000, now=self.clock()) == 3000
        assert self.wait(lambda: self.conn.info().bytes_acked == 3000)
        for i in range(3):
            self.udp_from_b(b"d" * (100 + i))
        assert self.wait(lambda: len(self.a_ep.queue) == 3)
        mac_a, mac_b = self.a.iface.mac, self.b.iface.mac
        for _ in range(2):
            self.inject(ipv4_frame(mac_a, mac_b, B_IP, A_IP, 17, bytes(16), bad_checksum=True))
        self.inject(mac_a + mac_b + b"\x88\xb5" + bytes(40))  # IEEE local experimental: not spoken here
        assert self.wait(lambda: self.a.stats["drop.ipv4.bad_checksum"] == 2
                         and self.a.stats["drop.eth.unknown_ethertype"] == 1)

    def close(self) -> None:
        for d in (self.da, self.db):
            d.close()
        self.link.close()


@pytest.fixture
def pair():
    p = Pair()
    try:
        p.setup()
        yield p
    finally:
        p.close()


@pytest.fixture
def published(pair, tmp_path):
    pub = stats_server.StatsPublisher(pair.a, pair.da, path=str(tmp_path / "a.sock")).start()
    try:
        yield pair, pub
    finally:
        pub.close()


def run_main(capsys, *argv) -> tuple[int, str, str]:
    rc = ustats.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_text_shows_the_connection_udp_counters_and_drops(published, capsys):
    pair, pub = published
    rc, out, err = run_main(capsys, "--socket", pub.path)
    assert rc == 0, err
    lines = out.splitlines()
    lport = pair.conn.local_port
    assert lines[0].startswith(f"ustack pid {os.getpid()}  {A_IP}/24  mac 02:00:00:00:00:0a  mtu 1500  "
                               "backend pipe (in-memory, seeded impairment)  uptime ")
    # The ss -tni row and its detail line: real ports, ESTAB, nothing queued (all 3000 bytes acked).
    row = next(i for i, line in enumerate(lines) if line.startswith("ESTAB"))
    assert lines[row].split() == ["ESTAB", "0", "0", f"{A_IP}:{lport}", f"{B_IP}:{TCP_PORT}"]
    detail = lines[row + 1]
    assert detail.startswith("\t ts sack cubic wscale:")  # CUBIC, the default (as Linux)
    info = pair.conn.info()
    for item in (f"mss:{info.snd_mss}", "bytes_acked:3000", "bytes_received:0", "inflight:0",
                 f"peer_wnd:{info.snd_wnd}", f"cwnd:{info.cwnd // info.snd_mss}", "retrans:0/0",
                 f"rto:{stats_render._ms(info.rto)}", f"rtt:{stats_render._ms(info.srtt)}/{stats_render._ms(info.rttvar)}"):
        assert item in detail.split(), (item, detail)
    assert [line for line in lines if line.startswith("UNCONN")] == [
        line for line in lines if line.split()[:4] == ["UNCONN", "303", "0", f"0.0.0.0:{UDP_PORT}"]]
    udp_row = next(i for i, line in enumerate(lines) if line.startswith("UNCONN"))
    assert lines[udp_row + 1] == "\t datagrams:3 rcvbuf:212992 drops:0"
    assert f"{B_IP:<15} lladdr 02:00:00:00:00:0b expires" in out
    counters = {line.split()[0]: line.split()[1] for line in lines if line[:1].isalpha() and len(line.split()) == 2}
    snap = pair.a.stats.snapshot()
    assert counters["udp.datagrams_received"] == "3" == str(snap["udp.datagrams_received"])
    assert counters["tcp.active_opens"] == "1"
    assert counters["eth.frames_received"] == str(snap["eth.frames_received"])
    drops_at = lines.index("drops by reason (3 total)")
    assert [line.split() for line in lines[drops_at + 1:]] == [["eth.unknown_ethertype", "1"],
                                                              ["ipv4.bad_checksum", "2"]]
    assert "\x1b[" not in out  # not a tty: no colour, no clearing


def test_listener_on_the_other_stack_shows_its_queues(pair, tmp_path, capsys):
    with stats_server.StatsPublisher(pair.b, pair.db, path=str(tmp_path / "b.sock")) as pub:
        rc, out, err = run_main(capsys, "--socket", pub.path, "-t")
    assert rc == 0, err
    lines = out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("LISTEN"))
    assert lines[row].split() == ["LISTEN", "1", "16", f"0.0.0.0:{TCP_PORT}", "0.0.0.0:*"]
    assert lines[row + 1] == "\t accept_q:1/16 syn_q:0/16 overflows:0"
    # The accepted-but-not-yet-accepted child holds the 3000 bytes in its receive queue.
    est = next(line for line in lines if line.startswith("ESTAB"))
    assert est.split() == ["ESTAB", "3000", "0", f"{B_IP}:{TCP_PORT}", f"{A_IP}:{pair.conn.local_port}"]
    assert "UDP" not in lines and not any(line.startswith("#counters") for line in lines)  # -t: TCP only


def test_json_matches_the_stack(published, capsys):
    pair, pub = published
    rc, out, err = run_main(capsys, "--socket", pub.path, "--json")
    assert rc == 0, err
    snap = json.loads(out)
    stack = pair.a
    assert snap["counters"] == stack.stats.snapshot()
    assert snap["drops"] == stack.stats.drops() == {"eth.unknown_ethertype": 1, "ipv4.bad_checksum": 2}
    ident = snap["stack"]
    assert (ident["pid"], ident["addr"], ident["prefixlen"], ident["mac"], ident["mtu"], ident["mode"]) == (
        os.getpid(), A_IP, 24, stack.iface.mac.hex(":"), 1500, stack.device.capabilities.mode)
    assert 0 <= ident["uptime"] < 60
    [conn] = snap["tcp"]
    info = pair.conn.info()
    assert conn["state"] == "ESTABLISHED"
    assert (conn["local"], conn["remote"]) == (f"{A_IP}:{pair.conn.local_port}", f"{B_IP}:{TCP_PORT}")
    for name in ("cwnd", "ssthresh", "srtt", "rttvar", "rto", "retransmits", "bytes_in_flight", "snd_wnd",
                 "snd_mss", "snd_wscale", "rcv_wscale", "send_queue", "recv_queue", "bytes_acked"):
        assert conn[name] == getattr(info, name), name
    assert conn["options"] == ["ts", "sack", "wscale"]
    assert snap["listeners"] == []
    assert snap["udp"] == [{"local": f"0.0.0.0:{UDP_PORT}", "remote": None, "state": "UNCONN", "recv_q": 303,
                            "datagrams": 3, "rcvbuf": 212992, "drops": 0}]
    assert [(e["ip"], e["mac"]) for e in snap["arp"]] == [(B_IP, "02:00:00:00:00:0b")]


def test_watch_shows_per_interval_deltas(published, capsys):
    pair, pub = published
    done = threading.Event()
    first, second = threading.Event(), threading.Event()
    sent = []
    take = pub.snapshot

    def snapshot():
        snap = take()
        (second if first.is_set() else first).set()
        return snap

    pub.snapshot = snapshot

    def traffic():
        # After the first snapshot, B keeps sending until the second one is taken.
        first.wait(WAIT)
        while not second.is_set() and not done.is_set() and len(sent) < 200:
            n = pair.a.stats["udp.datagrams_received"]
            pair.udp_from_b(b"w" * 10)
            sent.append(1)
            pair.wait(lambda: pair.a.stats["udp.datagrams_received"] > n or done.is_set(), WAIT)

    t = threading.Thread(target=traffic, daemon=True)
    t.start()
    try:
        rc, out, err = run_main(capsys, "--socket", pub.path, "--watch", "0.3", "--count", "2", "-n", "-a")
    finally:
        done.set()
        t.join(WAIT)
    assert rc == 0, err
    first, second = out.split("\nustack pid ")
    assert "#counters since start" in first
    totals1 = {f[0]: int(f[1]) for f in (line.split() for line in first.splitlines()) if len(f) == 2}
    assert "#counters: deltas over 0.3" in second or "#counters: deltas over 0.4" in second
    rows = [line.split() for line in second.splitlines() if line[:1].isalpha() and len(line.split()) == 4]
    deltas = {name: (int(d), float(rate), int(total)) for name, d, rate, total in rows}
    d, rate, total = deltas["udp.datagrams_received"]
    assert d >= 1 and rate > 0
    for name, (d, _, total) in deltas.items():
        assert d == total - totals1.get(name, 0), name
    assert "drops by reason (3 total)" in second
    assert [line.split() for line in second.splitlines()[-2:]] == [["eth.unknown_ethertype", "1", "+0"],
                                                                  ["ipv4.bad_checksum", "2", "+0"]]
    assert "ESTAB" not in out  # -n: counters only


def test_missing_socket_is_a_clear_error(tmp_path, capsys):
    rc, out, err = run_main(capsys, "--socket", str(tmp_path / "nope.sock"))
    assert rc == 1 and out == ""
    assert err == f"ustack stats: no ustack at {tmp_path / 'nope.sock'} (no such socket)\n"


def test_no_running_stack_found(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(stats_socket.ENV_DIR, str(tmp_path / "run"))
    rc, out, err = run_main(capsys)
    assert rc == 1 and out == ""
    assert err.startswith("ustack stats: no running ustack found (looked for <pid>.sock in ")
    rc, _, err = run_main(capsys, "--pid", "1")
    assert rc == 1 and err.startswith("ustack stats: no ustack with pid 1 found")


def test_stale_socket_is_not_a_stack(tmp_path, capsys):
    path = str(tmp_path / "stale.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()
    rc, _, err = run_main(capsys, "--socket", path)
    assert rc == 1 and "stale socket" in err


def test_default_path_discovery_modes_and_close(pair, tmp_path, monkeypatch, capsys):
    rundir = tmp_path / "run"
    monkeypatch.setenv(stats_socket.ENV_DIR, str(rundir))
    pid = os.getpid()
    # A stale socket left by a killed process with our pid is replaced.
    rundir.mkdir(mode=0o755)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(rundir / f"{pid}.sock"))
    stale.close()
    pub = stats_server.StatsPublisher(pair.a, pair.da).start()
    try:
        assert pub.path == str(rundir / f"{pid}.sock")
        assert stat.S_IMODE(os.stat(rundir).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(pub.path).st_mode) == 0o600
        rc, out, err = run_main(capsys, "-n")
        assert rc == 0, err
        assert out.startswith(f"ustack pid {pid}  {A_IP}/24")
        rc, out, _ = run_main(capsys, "--pid", str(pid), "--json")
        assert rc == 0 and json.loads(out)["stack"]["addr"] == A_IP
        # A second stack in the same process gets its own socket; then the choice must be explicit.
        with stats_server.StatsPublisher(pair.b, pair.db) as second:
            assert second.path == str(rundir / f"{pid}.1.sock")
            rc, _, err = run_main(capsys)
            assert rc == 1 and "several ustacks are running" in err and second.path in err
        assert not os.path.exists(second.path)
    finally:
        pub.close()
    assert not os.path.exists(pub.path)
    pub.close()  # idempotent


def test_close_removes_the_socket_and_stops_serving(pair, tmp_path, capsys):
    path = str(tmp_path / "a.sock")
    pub = stats_server.StatsPublisher(pair.a, pair.da, path=path).start()
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    thread = pub._thread
    pub.close()
    assert not os.path.exists(path) and not thread.is_alive()
    rc, _, err = run_main(capsys, "--socket", path)
    assert rc == 1 and "no such socket" in err


def test_a_bad_request_gets_an_error_and_the_server_keeps_going(published, capsys):
    pair, pub = published
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(WAIT)
        s.connect(pub.path)
        s.sendall(b"reboot\n")
        reply = json.loads(s.makefile("rb").read())
    assert reply == {"error": "unknown request 'reboot'"}
    assert pub.errors == 1
    rc, out, _ = run_main(capsys, "--socket", pub.path, "--json")
    assert rc == 0 and json.loads(out)["stack"]["addr"] == A_IP
    assert pub.requests == 1


def test_lock_is_held_while_collecting(published):
    """The snapshot is taken under driver.lock: a thread holding it delays the answer."""
    pair, pub = published
    got = []
    with pair.da.lock:
        t = threading.Thread(target=lambda: got.append(stats_client.fetch(pub.path)), daemon=True)
        t.start()
        t.join(0.2)
        assert not got  # still waiting for the lock
    t.join(WAIT)
    assert got and got[0]["counters"] == pair.a.stats.snapshot()


class TtyOut(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_watch_on_a_tty_clears_and_colours(published, monkeypatch):
    pair, pub = published
    out = TtyOut()
    monkeypatch.setattr(sys, "stdout", out)
    assert ustats.main(["--socket", pub.path, "--watch", "0.05", "--count", "2"]) == 0
    text = out.getvalue()
    assert text.startswith(stats_render.CLEAR) and text.count(stats_render.CLEAR) == 2
    assert "\x1b[1;31mdrops by reason (3 total)\x1b[0m" in text


def test_ctrl_c_during_watch_exits_0(published, monkeypatch, capsys):
    pair, pub = published

    def interrupted(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(ustats.time, "sleep", interrupted)
    rc, out, err = run_main(capsys, "--socket", pub.path, "--watch", "5", "-t")
    assert rc == 0 and err == ""
    assert out.count("ustack pid ") == 1 and "ESTAB" in out


def test_add_parser_makes_the_stats_subcommand(published, capsys):
    pair, pub = published
    parser = argparse.ArgumentParser(prog="ustack")
    sub = parser.add_subparsers(dest="command", required=True)
    ustats.add_parser(sub)
    args = parser.parse_args(["stats", "--socket", pub.path, "-n"])
    assert args.func(args) == 0
    assert "udp.datagrams_received" in capsys.readouterr().out


def test_uptime_counts_from_the_given_start(pair, tmp_path):
    start = pair.clock() - 100.0
    with stats_server.StatsPublisher(pair.a, pair.da, path=str(tmp_path / "u.sock"), started=start) as pub:
        snap = stats_client.fetch(pub.path)
    assert 100.0 <= snap["stack"]["uptime"] < 160.0
    assert stats_render.render_header(snap).split("uptime ")[1].startswith("1m4")


# -- issue 25, item 7: the socket is born private (umask at bind), not chmod'ed after ---------------------
def test_the_socket_is_created_0600_under_a_process_umask_of_0(pair, tmp_path, monkeypatch):
    chmods = []
    monkeypatch.setattr(os, "chmod", lambda path, mode, **kw: chmods.append((path, mode)))  # no second chance
    old = os.umask(0)
    try:
        with stats_server.StatsPublisher(pair.a, pair.da, path=str(tmp_path / "m.sock")) as pub:
            mode = stat.S_IMODE(os.stat(pub.path).st_mode)
            assert stats_client.fetch(pub.path)["version"] == stats_server.SNAPSHOT_VERSION
        after = os.umask(0)
    finally:
        os.umask(old)
    assert mode == 0o600 and chmods  # 0777 & ~0 had the chmod been the only guard
    assert after == 0  # the process's umask was never changed (the bind ran in its own fs context)
