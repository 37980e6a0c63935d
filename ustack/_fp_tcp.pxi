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
#   here) or new data below SND.MAX (the Sender's ``on_ack``, one call);
# - a pure ACK (no data): it acknowledges new data (SND.UNA < SEG.ACK <=
#   SND.MAX) and no FIN of ours is queued; the Sender's ``on_ack`` takes it.
#   Duplicate ACKs and window updates go the Python way.
#
# Then: TS.Recent (RFC 7323 4.3), the payload appended to the receive
# buffer (a view into the held RX frame, ``ustack.rxhold``), RCV.NXT and
# the ACK policy by ``Receiver.in_order`` (the one
# implementation of ``delack``'s rules), the output loop (skipped when it has
# nothing to send and no timer to touch: an empty send buffer, nothing
# outstanding, no FIN, no cork timer), and the ACK if the policy says it is
# owed now. Python code this file relies on by name: ``Connection`` (tcb,
# receiver, sender, out, layer.mem_room, layer.under_pressure, orphaned, segment_arrives),
# ``Receiver`` (rcvbuf.append, rcvbuf.ooo_bytes, in_order, ack_now),
# ``Sender`` (on_ack, output, recovery.after_ack, len(sndbuf), force, push,
# cork_timer), ``Output.send_ack``.

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


cdef class EstablishedPath:
    """Receive header prediction over the TCBs of one layout (``TcbLayout(Tcb)``); see the top of the file."""

    cdef readonly TcbLayout layout

    def __cinit__(self, TcbLayout layout):
        self.layout = layout

    def input(self, conn, seg, payload, now):
        """Receive header prediction for one segment of ``conn``; True when it was handled here.

        False means nothing was changed: the caller runs the general path.
        ``payload`` is the segment's data (a buffer of exactly its length).
        """
        cdef Packet p
        cdef Py_ssize_t *off = self.layout._off
        cdef uint32_t seq, ack, una, snd_max, wl1, rcv_nxt
        cdef int64_t rcv_wnd, seg_wnd, old_wnd
        cdef Py_ssize_t dlen, before
        cdef int flags
        cdef bint wnd_update = False, ts_ok
        if type(seg) is not Packet:
            return False
        p = <Packet>seg
        tcb = conn.tcb
        self.layout._check(tcb)
        if _iget(tcb, off[T_STATE]) != TCPS_ESTABLISHED:
            return False
        flags = p.flags
        if (flags & ~TH_PSH) != TH_ACK:
            return False
        if p._nsack or p._unklen or p.sack_permitted:
            return False
        ts_ok = _bget(tcb, off[T_TS_OK])
        if ts_ok:
            if p._opts != OPTF_TIMESTAMPS or _seq_lt(p._tsval, <uint32_t>_iget(tcb, off[T_TS_RECENT])):
                return False
        elif p._opts:
            return False
        seq = p.seq
        rcv_nxt = <uint32_t>_iget(tcb, off[T_RCV_NXT])
        if seq != rcv_nxt:
            return False
        ack = p.ack
        una = <uint32_t>_iget(tcb, off[T_SND_UNA])
        snd_max = <uint32_t>_iget(tcb, off[T_SND_MAX])
        dlen = len(payload)
        receiver = conn.receiver
        sender = conn.sender
        if dlen == 0:
            # A pure ACK for new data.
            if not (_seq_lt(una, ack) and _seq_le(ack, snd_max)) or _bget(tcb, off[T_FIN_QUEUED]):
                return False
            _ts_recent(tcb, off, ts_ok, p, now)
            sender.on_ack(seg, 0, now)
        else:
            rcv_wnd = <int32_t>(<uint32_t>_iget(tcb, off[T_RCV_ADV]) - seq)
            if dlen > rcv_wnd:
                return False
            if ack != una:
                if not (_seq_lt(una, ack) and _seq_le(ack, snd_max)) or _bget(tcb, off[T_FIN_QUEUED]):
                    return False
            rcvbuf = receiver.rcvbuf
            if rcvbuf.ooo_bytes or _fget(tcb, off[T_FIN_RCVD_SEQ]) is not None or conn.orphaned:
                return False
            layer = conn.layer
            if layer.under_pressure or layer.mem_room() < dlen:
                return False  # the memory budget's soft or hard level: the Python path trims and drops
            seg_wnd = (<int64_t>p.window) << _iget(tcb, off[T_SND_WSCALE])
            old_wnd = _iget(tcb, off[T_SND_WND])
            if ack == una:
                wl1 = <uint32_t>_iget(tcb, off[T_SND_WL1])
                wnd_update = _seq_lt(wl1, seq) or (wl1 == seq and _seq_le(<uint32_t>_iget(tcb, off[T_SND_WL2]), ack))
                if wnd_update and old_wnd == 0 and seg_wnd:
                    return False  # the window opens: persist timer work, the Python way
            # Committed from here on.
            _ts_recent(tcb, off, ts_ok, p, now)
            if ack == una:
                # Sender.on_ack without SND.UNA moving and with data (never a duplicate ACK).
                if wnd_update:
                    if seg_wnd != old_wnd:
                        _fset(tcb, off[T_SND_WND], seg_wnd)
                    _fset(tcb, off[T_SND_WL1], seq)
                    _fset(tcb, off[T_SND_WL2], ack)
                    if seg_wnd > _iget(tcb, off[T_MAX_SND_WND]):
                        _fset(tcb, off[T_MAX_SND_WND], seg_wnd)
                if snd_max != una:
                    sender.recovery.after_ack(ack, (), now)
            else:
                sender.on_ack(seg, dlen, now)
            # Seventh step: the text, appended in order (ReceiveBuffer.write at offset 0, no runs).
            # (a view into the RX frame, held, when the stack's RxHold takes it: ReceiveBuffer.append)
            before = len(rcvbuf)
            rcvbuf.append(payload)
            receiver.in_order(dlen, dlen, False, before, now, bool(flags & TH_PSH))
        if _iget(tcb, off[T_STATE]) != TCPS_CLOSED:
            if (_iget(tcb, off[T_SND_MAX]) != _iget(tcb, off[T_SND_UNA])
                    or _iget(tcb, off[T_SND_NXT]) != _iget(tcb, off[T_SND_UNA]) or _bget(tcb, off[T_FIN_QUEUED])
                    or len(sender.sndbuf) or sender.force or sender.push
                    or sender.cork_timer.deadline is not None):
                sender.output(now)  # (otherwise it has nothing to send and no timer to change)
            if receiver.ack_now:
                conn.out.send_ack(now)
        return True


