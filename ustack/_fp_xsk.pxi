# AF_XDP ring producer/consumer operations (included into ustack._fastpath).
#
# The four AF_XDP rings are single-producer/single-consumer queues shared with
# the kernel (Documentation/networking/af_xdp.rst):
#   fill (we produce UMEM frame addresses for the kernel to receive into),
#   rx (kernel produces descriptors {addr, len, options}),
#   tx (we produce descriptors), completion (kernel returns sent addresses).
# Memory ordering follows the kernel's xsk_queue.h contract: the consumer
# load-acquires the peer's producer index before reading descriptors, and
# store-releases its own consumer index after it is done with them; the
# producer writes descriptors, then store-releases its producer index.
#
# XskRing wraps one mmap'd ring. XskDataPath is the data path of one AF_XDP
# socket: it lends received frames as memoryviews into the UMEM, takes them
# back onto the fill ring, hands out TX slots and posts them, and reaps the
# completion ring. Every descriptor the kernel gives us is validated (inside
# the UMEM region it belongs to, inside one frame, frame owned by the kernel)
# before it is used; a bad one is a counted drop, never a crash.

from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from libc.errno cimport errno, EAGAIN, EBUSY, ENOBUFS, ENETDOWN, ENXIO, EINTR
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_WRITABLE
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.memoryview cimport PyMemoryView_Check, PyMemoryView_GET_BUFFER, PyMemoryView_FromObject
from cpython.bytearray cimport PyByteArray_FromStringAndSize, PyByteArray_AS_STRING
from cpython.list cimport PyList_GET_SIZE, PyList_GET_ITEM
from posix.uio cimport iovec

cdef extern from *:
    """
    #include <sys/types.h>
    #include <sys/socket.h>
    /* Ring index ordering (load-acquire the peer's index, store-release ours). */
    static inline uint32_t ustack_xsk_load_acquire(const uint32_t *p)
    { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline void ustack_xsk_store_release(uint32_t *p, uint32_t v)
    { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
    static inline uint32_t ustack_xsk_load_relaxed(const uint32_t *p)
    { return __atomic_load_n(p, __ATOMIC_RELAXED); }
    /* Full barrier between publishing the producer index and reading the
       need_wakeup flag (store->load ordering, which release/acquire does not
       give): the kernel sets the flag, then re-reads our index. */
    static inline void ustack_xsk_full_fence(void)
    { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
    static inline long ustack_xsk_kick_tx(int fd)
    { return (long)sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0); }
    static inline long ustack_xsk_kick_rx(int fd)
    { return (long)recvfrom(fd, NULL, 0, MSG_DONTWAIT, NULL, NULL); }
    """
    uint32_t ustack_xsk_load_acquire(const uint32_t *p) nogil
    void ustack_xsk_store_release(uint32_t *p, uint32_t v) nogil
    uint32_t ustack_xsk_load_relaxed(const uint32_t *p) nogil
    void ustack_xsk_full_fence() nogil
    long ustack_xsk_kick_tx(int fd) nogil
    long ustack_xsk_kick_rx(int fd) nogil

# Ring flags word and descriptor options (include/uapi/linux/if_xdp.h), frame
# ownership states, and the bound on sendto() retries when copy mode stops
# after its per-call budget.
cdef enum:
    XSK_RING_NEED_WAKEUP = 1
    XSK_PKT_CONTD = 1
    XSK_RX_WITH_US = 0      # RX frame on our free stack, waiting for the fill ring
    XSK_RX_IN_KERNEL = 1    # on the fill ring or being received into
    XSK_RX_LENT = 2         # lent to the stack by rx_burst
    XSK_SLOT_FREE = 0       # TX slot (one or more consecutive frames) is ours
    XSK_SLOT_RESERVED = 1   # handed out by tx_reserve
    XSK_SLOT_IN_FLIGHT = 2  # posted, waiting for its completions
    XSK_MAX_KICKS = 64


cdef struct XskDesc:
    uint64_t addr
    uint32_t len
    uint32_t options


