# RX frames held past their round and the receive buffers' in-order bytes,
# in C (the per-segment work of the one-copy receive path; ustack.rxhold
# and ustack.transport.tcp.recvbuf say what they are for).
#
# FrameHold: the frames of one device that queues hold, counted per frame
# (a dict id(frame) -> views), bounded by ``limit``; at the bound every
# queue copies its held bytes out (``reclaim``), then a payload that still
# finds no room is copied. Frames freed inside a poll round wait for the
# round's end (``unheld``); outside one they go back at once (``release``).
# An ordered ring (AF_PACKET: the kernel fills slots, or blocks, in turn and
# stops at one still held) also bounds a frame's age: once ``limit`` more
# frames have come in, the bytes it holds are copied out (``reclaim``), and
# ``lend`` copies before lending, so no slot waits on the application.
#
# ChunkQueue: a receive buffer's in-order bytes as chunks, each a byte
# memoryview into a held frame or into a copy of its own. ``read_into``/
# ``read`` copy the bytes out once with memcpy; ``lend`` hands out slices of
# the chunks (no copy). Every chunk was checked on entry (a 1-dimensional,
# contiguous byte memoryview); offsets never pass a chunk's length.
#
# LentBuffer: what ``lend`` hands out for bytes in a held frame is a
# memoryview of a LentBuffer, an exporter of its own. A slice of a
# memoryview (or a buffer taken from it) shares its export, and
# ``memoryview.release()`` of the original does not end it; the exporter's
# ``exports`` drops to 0 only when the last view of it is gone. So a frame
# whose lent views the application released while a slice of one still
# lives is not given back: the hold keeps it (``outliving``, counted in
# ``rx_hold.lent_outliving``) until the end of the first round after the
# last view is gone. Such frames count against ``limit`` like any held
# frame: past it, payload is copied and the ring keeps flowing.

from cpython.memoryview cimport PyMemoryView_Check, PyMemoryView_GET_BUFFER
from cpython.mem cimport PyMem_Realloc, PyMem_Free
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.object cimport PyObject
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE, PyBUF_FORMAT,
                             PyBUF_ND, PyBUF_STRIDES)
from libc.string cimport memcpy
import collections


cdef struct RxChunk:
    PyObject *view      # a byte memoryview (a reference)
    char *data          # its first byte
    Py_ssize_t len      # its length
    Py_ssize_t off      # bytes already read
    PyObject *frame     # the held RX frame (a reference), or NULL


cdef class LentBuffer:
    """The memory of one lent view into a held frame, exported through the buffer protocol (see the top)."""

    cdef object _view  # the chunk's slice: a byte memoryview into the frame
    cdef readonly object frame
    cdef ChunkQueue owner
    cdef readonly Py_ssize_t exports  # buffers exported now (memoryviews of it and their slices: one)
    cdef Py_ssize_t _shape[1]
    cdef Py_ssize_t _strides[1]

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        cdef Py_buffer *b = PyMemoryView_GET_BUFFER(self._view)
        if flags & PyBUF_WRITABLE and b.readonly:
            raise BufferError("the lent view is read-only")
        self._shape[0] = b.len
        self._strides[0] = 1
        buffer.buf = b.buf
        buffer.len = b.len
        buffer.readonly = b.readonly
        buffer.itemsize = 1
        buffer.format = NULL
        if flags & PyBUF_FORMAT:
            buffer.format = b"B"
        buffer.ndim = 1
        buffer.shape = NULL
        if flags & PyBUF_ND:
            buffer.shape = self._shape
        buffer.strides = NULL
        if (flags & PyBUF_STRIDES) == PyBUF_STRIDES:
            buffer.strides = self._strides
        buffer.suboffsets = NULL
        buffer.internal = NULL
        buffer.obj = self
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *buffer):
        self.exports -= 1


