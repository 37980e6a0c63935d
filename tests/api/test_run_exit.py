"""``ustack run`` at exit (tools/run_program.finish_connections): the closes the kernel would finish after a
process exits happen before the stack goes. Two stacks over the pipe, each with its Driver thread."""

from __future__ import annotations

import threading

import pytest

from ustack.api.socket import socket as usocket
from ustack.tools.run_program import finish_connections
from ustack.transport.tcp.tcb import State

from .conftest import A, B


def _pair(client, server, server_addr):
    """(listener on ``server``, connected client on ``client``, accepted socket)."""
    lst = usocket(server)
    lst.bind((server_addr, 0))
    lst.listen(4)
    c = usocket(client)
    c.settimeout(5)
    c.connect((server_addr, lst.getsockname()[1]))
    s, _ = lst.accept()
    s.settimeout(5)
    return lst, c, s


def test_a_peer_closing_after_our_fin_is_acknowledged_before_we_go(net):
    """Our FIN went out; the peer's comes 50 ms later: waited for and ACKed, so the peer does not sit in
    LAST-ACK with nobody left to answer (the corpus saw a kernel server's port stay taken that way)."""
    da, db = net
    lst, c, s = _pair(da, db, B)
    c.close()  # FIN-WAIT
    assert s.recv(10) == b""
    closer = threading.Timer(0.05, s.close)
    closer.start()
    assert finish_connections(da, timeout=5.0) is True
    closer.join()
    peer = s._conn
    assert db.wait_until(lambda: peer.state == State.CLOSED, 5), peer.state  # its FIN was acknowledged
    assert all(conn.state == State.TIME_WAIT for conn in da.stack.tcp.connections.values())
    lst.close()


def test_what_the_program_left_open_is_closed_like_the_kernel_does(net):
    da, db = net
    lst, c, s = _pair(db, da, A)  # the listener and the accepted socket on A (the program's side)
    waiting = usocket(db)  # a second connection, never accepted
    waiting.settimeout(5)
    waiting.connect((A, lst.getsockname()[1]))
    c.sendall(b"x")  # unread data on A's accepted socket: closing it sends a RST, as Linux does
    assert da.wait_until(lambda: len(s._conn.receiver.rcvbuf) == 1, 5)
    finished = finish_connections(da, timeout=1.0)
    assert finished is True
    assert da.stack.tcp.listeners == {}  # the listener closed
    for sock in (c, waiting):  # reset: the accepted one had unread data, the other was still queued
        assert db.wait_until(lambda: sock._conn.state == State.CLOSED, 5)
        with pytest.raises(ConnectionResetError):
            sock.recv(1)


def test_a_peer_that_never_closes_costs_at_most_the_bound(net):
    da, db = net
    lst, c, s = _pair(da, db, B)
    c.close()  # we wait in FIN-WAIT-2 for a FIN that does not come
    assert finish_connections(da, timeout=0.2) is False
    s.close()
    lst.close()
