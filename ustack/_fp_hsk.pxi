from libc.stdint cimport int32_t
from cpython.float cimport PyFloat_AsDouble

# -- the handshake's ACK in one C call (issue 11's connect+close, issue 10's connect()) -----------------------------
#
# ``FlowTable.deliver_burst`` hands a lone ACK it finds no flow for to ``HandshakePath.take`` before the stack's
# ``_deliver`` (as a SYN to ``SynPath.take``). For the handshake's third segment in its one common form, to a
# ``synrecv.SynReceived`` record not built yet whose listener has a prototype that fits, the whole round is done
# here: the stack's address screens (as ``SynPath``), the layer's demux (the record for the 4-tuple), the checks
# of ``synrecv._handshake_acked`` (ACK alone, no data, SEG.SEQ = RCV.NXT, SEG.ACK = SND.MAX, the TSval not older
# than TS.Recent when timestamps were negotiated: RFC 9293 3.10.7.4, RFC 5961, RFC 7323 5.3; room in the accept
# queue), then what that path does, step for step: the connection copied from the listener's prototype
# (``Prototype.make``, the one Python call that builds), ``Connection.adopt`` (the TCB of SYN-RECEIVED as the SYN
# and our SYN-ACK left it, ``_negotiate``'s options), the record replaced in the layer, the C flow table and the
# SYN queue (``SynReceived.build``), and ``_handshake_acked``'s effects: SND.UNA and the send window, the
# handshake's RTT sample (RFC 7323 4.1 or the SYN-ACK's time, RFC 6298 2.2), ESTABLISHED, the accept queue and
# the application's notifications, TS.Recent (RFC 7323 4.3), the output loop and the memory charge. Anything
# else (data or FIN on the ACK, a RST, a bad SEQ or ACK number, PAWS, no room, cookies, a record already built,
# no fitting prototype) is False before anything changed, and goes to the Python path unchanged.
# ``tests/tcp/test_tcp_hsk_c.py`` holds the two paths in lockstep.


# The TCB fields the handshake sets, written through their slot offsets (``SlotLayout``, as the fast path's).
HSK_TCB_FIELDS = ("state", "irs", "iss", "rcv_nxt", "last_ack_sent", "snd_una", "snd_nxt", "snd_max", "mss_base",
                  "snd_wscale", "rcv_wscale", "ts_ok", "ts_recent", "ts_recent_age", "sack_ok", "snd_mss", "rcv_mss",
                  "snd_wnd", "max_snd_wnd", "snd_wl1", "snd_wl2", "rcv_wnd", "rcv_adv", "snd_sml", "ts_offset",
                  "fin_queued")
cdef enum:
    H_STATE = 0
    H_IRS = 1
    H_ISS = 2
    H_RCV_NXT = 3
    H_LAST_ACK_SENT = 4
    H_SND_UNA = 5
    H_SND_NXT = 6
    H_SND_MAX = 7
    H_MSS_BASE = 8
    H_SND_WSCALE = 9
    H_RCV_WSCALE = 10
    H_TS_OK = 11
    H_TS_RECENT = 12
    H_TS_RECENT_AGE = 13
    H_SACK_OK = 14
    H_SND_MSS = 15
    H_RCV_MSS = 16
    H_SND_WND = 17
    H_MAX_SND_WND = 18
    H_SND_WL1 = 19
    H_SND_WL2 = 20
    H_RCV_WND = 21
    H_RCV_ADV = 22
    H_SND_SML = 23
    H_TS_OFFSET = 24
    H_FIN_QUEUED = 25


