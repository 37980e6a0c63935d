"""SYN-RECEIVED as a light record: the connection a listener's SYN starts, built when it is needed.

A SYN that reaches a listener with room (``Listener.segment_arrives``)
leaves a ``SynReceived`` record in the layer's ``connections`` (outside
the C flow table, as ``timewait.TimeWait`` records) and in the listener's
SYN queue, and the SYN-ACK goes out at once: the record keeps what the
SYN said (its sequence number, window and options, RFC 9293 3.7.1, RFC
7323, RFC 2018), our ISS and when the SYN-ACK left, and the SYN-ACK's
retransmission timer. It is Linux's request_sock: the full ``Connection``
(its sender, receiver, loss recovery, congestion control, RTT estimator)
is built only when something needs it, in the very state
``Connection.open_passive`` would have left it in (``Connection.adopt``):

- any segment for the 4-tuple (the handshake's ACK, a retransmitted SYN,
  a RST, data, anything else): the connection takes it as it would have
  in SYN-RECEIVED (RFC 9293 3.10.7.4, RFC 5961, RFC 7323 checks and all);
- the SYN-ACK's retransmission timeout: the connection handles it (the
  SYN-ACK again with its RTO backed off, or the end after
  ``synack_retries``);
- any other use (an ICMP error, ``abort`` when the listener closes,
  ``info``, ``close``): the record builds the connection and passes the
  call on (``__getattr__``).

So the SYN's round does no more than a record, a SYN-ACK and a timer: the
reply leaves sooner, and the connection's construction moves to the next
segment's round. There the connection is copied from the listener's
prototype (``prototype.py``) when one fits, and it keeps the fast emitter
(the flow's frame template) that wrote the SYN-ACK.
"""

from __future__ import annotations

from ustack.transport.tcp.connection import Connection, window_shift_for
from ustack.transport.tcp.isn import isn_at
from ustack.transport.tcp.output import syn_options, syn_segment
from ustack.transport.tcp.prototype import passive_connection
from ustack.transport.tcp.rtt import ts_clock
from ustack.transport.tcp.seq import seq_add, seq_ge, seq_le, seq_lt
from ustack.transport.tcp.tcb import CLOSED, SYN_RECEIVED, TIME_WAIT
from ustack.wire.tcp import ACK, SYN, headers_len


class SynReceived:
    """One connection in SYN-RECEIVED, not built yet (see the module docstring).

    ``seq``, ``window``, ``mss``, ``wscale``, ``sack_permitted`` and
    ``timestamps`` are the SYN's (the fields ``Connection.adopt`` negotiates
    from, as from the SYN itself).
    """

    __slots__ = ("layer", "config", "listener", "local", "remote", "key", "seq", "window", "mss", "wscale",
                 "sack_permitted", "timestamps", "iss", "hashes", "syn_time", "timer", "conn", "own_mss", "emitter")

    def __init__(self, layer, config, listener, local: tuple, remote: tuple, hdr, now: float):
        self.layer = layer
        self.config = config  # the listener's
        self.listener = listener
        self.local = local
        self.remote = remote
        self.key = (local[0], local[1], remote[0], remote[1])
        self.seq = hdr.seq
        self.window = hdr.window
        self.mss = hdr.mss
        self.wscale = hdr.wscale
        self.sack_permitted = hdr.sack_permitted
        self.timestamps = hdr.timestamps
        self.iss = 0
        self.hashes = None  # (RFC 6528's F, the timestamp offset) of the 4-tuple
        self.syn_time = now
        self.timer = None
        self.conn = None  # the Connection once built
        self.own_mss = 0  # the MSS our SYN-ACK offered (the connection's own, as open_passive finds it)
        self.emitter = None  # the flow's fast emitter (FlowEmitter) that wrote the SYN-ACK: the connection's then

    def __repr__(self) -> str:
        return f"<SynReceived {self.key!r}{' built' if self.conn is not None else ''}>"

    @property
    def state(self):
        conn = self.conn
        return SYN_RECEIVED if conn is None else conn.tcb.state

    @property
    def orphaned(self) -> bool:
        conn = self.conn
        return False if conn is None else conn.orphaned

    def send_syn_ack(self, now: float) -> None:
        """Choose the ISS and send the SYN-ACK, the frame ``Connection.open_passive`` sends (RFC 9293
        3.10.7.2): our MSS, and the window scale, SACK-permitted and timestamps the SYN offered and the
        configuration allows; the SYN-ACK's retransmission timer runs from now."""
        layer = self.layer
        cfg = self.config
        host = layer.host
        laddr, lport = self.local
        raddr, rport = self.remote
        own_mss = host.route_mtu(raddr) - headers_len(raddr)
        if cfg.mss:
            own_mss = min(own_mss, cfg.mss)
        own_mss = self.own_mss = max(own_mss, 88)
        isn_f, ts_offset = self.hashes = layer.keyed.connection_hashes(laddr, lport, raddr, rport)
        iss = self.iss = isn_at(isn_f, now)
        wscale = window_shift_for(cfg.rcvbuf_ceiling) if cfg.window_scaling and self.wscale is not None else None
        sack = cfg.sack and self.sack_permitted
        tsopt = self.timestamps
        ts = (ts_clock(now, ts_offset), tsopt[0]) if cfg.timestamps and tsopt is not None else None
        window = min(cfg.rcvbuf, 0xFFFF)  # an empty receive buffer's room, never scaled (RFC 7323 2.2)
        ack = seq_add(self.seq, 1)
        opts = syn_options(own_mss, wscale, sack, ts)
        # Through the flow's cached frame template when the host has them: the connection's emitter later,
        # built once for the SYN-ACK and the segments after it (else the host's own path, as open_passive).
        make = getattr(host, "tcp_emitter", None)
        emitter = self.emitter = make() if make is not None else None
        if emitter is not None and emitter.options(laddr, raddr, lport, rport, iss, ack, SYN | ACK, window, opts, now):
            pass
        elif not host.tcp_output_options(laddr, raddr, lport, rport, iss, ack, SYN | ACK, window, opts, now):
            host.tcp_output(laddr, raddr, syn_segment(laddr, raddr, lport, rport, iss, ack, SYN | ACK, window,
                                                      own_mss, wscale, sack, ts, opts), now)
        stats = host.stats
        stats.inc("tcp.out_segs")
        stats.inc("tcp.passive_opens")
        timer = self.timer = host.timers.timer(SynReceived._on_rtx_timer, self)
        timer.arm(now + max(cfg.min_rto, min(cfg.initial_rto, cfg.max_rto)))  # RttEstimator's first RTO

    # -- building the connection ---------------------------------------------

    def build(self):
        """The ``Connection`` this record stands for, in the state ``open_passive`` would have left it
        in; it replaces the record in the layer (and its C flow table) and in the listener's SYN queue."""
        conn = self.conn
        if conn is not None:
            return conn
        layer = self.layer
        listener = self.listener
        if self.own_mss:  # (copied from the listener's prototype: the connection Connection() builds)
            conn = passive_connection(layer, self.config, self.local, self.remote, listener, self.hashes,
                                      self.own_mss, self.emitter, self.timer)  # (adopt's timer: none made)
        else:
            conn = Connection(layer, self.config, self.local, self.remote, listener=listener, hashes=self.hashes)
        self.conn = conn
        conn.adopt(self, self.timer)
        self.timer = None
        if layer.connections.get(self.key) is self:
            layer.register(conn)
        if listener is not None:
            queue = listener._syn_queue
            if self in queue:
                queue.discard(self)
                queue.add(conn)
        return conn

    def segment_arrives(self, seg, payload, now: float) -> None:
        """A segment for this 4-tuple: the connection takes it as it would have in SYN-RECEIVED (the
        handshake's own ACK through ``_handshake_acked``, every other segment through the general path)."""
        conn = self.build()
        if not _handshake_acked(conn, seg, payload, now):
            conn.segment_arrives(seg, payload, now)

    def _on_rtx_timer(self, now: float) -> None:
        """The SYN-ACK timed out: the connection's retransmission timeout handles it (backoff, SYN-ACK
        again, or the end after ``synack_retries``)."""
        Connection._on_rtx_timer(self.build(), now)

    def detach_listener(self) -> None:
        """The listener lets go (it closes): the connection is built first, a passive one as before."""
        self.build().detach_listener()
        self.listener = None

    def __getattr__(self, name: str):
        # Anything else is the connection's (ICMP errors, abort, info, close, its TCB): build it.
        if name in SynReceived.__slots__ or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.build(), name)


