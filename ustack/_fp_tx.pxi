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
#   memory budget is not under pressure (the window is then trimmed).
#
# With a ``FlowEmitter`` as the connection's fast emitter (_fp_tmpl.pxi)
# the frame is written here; with another, that emitter is called as
# ``Output.emit`` calls it. Per segment it does what ``Sender.send_data`` -> ``Output.emit`` ->
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
# ``TxPath.on_ack`` is ``Sender.on_ack`` for a pure ACK of new data that
# header prediction took (_fp_tcp.pxi): SND.UNA advanced and the send ring
# released, the RTT sampled from TSecr (RFC 7323 4.1) or from the timed
# segment (RFC 6298, Karn) by the estimator of RFC 6298 2.2-2.3 on the
# ``RttEstimator``'s own slots, the congestion window grown by the active
# algorithm on its own slots (``NewReno``: RFC 5681 slow start with ABC's
# limit of SMSS per ACK, RFC 3465, and congestion avoidance; ``Cubic``:
# RFC 9438 4.2-4.5 and 4.10) when the recovery's ``on_ack`` says no
# recovery is running, the retransmission timer (RFC 6298 5.2/5.3), the
# window update. Loss recovery keeps its own work: its ``on_ack``,
# ``after_ack`` and ``arm_timer`` are called as ``Sender.on_ack`` calls them,
# except RACK-TLP's common case (``_rack_plain``: no recovery, nothing SACKed
# or lost, no probe out), transcribed here on ``RackRecovery``'s slots
# (RACK_FIELDS: the record slide and RACK.rtt of RFC 8985 6.2, the PTO of
# 7.2); a change to those methods needs the same here (the differential
# test's ``test_rack_ack_work_in_c_agrees_with_python`` compares every field).
# Timers are re-armed through ``_arm``: ``Timer.arm``'s lazy case (later than
# the heap entry) without a Python call.
# A window that opens from zero (the persist timer's) and an unknown
# algorithm go the Python way; a controller that paces (BBR: the sender has
# a rate sampler, ``rs``) has its ACK's work done here and its model updated
# by ``Sender.sample_ack`` (Python) before the recovery's ``after_ack``, as
# ``Sender.on_ack`` orders them; its transmissions are ``Sender.output``'s
# (``output`` here declines them: pacing). ``cc_on_ack`` and ``rtt_sample``
# expose the two transcriptions to the tests.
#
# Python this file relies on by name: ``Sender`` (tcb, out, sndbuf, recovery,
# psh_next, rtt_seq, rtt_time, rtx_timer, rtx_kind, rtt.rto), ``Output``
# (fast, write, local/remote addr and port, segs_out, stats),
# ``Receiver.dsack``, ``RackRecovery`` (segs, una, una_seq, in_recovery,
# on_send) and ``Timer.arm``.

from cpython.list cimport PyList_GET_ITEM
from cpython.long cimport PyLong_AsLong
from cpython.object cimport PyObject_RichCompareBool, Py_EQ
import sys
from libc.math cimport fabs, pow, rint

# Cubic's constants (RFC 9438 4.1, 4.3), the values of congestion.Cubic.C / ALPHA
cdef double _CUBIC_C = 0.4
cdef double _CUBIC_ALPHA = 3 * (1 - 0.7) / (1 + 0.7)

cdef object _ZERO = 0


cdef int64_t _select_window(object tcb, Py_ssize_t *off, object receiver, Py_ssize_t *ro) except -1:
    """``Receiver.select_window`` over ``offerable`` outside memory pressure: the window field to send;
    RCV.WND and the advertised right edge (RCV.ADV) updated."""
    cdef int64_t free, room, cur, win, field, actual, cap, rcv_nxt
    cdef int shift
    cdef uint32_t edge, adv
    rcvbuf = _fget(receiver, ro[R_RCVBUF])
    layer = _fget(receiver, ro[R_BUDGET])
    cap = _as_i64(rcvbuf.capacity)
    free = cap - (<ChunkQueue>rcvbuf._chunks).nbytes - _as_i64(rcvbuf.lent)  # ReceiveBuffer.free
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
    if not data:  # a segment without data reported the out-of-order runs (Receiver.ack_sent)
        _fset(receiver, ro[R_SACK_TICK], _fget(receiver, ro[R_RCVBUF]).tick)
    return 0


