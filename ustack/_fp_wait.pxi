# The driver's busy-poll without the GIL (ustack.api.driver, issue 30).
#
# A poller that spins between rounds in Python holds the GIL the whole time:
# the application threads it polls for cannot run until it gives up (the
# interpreter's 5 ms switch interval, or the end of its budget). Here the spin
# is a C loop that reads one word of the receive ring with the GIL released and
# yields the CPU (sched_yield) between looks, so application threads -- also
# on the same core -- run while the stack waits, and the poller is back in
# Python as soon as the kernel has produced a frame.
#
# RxWatch: which word says "frames are waiting":
# - WATCH_TP_STATUS: a TPACKET_V2 slot's tp_status (or a V3 block's
#   block_status): TP_STATUS_USER set (packet(7), "PACKET_RX_RING");
# - WATCH_XSK: an AF_XDP RX ring: the kernel's producer index differs from our
#   consumer position (Documentation/networking/af_xdp.rst, "Rings").
# The offset of the word moves as the ring is consumed: the device sets it
# (``at``) before each wait, under the driver's lock. A stale read only makes
# a wait end early or late by one look; the round that follows decides.

from libc.stdint cimport uint32_t

cdef extern from *:
    """
    #include <sched.h>
    #include <time.h>
    static inline double ustack_wait_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    }
    """
    double ustack_wait_now() nogil
    int sched_yield() nogil

cdef enum:
    WATCH_TP_STATUS = 1
    WATCH_XSK = 2


cdef class RxWatch:
    """One receive ring's "frames are waiting" word, for ``spin_wait`` (see the file's comment).

    ``RxWatch.tp_status(ring_buffer)``: a TPACKET ring, ``at(offset)`` the status word of the next slot
    (V2) or block (V3); ``RxWatch.xsk(rx_ring)``: an AF_XDP RX ring (an ``XskRing``).
    """

    cdef Py_buffer _view
    cdef bint _held
    cdef int kind
    cdef const unsigned char *_word
    cdef XskRing _ring

    def __cinit__(self):
        self._held = False
        self._word = NULL

    @staticmethod
    def tp_status(buffer):
        cdef RxWatch w = RxWatch.__new__(RxWatch)
        PyObject_GetBuffer(buffer, &w._view, PyBUF_SIMPLE)
        w._held = True
        w.kind = WATCH_TP_STATUS
        return w

    @staticmethod
    def xsk(XskRing ring not None):
        cdef RxWatch w = RxWatch.__new__(RxWatch)
        w.kind = WATCH_XSK
        w._ring = ring
        return w

    def at(self, Py_ssize_t offset):
        """Watch the 32-bit status word at ``offset`` of a TPACKET ring (bounds-checked)."""
        if self.kind != WATCH_TP_STATUS or not self._held:
            raise ValueError("not a TPACKET watch, or released")
        if offset < 0 or offset % 4 != 0 or offset + 4 > self._view.len:
            raise ValueError(f"status word at {offset} outside the {self._view.len}-byte ring")
        self._word = <const unsigned char *>self._view.buf + offset

    cdef inline bint ready(self) noexcept nogil:
        if self.kind == WATCH_TP_STATUS:
            return self._word != NULL and (ustack_ring_load_acquire_u32(self._word) & 1) != 0
        if not self._ring._held:
            return True  # detached: let the round find out
        return ustack_xsk_load_acquire(self._ring._producer) != self._ring._cached_cons

    def release(self):
        """Drop the ring's buffer (before it is unmapped); the watch then always says ready."""
        if self._held:
            self._held = False
            self._word = NULL
            PyBuffer_Release(&self._view)
        self._ring = None
        self.kind = 0

    def __dealloc__(self):
        if self._held:
            PyBuffer_Release(&self._view)

    def __call__(self):
        """Frames waiting now (one look; for tests and Python callers)."""
        if self.kind == 0:
            return True
        return bool(self.ready())


def spin_wait(RxWatch watch not None, double seconds):
    """Spin without the GIL until ``watch`` says frames are waiting (True) or ``seconds`` pass (False),
    yielding the CPU between looks so any runnable thread goes first."""
    cdef double end
    cdef bint got = False
    if watch.kind == 0:
        return True
    with nogil:
        end = ustack_wait_now() + seconds
        while True:
            if watch.ready():
                got = True
                break
            if ustack_wait_now() >= end:
                break
            sched_yield()
    return got
