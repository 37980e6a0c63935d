# The peer's FIN on an ESTABLISHED flow in C (issues 10 and 11: connection teardown).
#
# ``FinPath.take(conn, seg, payload, now)`` is what ``FlowTable`` runs for a FIN
# header prediction declined, before ``Connection.segment_arrives``. It takes
# the one common form ``connection._peer_fin`` takes -- FIN and ACK alone (no
# PSH, no data) at exactly RCV.NXT, SEG.ACK = SND.MAX, no FIN received before,
# TSval not older than TS.Recent when timestamps are on -- narrowed to what
# header prediction does with the ACK: nothing of ours outstanding (SEG.ACK =
# SND.UNA: no duplicate, RFC 5681 2; a window that does not open from zero,
# the persist timer's) or the rest of our data acknowledged (as a pure ACK of
# new data), no option but the negotiated timestamps, a controller that does
# not pace (no rate sample). Anything else: False before touching anything,
# and the general path runs.
#
# What it does is ``segment_arrives`` -> ``_peer_fin`` in that case, in the
# same order on the same objects: the per-segment bookkeeping (``_arrived_at``),
# the fifth step's ACK (``Sender.on_ack``: TSecr for RACK, the window update
# of RFC 9293 3.10.7.4 guarded by SND.WL1/WL2, the recovery's ``after_ack``
# and ``arm_timer``: ``TxPath.after_ack`` in RACK-TLP's plain case; an ACK of
# the rest of our data through ``TxPath.on_ack``, as a pure ACK's), TS.Recent
# (RFC 7323 4.3), the eighth step (RCV.NXT over the FIN, ``fin_rcvd``, the
# FIN acknowledged at once: ``Receiver.receive_fin``), CLOSE-WAIT through
# ``Connection._set_state`` (the application's one notification, where its
# ``close()`` queues our FIN), then ``Sender.output`` (when all it has to send
# is that FIN, under RACK-TLP's plain case: ``_lone_fin``, in C) and the ACK
# still owed (``_send_ack``), and the memory charge (``_recharge_at``). The
# Python call left is the one the application sees: ``_set_state``.
# tests/tcp/test_tcp_teardown_diff.py holds it to the general path in lockstep.

