"""The TCP flush held for the rest of a write (``Stack.poll(hold=True)``, ``Driver.push_wait``).

Two stacks on the pipe backend and a manual clock; A's frames to B are caught
and handed over by the test. A 3-segment write (PSH on the last segment only,
RFC 9293 3.9.1.2): B's rounds that end on a segment without PSH leave the
TCP flush to a later round (the application is not told, no ACK leaves);
the round with the PSH segment flushes, and the application reads the whole
write at once, with one ACK. A round without ``hold`` always flushes. The
driver holds only within its bounds: ``push_wait`` after the last frame,
and ``PUSH_HOLD_ROUNDS`` empty rounds whatever the clock does.
"""

from __future__ import annotations

import struct

import pytest
from scapy.layers.inet import TCP
from scapy.layers.l2 import Ether

from tests.stack.netsim import Net
from ustack.api import driver as drv
from ustack._fastpath import classify_one
from ustack.wire.push import data_without_push

PORT = 5011
WRITE = (bytes(range(256)) * 17)[:3 * 1448]  # one write of three full segments (RFC 3390's initial window)


class Caught:
    """Net with A's frames to B held back until ``give``."""

    def __init__(self, fastpath: bool):
        self.net = net = Net(seed=3, a_kw={"fastpath": fastpath}, b_kw={"fastpath": fastpath})
        b_ip = net.b.ipv4.iface.addr
        lst = net.b.tcp.listen((b_ip, PORT), 5)
        self.client = net.a.tcp.connect(None, (b_ip, PORT), net.clock.now)
        assert net.run(lambda: self.client.tcb.state.name == "ESTABLISHED", 5)
        self.server = lst.accept()
        assert net.run(lambda: False, 0.5) is False  # settle (the handshake's last ACK, timers)
        self.reads: list[bytes] = []
        self.server.on_event = lambda conn: self.reads.append(conn.recv(1 << 20, net.clock.now))
        self.caught: list[bytes] = []
        self.b_sent: list[bytes] = []
        carry = net.link._carry

        def route(sender, frame):
            if sender is net.link.a:
                self.caught.append(bytes(frame))
            else:
                self.b_sent.append(bytes(frame))
                carry(sender, frame)

        self._carry = carry
        net.link._carry = route

    def write(self) -> list[bytes]:
        assert self.client.send(WRITE, self.net.clock.now) == len(WRITE)
        self.net.a.poll(self.net.clock.now)
        frames, self.caught = self.caught, []
        return frames

    def give(self, frames) -> None:
        for f in frames:
            self._carry(self.net.link.a, f)

    def data(self) -> bytes:
        return b"".join(r for r in self.reads if r)


def flags(frame: bytes) -> int:
    return frame[14 + 20 + 13]


@pytest.mark.parametrize("fastpath", [True, False])
def test_a_write_is_read_whole_and_acked_once_when_the_flush_waits_for_its_psh(fastpath):
    c = Caught(fastpath)
    net, b = c.net, c.net.b
    segs = c.write()
    assert [len(f) - 66 for f in segs] == [1448, 1448, 1448]
    assert [bool(flags(f) & 0x08) for f in segs] == [False, False, True]
    assert [data_without_push(classify_one(f)) for f in segs] == [True, True, False]
    c.give(segs[:2])
    assert b.poll(net.clock.now, hold=True) == net.clock.now  # poll again at once
    # (the Python path tells the application, and ACKs, per segment inside the delivery: only the round's
    # flush waits there)
    assert b.flush_held and ((c.reads == [] and c.b_sent == []) or not fastpath)
    assert b.poll(net.clock.now, hold=True) == net.clock.now  # nothing new: still held
    assert b.flush_held and ((c.reads == [] and c.b_sent == []) or not fastpath)
    c.give(segs[2:])
    b.poll(net.clock.now, hold=True)
    assert not b.flush_held
    if fastpath:
        assert c.reads[0] == WRITE  # the whole write in the first read
    assert c.data() == WRITE
    acks = [f for f in c.b_sent if len(f) - 66 == 0]
    assert len(acks) == len(c.b_sent) and (len(acks) == 1 or not fastpath)
    assert struct.unpack_from("!I", acks[-1], 14 + 20 + 8)[0] == (
        struct.unpack_from("!I", segs[-1], 14 + 20 + 4)[0] + 1448) & 0xFFFFFFFF
    net.close()


