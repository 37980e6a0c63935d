"""A whole stack's transmissions through the TX segmentation offload (ustack/_fp_gso.pxi), over the pipe.

``GsoRing`` sits between the sending stack and its pipe end: every burst the
stack commits is copied into a synthetic TPACKET_V3 TX ring with
virtio_net_hdr slots, posted by ``tpv3_tx_post_gso`` as PacketRingDevice
(gso=True) posts it, segmented back in software as the kernel does
(tests/backends/test_fp_gso.py), and what comes out must be the burst the
stack wrote, byte for byte; those frames then go on to the peer. A bulk
transfer (IPv4 and IPv6, fast path on and off) must form super-frames of
the stack's real segments (consecutive IPv4 IDs, one TSval per burst) and
arrive sha256-exact; a lossy run adds retransmissions, which go alone.
"""

from __future__ import annotations

import struct

import pytest

from ustack import _fastpath as fp
from ustack.device import DeviceWrapper

from tests.backends.test_fp_gso import DATA, FS, H3, resegmented
from .netsim import Net
from .test_tcp_pipe import transfer

NR = 64
A6, B6 = bytes.fromhex("fd000000000000000000000000000001"), bytes.fromhex("fd000000000000000000000000000002")


class GsoRing(DeviceWrapper):
    """The stack's bursts through tpv3_tx_post_gso and a software segmentation; see the module docstring."""

    def __init__(self, inner):
        super().__init__(inner)
        self._slots = []
        self.ring = bytearray(FS * NR)
        self.head = 0
        self.frames = self.posted = self.supers = self.merged = 0

    def tx_reserve(self, n):
        self._slots = self.inner.tx_reserve(n)
        return self._slots

    def tx_commit(self, lengths):
        burst = [bytes(s[:n]) for s, n in zip(self._slots, lengths)]
        for k, f in enumerate(burst):
            slot = ((self.head + k) % NR) * FS
            self.ring[slot + DATA:slot + DATA + len(f)] = f
        head, posted, supers, merged = fp.tpv3_tx_post_gso(memoryview(self.ring), 0, FS, NR, self.head,
                                                           list(lengths), 1514, 65535, 64)
        out = []
        for k in range(posted):
            slot = ((self.head + k) % NR) * FS
            tp_len = struct.unpack_from("=I", self.ring, slot + 16)[0]
            out.append((bytes(self.ring[slot + H3:slot + DATA]), bytes(self.ring[slot + DATA:slot + H3 + tp_len])))
            struct.pack_into("=I", self.ring, slot + 20, 0)  # the kernel took it
        assert resegmented(out) == burst
        self.head = head
        self.frames += len(burst)
        self.posted += posted
        self.supers += supers
        self.merged += merged
        self.inner.tx_commit(lengths)


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
def test_bulk_transfer_forms_super_frames_that_segment_back_to_the_stacks_frames(v6):
    addrs = dict(a_addr=["198.18.0.1/24", "fd00::1/64"], b_addr=["198.18.0.2/24", "fd00::2/64"]) if v6 else {}
    net = Net(wrap_b=GsoRing, **addrs)
    with net:
        if v6:  # DAD first (RFC 4862 5.4)
            assert net.run(lambda: A6 in net.a.iface6.preferred() and B6 in net.b.iface6.preferred(), 5)
        transfer_v6(net, 3_000_000) if v6 else transfer(net, 3_000_000)
        dev = net.b.device
        assert dev.supers > 50 and dev.merged > 5 * dev.supers, vars(dev)
        assert dev.posted == dev.frames - dev.merged + dev.supers


def test_a_lossy_transfer_stays_exact_with_retransmissions_alone():
    net = Net(wrap_b=GsoRing, seed=3, loss=0.02, reorder=0.01, delay=0.002)
    with net:
        _, client, _ = transfer(net, 3_000_000, seed=5)
        assert client.info().retransmits > 0 and net.b.device.supers > 10


def transfer_v6(net, nbytes):
    import hashlib

    from .test_tcp_pipe import Pump, Sink

    data = (hashlib.sha256(b"6").digest() * (nbytes // 32 + 1))[:nbytes]
    lst = net.a.tcp.listen((bytes(16), 80), 16)
    sink = Sink()
    lst.on_event = lambda l: sink.attach(l.accept()) if sink.conn is None and l.readable else None
    client = net.b.tcp.connect(None, (A6, 80), net.clock.now)
    Pump(client, data)
    assert net.run(lambda: sink.conn is not None and sink.conn.eof and sink.n == nbytes, 600)
    assert sink.h.hexdigest() == hashlib.sha256(data).hexdigest()
