# _fp_ring.pxi: AF_PACKET PACKET_MMAP ring work for backends/packet_ring.py.
#
# Included into ustack/_fastpath.pyx. Batch functions over the mmap'd ring
# (passed as a writable buffer, normally a memoryview of the mapping):
#
#   tpv2_rx_take(ring, frame_size, frame_nr, head, lent, max_frames,
#                frames, statuses) -> (taken, head, truncated, corrupt, notready, valid, losing)
#   tpv2_rx_release(ring, frames, frame_size, frame_nr, lent) -> (released, foreign)
#   tpv3_block_open(ring, block_off, block_size) -> (num_pkts, first_offset)
#   tpv3_rx_take(ring, block_off, block_size, pos, left, max_frames,
#                frames, statuses) -> (taken, pos, left, truncated, notready, valid, losing)
#   tpv3_rx_release(ring, frames, rx_size, block_size, refs) -> (returned, foreign)
#   tpv3_block_unref(ring, refs, block, block_size) -> 1 if the block went back
#   tpv3_tx_available(ring, tx_off, frame_size, frame_nr, head, n) -> (count, reset)
#   tpv3_tx_post(ring, tx_off, frame_size, frame_nr, head, lengths, max_len) -> head
#   tpv3_tx_status(ring, tx_off, frame_size, frame_nr, index) -> tp_status
#
# Layouts are <linux/if_packet.h> (host byte order). The ring is shared with
# a kernel that writes it concurrently, and its contents are treated as
# untrusted: every header field is range-checked against the block / ring
# before it is used as an offset or a length, so corrupt values stop the walk
# instead of reading out of bounds (bounds checks are off in this module).
# Ownership words (block_status, tp_status) are read with acquire and written
# with release ordering, the user-space side of the kernel's smp_wmb/smp_rmb
# protocol in net/packet/af_packet.c.

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.sequence cimport PySequence_GetSlice

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    static inline uint32_t ustack_ring_load_acquire_u32(const unsigned char *p) {
        return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE);
    }
    static inline void ustack_ring_store_release_u32(unsigned char *p, uint32_t v) {
        __atomic_store_n((uint32_t *)p, v, __ATOMIC_RELEASE);
    }
    static inline uint32_t ustack_ring_get_u32(const unsigned char *p) {
        uint32_t v; memcpy(&v, p, 4); return v;
    }
    static inline uint16_t ustack_ring_get_u16(const unsigned char *p) {
        uint16_t v; memcpy(&v, p, 2); return v;
    }
    static inline void ustack_ring_put_u32(unsigned char *p, uint32_t v) {
        memcpy(p, &v, 4);
    }
    """
    unsigned int ustack_ring_load_acquire_u32(const unsigned char *p) nogil
    void ustack_ring_store_release_u32(unsigned char *p, unsigned int v) nogil
    unsigned int ustack_ring_get_u32(const unsigned char *p) nogil
    unsigned short ustack_ring_get_u16(const unsigned char *p) nogil
    void ustack_ring_put_u32(unsigned char *p, unsigned int v) nogil

# tp_status / block_status bits (<linux/if_packet.h>)
TP_STATUS_KERNEL = 0
TP_STATUS_USER = 1
TP_STATUS_COPY = 1 << 1
TP_STATUS_LOSING = 1 << 2
TP_STATUS_CSUMNOTREADY = 1 << 3
TP_STATUS_CSUM_VALID = 1 << 7
TP_STATUS_AVAILABLE = 0
TP_STATUS_SEND_REQUEST = 1
TP_STATUS_SENDING = 2
TP_STATUS_WRONG_FORMAT = 4
# struct tpacket_block_desc: version, offset_to_priv, then tpacket_hdr_v1
TPV3_BLOCK_DESC_LEN = 48
# struct tpacket3_hdr is 48 bytes; TPACKET_ALIGN(48) == 48 is where TX data starts
TPV3_HDR_LEN = 48
# struct tpacket2_hdr is 32 bytes (TPACKET_ALIGN(32) == 32)
TPV2_HDR_LEN = 32
# the per-frame status bits rx_take reports (rx_status in the backend)
TP_STATUS_RX_FLAGS = TP_STATUS_LOSING | TP_STATUS_CSUMNOTREADY | TP_STATUS_CSUM_VALID

cdef enum:
    _TPV3_BLK_STATUS = 8        # tpacket_hdr_v1.block_status
    _TPV3_BLK_NUM_PKTS = 12     # tpacket_hdr_v1.num_pkts
    _TPV3_BLK_FIRST = 16        # tpacket_hdr_v1.offset_to_first_pkt
    _TPV3_BLK_LEN = 20          # tpacket_hdr_v1.blk_len
    _TPV3_H3_NEXT = 0           # tpacket3_hdr.tp_next_offset
    _TPV3_H3_SNAPLEN = 12
    _TPV3_H3_LEN = 16
    _TPV3_H3_STATUS = 20
    _TPV3_H3_MAC = 24           # u16
    _TPV3_H3_SIZE = 48
    _TPV3_DESC_SIZE = 48
    _TPV3_ST_USER = 1
    _TPV3_ST_COPY = 2
    _TPV3_ST_LOSING = 4
    _TPV3_ST_CSUMNOTREADY = 8
    _TPV3_ST_CSUM_VALID = 128
    _TPV3_ST_SEND_REQUEST = 1
    _TPV3_ST_WRONG_FORMAT = 4
    _TPV3_ST_RX_FLAGS = 4 | 8 | 128  # LOSING | CSUMNOTREADY | CSUM_VALID
    _TPV2_STATUS = 0            # tpacket2_hdr.tp_status
    _TPV2_LEN = 4               # tpacket2_hdr.tp_len
    _TPV2_SNAPLEN = 8           # tpacket2_hdr.tp_snaplen
    _TPV2_MAC = 12              # tpacket2_hdr.tp_mac (u16)
    _TPV2_HDR_SIZE = 32


cdef inline int _ring_block_ok(Py_buffer *rb, Py_ssize_t block_off, Py_ssize_t block_size) noexcept:
    """The block lies inside the buffer, is 8-aligned and can hold its descriptor."""
    return (block_off >= 0 and block_size >= _TPV3_DESC_SIZE and (block_off & 7) == 0
            and block_off <= rb.len - block_size)


def tpv3_block_open(object ring, Py_ssize_t block_off, Py_ssize_t block_size):
    """State of the RX block at ``block_off``.

    Returns ``(num_pkts, offset_to_first_pkt)`` when the kernel has handed the
    block to user space (TP_STATUS_USER), ``(-1, 0)`` while it still owns it,
    ``(-2, 0)`` when the descriptor is corrupt (first packet outside the block)
    and ``(-3, 0)`` when the block lies outside the buffer.
    """
    cdef Py_buffer rb
    cdef const unsigned char *blk
    cdef unsigned int status, npkts, first, blen
    PyObject_GetBuffer(ring, &rb, PyBUF_SIMPLE)
    try:
        if not _ring_block_ok(&rb, block_off, block_size):
            return (-3, 0)
        blk = <const unsigned char *>rb.buf + block_off
        status = ustack_ring_load_acquire_u32(blk + _TPV3_BLK_STATUS)
        if not (status & _TPV3_ST_USER):
            return (-1, 0)
        npkts = ustack_ring_get_u32(blk + _TPV3_BLK_NUM_PKTS)
        if npkts == 0:
            return (0, 0)
        first = ustack_ring_get_u32(blk + _TPV3_BLK_FIRST)
        blen = ustack_ring_get_u32(blk + _TPV3_BLK_LEN)
        if (first < _TPV3_DESC_SIZE or (first & 3) != 0
                or <Py_ssize_t>first > block_size - _TPV3_H3_SIZE
                or <Py_ssize_t>blen > block_size):
            return (-2, 0)
        return (<Py_ssize_t>npkts, <Py_ssize_t>first)
    finally:
        PyBuffer_Release(&rb)


def tpv3_rx_take(object ring, Py_ssize_t block_off, Py_ssize_t block_size,
                 Py_ssize_t pos, Py_ssize_t left, Py_ssize_t max_frames,
                 list frames, list statuses):
    """Walk up to ``max_frames`` packets of a user-owned block, lending each one.

    ``pos`` is the offset (within the block) of the next tpacket3_hdr and
    ``left`` how many packets remain in the block. For every packet, appends
    ``ring[start:start + tp_snaplen]`` (a memoryview slice: no copy) to
    ``frames`` and ``tp_status & TP_STATUS_RX_FLAGS`` (LOSING, CSUMNOTREADY,
    CSUM_VALID) to ``statuses``. Truncated packets (tp_snaplen < tp_len,
    TP_STATUS_COPY) are skipped and counted, not lent.

    Returns ``(taken, pos, left, truncated, csum_notready, csum_valid, losing)``;
    ``left == -1`` means the packet chain is corrupt (a header or a frame
    would reach outside the block): the rest of the block must be abandoned.
    """
    cdef Py_buffer rb
    cdef const unsigned char *blk
    cdef const unsigned char *h
    cdef unsigned int nxt, snaplen, plen, status
    cdef unsigned int mac
    cdef Py_ssize_t taken = 0, truncated = 0, notready = 0, valid = 0, losing = 0
    cdef Py_ssize_t start
    if left <= 0 or max_frames <= 0:
        return (0, pos, left, 0, 0, 0, 0)
    PyObject_GetBuffer(ring, &rb, PyBUF_SIMPLE)
    try:
        if not _ring_block_ok(&rb, block_off, block_size):
            return (0, pos, -1, 0, 0, 0, 0)
        blk = <const unsigned char *>rb.buf + block_off
        while left > 0 and taken < max_frames:
            if pos < _TPV3_DESC_SIZE or (pos & 3) != 0 or pos > block_size - _TPV3_H3_SIZE:
                left = -1
                break
            h = blk + pos
            snaplen = ustack_ring_get_u32(h + _TPV3_H3_SNAPLEN)
            plen = ustack_ring_get_u32(h + _TPV3_H3_LEN)
            status = ustack_ring_get_u32(h + _TPV3_H3_STATUS)
            mac = ustack_ring_get_u16(h + _TPV3_H3_MAC)
            if mac < _TPV3_H3_SIZE or <Py_ssize_t>snaplen > block_size - pos - <Py_ssize_t>mac:
                left = -1
                break
            if snaplen < plen or (status & _TPV3_ST_COPY):
                truncated += 1
            else:
                start = block_off + pos + mac
                frames.append(PySequence_GetSlice(ring, start, start + snaplen))
                statuses.append(status & _TPV3_ST_RX_FLAGS)
                if status & _TPV3_ST_CSUMNOTREADY:
                    notready += 1
                if status & _TPV3_ST_CSUM_VALID:
                    valid += 1
                if status & _TPV3_ST_LOSING:
                    losing += 1
                taken += 1
            left -= 1
            if left > 0:
                nxt = ustack_ring_get_u32(h + _TPV3_H3_NEXT)
                # the next header must lie strictly after this one, inside the block
                if nxt < _TPV3_H3_SIZE or <Py_ssize_t>nxt > block_size - pos - _TPV3_H3_SIZE:
                    left = -1
                    break
                pos += nxt
        return (taken, pos, left, truncated, notready, valid, losing)
    finally:
        PyBuffer_Release(&rb)


cdef inline int _ring_unref(Py_buffer *rb, int *refs, Py_ssize_t blockno,
                            Py_ssize_t block_size) noexcept:
    """Drop one reference on a block; at zero hand it back to the kernel. 1 if returned."""
    refs[blockno] -= 1
    if refs[blockno] == 0:
        ustack_ring_store_release_u32(<unsigned char *>rb.buf + blockno * block_size + _TPV3_BLK_STATUS, 0)
        return 1
    return 0


def tpv3_rx_release(object ring, frames, Py_ssize_t rx_size, Py_ssize_t block_size, object refs):
    """Return lent frames: one reference each on the block they point into.

    ``refs`` is a writable buffer of C ints (``array('i')``), one per RX
    block: lent frames plus one while the RX cursor is still in the block.
    A block whose count reaches zero goes back to the kernel
    (block_status = TP_STATUS_KERNEL, release store). Returns
    ``(blocks_returned, foreign)``; ``foreign`` counts views that do not point
    into the RX ring or whose block holds no reference (double release).
    """
    cdef Py_buffer rb, cb, fb
    cdef int *counts
    cdef Py_ssize_t nblocks, off, blockno
    cdef Py_ssize_t returned = 0, foreign = 0
    PyObject_GetBuffer(ring, &rb, PyBUF_WRITABLE)
    try:
        PyObject_GetBuffer(refs, &cb, PyBUF_WRITABLE)
        try:
            if block_size <= 0 or rx_size < 0 or rx_size > rb.len:
                raise ValueError("bad ring geometry")
            counts = <int *>cb.buf
            nblocks = cb.len // <Py_ssize_t>sizeof(int)
            if nblocks * block_size < rx_size:
                raise ValueError("refs shorter than the ring")
            for frame in frames:
                try:
                    PyObject_GetBuffer(frame, &fb, PyBUF_SIMPLE)
                except (TypeError, ValueError, BufferError):
                    foreign += 1
                    continue
                off = <Py_ssize_t>(<const char *>fb.buf - <const char *>rb.buf)
                PyBuffer_Release(&fb)
                if off < 0 or off >= rx_size:
                    foreign += 1
                    continue
                blockno = off // block_size
                if counts[blockno] <= 0:
                    foreign += 1
                    continue
                returned += _ring_unref(&rb, counts, blockno, block_size)
            return (returned, foreign)
        finally:
            PyBuffer_Release(&cb)
    finally:
        PyBuffer_Release(&rb)


def tpv3_block_unref(object ring, object refs, Py_ssize_t blockno, Py_ssize_t block_size):
    """Drop the RX cursor's reference on block ``blockno``; 1 if the block went back to the kernel."""
    cdef Py_buffer rb, cb
    cdef int *counts
    PyObject_GetBuffer(ring, &rb, PyBUF_WRITABLE)
    try:
        PyObject_GetBuffer(refs, &cb, PyBUF_WRITABLE)
        try:
            counts = <int *>cb.buf
            if (blockno < 0 or blockno >= cb.len // <Py_ssize_t>sizeof(int) or block_size <= 0
                    or (blockno + 1) * block_size > rb.len):
                raise ValueError("block out of range")
            if counts[blockno] <= 0:
                return 0
            return _ring_unref(&rb, counts, blockno, block_size)
        finally:
            PyBuffer_Release(&cb)
    finally:
        PyBuffer_Release(&rb)


