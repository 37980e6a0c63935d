"""The C demux of established flows (``_fastpath.FlowTable``, issue 11 item 5) against a dict, and in a stack."""

from __future__ import annotations

import random
import struct

import pytest

from ustack._fastpath import K_TCP6, FlowTable, classify_one
from ustack.net.addr import parse
from ustack.tools.pipe_pair import PipePair
from ustack.transport.tcp.tcb import TCB_LAYOUT, State
from ustack.wire.tcp import ACK, PSH, TcpHeader


def _key(rng, family: int):
    if family == 4:
        return (bytes([198, 18, 0, rng.randrange(4)]), rng.randrange(1, 5), bytes([198, 18, 1, rng.randrange(4)]),
                rng.randrange(1, 5))
    # IPv6 keys that differ only in their high or their low 8 bytes, some starting with an IPv4 key's bytes
    hi = rng.choice([bytes([198, 18, 0, rng.randrange(4)]) + bytes(4), bytes.fromhex("fd000000000000ab")])
    return (hi + bytes(7) + bytes([rng.randrange(3)]), rng.randrange(1, 5),
            bytes.fromhex("fd00000000000000") + bytes(7) + bytes([rng.randrange(3)]), rng.randrange(1, 5))


def test_flow_table_follows_a_dict_through_adds_replacements_and_removals():
    rng = random.Random(7)
    table = FlowTable({}, TCB_LAYOUT)
    model = {}
    keys = sorted({_key(rng, rng.choice((4, 6))) for _ in range(600)})
    # the zero-padded IPv6 twin of an IPv4 key is another key
    keys += [(bytes([198, 18, 0, 1]) + bytes(12), 1, bytes([198, 18, 1, 1]) + bytes(12), 1),
             (bytes([198, 18, 0, 1]), 1, bytes([198, 18, 1, 1]), 1)]
    assert {len(k[0]) for k in keys} == {4, 16}
    for step in range(8000):  # enough churn to grow the table and to rehash it over tombstones
        key = rng.choice(keys)
        if rng.random() < 0.55:
            conn = object()
            table.add(*key, conn)
            model[key] = conn
        else:
            other = model.get(key) if rng.random() < 0.8 else object()
            table.remove(*key, other)
            if key in model and model[key] is other:
                del model[key]
        assert len(table) == len(model)
        probe = rng.choice(keys)
        assert table.lookup(*probe) is model.get(probe)
    for key in keys:
        assert table.lookup(*key) is model.get(key)


def test_flow_table_ignores_keys_it_cannot_hold():
    table = FlowTable({}, TCB_LAYOUT)
    for key in [(bytes(16), 80, bytes(4), 5000), (bytes(4), 80, bytes(16), 5000), (bytes(5), 80, bytes(5), 5000),
                (bytes(4), 70000, bytes(4), 5000), (b"", 80, b"", 5000)]:
        table.add(*key, object())  # mixed families, other lengths, ports out of range: the Python way
        assert len(table) == 0 and table.lookup(*key) is None
    assert table.input(object(), b"", 0.0) is False  # not a classify record


def _dad_done(stack) -> bool:
    iface6 = stack.iface6
    return iface6.link_local is not None and not any(e.state == "tentative" for e in iface6.addresses.values())


def _established(fastpath: bool, family: int = 4):
    """(pair, server, client): b connected to a's port 80 over the pipe, ESTABLISHED at both ends."""
    pair = PipePair(seed=3, delay=0.0005, ipv6=family == 6, fastpath=fastpath,
                    a_kw={"isn_secret": bytes(16)}, b_kw={"isn_secret": bytes(range(16))})
    if family == 6:  # duplicate address detection (RFC 4862) first, on the manual clock
        assert pair.run(lambda now: False, lambda: _dad_done(pair.a) and _dad_done(pair.b), 10.0), "DAD stuck"
    lst, client = pair.connect(80)
    accepted = []

    def accept(now: float) -> bool:
        server = None if accepted else lst.accept()
        if server is not None:
            accepted.append(server)
        return server is not None

    assert pair.run(accept, lambda: bool(accepted) and client.state == accepted[0].state == State.ESTABLISHED, 5.0)
    return pair, accepted[0], client