cdef class HandshakePath:
    """The handshake's ACK in C for one stack (``Stack`` installs it on its layer's ``FlowTable.hsk``)."""

    cdef object stack          # its screening sets (_suspect_first, _suspect_src), iface, iface6, ipv6
    cdef object layer          # the TcpLayer: connections, flows, host
    cdef object record         # synrecv.SynReceived
    cdef object listener_type  # listener.Listener
    cdef object on_rtx         # Connection._on_rtx_timer, the retransmission timer's callback once adopted
    cdef object syn_received   # tcb.State.SYN_RECEIVED
    cdef object established    # tcb.State.ESTABLISHED
    cdef object fin_wait_1     # tcb.State.FIN_WAIT_1
    cdef object closed         # tcb.State.CLOSED
    cdef object time_wait      # tcb.State.TIME_WAIT
    cdef object counters
    cdef SlotLayout tl         # the TCB class's HSK_TCB_FIELDS (learned from the first connection)
    cdef readonly unsigned long taken   # handshake ACKs done here

    def __cinit__(self, stack, layer, record, listener_type, on_rtx, states):
        self.stack = stack
        self.layer = layer
        self.record = record
        self.listener_type = listener_type
        self.on_rtx = on_rtx
        self.syn_received, self.established, self.fin_wait_1, self.closed, self.time_wait = states
        self.counters = layer.host.stats.counters

    cdef bint take(self, Packet p, now) except -1:
        """The handshake's ACK round for ``p`` (a TCP or TCP6 record no flow took): True when done here."""
        cdef int sport = p.src_port, dport = p.dst_port
        cdef uint32_t rseq, iss
        if p.flags != 0x10 or p.payload_len != 0 or sport == 0 or dport == 0:
            return False
        stack = self.stack
        src = p.src
        dst = p.dst
        if p._alen == 4:
            if p.kind != CK_TCP:
                return False
            if p._src[0] in stack._suspect_first or src in stack._suspect_src:
                return False  # (Stack._deliver's martian screen)
            if dst != stack.iface.addr:
                return False  # (another of ours, a broadcast: _tcp_input's screen)
        elif p._alen == 16:
            if p.kind != CK_TCP6 or stack.ipv6 is None:
                return False
            if p._src[0] == 0 or p._src[0] == 0xFF or p._dst[0] == 0xFF:
                return False
            ours = stack.iface6.valid_set
            if src in ours or dst not in ours:
                return False
        else:
            return False
        layer = self.layer
        connections = layer.connections
        key = (dst, dport, src, sport)
        rec = connections.get(key)
        if type(rec) is not self.record or rec.conn is not None or not rec.own_mss or rec.timer is None:
            return False
        lst = rec.listener
        if type(lst) is not self.listener_type:
            return False
        proto = lst.prototype
        own_mss = rec.own_mss
        cfg = rec.config
        if proto is None or not proto.fits(layer, cfg, own_mss, p._alen):
            return False  # (the first connection of a configuration is built by Connection())
        # synrecv._handshake_acked's form, against the TCB adopt would make: RCV.NXT = the SYN's SEQ + 1,
        # SND.UNA = ISS, SND.MAX = ISS + 1; TS.Recent the SYN's TSval when timestamps are on
        rseq = <uint32_t>rec.seq
        iss = <uint32_t>rec.iss
        if p.seq != <uint32_t>(rseq + 1) or p.ack != <uint32_t>(iss + 1):
            return False
        pconn = proto.conn
        syn_ts = rec.timestamps
        ts_ok = bool(pconn._offer_ts) and syn_ts is not None
        if ts_ok:
            if not p._opts & OPTF_TIMESTAMPS:
                return False
            if <int32_t>(p._tsval - <uint32_t>syn_ts[0]) < 0:
                return False  # (RFC 7323 5.3 R1: PAWS; the general path answers it)
        if len(lst._accept) >= lst.backlog:
            return False
        psender = pconn.sender
        if psender.rto_tsval is not None or psender.rtt.srtt is not None or pconn._syn_retransmitted:
            return False
        # -- SynReceived.build: the connection from the prototype, adopt, the record replaced -----------------
        counters = self.counters
        counters["tcp.in_segs"] += 1
        timer = rec.timer
        conn = _make(proto, layer, rec.local, rec.remote, lst, rec.hashes, rec.emitter, timer)
        tcb = conn.tcb
        if self.tl is None or type(tcb) is not self.tl.cls:
            self.tl = SlotLayout(type(tcb), HSK_TCB_FIELDS)
        rec.conn = conn
        self._adopt(conn, rec, timer, ts_ok)
        rec.timer = None
        connections[key] = conn  # layer.register
        layer.flows.add(dst, dport, src, sport, conn)
        queue = lst._syn_queue
        if rec in queue:
            queue.discard(rec)
            queue.add(conn)
        # -- synrecv._handshake_acked -----------------------------------------------------------------------
        self._acked(conn, lst, p, now, ts_ok)
        self.taken += 1
        return True

    cdef int _adopt(self, conn, rec, timer, bint ts_ok) except -1:
        """``Connection.adopt(rec, timer)`` (``_syn_received`` and ``_negotiate`` at the SYN's time)."""
        cdef uint32_t rseq = <uint32_t>rec.seq, iss = <uint32_t>rec.iss, rcv_nxt, snd_max
        cdef long peer_mss, mss_base, own, snd_mss
        cdef Py_ssize_t *o = self.tl._off
        syn_time = rec.syn_time
        tcb = conn.tcb
        sender = conn.sender
        receiver = conn.receiver
        seq = rec.seq
        iss_o = rec.iss
        _fset(tcb, o[H_IRS], seq)
        rcv_nxt = rseq + 1
        rcv_nxt_o = rcv_nxt
        _fset(tcb, o[H_RCV_NXT], rcv_nxt_o)
        _fset(tcb, o[H_LAST_ACK_SENT], rcv_nxt_o)
        _fset(tcb, o[H_ISS], iss_o)
        _fset(tcb, o[H_SND_UNA], iss_o)
        # _negotiate (RFC 9293 3.7.1, RFC 7323 2.2/2.3, RFC 2018)
        peer_mss = rec.mss or 536
        own = conn._own_mss
        mss_base = peer_mss if peer_mss < own else own
        if mss_base < 64:
            mss_base = 64
        _fset(tcb, o[H_MSS_BASE], mss_base)
        wscale = rec.wscale
        if conn._offer_ws and wscale is not None:
            _fset(tcb, o[H_SND_WSCALE], min(wscale, 14))
        else:
            conn._offer_ws = False
            _fset(tcb, o[H_SND_WSCALE], 0)
            _fset(tcb, o[H_RCV_WSCALE], 0)
        if ts_ok:
            _fset(tcb, o[H_TS_OK], True)
            _fset(tcb, o[H_TS_RECENT], rec.timestamps[0])
            _fset(tcb, o[H_TS_RECENT_AGE], syn_time)
        else:
            conn._offer_ts = False
        sack_ok = conn._offer_sack and rec.sack_permitted
        _fset(tcb, o[H_SACK_OK], sack_ok)
        conn._offer_sack = sack_ok
        snd_mss = mss_base - (12 if _bget(tcb, o[H_TS_OK]) else 0)
        snd_mss_o = snd_mss
        _fset(tcb, o[H_SND_MSS], snd_mss_o)
        _fset(tcb, o[H_RCV_MSS], snd_mss if snd_mss < 536 else 536)
        # (Window.set_mss: sender.established sets the same SMSS again, which changes nothing more)
        sender.cc.set_mss(snd_mss_o)
        sender.use_sack(sack_ok)
        window = rec.window
        _fset(tcb, o[H_SND_WND], window)
        _fset(tcb, o[H_MAX_SND_WND], window)
        _fset(tcb, o[H_SND_WL1], seq)
        _fset(tcb, o[H_STATE], self.syn_received)
        conn._syn_time = syn_time
        conn._last_rcv = syn_time
        # adopt: the SYN-ACK sent
        snd_max = iss + 1
        snd_max_o = snd_max
        _fset(tcb, o[H_SND_NXT], snd_max_o)
        _fset(tcb, o[H_SND_MAX], snd_max_o)
        rcvbuf = receiver.rcvbuf
        free = rcvbuf.free  # receiver.syn_window(True): never scaled (RFC 7323 2.2)
        rwnd = min(free, 0xFFFF)
        _fset(tcb, o[H_RCV_WND], rwnd)
        _fset(tcb, o[H_RCV_ADV], <uint32_t>(rcv_nxt + <uint32_t>rwnd))
        # receiver.ack_sent(syn_time, False)
        receiver.delack.ack_sent(receiver.unacked > 0)
        receiver.ack_now = False
        receiver.ack_round = False
        receiver.wnd_update = False
        receiver.dsack = None
        receiver.unacked = 0
        receiver.sack_tick = rcvbuf.tick
        receiver.delack_due = None
        out = conn.out
        out.segs_out += 1
        timer.callback = self.on_rtx
        timer.owner = conn
        sender.rtx_timer = timer
        return 0

    cdef int _acked(self, conn, lst, Packet p, now, bint ts_ok) except -1:
        """``synrecv._handshake_acked`` after its checks (``Connection._handshake_acked``, fifth step in
        SYN-RECEIVED, then TS.Recent, the output loop, the charge and the event)."""
        cdef uint32_t r32
        cdef double r
        cdef Py_ssize_t *o = self.tl._off
        conn.segs_in += 1
        conn._last_rcv = now
        conn._keep_probes = 0
        sender = conn.sender
        sender.probes_out = 0
        tcb = conn.tcb
        seq = p.seq
        ack = p.ack
        _fset(tcb, o[H_SND_UNA], ack)
        snd_wnd = p.window << _iget(tcb, o[H_SND_WSCALE])
        snd_wnd_o = snd_wnd
        _fset(tcb, o[H_SND_WND], snd_wnd_o)
        _fset(tcb, o[H_MAX_SND_WND], max(_fget(tcb, o[H_MAX_SND_WND]), snd_wnd_o))
        _fset(tcb, o[H_SND_WL1], seq)
        _fset(tcb, o[H_SND_WL2], ack)
        # _handshake_rtt: RFC 7323 4.1 (sender.sample_tsecr), else the SYN-ACK's time (never retransmitted here)
        rtt = sender.rtt
        if ts_ok and p._tsecr:
            r32 = <uint32_t>(<uint64_t>(PyFloat_AsDouble(now) * 1000.0)
                             + <uint64_t>(<uint32_t>_iget(tcb, o[H_TS_OFFSET]))) - p._tsecr
            if r32 < 0x7FFFFFFF:
                _rtt_first_sample(rtt, r32 / 1000.0)
        else:
            r = PyFloat_AsDouble(now) - PyFloat_AsDouble(conn._syn_time)
            if r >= 0:
                _rtt_first_sample(rtt, r)
        # _become_established: sender.established(False), ESTABLISHED, the listener's accept queue
        sender.rtx_timer.cancel()
        sender.rtx_count = 0
        rtt.backoffs = 0  # rtt.reset_backoff()
        rtt.rto = _rtt_clamp(rtt, rtt._base_rto)
        _fset(tcb, o[H_SND_SML], ack)
        _fset(tcb, o[H_STATE], self.fin_wait_1 if _bget(tcb, o[H_FIN_QUEUED]) else self.established)
        if conn.on_event is not None:
            conn._notify()
        self.counters["tcp.established"] += 1
        cfg = conn.config
        if cfg.keepalive:
            conn._keepalive().arm(now + cfg.keepidle)
        if conn.listener is not None:
            conn.listener.child_established(conn)
        if ts_ok:  # RFC 7323 4.3 (SEG.SEQ = RCV.NXT = Last.ACK.sent; the TSval checked not older above)
            if (<int32_t>(<uint32_t>p.seq - <uint32_t>_iget(tcb, o[H_LAST_ACK_SENT])) <= 0
                    and <int32_t>(p._tsval - <uint32_t>_iget(tcb, o[H_TS_RECENT])) >= 0):
                _fset(tcb, o[H_TS_RECENT], p._tsval)
                _fset(tcb, o[H_TS_RECENT_AGE], now)
        if _fget(tcb, o[H_STATE]) != self.closed:
            sender.output(now)
            receiver = conn.receiver
            if receiver.ack_now:
                conn.out.send_ack(now)
        if _fget(tcb, o[H_STATE]) == self.time_wait:
            self.layer.enter_time_wait(conn, conn.receiver.select_window(), now)
        conn._recharge()
        if conn.on_event is not None:
            conn._notify()
        return 0


