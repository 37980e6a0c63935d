# The established-TCP fast path: receive header prediction (Van Jacobson's,
# as in RFC 9293 3.10.7.4 with RFC 7323 and RFC 5961 applied to the one case
# that matters for bulk transfer).
#
# ``EstablishedPath(layout).input(conn, seg, payload, now)`` is called by
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
#   has room and is below its soft level; its ACK acknowledges nothing new (the window update done
#   here, with the tail of ``Sender.on_ack``: ack_tsecr, recovery.after_ack,
#   recovery.arm_timer) or new data below SND.MAX (the Sender's ``on_ack``, one call);
# - a pure ACK (no data): it acknowledges new data (SND.UNA < SEG.ACK <=
#   SND.MAX) and no FIN of ours is queued; the Sender's ``on_ack`` takes it.
#   Duplicate ACKs and window updates go the Python way.
#
# Then: TS.Recent (RFC 7323 4.3), the payload appended to the receive
# buffer (a view into the held RX frame, ``ustack.rxhold``: ReceiveBuffer.append),
# RCV.NXT and the ACK policy (``_in_order`` in _fp_ack.pxi: the
# rules of ``Receiver.in_order`` and ``delack`` over their own state), the
# output loop (skipped when it has nothing to send and no timer to touch: an
# empty send buffer, nothing outstanding, no FIN, no cork timer), and the
# pure ACK if the policy says it is owed now (``_send_ack``, into a TX slot
# through the host's fast emitter). Python code this file relies on by name:
# ``Connection`` (tcb, receiver, sender, out, layer.mem_room,
# layer.under_pressure, orphaned, segment_arrives), ``Receiver`` (rcvbuf.append,
# rcvbuf._chunks, rcvbuf.lent, rcvbuf.ooo_bytes, ack_now, and the fields _fp_ack.pxi names), ``Sender``
# (on_ack, ack_tsecr, output, recovery.after_ack, recovery.arm_timer, len(sndbuf), force, push,
# cork_timer), ``Output`` (fast, write, send_ack).

from cpython.bytearray cimport PyByteArray_GET_SIZE, PyByteArray_Resize, PyByteArray_AS_STRING
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