cdef class XskRing:
    """One AF_XDP ring mapped into our memory (a buffer at the kernel's offsets).

    ``buffer`` is the ring's mmap (or any writable buffer in tests);
    ``producer``/``consumer``/``desc``/``flags`` are the byte offsets from
    XDP_MMAP_OFFSETS; ``size`` is the number of entries (a power of two);
    ``desc_size`` is 16 for rx/tx (struct xdp_desc) and 8 for fill/completion.
    ``detach()`` drops the buffer so the mmap can be unmapped.
    """

    cdef Py_buffer _view
    cdef bint _held
    cdef uint32_t *_producer
    cdef uint32_t *_consumer
    cdef uint32_t *_flags
    cdef char *_descs
    cdef readonly uint32_t size
    cdef readonly uint32_t desc_size
    cdef uint32_t _mask
    cdef uint32_t _cached_prod
    cdef uint32_t _cached_cons

    def __cinit__(self):
        self._held = False

    def __init__(self, buffer, Py_ssize_t producer, Py_ssize_t consumer, Py_ssize_t desc,
                 Py_ssize_t flags, uint32_t size, uint32_t desc_size):
        if size == 0 or (size & (size - 1)) != 0:
            raise ValueError(f"ring size {size} is not a power of two")
        if desc_size != 8 and desc_size != 16:
            raise ValueError(f"descriptor size {desc_size} is not 8 or 16")
        PyObject_GetBuffer(buffer, &self._view, PyBUF_WRITABLE)
        self._held = True
        cdef Py_ssize_t n = self._view.len
        cdef Py_ssize_t off
        for off in (producer, consumer, flags):
            if off < 0 or off % 4 != 0 or off + 4 > n:
                self.detach()
                raise ValueError(f"ring index offset {off} outside the {n}-byte mapping")
        if desc < 0 or desc % 8 != 0 or desc + <Py_ssize_t>size * desc_size > n:
            self.detach()
            raise ValueError(f"ring descriptors at {desc} ({size} x {desc_size} bytes) "
                             f"outside the {n}-byte mapping")
        cdef char *base = <char *>self._view.buf
        self._producer = <uint32_t *>(base + producer)
        self._consumer = <uint32_t *>(base + consumer)
        self._flags = <uint32_t *>(base + flags)
        self._descs = base + desc
        self.size = size
        self.desc_size = desc_size
        self._mask = size - 1
        self._cached_prod = ustack_xsk_load_relaxed(self._producer)
        self._cached_cons = ustack_xsk_load_relaxed(self._consumer)

    def __dealloc__(self):
        if self._held:
            PyBuffer_Release(&self._view)

    def detach(self):
        """Forget the mapping (idempotent); the ring is unusable afterwards."""
        if self._held:
            self._held = False
            self._producer = self._consumer = self._flags = NULL
            self._descs = NULL
            PyBuffer_Release(&self._view)

    @property
    def attached(self):
        return self._held

    @property
    def needs_wakeup(self):
        """The kernel's XDP_RING_NEED_WAKEUP flag on this ring."""
        if not self._held:
            return False
        return (ustack_xsk_load_relaxed(self._flags) & XSK_RING_NEED_WAKEUP) != 0

    def indices(self):
        """(producer, consumer) as currently published in shared memory."""
        if not self._held:
            return (0, 0)
        return (ustack_xsk_load_acquire(self._producer), ustack_xsk_load_acquire(self._consumer))

    # -- producer side (fill, tx): we own the producer index -------------------

    cdef inline uint32_t prod_free(self, uint32_t want) noexcept nogil:
        cdef uint32_t free = self.size - (self._cached_prod - self._cached_cons)
        if free < want:
            self._cached_cons = ustack_xsk_load_acquire(self._consumer)
            free = self.size - (self._cached_prod - self._cached_cons)
            if free > self.size:  # a bogus consumer index: trust nothing
                free = 0
        return free

    cdef inline void prod_submit(self) noexcept nogil:
        ustack_xsk_store_release(self._producer, self._cached_prod)

    cdef inline uint32_t prod_unconsumed(self) noexcept nogil:
        self._cached_cons = ustack_xsk_load_acquire(self._consumer)
        return self._cached_prod - self._cached_cons

    # -- consumer side (rx, completion): we own the consumer index -------------

    cdef inline uint32_t cons_avail(self, uint32_t want) noexcept nogil:
        cdef uint32_t avail = self._cached_prod - self._cached_cons
        if avail < want:
            self._cached_prod = ustack_xsk_load_acquire(self._producer)
            avail = self._cached_prod - self._cached_cons
            if avail > self.size:  # a bogus producer index: read nothing
                self._cached_prod = self._cached_cons
                avail = 0
        return avail if avail < want else want

    cdef inline void cons_release(self, uint32_t n) noexcept nogil:
        self._cached_cons += n
        ustack_xsk_store_release(self._consumer, self._cached_cons)

    # -- descriptor slots -------------------------------------------------------

    cdef inline XskDesc *desc_at(self, uint32_t idx) noexcept nogil:
        return <XskDesc *>(self._descs + <size_t>(idx & self._mask) * 16)

    cdef inline uint64_t *addr_at(self, uint32_t idx) noexcept nogil:
        return <uint64_t *>(self._descs + <size_t>(idx & self._mask) * 8)

    cdef inline bint flag_set(self) noexcept nogil:
        return (ustack_xsk_load_relaxed(self._flags) & XSK_RING_NEED_WAKEUP) != 0


