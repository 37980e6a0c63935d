"""TCP between two whole stacks over the pipe backend, on a manual clock, under seeded damage.

Every frame either stack emits passes through a checking decorator: IPv4
and TCP checksums verified by the pure-Python reference (independent of the
C fast path), options well formed, and scapy dissects every one of them and
must agree on sequence numbers, flags and options (its recomputed checksums
are compared on every control segment and every 16th data segment: the
rebuild is the slow part).
"""

from __future__ import annotations

import hashlib

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from ustack.device import DeviceWrapper
from ustack.transport.tcp.tcb import State
from ustack.wire.checksum import internet_checksum, pseudo_header_sum
from ustack.wire.tcp import TcpHeader

from .netsim import Net

A = b"\xc6\x12\x00\x01"
B = b"\xc6\x12\x00\x02"


class CheckingDevice(DeviceWrapper):
    """Verifies every TCP frame the stack transmits."""

    def __init__(self, inner):
        super().__init__(inner)
        self._slots = []
        self.checked = 0
        self.scapy_checked = 0

    def tx_reserve(self, n):
        self._slots = self.inner.tx_reserve(n)
        return self._slots

    def tx_commit(self, lengths):
        for slot, n in zip(self._slots, lengths):
            self.check(bytes(slot[:n]))
        self.inner.tx_commit(lengths)

    def check(self, f: bytes) -> None:
        if f[12:14] != b"\x08\x00" or f[23] != 6:
            return
        ihl = (f[14] & 15) * 4
        tot = int.from_bytes(f[16:18], "big")
        assert internet_checksum(f[14:14 + ihl]) == 0
        seg = f[14 + ihl:14 + tot]
        assert internet_checksum(seg, pseudo_header_sum(f[26:30], f[30:34], 6, len(seg))) == 0
        hdr = TcpHeader.parse(seg, f[26:30], f[30:34])
        self.checked += 1
        p = Ether(f)
        tcp = p[TCP]
        assert tcp.seq == hdr.seq and tcp.ack == hdr.ack and int(tcp.flags) == hdr.flags
        assert tcp.dataofs * 4 == hdr.header_len and tcp.window == hdr.window
        assert len(bytes(tcp.payload)) == len(seg) - hdr.header_len
        opts = dict((k, v) for k, v in tcp.options if isinstance(k, str))
        if hdr.mss is not None:
            assert opts["MSS"] == hdr.mss
        if hdr.wscale is not None:
            assert opts["WScale"] == hdr.wscale
        if hdr.timestamps is not None:
            assert opts["Timestamp"] == tuple(hdr.timestamps)
        if hdr.sack_blocks:
            assert tuple(opts["SAck"]) == tuple(edge for block in hdr.sack_blocks for edge in block)
        self.scapy_checked += 1
        if hdr.flags & 0x07 or self.checked % 16 == 0:  # FIN, SYN, RST, and a sample of data
            q = Ether(f)
            del q[IP].chksum
            del q[TCP].chksum
            q = Ether(bytes(q))
            assert (tcp.chksum, p[IP].chksum) == (q[TCP].chksum, q[IP].chksum)


def checked_net(**kw):
    return Net(wrap_a=CheckingDevice, wrap_b=CheckingDevice, **kw)


class Pump:
    """Sends ``data`` on a connection as the send buffer allows, from the poll loop."""

    def __init__(self, conn, data: bytes, close: bool = True):
        self.conn, self.data, self.pos, self.close = conn, memoryview(data), 0, close
        conn.on_event = self.step
        conn.on_send_low_water = self.step

    def step(self, conn=None) -> None:
        c = self.conn
        if c.state not in (State.ESTABLISHED, State.CLOSE_WAIT):
            return
        while self.pos < len(self.data):
            n = c.send(self.data[self.pos:self.pos + 65536])
            if not n:
                return
            self.pos += n
        if self.close and not c.wr_shutdown:
            c.shutdown(1)


class Sink:
    def __init__(self):
        self.h = hashlib.sha256()
        self.n = 0
        self.conn = None

    def attach(self, conn):
        self.conn = conn
        conn.on_event = self.step
        self.step(conn)

    def step(self, conn=None) -> None:
        while True:
            d = self.conn.recv(1 << 20)
            if not d:
                return
            self.h.update(d)
            self.n += len(d)


def transfer(net, nbytes: int, seed: int = 0, max_time: float = 600.0):
    """b connects to a:80 and pushes nbytes; a reads to EOF. Returns (sink, client conn, server conn)."""
    data = hashlib.sha256(str(seed).encode()).digest() * (nbytes // 32 + 1)
    data = data[:nbytes]
    lst = net.a.tcp.listen((b"\0\0\0\0", 80), 16)
    sink = Sink()
    lst.on_event = lambda l: sink.attach(l.accept()) if sink.conn is None and l.readable else None
    client = net.b.tcp.connect(None, (A, 80), net.clock.now)
    Pump(client, data)
    ok = net.run(lambda: sink.conn is not None and sink.conn.eof and sink.n == nbytes, max_time)
    assert ok, (sink.n, nbytes, client.info(), net.clock.now)
    assert sink.h.hexdigest() == hashlib.sha256(data).hexdigest()
    return sink, client, sink.conn


def test_clean_link_transfer_and_orderly_close():
    net = checked_net()
    sink, client, server = transfer(net, 2_000_000)
    server.close(net.clock.now)
    net.run(lambda: client.state == State.TIME_WAIT and server.state == State.CLOSED, 10)
    assert client.info().retransmits == 0
    # TIME-WAIT lasts 2*MSL, then the connection is gone.
    net.run(lambda: client.state == State.CLOSED, 2 * client.config.msl + 5)
    assert client.state == State.CLOSED
    assert all(s.device.checked > 0 for s in net.stacks)


@pytest.mark.parametrize("loss", [0.01, 0.05])
def test_20mb_byte_exact_under_loss_reorder_duplication_corruption(loss):
    net = checked_net(seed=int(loss * 1000), loss=loss, duplicate=0.01, reorder=0.02, corrupt=0.005,
                      delay=0.002, jitter=0.001)
    sink, client, server = transfer(net, 20_000_000, seed=7)
    info = client.info()
    assert info.retransmits > 0
    drops = net.a.stats.drops()
    assert any(k.endswith("bad_checksum") for k in drops), drops  # corruption was caught, not delivered
    assert net.a.device.scapy_checked == net.a.device.checked > 1000
    assert net.b.device.scapy_checked == net.b.device.checked > 10000