def _transfer(fastpath: bool, family: int = 4, size: int = 300_000):
    pair, server, conn = _established(fastpath, family)
    data = bytes(random.Random(1).randbytes(size))
    sent, got = 0, bytearray()

    def step(now: float) -> bool:
        nonlocal sent
        n = conn.send(data[sent:sent + 65536], now) if sent < size else 0
        sent += n
        chunk = server.recv(1 << 20, now)
        got.extend(chunk)
        return bool(n or chunk)

    pair.run(step, lambda: len(got) >= size, 60.0)
    return bytes(got) == data, server, conn, pair.a, pair.b


@pytest.mark.parametrize("family", [4, 6])
def test_a_transfer_between_stacks_runs_through_the_c_demux_and_fast_path_with_the_same_result(family):
    ok, server, client, a, b = _transfer(True, family)
    assert ok
    assert len(server.local_addr) == (4 if family == 4 else 16)
    assert len(a.tcp.flows) == len(a.tcp.connections) == 1
    assert a.tcp.flows.lookup(*server.key) is server
    # Most segments were predicted; the rest (the handshake, the retransmissions this run has after
    # its first burst outruns address resolution, the duplicates they cause) took the Python path.
    assert server.segs_fast > 0.6 * server.segs_in and client.segs_fast > 0.6 * client.segs_in
    assert a.stats["tcp.in_segs"] == server.segs_in + 1  # + the SYN (a listener's)
    ok_off, server_off, client_off, a_off, b_off = _transfer(False, family)
    assert ok_off
    assert server_off.segs_fast == client_off.segs_fast == 0 and a_off._tcp_flows is None
    # The same run, segment for segment: every counter of both stacks agrees.
    assert a.stats.snapshot() == a_off.stats.snapshot() and b.stats.snapshot() == b_off.stats.snapshot()
    assert server.info() == server_off.info() and client.info() == client_off.info()


def _tcp6_frame(dst_mac: bytes, src_mac: bytes, sport: int, dport: int, seq: int, ack: int, ts: tuple,
                payload: bytes) -> bytes:
    """An Ethernet/IPv6/TCP frame (ACK|PSH, the timestamps option) from fd00::2 to fd00::1."""
    src, dst = parse("fd00::2"), parse("fd00::1")
    seg = TcpHeader(sport, dport, seq, ack, ACK | PSH, 65535, 0, 0, timestamps=ts).to_bytes(src, dst, payload)
    ip6 = struct.pack("!IHBB", 6 << 28, len(seg), 6, 64) + src + dst
    return dst_mac + src_mac + b"\x86\xdd" + ip6 + seg


def test_the_c_demux_takes_an_established_ipv6_flows_segment_and_leaves_others_to_python():
    pair, server, client = _established(True, 6)
    clock, a, b = pair.clock, pair.a, pair.b
    assert a.tcp.flows.lookup(*server.key) is server
    before = a.stats["tcp.in_segs"]
    tcb = server.tcb
    frame = _tcp6_frame(a.link.mac, b.link.mac, client.local_port, 80, tcb.rcv_nxt, tcb.snd_nxt,
                        (tcb.ts_recent + 1, 0), b"hello")
    pkt = classify_one(frame, a.link.mac, True)
    assert pkt.kind == K_TCP6
    assert a.tcp.flows.input(pkt, memoryview(frame), clock.now) is True
    assert a.stats["tcp.in_segs"] == before + 1 and server.segs_fast == 1 and server.recv(100, clock.now) == b"hello"
    other = _tcp6_frame(a.link.mac, b.link.mac, client.local_port + 1, 80, 1, 1, None, b"x")  # no such flow
    assert a.tcp.flows.input(classify_one(other, a.link.mac, True), memoryview(other), clock.now) is False
    server.tcb.state = State.CLOSE_WAIT  # a flow that left ESTABLISHED: demuxed here, the Python state machine's
    segs_in = server.segs_in
    assert a.tcp.flows.input(pkt, memoryview(frame), clock.now) is True
    assert a.stats["tcp.in_segs"] == before + 2 and server.segs_in == segs_in + 1 and server.segs_fast == 1