cdef class EstablishedPath:
    """Receive header prediction over the TCBs of one layout (``TcbLayout(Tcb)``); see the top of the file."""

    cdef readonly TcbLayout layout
    cdef readonly SlotLayout receiver_layout    # ``Receiver`` (RECEIVER_FIELDS)
    cdef readonly SlotLayout delack_layout      # ``DelayedAck`` (DELACK_FIELDS)
    # Made from the first connection taken whole (``_learn``): ``Connection``, ``Sender``, ``TcpLayer`` and
    # ``ReceiveBuffer`` (CONN_FIELDS, SENDER_FIELDS, LAYER_FIELDS, RCVBUF_FIELDS), read through slot offsets
    cdef readonly SlotLayout conn_layout
    cdef readonly SlotLayout sender_layout
    cdef readonly SlotLayout layer_layout
    cdef readonly SlotLayout rcvbuf_layout
    cdef bint _unlearnable                      # their classes lack those slots: the attribute way

    def __cinit__(self, TcbLayout layout, SlotLayout receiver_layout, SlotLayout delack_layout):
        if receiver_layout.fields != RECEIVER_FIELDS or delack_layout.fields != DELACK_FIELDS:
            raise ValueError("layouts of RECEIVER_FIELDS and DELACK_FIELDS expected")
        self.layout = layout
        self.receiver_layout = receiver_layout
        self.delack_layout = delack_layout

    def input(self, conn, seg, payload, now):
        """Receive header prediction for one segment of ``conn``; True when it was handled here.

        False means nothing was changed: the caller runs the general path.
        ``payload`` is the segment's data (a buffer of exactly its length).
        """
        return self._input(conn, seg, payload, now, False) == 1

    def send_ack(self, conn, now):
        """``conn.out.send_ack(now)`` (a pure ACK, any synchronized state) through ``_send_ack`` (_fp_ack.pxi)
        when the TCB, Receiver and DelayedAck are the classes the layouts describe; else that method itself."""
        tcb = conn.tcb
        receiver = conn.receiver
        if (type(tcb) is not self.layout.cls or type(receiver) is not self.receiver_layout.cls
                or type(_fget(receiver, self.receiver_layout._off[R_DELACK])) is not self.delack_layout.cls):
            conn.out.send_ack(now)
            return
        _send_ack(conn, tcb, self.layout._off, receiver, self.receiver_layout._off, self.delack_layout._off, now)

    cdef int _input(self, conn, seg, payload, now, bint whole) except -1:
        """``input``; with ``whole``, also what ``Connection.segment_arrives`` does around it (``FlowTable``):
        the per-segment bookkeeping when it commits, and after it the memory charge and the burst's event."""
        cdef Packet p
        cdef Py_ssize_t *off = self.layout._off
        cdef uint32_t seq, ack, una, snd_max, wl1, rcv_nxt
        cdef int64_t rcv_wnd, seg_wnd, old_wnd
        cdef Py_ssize_t dlen, before
        cdef int flags
        cdef bint wnd_update = False, ts_ok
        cdef int32_t ooo_off = 0
        run = None
        cdef Py_ssize_t *co = NULL
        cdef Py_ssize_t *so = NULL
        cdef Py_ssize_t *lo = NULL
        cdef Py_ssize_t *bo = NULL
        if type(seg) is not Packet:
            return 0
        p = <Packet>seg
        if whole and self._fits(conn):  # the per-segment bookkeeping through slot offsets (_learn)
            co = self.conn_layout._off
            so = self.sender_layout._off
            lo = self.layer_layout._off
            bo = self.rcvbuf_layout._off
            tcb = _fget(conn, co[N_TCB])
        else:
            tcb = conn.tcb
        self.layout._check(tcb)
        if _iget(tcb, off[T_STATE]) != TCPS_ESTABLISHED:
            return 0
        flags = p.flags
        if (flags & ~TH_PSH) != TH_ACK:
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
        rcv_nxt = <uint32_t>_iget(tcb, off[T_RCV_NXT])
        dlen = len(payload)
        if seq != rcv_nxt:
            # Out of order: only data that extends the highest out-of-order run (the next segment
            # above a hole, the common case under loss) or opens a new one above it is taken here
            # (``_ooo_last_run``).
            # Data wholly below RCV.NXT (a spurious retransmission) is answered here too (``_old_duplicate``).
            ooo_off = <int32_t>(seq - rcv_nxt)
            if dlen == 0 or (ooo_off < 0 and <int32_t>(seq + <uint32_t>dlen - rcv_nxt) > 0):
                return 0  # no data, or data partly new (the Python path trims it)
            if ooo_off < 0 and -<int64_t>ooo_off > (<int64_t>0xFFFF << _iget(tcb, off[T_RCV_WSCALE])):
                return 0  # further back than any window: no retransmission; its ACK is rate-limited in Python
        ack = p.ack
        una = <uint32_t>_iget(tcb, off[T_SND_UNA])
        snd_max = <uint32_t>_iget(tcb, off[T_SND_MAX])
        if co != NULL:
            receiver = _fget(conn, co[N_RECEIVER])
            sender = _fget(conn, co[N_SENDER])
        else:
            receiver = conn.receiver
            sender = conn.sender
        if type(receiver) is not self.receiver_layout.cls or type(
                _fget(receiver, self.receiver_layout._off[R_DELACK])) is not self.delack_layout.cls:
            return 0  # not the classes the layouts describe: the Python path
        if ooo_off < 0:
            if whole:
                if co != NULL:
                    _arrived_at(conn, co, sender, so, now)
                else:
                    _arrived(conn, sender, now)
            _old_duplicate(conn, tcb, off, receiver, self.receiver_layout._off, self.delack_layout._off, seq, dlen,
                           now)
        elif dlen == 0:
            # A pure ACK for new data.
            if not (_seq_lt(una, ack) and _seq_le(ack, snd_max)) or _bget(tcb, off[T_FIN_QUEUED]):
                return 0
            if whole:
                if co != NULL:
                    _arrived_at(conn, co, sender, so, now)
                else:
                    _arrived(conn, sender, now)
            tx = _fget(sender, so[S_TX]) if so != NULL else sender.tx
            if type(tx) is TxPath:
                (<TxPath>tx).on_ack(sender, tcb, p, now)  # Sender.on_ack in C (_fp_tx.pxi)
            else:
                sender.on_ack(seg, 0, now)
            # TS.Recent after the ACK, as the Python path: what the recovery sends from on_ack echoes the old one
            _ts_recent(tcb, off, ts_ok, p, now)
        else:
            rcv_wnd = <int32_t>(<uint32_t>_iget(tcb, off[T_RCV_ADV]) - seq)
            if dlen > rcv_wnd:
                return 0
            if ack != una:
                if not (_seq_lt(una, ack) and _seq_le(ack, snd_max)) or _bget(tcb, off[T_FIN_QUEUED]):
                    return 0
            rcvbuf = _fget(receiver, self.receiver_layout._off[R_RCVBUF])
            if ooo_off:
                run = _ooo_last_run(rcvbuf, bo, ooo_off)
                if run is None:
                    return 0  # a new run, a hole filled, a duplicate: ReceiveBuffer.write, the Python way
            if co != NULL:
                if _fget(tcb, off[T_FIN_RCVD_SEQ]) is not None or _bget(conn, co[N_ORPHANED]):
                    return 0
                layer = _fget(conn, co[N_LAYER])
                if _bget(layer, lo[L_UNDER_PRESSURE]) or (_as_i64(_fget(layer, lo[L_CONFIG]).tcp_mem)
                                                           - _iget(layer, lo[L_MEM_USED])) < dlen:  # _mem_room
                    return 0  # the memory budget's soft or hard level: the Python path trims and drops
            else:
                if _fget(tcb, off[T_FIN_RCVD_SEQ]) is not None or conn.orphaned:
                    return 0
                layer = conn.layer
                if layer.under_pressure or _mem_room(layer) < dlen:
                    return 0  # the memory budget's soft or hard level: the Python path trims and drops
            seg_wnd = (<int64_t>p.window) << _iget(tcb, off[T_SND_WSCALE])
            old_wnd = _iget(tcb, off[T_SND_WND])
            if ack == una:
                wl1 = <uint32_t>_iget(tcb, off[T_SND_WL1])
                wnd_update = _seq_lt(wl1, seq) or (wl1 == seq and _seq_le(<uint32_t>_iget(tcb, off[T_SND_WL2]), ack))
                if wnd_update and old_wnd == 0 and seg_wnd:
                    return 0  # the window opens: persist timer work, the Python way
            # Committed from here on.
            if whole:
                if co != NULL:
                    _arrived_at(conn, co, sender, so, now)
                else:
                    _arrived(conn, sender, now)
            if ack == una:
                # Sender.on_ack without SND.UNA moving and with data (never a duplicate ACK).
                if wnd_update:
                    if seg_wnd != old_wnd:
                        _fset(tcb, off[T_SND_WND], seg_wnd)
                    _fset(tcb, off[T_SND_WL1], seq)
                    _fset(tcb, off[T_SND_WL2], ack)
                    if seg_wnd > _iget(tcb, off[T_MAX_SND_WND]):
                        _fset(tcb, off[T_MAX_SND_WND], seg_wnd)
                # (its tail: the ACK's TSecr for RACK/Eifel, the recovery told, its timer run; ESTABLISHED
                # is a sending state)
                sender.ack_tsecr = PyLong_FromUnsignedLong(p._tsecr) if ts_ok else None
                recovery = _fget(sender, so[S_RECOVERY]) if so != NULL else sender.recovery
                tx = _fget(sender, so[S_TX]) if so != NULL else sender.tx
                if type(tx) is not TxPath or not (<TxPath>tx).after_ack(sender, tcb, recovery, now, snd_max != una):
                    recovery.after_ack(ack, (), now)  # (RACK-TLP's common case is in C: TxPath.after_ack)
                    if snd_max != una:
                        recovery.arm_timer(now)  # (it does nothing with nothing outstanding)
            else:
                # SND.UNA advances: Sender.on_ack, whose data length only tells duplicate ACKs (none here)
                # apart, as for a pure ACK: in C
                tx = _fget(sender, so[S_TX]) if so != NULL else sender.tx
                if type(tx) is TxPath:
                    (<TxPath>tx).on_ack(sender, tcb, p, now)
                else:
                    sender.on_ack(seg, dlen, now)
            _ts_recent(tcb, off, ts_ok, p, now)  # (after the ACK, as the Python path)
            if ooo_off:
                _ooo_append(receiver, self.receiver_layout._off, tcb, off, rcvbuf, bo, run, payload, dlen, ooo_off)
            else:
                self._text_in_order(tcb, receiver, rcvbuf, bo, payload, dlen, now, flags & TH_PSH)
            # (a view into the RX frame, held, when the stack's RxHold takes it: ReceiveBuffer.append)
        if ooo_off >= 0 and _iget(tcb, off[T_STATE]) != TCPS_CLOSED:
            if so != NULL:
                busy = (_iget(tcb, off[T_SND_MAX]) != _iget(tcb, off[T_SND_UNA])
                        or _iget(tcb, off[T_SND_NXT]) != _iget(tcb, off[T_SND_UNA]) or _bget(tcb, off[T_FIN_QUEUED])
                        or len(_fget(sender, so[S_SNDBUF])) or _bget(sender, so[S_FORCE]) or _bget(sender, so[S_PUSH])
                        or _fget(sender, so[S_CORK_TIMER]).deadline is not None)
            else:
                busy = (_iget(tcb, off[T_SND_MAX]) != _iget(tcb, off[T_SND_UNA])
                        or _iget(tcb, off[T_SND_NXT]) != _iget(tcb, off[T_SND_UNA]) or _bget(tcb, off[T_FIN_QUEUED])
                        or len(sender.sndbuf) or sender.force or sender.push
                        or sender.cork_timer.deadline is not None)
            if busy:
                # (otherwise it has nothing to send and no timer to change); its common case in C (_fp_tx.pxi)
                tx = _fget(sender, so[S_TX]) if so != NULL else sender.tx
                if type(tx) is not TxPath or not (<TxPath>tx).output(sender, tcb, now):
                    sender.output(now)
            if _bget(receiver, self.receiver_layout._off[R_ACK_NOW]):
                _send_ack(conn, tcb, off, receiver, self.receiver_layout._off, self.delack_layout._off, now)
        if whole and co != NULL:
            _fset(conn, co[N_SEGS_FAST], PyLong_FromLongLong(_iget(conn, co[N_SEGS_FAST]) + 1))
            _recharge_at(self, conn, sender, receiver)
            if _fget(conn, co[N_ON_EVENT]) is not None and not _bget(conn, co[N_NOTIFY_DUE]):
                _fset(conn, co[N_NOTIFY_DUE], True)  # the application hears of the burst once (TcpLayer.flush)
                _fget(conn, co[N_LAYER]).notify_later(conn)
        elif whole:
            conn.segs_fast += 1
            _recharge(conn, sender, receiver)
            if conn.on_event is not None and not conn._notify_due:
                conn._notify_due = True  # the application hears of the burst once (TcpLayer.flush)
                conn.layer.notify_later(conn)
        return 1

    cdef int _text_in_order(self, tcb, receiver, rcvbuf, Py_ssize_t *bo, payload, Py_ssize_t dlen, now,
                            bint push) except -1:
        """Seventh step: the text, appended in order (ReceiveBuffer.write at offset 0): a view into the RX
        frame, held, when the stack's RxHold takes it (ReceiveBuffer.append), then the out-of-order runs it
        reaches (``_absorb_runs``); then RCV.NXT and the ACK policy (``_in_order``).""" 
        cdef Py_ssize_t before, adv = dlen
        cdef bint had_gap
        chunks = _fget(rcvbuf, bo[B_CHUNKS]) if bo != NULL else rcvbuf._chunks
        before = (<ChunkQueue>chunks).nbytes
        had_gap = _bget(rcvbuf, bo[B_OOO_BYTES]) if bo != NULL else bool(rcvbuf.ooo_bytes)
        (<ChunkQueue>chunks)._append(payload)  # ReceiveBuffer.append: its ChunkQueue's, without a Python call
        if had_gap:  # the segment fills (part of) the first hole: the runs it reaches join the in-order bytes
            adv = _absorb_runs(rcvbuf, bo, <ChunkQueue>chunks, before, dlen)
        _in_order(tcb, self.layout._off, receiver, self.receiver_layout._off, self.delack_layout._off, rcvbuf, adv,
                  dlen, had_gap, before, now, push)
        return 0

    cdef bint _fits(self, conn) except -1:
        """``conn``, its sender, layer and receive buffer are of the classes the layouts were made from
        (made here from the first connection: ``_learn``)."""
        if self.conn_layout is None:
            if self._unlearnable or not self._learn(conn):
                return False
        if type(conn) is not self.conn_layout.cls:
            return False
        co = self.conn_layout._off
        rcv = _fget(conn, co[N_RECEIVER])
        return (type(_fget(conn, co[N_SENDER])) is self.sender_layout.cls
                and type(_fget(conn, co[N_LAYER])) is self.layer_layout.cls
                and type(rcv) is self.receiver_layout.cls
                and type(_fget(rcv, self.receiver_layout._off[R_RCVBUF])) is self.rcvbuf_layout.cls)

    cdef bint _learn(self, conn) except -1:
        try:
            self.conn_layout = SlotLayout(type(conn), CONN_FIELDS)
            self.sender_layout = SlotLayout(type(conn.sender), SENDER_FIELDS)
            self.layer_layout = SlotLayout(type(conn.layer), LAYER_FIELDS)
            self.rcvbuf_layout = SlotLayout(type(conn.receiver.rcvbuf), RCVBUF_FIELDS)
        except (TypeError, AttributeError):
            self.conn_layout = None
            self._unlearnable = True
            return False
        return True