cdef object _rtt_clamp(rtt, rto):
    """``RttEstimator._clamp``: min(max_rto, max(min_rto, rto)) with the builtins' choice of object."""
    lo = rtt.min_rto
    v = rto if rto > lo else lo
    hi = rtt.max_rto
    return v if v < hi else hi


cdef int _rtt_first_sample(rtt, double r) except -1:
    """``RttEstimator.sample(r)`` for its first measurement (RFC 6298 2.2; SRTT not set yet)."""
    srtt = r
    rttvar = r / 2
    rtt.srtt = srtt
    rtt.rttvar = rttvar
    k_var = 4 * <double>rttvar
    gran = rtt.granularity
    base = srtt + (k_var if k_var > gran else gran)
    rtt._base_rto = base
    rtt.backoffs = 0
    rtt.rto = _rtt_clamp(rtt, base)
    return 0


cdef object _clone_slots(SlotCopier cp, obj):
    """``cp.clone(obj)`` without the Python call (_fp_clone.pxi)."""
    cdef PyObject **dst
    cdef PyObject *v
    cdef Py_ssize_t k
    cdef _CloneType *t = <_CloneType *><PyObject *>cp.cls
    cdef PyObject *q
    if type(obj) is not cp.cls:
        raise TypeError(f"not a {cp.cls.__name__}")
    q = t.tp_alloc(t, 0)
    if q == NULL:
        raise MemoryError()
    new = <object>q
    Py_XDECREF(q)
    for k in range(cp._n):
        v = _slot(obj, cp._off[k])
        Py_XINCREF(v)
        dst = <PyObject **>((<char *><PyObject *>new) + cp._off[k])
        Py_XDECREF(dst[0])
        dst[0] = v
    return new


