# The transmit side of the established fast path: full-sized segments of new
# data from the send ring into TX slots, in C (issue 11).
#
# ``TxPath.burst(sender, cwnd, now)`` is what ``Sender.output`` runs first:
# it sends, one after the other, the segments its loop would send as full
# MSS-sized segments of new data, and stops (returning how many it sent)
# at the first segment that is anything else, leaving it to the Python loop
# (partial segments and Nagle, SWS avoidance, FIN, retransmissions after a
# go-back-N, the persist timer). A segment is taken here while
#
# - SND.NXT == SND.MAX (new data), at least SMSS bytes are unsent and
#   min(SND.WND, cwnd) - (SND.NXT - SND.UNA) >= SMSS (``cwnd`` as the
#   sender's loop sees it: ``recovery.window(cc.window)``);
# - no FIN is queued right behind it, no tail loss probe wants PSH
#   (``psh_next``), no D-SACK is owed (``Receiver.dsack``), the layer's
#   memory budget is not under pressure (the window is then trimmed);
# - the connection's fast emitter is a ``FlowEmitter`` (_fp_tmpl.pxi).
#
# Per segment it does what ``Sender.send_data`` -> ``Output.emit`` ->
# ``Receiver.select_window``/``ack_sent`` and ``recovery.on_send`` do, in
# the same order, on the same objects (the TCB through ``TcbLayout``, the
# Receiver's and DelayedAck's slots through ``SlotLayout``s; the sender's
# and RACK's fields by name): the window field and RCV.WND/RCV.ADV, the
# timestamps (RFC 7323 3.2), the frame from the flow's template with the
# payload copied straight from the ring (``TcpTemplate.emit_ptr``; the
# template rebuilt or the general builder used exactly when ``Output.emit``
# would), the ACK owed cleared (``ack_sent``), RACK's per-segment transmit
# record appended (RFC 8985 6.1: ``[start, end, xmit_ts, 0]``; other
# recoveries are told through their ``on_send``), the RTT timing of
# RFC 6298 without timestamps (Karn: new data only), SND.NXT and SND.MAX.
# The retransmission timer is armed once, after the burst, when it was not
# running (RFC 6298 5.1): ``send_data`` arms it at the first segment and
# nothing in between reads it.
#
# Python this file relies on by name: ``Sender`` (tcb, out, sndbuf, recovery,
# psh_next, rtt_seq, rtt_time, rtx_timer, rtx_kind, rtt.rto), ``Output``
# (fast, write, local/remote addr and port, segs_out, stats),
# ``Receiver.dsack``, ``RackRecovery`` (segs, una, una_seq, in_recovery,
# on_send) and ``Timer.arm``.

from cpython.list cimport PyList_GET_ITEM
from cpython.long cimport PyLong_AsLong

cdef object _ZERO = 0


