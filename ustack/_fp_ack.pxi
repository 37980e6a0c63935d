# The receive side of the established fast path in C: RCV.NXT, the ACK policy
# (delayed ACK, RFC 1122 4.2.3.2 and RFC 5681 4.2, with Linux's heuristics as
# ``ustack.transport.tcp.delack`` describes them) and the pure ACK itself.
#
# One source of truth for the state: these functions read and write the very
# fields the Python parts use (the TCB through ``TcbLayout``; the
# ``Receiver``'s and its ``DelayedAck``'s slots through ``SlotLayout``s), so a segment
# the fast path took and one the Python path took leave the same state
# behind. The rules are the Python ones transcribed, step for step, in the
# same order and with the same float arithmetic (IEEE doubles both sides);
# the differential test (tests/tcp/test_tcp_fastpath_diff.py) holds them to
# the same emitted bytes and the same state after every step. What they
# mirror, by name: ``Receiver.in_order``, ``DelayedAck.data_received``,
# ``grant_quickacks``, ``quickack_mode``, ``push_wants_ack``, ``timeout``;
# ``Receiver.arm_delack``; ``Output.emit`` for a pure ACK (``Output.send_ack``), ``Receiver.select_window``
# and ``offerable`` (outside memory pressure), ``ts_clock``, ``Receiver.ack_sent``
# and ``DelayedAck.ack_sent``.
#
# The ACK leaves through the connection's fast emitter (``Output.fast``: a
# ``FlowEmitter``, _fp_tmpl.pxi, writes the flow's cached template straight
# into a TX slot) or, when that declines, through
# ``Output.write`` (the general builder): the bytes are the same either way.

from cpython.float cimport PyFloat_AsDouble, PyFloat_FromDouble
from cpython.long cimport PyLong_FromLongLong

cdef object _EMPTY = b""


cdef inline double _dget(object o) except? -1.0:
    return PyFloat_AsDouble(o)


cdef int _grant_quickacks(object delack, Py_ssize_t *do, int64_t rcv_wnd, int64_t rcv_mss) except -1:
    """``DelayedAck.grant_quickacks``: rcv_wnd / (2 * rcv_mss) quick ACKs, at least 2, at most max_quickacks."""
    cdef int64_t n = rcv_wnd // (2 * rcv_mss) if rcv_mss > 0 else 0   # rcv_wnd >= 0 (a free count)
    cdef int64_t cap = _iget(delack, do[D_MAX_QUICKACKS])
    if n < 2:
        n = 2
    if n > cap:
        n = cap
    if n > _iget(delack, do[D_QUICK]):
        _fset(delack, do[D_QUICK], PyLong_FromLongLong(n))
    return 0


cdef int _ack_bulk(object receiver, Py_ssize_t *ro, int64_t rcv_mss) except -1:
    """``Receiver.ack_bulk``: the ACK now, or once at the end of the poll round the layer is delivering
    while another full segment would still fit in ``coalesce`` bytes (a GRO aggregate)."""
    cdef int64_t limit = _iget(receiver, ro[R_COALESCE])
    layer = _fget(receiver, ro[R_BUDGET])
    if limit and layer is not None and layer.in_round and _iget(receiver, ro[R_UNACKED]) + rcv_mss <= limit:
        if not _bget(receiver, ro[R_ACK_ROUND]):
            _fset(receiver, ro[R_ACK_ROUND], True)
            layer.ack_at_round_end(receiver._owner)
    else:
        _fset(receiver, ro[R_ACK_NOW], True)
    return 0


cdef int _ack_gap(object receiver, Py_ssize_t *ro) except -1:
    """``Receiver.ack_gap``: the ACK of a filled gap now, or (during a poll round) at the round's end and once
    more then (``gap_round``)."""
    layer = _fget(receiver, ro[R_BUDGET])
    if _bget(receiver, ro[R_COALESCE]) and layer is not None and layer.in_round:
        receiver.gap_round = True
        if not _bget(receiver, ro[R_ACK_ROUND]):
            _fset(receiver, ro[R_ACK_ROUND], True)
            layer.ack_at_round_end(_fget(receiver, ro[R_OWNER]))
    else:
        _fset(receiver, ro[R_ACK_NOW], True)
    return 0