cdef class FinPath:
    """The peer's in-order FIN on an ESTABLISHED flow (see the top of the file); ``FlowTable.fin``."""

    cdef EstablishedPath established
    cdef object close_wait              # State.CLOSE_WAIT, the object ``_set_state`` is given
    cdef readonly unsigned long taken   # FINs taken here (for tests)
    cdef readonly unsigned long fins_sent  # of which our own FIN went out here (_lone_fin)
    cdef readonly unsigned long final_acks  # LAST-ACK's last ACKs taken here (_final_take)

    def __cinit__(self, EstablishedPath established, close_wait):
        self.established = established
        self.close_wait = close_wait

    def take(self, conn, seg, payload, now):
        """True when ``seg`` (a classify ``Packet`` of ``conn``, ESTABLISHED) was handled here; False:
        nothing changed, the caller runs ``conn.segment_arrives``."""
        if type(seg) is not Packet:
            return False
        return self._take(conn, <Packet>seg, payload, now) == 1

    cdef int _take(self, conn, Packet p, payload, now) except -1:
        cdef EstablishedPath ep = self.established
        cdef Py_ssize_t *off = ep.layout._off
        cdef Py_ssize_t *ro
        cdef Py_ssize_t *co
        cdef Py_ssize_t *so
        cdef uint32_t seq, ack, una, wl1
        cdef int64_t seg_wnd, old_wnd
        cdef bint ts_ok
        if p.flags != (TH_FIN | TH_ACK) or p.payload_len or len(payload):
            return 0
        if not ep._fits(conn):
            return 0
        co = ep.conn_layout._off
        so = ep.sender_layout._off
        ro = ep.receiver_layout._off
        tcb = _fget(conn, co[N_TCB])
        ep.layout._check(tcb)
        if _iget(tcb, off[T_STATE]) != TCPS_ESTABLISHED:
            return 0
        if p._nsack or p._unklen or p.sack_permitted:
            return 0
        ts_ok = _bget(tcb, off[T_TS_OK])
        if ts_ok:
            if p._opts != OPTF_TIMESTAMPS or _seq_lt(p._tsval, <uint32_t>_iget(tcb, off[T_TS_RECENT])):
                return 0
        elif p._opts:
            return 0
        seq = p.seq
        ack = p.ack
        una = <uint32_t>_iget(tcb, off[T_SND_UNA])
        if seq != <uint32_t>_iget(tcb, off[T_RCV_NXT]) or ack != <uint32_t>_iget(tcb, off[T_SND_MAX]) or tcb.fin_rcvd:
            return 0
        if ack != una and (not _seq_lt(una, ack) or _bget(tcb, off[T_FIN_QUEUED])):
            return 0
        if _seq_lt(ack, una - <uint32_t>_iget(tcb, off[T_MAX_SND_WND])):
            return 0  # (RFC 5961 5.2's "too old" for an ACK of SND.MAX: only with a window near 2**31)
        receiver = _fget(conn, co[N_RECEIVER])
        sender = _fget(conn, co[N_SENDER])
        if type(_fget(receiver, ro[R_DELACK])) is not ep.delack_layout.cls:
            return 0
        if sender.rs is not None:
            return 0  # a pacing controller's rate sample (Sender.sample_ack): the Python way
        seg_wnd = (<int64_t>p.window) << _iget(tcb, off[T_SND_WSCALE])
        old_wnd = _iget(tcb, off[T_SND_WND])
        wl1 = <uint32_t>_iget(tcb, off[T_SND_WL1])
        update = _seq_lt(wl1, seq) or (wl1 == seq and _seq_le(<uint32_t>_iget(tcb, off[T_SND_WL2]), ack))
        if ack == una and update and old_wnd == 0 and seg_wnd:
            return 0  # the window opens: the persist timer's work, the Python way
        # Committed from here on: segment_arrives' bookkeeping, then _process_ack -> Sender.on_ack.
        _arrived_at(conn, co, sender, so, now)
        tx = _fget(sender, so[S_TX])
        if ack != una:
            # It acknowledges the rest of our data (SND.UNA < SEG.ACK = SND.MAX, no FIN of ours queued):
            # Sender.on_ack as for header prediction's pure ACK of new data (the FIN flag matters to it only
            # for a duplicate ACK), in C where it can (TxPath.on_ack, _fp_tx.pxi).
            if type(tx) is TxPath:
                (<TxPath>tx).on_ack(sender, tcb, p, now)
            else:
                sender.on_ack(p, 0, now)
        else:
            sender.ack_tsecr = PyLong_FromUnsignedLong(p._tsecr) if ts_ok else None
            if update:
                if seg_wnd != old_wnd:
                    _fset(tcb, off[T_SND_WND], seg_wnd)
                _fset(tcb, off[T_SND_WL1], PyLong_FromUnsignedLong(seq))
                _fset(tcb, off[T_SND_WL2], PyLong_FromUnsignedLong(ack))
                if seg_wnd > _iget(tcb, off[T_MAX_SND_WND]):
                    _fset(tcb, off[T_MAX_SND_WND], seg_wnd)
            recovery = _fget(sender, so[S_RECOVERY])
            if type(tx) is not TxPath or not (<TxPath>tx).after_ack(sender, tcb, recovery, now, True):
                recovery.after_ack(ack, (), now)
                recovery.arm_timer(now)
        _ts_recent(tcb, off, ts_ok, p, now)
        # Eighth step: Receiver.receive_fin, then CLOSE-WAIT (the application hears of it once).
        _fset(tcb, off[T_RCV_NXT], PyLong_FromUnsignedLong(seq + 1))
        tcb.fin_rcvd = True
        _fset(tcb, off[T_FIN_RCVD_SEQ], None)
        _fset(receiver, ro[R_ACK_NOW], True)
        conn._set_state(self.close_wait)
        if _iget(tcb, off[T_STATE]) != TCPS_CLOSED:
            if _lone_fin(ep, tcb, sender, so, now):
                self.fins_sent += 1  # the application closed from its callback: our FIN went out here
            else:
                sender.output(now)
            if _bget(receiver, ro[R_ACK_NOW]):
                _send_ack(conn, tcb, off, receiver, ro, ep.delack_layout._off, now)
        _recharge_at(ep, conn, sender, receiver)
        self.taken += 1
        return 1