def _handshake_acked(conn, seg, payload, now: float) -> bool:
    """The handshake's third segment in its one common form, taken as ``Connection.segment_arrives``
    takes it in SYN-RECEIVED; False (nothing changed) for any other segment, which the general path gets.

    The form: ACK alone (no other flag, no data) at exactly RCV.NXT, acknowledging exactly our SYN
    (SND.UNA < SEG.ACK = SND.MAX), its TSval not older than TS.Recent when timestamps are on (RFC 7323
    5.3), and room in the listener's accept queue. For it the general path's checks all pass (RFC
    9293 3.10.7.4: acceptable at RCV.NXT with no text, no RST, no SYN, an acceptable ACK in
    SYN-RECEIVED; RFC 5961 asks nothing more of it), so only their effects are left: the send window
    from the ACK, the handshake's RTT sample, ESTABLISHED (the listener's accept queue), TS.Recent
    (RFC 7323 4.3), whatever the application's callbacks queued meanwhile, the memory charge and
    the connection's event. ``tests/tcp/test_tcp_synrecv.py`` holds it to the general path's result.
    """
    if seg.flags != ACK or payload:
        return False
    tcb = conn.tcb
    seq = seg.seq
    ack = seg.ack
    if tcb.state != SYN_RECEIVED or seq != tcb.rcv_nxt or ack != tcb.snd_max or ack == tcb.snd_una:
        return False
    ts = seg.timestamps
    if tcb.ts_ok and (ts is None or seq_lt(ts[0], tcb.ts_recent)):
        return False
    listener = conn.listener
    if listener is not None and not listener.has_room():
        return False
    # Connection.segment_arrives' bookkeeping for every segment
    conn.segs_in += 1
    conn._last_rcv = now
    conn._keep_probes = 0
    sender = conn.sender
    sender.probes_out = 0
    conn._handshake_acked(seg, seq, ack, now)  # _synchronized_arrives, fifth step in SYN-RECEIVED
    if tcb.ts_ok and ts is not None and seq_le(seq, tcb.last_ack_sent) and seq_ge(ts[0], tcb.ts_recent):
        tcb.ts_recent = ts[0]
        tcb.ts_recent_age = now
    if tcb.state != CLOSED:
        sender.output(now)
        if conn.receiver.ack_now:
            conn.out.send_ack(now)
    if tcb.state == TIME_WAIT:  # (not from ESTABLISHED without a FIN; as segment_arrives, to be exact)
        conn.layer.enter_time_wait(conn, conn.receiver.select_window(), now)
    conn._recharge()
    conn._notify()
    return True