cdef class FrameHold:
    """The RX frames of one device that chunk queues hold (see the top of the file)."""

    cdef public object release  # the device's rx_release
    cdef public Py_ssize_t limit
    cdef public object stats
    cdef public object current  # the frame being delivered (the stack's poll sets it), else None
    cdef public bint in_round  # inside a poll round: frames freed now go back with the burst
    cdef dict _refs  # id(frame) -> views of it held (the views keep the frame object alive)
    cdef dict _owners  # id(queue) -> a ChunkQueue holding frames (held > 0)
    cdef list _pending  # frames freed during the round
    cdef readonly bint ordered  # the device's RX ring is ordered (see the top of the file)
    cdef readonly Py_ssize_t seen  # frames delivered so far (``at``)
    cdef object _order  # ordered rings: deque of (seen when held, frame), oldest first
    cdef list _outliving  # LentBuffers given back by the application while a view of them still lives

    def __init__(self, release, Py_ssize_t limit, stats, bint ordered=False):
        if limit < 0:
            raise ValueError("the hold limit must be >= 0")
        self.release = release
        self.limit = limit
        self.stats = stats
        self.current = None
        self.in_round = False
        self._refs = {}
        self._owners = {}
        self._pending = []
        self.ordered = ordered
        self.seen = 0
        self._order = collections.deque()
        self._outliving = []

    def at(self, frame):
        """The stack delivers ``frame`` now (None: between frames); counts its age on an ordered ring."""
        self.current = frame
        if frame is not None:
            self.seen += 1

    @property
    def held(self):
        """Frames held now."""
        return len(self._refs)

    @property
    def outliving(self):
        """Lent views released while a slice of them still lives: their frames are still held."""
        return len(self._outliving)

    cdef int _keep(self, LentBuffer lent) except -1:
        self._outliving.append(lent)
        self.stats.inc("rx_hold.lent_outliving")
        return 0

    cdef int _sweep(self) except -1:
        """Give back the frames of outliving lent views whose last view is gone now."""
        cdef list still = []
        cdef LentBuffer lent
        for item in self._outliving:
            lent = <LentBuffer>item
            if lent.exports:
                still.append(lent)
            else:
                self._drop([lent.frame], lent.owner)
        self._outliving = still
        return 0

    cdef object _take(self, ChunkQueue owner):
        frame = self.current
        key = id(frame)
        n = self._refs.get(key)
        if n is None:
            if len(self._refs) >= self.limit:
                if self._outliving:
                    self._sweep()
                if self._owners:
                    self.reclaim()
                if len(self._refs) >= self.limit:
                    self.stats.inc("rx_hold.copied")
                    return None
            self._refs[key] = 1
            if self.ordered:
                self._order.append((self.seen, frame))
        else:
            self._refs[key] = n + 1
        if not owner.held:
            self._owners[id(owner)] = owner
        owner.held += 1
        return frame

    cdef int _take_again(self, frame, ChunkQueue owner) except -1:
        key = id(frame)
        self._refs[key] = self._refs[key] + 1
        owner.held += 1
        return 0

    cdef int _drop(self, list frames, ChunkQueue owner) except -1:
        cdef dict refs = self._refs
        cdef list freed = []
        for frame in frames:
            key = id(frame)
            n = refs.get(key)
            if n is None:
                continue
            if n > 1:
                refs[key] = n - 1
            else:
                del refs[key]
                freed.append(frame)
        owner.held -= len(frames)
        if owner.held <= 0:
            owner.held = 0
            self._owners.pop(id(owner), None)
        if freed:
            if self.in_round:
                self._pending.extend(freed)
            else:
                self.release(freed)
        return 0

    def reclaim(self):
        """Every queue copies out the bytes it holds in frames (not those lent to the application);
        counted in ``rx_hold.reclaims`` when that gave frames back."""
        cdef Py_ssize_t before = len(self._refs)
        for owner in list(self._owners.values()):
            (<ChunkQueue>owner).copy_out()
        if len(self._refs) < before:
            self.stats.inc("rx_hold.reclaims")

    cdef int _age(self) except -1:
        """Ordered ring: copy out what the oldest held frames hold once ``limit`` frames came after them."""
        order = self._order
        refs = self._refs
        while order and id(order[0][1]) not in refs:
            order.popleft()
        if order and self.seen - <Py_ssize_t>order[0][0] > self.limit:
            self.reclaim()
            while order and id(order[0][1]) not in refs:
                order.popleft()
            if order and self.seen - <Py_ssize_t>order[0][0] > self.limit:
                self.stats.inc("rx_hold.lent_overdue")  # (lending copies first on an ordered ring)
                order.popleft()
        return 0

    def unheld(self, frames):
        """End of a round: the burst's frames nobody holds, plus those freed during the round."""
        cdef dict refs = self._refs
        cdef list out
        cdef bint was = self.in_round
        if self._outliving:
            self.in_round = True  # what the sweep frees goes back with this burst
            try:
                self._sweep()
            finally:
                self.in_round = was
        if self.ordered and self._order:
            self.in_round = True  # what the age check frees goes back with this burst
            try:
                self._age()
            finally:
                self.in_round = was
        cdef list pending = self._pending
        cdef set again
        if pending:
            # a frame of this burst held and freed again within the round is in both: give it back once
            again = {id(f) for f in pending}
            out = [f for f in frames if id(f) not in refs and id(f) not in again]
            out.extend(pending)
            self._pending = []
        elif refs:
            out = [f for f in frames if id(f) not in refs]
        else:
            out = list(frames)
        return out


