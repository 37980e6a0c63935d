# Our segments without data in C: ``Output.emit(seq, flags, now)`` for a FIN, a FIN's retransmission or a
# pure ACK, the way ``_send_ack`` (_fp_ack.pxi) writes the pure ACK of the fast path.
#
# Connection teardown sends one such segment per connection from Python (the FIN after the
# application's close); ``Output.emit`` is then the longest part of its round. ``emit_control``
# does what that method does for a segment without data -- the window (``Receiver.select_window``),
# the timestamps, the flow's template or ``Output.write``, the counters, ``last_ack_sent`` and
# ``Receiver.ack_sent`` -- and declines (False, nothing changed) where ``_send_ack`` hands over to
# Python too: SACK blocks or a D-SACK owed, memory pressure, classes other than the layouts'.
# tests/tcp/test_tcp_control_emit.py holds it to ``Output.emit``'s bytes and state.


def emit_control(EstablishedPath path, out, seq, int flags, now):
    """``out.emit(seq, flags, now)`` without data, in C; True when sent, False when declined (nothing done)."""
    cdef Py_ssize_t *off = path.layout._off
    cdef Py_ssize_t *ro = path.receiver_layout._off
    cdef Py_ssize_t *do = path.delack_layout._off
    cdef int64_t field
    tcb = out.tcb
    receiver = out.receiver
    if type(tcb) is not path.layout.cls or type(receiver) is not path.receiver_layout.cls:
        return False
    if type(_fget(receiver, ro[R_DELACK])) is not path.delack_layout.cls:
        return False
    rcvbuf = _fget(receiver, ro[R_RCVBUF])
    layer = _fget(receiver, ro[R_BUDGET])
    if layer is not None and layer.under_pressure:
        return False  # a trimmed window: the Python way (``Receiver.offerable``)
    if _bget(tcb, off[T_SACK_OK]) and (rcvbuf.ooo_bytes or receiver.dsack is not None):
        return False  # SACK blocks to report: ``Output.emit``'s own part
    field = _select_window(tcb, off, receiver, ro)  # (_fp_tx.pxi)
    if _bget(tcb, off[T_TS_OK]):
        ts = (PyLong_FromUnsignedLong(<uint32_t>(<int64_t>(PyFloat_AsDouble(now) * 1000) + _iget(tcb, off[T_TS_OFFSET]))),
              _fget(tcb, off[T_TS_RECENT]))
    else:
        ts = None
    ack = _fget(tcb, off[T_RCV_NXT])
    fwin = PyLong_FromLongLong(field)
    fast = out.fast
    if type(fast) is FlowEmitter:
        sent = (<FlowEmitter>fast).send(out.local_addr, out.remote_addr, out.local_port, out.remote_port, seq, ack,
                                        flags, fwin, ts, _EMPTY, now)
    else:
        sent = fast(out.local_addr, out.remote_addr, out.local_port, out.remote_port, seq, ack, flags, fwin, ts,
                    _EMPTY, now)
    if not sent:
        out.write(seq, ack, flags, fwin, ts, (), now)
    out.segs_out += 1
    out.stats.counters["tcp.out_segs"] += 1
    _fset(tcb, off[T_LAST_ACK_SENT], ack)
    _ack_sent(receiver, ro, do, now, False)  # Receiver.ack_sent(now, False)
    return True
