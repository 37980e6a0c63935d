"""Passive connections copied from a prototype: a listener's new connections without running every ``__init__``.

A ``Connection`` is a dozen slotted objects (the TCB, receiver, output,
sender and their parts) of about 200 fields, nearly all of them the same
for every connection one configuration makes: setting them one by one is
the largest part of the handshake's last step (``synrecv.SynReceived.build``
on the handshake's ACK). A ``Prototype`` keeps one connection built by
``Connection.__init__`` for a listener's configuration (and the MSS our
SYN-ACK offered); ``make`` copies it object by object in C
(``_fastpath.SlotCopier``: a shallow copy of every slot) and then gives
the copy what must be its own: its TCB, buffers, timers, emitter, the
callbacks bound to it, its addresses and keyed hashes. The result is the
connection ``Connection(...)`` would have built (``tests/tcp/test_tcp_prototype.py``
compares the two, object by object, and checks that no two copies share a
part they could change).

A prototype serves only the configuration it was made from: ``fits``
compares every knob of the configuration (one tuple of its slots) and the
MSS, the address family and the fast path's switch; a controller that
paces (BBR: its model and rate sampler are made per connection) is always
built by ``Connection.__init__``.
"""

from __future__ import annotations

from ustack._fastpath import SlotCopier
from ustack.transport.tcp.config import TcpConfig
from ustack.transport.tcp.congestion import ALGORITHMS
from ustack.transport.tcp.connection import Connection
from ustack.transport.tcp.delack import DelayedAck
from ustack.transport.tcp.output import Output
from ustack.transport.tcp.rcvspace import ReceiveSpace
from ustack.transport.tcp.receiver import Receiver
from ustack.transport.tcp.recovery import NewRenoRecovery
from ustack.transport.tcp.recvbuf import ReceiveBuffer
from ustack.transport.tcp.rtt import RttEstimator
from ustack.transport.tcp.sendbuf import SendBuffer
from ustack.transport.tcp.sender import Sender
from ustack.transport.tcp.tcb import Tcb


class Copiers:
    """The ``SlotCopier`` of each class a connection is made of (one set per ``TcpLayer``)."""

    __slots__ = ("conn", "tcb", "receiver", "delack", "space", "output", "sender", "rtt", "cc", "config")

    def __init__(self):
        self.conn = SlotCopier(Connection)
        self.tcb = SlotCopier(Tcb)
        self.receiver = SlotCopier(Receiver)
        self.delack = SlotCopier(DelayedAck)
        self.space = SlotCopier(ReceiveSpace)
        self.output = SlotCopier(Output)
        self.sender = SlotCopier(Sender)
        self.rtt = SlotCopier(RttEstimator)
        # the controllers that keep nothing but numbers (not BBR, which paces)
        self.cc = {cls: SlotCopier(cls) for cls in ALGORITHMS.values() if not getattr(cls, "paces", False)}
        self.config = SlotCopier(TcpConfig)