# What ``Connection.segment_arrives`` and ``TcpLayer`` do around a predicted
# segment, for ``FlowTable.input`` (which hands predicted segments to
# ``EstablishedPath`` without the Python frame): mirrored by name.

cdef inline int _arrived(object conn, object sender, object now) except -1:
    """``Connection.segment_arrives``'s bookkeeping for every segment (keepalive and persist probes answered)."""
    conn.segs_in += 1
    conn._last_rcv = now
    conn._keep_probes = 0
    sender.probes_out = 0
    return 0


cdef inline int64_t _mem_room(object layer) except? -1:
    """``TcpLayer.mem_room()``: bytes the memory budget (``tcp_mem``) can still take."""
    return _as_i64(layer.config.tcp_mem) - _as_i64(layer.mem_used)


cdef int _recharge(object conn, object sender, object receiver) except -1:
    """``Connection._recharge()``: charge what the buffers hold now to the layer's memory budget."""
    cdef int64_t charged = _as_i64(conn._charged), held
    if charged < 0:
        return 0
    rcvbuf = receiver.rcvbuf
    held = (len(sender.sndbuf) + (<ChunkQueue>rcvbuf._chunks).nbytes + _as_i64(rcvbuf.ooo_bytes)
            + _as_i64(rcvbuf.lent))
    if held != charged:
        _charge(conn.layer, held - charged)
        conn._charged = held
    return 0


