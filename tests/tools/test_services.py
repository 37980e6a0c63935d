"""tools/services.py: what a service does for each connection it accepts (over the pipe, manual clock)."""

from __future__ import annotations

from ustack.net.addr import parse
from ustack.tools.pipe_pair import PipePair
from ustack.tools.services import TcpDiscard, TcpEcho, TcpSource
from ustack.transport.tcp.tcb import State

SERVER = "198.18.0.1"
PORT = 7


def _serve(service_cls, *args):
    pair = PipePair(seed=3, delay=0.00005)
    clock, a, b = pair.clock, pair.a, pair.b
    service = service_cls(a, PORT, *args)
    calls = []
    step = service.step

    def counted(conn):
        calls.append(conn.state)
        step(conn)

    service.step = counted
    client = b.tcp.connect(None, (parse(SERVER), PORT), clock.now)
    assert pair.run(lambda now: False, lambda: client.state == State.ESTABLISHED and bool(service.active), 5.0)
    return pair, service, client, calls


def test_echo_accepts_without_a_step_when_nothing_is_readable_then_echoes_and_closes():
    pair, service, client, calls = _serve(TcpEcho)
    assert calls == [State.ESTABLISHED]  # the layer's call after the handshake ACK, not one more from accept
    client.send(b"hello", pair.clock.now)
    got = bytearray()

    def echoed():
        got.extend(client.recv(100))
        return bytes(got) == b"hello"

    assert pair.run(lambda now: False, echoed, 5.0)
    client.close(pair.clock.now)
    assert pair.run(lambda now: False, lambda: not service.active, 5.0)
    assert service.connections == 1


def test_discard_accepts_without_a_step_when_nothing_is_readable():
    pair, service, client, calls = _serve(TcpDiscard)
    assert calls == [State.ESTABLISHED]
    client.close(pair.clock.now)
    assert pair.run(lambda now: False, lambda: not service.active, 5.0)


def test_source_steps_at_accept_to_start_sending():
    pair, service, client, calls = _serve(TcpSource, 1000)
    assert calls[0] == State.ESTABLISHED and len(calls) >= 2  # accept's own step, then the layer's call
    got = bytearray()

    def all_read():
        while True:
            data = client.recv(4096)
            if not data:
                return client.eof
            got.extend(data)

    assert pair.run(lambda now: False, all_read, 5.0)
    assert len(got) == 1000
