"""Blocking sockets on a real clock: the caller's thread drives the poll loop; timeouts are stdlib-shaped."""

from __future__ import annotations

import threading
import time

import pytest

from ustack.backends.pipe import PipeLink
from ustack.api.clock import MonotonicClock
from ustack.api.driver import Driver
from ustack.api.socket import SOCK_DGRAM, socket as usocket
from ustack.net.addr import ANY4
from ustack.stack import Stack


@pytest.fixture
def pair():
    clock = MonotonicClock()
    link = PipeLink(clock, delay=0.0005)
    a = Stack(link.a, "198.18.0.1/24")
    b = Stack(link.b, "198.18.0.2/24")
    da, db = Driver(a, clock), Driver(b, clock)
    yield a, b, da, db
    da.close()
    db.close()
    link.close()


def test_blocking_recv_is_woken_by_a_datagram_from_another_thread(pair):
    a, b, da, db = pair
    da.start()  # a answers ARP in the background
    rx = usocket(db, type=SOCK_DGRAM)
    rx.bind(("0.0.0.0", 9000))
    rx.settimeout(5.0)
    tx = usocket(da, type=SOCK_DGRAM)
    sender = threading.Timer(0.05, lambda: tx.sendto(b"wake up", ("198.18.0.2", 9000)))
    sender.start()
    t0 = time.monotonic()
    data, addr = rx.recvfrom(100)
    assert (data, addr[0]) == (b"wake up", "198.18.0.1")
    assert time.monotonic() - t0 < 4.0
    sender.join()


def test_recv_timeout_raises_timeouterror(pair):
    a, b, da, db = pair
    s = usocket(db, type=SOCK_DGRAM)
    s.bind(("0.0.0.0", 9001))
    s.settimeout(0.05)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        s.recv(10)
    assert 0.04 <= time.monotonic() - t0 < 2.0


def test_request_reply_with_background_echo(pair):
    a, b, da, db = pair
    echo = a.udp.endpoint()
    a.udp.bind(echo, ANY4, 7)

    def bounce():
        while echo.queue:
            p, src, sport = echo.pop()
            echo.sendto(p, src, sport, da.clock())

    echo.on_readable = bounce
    da.start()
    with usocket(db, type=SOCK_DGRAM) as s:
        s.settimeout(2.0)
        s.connect(("198.18.0.1", 7))
        for i in range(200):
            msg = f"message {i}".encode() * (1 + i % 300)
            s.send(msg)
            assert s.recv(65535) == msg
        assert s.getpeername() == ("198.18.0.1", 7)