cdef int _charge(object layer, int64_t delta) except -1:
    """``TcpLayer.charge(delta)``: in C while the budget stays on the same side of its soft level
    (``pressure_level``), else the layer's own method (it counts and logs the change)."""
    cdef int64_t used, level
    cfg = layer.config
    used = _as_i64(layer.mem_used) + delta
    soft = cfg.tcp_mem_pressure
    level = _as_i64(soft) if soft is not None else _as_i64(cfg.tcp_mem) * 3 // 4
    if (used >= level) != bool(layer.under_pressure):
        layer.charge(delta)
    else:
        layer.mem_used = PyLong_FromLongLong(used)
    return 0


cdef inline int _ts_recent(object tcb, Py_ssize_t *off, bint ts_ok, Packet p, object now) except -1:
    """RFC 7323 4.3 (2): TS.Recent from a segment at or before the last ACK sent."""
    if (ts_ok and _seq_le(p.seq, <uint32_t>_iget(tcb, off[T_LAST_ACK_SENT]))
            and not _seq_lt(p._tsval, <uint32_t>_iget(tcb, off[T_TS_RECENT]))):
        _fset(tcb, off[T_TS_RECENT], PyLong_FromUnsignedLong(p._tsval))
        _fset(tcb, off[T_TS_RECENT_AGE], now)
    return 0


# -- demux in C: the 4-tuple of a connection to the connection ------------------
#
# ``FlowTable`` indexes ``TcpLayer.connections`` (IPv4 and IPv6 keys; the layer
# adds and removes entries where it adds and removes connections) with open
# addressing over C keys, so that ``input`` finds the connection of a
# classified segment without building a Python object for the key. The table
# keeps the connections in a Python list (``_conns``, seen by the garbage
# collector) and the slots hold indexes into it.
#
# Remote peers choose the keys, so the hash is keyed (SipHash-1-3 under a
# random per-table key: issue 25) and linear probing is bounded: an insertion
# displaced more than FLOW_PROBE_LIMIT slots from its home is counted
# (tcp.flow_table_probe_limit) and doubles the table while it is under
# FLOW_SPARSE_MAX times its entries (a random key makes that chance alone).

from cpython.list cimport PyList_GET_ITEM
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.sequence cimport PySequence_GetSlice
from libc.stdint cimport uint64_t
from libc.string cimport memcmp, memcpy, memset
from os import urandom as _urandom

cdef struct FlowKey:
    uint64_t la[2]       # addresses as loaded from the packed bytes (memcpy), IPv4 zero-padded
    uint64_t ra[2]
    uint32_t ports       # local port << 16 | remote port
    uint32_t alen        # 4 or 16: an IPv4 key never equals an IPv6 one


cdef enum:
    FLOW_PROBE_LIMIT = 32   # slots an insertion may be displaced before the table grows (counted)
    FLOW_SPARSE_MAX = 8     # the table grows for long probes only while smaller than this many times its entries


cdef struct FlowSlot:
    FlowKey key
    uint8_t used         # 0 empty, 1 in use, 2 deleted (a tombstone)
    Py_ssize_t index     # into FlowTable._conns


cdef inline uint64_t _flow_hash(const FlowKey *k, uint64_t k0, uint64_t k1) noexcept nogil:
    """SipHash-1-3 (_fp_siphash.pxi) under the table's secret key of the key's 40 bytes: the local address, the
    remote one (each 16 bytes, IPv4 zero-padded), the ports (local << 16 | remote) and the address length,
    each a little-endian word of the message on the little-endian machines the fast path builds for."""
    return _siphash13_40(k0, k1, k.la[0], k.la[1], k.ra[0], k.ra[1], <uint64_t>k.ports | (<uint64_t>k.alen << 32))


cdef inline bint _key_eq(const FlowKey *a, const FlowKey *b) noexcept nogil:
    return (a.la[0] == b.la[0] and a.ra[0] == b.ra[0] and a.ports == b.ports and a.la[1] == b.la[1]
            and a.ra[1] == b.ra[1] and a.alen == b.alen)


cdef inline void _key_set(FlowKey *k, const uint8_t *la, const uint8_t *ra, Py_ssize_t alen,
                          uint32_t lport, uint32_t rport) noexcept nogil:
    memset(k, 0, sizeof(FlowKey))
    memcpy(&k.la[0], la, alen)
    memcpy(&k.ra[0], ra, alen)
    k.ports = (lport << 16) | rport
    k.alen = <uint32_t>alen


cdef inline bint _key_of(FlowKey *k, bytes laddr, int lport, bytes raddr, int rport):
    """Fill ``k`` from a Python key; False when the table cannot hold it (not 4- or 16-byte addresses)."""
    cdef Py_ssize_t n = len(laddr)
    if (n != 4 and n != 16) or len(raddr) != n or not 0 <= lport <= 0xffff or not 0 <= rport <= 0xffff:
        return False
    _key_set(k, <const uint8_t *><const char *>laddr, <const uint8_t *><const char *>raddr, n,
             <uint32_t>lport, <uint32_t>rport)
    return True


cdef inline bint _addr_among(const uint8_t *addr, bytes packed) noexcept:
    """Whether the 16-byte ``addr`` is one of the 16-byte addresses laid end to end in ``packed``."""
    cdef const char *base = <const char *>packed
    cdef Py_ssize_t off, n = len(packed)
    for off in range(0, n - 15, 16):
        if memcmp(base + off, addr, 16) == 0:
            return True
    return False