cdef class ChunkQueue:
    """In-order bytes as chunks (see the top of the file): the ReceiveBuffer's queue."""

    cdef RxChunk *_c
    cdef Py_ssize_t _cap, _head, _count
    cdef readonly Py_ssize_t nbytes
    cdef public FrameHold hold  # None: always copy
    cdef readonly Py_ssize_t held  # views of held frames this queue keeps (chunks and lent ones)

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self._count):
            self._drop(&self._c[(self._head + i) % self._cap])
        PyMem_Free(self._c)

    def __len__(self):
        return self.nbytes

    cdef inline void _drop(self, RxChunk *c) noexcept:
        Py_XDECREF(c.view)
        Py_XDECREF(c.frame)
        c.view = NULL
        c.frame = NULL

    cdef int _grow(self) except -1:
        cdef Py_ssize_t cap = self._cap * 2 if self._cap else 64
        cdef RxChunk *new = <RxChunk *>PyMem_Realloc(self._c, cap * sizeof(RxChunk))
        cdef Py_ssize_t i
        if new == NULL:
            raise MemoryError()
        # unwrap: the chunks that wrapped past the old end move to the new space after it
        for i in range(self._head + self._count - self._cap if self._head + self._count > self._cap else 0):
            new[self._cap + i] = new[i]
        self._c = new
        self._cap = cap
        return 0

    def append(self, data):
        """In-order bytes: a view into the frame being delivered when the hold takes it, else a copy."""
        self._append(data)

    cdef int _append(self, data) except -1:
        """``append`` without a Python call (the fast path's per-segment step)."""
        cdef FrameHold hold = self.hold
        frame = hold._take(self) if hold is not None and hold.current is not None else None
        if frame is None:
            self._push(memoryview(bytes(data)), None)
        else:
            self._push(data if type(data) is memoryview else memoryview(data), frame)
        return 0

    def push(self, view, frame):
        """Append a chunk: ``view`` a byte memoryview (1-dimensional, contiguous), ``frame`` or None."""
        self._push(view, frame)

    cdef int _push(self, view, frame) except -1:
        cdef Py_buffer *b
        if not PyMemoryView_Check(view):
            raise TypeError("a chunk is a memoryview")
        b = PyMemoryView_GET_BUFFER(view)
        if b.itemsize != 1 or b.ndim > 1 or (b.ndim == 1 and b.strides != NULL and b.strides[0] != 1):
            raise ValueError("a chunk is a contiguous byte memoryview")
        if b.len == 0:
            return 0
        if self._count == self._cap:
            self._grow()
        cdef RxChunk *c = &self._c[(self._head + self._count) % self._cap]
        Py_INCREF(view)
        c.view = <PyObject *>view
        c.data = <char *>b.buf
        c.len = b.len
        c.off = 0
        if frame is None:
            c.frame = NULL
        else:
            Py_INCREF(frame)
            c.frame = <PyObject *>frame
        self._count += 1
        self.nbytes += b.len
        return 0

    cdef Py_ssize_t _copy(self, char *dst, Py_ssize_t n, list freed) except -1:
        """Copy the first ``n`` bytes to ``dst`` (NULL: only forget them); returns the bytes taken."""
        cdef Py_ssize_t done = 0, k
        cdef RxChunk *c
        while done < n and self._count:
            c = &self._c[self._head]
            k = c.len - c.off
            if k > n - done:
                k = n - done
            if dst != NULL:
                memcpy(dst + done, c.data + c.off, k)
            c.off += k
            done += k
            if c.off == c.len:
                if c.frame != NULL:
                    freed.append(<object>c.frame)
                self._drop(c)
                self._head = (self._head + 1) % self._cap
                self._count -= 1
        self.nbytes -= done
        return done

    cdef int _give_back(self, list freed) except -1:
        if freed:
            self.hold._drop(freed, self)
        return 0

    def read_into(self, buf):
        """Copy up to ``len(buf)`` bytes into the writable buffer ``buf``; the number copied."""
        cdef Py_buffer out
        cdef list freed = []
        cdef Py_ssize_t n
        PyObject_GetBuffer(buf, &out, PyBUF_SIMPLE | PyBUF_WRITABLE)
        try:
            n = self._copy(<char *>out.buf, out.len if out.len < self.nbytes else self.nbytes, freed)
        finally:
            PyBuffer_Release(&out)
        self._give_back(freed)
        return n

    def read(self, Py_ssize_t n):
        """Up to ``n`` bytes as new bytes."""
        cdef list freed = []
        if n > self.nbytes:
            n = self.nbytes
        if n <= 0:
            return b""
        data = PyBytes_FromStringAndSize(NULL, n)
        self._copy(PyBytes_AS_STRING(data), n, freed)
        self._give_back(freed)
        return data

    def peek(self, Py_ssize_t n):
        """The first ``n`` bytes, left in place."""
        cdef Py_ssize_t done = 0, k, i = 0
        cdef RxChunk *c
        if n > self.nbytes:
            n = self.nbytes
        if n <= 0:
            return b""
        data = PyBytes_FromStringAndSize(NULL, n)
        cdef char *dst = PyBytes_AS_STRING(data)
        while done < n:
            c = &self._c[(self._head + i) % self._cap]
            k = c.len - c.off
            if k > n - done:
                k = n - done
            memcpy(dst + done, c.data + c.off, k)
            done += k
            i += 1
        return data

    def lend(self, Py_ssize_t n, list views, list frames):
        """Up to ``n`` bytes handed out as views of the chunks (appended to ``views``); the number lent.
        A view into a held frame is a memoryview of a ``LentBuffer`` (see the top of the file), and
        ``frames`` gets that LentBuffer (a chunk lent in part: the frame gets one more holder, the rest
        stays here); give them back with ``unlend``."""
        cdef Py_ssize_t done = 0, k
        cdef RxChunk *c
        cdef LentBuffer lent
        if n > self.nbytes:
            n = self.nbytes
        if self.hold is not None and self.hold.ordered and self.held:
            self.copy_out()  # an ordered ring must not wait on the application: lend copies
        while done < n:
            c = &self._c[self._head]
            k = c.len - c.off
            if k > n - done:
                k = n - done
            if c.frame == NULL:
                views.append((<object>c.view)[c.off:c.off + k])  # our own copy: nothing reuses it
            else:
                lent = LentBuffer.__new__(LentBuffer)
                lent._view = (<object>c.view)[c.off:c.off + k]
                lent.frame = <object>c.frame
                lent.owner = self
                views.append(memoryview(lent))
                frames.append(lent)
            c.off += k
            done += k
            if c.off == c.len:
                self._drop(c)
                self._head = (self._head + 1) % self._cap
                self._count -= 1
            elif c.frame != NULL:
                self.hold._take_again(<object>c.frame, self)
        self.nbytes -= done
        return done

    def unlend(self, list frames):
        """The application gave back the lent views of ``frames`` (LentBuffers from ``lend``): a frame goes
        back once no view of it lives; one a slice still reads stays held (``FrameHold.outliving``)."""
        cdef list freed = []
        cdef LentBuffer lent
        for item in frames:
            lent = <LentBuffer>item
            if lent.exports:
                self.hold._keep(lent)
            else:
                freed.append(lent.frame)
        self._give_back(freed)

    def copy_out(self):
        """Chunks in held frames become copies of their bytes; their frames go back."""
        cdef Py_ssize_t i
        cdef RxChunk *c
        cdef list freed = []
        for i in range(self._count):
            c = &self._c[(self._head + i) % self._cap]
            if c.frame == NULL:
                continue
            copy = memoryview(PyBytes_FromStringAndSize(c.data + c.off, c.len - c.off))
            freed.append(<object>c.frame)
            self._drop(c)
            Py_INCREF(copy)
            c.view = <PyObject *>copy
            c.data = <char *>PyMemoryView_GET_BUFFER(copy).buf
            c.len = c.len - c.off
            c.off = 0
        self._give_back(freed)

    def clear(self):
        """Forget every byte; the held frames go back."""
        cdef list freed = []
        self._copy(NULL, self.nbytes, freed)
        self._give_back(freed)
