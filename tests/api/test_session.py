"""ustack.api.session: from_environment() sets up a stack, a Driver thread and the patch from USTACK_* variables."""

from __future__ import annotations

import socket

import pytest

from ustack.api.driver import Driver
from ustack.api.session import Session, from_environment, settings
from ustack.stack import Stack


def test_nothing_happens_without_ustack_addr():
    assert from_environment({"USTACK_BACKEND": "pipe"}) is None
    assert socket.socket.__module__ == "socket"


def test_settings_read_every_variable():
    env = {"USTACK_ADDR": "198.18.0.2/24", "USTACK_BACKEND": "packet", "USTACK_IFNAME": "veth9",
           "USTACK_GATEWAY": "198.18.0.1", "USTACK_PCAP": "/tmp/x.pcap", "USTACK_MTU": "1400",
           "USTACK_BUSY_POLL": "0.001", "USTACK_ANTICIPATE": "1"}
    assert settings(env) == {"backend": "packet", "addr": "198.18.0.2/24", "ifname": "veth9",
                             "gateway": "198.18.0.1", "pcap": "/tmp/x.pcap", "mtu": 1400, "busy_poll": 0.001,
                             "anticipate": True}


def test_a_session_anticipates_spaced_flows_only_when_asked():
    off = Session("pipe", "198.18.0.2/24")
    on = Session(**settings({"USTACK_ADDR": "198.18.0.2/24", "USTACK_BACKEND": "pipe", "USTACK_ANTICIPATE": "1"}))
    try:
        assert on.driver.arrivals is not None and off.driver.arrivals is None
    finally:
        on.close()
        off.close()


@pytest.mark.parametrize("env, what", [
    ({"USTACK_MTU": "big"}, "USTACK_MTU"),
    ({"USTACK_BUSY_POLL": "soon"}, "USTACK_BUSY_POLL"),
    ({"USTACK_BACKEND": "carrier-pigeon"}, "unknown backend"),
    ({"USTACK_BACKEND": "packet"}, "needs an interface"),
])
def test_bad_variables_are_refused_by_name(env, what):
    with pytest.raises(ValueError, match=what):
        from_environment({"USTACK_ADDR": "198.18.0.2/24", "USTACK_BACKEND": "pipe", **env})
    assert socket.socket.__module__ == "socket"


def test_from_environment_patches_sockets_onto_a_stack_that_answers(tmp_path):
    session = from_environment({"USTACK_ADDR": "198.18.0.2/24", "USTACK_BACKEND": "pipe",
                                "USTACK_PCAP": str(tmp_path / "s.pcap")})
    peer = Stack(session.link.b, "198.18.0.3/24")
    pdriver = Driver(peer, session.clock)
    try:
        assert session.driver._thread is not None  # ARP and timers go on without the program
        with pdriver.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
            server.bind(("198.18.0.3", 5000))
            server.settimeout(5)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # the patched class
                assert type(s).__module__ == "ustack.api.patch"
                s.sendto(b"from the patched program", ("198.18.0.3", 5000))
                data, addr = server.recvfrom(100)
        assert data == b"from the patched program" and addr[0] == "198.18.0.2"
    finally:
        session.close()
        pdriver.close()
        peer.close()
    assert socket.socket.__module__ == "socket"  # unpatched
    assert (tmp_path / "s.pcap").stat().st_size > 24  # the capture saw the frames
    session.close()  # idempotent


def test_a_bad_address_is_refused():
    with pytest.raises(ValueError):
        Session("pipe", "not-an-address")