cdef class FlowTable:
    """Established-flow demux in C: (local addr, local port, remote addr, remote port) -> connection (IPv4 and IPv6)."""

    cdef FlowSlot *_slots
    cdef Py_ssize_t _mask
    cdef Py_ssize_t _count       # entries in use
    cdef Py_ssize_t _filled      # in use + tombstones
    cdef list _conns
    cdef list _free              # free indexes of _conns
    cdef object counters         # the stack's Stats counters (collections.Counter)
    cdef uint64_t _k0, _k1       # the SipHash key (_flow_hash): secret, drawn per table
    cdef TcbLayout layout
    cdef EstablishedPath established
    cdef Py_ssize_t _burst_segs  # tcp.in_segs of the burst being delivered (-1: outside deliver_burst)
    cdef public object echo      # an EchoResponder (_fp_echo.pxi) answering ICMP echo requests in C, or None
    cdef object _ours_seen       # the last preferred-address set deliver_burst was given (issue 13) ...
    cdef bytes _ours_packed      # ... and its addresses end to end, compared in C (no bytes object per segment)
    cdef public SynPath syn      # the SYN to a listener in C (_fp_syn.pxi), or None: the stack's path
    cdef public HandshakePath hsk  # the handshake's ACK in C (_fp_hsk.pxi), or None: the stack's path
    cdef public object fin       # the peer's FIN on an established flow in C (_fp_fin.pxi: a FinPath), or None

    def __cinit__(self, counters, TcbLayout layout, EstablishedPath established=None, bytes key=None):
        """``key``: the 16-byte hash key (tests); by default 16 bytes from ``os.urandom``, a new one per table."""
        if key is None:
            key = _urandom(16)
        if len(key) != 16:
            raise ValueError("the flow table's hash key is 16 bytes")
        self._k0 = _le64(<const uint8_t *><const char *>key)
        self._k1 = _le64(<const uint8_t *><const char *>key + 8)
        self.layout = layout
        self.established = established
        self._slots = <FlowSlot *>PyMem_Malloc(64 * sizeof(FlowSlot))
        if self._slots == NULL:
            raise MemoryError()
        memset(self._slots, 0, 64 * sizeof(FlowSlot))
        self._mask = 63
        self._conns = []
        self._free = []
        self.counters = counters
        self._burst_segs = -1
        self._ours_packed = b""

    def __dealloc__(self):
        PyMem_Free(self._slots)

    def __len__(self):
        return self._count

    cdef Py_ssize_t _find(self, const FlowKey *k) noexcept:
        """The slot holding the key, or -1."""
        cdef Py_ssize_t i = <Py_ssize_t>(_flow_hash(k, self._k0, self._k1) & <uint64_t>self._mask)
        cdef FlowSlot *s
        while True:
            s = &self._slots[i]
            if s.used == 0:
                return -1
            if s.used == 1 and _key_eq(&s.key, k):
                return i
            i = (i + 1) & self._mask

    cdef int _grow(self, bint double=False) except -1:
        """Rehash into a table twice the size when half full (or ``double``), else of the same size (the
        tombstones cleared)."""
        cdef Py_ssize_t n = (self._mask + 1) * 2 if double or self._count * 2 >= self._mask else self._mask + 1
        cdef FlowSlot *old = self._slots
        cdef Py_ssize_t old_n = self._mask + 1, k, i
        cdef FlowSlot *new = <FlowSlot *>PyMem_Malloc(n * sizeof(FlowSlot))
        if new == NULL:
            raise MemoryError()
        memset(new, 0, n * sizeof(FlowSlot))
        for k in range(old_n):
            if old[k].used == 1:
                i = <Py_ssize_t>(_flow_hash(&old[k].key, self._k0, self._k1) & <uint64_t>(n - 1))
                while new[i].used:
                    i = (i + 1) & (n - 1)
                new[i] = old[k]
        self._slots = new
        self._mask = n - 1
        self._filled = self._count
        PyMem_Free(old)
        return 0

    def add(self, bytes laddr, int lport, bytes raddr, int rport, conn):
        """Index ``conn`` under its key (replacing what the key held); keys of other address lengths are ignored."""
        cdef FlowKey key
        cdef Py_ssize_t i, idx, home
        cdef FlowSlot *s
        if not _key_of(&key, laddr, lport, raddr, rport):
            return
        i = self._find(&key)
        if i >= 0:
            self._conns[self._slots[i].index] = conn
            return
        if (self._filled + 1) * 2 > self._mask + 1:
            self._grow()
        if self._free:
            idx = self._free.pop()
            self._conns[idx] = conn
        else:
            idx = len(self._conns)
            self._conns.append(conn)
        home = i = <Py_ssize_t>(_flow_hash(&key, self._k0, self._k1) & <uint64_t>self._mask)
        while self._slots[i].used == 1:
            i = (i + 1) & self._mask
        s = &self._slots[i]
        if s.used == 0:
            self._filled += 1
        s.key = key
        s.index = idx
        s.used = 1
        self._count += 1
        if ((i - home) & self._mask) >= FLOW_PROBE_LIMIT:
            counters = self.counters
            counters["tcp.flow_table_probe_limit"] += 1
            if self._mask + 1 < FLOW_SPARSE_MAX * self._count:
                self._grow(True)

    def hash(self, bytes laddr, int lport, bytes raddr, int rport):
        """The key's hash under this table's key (tests and tools); None for a key the table cannot hold."""
        cdef FlowKey key
        if not _key_of(&key, laddr, lport, raddr, rport):
            return None
        return _flow_hash(&key, self._k0, self._k1)

    def probes(self, bytes laddr, int lport, bytes raddr, int rport):
        """How many slots a lookup of the key examines (tests and tools: the demux's cost under a key set)."""
        cdef FlowKey key
        cdef Py_ssize_t i, n = 1
        cdef FlowSlot *s
        if not _key_of(&key, laddr, lport, raddr, rport):
            return 0
        i = <Py_ssize_t>(_flow_hash(&key, self._k0, self._k1) & <uint64_t>self._mask)
        while True:
            s = &self._slots[i]
            if s.used == 0 or (s.used == 1 and _key_eq(&s.key, &key)):
                return n
            i = (i + 1) & self._mask
            n += 1

    @property
    def capacity(self):
        """Slots in the table (a power of two)."""
        return self._mask + 1

    def remove(self, bytes laddr, int lport, bytes raddr, int rport, conn):
        """Drop the key's entry if it is ``conn``'s."""
        cdef FlowKey key
        cdef Py_ssize_t i, idx
        if not _key_of(&key, laddr, lport, raddr, rport):
            return
        i = self._find(&key)
        if i < 0:
            return
        idx = self._slots[i].index
        if self._conns[idx] is not conn:
            return
        self._conns[idx] = None
        self._free.append(idx)
        self._slots[i].used = 2
        self._count -= 1

    def lookup(self, bytes laddr, int lport, bytes raddr, int rport):
        """The connection under the key, or None (for tests and tools)."""
        cdef FlowKey key
        cdef Py_ssize_t i
        if not _key_of(&key, laddr, lport, raddr, rport):
            return None
        i = self._find(&key)
        return None if i < 0 else self._conns[self._slots[i].index]

    def input(self, seg, frame, now):
        """Deliver a classified TCP segment of a connection in the table (any state: the layer's ``Connection``
        entries); False: not one (the caller demuxes).

        ``seg`` is the frame's ``Packet`` (IPv4 or IPv6, checksum verified); the
        connection gets it as ``TcpLayer.segment_arrives`` would hand it on,
        counted under ``tcp.in_segs``: header prediction (``established``, when
        given and the connection uses it) takes it without the Python frame of
        ``Connection.segment_arrives``, which gets the others.
        """
        if type(seg) is not Packet:
            return False
        return self._take(<Packet>seg, frame, now)

    def deliver_burst(self, frames, records, now, deliver, failed, iface6, FrameHold hold=None):
        """A classified burst in order (``Stack.poll``): the TCP segments of the table's flows to their
        connections here (``input``), every other record to ``deliver(frame, record, now)``.

        An exception while delivering one frame goes to ``failed(exc)`` and the
        next frame follows (the stack's per-frame barrier). What the stack's
        ``_deliver`` screens before its TCP handlers holds for a flow's segment
        by construction (its remote address passed them when the connection
        was set up; an IPv4 flow's local address is the interface's), except
        for IPv6, where addresses come and go: an IPv6 segment is taken here
        only while its destination is among ``iface6``'s preferred addresses
        and its source is not (otherwise ``deliver`` screens it). ``hold``
        (the stack's RxHold) is told which frame is being delivered (``at``).
        """
        cdef Py_ssize_t i, n = len(records)
        cdef Packet p
        ours = iface6.preferred_set if iface6 is not None else None
        if ours is not None and ours is not self._ours_seen:  # a new set (NDP replaces it on change)
            self._ours_packed = b"".join(a for a in ours if len(a) == 16)
            self._ours_seen = ours
        self._burst_segs = 0
        try:
            self._deliver_burst(frames, records, n, now, deliver, failed, ours, hold)
        finally:
            if self._burst_segs:
                counters = self.counters
                counters["tcp.in_segs"] += self._burst_segs
            self._burst_segs = -1

    cdef int _deliver_burst(self, frames, records, Py_ssize_t n, now, deliver, failed, ours,
                            FrameHold hold) except -1:
        cdef Py_ssize_t i
        cdef Packet p
        for i in range(n):
            rec = records[i]
            frame = frames[i]
            if hold is not None:  # FrameHold.at(frame)
                hold.current = frame
                hold.seen += 1
            try:
                if type(rec) is Packet:
                    p = <Packet>rec
                    if p.kind == CK_TCP:
                        if self._take(p, frame, now):
                            continue
                        if p.flags == 0x02 and self.syn is not None and self.syn.take(p, now):
                            continue
                        if p.flags == 0x10 and self.hsk is not None and not self._has_flow(p) and self.hsk.take(p, now):
                            continue
                    elif p.kind == CK_TCP6 and ours is not None:
                        packed = self._ours_packed
                        if (_addr_among(p._dst, packed) and not _addr_among(p._src, packed)
                                and self._take(p, frame, now)):
                            continue
                        if p.flags == 0x02 and self.syn is not None and self.syn.take(p, now):
                            continue
                        if p.flags == 0x10 and self.hsk is not None and not self._has_flow(p) and self.hsk.take(p, now):
                            continue
                    elif p.kind == CK_ICMP and self.echo is not None:
                        if self.echo.answer_frame(p, frame, now):
                            continue
                deliver(frame, rec, now)
            except Exception as e:  # the barrier: one frame's bug never stops the burst
                failed(e)

    cdef bint _has_flow(self, Packet p) noexcept:
        """Whether the table holds a connection for ``p``'s 4-tuple (any state): no handshake's record then."""
        cdef FlowKey key
        if p._alen != 4 and p._alen != 16:
            return False
        _key_set(&key, p._dst, p._src, p._alen, <uint32_t>p.dst_port, <uint32_t>p.src_port)
        return self._find(&key) >= 0

    cdef bint _take(self, Packet p, frame, now) except -1:
        cdef FlowKey key
        cdef Py_ssize_t i
        if not ((p.kind == CK_TCP and p._alen == 4) or (p.kind == CK_TCP6 and p._alen == 16)):
            return False
        _key_set(&key, p._dst, p._src, p._alen, <uint32_t>p.dst_port, <uint32_t>p.src_port)
        i = self._find(&key)
        if i < 0:
            return False
        conn = <object>PyList_GET_ITEM(self._conns, self._slots[i].index)
        tcb = conn.tcb
        self.layout._check(tcb)
        if self._burst_segs >= 0:
            self._burst_segs += 1  # counted at the burst's end (deliver_burst)
        else:
            counters = self.counters
            counters["tcp.in_segs"] += 1
        payload = PySequence_GetSlice(frame, p.payload_off, p.payload_off + p.payload_len)
        # Any other state (the handshake's SYN-ACK, the FIN-WAITs, CLOSING, LAST-ACK's last ACK): the flow's
        # connection as ``TcpLayer.segment_arrives`` finds it (the table holds exactly the layer's
        # ``Connection`` entries), without the stack's and layer's Python frames (issue 10).
        if self.established is None or conn._fast is None:
            conn.segment_arrives(p, payload, now)
        elif _iget(tcb, self.layout._off[T_STATE]) != TCPS_ESTABLISHED:
            if not _final_take(self.fin, conn, p, payload, now):  # (LAST-ACK's last ACK: _fp_fin.pxi)
                conn.segment_arrives(p, payload, now)
        elif not self.established._input(conn, p, payload, now, True) and not (
                p.flags & TH_FIN and _fin_take(self.fin, conn, p, payload, now)):
            conn.segment_arrives(p, payload, now)  # the general path (nothing was changed above)
        return True