cdef int _in_order(object tcb, Py_ssize_t *off, object receiver, Py_ssize_t *ro, Py_ssize_t *do, object rcvbuf,
                   Py_ssize_t adv, Py_ssize_t dlen, bint had_gap, Py_ssize_t before, object now, bint push) except -1:
    """``Receiver.in_order(adv, dlen, had_gap, before, now, push)`` for a segment of ``dlen`` bytes appended at
    RCV.NXT that made ``adv`` bytes in order (more when it filled a gap: ``had_gap``)."""
    cdef int64_t rcv_mss, free, unacked
    cdef double t = PyFloat_AsDouble(now), m, half, ato, ato_min, rto, cap, srtt
    cdef Py_ssize_t held
    _fset(tcb, off[T_RCV_NXT], PyLong_FromUnsignedLong(<uint32_t>(<uint32_t>_iget(tcb, off[T_RCV_NXT]) + adv)))
    _fset(receiver, ro[R_BYTES_RECEIVED], PyLong_FromLongLong(_iget(receiver, ro[R_BYTES_RECEIVED]) + adv))
    rcv_mss = _iget(tcb, off[T_RCV_MSS])
    if dlen > rcv_mss:
        rcv_mss = min(<int64_t>dlen, _iget(tcb, off[T_MSS_BASE]))
        _fset(tcb, off[T_RCV_MSS], PyLong_FromLongLong(rcv_mss))
    delack = _fget(receiver, ro[R_DELACK])
    rtt = _fget(receiver, ro[R_RTT])
    rto = PyFloat_AsDouble(rtt.rto) if rtt is not None else 1.0
    held = (<ChunkQueue>rcvbuf._chunks).nbytes
    free = _as_i64(rcvbuf.capacity) - held - _as_i64(rcvbuf.lent)  # ReceiveBuffer.free
    if free < 0:
        free = 0
    # DelayedAck.data_received (Linux tcp_event_data_recv)
    last = _fget(delack, do[D_LRCVTIME])
    ato_min_obj = _fget(delack, do[D_ATO_MIN])
    ato_min = PyFloat_AsDouble(ato_min_obj)
    if last is None:
        _grant_quickacks(delack, do, free, rcv_mss)
        _fset(delack, do[D_ATO], ato_min_obj)
    else:
        m = t - PyFloat_AsDouble(last)
        half = ato_min / 2
        ato = PyFloat_AsDouble(_fget(delack, do[D_ATO]))
        if m <= half:
            _fset(delack, do[D_ATO], PyFloat_FromDouble(ato / 2 + half))
        elif m < ato:
            _fset(delack, do[D_ATO], PyFloat_FromDouble(min(ato / 2 + m, rto)))
        elif m > rto:
            _grant_quickacks(delack, do, free, rcv_mss)
    _fset(delack, do[D_LRCVTIME], now)
    unacked = _iget(receiver, ro[R_UNACKED]) + adv
    _fset(receiver, ro[R_UNACKED], PyLong_FromLongLong(unacked))
    if not _bget(delack, do[D_ENABLED]):
        _fset(receiver, ro[R_ACK_NOW], True)
    elif had_gap:
        _ack_gap(receiver, ro)  # this segment filled (part of) a gap
    elif unacked >= 2 * rcv_mss:
        _ack_bulk(receiver, ro, rcv_mss)  # every second full-sized segment (RFC 5681 4.2)
    elif _iget(delack, do[D_QUICK]) > 0 and not _bget(delack, do[D_PINGPONG]):
        _ack_bulk(receiver, ro, rcv_mss)  # quick-ACK mode
    elif push and _bget(delack, do[D_READER_WAITING]) and (not _bget(delack, do[D_PINGPONG])
                                                           or _bget(delack, do[D_PUSHED])):
        _fset(receiver, ro[R_ACK_NOW], True)  # a pushed segment and a reader waiting for it
    else:
        if push:
            _fset(delack, do[D_PUSHED], True)
        if _fget(receiver, ro[R_DELACK_DUE]) is None:
            # DelayedAck.timeout: ato, bounded by ato_max and max(SRTT, ato_min) once above ato_min
            ato = PyFloat_AsDouble(_fget(delack, do[D_ATO]))
            if ato > ato_min:
                cap = PyFloat_AsDouble(_fget(delack, do[D_ATO_MAX]))
                srtt_obj = rtt.srtt if rtt is not None else None
                if srtt_obj:
                    srtt = PyFloat_AsDouble(srtt_obj)
                    cap = min(cap, max(srtt, ato_min))
                ato = min(ato, cap)
            # Receiver.arm_delack: the timer is touched only when it is not armed or armed later (lazy);
            # when it is, Receiver.arm_delack itself (it makes the timer on first use)
            due = PyFloat_FromDouble(t + ato)
            _fset(receiver, ro[R_DELACK_DUE], due)
            deadline = _fget(receiver, ro[R_DELACK_TIMER]).deadline
            if deadline is None or deadline > due:
                receiver.arm_delack(due)
    if _bget(receiver, ro[R_RD_SHUTDOWN]):
        rcvbuf.read(held)
    elif before < _fget(receiver, ro[R_RECV_HIGH]) <= held:
        _fget(receiver, ro[R_HIGH_WATER])()
    return 0