cdef object _make(proto, layer, local, remote, lst, hashes, emitter, rtx_timer):
    """``Prototype.make(layer, local, remote, lst, hashes, emitter, rtx_timer)`` for the handshake's ACK, step for
    step, but for the loss recovery: the copy's is made by ``Sender.use_sack`` in ``_adopt`` (``make``'s
    ``NewRenoRecovery(sender, 0)`` is always replaced there before anything reads it)."""
    cp = proto.copiers
    p = proto.conn
    c = _clone_slots(cp.conn, p)
    tcb = _clone_slots(cp.tcb, p.tcb)
    c.tcb = tcb
    laddr = bytes(local[0])
    lport = local[1]
    raddr = bytes(remote[0])
    rport = remote[1]
    c.local_addr = laddr
    c.local_port = lport
    c.remote_addr = raddr
    c.remote_port = rport
    c.key = (laddr, lport, raddr, rport)
    c.listener = lst
    c.passive = lst is not None
    isn_f, ts_offset = hashes
    c._isn_f = isn_f
    tcb.ts_offset = ts_offset
    config = c.config
    host = c.host
    # the receiver: its buffer, delayed-ACK state and auto-tuning its own; its callbacks bound to c
    pr = p.receiver
    r = _clone_slots(cp.receiver, pr)
    c.receiver = r
    r.tcb = tcb
    rcvbuf = type(pr.rcvbuf)(config.rcvbuf, config.max_ooo_runs)
    r.rcvbuf = rcvbuf
    rcvbuf.hold = layer.rx_hold
    r._owner = c
    r.high_water = c._recv_high_water
    r.delack = _clone_slots(cp.delack, pr.delack)
    r.space = _clone_slots(cp.space, pr.space)
    # the output: a fast emitter of its own (it caches the flow's frame template)
    o = _clone_slots(cp.output, p.out)
    c.out = o
    o.tcb = tcb
    o.receiver = r
    if emitter is None:
        make = getattr(host, "tcp_emitter", None)
        emitter = make() if make is not None else host.tcp_output_segment
    o.fast = emitter
    o.fast_sack = getattr(emitter, "sack", None)
    o.local_addr = laddr
    o.local_port = lport
    o.remote_addr = raddr
    o.remote_port = rport
    # the sender: buffer, RTT estimator, controller and retransmission timer its own
    ps = p.sender
    s = _clone_slots(cp.sender, ps)
    c.sender = s
    s.tcb = tcb
    s.out = o
    s.sndbuf = type(ps.sndbuf)(config.sndbuf)
    rtt = _clone_slots(cp.rtt, ps.rtt)
    s.rtt = rtt
    r.rtt = rtt
    cc = ps.cc
    s.cc = _clone_slots(cp.cc[type(cc)], cc)
    s.rtx_timer = rtx_timer
    s.low_water = c._send_low_water
    s.timer_maker = c
    return c