# -- the per-segment bookkeeping through slot offsets (appended: issue 11, attribute lookups) ---------------
#
# A Cython attribute read by name costs ~140 instructions (type lookup, descriptor); the ~35 of a whole
# predicted segment were ~18% of its receive path (callgrind). ``EstablishedPath._learn`` reads the slots
# below once from the classes of the first connection; ``_arrived_at`` and ``_recharge_at`` are
# ``_arrived`` and ``_recharge`` over them.
CONN_FIELDS = ("tcb", "receiver", "sender", "layer", "orphaned", "segs_in", "_last_rcv", "_keep_probes", "_charged",
               "segs_fast", "on_event", "_notify_due")
cdef enum:
    N_TCB = 0
    N_RECEIVER = 1
    N_SENDER = 2
    N_LAYER = 3
    N_ORPHANED = 4
    N_SEGS_IN = 5
    N_LAST_RCV = 6
    N_KEEP_PROBES = 7
    N_CHARGED = 8
    N_SEGS_FAST = 9
    N_ON_EVENT = 10
    N_NOTIFY_DUE = 11

SENDER_FIELDS = ("sndbuf", "force", "push", "cork_timer", "tx", "recovery", "probes_out")
cdef enum:
    S_SNDBUF = 0
    S_FORCE = 1
    S_PUSH = 2
    S_CORK_TIMER = 3
    S_TX = 4
    S_RECOVERY = 5
    S_PROBES_OUT = 6