cdef int _send_ack(object conn, object tcb, Py_ssize_t *off, object receiver, Py_ssize_t *ro, Py_ssize_t *do,
                   object now) except -1:
    """``Output.send_ack(now)``: <SEQ=SND.MAX><ACK=RCV.NXT><CTL=ACK>, window and timestamps as ``Output.emit``."""
    cdef int64_t field
    cdef bint sack
    rcvbuf = _fget(receiver, ro[R_RCVBUF])
    layer = _fget(receiver, ro[R_BUDGET])
    if layer is not None and layer.under_pressure:
        conn.out.send_ack(now)  # a trimmed window: the Python way
        return 0
    sack = _bget(tcb, off[T_SACK_OK]) and (rcvbuf.ooo_bytes or receiver.dsack is not None)
    out = conn.out
    field = _select_window(tcb, off, receiver, ro)  # (_fp_tx.pxi)
    if _bget(tcb, off[T_TS_OK]):
        ts = (PyLong_FromUnsignedLong(<uint32_t>(<int64_t>(PyFloat_AsDouble(now) * 1000) + _iget(tcb, off[T_TS_OFFSET]))),
              _fget(tcb, off[T_TS_RECENT]))
    else:
        ts = None
    seq = _fget(tcb, off[T_SND_MAX])
    ack = _fget(tcb, off[T_RCV_NXT])
    fwin = PyLong_FromLongLong(field)
    fast = out.fast
    if sack and _send_sack(out, fast, receiver, seq, ack, fwin, ts, now):
        _fset(tcb, off[T_LAST_ACK_SENT], ack)
        receiver.dsack = None
        _ack_sent(receiver, ro, do, now, False)
        return 0
    if type(fast) is FlowEmitter:  # the flow's cached template, called without a Python frame
        sent = (<FlowEmitter>fast).send(out.local_addr, out.remote_addr, out.local_port, out.remote_port, seq, ack,
                                        TH_ACK, fwin, ts, _EMPTY, now)
    else:
        sent = fast(out.local_addr, out.remote_addr, out.local_port, out.remote_port, seq, ack, TH_ACK, fwin, ts,
                    _EMPTY, now)
    if not sent:
        out.write(seq, ack, TH_ACK, fwin, ts, (), now)
    out.segs_out += 1
    out.stats.counters["tcp.out_segs"] += 1
    _fset(tcb, off[T_LAST_ACK_SENT], ack)
    _ack_sent(receiver, ro, do, now, False)  # Receiver.ack_sent(now, False) (_fp_tx.pxi)
    return 0


cdef bint _send_sack(object out, object fast, object receiver, object seq, object ack, object fwin, object ts,
                     object now) except -1:
    """``Output.emit``'s SACK part for a pure ACK (RFC 2018 4, RFC 2883): first the ACKs for out-of-order runs
    changed since the last ACK beyond what one reports (``Receiver.sack_backlog``), then the ACK with the
    latest blocks (``Receiver.sack_blocks``), each from the flow's template (``FlowEmitter.send_sack``) or
    built by ``Output.write``. False when there are no blocks after all (the caller sends the plain ACK)."""
    cdef int limit = 3 if ts is not None else 4
    counters = out.stats.counters
    while True:
        older = receiver.sack_backlog(limit)
        if not older:
            break
        _emit_blocks(out, fast, seq, ack, fwin, ts, older, now)
        out.segs_out += 1
        counters["tcp.out_segs"] += 1
        counters["tcp.sack_extra_acks"] += 1
    blocks = receiver.sack_blocks(limit)
    if not blocks:
        return False
    _emit_blocks(out, fast, seq, ack, fwin, ts, blocks, now)
    out.segs_out += 1
    counters["tcp.out_segs"] += 1
    return True


cdef int _emit_blocks(object out, object fast, object seq, object ack, object fwin, object ts, tuple blocks,
                      object now) except -1:
    """A pure ACK with SACK ``blocks``: from the template when the flow has one, else ``Output.write``."""
    if type(fast) is not FlowEmitter or not (<FlowEmitter>fast).send_sack(
            out.local_addr, out.remote_addr, out.local_port, out.remote_port, seq, ack, TH_ACK, fwin, ts, blocks, now):
        out.write(seq, ack, TH_ACK, fwin, ts, blocks, now)
    return 0