class Prototype:
    """One listener configuration's connection to copy (see the module docstring)."""

    __slots__ = ("copiers", "config", "knobs", "own_mss", "family", "fastpath", "conn")

    def __init__(self, layer, copiers: Copiers, config: TcpConfig, own_mss: int, family: int):
        self.copiers = copiers
        self.config = config
        self.knobs = copiers.config.values(config)
        self.own_mss = own_mss
        self.family = family
        self.fastpath = layer.fastpath
        addr = bytes(family)
        # never registered, never opened: its timer is never armed, its emitter never asked
        self.conn = Connection(layer, config, (addr, 0), (addr, 0), hashes=(0, 0), own_mss=own_mss)

    @staticmethod
    def usable(config: TcpConfig, copiers: Copiers) -> bool:
        """Whether connections of ``config`` can be copied at all (not with a controller that paces)."""
        cls = ALGORITHMS.get(config.congestion.lower())
        return cls is not None and cls in copiers.cc

    def fits(self, layer, config: TcpConfig, own_mss: int, family: int) -> bool:
        """Whether a connection of ``config`` (``own_mss``, the address length ``family``) is this one's copy."""
        return (own_mss == self.own_mss and family == self.family and layer.fastpath == self.fastpath
                and self.copiers.config.matches(config, self.knobs))

    def make(self, layer, local: tuple, remote: tuple, listener, hashes: tuple, emitter=None,
             rtx_timer=None) -> Connection:
        """The connection ``Connection(layer, config, local, remote, listener, hashes, own_mss)`` builds;
        ``emitter``: the flow's fast emitter (``FlowEmitter``) already made (for the SYN-ACK), its own;
        ``rtx_timer``: the SYN-ACK's timer ``Connection.adopt`` makes its retransmission timer (else a new one).
        ``_fastpath.HandshakePath`` copies the same way in C (``_make`` in _fp_hsk.pxi): a part given here must
        be given there too (``tests/tcp/test_tcp_hsk_c.py`` compares the two connections and their sharing)."""
        cp = self.copiers
        p = self.conn
        c = cp.conn.clone(p)
        tcb = c.tcb = cp.tcb.clone(p.tcb)
        c.local_addr, c.local_port = bytes(local[0]), local[1]
        c.remote_addr, c.remote_port = bytes(remote[0]), remote[1]
        c.key = (c.local_addr, c.local_port, c.remote_addr, c.remote_port)
        c.listener = listener
        c.passive = listener is not None
        c._isn_f, tcb.ts_offset = hashes
        config = c.config
        host = c.host
        # the receiver: its buffer, delayed-ACK state and auto-tuning its own; its callbacks bound to c
        pr = p.receiver
        r = c.receiver = cp.receiver.clone(pr)
        r.tcb = tcb
        rcvbuf = r.rcvbuf = ReceiveBuffer(config.rcvbuf, config.max_ooo_runs)
        rcvbuf.hold = layer.rx_hold
        r._owner = c
        r.high_water = c._recv_high_water
        r.delack = cp.delack.clone(pr.delack)
        r.space = cp.space.clone(pr.space)
        # the output: a fast emitter of its own (it caches the flow's frame template)
        o = c.out = cp.output.clone(p.out)
        o.tcb = tcb
        o.receiver = r
        if emitter is None:
            make = getattr(host, "tcp_emitter", None)
            emitter = make() if make is not None else host.tcp_output_segment
        o.fast = emitter
        o.fast_sack = getattr(o.fast, "sack", None)
        o.local_addr, o.local_port = c.local_addr, c.local_port
        o.remote_addr, o.remote_port = c.remote_addr, c.remote_port
        # the sender: buffer, RTT estimator, controller, loss recovery and retransmission timer its own
        ps = p.sender
        s = c.sender = cp.sender.clone(ps)
        s.tcb = tcb
        s.out = o
        s.sndbuf = SendBuffer(config.sndbuf)
        s.rtt = r.rtt = cp.rtt.clone(ps.rtt)
        cc = ps.cc
        s.cc = cp.cc[type(cc)].clone(cc)
        s.recovery = NewRenoRecovery(s, 0)
        s.rtx_timer = rtx_timer if rtx_timer is not None else host.timers.timer(Connection._on_rtx_timer, c)
        s.low_water = c._send_low_water
        s.timer_maker = c
        return c


def passive_connection(layer, config: TcpConfig, local: tuple, remote: tuple, listener, hashes: tuple,
                       own_mss: int, emitter=None, rtx_timer=None) -> Connection:
    """A listener's new connection (``synrecv.SynReceived.build``): copied from the listener's prototype
    when one fits, else built (and the prototype made for the next ones); ``emitter``: the flow's fast
    emitter that wrote its SYN-ACK, the copy's, and ``rtx_timer`` the SYN-ACK's timer (``Prototype.make``)."""
    if listener is None:
        return Connection(layer, config, local, remote, listener=None, hashes=hashes, own_mss=own_mss)
    family = len(local[0])
    proto = listener.prototype
    if proto is not None and proto.fits(layer, config, own_mss, family):
        return proto.make(layer, local, remote, listener, hashes, emitter, rtx_timer)
    copiers = layer.copiers
    if copiers is None:
        copiers = layer.copiers = Copiers()
    if Prototype.usable(config, copiers):
        listener.prototype = Prototype(layer, copiers, config, own_mss, family)
    return Connection(layer, config, local, remote, listener=listener, hashes=hashes, own_mss=own_mss)