cdef class XskDataPath:
    """The data path of one AF_XDP socket over its UMEM and four rings.

    UMEM layout: frames ``[0, rx_frames)`` receive (they cycle through the
    fill ring), then ``tx_slots`` TX slots of ``slot_frames`` consecutive
    frames each. A TX slot longer than one frame carries a frame larger than
    ``frame_size`` as several descriptors (XDP_PKT_CONTD on all but the last),
    which needs ``sg``. A received frame split over several descriptors is
    copied into one fresh buffer (the rare multi-buffer case) so the stack
    always sees one frame. ``fd`` < 0 means "no socket" (tests): no syscalls.

    Not thread-safe: one poller at a time (the stack's poll lock).
    """

    cdef Py_buffer _umem
    cdef bint _held
    cdef char *_base
    cdef uint64_t _umem_len
    cdef readonly uint32_t frame_size
    cdef uint32_t _shift
    cdef XskRing _rx, _tx, _fill, _comp
    cdef readonly int fd
    cdef readonly bint need_wakeup
    cdef readonly bint sg
    cdef readonly uint32_t max_frame
    cdef object _umem_view
    # RX frames
    cdef readonly uint32_t rx_frames
    cdef uint8_t *_rx_state
    cdef uint32_t *_rx_free
    cdef uint32_t _rx_free_len
    # TX slots
    cdef readonly uint32_t tx_slots
    cdef readonly uint32_t slot_frames
    cdef readonly uint64_t slot_bytes
    cdef uint32_t _tx_first
    cdef uint8_t *_slot_state
    cdef uint16_t *_slot_pending
    cdef uint32_t *_slot_free
    cdef uint32_t _slot_free_len
    cdef uint32_t *_reserved
    cdef uint32_t *_commit_len
    cdef uint32_t _n_reserved
    cdef list _slot_views
    # counters
    cdef readonly uint64_t rx_packets, rx_multi_buffer, rx_bad_desc, rx_oversize
    cdef readonly uint64_t rx_release_unknown, rx_kicks
    cdef readonly uint64_t tx_packets, tx_descs, tx_kicks, tx_kick_again, tx_kick_busy
    cdef readonly uint64_t tx_bad_completion, tx_kick_error
    cdef readonly int last_kick_errno
    # TCP segmentation offload through an AF_PACKET socket (set_gso; _fp_gso.pxi)
    cdef readonly int gso_fd
    cdef Py_ssize_t _gso_max_bytes, _gso_max_segs
    cdef unsigned char **_gso_frames
    cdef iovec *_gso_iov
    cdef unsigned char _gso_scratch[128]
    cdef readonly uint64_t tx_gso_frames, tx_gso_segments, tx_gso_unordered, tx_gso_error
    cdef readonly int last_gso_errno

    def __cinit__(self):
        self._held = False
        self._rx_state = NULL
        self._rx_free = NULL
        self._slot_state = NULL
        self._slot_pending = NULL
        self._slot_free = NULL
        self._reserved = NULL
        self._commit_len = NULL
        self.gso_fd = -1
        self._gso_frames = NULL
        self._gso_iov = NULL

    def __init__(self, umem, uint32_t frame_size, XskRing rx not None, XskRing tx not None,
                 XskRing fill not None, XskRing comp not None, int fd, uint32_t rx_frames,
                 uint32_t tx_slots, uint32_t slot_frames=1, bint need_wakeup=True,
                 bint sg=False, uint32_t max_frame=65536):
        if frame_size < 2048 or (frame_size & (frame_size - 1)) != 0:
            raise ValueError(f"frame_size {frame_size} is not a power of two >= 2048")
        if rx.desc_size != 16 or tx.desc_size != 16 or fill.desc_size != 8 or comp.desc_size != 8:
            raise ValueError("rings passed in the wrong order (rx, tx, fill, completion)")
        if rx_frames == 0 or tx_slots == 0 or slot_frames == 0 or slot_frames > 64:
            raise ValueError("need at least one RX frame, one TX slot, 1..64 frames per slot")
        if slot_frames > 1 and not sg:
            raise ValueError("TX slots of several frames need multi-buffer (sg)")
        if fill.size < rx_frames:
            raise ValueError(f"fill ring ({fill.size}) smaller than the RX frames ({rx_frames})")
        if comp.size < <uint64_t>tx_slots * slot_frames:
            raise ValueError(f"completion ring ({comp.size}) smaller than the TX frames")
        if tx.size < slot_frames:
            raise ValueError("TX ring smaller than one TX slot")
        cdef uint64_t nframes = <uint64_t>rx_frames + <uint64_t>tx_slots * slot_frames
        PyObject_GetBuffer(umem, &self._umem, PyBUF_WRITABLE)
        self._held = True
        if <uint64_t>self._umem.len < nframes * frame_size:
            self.close()
            raise ValueError(f"UMEM of {self._umem.len} bytes cannot hold {nframes} frames")
        self._base = <char *>self._umem.buf
        self._umem_len = nframes * frame_size
        self.frame_size = frame_size
        self._shift = 0
        while (<uint32_t>1 << self._shift) < frame_size:
            self._shift += 1
        self._rx, self._tx, self._fill, self._comp = rx, tx, fill, comp
        self.fd = fd
        self.need_wakeup = need_wakeup
        self.sg = sg
        self.max_frame = max_frame
        self.rx_frames = rx_frames
        self.tx_slots = tx_slots
        self.slot_frames = slot_frames
        self.slot_bytes = <uint64_t>slot_frames * frame_size
        self._tx_first = rx_frames
        self._rx_state = <uint8_t *>PyMem_Malloc(rx_frames)
        self._rx_free = <uint32_t *>PyMem_Malloc(rx_frames * sizeof(uint32_t))
        self._slot_state = <uint8_t *>PyMem_Malloc(tx_slots)
        self._slot_pending = <uint16_t *>PyMem_Malloc(tx_slots * sizeof(uint16_t))
        self._slot_free = <uint32_t *>PyMem_Malloc(tx_slots * sizeof(uint32_t))
        self._reserved = <uint32_t *>PyMem_Malloc(tx_slots * sizeof(uint32_t))
        self._commit_len = <uint32_t *>PyMem_Malloc(tx_slots * sizeof(uint32_t))
        self._gso_frames = <unsigned char **>PyMem_Malloc(tx_slots * sizeof(unsigned char *))
        self._gso_iov = <iovec *>PyMem_Malloc((tx_slots + 1) * sizeof(iovec))
        if (self._commit_len == NULL or self._gso_frames == NULL or self._gso_iov == NULL or self._rx_state == NULL or self._rx_free == NULL or self._slot_state == NULL
                or self._slot_pending == NULL or self._slot_free == NULL or self._reserved == NULL):
            self.close()
            raise MemoryError()
        cdef uint32_t i
        for i in range(rx_frames):
            self._rx_state[i] = XSK_RX_WITH_US
            self._rx_free[i] = rx_frames - 1 - i  # pop order 0, 1, 2, ...
        self._rx_free_len = rx_frames
        for i in range(tx_slots):
            self._slot_state[i] = XSK_SLOT_FREE
            self._slot_pending[i] = 0
            self._slot_free[i] = tx_slots - 1 - i
        self._slot_free_len = tx_slots
        self._n_reserved = 0
        self._umem_view = memoryview(umem).cast("B")  # bytes, one dimension
        cdef uint64_t start
        self._slot_views = []
        for i in range(tx_slots):
            start = (<uint64_t>self._tx_first + <uint64_t>i * slot_frames) << self._shift
            self._slot_views.append(self._umem_view[start:start + self.slot_bytes])
        self._refill()

    def __dealloc__(self):
        if self._held:
            PyBuffer_Release(&self._umem)
        PyMem_Free(self._rx_state)
        PyMem_Free(self._rx_free)
        PyMem_Free(self._slot_state)
        PyMem_Free(self._slot_pending)
        PyMem_Free(self._slot_free)
        PyMem_Free(self._reserved)
        PyMem_Free(self._commit_len)
        PyMem_Free(self._gso_frames)
        PyMem_Free(self._gso_iov)

    def close(self):
        """Stop using the UMEM (idempotent). TX slot views become invalid."""
        cdef object v
        if self._slot_views is not None:
            for v in self._slot_views:
                try:
                    v.release()
                except BufferError:
                    pass
            self._slot_views = None
        if self._umem_view is not None:
            try:
                self._umem_view.release()
            except BufferError:
                pass
            self._umem_view = None
        self.gso_fd = -1
        if self._held:
            self._held = False
            self._base = NULL
            PyBuffer_Release(&self._umem)

    cdef inline int _check(self) except -1:
        if not self._held or not self._rx._held or not self._tx._held \
                or not self._fill._held or not self._comp._held:
            raise ValueError("AF_XDP data path is closed")
        return 0

    @property
    def closed(self):
        return not self._held

    # -- fill ring ---------------------------------------------------------------

    cdef void _refill(self) noexcept:
        """Move frames from our free stack onto the fill ring (one release store)."""
        cdef XskRing fill = self._fill
        cdef uint32_t n = fill.prod_free(self._rx_free_len)
        cdef uint32_t k, frame
        if n > self._rx_free_len:
            n = self._rx_free_len
        if n == 0:
            return
        for k in range(n):
            self._rx_free_len -= 1
            frame = self._rx_free[self._rx_free_len]
            self._rx_state[frame] = XSK_RX_IN_KERNEL
            fill.addr_at(fill._cached_prod + k)[0] = <uint64_t>frame << self._shift
        fill._cached_prod += n
        fill.prod_submit()

    cdef inline object _lend(self, uint64_t addr, uint32_t length):
        """A memoryview of UMEM bytes [addr, addr + length), already validated.

        Same result as slicing the UMEM view (a new view on the same managed
        buffer, narrowed the way memoryview slicing narrows it), without
        building a slice object per frame.
        """
        cdef object view = PyMemoryView_FromObject(self._umem_view)
        cdef Py_buffer *b = PyMemoryView_GET_BUFFER(view)
        b.buf = <char *>b.buf + addr
        b.len = length
        b.shape[0] = length
        return view

    cdef inline void _rx_recycle(self, uint32_t frame) noexcept:
        self._rx_state[frame] = XSK_RX_WITH_US
        self._rx_free[self._rx_free_len] = frame
        self._rx_free_len += 1

    cdef inline bint _rx_desc_ok(self, uint64_t addr, uint32_t length) noexcept:
        """A kernel RX descriptor is inside one RX frame that the kernel owns."""
        cdef uint64_t frame = addr >> self._shift
        if frame >= self.rx_frames:
            return False
        if length == 0 or (addr & (self.frame_size - 1)) + length > self.frame_size:
            return False
        return self._rx_state[frame] == XSK_RX_IN_KERNEL

    cdef inline void _rx_drop(self, uint64_t addr) noexcept:
        """Take back the frame of a descriptor we refuse, when it is ours to take."""
        cdef uint64_t frame = addr >> self._shift
        if frame < self.rx_frames and self._rx_state[frame] == XSK_RX_IN_KERNEL:
            self._rx_recycle(<uint32_t>frame)

    cdef void _rx_gather(self, list out, uint32_t first, uint32_t last):
        """Descriptors first..last (ring positions) are one frame: copy it whole."""
        cdef XskRing rx = self._rx
        cdef XskDesc *d
        cdef uint32_t i
        cdef uint64_t total = 0
        cdef bint ok = True
        cdef object buf
        cdef char *dst
        for i in range(first, last + 1):
            d = rx.desc_at(rx._cached_cons + i)
            if not self._rx_desc_ok(d.addr, d.len):
                ok = False
            total += d.len
        if not ok:
            self.rx_bad_desc += 1
        elif total > self.max_frame:
            self.rx_oversize += 1
        else:
            buf = PyByteArray_FromStringAndSize(NULL, <Py_ssize_t>total)
            dst = PyByteArray_AS_STRING(buf)
            for i in range(first, last + 1):
                d = rx.desc_at(rx._cached_cons + i)
                memcpy(dst, self._base + d.addr, d.len)
                dst += d.len
            out.append(memoryview(buf))
            self.rx_packets += 1
            self.rx_multi_buffer += 1
        for i in range(first, last + 1):
            self._rx_drop(rx.desc_at(rx._cached_cons + i).addr)

    # -- receive -----------------------------------------------------------------

    def rx_burst(self, Py_ssize_t max_frames):
        """Up to ``max_frames`` received frames, lent as memoryviews into the UMEM."""
        cdef list out = []
        cdef XskRing rx = self._rx
        cdef XskDesc *d
        cdef uint32_t avail, i, j, want
        cdef Py_ssize_t got = 0
        self._check()
        if max_frames <= 0:
            return out
        if self._rx_free_len:
            self._refill()
        want = <uint32_t>max_frames if max_frames < rx.size else rx.size
        if self.sg:
            want = rx.size  # one frame may take several descriptors
        avail = rx.cons_avail(want)
        i = 0
        while i < avail and got < max_frames:
            d = rx.desc_at(rx._cached_cons + i)
            if d.options & XSK_PKT_CONTD:
                j = i + 1
                while j < avail and (rx.desc_at(rx._cached_cons + j).options & XSK_PKT_CONTD):
                    j += 1
                if j >= avail:
                    if i == 0 and avail == rx.size:
                        # a whole ring without an end of frame: corrupt, drop it
                        for j in range(avail):
                            self._rx_drop(rx.desc_at(rx._cached_cons + j).addr)
                        self.rx_bad_desc += 1
                        i = avail
                    break  # the rest of this frame is not published yet
                self._rx_gather(out, i, j)
                got = len(out)
                i = j + 1
                continue
            if self._rx_desc_ok(d.addr, d.len):
                self._rx_state[d.addr >> self._shift] = XSK_RX_LENT
                out.append(self._lend(d.addr, d.len))
                got += 1
                self.rx_packets += 1
            else:
                self.rx_bad_desc += 1
                self._rx_drop(d.addr)
            i += 1
        if i:
            rx.cons_release(i)
        if self._rx_free_len:
            self._refill()
        if got == 0 and self.need_wakeup and self._fill.flag_set():
            self._kick_rx()
        return out

    def rx_release(self, frames):
        """Take back frames lent by rx_burst; their UMEM frames go to the fill ring."""
        cdef object mv
        cdef char *p
        cdef uint64_t off, frame
        cdef Py_ssize_t k, n
        self._check()
        if type(frames) is list:
            n = PyList_GET_SIZE(frames)
            for k in range(n):
                self._release_one(<object>PyList_GET_ITEM(frames, k))
        else:
            for mv in frames:
                self._release_one(mv)
        if self._rx_free_len:
            self._refill()

    cdef inline int _release_one(self, object mv) except -1:
        if not PyMemoryView_Check(mv):
            raise TypeError("rx_release expects the memoryviews rx_burst returned")
        cdef char *p = <char *>PyMemoryView_GET_BUFFER(mv).buf
        if p < self._base or p >= self._base + self._umem_len:
            return 0  # a reassembled copy: its frames went back already
        if p >= self._base + (<uint64_t>self.rx_frames << self._shift):
            self.rx_release_unknown += 1  # a TX slot is not ours to take back here
            return 0
        cdef uint64_t frame = <uint64_t>(p - self._base) >> self._shift
        if self._rx_state[frame] != XSK_RX_LENT:
            self.rx_release_unknown += 1  # released twice, or never lent
            return 0
        self._rx_recycle(<uint32_t>frame)
        return 0

    cdef void _kick_rx(self) noexcept:
        self.rx_kicks += 1
        if self.fd >= 0:
            ustack_xsk_kick_rx(self.fd)  # EAGAIN is the normal answer

    # -- transmit ----------------------------------------------------------------

    cdef void _reap(self) noexcept:
        """Completion ring: count each sent descriptor against its TX slot."""
        cdef XskRing comp = self._comp
        cdef uint32_t n = comp.cons_avail(comp.size)
        cdef uint32_t k, slot
        cdef uint64_t addr, frame
        if n == 0:
            return
        for k in range(n):
            addr = comp.addr_at(comp._cached_cons + k)[0]
            frame = addr >> self._shift
            if frame < self._tx_first or frame >= <uint64_t>self._tx_first + \
                    <uint64_t>self.tx_slots * self.slot_frames:
                self.tx_bad_completion += 1
                continue
            slot = <uint32_t>((frame - self._tx_first) // self.slot_frames)
            if self._slot_state[slot] != XSK_SLOT_IN_FLIGHT or self._slot_pending[slot] == 0:
                self.tx_bad_completion += 1
                continue
            self._slot_pending[slot] -= 1
            if self._slot_pending[slot] == 0:
                self._slot_state[slot] = XSK_SLOT_FREE
                self._slot_free[self._slot_free_len] = slot
                self._slot_free_len += 1
        comp.cons_release(n)

    def tx_reserve(self, Py_ssize_t n):
        """Up to ``n`` writable TX slots (memoryviews of ``slot_bytes``)."""
        cdef list out = []
        cdef XskRing tx = self._tx
        cdef uint32_t free_descs, promised, slots, k, slot
        self._check()
        self._reap()
        if n <= 0:
            return out
        promised = self._n_reserved * self.slot_frames
        free_descs = tx.prod_free(promised + <uint32_t>min(n, tx.size) * self.slot_frames)
        slots = (free_descs - promised) // self.slot_frames if free_descs > promised else 0
        if slots > self._slot_free_len:
            slots = self._slot_free_len
        if <Py_ssize_t>slots > n:
            slots = <uint32_t>n
        for k in range(slots):
            self._slot_free_len -= 1
            slot = self._slot_free[self._slot_free_len]
            self._slot_state[slot] = XSK_SLOT_RESERVED
            self._reserved[self._n_reserved] = slot
            self._n_reserved += 1
            out.append(self._slot_views[slot])
        if <Py_ssize_t>slots < n and tx.prod_unconsumed():
            # short of slots with frames still queued (an earlier kick met
            # EBUSY/ENOBUFS, or the driver sleeps): push them out again
            self._kick_tx()
        return out

    def set_gso(self, int fd, Py_ssize_t max_bytes=65535, Py_ssize_t max_segs=64):
        """Send runs of TCP segments as super-frames through ``fd`` (-1: never), an AF_PACKET socket bound
        to this interface with PACKET_VNET_HDR (_fp_gso.pxi says when a run qualifies and why the order
        holds). ``max_bytes``: the largest IP datagram of one super-frame; ``max_segs``: its segments."""
        if fd >= 0 and (max_segs < 2 or max_bytes < 2 * 54):
            raise ValueError("gso needs max_segs >= 2 and room for two segments")
        self.gso_fd = fd
        self._gso_max_bytes = max_bytes if max_bytes < 65535 else 65535
        self._gso_max_segs = max_segs

    def tx_commit(self, lengths):
        """Post the first ``len(lengths)`` reserved slots, return the rest, kick once.

        With set_gso, each run of segments that qualifies leaves as one super-frame through the AF_PACKET
        socket instead, after the AF_XDP ring holds nothing earlier (kicked until empty; if it cannot be
        emptied the run goes frame by frame, and so does the rest of the commit)."""
        cdef XskRing tx = self._tx
        cdef Py_ssize_t n = len(lengths)
        cdef Py_ssize_t k, i, run, hl
        cdef long long length
        cdef uint32_t slot, piece, ndesc, idx, total_descs = 0
        cdef uint64_t base, left
        cdef XskDesc *d
        cdef bint gso
        cdef int v6
        self._check()
        if n > self._n_reserved:
            raise ValueError(f"tx_commit of {n} frames but only {self._n_reserved} slots reserved")
        for k in range(n):
            length = lengths[k]
            if length <= 0 or <uint64_t>length > self.slot_bytes:
                raise ValueError(f"frame length {length} outside 1..{self.slot_bytes}")
            self._commit_len[k] = <uint32_t>length
        gso = self.gso_fd >= 0 and n >= 2
        if gso:
            for k in range(n):
                self._gso_frames[k] = <unsigned char *>self._base + (
                    (<uint64_t>self._tx_first + <uint64_t>self._reserved[k] * self.slot_frames) << self._shift)
        idx = tx._cached_prod
        k = 0
        while k < n:
            slot = self._reserved[k]
            if gso and k + 1 < n:
                run = _gso_run(self._gso_frames, self._commit_len, k, n, self._gso_max_bytes, self._gso_max_segs,
                               &hl, &v6)
                if run > 1:
                    if idx != tx._cached_prod:  # what precedes the run leaves first
                        tx._cached_prod = idx
                        tx.prod_submit()
                        self._kick_tx()
                    if tx.prod_unconsumed():
                        self.tx_gso_unordered += 1
                        gso = False
                    elif _gso_send_run(self.gso_fd, self._gso_frames, self._commit_len, k, run, hl, v6,
                                       self._gso_scratch, self._gso_iov) < 0:
                        self.tx_gso_error += 1
                        self.last_gso_errno = errno
                        gso = False
                    else:
                        for i in range(k, k + run):  # the kernel copied them: the slots are ours again
                            slot = self._reserved[i]
                            self._slot_state[slot] = XSK_SLOT_FREE
                            self._slot_free[self._slot_free_len] = slot
                            self._slot_free_len += 1
                        self.tx_gso_frames += 1
                        self.tx_gso_segments += run
                        k += run
                        continue
            left = self._commit_len[k]
            base = (<uint64_t>self._tx_first + <uint64_t>slot * self.slot_frames) << self._shift
            ndesc = 0
            while left:
                piece = self.frame_size if left > self.frame_size else <uint32_t>left
                left -= piece
                d = tx.desc_at(idx)
                d.addr = base
                d.len = piece
                d.options = XSK_PKT_CONTD if left else 0
                base += self.frame_size
                idx += 1
                ndesc += 1
            self._slot_pending[slot] = ndesc
            self._slot_state[slot] = XSK_SLOT_IN_FLIGHT
            total_descs += ndesc
            k += 1
        for k in range(n, self._n_reserved):
            slot = self._reserved[k]
            self._slot_state[slot] = XSK_SLOT_FREE
            self._slot_free[self._slot_free_len] = slot
            self._slot_free_len += 1
        self._n_reserved = 0
        if n == 0:
            return
        self.tx_packets += n
        self.tx_descs += total_descs
        if idx != tx._cached_prod:
            tx._cached_prod = idx
            tx.prod_submit()
            self._kick_tx()

    cdef int _kick_tx(self) noexcept:
        """Wake the kernel's TX path when it asks for it (or always without need_wakeup)."""
        cdef XskRing tx = self._tx
        cdef int tries, err
        if self.need_wakeup:
            ustack_xsk_full_fence()
            if not tx.flag_set():
                return 0
        for tries in range(XSK_MAX_KICKS):
            self.tx_kicks += 1
            if self.fd < 0:
                return 0
            if ustack_xsk_kick_tx(self.fd) >= 0:
                return 0
            err = errno
            if err == EINTR:
                continue
            if err == EAGAIN:
                # copy mode sends a bounded batch per call: go on while work is left
                self.tx_kick_again += 1
                if tx.prod_unconsumed() == 0:
                    return 0
                self._reap()
                continue
            if err == EBUSY or err == ENOBUFS or err == ENETDOWN or err == ENXIO:
                self.tx_kick_busy += 1  # frames stay queued; the next kick retries
            else:
                # e.g. EOVERFLOW for a frame with too many pieces: the kernel
                # counts it in tx_invalid_descs; the data path goes on
                self.tx_kick_error += 1
                self.last_kick_errno = err
            return 0
        return 0

    def flush(self):
        """Reap completions and kick the TX ring again if frames are still queued."""
        self._check()
        self._reap()
        if self._tx.prod_unconsumed():
            self._kick_tx()

    def tx_pending(self):
        """Descriptors posted but not yet taken by the kernel."""
        self._check()
        return self._tx.prod_unconsumed()

    def tx_in_flight(self):
        """TX slots posted whose completion has not come back yet."""
        return self.tx_slots - self._slot_free_len - self._n_reserved

    def rx_lent(self):
        """RX frames currently lent to the stack."""
        cdef uint32_t i, n = 0
        if self._rx_state == NULL:
            return 0
        for i in range(self.rx_frames):
            if self._rx_state[i] == XSK_RX_LENT:
                n += 1
        return n

    def counters(self):
        """The data path's named counters."""
        return {
            "rx_packets": self.rx_packets,
            "rx_multi_buffer": self.rx_multi_buffer,
            "rx_bad_desc": self.rx_bad_desc,
            "rx_oversize": self.rx_oversize,
            "rx_release_unknown": self.rx_release_unknown,
            "rx_kicks": self.rx_kicks,
            "tx_packets": self.tx_packets,
            "tx_descs": self.tx_descs,
            "tx_kicks": self.tx_kicks,
            "tx_kick_again": self.tx_kick_again,
            "tx_kick_busy": self.tx_kick_busy,
            "tx_kick_error": self.tx_kick_error,
            "tx_bad_completion": self.tx_bad_completion,
            "tx_gso_frames": self.tx_gso_frames,
            "tx_gso_segments": self.tx_gso_segments,
            "tx_gso_unordered": self.tx_gso_unordered,
            "tx_gso_error": self.tx_gso_error,
        }
