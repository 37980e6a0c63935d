# The send buffer as a ring in C (SendRing; ustack.transport.tcp.sendbuf says
# what it is for). The ring is a bytearray that never resizes once made, so
# views into it stay valid; ``peek`` lends a view of queued bytes (joined
# bytes only where a range wraps the ring's end), ``reserve``/``commit``
# let the application write in place. All offsets are clamped to what is
# queued before any byte is touched.

from cpython.bytearray cimport PyByteArray_FromStringAndSize, PyByteArray_AS_STRING
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.string cimport memcpy


cdef class SendRing:
    """Bytes from SND.UNA onward in a fixed ring (see ustack.transport.tcp.sendbuf)."""

    cdef public Py_ssize_t capacity
    cdef object _ring  # bytearray, or None before the first write
    cdef object _view  # memoryview of the whole ring
    cdef char *_base
    cdef Py_ssize_t _size, _head, _len
    cdef object _reserved  # the view lent by reserve(), until commit()

    def __init__(self, Py_ssize_t capacity):
        if capacity <= 0:
            raise ValueError("send buffer capacity must be positive")
        self.capacity = capacity
        self._ring = self._view = self._reserved = None
        self._size = self._head = self._len = 0

    def __len__(self):
        return self._len

    @property
    def free(self):
        return self.capacity - self._len if self.capacity > self._len else 0

    @property
    def reserved(self):
        """Bytes of the outstanding reservation (0 without one)."""
        return len(self._reserved) if self._reserved is not None else 0

    cdef int _ready(self) except -1:
        """The ring, (re)made at ``capacity`` bytes; queued bytes keep their order."""
        if self._ring is not None and self._size == self.capacity:
            return 0
        cdef Py_ssize_t size = self.capacity if self.capacity > self._len else self._len
        new = PyByteArray_FromStringAndSize(NULL, size)
        cdef char *dst = PyByteArray_AS_STRING(new)
        cdef Py_ssize_t first
        if self._len:
            first = self._size - self._head
            if first > self._len:
                first = self._len
            memcpy(dst, self._base + self._head, first)
            memcpy(dst + first, self._base, self._len - first)
        self._ring = new
        self._view = memoryview(new)
        self._base = dst
        self._size = size
        self._head = 0
        return 0

    def write(self, data):
        """Copy in as much of ``data`` as fits; returns the number of bytes taken."""
        cdef Py_buffer src
        cdef Py_ssize_t n, tail, first
        if self._reserved is not None:
            raise BufferError("a reservation is outstanding: commit it first")
        PyObject_GetBuffer(data, &src, PyBUF_SIMPLE)
        try:
            n = self.capacity - self._len
            if src.len < n:
                n = src.len
            if n <= 0:
                return 0
            self._ready()
            if not self._len:
                self._head = 0  # empty: start at the ring's beginning, the longest contiguous room
            tail = (self._head + self._len) % self._size
            first = self._size - tail
            if first > n:
                first = n
            memcpy(self._base + tail, src.buf, first)
            memcpy(self._base, <char *>src.buf + first, n - first)
            self._len += n
            return n
        finally:
            PyBuffer_Release(&src)

    def peek(self, Py_ssize_t offset, Py_ssize_t n):
        """``n`` bytes from ``offset`` bytes after SND.UNA: a view into the ring (valid until those bytes
        are acknowledged), or new bytes where the range wraps the ring's end."""
        cdef Py_ssize_t start, first
        if offset < 0:
            offset = 0
        if n > self._len - offset:
            n = self._len - offset
        if n <= 0 or self._ring is None:
            return b""
        start = (self._head + offset) % self._size
        if start + n <= self._size:
            return self._view[start:start + n]
        first = self._size - start
        out = PyBytes_FromStringAndSize(NULL, n)
        memcpy(PyBytes_AS_STRING(out), self._base + start, first)
        memcpy(PyBytes_AS_STRING(out) + first, self._base, n - first)
        return out

    def acknowledge(self, Py_ssize_t n):
        """The first ``n`` bytes were acknowledged by the peer."""
        if n > self._len:
            n = self._len
        if n <= 0:
            return
        self._len -= n
        if self._len or self._reserved is not None:
            self._head = (self._head + n) % self._size
        else:  # empty, and no reservation waits right after the acknowledged bytes: start from the beginning
            self._head = 0

    def reserve(self, Py_ssize_t n):
        """A writable view of up to ``n`` free bytes right after the queued ones (contiguous, so it may
        be shorter than ``n``; empty when the buffer is full). One reservation at a time."""
        cdef Py_ssize_t tail, end
        if self._reserved is not None:
            raise BufferError("a reservation is outstanding: commit it first")
        if n > self.capacity - self._len:
            n = self.capacity - self._len
        if n <= 0:
            return memoryview(b"")  # read-only and empty: there is nothing to write into
        self._ready()
        if not self._len:
            self._head = 0
        tail = (self._head + self._len) % self._size
        end = self._head if tail < self._head else self._size
        if n > end - tail:
            n = end - tail
        view = self._view[tail:tail + n]
        self._reserved = view
        return view

    def commit(self, Py_ssize_t n):
        """Queue the first ``n`` bytes of the reservation (the rest stays free); the view is released."""
        view = self._reserved
        if view is None:
            raise BufferError("nothing reserved")
        if n < 0 or n > len(view):
            raise ValueError(f"commit of {n} bytes into a reservation of {len(view)}")
        self._reserved = None
        _release_view(view)
        self._len += n
        return n

    def cancel(self):
        """Give the reservation back without queueing anything."""
        view = self._reserved
        self._reserved = None
        if view is not None:
            _release_view(view)

    def clear(self):
        self.cancel()
        self._ring = self._view = None
        self._base = NULL
        self._size = self._head = self._len = 0


cdef inline int _release_view(view) except -1:
    """Release a lent view; one the application re-exported stays usable, and harmless (the ring never moves)."""
    try:
        view.release()
    except BufferError:
        pass
    return 0