cdef enum:
    TCPS_FIN_WAIT_1 = 5
    TCPS_LAST_ACK = 9


cdef int _lone_fin(EstablishedPath ep, tcb, sender, Py_ssize_t *so, now) except -1:
    """``Sender.output(now)`` when all it has to send is our FIN (the application's close with nothing
    buffered or outstanding: LAST-ACK or FIN-WAIT-1), under RACK-TLP in its plain case, no pacing, no cork
    timer: 1 when sent; 0, nothing changed (the caller calls ``output``).

    What ``output`` does then, in its order: ``force`` and ``push`` cleared, the loop's one call of
    ``send_data(SND.NXT, 0, fin=True, arm=False)`` -- the FIN|ACK through ``emit_control`` (else
    ``Output.emit``), RACK's transmit record for its one sequence number (RFC 8985 6.1: nothing is
    outstanding, so the list is empty and it is appended), SND.NXT and SND.MAX past it -- and, new data
    having gone out, the recovery's ``arm_timer`` (RFC 8985 7.2: ``TxPath._rack_arm_timer``); the
    retransmission timer is the recovery's to arm (``arms_after_send``), the persist and cork timers
    untouched (nothing buffered, the cork timer idle)."""
    cdef Py_ssize_t *off = ep.layout._off
    cdef int64_t st = _iget(tcb, off[T_STATE])
    cdef uint32_t una
    cdef TxPath tx
    if st != TCPS_LAST_ACK and st != TCPS_FIN_WAIT_1:
        return 0
    if not _bget(tcb, off[T_FIN_QUEUED]) or tcb.fin_acked:
        return 0
    una = <uint32_t>_iget(tcb, off[T_SND_UNA])
    if una != <uint32_t>_iget(tcb, off[T_SND_NXT]) or una != <uint32_t>_iget(tcb, off[T_SND_MAX]):
        return 0
    sndbuf = _fget(sender, so[S_SNDBUF])
    if (<SendRing>sndbuf)._len if type(sndbuf) is SendRing else len(sndbuf):
        return 0
    txo = _fget(sender, so[S_TX])
    if type(txo) is not TxPath:
        return 0
    tx = <TxPath>txo
    recovery = _fget(sender, so[S_RECOVERY])
    if not tx._rack_plain(recovery) or len(recovery.segs):
        return 0
    if sender.rs is not None or sender.pacer is not None or _fget(sender, so[S_CORK_TIMER]).deadline is not None:
        return 0
    out = sender.out
    ctl = out.ctl
    if ctl is None:
        return 0
    # Committed: Sender.output's loop, its one segment.
    _fset(sender, so[S_FORCE], False)
    _fset(sender, so[S_PUSH], False)
    seq_o = _fget(tcb, off[T_SND_NXT])
    if not emit_control(ctl, out, seq_o, TH_FIN | TH_ACK, now):
        out.emit(seq_o, TH_FIN | TH_ACK, now)
    # RackRecovery.on_send: _sync (SND.UNA moved by the handshake, unseen: _slide over no records), the record
    pos = _as_i64(recovery.una)
    una_o = _fget(tcb, off[T_SND_UNA])
    if recovery.una_seq != una_o:
        pos += <int32_t>(una - <uint32_t>_as_i64(recovery.una_seq))
        recovery.una = pos
        recovery.una_seq = una_o
    recovery.segs.append([pos, pos + 1, now, _ZERO])
    end_o = PyLong_FromUnsignedLong(una + 1)
    _fset(tcb, off[T_SND_NXT], end_o)
    _fset(tcb, off[T_SND_MAX], end_o)
    tx._rack_arm_timer(sender, tcb, recovery, now)
    return 1