@pytest.mark.parametrize("fastpath", [True, False])
def test_a_round_without_hold_flushes_what_was_held(fastpath):
    c = Caught(fastpath)
    net, b = c.net, c.net.b
    segs = c.write()
    c.give(segs[:1])
    b.poll(net.clock.now, hold=True)
    assert b.flush_held and ((c.reads == [] and c.b_sent == []) or not fastpath)
    b.poll(net.clock.now)
    assert not b.flush_held and c.data() == WRITE[:1448] and len(c.b_sent) == 1
    c.give(segs[1:])
    b.poll(net.clock.now)  # no hold: told at once, as before
    assert c.data() == WRITE
    net.close()


def test_the_driver_holds_within_push_wait_of_the_last_frame():
    c = Caught(True)
    net, b, d = c.net, c.net.b, c.net.db
    assert d.push_wait == drv.DEFAULT_PUSH_WAIT
    segs = c.write()
    c.give(segs[:2])
    t = net.clock.now
    d._round(hold=True)
    assert b.flush_held and c.reads == []
    net.clock.set(t + d.push_wait / 2)
    d._round(hold=True)  # nothing new, still within push_wait of the last frame
    assert b.flush_held and c.reads == []
    net.clock.set(t + d.push_wait * 1.01)
    d._round(hold=True)  # push_wait passed since the last frame: flushed
    assert not b.flush_held and c.data() == WRITE[:2 * 1448]
    c.give(segs[2:])  # the PSH segment: told at once
    d._round(hold=True)
    assert not b.flush_held and c.data() == WRITE
    net.close()


def test_a_clock_that_does_not_move_ends_the_hold_and_a_leaving_leader_flushes():
    c = Caught(True)
    net, b, d = c.net, c.net.b, c.net.db
    segs = c.write()
    c.give(segs[:2])
    rounds = []
    real = d._round

    def counted(hold=False):
        rounds.append(hold)
        return real(hold)

    d._round = counted
    # the manual clock never moves inside wait_until: only the round bound ends the hold
    assert d.wait_until(lambda: bool(c.reads), 1.0)
    assert c.data() == WRITE[:2 * 1448]
    assert len(rounds) <= drv.PUSH_HOLD_ROUNDS + 2
    # a leader whose condition holds while the flush is held flushes before it leaves
    c.give(segs[2:])
    d._round()
    assert c.data() == WRITE
    net.run(lambda: False, 0.01)  # A takes B's ACK
    more = c.write()  # the next write
    assert data_without_push(classify_one(more[0]))
    received = b.stats["eth.frames_received"]
    c.give(more[:1])
    assert d.wait_until(lambda: b.stats["eth.frames_received"] > received, 1.0) is True
    assert not b.flush_held and c.data() == WRITE + WRITE[:1448]
    net.close()


def _junk(seg: bytes, how: str) -> bytes:
    """A copy of the mid-write segment ``seg`` that is not one: to another MAC, with a bad checksum, or of a
    flow B does not have (another destination port, checksum recomputed)."""
    if how == "mac":
        return b"\x02\x00\x00\x00\x00\x99" + seg[6:]
    if how == "checksum":
        return seg[:-1] + bytes([seg[-1] ^ 0xFF])
    pkt = Ether(seg)
    pkt[TCP].dport += 1
    del pkt[TCP].chksum
    return bytes(pkt)


@pytest.mark.parametrize("how", ["mac", "checksum", "flow"])
@pytest.mark.parametrize("fastpath", [True, False])
def test_junk_at_a_bursts_end_does_not_hold_the_flush(fastpath, how):
    """The push wait judges the burst's last segment from its classify record and our connection table
    (issue 25 item 6): a raw peek held the flush for any data frame without PSH, whatever its MAC, checksum
    or flow, so junk at a burst's end delayed every application's notification and ACK."""
    c = Caught(fastpath)
    net, b = c.net, c.net.b
    segs = c.write()
    junk = _junk(segs[0], how)
    before = b.stats["eth.frames_received"]
    c.give(segs[:1])
    c._carry(net.link.a, junk)
    b.poll(net.clock.now, hold=True)
    assert b.stats["eth.frames_received"] - before == 2  # one burst: the segment, then the junk
    assert not b.flush_held
    assert c.data() == WRITE[:1448]  # the application was told at this round's end
    dropped = {"mac": "drop.eth.not_for_us", "checksum": "drop.tcp.bad_checksum", "flow": "tcp.out_rsts"}[how]
    assert b.stats[dropped] >= 1
    net.close()


def test_push_wait_zero_never_holds():
    c = Caught(True)
    net, b = c.net, c.net.b
    d = drv.Driver(b, net.clock, push_wait=0)
    segs = c.write()
    c.give(segs[:1])
    d._round(hold=True)
    assert not b.flush_held and c.data() == WRITE[:1448]
    with pytest.raises(ValueError):
        drv.Driver(b, net.clock, push_wait=1.0)
    d.close()
    net.close()