LAYER_FIELDS = ("config", "mem_used", "under_pressure")
cdef enum:
    L_CONFIG = 0
    L_MEM_USED = 1
    L_UNDER_PRESSURE = 2

RCVBUF_FIELDS = ("_chunks", "ooo_bytes", "lent", "_runs", "_tick", "last_run", "max_runs")
cdef enum:
    B_CHUNKS = 0
    B_OOO_BYTES = 1
    B_LENT = 2
    B_RUNS = 3
    B_TICK = 4
    B_LAST_RUN = 5
    B_MAX_RUNS = 6


cdef inline int _arrived_at(object conn, Py_ssize_t *co, object sender, Py_ssize_t *so, object now) except -1:
    """``_arrived`` through the slot offsets."""
    _fset(conn, co[N_SEGS_IN], PyLong_FromLongLong(_iget(conn, co[N_SEGS_IN]) + 1))
    _fset(conn, co[N_LAST_RCV], now)
    _fset(conn, co[N_KEEP_PROBES], _ZERO)
    _fset(sender, so[S_PROBES_OUT], _ZERO)
    return 0


cdef int _recharge_at(EstablishedPath ep, object conn, object sender, object receiver) except -1:
    """``_recharge`` (``Connection._recharge``) and ``_charge`` (``TcpLayer.charge``'s common case) through
    the slot offsets."""
    cdef Py_ssize_t *co = ep.conn_layout._off
    cdef Py_ssize_t *bo = ep.rcvbuf_layout._off
    cdef Py_ssize_t *lo = ep.layer_layout._off
    cdef int64_t charged = _iget(conn, co[N_CHARGED]), held, used, level
    if charged < 0:
        return 0
    rcvbuf = _fget(receiver, ep.receiver_layout._off[R_RCVBUF])
    sndbuf = _fget(sender, ep.sender_layout._off[S_SNDBUF])
    held = ((<SendRing>sndbuf)._len if type(sndbuf) is SendRing else len(sndbuf))
    held += ((<ChunkQueue>_fget(rcvbuf, bo[B_CHUNKS])).nbytes + _iget(rcvbuf, bo[B_OOO_BYTES])
             + _iget(rcvbuf, bo[B_LENT]))
    if held != charged:
        layer = _fget(conn, co[N_LAYER])
        cfg = _fget(layer, lo[L_CONFIG])
        used = _iget(layer, lo[L_MEM_USED]) + (held - charged)
        soft = cfg.tcp_mem_pressure
        level = _as_i64(soft) if soft is not None else _as_i64(cfg.tcp_mem) * 3 // 4
        if (used >= level) != _bget(layer, lo[L_UNDER_PRESSURE]):
            layer.charge(held - charged)
        else:
            _fset(layer, lo[L_MEM_USED], PyLong_FromLongLong(used))
        _fset(conn, co[N_CHARGED], PyLong_FromLongLong(held))
    return 0


# -- out-of-order data that extends the highest run (issue 14) ------------------------------------------
#
# Under loss, a sender that keeps sending (Linux's BBR, or any large window) makes everything after a hole
# arrive out of order until the retransmission fills it: at 3% loss kernel -> ustack, 97% of the data
# segments (tcp.ooo_segs / tcp.in_segs, 100 MB). Nearly all of them start exactly where the highest
# out-of-order run ends. ``EstablishedPath._input`` takes those here, with every other condition of a
# predicted data segment (flags, options, window, ACK, memory budget); a segment that would open a new run,
# fill (part of) a hole, overlap or repeat held data goes the Python way (``ReceiveBuffer.write``), the
# reference. What is mirrored, by name: ``ReceiveBuffer._insert``'s in-place extension of one run,
# ``Receiver.receive``'s out-of-order branch and ``Receiver.ooo_ack`` (RFC 5681 4.2: an immediate ACK for
# the first DupThresh out-of-order segments per RCV.NXT, later ones compressed into the round's end ACK
# with SACK). Held to the same state and bytes by tests/tcp/test_tcp_fastpath_diff.py.

cdef enum:
    OOO_DUP_THRESH = 3  # scoreboard.DUP_THRESH (RFC 6675 2), as ``Receiver.ooo_ack`` reads it


cdef object _NEW_RUN = ()  # what _ooo_last_run answers for data above every run: a new run at the top


cdef object _ooo_last_run(object rcvbuf, Py_ssize_t *bo, int64_t ooo_off):
    """The highest out-of-order run (``[start, bytearray, stamp]``) when data at ``ooo_off`` bytes past
    RCV.NXT starts exactly at its end (``ReceiveBuffer._insert`` then extends it in place); ``_NEW_RUN`` when
    it starts past the end of every run (or none is held) and the run bound (``max_runs``) leaves room for one
    more (``_insert`` then adds it at the top: the first segment above a new hole); else None."""
    cdef Py_ssize_t n
    cdef int64_t end
    runs = _fget(rcvbuf, bo[B_RUNS]) if bo != NULL else getattr(rcvbuf, "_runs", None)
    if type(runs) is not list:
        return None
    n = PyList_GET_SIZE(runs)
    if n:
        run = <object>PyList_GET_ITEM(runs, n - 1)
        if type(run) is not list or PyList_GET_SIZE(run) != 3:
            return None
        start = <object>PyList_GET_ITEM(run, 0)
        buf = <object>PyList_GET_ITEM(run, 1)
        if type(start) is not int or type(buf) is not bytearray:
            return None
        end = _as_i64(start) + PyByteArray_GET_SIZE(buf)
        if end == ooo_off:
            return run
        if end > ooo_off:
            return None  # below the top of the highest run: overlaps, holes, duplicates (Python)
    max_runs = _fget(rcvbuf, bo[B_MAX_RUNS]) if bo != NULL else rcvbuf.max_runs
    if n >= max_runs:
        return None  # the run bound: dropped and counted the Python way (tcp.ooo_overflow)
    return _NEW_RUN