def lone_fin(EstablishedPath ep, sender, now):
    """``Sender.output(now)``'s lone FIN in C (``_lone_fin``) for a sender of the class ``ep`` learned:
    True when sent; False, nothing changed (the caller's loop runs)."""
    sl = ep.sender_layout
    if sl is None:  # nothing taught ``ep`` the classes yet: from the sender's connection (its timer maker)
        conn = sender.timer_maker
        if conn is None or getattr(conn, "sender", None) is not sender or not ep._fits(conn):
            return False
        sl = ep.sender_layout
    if type(sender) is not sl.cls:
        return False
    tcb = sender.tcb
    if type(tcb) is not ep.layout.cls:
        return False
    return _lone_fin(ep, tcb, sender, sl._off, now) == 1


cdef int _fin_take(object fin, object conn, Packet p, object payload, object now) except -1:
    """``FlowTable``'s call for a FIN an ESTABLISHED flow's header prediction declined: ``fin`` a FinPath
    or None."""
    if fin is None or type(fin) is not FinPath:
        return 0
    return (<FinPath>fin)._take(conn, p, payload, now)


cdef int _final_take(object fin, object conn, Packet p, object payload, object now) except -1:
    """``FlowTable``'s call for a segment of a flow in LAST-ACK: ``connection._final_ack``'s form (ACK alone,
    no data, at RCV.NXT, SEG.ACK = SND.MAX covering our FIN, TSval not older than TS.Recent; no option
    but the negotiated timestamps here) taken as ``segment_arrives`` takes it -- the per-segment
    bookkeeping, SND.UNA and ``fin_acked``, the bytes it acknowledges counted, then ``terminate`` (RFC 9293
    3.10.7.4 fifth step, LAST-ACK: delete the TCB, CLOSED) -- without its Python frames: 1; else 0,
    nothing changed (the caller runs ``segment_arrives``)."""
    cdef FinPath fp
    cdef EstablishedPath ep
    cdef Py_ssize_t *off
    cdef Py_ssize_t *co
    cdef Py_ssize_t *so
    cdef uint32_t ack
    cdef int64_t queued
    if fin is None or type(fin) is not FinPath:
        return 0
    fp = <FinPath>fin
    ep = fp.established
    if p.flags != TH_ACK or p.payload_len or len(payload) or p._nsack or p._unklen or p.sack_permitted:
        return 0
    if not ep._fits(conn):
        return 0
    off = ep.layout._off
    co = ep.conn_layout._off
    so = ep.sender_layout._off
    tcb = _fget(conn, co[N_TCB])
    ep.layout._check(tcb)
    if _iget(tcb, off[T_STATE]) != TCPS_LAST_ACK:
        return 0
    if _bget(tcb, off[T_TS_OK]):
        if p._opts != OPTF_TIMESTAMPS or _seq_lt(p._tsval, <uint32_t>_iget(tcb, off[T_TS_RECENT])):
            return 0
    elif p._opts:
        return 0
    ack = p.ack
    if p.seq != <uint32_t>_iget(tcb, off[T_RCV_NXT]) or ack != <uint32_t>_iget(tcb, off[T_SND_MAX]):
        return 0
    sender = _fget(conn, co[N_SENDER])
    sndbuf = _fget(sender, so[S_SNDBUF])
    queued = (<SendRing>sndbuf)._len if type(sndbuf) is SendRing else len(sndbuf)
    if <int32_t>(ack - <uint32_t>_iget(tcb, off[T_SND_UNA])) <= queued:
        return 0  # our FIN is not covered (not sent yet)
    _arrived_at(conn, co, sender, so, now)
    sender.bytes_acked += queued
    _fset(tcb, off[T_SND_UNA], _fget(tcb, off[T_SND_MAX]))
    tcb.fin_acked = True
    conn.terminate()
    fp.final_acks += 1
    return 1