cdef class TxPath:
    """Full-sized segments of new data from the send ring, in C (see the top of the file)."""

    cdef readonly TcbLayout layout
    cdef readonly SlotLayout receiver_layout    # ``Receiver`` (RECEIVER_FIELDS)
    cdef readonly SlotLayout delack_layout      # ``DelayedAck`` (DELACK_FIELDS)
    cdef readonly type rack_cls                 # ``RackRecovery``: its transmit records are appended here
    cdef readonly SlotLayout rtt_layout         # ``RttEstimator`` (RTT_FIELDS)
    cdef readonly SlotLayout newreno_layout     # ``NewReno`` (NEWRENO_FIELDS)
    cdef readonly SlotLayout cubic_layout       # ``Cubic`` (CUBIC_FIELDS)
    cdef readonly unsigned long segments        # segments sent here (for tests and tools)
    cdef readonly unsigned long acks            # pure ACKs taken here (for tests and tools)
    cdef readonly unsigned long outputs         # Sender.output runs done here whole (for tests and tools)
    cdef readonly SlotLayout rack_layout        # ``RackRecovery`` (RACK_FIELDS), None when its slots differ
    cdef readonly SlotLayout timer_layout       # ``Timer`` (TIMER_FIELDS), made from the first timer armed here
    cdef double wc_del_ack, pto_min             # rack.WC_DEL_ACK, rack.PTO_MIN (RFC 8985 7.2)
    cdef readonly unsigned long rack_acks       # ACKs whose RACK-TLP work ran here (for tests and tools)
    cdef readonly SlotLayout txs_layout         # ``Sender`` (TXS_FIELDS), made from the first sender seen
    cdef type _sender_cls

    def __cinit__(self, TcbLayout layout, SlotLayout receiver_layout, SlotLayout delack_layout, type rack_cls,
                  SlotLayout rtt_layout, SlotLayout newreno_layout, SlotLayout cubic_layout):
        if receiver_layout.fields != RECEIVER_FIELDS or delack_layout.fields != DELACK_FIELDS:
            raise ValueError("layouts of RECEIVER_FIELDS and DELACK_FIELDS expected")
        if (rtt_layout.fields != RTT_FIELDS or newreno_layout.fields != NEWRENO_FIELDS
                or cubic_layout.fields != CUBIC_FIELDS):
            raise ValueError("layouts of RTT_FIELDS, NEWRENO_FIELDS and CUBIC_FIELDS expected")
        self.layout = layout
        self.receiver_layout = receiver_layout
        self.delack_layout = delack_layout
        self.rack_cls = rack_cls
        self.rtt_layout = rtt_layout
        self.newreno_layout = newreno_layout
        self.cubic_layout = cubic_layout
        # RACK-TLP's common case in C (no recovery, nothing SACKed or lost, no probe out): its slots and the
        # constants of its module; a RackRecovery without them keeps its Python methods
        mod = sys.modules.get(rack_cls.__module__)
        try:
            if (mod.RTO, mod.REO, mod.PTO) != (0, 1, 2):
                raise TypeError("timer kinds")
            self.wc_del_ack = mod.WC_DEL_ACK
            self.pto_min = mod.PTO_MIN
            self.rack_layout = SlotLayout(rack_cls, RACK_FIELDS)
        except (AttributeError, TypeError):
            self.rack_layout = None

    def cc_on_ack(self, cc, acked, rtt, now):
        """``cc.on_ack(acked, rtt, now)`` in C (NewReno or Cubic); False, untouched, for another algorithm."""
        cdef int kind = self._cc_kind(cc)
        if kind:
            _cc_on_ack(cc, kind, (self.newreno_layout if kind == 1 else self.cubic_layout)._off, acked, rtt, now)
        return kind != 0

    def rtt_sample(self, rtt, double r):
        """``rtt.sample(r)`` in C (an ``RttEstimator``)."""
        if type(rtt) is not self.rtt_layout.cls:
            raise TypeError("not an RttEstimator")
        _rtt_sample(rtt, self.rtt_layout._off, r)

    cdef inline int _cc_kind(self, cc) noexcept:
        if type(cc) is self.newreno_layout.cls:
            return 1
        if type(cc) is self.cubic_layout.cls:
            return 2
        return 0

    cdef int on_ack(self, sender, tcb, Packet p, now) except -1:
        """``Sender.on_ack(seg, 0, now)`` for a pure ACK with SND.UNA < SEG.ACK <= SND.MAX, ESTABLISHED, no
        FIN queued, the timestamps option alone when negotiated (header prediction's conditions)."""
        cdef Py_ssize_t *off = self.layout._off
        cdef Py_ssize_t *eo = self.rtt_layout._off
        cdef uint32_t ack = p.ack, una, seq, wl1, rt
        cdef int64_t advanced, before, acked, seg_wnd, old_wnd, send_low
        cdef bint ts_ok, sampled = False, paced
        cdef int kind
        cdef Py_ssize_t *so
        if type(sender) is not self._sender_cls and not self._learn_sender(sender):
            sender.on_ack(p, 0, now)  # a sender without the slots TXS_FIELDS names: the Python way
            return 0
        so = self.txs_layout._off
        sndbuf = _fget(sender, so[X_SNDBUF])
        rtt = _fget(sender, so[X_RTT])
        cc = _fget(sender, so[X_CC])
        kind = self._cc_kind(cc)
        # a controller that paces (BBR): the ACK's work here, its model in Python (``Sender.sample_ack``)
        paced = kind == 0 and _fget(sender, so[X_RS]) is not None
        old_wnd = _iget(tcb, off[T_SND_WND])
        if (type(sndbuf) is not SendRing or type(rtt) is not self.rtt_layout.cls or (kind == 0 and not paced)
                or old_wnd == 0 or _fget(sender, so[X_RTO_TSVAL]) is not None):
            # another algorithm, a window opening from zero, or echoes from before a timeout still to be
            # told apart (Sender.sample_tsecr's rto_tsval): the Python way
            sender.on_ack(p, 0, now)
            return 0
        self.acks += 1
        ts_ok = _bget(tcb, off[T_TS_OK])
        _fset(sender, so[X_ACK_TSECR], PyLong_FromUnsignedLong(p._tsecr) if ts_ok else None)
        una = <uint32_t>_iget(tcb, off[T_SND_UNA])
        advanced = <int32_t>(ack - una)
        seg_wnd = (<int64_t>p.window) << _iget(tcb, off[T_SND_WSCALE])
        # _advance
        before = (<SendRing>sndbuf)._len
        acked = advanced if advanced <= before else before
        if acked:
            (<SendRing>sndbuf).acknowledge(acked)
        ack_o = PyLong_FromUnsignedLong(ack)
        _fset(tcb, off[T_SND_UNA], ack_o)
        if _seq_lt(<uint32_t>_iget(tcb, off[T_SND_NXT]), ack):
            _fset(tcb, off[T_SND_NXT], ack_o)
        if _seq_lt(<uint32_t>_as_i64(tcb.snd_sml), ack):
            tcb.snd_sml = ack_o  # kept within reach of SND.UNA
        _fset(sender, so[X_BYTES_ACKED], PyLong_FromLongLong(_iget(sender, so[X_BYTES_ACKED]) + acked))
        _fset(sender, so[X_RTX_COUNT], _ZERO)
        # RTT: TSecr (RFC 7323 4.1: sample_tsecr / tsecr_rtt), else the timed segment (RFC 6298, Karn)
        if ts_ok and p._tsecr:
            sampled = True
            rt = <uint32_t>(<int64_t>(PyFloat_AsDouble(now) * 1000) + _iget(tcb, off[T_TS_OFFSET])) - p._tsecr
            if rt < 0x7FFFFFFF:
                _rtt_sample(rtt, eo, rt / 1000.0)
        if not sampled:
            rtt_seq = _fget(sender, so[X_RTT_SEQ])
            if rtt_seq is not None and not _seq_lt(ack, <uint32_t>_as_i64(rtt_seq)):
                _rtt_sample(rtt, eo, PyFloat_AsDouble(now) - PyFloat_AsDouble(_fget(sender, so[X_RTT_TIME])))
                _fset(sender, so[X_RTT_SEQ], None)
        recovery = _fget(sender, so[X_RECOVERY])
        snd_max_o = _fget(tcb, off[T_SND_MAX])
        if self._rack_plain(recovery) and self._rack_on_ack(recovery, ack, ack_o, advanced, now):
            pass  # RackRecovery.on_ack outside recovery: False (the controller grows the window)
        elif recovery.on_ack(ack_o, advanced, acked, <int32_t>(<uint32_t>_as_i64(snd_max_o) - ack), now):
            kind = 0
        if kind:
            _cc_on_ack(cc, kind, (self.newreno_layout if kind == 1 else self.cubic_layout)._off, acked,
                       _fget(rtt, eo[E_SRTT]), now)
        _fset(sender, so[X_RTX_KIND], _ZERO)  # rack.RTO
        timer = _fget(sender, so[X_RTX_TIMER])
        if <uint32_t>_as_i64(snd_max_o) == ack:
            timer.cancel()  # RFC 6298 5.2
        else:
            self._arm(timer, PyFloat_AsDouble(now) + PyFloat_AsDouble(_fget(rtt, eo[E_RTO])))  # RFC 6298 5.3
        send_low = _iget(sender, so[X_SEND_LOW])
        if before > send_low >= (<SendRing>sndbuf)._len:
            sender.low_water()
        # the window update, guarded by SND.WL1/SND.WL2 (the window was open: no persist timer to stop)
        seq = p.seq
        wl1 = <uint32_t>_iget(tcb, off[T_SND_WL1])
        if _seq_lt(wl1, seq) or (wl1 == seq and _seq_le(<uint32_t>_iget(tcb, off[T_SND_WL2]), ack)):
            if seg_wnd != old_wnd:
                _fset(tcb, off[T_SND_WND], PyLong_FromLongLong(seg_wnd))
            _fset(tcb, off[T_SND_WL1], PyLong_FromUnsignedLong(seq))
            _fset(tcb, off[T_SND_WL2], ack_o)
            if seg_wnd > _iget(tcb, off[T_MAX_SND_WND]):
                _fset(tcb, off[T_MAX_SND_WND], PyLong_FromLongLong(seg_wnd))
        # in a sending state (ESTABLISHED, unless the low-water callback closed): the recovery's own work
        state = _iget(tcb, off[T_STATE])
        if state == TCPS_ESTABLISHED or state == 5 or state == 7 or state == 8 or state == 9:  # tcb.SENDING
            if paced:
                sender.sample_ack(ack_o, (), now)
            if not self.after_ack(sender, tcb, recovery, now, True):
                recovery.after_ack(ack_o, (), now)
                recovery.arm_timer(now)
        return 0

    cdef bint _learn_sender(self, sender) except -1:
        """The ``Sender`` slots ``on_ack`` reads and writes (TXS_FIELDS), from ``sender``'s class; False when
        it has not got them."""
        try:
            self.txs_layout = SlotLayout(type(sender), TXS_FIELDS)
        except TypeError:
            return False
        self._sender_cls = type(sender)
        return True

    cdef Py_ssize_t *_sender_off(self, sender) except? NULL:
        """The TXS_FIELDS slot offsets for ``sender`` (learnt from its class), or NULL when it has not got them."""
        if type(sender) is not self._sender_cls and not self._learn_sender(sender):
            return NULL
        return self.txs_layout._off

    cdef object _deadline(self, timer):
        """``timer.deadline``, through its slot when it is of the class ``timer_layout`` was made from."""
        tl = self.timer_layout
        if tl is not None and type(timer) is (<SlotLayout>tl).cls:
            return _fget(timer, (<SlotLayout>tl)._off[M_DEADLINE])
        return timer.deadline

    def burst(self, sender, cwnd, now):
        """Send the full-sized segments of new data ``Sender.output``'s loop would send first; their number."""
        cdef Py_ssize_t n = self._burst(sender, _as_i64(cwnd), now)
        return n if n > 0 else 0

    def output_whole(self, sender, now):
        """``Sender.output(now)``'s first step: True when the run came down to what ``output`` (below) does
        whole in C; False, nothing changed, when the Python loop must run."""
        tcb = sender.tcb
        self.layout._check(tcb)
        return self.output(sender, tcb, now) == 1

    cdef int output(self, sender, tcb, now) except -1:
        """``Sender.output(now)`` when it comes down to the burst alone: 1 when done here, 0 (nothing changed)
        when the caller must run it. Its loop would then send the full-sized segments of new data (the
        burst) and stop at a segment it holds back or has no room for: none left, or a short one the
        window cuts that sender SWS avoidance holds (RFC 9293 3.8.6.2.1); its timers would need no
        more than the burst's RTO arm and the recovery's ``arm_timer`` for new data (RFC 8985 7.2).
        A controller that paces (BBR: ``sender.rs`` set) has the loop's limit lowered to the pacer's
        allowance, as ``Sender.output`` lowers it, and its burst told to ``Sender.paced_sent``."""
        cdef Py_ssize_t *off = self.layout._off
        cdef int64_t mss, buffered, wnd, lim, o, n, avail, usable, cwnd, plim = 0, lim_w
        cdef int kind
        cdef uint32_t una, nxt
        cdef bint paced = False, tail
        cdef Py_ssize_t *so = self._sender_off(sender)
        if so == NULL:
            return 0  # a sender without the slots TXS_FIELDS names: the Python way
        cc = _fget(sender, so[X_CC])
        kind = self._cc_kind(cc)
        sndbuf = _fget(sender, so[X_SNDBUF])
        if kind == 0 and _fget(sender, so[X_RS]) is not None:
            paced = True
        if ((kind == 0 and not paced) or type(sndbuf) is not SendRing or _iget(tcb, off[T_STATE]) != TCPS_ESTABLISHED
                or _bget(tcb, off[T_FIN_QUEUED]) or _bget(sender, so[X_FORCE]) or _bget(sender, so[X_PUSH])
                or _bget(sender, so[X_CORK]) or self._deadline(_fget(sender, so[X_CORK_TIMER])) is not None):
            return 0
        wnd = _iget(tcb, off[T_SND_WND])
        una = <uint32_t>_iget(tcb, off[T_SND_UNA])
        nxt = <uint32_t>_iget(tcb, off[T_SND_NXT])
        if wnd == 0 or nxt != <uint32_t>_iget(tcb, off[T_SND_MAX]):
            return 0
        recovery = _fget(sender, so[X_RECOVERY])
        if paced:
            cwnd_o = cc.cwnd
        else:
            cwnd_o = _fget(cc, (self.newreno_layout if kind == 1 else self.cubic_layout)._off[C_CWND])
        if not (self._rack_plain(recovery) and _iget(recovery, self.rack_layout._off[K_DUPACKS]) == 0):
            cwnd_o = recovery.window(cwnd_o)  # (RACK outside recovery without duplicate ACKs: cwnd itself)
        if cwnd_o is None:
            return 0
        mss = _as_i64(tcb.snd_mss)
        if mss <= 0:
            return 0
        # where the loop would stop: past the full segments, the next one held or nothing to send
        buffered = (<SendRing>sndbuf)._len
        cwnd = _as_i64(cwnd_o)
        lim = cwnd
        if wnd < lim:
            lim = wnd
        lim_w = lim
        o = <int64_t>(nxt - una)
        if o > buffered:
            return 0
        if paced:  # the pacer's allowance (whole segments; refilled to ``now``, so asking again is the same)
            plim = o + _as_i64(sender.pacer.allowance(cc.pacing_rate, cc.quantum, mss, now))
            if plim < lim:
                lim = plim
        if o + mss <= lim and o + mss <= buffered:
            o += ((min(lim, buffered) - o) // mss) * mss
        avail = buffered - o
        usable = lim - o
        n = avail if avail < mss else mss
        if n > usable:
            n = usable if usable > 0 else 0
        tail = False
        if n:
            if n == avail:
                # a partial segment: held while an earlier short one is unacknowledged (Nagle, Minshall's
                # variant: SND.UNA < snd_sml; the loop's break), as if nothing were left to send; else it
                # goes, last, with PSH (the burst's tail)
                if _bget(sender, so[X_NODELAY]) or not _seq_lt(una, <uint32_t>_as_i64(tcb.snd_sml)):
                    if paced:
                        return 0  # (a pacing controller's rate sampler is told per send_data: the Python loop)
                    tail = True
            elif n >= _iget(tcb, off[T_MAX_SND_WND]) // 2:
                return 0  # one SWS avoidance lets go: the Python loop
        if o == <int64_t>(nxt - una) and not tail:  # nothing to send
            if paced and (avail <= 0 or (plim < lim_w and self._pace_rearm(sender, cc, now))):
                return 0  # the application's limit to note, or the pacing timer to arm: the Python loop
            if (self._deadline(_fget(sender, so[X_RTX_TIMER])) is None
                    and self._deadline(_fget(sender, so[X_PERSIST_TIMER])) is None and (nxt != una or avail)):
                return 0  # a timer to start (the RTO, or the persist timer): the Python loop
            self.outputs += 1
            return 1
        if self._burst(sender, lim if paced else cwnd, now, tail) <= 0:
            return 0  # declined before sending anything
        if paced:
            sender.paced_sent(PyLong_FromUnsignedLong(nxt), plim if plim < cwnd else None, cwnd_o, now)
        if not (self._rack_plain(recovery) and self._rack_arm_timer(sender, tcb, recovery, now)):
            recovery.arm_timer(now)  # new data: RACK-TLP may run the timer as the PTO (RFC 8985 7.2)
        self.outputs += 1
        return 1

    cdef bint _pace_rearm(self, sender, cc, now) except -1:
        """The pacing timer is not armed, or the pacer would wake earlier than it (``Sender._paced_after``)."""
        deadline = sender.pace_timer.deadline
        return deadline is None or sender.pacer.wake_at(cc.pacing_rate, cc.quantum, now) < deadline

    cdef Py_ssize_t _burst(self, sender, int64_t cwnd, now, bint tail=False) except -1:
        # ``tail``: the caller (``output``) found the data's last, short segment free to go (the window and
        # cwnd reach the end of the data, neither Nagle, cork nor a FIN holds it): it leaves last, with PSH,
        # as ``Sender.send_data`` sends it (and its end becomes SND.SML, Minshall's last short segment)
        cdef Py_ssize_t *off = self.layout._off
        cdef Py_ssize_t *ro = self.receiver_layout._off
        cdef Py_ssize_t *do = self.delack_layout._off
        cdef int64_t mss, buffered, wnd, limit, pos, top = 0, una_pos = 0, start, seg
        cdef uint32_t una, nxt, end, tsv = 0, tsecr = 0, rcv_nxt
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
        if (type(sndbuf) is not SendRing or sender.psh_next
                or type(receiver) is not self.receiver_layout.cls
                or type(_fget(receiver, ro[R_DELACK])) is not self.delack_layout.cls or receiver.dsack is not None):
            return -2  # declined
        layer = _fget(receiver, ro[R_BUDGET])
        if layer is not None and layer.under_pressure:
            return -2  # declined
        fe = <FlowEmitter>fast if type(fast) is FlowEmitter else None
        ring = <SendRing>sndbuf
        mss = _as_i64(tcb.snd_mss)
        if mss <= 0:
            return -2  # declined
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
        if limit < buffered:
            tail = False  # the window, cwnd or a FIN stop short of the data's end: no tail here
        if <int64_t>(nxt - una) + mss > limit and not (tail and <int64_t>(nxt - una) < limit):
            return 0
        recovery = sender.recovery
        if type(recovery) is self.rack_cls:
            rack = not recovery.in_recovery and recovery.una_seq == _fget(tcb, off[T_SND_UNA])
        if rack:
            segs = recovery.segs
            una_pos = _as_i64(recovery.una)
            top = _as_i64((<object>PyList_GET_ITEM(segs, len(segs) - 1))[1]) if len(segs) else una_pos
        ts_ok = _bget(tcb, off[T_TS_OK])
        when = PyFloat_AsDouble(now)
        if ts_ok:
            tsv = <uint32_t>(<int64_t>(when * 1000) + _iget(tcb, off[T_TS_OFFSET]))  # ts_clock
        time_it = not ts_ok and sender.rtt_seq is None
        sport = <uint16_t>PyLong_AsLong(out.local_port)
        dport = <uint16_t>PyLong_AsLong(out.remote_port)
        counters = out.stats.counters
        # Per burst, not per segment (issue 10: ~0.3 us a segment): nothing is received while the burst runs,
        # so the window field (``_select_window``: the same inputs give the same field, RCV.WND and RCV.ADV
        # set by the first call), TSecr (TS.Recent), the ACK field (RCV.NXT) and ``Receiver.ack_sent``'s
        # effect (once its flags are cleared a second call changes nothing) are those of the first segment.
        window = _select_window(tcb, off, receiver, ro)
        if ts_ok:
            tsecr = <uint32_t>_iget(tcb, off[T_TS_RECENT])
        rcv_nxt = <uint32_t>_iget(tcb, off[T_RCV_NXT])
        while True:
            ring_off = <Py_ssize_t>(nxt - una)
            if ring_off + mss <= limit:
                seg = mss
            elif tail and ring_off < limit:
                seg = limit - ring_off  # the short last segment (limit is the end of the data here)
            else:
                break
            flags = TH_ACK | TH_PSH if ring_off + seg == buffered else TH_ACK
            # Output.emit
            end = nxt + <uint32_t>seg
            ok = 0
            t = fe.template if fe is not None else None
            if t is not None and t.fresh(when):
                start = (ring._head + ring_off) % ring._size
                if start + seg <= ring._size:  # contiguous in the ring: copied straight into the slot
                    ok = t.emit_ptr(sport, dport, nxt, rcv_nxt, flags, <uint16_t>window,
                                    ts_ok, tsv, tsecr, <const uint8_t *>ring._base + start, seg)
                else:
                    ok = t.emit(sport, dport, nxt, rcv_nxt, flags, <uint16_t>window,
                                ts_ok, tsv, tsecr, ring.peek(ring_off, seg))
                if not ok:
                    ok = -1  # declined (the MTU, a full ring): the general builder, as Output.emit
            if ok != 1:
                seq_o = PyLong_FromUnsignedLong(nxt)
                ack_o = _fget(tcb, off[T_RCV_NXT])
                ts = (PyLong_FromUnsignedLong(tsv), _fget(tcb, off[T_TS_RECENT])) if ts_ok else None
                payload = ring.peek(ring_off, seg)
                if ok == 0:  # the host's emitter: the flow's template rebuilt (FlowEmitter), or its own
                    if fe is not None:
                        ok = fe.send(out.local_addr, out.remote_addr, out.local_port, out.remote_port, seq_o, ack_o,
                                     flags, window, ts, payload, now)
                    else:
                        ok = 1 if fast(out.local_addr, out.remote_addr, out.local_port, out.remote_port, seq_o, ack_o,
                                       flags, window, ts, payload, now) else 0
                if ok != 1:
                    out.write(seq_o, ack_o, flags, window, ts, (), now, payload)
            if sent == 0:
                _fset(tcb, off[T_LAST_ACK_SENT], _fget(tcb, off[T_RCV_NXT]))
                _ack_sent(receiver, ro, do, now, True)
            # recovery.on_send: RACK's transmit record (RFC 8985 6.1), appended past the highest one
            if rack:
                pos = una_pos + <int32_t>(nxt - una)
                if pos < top:
                    recovery.on_send(PyLong_FromUnsignedLong(nxt), seg, now)
                    top = _as_i64((<object>PyList_GET_ITEM(segs, len(segs) - 1))[1])
                else:
                    segs.append([pos, pos + seg, now, _ZERO])
                    top = pos + seg
            else:
                recovery.on_send(PyLong_FromUnsignedLong(nxt), seg, now)
            end_o = PyLong_FromUnsignedLong(end)
            if time_it:  # RFC 6298 without timestamps: time this segment (Karn: new data only)
                sender.rtt_seq = end_o
                sender.rtt_time = now
                time_it = False
            _fset(tcb, off[T_SND_NXT], end_o)
            _fset(tcb, off[T_SND_MAX], end_o)
            nxt = end
            sent += 1
            if seg < mss:
                tcb.snd_sml = end_o  # Minshall: the last short segment sent (Sender.send_data)
                break
        if sent:
            self.segments += sent
            out.segs_out += sent
            counters["tcp.out_segs"] += sent
            timer = sender.rtx_timer
            if timer.deadline is None:  # RFC 6298 5.1
                sender.rtx_kind = _ZERO  # rack.RTO
                self._arm(timer, when + PyFloat_AsDouble(sender.rtt.rto))
        return sent

    # -- RACK-TLP's per-ACK work in its common case, and the timer (appended: issue 11, the sender's ACKs) --

    cdef int _arm(self, timer, double deadline) except -1:
        """``timer.arm(deadline)``; a re-arm later than the timer's heap entry (``Timer.arm``'s lazy case:
        the deadline and the arming order set, nothing pushed) without a Python call."""
        cdef Py_ssize_t *to
        tl = self.timer_layout
        if tl is None or type(timer) is not tl.cls:
            try:
                tl = self.timer_layout = SlotLayout(type(timer), TIMER_FIELDS)
            except TypeError:
                timer.arm(PyFloat_FromDouble(deadline))
                return 0
        to = tl._off
        if _fget(timer, to[M_DEADLINE]) is None or deadline < PyFloat_AsDouble(_fget(timer, to[M_AT])):
            timer.arm(PyFloat_FromDouble(deadline))  # armed from idle, or earlier than its entry: pushed
            return 0
        order = next(_fget(timer, to[M_WHEEL])._seq)
        _fset(timer, to[M_ORDER], order)
        _fset(timer, to[M_DEADLINE], PyFloat_FromDouble(deadline))
        return 0

    cdef bint _rack_plain(self, recovery) except -1:
        """``recovery`` is a ``RackRecovery`` outside fast and timeout recovery, with nothing SACKed or marked
        lost, no tail loss probe outstanding and no F-RTO step: an ACK without SACK blocks then needs of its
        ``on_ack``, ``after_ack`` and ``arm_timer`` only what ``_rack_on_ack``, ``after_ack`` and
        ``_rack_arm_timer`` do."""
        cdef Py_ssize_t *ko
        if self.rack_layout is None or type(recovery) is not self.rack_cls:
            return False
        ko = self.rack_layout._off
        return (not _bget(recovery, ko[K_IN_RECOVERY]) and not _bget(recovery, ko[K_IN_LOSS])
                and _fget(recovery, ko[K_TLP_END]) is None and _iget(recovery, ko[K_FRTO]) == 0
                and _iget(recovery, ko[K_SACKED_BYTES]) == 0 and _iget(recovery, ko[K_LOST_BYTES]) == 0)

    cdef int _rack_on_ack(self, recovery, uint32_t ack, object ack_o, int64_t advanced, now) except -1:
        """``RackRecovery.on_ack`` when ``_rack_plain``: SND.UNA's records dropped (``_slide``), RACK.xmit_ts,
        RACK.end_seq, RACK.rtt, min_RTT and RACK.fack from the latest of them (RFC 8985 6.2 step 1), the undo
        episode closed past ``undo_until``; it returns False. 0, having changed nothing, when a record it
        covers was retransmitted, SACKed or lost, or one below RACK.fack may show reordering: the Python way."""
        cdef Py_ssize_t *ko = self.rack_layout._off
        cdef int64_t una_pos, new, fack, end
        cdef Py_ssize_t k = 0, n
        cdef double x, rtt, xmit
        cdef bint reordering_seen
        segs = _fget(recovery, ko[K_SEGS])
        if type(segs) is not list:
            return 0
        una_pos = _iget(recovery, ko[K_UNA])
        new = una_pos + <int32_t>(ack - <uint32_t>_iget(recovery, ko[K_UNA_SEQ]))
        fack = _iget(recovery, ko[K_FACK])
        reordering_seen = _bget(recovery, ko[K_REORDERING_SEEN])
        n = len(segs)
        plain = None
        while k < n:
            r = <object>PyList_GET_ITEM(segs, k)
            if type(r) is not list or len(r) != 4:
                return 0
            end = _as_i64(<object>PyList_GET_ITEM(r, 1))
            if end > new:
                break
            if PyObject_IsTrue(<object>PyList_GET_ITEM(r, 3)) or (end < fack and not reordering_seen):
                return 0
            plain = r
            k += 1
        # committed: on_ack's own fields, then _slide's
        _fset(recovery, ko[K_DUPACKS], _ZERO)
        _fset(recovery, ko[K_ADVANCED], True)
        _fset(recovery, ko[K_UNA], PyLong_FromLongLong(new))
        _fset(recovery, ko[K_UNA_SEQ], ack_o)
        if plain is not None:  # _rack_update of a segment sent once (flags 0), with end >= RACK.fack
            end_o = <object>PyList_GET_ITEM(plain, 1)
            x_o = <object>PyList_GET_ITEM(plain, 2)
            x = PyFloat_AsDouble(x_o)
            rtt = PyFloat_AsDouble(now) - x
            min_rtt = _fget(recovery, ko[K_MIN_RTT])
            rtt_o = PyFloat_FromDouble(rtt)
            if min_rtt is None or rtt < PyFloat_AsDouble(min_rtt):
                _fset(recovery, ko[K_MIN_RTT], rtt_o)
            _fset(recovery, ko[K_RACK_RTT], rtt_o)
            end = _as_i64(end_o)
            xmit = PyFloat_AsDouble(_fget(recovery, ko[K_RACK_XMIT]))
            if x > xmit or (x == xmit and end > _iget(recovery, ko[K_RACK_END])):
                _fset(recovery, ko[K_RACK_XMIT], x_o)
                _fset(recovery, ko[K_RACK_END], end_o)
            if end > fack:
                _fset(recovery, ko[K_FACK], end_o)
        if k:
            del segs[:k]
        _fset(recovery, ko[K_DELIVERED], PyLong_FromLongLong(advanced))
        until = _fget(recovery, ko[K_UNDO_UNTIL])
        if until is not None and new >= _as_i64(until):
            _fset(recovery, ko[K_UNDO_MARKER], None)
            _fset(recovery, ko[K_UNDO_UNTIL], None)
        self.rack_acks += 1
        return 1

    cdef int after_ack(self, sender, tcb, recovery, now, bint arm) except -1:
        """``recovery.after_ack(ack, (), now)`` for an ACK without SACK blocks, then (with ``arm``) its
        ``arm_timer(now)``, when ``_rack_plain``: 1; else 0, nothing changed (the caller calls them)."""
        cdef Py_ssize_t *ko
        if not self._rack_plain(recovery):
            return 0
        ko = self.rack_layout._off
        _fset(recovery, ko[K_DSACK], None)
        _fset(recovery, ko[K_ADVANCED], False)
        rnd = _fget(recovery, ko[K_DSACK_ROUND])  # _dsack_round, with no D-SACK on this ACK
        if rnd is not None and _iget(recovery, ko[K_UNA]) >= _as_i64(rnd):
            _fset(recovery, ko[K_DSACK_ROUND], None)
        if _iget(tcb, self.layout._off[T_SND_MAX]) == _iget(tcb, self.layout._off[T_SND_UNA]):
            _fset(recovery, ko[K_REO_DEADLINE], None)
        _fset(recovery, ko[K_DELIVERED], _ZERO)
        if arm:
            self._rack_arm_timer(sender, tcb, recovery, now)
        return 1

    cdef int _rack_arm_timer(self, sender, tcb, recovery, now) except -1:
        """``RackRecovery.arm_timer(now)`` when ``_rack_plain``: the reorder timer when one is due, else the
        probe timeout (RFC 8985 7.2: 2 SRTT, plus WCDelAckT for a lone segment in flight, at least PTO_MIN,
        never past the RTO); 1."""
        cdef Py_ssize_t *off = self.layout._off
        cdef Py_ssize_t *ko = self.rack_layout._off
        cdef uint32_t snd_max = <uint32_t>_iget(tcb, off[T_SND_MAX]), una = <uint32_t>_iget(tcb, off[T_SND_UNA])
        cdef double pto, t = PyFloat_AsDouble(now), rto_at, at
        cdef Py_ssize_t *so
        if snd_max == una:
            return 1
        so = self._sender_off(sender)
        if so == NULL:
            recovery.arm_timer(now)  # (a sender without the slots TXS_FIELDS names)
            return 1
        timer = _fget(sender, so[X_RTX_TIMER])
        reo = _fget(recovery, ko[K_REO_DEADLINE])
        if reo is not None:
            self._arm(timer, PyFloat_AsDouble(reo))
            _fset(sender, so[X_RTX_KIND], _ONE)  # rack.REO
            return 1
        rtt = _fget(sender, so[X_RTT])
        if type(rtt) is self.rtt_layout.cls:
            srtt = _fget(rtt, self.rtt_layout._off[E_SRTT])
            rto = _fget(rtt, self.rtt_layout._off[E_RTO])
        else:
            srtt = rtt.srtt
            rto = rtt.rto
        pto = 2 * PyFloat_AsDouble(srtt) if srtt is not None else 1.0
        if <int64_t><int32_t>(snd_max - una) <= _as_i64(tcb.snd_mss):
            pto += self.wc_del_ack
        if self.pto_min > pto:
            pto = self.pto_min
        deadline = self._deadline(timer)
        if PyObject_RichCompareBool(_fget(sender, so[X_RTX_KIND]), _ZERO, Py_EQ) and deadline is not None:
            rto_at = PyFloat_AsDouble(deadline)
        else:
            rto_at = t + PyFloat_AsDouble(rto)
        at = t + pto
        if rto_at < at:
            at = rto_at
        self._arm(timer, at)
        _fset(sender, so[X_RTX_KIND], _TWO)  # rack.PTO
        return 1


# The slots of ``RttEstimator`` and of the congestion controllers the ACK path reads and writes.
RTT_FIELDS = ("srtt", "rttvar", "rto", "min_rto", "max_rto", "granularity", "backoffs", "_base_rto")
cdef enum:
    E_SRTT = 0
    E_RTTVAR = 1
    E_RTO = 2
    E_MIN_RTO = 3
    E_MAX_RTO = 4
    E_GRANULARITY = 5
    E_BACKOFFS = 6
    E_BASE_RTO = 7

NEWRENO_FIELDS = ("mss", "cwnd", "ssthresh", "bytes_acked")
CUBIC_FIELDS = ("mss", "cwnd", "ssthresh", "w_max", "k", "epoch", "w_est")
cdef enum:
    C_MSS = 0
    C_CWND = 1
    C_SSTHRESH = 2
    C_BYTES_ACKED = 3   # NewReno
    C_W_MAX = 3         # Cubic
    C_K = 4
    C_EPOCH = 5
    C_W_EST = 6


cdef inline double _fmin(double a, double b) noexcept:
    return b if b < a else a   # Python's min(a, b): the first unless the second is smaller


cdef inline double _fmax(double a, double b) noexcept:
    return b if b > a else a


cdef int _rtt_sample(object rtt, Py_ssize_t *eo, double r) except -1:
    """``RttEstimator.sample(r)``: RFC 6298 2.2 (first) and 2.3 (rttvar first, with the old srtt)."""
    cdef double srtt, rttvar, base, rto
    if r < 0:
        return 0
    srtt_o = _fget(rtt, eo[E_SRTT])
    if srtt_o is None:
        srtt = r
        rttvar = r / 2
    else:
        srtt = PyFloat_AsDouble(srtt_o)
        rttvar = (1 - 0.25) * PyFloat_AsDouble(_fget(rtt, eo[E_RTTVAR])) + 0.25 * fabs(srtt - r)
        srtt = (1 - 0.125) * srtt + 0.125 * r
    _fset(rtt, eo[E_RTTVAR], PyFloat_FromDouble(rttvar))
    _fset(rtt, eo[E_SRTT], PyFloat_FromDouble(srtt))
    base = srtt + _fmax(PyFloat_AsDouble(_fget(rtt, eo[E_GRANULARITY])), 4 * rttvar)
    _fset(rtt, eo[E_BASE_RTO], PyFloat_FromDouble(base))
    _fset(rtt, eo[E_BACKOFFS], _ZERO)
    # _clamp: min(max_rto, max(min_rto, rto)), the bound itself when it wins (as Python's min/max return it)
    rto_o = PyFloat_FromDouble(base)
    lo = _fget(rtt, eo[E_MIN_RTO])
    if PyFloat_AsDouble(lo) >= base:
        rto_o = lo
    hi = _fget(rtt, eo[E_MAX_RTO])
    if PyFloat_AsDouble(rto_o) >= PyFloat_AsDouble(hi):
        rto_o = hi
    _fset(rtt, eo[E_RTO], rto_o)
    return 0


cdef int _cc_on_ack(object cc, int kind, Py_ssize_t *co, int64_t acked, object rtt_o, object now) except -1:
    """``cc.on_ack(acked, rtt, now)`` for ``NewReno`` (kind 1) and ``Cubic`` (kind 2), on their slots."""
    cdef int64_t mss = _iget(cc, co[C_MSS]), cwnd = _iget(cc, co[C_CWND]), ba, grown, ssthresh
    cdef double cw, w_max, k, t, target, segs, w_est, new, c = _CUBIC_C, rtt
    ssthresh = _iget(cc, co[C_SSTHRESH])
    if cwnd < ssthresh:
        # slow start (congestion.slow_start): every byte acknowledged counts, up to ssthresh; RFC 9438 4.10
        grown = cwnd + acked
        _fset(cc, co[C_CWND], PyLong_FromLongLong(grown if grown < ssthresh else ssthresh))
        return 0
    if kind == 1:
        # congestion avoidance, RFC 5681 3.1: +SMSS once per cwnd of bytes acknowledged
        ba = _iget(cc, co[C_BYTES_ACKED]) + acked
        if ba >= cwnd:
            ba -= cwnd
            _fset(cc, co[C_CWND], PyLong_FromLongLong(cwnd + mss))
        _fset(cc, co[C_BYTES_ACKED], PyLong_FromLongLong(ba))
        return 0
    # CUBIC, RFC 9438: windows in segments, time in seconds (as Cubic.on_ack, step for step)
    cw = <double>cwnd / <double>mss
    epoch = _fget(cc, co[C_EPOCH])
    if epoch is None:  # 4.2: a new congestion avoidance epoch
        epoch = now
        _fset(cc, co[C_EPOCH], now)
        w_max = PyFloat_AsDouble(_fget(cc, co[C_W_MAX]))
        if w_max < cw:
            w_max = cw
            _fset(cc, co[C_W_MAX], PyFloat_FromDouble(cw))
        k = pow((w_max - cw) / c, 1.0 / 3)
        _fset(cc, co[C_K], PyFloat_FromDouble(k))
        w_est = cw
    else:
        w_max = PyFloat_AsDouble(_fget(cc, co[C_W_MAX]))
        k = PyFloat_AsDouble(_fget(cc, co[C_K]))
        w_est = PyFloat_AsDouble(_fget(cc, co[C_W_EST]))
    t = PyFloat_AsDouble(now) - PyFloat_AsDouble(epoch)
    rtt = PyFloat_AsDouble(rtt_o) if rtt_o else 0.0
    target = c * pow(t + rtt - k, 3.0) + w_max
    target = _fmin(_fmax(target, cw), 1.5 * cw)
    segs = <double>acked / <double>mss
    w_est += _CUBIC_ALPHA * segs / cw  # 4.3: the Reno-friendly region
    _fset(cc, co[C_W_EST], PyFloat_FromDouble(w_est))
    if c * pow(t - k, 3.0) + w_max < w_est:
        new = _fmax(cw, w_est)
    else:
        new = cw + (target - cw) / cw * segs  # 4.4 concave / 4.5 convex regions
    grown = <int64_t>rint(new * mss)  # Python's round(): half to even, as rint in the default rounding mode
    if grown > cwnd:
        _fset(cc, co[C_CWND], PyLong_FromLongLong(grown))
    return 0


# ``RackRecovery``'s slots its common case in C reads and writes (TxPath._rack_plain and what follows it).
RACK_FIELDS = ("in_recovery", "in_loss", "tlp_end", "frto", "sacked_bytes", "lost_bytes", "dsack_round", "dsack",
               "una", "una_seq", "undo_until", "undo_marker", "dupacks", "advanced", "delivered", "segs", "fack",
               "reordering_seen", "min_rtt", "rack_rtt", "rack_xmit", "rack_end", "reo_deadline")
cdef enum:
    K_IN_RECOVERY = 0
    K_IN_LOSS = 1
    K_TLP_END = 2
    K_FRTO = 3
    K_SACKED_BYTES = 4
    K_LOST_BYTES = 5
    K_DSACK_ROUND = 6
    K_DSACK = 7
    K_UNA = 8
    K_UNA_SEQ = 9
    K_UNDO_UNTIL = 10
    K_UNDO_MARKER = 11
    K_DUPACKS = 12
    K_ADVANCED = 13
    K_DELIVERED = 14
    K_SEGS = 15
    K_FACK = 16
    K_REORDERING_SEEN = 17
    K_MIN_RTT = 18
    K_RACK_RTT = 19
    K_RACK_XMIT = 20
    K_RACK_END = 21
    K_REO_DEADLINE = 22

# ``ustack.timers.Timer``'s slots for its lazy re-arm (TxPath._arm).
TIMER_FIELDS = ("deadline", "_at", "_order", "_wheel")
cdef enum:
    M_DEADLINE = 0
    M_AT = 1
    M_ORDER = 2
    M_WHEEL = 3

cdef object _ONE = 1
cdef object _TWO = 2


# ``Sender``'s slots ``TxPath.on_ack`` reads and writes (by offset: a Cython attribute read by name is ~140
# instructions; a pure ACK made ~15 of them).
TXS_FIELDS = ("sndbuf", "rtt", "cc", "rto_tsval", "ack_tsecr", "bytes_acked", "rtx_count", "rtt_seq", "rtt_time",
              "recovery", "rtx_kind", "rtx_timer", "send_low", "rs",
              "force", "push", "cork", "cork_timer", "nodelay", "persist_timer")  # (output's: issue 10)
cdef enum:
    X_SNDBUF = 0
    X_RTT = 1
    X_CC = 2
    X_RTO_TSVAL = 3
    X_ACK_TSECR = 4
    X_BYTES_ACKED = 5
    X_RTX_COUNT = 6
    X_RTT_SEQ = 7
    X_RTT_TIME = 8
    X_RECOVERY = 9
    X_RTX_KIND = 10
    X_RTX_TIMER = 11
    X_SEND_LOW = 12
    X_RS = 13
    X_FORCE = 14
    X_PUSH = 15
    X_CORK = 16
    X_CORK_TIMER = 17
    X_NODELAY = 18
    X_PERSIST_TIMER = 19