cdef inline int _ts_recent(object tcb, Py_ssize_t *off, bint ts_ok, Packet p, object now) except -1:
    """RFC 7323 4.3 (2): TS.Recent from a segment at or before the last ACK sent."""
    if (ts_ok and _seq_le(p.seq, <uint32_t>_iget(tcb, off[T_LAST_ACK_SENT]))
            and not _seq_lt(p._tsval, <uint32_t>_iget(tcb, off[T_TS_RECENT]))):
        _fset(tcb, off[T_TS_RECENT], PyLong_FromUnsignedLong(p._tsval))
        _fset(tcb, off[T_TS_RECENT_AGE], now)
    return 0


# -- demux in C: the 4-tuple of a connection to the connection ------------------
#
# ``FlowTable`` indexes ``TcpLayer.connections`` (IPv4 keys; the layer adds and
# removes entries where it adds and removes connections) with open addressing
# over C keys, so that ``input`` finds the connection of a classified segment
# without building a Python object for the key. The table keeps the
# connections in a Python list (``_conns``, seen by the garbage collector) and
# the slots hold indexes into it.

from cpython.list cimport PyList_GET_ITEM
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.sequence cimport PySequence_GetSlice
from libc.stdint cimport uint64_t
from libc.string cimport memcpy, memset

cdef struct FlowSlot:
    uint32_t laddr       # addresses as loaded from the packed 4 bytes (memcpy)
    uint32_t raddr
    uint16_t lport
    uint16_t rport
    uint8_t used         # 0 empty, 1 in use, 2 deleted (a tombstone)
    Py_ssize_t index     # into FlowTable._conns


cdef inline uint64_t _flow_hash(uint32_t la, uint32_t ra, uint16_t lp, uint16_t rp) noexcept nogil:
    cdef uint64_t h = ((<uint64_t>la << 32) | ra) * <uint64_t>0x9E3779B97F4A7C15ULL
    h ^= ((<uint64_t>lp << 16) | rp) * <uint64_t>0xC2B2AE3D27D4EB4FULL
    return h ^ (h >> 29)


