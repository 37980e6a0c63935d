# The established-TCP fast path: receive header prediction (Van Jacobson's,
# as in RFC 9293 3.10.7.4 with RFC 7323 and RFC 5961 applied to the one case
# that matters for bulk transfer).
#
# ``tcp_established_input(conn, seg, payload, now)`` is called by
# ``Connection.segment_arrives`` for each segment of a synchronized
# connection. It takes a segment only when the general path would do
# exactly what it does here, and returns False before touching anything
# otherwise, so the Python state machine stays the reference:
#
# - the connection is ESTABLISHED, the record is a classify ``Packet``;
# - flags are ACK, or ACK|PSH (no SYN, FIN, RST, URG, ECE, CWR);
# - options: the timestamps option alone when negotiated, none otherwise
#   (no SACK blocks, no other kinds);
# - SEG.SEQ == RCV.NXT, and PAWS passes (TSval >= TS.Recent: the 24-day
#   rule and the drop are the Python path's);
# - data: it fits in the advertised window, nothing is held out of order,
#   no early FIN waits, the user has not closed, the layer's memory budget
#   has room; its ACK acknowledges nothing new (the window update done
#   here) or new data below SND.MAX (the Sender's ``on_ack``, one call);
# - a pure ACK (no data): it acknowledges new data (SND.UNA < SEG.ACK <=
#   SND.MAX) and no FIN of ours is queued; the Sender's ``on_ack`` takes it.
#   Duplicate ACKs and window updates go the Python way.
#
# Then: TS.Recent (RFC 7323 4.3), the payload appended to the receive
# buffer in C, RCV.NXT and the ACK policy by ``Receiver.in_order`` (the one
# implementation of ``delack``'s rules), the output loop, and the ACK if the
# policy says it is owed now.

from cpython.bytearray cimport PyByteArray_GET_SIZE, PyByteArray_Resize
from libc.stdint cimport int32_t

cdef enum:
    TH_FIN = 0x01
    TH_SYN = 0x02
    TH_RST = 0x04
    TH_PSH = 0x08
    TH_ACK = 0x10


cdef inline bint _seq_lt(uint32_t a, uint32_t b) noexcept nogil:
    return <int32_t>(a - b) < 0


cdef inline bint _seq_le(uint32_t a, uint32_t b) noexcept nogil:
    return <int32_t>(a - b) <= 0


def tcp_established_input(conn, seg, payload, double now):
    """Receive header prediction for one segment of ``conn``; True when it was handled here.

    False means nothing was changed: the caller runs the general path.
    ``payload`` is the segment's data (a buffer of exactly its length).
    """
    cdef Packet p
    cdef TcbRecord tcb
    cdef uint32_t seq, ack, una, snd_max, wl1
    cdef int64_t rcv_wnd, seg_wnd, old_wnd
    cdef Py_ssize_t dlen, before
    cdef Py_buffer view
    cdef int flags
    cdef bint wnd_update
    if type(seg) is not Packet:
        return False
    p = <Packet>seg
    tcb = <TcbRecord>conn.tcb
    if tcb.st != TCPS_ESTABLISHED:
        return False
    flags = p.flags
    if (flags & ~TH_PSH) != TH_ACK:
        return False
    if p._nsack or p._unklen or p.sack_permitted:
        return False
    if tcb.ts_ok:
        if p._opts != OPTF_TIMESTAMPS or _seq_lt(p._tsval, <uint32_t>tcb.ts_recent):
            return False
    elif p._opts:
        return False
    seq = p.seq
    if seq != <uint32_t>tcb.rcv_nxt:
        return False
    ack = p.ack
    una = <uint32_t>tcb.snd_una
    snd_max = <uint32_t>tcb.snd_max
    dlen = len(payload)
    receiver = conn.receiver
    sender = conn.sender
    if dlen == 0:
        # A pure ACK for new data.
        if not (_seq_lt(una, ack) and _seq_le(ack, snd_max)) or tcb.fin_queued:
            return False
        _ts_recent(tcb, p, now)
        sender.on_ack(seg, 0, now)
    else:
        rcv_wnd = <int32_t>(<uint32_t>tcb.rcv_adv - seq)
        if dlen > rcv_wnd:
            return False
        if ack != una:
            if not (_seq_lt(una, ack) and _seq_le(ack, snd_max)) or tcb.fin_queued:
                return False
        rcvbuf = receiver.rcvbuf
        if rcvbuf.ooo_bytes or tcb.fin_rcvd_seq is not None or conn.orphaned:
            return False
        if conn.layer.mem_room() < dlen:
            return False
        seg_wnd = (<int64_t>p.window) << tcb.snd_wscale
        old_wnd = tcb.snd_wnd
        if ack == una:
            wl1 = <uint32_t>tcb.snd_wl1
            wnd_update = _seq_lt(wl1, seq) or (wl1 == seq and _seq_le(<uint32_t>tcb.snd_wl2, ack))
            if wnd_update and old_wnd == 0 and seg_wnd:
                return False  # the window opens: persist timer work, the Python way
        # Committed from here on.
        _ts_recent(tcb, p, now)
        if ack == una:
            # Sender.on_ack without SND.UNA moving and with data (never a duplicate ACK).
            if wnd_update:
                tcb.snd_wnd = seg_wnd
                tcb.snd_wl1 = seq
                tcb.snd_wl2 = ack
                if seg_wnd > tcb.max_snd_wnd:
                    tcb.max_snd_wnd = seg_wnd
            if snd_max != una:
                sender.recovery.after_ack(ack, (), now)
        else:
            sender.on_ack(seg, dlen, now)
        # Seventh step: the text, appended in order (ReceiveBuffer.write at offset 0, no runs).
        buf = rcvbuf._data
        before = PyByteArray_GET_SIZE(buf)
        PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
        try:
            if view.len != dlen:
                raise ValueError("payload changed length")
            PyByteArray_Resize(buf, before + dlen)
            memcpy(PyByteArray_AS_STRING(buf) + before, view.buf, dlen)
        finally:
            PyBuffer_Release(&view)
        receiver.in_order(dlen, dlen, False, before, now, bool(flags & TH_PSH))
    if tcb.st != TCPS_CLOSED:
        sender.output(now)
        if receiver.ack_now:
            conn.out.send_ack(now)
    return True


cdef inline void _ts_recent(TcbRecord tcb, Packet p, double now):
    """RFC 7323 4.3 (2): TS.Recent from a segment at or before the last ACK sent."""
    if tcb.ts_ok and _seq_le(p.seq, <uint32_t>tcb.last_ack_sent) and not _seq_lt(p._tsval, <uint32_t>tcb.ts_recent):
        tcb.ts_recent = p._tsval
        tcb.ts_recent_age = now
