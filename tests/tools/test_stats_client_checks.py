"""``ustack stats`` does not trust what it reads: the socket directory and owner, the answer's size,
shape and strings (issue 12). A fake publisher on a Unix socket sends what a hostile process could."""

from __future__ import annotations

import json
import os
import socket
import threading

import pytest

from ustack.api.clock import MonotonicClock
from ustack.api.driver import Driver
from ustack.backends.pipe import PipeLink
from ustack.stack import Stack
from ustack.tools import stats as ustats
from ustack.tools import stats_client, stats_socket
from ustack.tools.stats_client import StatsError
from ustack.tools.stats_render import escaped, printable, render
from ustack.tools.stats_server import StatsPublisher


def real_snapshot() -> dict:
    clock = MonotonicClock()
    link = PipeLink(clock)
    stack = Stack(link.a, "198.18.0.1/24")
    try:
        return json.loads(json.dumps(StatsPublisher(stack, Driver(stack, clock)).snapshot()))
    finally:
        link.close()


class FakePublisher:
    """Answers every request on ``path`` with ``reply`` (bytes), then closes."""

    def __init__(self, path: str, reply: bytes):
        self.path, self.reply = path, reply
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(64)
                try:
                    conn.sendall(self.reply)
                except OSError:
                    pass  # the client stopped reading (the size limit)

    def close(self):
        self.sock.close()


@pytest.fixture
def private(tmp_path):
    d = tmp_path / "run"
    d.mkdir(mode=0o700)
    return d


def serve(d, reply: bytes, name="4242.sock") -> FakePublisher:
    return FakePublisher(str(d / name), reply)


def test_an_answer_longer_than_the_limit_is_refused(private):
    pub = serve(private, b"{" + b" " * 300_000)
    try:
        with pytest.raises(StatsError, match="sent more than 100000 bytes"):
            stats_client.fetch(pub.path, max_bytes=100_000)
    finally:
        pub.close()


@pytest.mark.parametrize("reply, words", [
    (b"not json at all", "is not JSON"),
    (b"\xff\xfe\x00", "is not JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "sent no valid snapshot"),
    (b"[1, 2, 3]", "a JSON list, not an object"),
    (b'{"stack": {}}', "'counters' missing"),
])
def test_malformed_answers_are_plain_errors(private, reply, words):
    pub = serve(private, reply)
    try:
        with pytest.raises(StatsError, match=words.replace("(", r"\(")):
            stats_client.fetch(pub.path)
    finally:
        pub.close()


def test_shape_checks_name_what_is_wrong():
    snap = real_snapshot()
    assert stats_client.check_snapshot(snap) is None
    bad = json.loads(json.dumps(snap))
    bad["stack"]["mtu"] = "1500"
    assert stats_client.check_snapshot(bad) == "stack.mtu missing or of the wrong type"
    bad = json.loads(json.dumps(snap))
    bad["counters"]["x\x1b[2J"] = "lots"
    assert stats_client.check_snapshot(bad) == "counters['x\\\\x1b[2J'] is not an integer"
    bad = json.loads(json.dumps(snap))
    bad["tcp"] = [1]
    assert stats_client.check_snapshot(bad) == "an entry of 'tcp' is not an object"


def test_malformed_inner_entry_is_one_line_from_the_command(private, capsys):
    snap = real_snapshot()
    snap["tcp"] = [{"state": "ESTABLISHED"}]  # the right shape outside, keys missing inside
    pub = serve(private, json.dumps(snap).encode())
    try:
        assert ustats.main(["--socket", pub.path]) == 1
    finally:
        pub.close()
    err = capsys.readouterr().err
    assert "sent a malformed snapshot (KeyError" in err and "Traceback" not in err


def test_terminal_escapes_from_the_publisher_are_printed_escaped(private, capsys):
    snap = real_snapshot()
    snap["stack"]["mode"] = "\x1b]0;owned\x07packet"
    snap["counters"]["evil.\x1b[2J"] = 5
    snap["drops"]["\x9bclear"] = 1
    snap["arp"] = [{"ip": "198.18.0.9\r\n", "mac": "\x1b[31m", "expires": 1.0}]
    pub = serve(private, json.dumps(snap).encode())
    try:
        assert ustats.main(["--socket", pub.path]) == 0
    finally:
        pub.close()
    out = capsys.readouterr().out
    assert not any(ch in out for ch in "\x1b\x07\x9b\r")
    assert "\\x1b]0;owned\\x07packet" in out and "evil.\\x1b[2J" in out and "\\x9bclear" in out
    assert "198.18.0.9\\r\\n" in out


def test_printable_and_escaped():
    assert printable("plain text: 1.2.3.4") == "plain text: 1.2.3.4"
    assert printable("a\x1bb\x00c\u202ed") == "a\\x1bb\\x00c\\u202ed"
    assert escaped({"k\x07": ["v\x1b", 3, {"n": "\x7f"}]}) == {"k\\x07": ["v\\x1b", 3, {"n": "\\x7f"}]}
    # What render() prints from a clean snapshot is unchanged by the escaping.
    snap = real_snapshot()
    assert render(snap) == render(escaped(snap))


# -- where the client looks ------------------------------------------------------------


def test_untrusted_directories_are_skipped_and_named(tmp_path, monkeypatch):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)  # writable by anyone, not sticky
    pub = serve(open_dir, b"{}", name=f"{os.getpid()}.sock")
    monkeypatch.setenv(stats_socket.ENV_DIR, str(open_dir))
    try:
        with pytest.raises(StatsError, match="ignored .*open is writable by others"):
            stats_client.find_socket()
        with pytest.raises(StatsError, match="its directory .*open is writable by others"):
            stats_client.fetch(pub.path)
    finally:
        pub.close()


def test_a_symlinked_directory_or_socket_is_refused(private, tmp_path, monkeypatch):
    pub = serve(private, json.dumps(real_snapshot()).encode(), name=f"{os.getpid()}.sock")
    link_dir = tmp_path / "linkdir"
    link_dir.symlink_to(private)
    link_sock = private / "other.sock"
    link_sock.symlink_to(pub.path)
    try:
        monkeypatch.setenv(stats_socket.ENV_DIR, str(link_dir))
        with pytest.raises(StatsError, match="linkdir is a symbolic link"):
            stats_client.find_socket()
        with pytest.raises(StatsError, match="other.sock: it is a symbolic link"):
            stats_client.fetch(str(link_sock))
        monkeypatch.setenv(stats_socket.ENV_DIR, str(private))
        assert stats_client.find_socket() == pub.path  # the real one is found and trusted
        assert stats_client.fetch(pub.path)["stack"]["addr"] == "198.18.0.1"
    finally:
        pub.close()


def test_a_sticky_shared_directory_is_trusted_for_our_own_socket(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    assert stats_socket.untrusted_dir(str(shared)) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_a_socket_or_directory_of_another_user_is_refused(private, tmp_path, monkeypatch):
    pub = serve(private, json.dumps(real_snapshot()).encode(), name=f"{os.getpid()}.sock")
    try:
        os.chown(pub.path, 12345, 12345)
        with pytest.raises(StatsError, match="is owned by uid 12345"):
            stats_client.fetch(pub.path)
        monkeypatch.setenv(stats_socket.ENV_DIR, str(private))
        with pytest.raises(StatsError, match="ignored .* is owned by uid 12345"):
            stats_client.find_socket()
        os.chown(pub.path, 0, 0)
        os.chown(private, 12345, 12345)
        with pytest.raises(StatsError, match="is owned by uid 12345"):
            stats_client.find_socket()
    finally:
        os.chown(private, 0, 0)
        pub.close()
