"""Receive ACK coalescing in ``Stack.poll``: in-order bulk data is ACKed once per connection per round.

A 300 kB transfer A -> B over the pipe backend on a manual clock: every
round of B's that receives several segments sends one frame (the round's
cumulative ACK, after the reads), far fewer ACKs than every second
segment, on the fast path (C) and on the Python path alike. (The two
paths' wire bytes differ in when the application hears of data: once per
burst on the fast path, per segment on the Python path.)
"""

from __future__ import annotations

import pytest

from tests.stack.netsim import Net
from ustack.transport.tcp.config import ROUND_ACK_BYTES, TcpConfig

PORT = 5002
SEGMENT = 1448


def _transfer(fastpath: bool, size: int = 300 * 1024, chunk: int = 60000, **tcp):
    net = Net(seed=7, a_kw={"isn_secret": b"a" * 16, "fastpath": fastpath},
              b_kw={"isn_secret": b"b" * 16, "fastpath": fastpath, "tcp_config": TcpConfig(**tcp)})
    frames = []
    carry = net.link._carry

    def record(sender, frame):
        frames.append((sender.name, bytes(frame)))
        carry(sender, frame)

    net.link._carry = record
    rounds = []  # (data frames B received in the round, frames B sent in it)
    poll = net.b.poll

    def b_poll(now):
        received, start = net.b.stats["eth.frames_received"], len(frames)
        deadline = poll(now)
        rounds.append((net.b.stats["eth.frames_received"] - received,
                       sum(1 for name, _ in frames[start:] if name == "b")))
        return deadline

    net.b.poll = b_poll
    try:
        b_ip = net.b.ipv4.iface.addr
        lst = net.b.tcp.listen((b_ip, PORT), 5)
        client = net.a.tcp.connect(None, (b_ip, PORT), net.clock.now)
        assert net.run(lambda: client.tcb.state.name == "ESTABLISHED", 5)
        server = lst.accept()
        got = bytearray()
        server.on_event = lambda conn: got.extend(conn.recv(1 << 22, net.clock.now))  # read inside the round
        data = (bytes(range(256)) * (size // 256 + 1))[:size]
        sent = 0
        while len(got) < len(data):
            if sent < len(data):
                sent += client.send(data[sent:sent + chunk], net.clock.now)
            assert net.run(lambda: False, 0.002) is False
        assert bytes(got) == data
        return frames, rounds, server.segs_fast
    finally:
        net.close()


@pytest.mark.parametrize("fastpath", [True, False])
def test_one_ack_per_round_of_in_order_data(fastpath):
    frames, rounds, segs_fast = _transfer(fastpath)
    assert (segs_fast > 150) == fastpath
    busy = [(rx, tx) for rx, tx in rounds if rx]
    bulk = [(rx, tx) for rx, tx in busy if rx >= 4]  # (past the handshake and the first flights)
    assert len(bulk) > 5 and all(tx == 1 for rx, tx in bulk), [r for r in bulk if r[1] != 1]
    data_segments = -(-300 * 1024 // SEGMENT)
    acks = sum(tx for _, tx in busy)
    assert acks < data_segments // 4  # every second segment would be over 100
    assert sum(rx for rx, _ in busy) >= data_segments



@pytest.mark.parametrize("fastpath", [True, False])
def test_without_ack_coalescing_every_second_segment_is_acked(fastpath):
    """``ack_coalescing=False``: RFC 5681 4.2's ACK for every second full segment, also within a round."""
    frames, rounds, segs_fast = _transfer(fastpath, ack_coalescing=False)
    assert (segs_fast > 150) == fastpath
    bulk = [(rx, tx) for rx, tx in rounds if rx >= 4]
    assert len(bulk) > 3 and all(tx >= rx // 2 for rx, tx in bulk), bulk


@pytest.mark.parametrize("fastpath", [True, False])
def test_a_round_ack_covers_at_most_round_ack_bytes(fastpath):
    """A round of more than 64 KiB of in-order data is ACKed at once each time the unacknowledged
    bytes reach ``ROUND_ACK_BYTES`` (as a GRO receiver ACKs each aggregate), and once more at the
    round's end: no stretch ACK of a whole 64-frame burst."""
    frames, rounds, _ = _transfer(fastpath, size=3_000_000, chunk=1 << 20)
    big = [(rx, tx) for rx, tx in rounds if rx * SEGMENT > ROUND_ACK_BYTES + 2 * SEGMENT]
    assert big, max(rx for rx, _ in rounds)  # the window opened far enough for such rounds
    assert all(tx >= 2 for _, tx in big), big
    acks = [int.from_bytes(f[14 + 20 + 8:14 + 20 + 12], "big") for name, f in frames
            if name == "b" and len(f) >= 14 + 20 + 20 and f[12:14] == b"\x08\x00" and f[14 + 9] == 6]
    steps = [(b - a) % (1 << 32) for a, b in zip(acks, acks[1:])]
    assert max(steps) < ROUND_ACK_BYTES + SEGMENT, max(steps)