# -- TPACKET_V2 RX: fixed slots, one tp_status word per frame -------------------
#
# The kernel fills slot `head` only while its tp_status is TP_STATUS_KERNEL and
# advances strictly in order (it drops the frame, and does not move on, when
# that slot is still ours); each frame is handed over on its own (tp_status |=
# TP_STATUS_USER, then a wake-up), with no block to wait for. Slot i of a ring
# whose blocks are a multiple of frame_size lies at i * frame_size in the
# mapping. ``lent`` (one byte per slot) marks the slots lent out and not yet
# released: such a slot still says TP_STATUS_USER, so the walker stops there
# instead of lending it again, and since the kernel cannot have passed it
# either, slots released out of order behind it are never skipped.


cdef inline int _ring_v2_ok(Py_buffer *rb, Py_buffer *lb, Py_ssize_t frame_size,
                            Py_ssize_t frame_nr) noexcept:
    """frame_nr slots of frame_size bytes fit the ring, and ``lent`` has a byte per slot."""
    return (frame_size >= _TPV2_HDR_SIZE and (frame_size & 15) == 0 and frame_nr > 0
            and frame_nr <= rb.len // frame_size and lb.len >= frame_nr)


def tpv2_rx_take(object ring, Py_ssize_t frame_size, Py_ssize_t frame_nr, Py_ssize_t head,
                 object lent, Py_ssize_t max_frames, list frames, list statuses):
    """Lend up to ``max_frames`` frames from slot ``head`` on, in ring order.

    Walks while the slot is not lent and its tp_status (acquire load) has
    TP_STATUS_USER. Each good frame is appended to ``frames`` as
    ``ring[slot + tp_mac : slot + tp_mac + tp_snaplen]`` (a memoryview slice:
    no copy), its ``tp_status & TP_STATUS_RX_FLAGS`` to ``statuses``, and the
    slot is marked in ``lent`` (a writable buffer of at least ``frame_nr``
    bytes). A slot whose tp_mac/tp_snaplen reach outside it (corrupt) or whose
    frame was truncated (tp_snaplen < tp_len, TP_STATUS_COPY) is not lent: it
    goes straight back to the kernel (release store of TP_STATUS_KERNEL) and
    is counted.

    Returns ``(taken, head, truncated, corrupt, csum_notready, csum_valid,
    losing)``; ``head`` is the next slot to look at. ValueError when the
    geometry does not fit the buffers.
    """
    cdef Py_buffer rb, lb
    cdef unsigned char *base
    cdef unsigned char *slot
    cdef unsigned char *lentp
    cdef unsigned int status, snaplen, plen, mac
    cdef Py_ssize_t taken = 0, truncated = 0, corrupt = 0, notready = 0, valid = 0, losing = 0
    cdef Py_ssize_t steps = 0, start
    PyObject_GetBuffer(ring, &rb, PyBUF_WRITABLE)
    try:
        PyObject_GetBuffer(lent, &lb, PyBUF_WRITABLE)
        try:
            if not _ring_v2_ok(&rb, &lb, frame_size, frame_nr) or not 0 <= head < frame_nr:
                raise ValueError("bad TPACKET_V2 ring geometry")
            base = <unsigned char *>rb.buf
            lentp = <unsigned char *>lb.buf
            # at most one lap: every step either lends a slot (which then stops
            # the walk when it comes round again) or hands it to the kernel
            while taken < max_frames and steps < frame_nr:
                if lentp[head]:
                    break
                slot = base + head * frame_size
                status = ustack_ring_load_acquire_u32(slot + _TPV2_STATUS)
                if not (status & _TPV3_ST_USER):
                    break
                steps += 1
                plen = ustack_ring_get_u32(slot + _TPV2_LEN)
                snaplen = ustack_ring_get_u32(slot + _TPV2_SNAPLEN)
                mac = ustack_ring_get_u16(slot + _TPV2_MAC)
                # the frame lies inside its slot, after the header; mac < frame_size
                # also for an empty frame, so that its view maps back to this slot
                if (mac < _TPV2_HDR_SIZE or <Py_ssize_t>mac >= frame_size
                        or <Py_ssize_t>snaplen > frame_size - <Py_ssize_t>mac):
                    corrupt += 1
                    ustack_ring_store_release_u32(slot + _TPV2_STATUS, 0)
                elif snaplen < plen or (status & _TPV3_ST_COPY):
                    truncated += 1
                    ustack_ring_store_release_u32(slot + _TPV2_STATUS, 0)
                else:
                    start = head * frame_size + mac
                    frames.append(PySequence_GetSlice(ring, start, start + snaplen))
                    statuses.append(status & _TPV3_ST_RX_FLAGS)
                    lentp[head] = 1
                    if status & _TPV3_ST_CSUMNOTREADY:
                        notready += 1
                    if status & _TPV3_ST_CSUM_VALID:
                        valid += 1
                    if status & _TPV3_ST_LOSING:
                        losing += 1
                    taken += 1
                head += 1
                if head == frame_nr:
                    head = 0
            return (taken, head, truncated, corrupt, notready, valid, losing)
        finally:
            PyBuffer_Release(&lb)
    finally:
        PyBuffer_Release(&rb)


def tpv2_rx_release(object ring, frames, Py_ssize_t frame_size, Py_ssize_t frame_nr, object lent):
    """Return lent frames to the kernel, in any order: for each view, the slot it
    points into is unmarked in ``lent`` and its tp_status set to
    TP_STATUS_KERNEL (release store, after every read of the frame).

    Returns ``(released, foreign)``; ``foreign`` counts views that do not
    point into the ring's slots or whose slot is not lent (double release).
    """
    cdef Py_buffer rb, lb, fb
    cdef unsigned char *lentp
    cdef Py_ssize_t off, index, released = 0, foreign = 0
    PyObject_GetBuffer(ring, &rb, PyBUF_WRITABLE)
    try:
        PyObject_GetBuffer(lent, &lb, PyBUF_WRITABLE)
        try:
            if not _ring_v2_ok(&rb, &lb, frame_size, frame_nr):
                raise ValueError("bad TPACKET_V2 ring geometry")
            lentp = <unsigned char *>lb.buf
            for frame in frames:
                try:
                    PyObject_GetBuffer(frame, &fb, PyBUF_SIMPLE)
                except (TypeError, ValueError, BufferError):
                    foreign += 1
                    continue
                off = <Py_ssize_t>(<const char *>fb.buf - <const char *>rb.buf)
                PyBuffer_Release(&fb)
                if off < 0 or off >= frame_nr * frame_size:
                    foreign += 1
                    continue
                index = off // frame_size
                if not lentp[index]:
                    foreign += 1
                    continue
                lentp[index] = 0
                ustack_ring_store_release_u32(<unsigned char *>rb.buf + index * frame_size + _TPV2_STATUS, 0)
                released += 1
            return (released, foreign)
        finally:
            PyBuffer_Release(&lb)
    finally:
        PyBuffer_Release(&rb)


cdef inline int _ring_tx_geometry_ok(Py_buffer *rb, Py_ssize_t tx_off, Py_ssize_t frame_size,
                                     Py_ssize_t frame_nr, Py_ssize_t head) noexcept:
    return (tx_off >= 0 and frame_size >= _TPV3_H3_SIZE and (frame_size & 15) == 0
            and (tx_off & 15) == 0 and frame_nr > 0 and 0 <= head < frame_nr
            and tx_off <= rb.len and frame_nr <= (rb.len - tx_off) // frame_size)


def tpv3_tx_available(object ring, Py_ssize_t tx_off, Py_ssize_t frame_size,
                      Py_ssize_t frame_nr, Py_ssize_t head, Py_ssize_t n):
    """Count consecutive free TX slots (TP_STATUS_AVAILABLE) from ``head``, at most ``n``.

    Slots the kernel rejected (TP_STATUS_WRONG_FORMAT) are reset to available
    and counted. Returns ``(count, reset)``.
    """
    cdef Py_buffer rb
    cdef unsigned char *slot
    cdef unsigned int status
    cdef Py_ssize_t count = 0, reset = 0, i = head
    PyObject_GetBuffer(ring, &rb, PyBUF_WRITABLE)
    try:
        if not _ring_tx_geometry_ok(&rb, tx_off, frame_size, frame_nr, head):
            raise ValueError("bad TX ring geometry")
        if n > frame_nr:
            n = frame_nr
        while count < n:
            slot = <unsigned char *>rb.buf + tx_off + i * frame_size
            status = ustack_ring_load_acquire_u32(slot + _TPV3_H3_STATUS)
            if status == _TPV3_ST_WRONG_FORMAT:
                ustack_ring_store_release_u32(slot + _TPV3_H3_STATUS, 0)
                reset += 1
            elif status != 0:
                break
            count += 1
            i += 1
            if i == frame_nr:
                i = 0
        return (count, reset)
    finally:
        PyBuffer_Release(&rb)


def tpv3_tx_post(object ring, Py_ssize_t tx_off, Py_ssize_t frame_size, Py_ssize_t frame_nr,
                 Py_ssize_t head, lengths, Py_ssize_t max_len):
    """Hand ``len(lengths)`` slots from ``head`` to the kernel; returns the new head.

    Every length is checked (14 <= length <= max_len, and max_len fits the
    slot after its 48-byte header) before any slot is touched, so a bad
    length posts nothing (ValueError). Per slot: tp_len/tp_snaplen set,
    tp_next_offset zeroed (the kernel refuses variable-sized TX slots), then
    tp_status = TP_STATUS_SEND_REQUEST with a release store.
    """
    cdef Py_buffer rb
    cdef unsigned char *slot
    cdef Py_ssize_t i, k, count
    cdef Py_ssize_t length
    cdef list lens = list(lengths)
    count = len(lens)
    PyObject_GetBuffer(ring, &rb, PyBUF_WRITABLE)
    try:
        if not _ring_tx_geometry_ok(&rb, tx_off, frame_size, frame_nr, head):
            raise ValueError("bad TX ring geometry")
        if max_len > frame_size - _TPV3_H3_SIZE or count > frame_nr:
            raise ValueError("bad TX ring geometry")
        for k in range(count):
            length = lens[k]
            if length < 14 or length > max_len:
                raise ValueError(f"TX frame length {length} outside 14..{max_len}")
        i = head
        for k in range(count):
            length = lens[k]
            slot = <unsigned char *>rb.buf + tx_off + i * frame_size
            ustack_ring_put_u32(slot + _TPV3_H3_NEXT, 0)
            ustack_ring_put_u32(slot + _TPV3_H3_SNAPLEN, <unsigned int>length)
            ustack_ring_put_u32(slot + _TPV3_H3_LEN, <unsigned int>length)
            ustack_ring_store_release_u32(slot + _TPV3_H3_STATUS, _TPV3_ST_SEND_REQUEST)
            i += 1
            if i == frame_nr:
                i = 0
        return i
    finally:
        PyBuffer_Release(&rb)


def tpv3_tx_status(object ring, Py_ssize_t tx_off, Py_ssize_t frame_size, Py_ssize_t frame_nr,
                   Py_ssize_t index):
    """tp_status of TX slot ``index`` (acquire load): still TP_STATUS_SEND_REQUEST
    after a kick means the kernel has not taken that slot yet."""
    cdef Py_buffer rb
    PyObject_GetBuffer(ring, &rb, PyBUF_SIMPLE)
    try:
        if not _ring_tx_geometry_ok(&rb, tx_off, frame_size, frame_nr, index):
            raise ValueError("bad TX ring geometry")
        return ustack_ring_load_acquire_u32(<const unsigned char *>rb.buf + tx_off
                                            + index * frame_size + _TPV3_H3_STATUS)
    finally:
        PyBuffer_Release(&rb)