cdef class FlowTable:
    """Established-flow demux in C: (local addr, local port, remote addr, remote port) -> connection."""

    cdef FlowSlot *_slots
    cdef Py_ssize_t _mask
    cdef Py_ssize_t _count       # entries in use
    cdef Py_ssize_t _filled      # in use + tombstones
    cdef list _conns
    cdef list _free              # free indexes of _conns
    cdef object counters         # the stack's Stats counters (collections.Counter)
    cdef TcbLayout layout

    def __cinit__(self, counters, TcbLayout layout):
        self.layout = layout
        self._slots = <FlowSlot *>PyMem_Malloc(64 * sizeof(FlowSlot))
        if self._slots == NULL:
            raise MemoryError()
        memset(self._slots, 0, 64 * sizeof(FlowSlot))
        self._mask = 63
        self._conns = []
        self._free = []
        self.counters = counters

    def __dealloc__(self):
        PyMem_Free(self._slots)

    def __len__(self):
        return self._count

    cdef Py_ssize_t _find(self, uint32_t la, uint16_t lp, uint32_t ra, uint16_t rp) noexcept:
        """The slot holding the key, or -1."""
        cdef Py_ssize_t i = <Py_ssize_t>(_flow_hash(la, ra, lp, rp) & <uint64_t>self._mask)
        cdef FlowSlot *s
        while True:
            s = &self._slots[i]
            if s.used == 0:
                return -1
            if s.used == 1 and s.laddr == la and s.raddr == ra and s.lport == lp and s.rport == rp:
                return i
            i = (i + 1) & self._mask

    cdef int _grow(self) except -1:
        cdef Py_ssize_t n = (self._mask + 1) * 2 if self._count * 2 >= self._mask else self._mask + 1
        cdef FlowSlot *old = self._slots
        cdef Py_ssize_t old_n = self._mask + 1, k, i
        cdef FlowSlot *new = <FlowSlot *>PyMem_Malloc(n * sizeof(FlowSlot))
        if new == NULL:
            raise MemoryError()
        memset(new, 0, n * sizeof(FlowSlot))
        for k in range(old_n):
            if old[k].used == 1:
                i = <Py_ssize_t>(_flow_hash(old[k].laddr, old[k].raddr, old[k].lport, old[k].rport) & <uint64_t>(n - 1))
                while new[i].used:
                    i = (i + 1) & (n - 1)
                new[i] = old[k]
        self._slots = new
        self._mask = n - 1
        self._filled = self._count
        PyMem_Free(old)
        return 0

    def add(self, bytes laddr, int lport, bytes raddr, int rport, conn):
        """Index ``conn`` under its key (replacing what the key held); IPv4 keys only, others are ignored."""
        cdef uint32_t la, ra
        cdef Py_ssize_t i, idx
        cdef FlowSlot *s
        if len(laddr) != 4 or len(raddr) != 4 or not 0 <= lport <= 0xffff or not 0 <= rport <= 0xffff:
            return
        memcpy(&la, <const char *>laddr, 4)
        memcpy(&ra, <const char *>raddr, 4)
        i = self._find(la, <uint16_t>lport, ra, <uint16_t>rport)
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
        i = <Py_ssize_t>(_flow_hash(la, ra, <uint16_t>lport, <uint16_t>rport) & <uint64_t>self._mask)
        while self._slots[i].used == 1:
            i = (i + 1) & self._mask
        s = &self._slots[i]
        if s.used == 0:
            self._filled += 1
        s.laddr = la
        s.raddr = ra
        s.lport = <uint16_t>lport
        s.rport = <uint16_t>rport
        s.index = idx
        s.used = 1
        self._count += 1

    def remove(self, bytes laddr, int lport, bytes raddr, int rport, conn):
        """Drop the key's entry if it is ``conn``'s."""
        cdef uint32_t la, ra
        cdef Py_ssize_t i, idx
        if len(laddr) != 4 or len(raddr) != 4 or not 0 <= lport <= 0xffff or not 0 <= rport <= 0xffff:
            return
        memcpy(&la, <const char *>laddr, 4)
        memcpy(&ra, <const char *>raddr, 4)
        i = self._find(la, <uint16_t>lport, ra, <uint16_t>rport)
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
        cdef uint32_t la, ra
        cdef Py_ssize_t i
        if len(laddr) != 4 or len(raddr) != 4 or not 0 <= lport <= 0xffff or not 0 <= rport <= 0xffff:
            return None
        memcpy(&la, <const char *>laddr, 4)
        memcpy(&ra, <const char *>raddr, 4)
        i = self._find(la, <uint16_t>lport, ra, <uint16_t>rport)
        return None if i < 0 else self._conns[self._slots[i].index]

    def input(self, seg, frame, double now):
        """Deliver a classified TCP segment of an ESTABLISHED connection; False: not one (the caller demuxes).

        ``seg`` is the frame's ``Packet`` (IPv4, checksum verified); the
        connection gets it as ``TcpLayer.segment_arrives`` would hand it on,
        counted under ``tcp.in_segs``.
        """
        cdef Packet p
        cdef uint32_t la, ra
        cdef Py_ssize_t i
        if type(seg) is not Packet:
            return False
        p = <Packet>seg
        if p._alen != 4 or p.kind != CK_TCP:
            return False
        memcpy(&la, p._dst, 4)
        memcpy(&ra, p._src, 4)
        i = self._find(la, <uint16_t>p.dst_port, ra, <uint16_t>p.src_port)
        if i < 0:
            return False
        conn = <object>PyList_GET_ITEM(self._conns, self._slots[i].index)
        tcb = conn.tcb
        self.layout._check(tcb)
        if _iget(tcb, self.layout._off[T_STATE]) != TCPS_ESTABLISHED:
            return False
        counters = self.counters
        counters["tcp.in_segs"] += 1
        conn.segment_arrives(seg, PySequence_GetSlice(frame, p.payload_off, p.payload_off + p.payload_len), now)
        return True