cdef int _ooo_append(object receiver, Py_ssize_t *ro, object tcb, Py_ssize_t *off, object rcvbuf, Py_ssize_t *bo,
                     object run, object payload, Py_ssize_t dlen, int64_t ooo_off) except -1:
    """``Receiver.receive`` for data extending ``run`` (``_ooo_last_run``), or opening a new run at the top
    (``run`` is ``_NEW_RUN``, ``ooo_off`` past RCV.NXT): the bytes appended to the run (``ReceiveBuffer._insert``:
    stamp, ``ooo_bytes``, ``last_run``), ``tcp.ooo_segs`` counted, then
    ``Receiver.ooo_ack``: the ACK now for the first DupThresh out-of-order segments at this RCV.NXT (or
    without SACK), else once at the round's end (``tcp.sack_compressed``)."""
    cdef Py_buffer pb
    cdef Py_ssize_t n0
    cdef int64_t acks
    if run is _NEW_RUN:  # a new run at the top (ReceiveBuffer._insert: a copy of the data)
        run = [PyLong_FromLongLong(ooo_off), bytearray(payload), None]
        runs = _fget(rcvbuf, bo[B_RUNS]) if bo != NULL else rcvbuf._runs
        runs.append(run)
        buf = run[1]
    else:
        buf = run[1]
        n0 = PyByteArray_GET_SIZE(buf)
        PyObject_GetBuffer(payload, &pb, PyBUF_SIMPLE)
        try:
            if pb.len != dlen:
                raise ValueError("payload length changed")
            PyByteArray_Resize(buf, n0 + dlen)  # (amortised growth, as bytearray +=)
            memcpy(PyByteArray_AS_STRING(buf) + n0, pb.buf, dlen)
        finally:
            PyBuffer_Release(&pb)
    if bo != NULL:
        tick = PyLong_FromLongLong(_iget(rcvbuf, bo[B_TICK]) + 1)
        _fset(rcvbuf, bo[B_TICK], tick)
        _fset(rcvbuf, bo[B_OOO_BYTES], PyLong_FromLongLong(_iget(rcvbuf, bo[B_OOO_BYTES]) + dlen))
        _fset(rcvbuf, bo[B_LAST_RUN], run[0])
    else:
        tick = rcvbuf._tick + 1
        rcvbuf._tick = tick
        rcvbuf.ooo_bytes += dlen
        rcvbuf.last_run = run[0]
    run[2] = tick
    counters = (<object>_fget(receiver, ro[R_STATS])).counters
    counters["tcp.ooo_segs"] += 1
    # Receiver.ooo_ack
    rcv_nxt = _fget(tcb, off[T_RCV_NXT])
    at = _fget(receiver, ro[R_OOO_ACKS_AT])
    if at is None or at != rcv_nxt:
        _fset(receiver, ro[R_OOO_ACKS_AT], rcv_nxt)
        _fset(receiver, ro[R_OOO_ACKS], _ZERO)
    acks = _iget(receiver, ro[R_OOO_ACKS])
    budget = _fget(receiver, ro[R_BUDGET])
    if acks < OOO_DUP_THRESH or not _bget(tcb, off[T_SACK_OK]) or budget is None:
        _fset(receiver, ro[R_OOO_ACKS], PyLong_FromLongLong(acks + 1))
        _fset(receiver, ro[R_ACK_NOW], True)
    else:
        counters["tcp.sack_compressed"] += 1
        if not _bget(receiver, ro[R_ACK_ROUND]):  # Receiver._ack_at_round_end
            _fset(receiver, ro[R_ACK_ROUND], True)
            budget.ack_at_round_end(_fget(receiver, ro[R_OWNER]))
    return 0


cdef Py_ssize_t _absorb_runs(object rcvbuf, Py_ssize_t *bo, ChunkQueue chunks, Py_ssize_t before,
                             Py_ssize_t dlen) except -1:
    """``ReceiveBuffer.write``'s second half for ``dlen`` bytes just appended at RCV.NXT with runs held: the
    runs slide down by what was appended, those reached join the in-order chunks (no copy: a view of the
    run, no longer ours to change), ``ooo_bytes`` and ``last_run`` follow; returns how far RCV.NXT moves."""
    cdef Py_ssize_t shift = dlen, start, skip, n
    runs = _fget(rcvbuf, bo[B_RUNS]) if bo != NULL else rcvbuf._runs
    ooo = _iget(rcvbuf, bo[B_OOO_BYTES]) if bo != NULL else _as_i64(rcvbuf.ooo_bytes)
    while runs and runs[0][0] <= shift:
        entry = runs.pop(0)
        start = entry[0]
        run = entry[1]
        n = len(run)
        ooo -= n
        skip = shift - start
        if skip < n:
            chunks._push(memoryview(run)[skip:], None)
            shift += n - skip
    for r in runs:
        r[0] -= shift
    last = _fget(rcvbuf, bo[B_LAST_RUN]) if bo != NULL else rcvbuf.last_run
    if last is not None:
        last = last - shift
        if last <= 0:
            last = None
    if bo != NULL:
        _fset(rcvbuf, bo[B_OOO_BYTES], PyLong_FromLongLong(ooo))
        _fset(rcvbuf, bo[B_LAST_RUN], last)
    else:
        rcvbuf.ooo_bytes = ooo
        rcvbuf.last_run = last
    return chunks.nbytes - before


cdef int _old_duplicate(object conn, object tcb, Py_ssize_t *off, object receiver, Py_ssize_t *ro, Py_ssize_t *do,
                        uint32_t seq, Py_ssize_t dlen, object now) except -1:
    """A data segment wholly below RCV.NXT, at most the largest window back (acceptable by PAWS, not by sequence:
    RFC 9293 3.10.7.4 first step; the peer's retransmission, so its ACK is not rate-limited: ``_invalid_ack``):
    dropped (``tcp.unacceptable``), its range reported as a D-SACK block (RFC 2883 4, with SACK), and the ACK
    sent at once without the ACK field processed, as ``Connection._synchronized_arrives`` and
    ``Receiver.duplicate`` do."""
    counters = (<object>_fget(receiver, ro[R_STATS])).counters
    counters["drop.tcp.unacceptable"] += 1
    counters["tcp.unacceptable_old"] += 1  # wholly left of RCV.NXT, as Connection._synchronized_arrives counts it
    if _bget(tcb, off[T_SACK_OK]):
        receiver.dsack = (PyLong_FromUnsignedLong(seq), PyLong_FromUnsignedLong(<uint32_t>(seq + <uint32_t>dlen)))
        _fset(receiver, ro[R_ACK_NOW], True)
    _send_ack(conn, tcb, off, receiver, ro, do, now)
    return 0