cdef int64_t _select_window(object tcb, Py_ssize_t *off, object receiver, Py_ssize_t *ro) except -1:
    """``Receiver.select_window`` over ``offerable`` outside memory pressure: the window field to send;
    RCV.WND and the advertised right edge (RCV.ADV) updated."""
    cdef int64_t free, room, cur, win, field, actual, cap, rcv_nxt
    cdef int shift
    cdef uint32_t edge, adv
    rcvbuf = _fget(receiver, ro[R_RCVBUF])
    layer = _fget(receiver, ro[R_BUDGET])
    cap = PyLong_AsLongLong(rcvbuf.capacity)
    free = cap - (<ChunkQueue>rcvbuf._chunks).nbytes - PyLong_AsLongLong(rcvbuf.lent)  # ReceiveBuffer.free
    if free < 0:
        free = 0
    if layer is not None:
        room = _mem_room(layer)
        if room < free:
            free = room if room > 0 else 0
    rcv_nxt = _iget(tcb, off[T_RCV_NXT])
    adv = <uint32_t>_iget(tcb, off[T_RCV_ADV])
    cur = <int32_t>(adv - <uint32_t>rcv_nxt)
    if cur < 0:
        cur = 0
    # receiver SWS avoidance (RFC 9293 3.8.6.2.2): move the right edge only by a useful amount
    win = cur if free - cur < min(cap // 2, _iget(tcb, off[T_MSS_BASE])) else free
    shift = <int>_iget(tcb, off[T_RCV_WSCALE])
    field = (win + (<int64_t>1 << shift) - 1) >> shift  # round up: never shrink (RFC 7323 2.4)
    if field > 0xFFFF:
        field = 0xFFFF
    actual = field << shift
    if actual != _iget(tcb, off[T_RCV_WND]):
        _fset(tcb, off[T_RCV_WND], PyLong_FromLongLong(actual))
    edge = <uint32_t>(<uint32_t>rcv_nxt + <uint32_t>actual)
    if _seq_lt(adv, edge):
        _fset(tcb, off[T_RCV_ADV], PyLong_FromUnsignedLong(edge))
    return field


cdef int _ack_sent(object receiver, Py_ssize_t *ro, Py_ssize_t *do, object now, bint data) except -1:
    """``Receiver.ack_sent(now, data)`` with ``DelayedAck.data_sent`` and ``ack_sent`` (``Receiver.dsack``
    is the caller's: None already)."""
    cdef int64_t quick
    delack = _fget(receiver, ro[R_DELACK])
    if data:
        last = _fget(delack, do[D_LRCVTIME])  # data_sent: a reply within ato makes the flow interactive
        if last is not None and PyFloat_AsDouble(now) - PyFloat_AsDouble(last) < PyFloat_AsDouble(
                _fget(delack, do[D_ATO])):
            _fset(delack, do[D_PINGPONG], True)
    _fset(delack, do[D_PUSHED], False)
    if _bget(receiver, ro[R_UNACKED]):
        quick = _iget(delack, do[D_QUICK])
        if quick:
            _fset(delack, do[D_QUICK], PyLong_FromLongLong(quick - 1))
            if quick == 1:
                _fset(delack, do[D_ATO], _fget(delack, do[D_ATO_MIN]))
        _fset(receiver, ro[R_UNACKED], _ZERO)
    _fset(receiver, ro[R_ACK_NOW], False)
    _fset(receiver, ro[R_ACK_ROUND], False)
    _fset(receiver, ro[R_WND_UPDATE], False)
    _fset(receiver, ro[R_DELACK_DUE], None)  # the timer stays (lazy: Receiver.delack_fired)
    return 0


cdef class TxPath:
    """Full-sized segments of new data from the send ring, in C (see the top of the file)."""

    cdef readonly TcbLayout layout
    cdef readonly SlotLayout receiver_layout    # ``Receiver`` (RECEIVER_FIELDS)
    cdef readonly SlotLayout delack_layout      # ``DelayedAck`` (DELACK_FIELDS)
    cdef readonly type rack_cls                 # ``RackRecovery``: its transmit records are appended here
    cdef readonly unsigned long segments        # segments sent here (for tests and tools)

    def __cinit__(self, TcbLayout layout, SlotLayout receiver_layout, SlotLayout delack_layout, type rack_cls):
        if receiver_layout.fields != RECEIVER_FIELDS or delack_layout.fields != DELACK_FIELDS:
            raise ValueError("layouts of RECEIVER_FIELDS and DELACK_FIELDS expected")
        self.layout = layout
        self.receiver_layout = receiver_layout
        self.delack_layout = delack_layout
        self.rack_cls = rack_cls

    def burst(self, sender, cwnd, now):
        """Send the full-sized segments of new data ``Sender.output``'s loop would send first; their number."""
        return self._burst(sender, PyLong_AsLongLong(cwnd), now)

    cdef Py_ssize_t _burst(self, sender, int64_t cwnd, now) except -1:
        cdef Py_ssize_t *off = self.layout._off
        cdef Py_ssize_t *ro = self.receiver_layout._off
        cdef Py_ssize_t *do = self.delack_layout._off
        cdef int64_t mss, buffered, wnd, limit, pos, top = 0, una_pos = 0, start
        cdef uint32_t una, nxt, end, tsv = 0, tsecr = 0
        cdef Py_ssize_t sent = 0, ring_off, first
        cdef SendRing ring
        cdef FlowEmitter fe
        cdef TcpTemplate t
        cdef bint ts_ok, rack = False, time_it
        cdef int flags, ok
        cdef double when
        cdef uint16_t sport, dport
        tcb = sender.tcb
        self.layout._check(tcb)
        out = sender.out
        receiver = out.receiver
        fast = out.fast
        sndbuf = sender.sndbuf
        if (type(fast) is not FlowEmitter or type(sndbuf) is not SendRing or sender.psh_next
                or type(receiver) is not self.receiver_layout.cls
                or type(_fget(receiver, ro[R_DELACK])) is not self.delack_layout.cls or receiver.dsack is not None):
            return 0
        layer = _fget(receiver, ro[R_BUDGET])
        if layer is not None and layer.under_pressure:
            return 0
        fe = <FlowEmitter>fast
        ring = <SendRing>sndbuf
        mss = PyLong_AsLongLong(tcb.snd_mss)
        if mss <= 0:
            return 0
        una = <uint32_t>_iget(tcb, off[T_SND_UNA])
        nxt = <uint32_t>_iget(tcb, off[T_SND_NXT])
        if nxt != <uint32_t>_iget(tcb, off[T_SND_MAX]):
            return 0  # a go-back-N retransmission first: the Python loop
        buffered = ring._len
        wnd = _iget(tcb, off[T_SND_WND])
        limit = wnd if wnd < cwnd else cwnd
        if buffered < limit:
            limit = buffered  # the end of the data
        if _bget(tcb, off[T_FIN_QUEUED]):
            limit -= 1  # the last segment carries the FIN: the Python loop
        if <int64_t>(nxt - una) + mss > limit:
            return 0
        recovery = sender.recovery
        if type(recovery) is self.rack_cls:
            rack = not recovery.in_recovery and recovery.una_seq == _fget(tcb, off[T_SND_UNA])
        if rack:
            segs = recovery.segs
            una_pos = PyLong_AsLongLong(recovery.una)
            top = PyLong_AsLongLong((<object>PyList_GET_ITEM(segs, len(segs) - 1))[1]) if len(segs) else una_pos
        ts_ok = _bget(tcb, off[T_TS_OK])
        when = PyFloat_AsDouble(now)
        if ts_ok:
            tsv = <uint32_t>(<int64_t>(when * 1000) + _iget(tcb, off[T_TS_OFFSET]))  # ts_clock
        time_it = not ts_ok and sender.rtt_seq is None
        sport = <uint16_t>PyLong_AsLong(out.local_port)
        dport = <uint16_t>PyLong_AsLong(out.remote_port)
        counters = out.stats.counters
        while <int64_t>(nxt - una) + mss <= limit:
            ring_off = <Py_ssize_t>(nxt - una)
            flags = TH_ACK | TH_PSH if ring_off + mss == buffered else TH_ACK
            # Output.emit
            window = _select_window(tcb, off, receiver, ro)
            if ts_ok:
                tsecr = <uint32_t>_iget(tcb, off[T_TS_RECENT])
            end = nxt + <uint32_t>mss
            ok = 0
            t = fe.template
            if t is not None and t.fresh(when):
                start = (ring._head + ring_off) % ring._size
                if start + mss <= ring._size:  # contiguous in the ring: copied straight into the slot
                    ok = t.emit_ptr(sport, dport, nxt, <uint32_t>_iget(tcb, off[T_RCV_NXT]), flags, <uint16_t>window,
                                    ts_ok, tsv, tsecr, <const uint8_t *>ring._base + start, mss)
                else:
                    ok = t.emit(sport, dport, nxt, <uint32_t>_iget(tcb, off[T_RCV_NXT]), flags, <uint16_t>window,
                                ts_ok, tsv, tsecr, ring.peek(ring_off, mss))
                if not ok:
                    ok = -1  # declined (the MTU, a full ring): the general builder, as Output.emit
            if ok != 1:
                seq_o = PyLong_FromUnsignedLong(nxt)
                ack_o = _fget(tcb, off[T_RCV_NXT])
                ts = (PyLong_FromUnsignedLong(tsv), _fget(tcb, off[T_TS_RECENT])) if ts_ok else None
                payload = ring.peek(ring_off, mss)
                if ok == -1 or not fe.send(out.local_addr, out.remote_addr, out.local_port, out.remote_port, seq_o,
                                           ack_o, flags, window, ts, payload, now):
                    out.write(seq_o, ack_o, flags, window, ts, (), now, payload)
            out.segs_out += 1
            counters["tcp.out_segs"] += 1
            _fset(tcb, off[T_LAST_ACK_SENT], _fget(tcb, off[T_RCV_NXT]))
            _ack_sent(receiver, ro, do, now, True)
            # recovery.on_send: RACK's transmit record (RFC 8985 6.1), appended past the highest one
            if rack:
                pos = una_pos + <int32_t>(nxt - una)
                if pos < top:
                    recovery.on_send(PyLong_FromUnsignedLong(nxt), mss, now)
                    top = PyLong_AsLongLong((<object>PyList_GET_ITEM(segs, len(segs) - 1))[1])
                else:
                    segs.append([pos, pos + mss, now, _ZERO])
                    top = pos + mss
            else:
                recovery.on_send(PyLong_FromUnsignedLong(nxt), mss, now)
            end_o = PyLong_FromUnsignedLong(end)
            if time_it:  # RFC 6298 without timestamps: time this segment (Karn: new data only)
                sender.rtt_seq = end_o
                sender.rtt_time = now
                time_it = False
            _fset(tcb, off[T_SND_NXT], end_o)
            _fset(tcb, off[T_SND_MAX], end_o)
            nxt = end
            sent += 1
        if sent:
            self.segments += sent
            timer = sender.rtx_timer
            if timer.deadline is None:  # RFC 6298 5.1
                sender.rtx_kind = _ZERO  # rack.RTO
                timer.arm(now + sender.rtt.rto)
        return sent