def test_tcb_layout_reads_the_fields_python_wrote_and_refuses_other_classes():
    from ustack._fastpath import TCB_FIELDS, TcbLayout
    from ustack.transport.tcp.tcb import Tcb

    tcb = Tcb()
    tcb.state = State.ESTABLISHED
    tcb.rcv_nxt = 0xFFFFFFFF
    tcb.ts_recent_age = 12.5
    tcb.fin_rcvd_seq = 7
    assert TCB_LAYOUT.read(tcb) == {name: getattr(tcb, name) for name in TCB_FIELDS}

    class Sub(Tcb):
        __slots__ = ()

    class Plain:
        pass

    with pytest.raises(TypeError):
        TCB_LAYOUT.read(Sub())  # the offsets are the class's own: any other type is refused
    with pytest.raises(TypeError):
        TcbLayout(Plain)  # no slots to read


def test_the_application_hears_of_a_fast_path_burst_once_per_poll_round():
    pair, server, client = _established(True)
    clock, a = pair.clock, pair.a
    events = []
    server.on_event = lambda conn: events.append((conn.segs_fast, len(conn.receiver.rcvbuf)))
    client.send(bytes(20 * 1448), clock.now)  # the initial window (RFC 3390: 3 segments of 1448) leaves at once
    clock.set(clock.now + 0.01)  # all of them arrive before the server's next round
    a.poll(clock.now)
    assert server.segs_fast == 3 and len(server.receiver.rcvbuf) == 3 * 1448  # one burst, taken in C
    assert events == [(server.segs_fast, len(server.receiver.rcvbuf))]  # one event, after the whole burst


def test_the_c_demux_takes_an_ipv6_segment_only_while_its_destination_is_preferred_and_its_source_is_not():
    """deliver_burst compares the addresses with iface6's preferred set in C, and follows a new set at once."""
    from types import SimpleNamespace

    pair, server, client = _established(True, 6)
    clock, a, b = pair.clock, pair.a, pair.b
    ours, peer = parse("fd00::1"), parse("fd00::2")
    handed = []

    def burst(preferred: frozenset) -> None:
        tcb = server.tcb
        frame = _tcp6_frame(a.link.mac, b.link.mac, client.local_port, 80, tcb.rcv_nxt, tcb.snd_nxt,
                            (tcb.ts_recent + 1, 0), b"data")
        records = a._classifier.classify([memoryview(frame)])
        a.tcp.flows.deliver_burst([memoryview(frame)], records, clock.now, lambda f, r, now: handed.append(r.kind),
                                  lambda exc: handed.append(exc), SimpleNamespace(preferred_set=preferred))

    burst(frozenset((parse("fe80::1"), ours)))  # ours among others: taken by the flow in C
    assert server.segs_fast == 1 and handed == [] and server.recv(100, clock.now) == b"data"
    burst(frozenset((parse("fe80::1"),)))  # our address no longer preferred (deprecated, removed): Python screens
    assert server.segs_fast == 1 and handed == [K_TCP6]
    burst(frozenset((ours, peer)))  # a source address of our own: Python screens it too
    assert server.segs_fast == 1 and handed == [K_TCP6, K_TCP6]
    burst(frozenset((ours,)))
    assert server.segs_fast == 2 and handed == [K_TCP6, K_TCP6]
