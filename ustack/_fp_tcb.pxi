# The TCP transmission control block as C sees it (RFC 9293 3.3.1).
#
# ``ustack.transport.tcp.tcb.Tcb`` is a slotted Python class: each field is a
# PyObject* at a fixed offset inside the instance (a ``member_descriptor``),
# which is what lets CPython read and write ``tcb.snd_una`` at full speed
# from the Python parts. ``TcbLayout(Tcb)`` reads those offsets once from the
# class's descriptors; the fast path then reads and writes the very same
# fields through them (integers converted at the C boundary). One record,
# no mirror to keep in sync, and the Python path pays nothing for it (a
# cdef class with C members costs Python 25-50 ns per attribute read, a slot
# 9 ns: measured on CPython 3.11).

from libc.stdint cimport int64_t
from cpython.object cimport PyObject, PyObject_IsTrue
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.long cimport PyLong_AsLongLong, PyLong_AsLongAndOverflow, PyLong_FromUnsignedLong

cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
    int T_OBJECT_EX

cdef extern from "Python.h":
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member

cdef enum:
    TCPS_CLOSED = 0
    TCPS_ESTABLISHED = 4

# The fields the fast path uses, in the order of TcbLayout._off.
TCB_FIELDS = ("state", "snd_una", "snd_nxt", "snd_max", "snd_wnd", "max_snd_wnd", "snd_wl1", "snd_wl2",
              "rcv_nxt", "rcv_adv", "snd_wscale", "ts_ok", "ts_recent", "ts_recent_age", "last_ack_sent",
              "fin_queued", "fin_rcvd_seq", "rcv_wnd", "rcv_wscale", "rcv_mss", "mss_base", "ts_offset", "sack_ok")
cdef enum:
    T_STATE = 0
    T_SND_UNA = 1
    T_SND_NXT = 2
    T_SND_MAX = 3
    T_SND_WND = 4
    T_MAX_SND_WND = 5
    T_SND_WL1 = 6
    T_SND_WL2 = 7
    T_RCV_NXT = 8
    T_RCV_ADV = 9
    T_SND_WSCALE = 10
    T_TS_OK = 11
    T_TS_RECENT = 12
    T_TS_RECENT_AGE = 13
    T_LAST_ACK_SENT = 14
    T_FIN_QUEUED = 15
    T_FIN_RCVD_SEQ = 16
    T_RCV_WND = 17
    T_RCV_WSCALE = 18
    T_RCV_MSS = 19
    T_MSS_BASE = 20
    T_TS_OFFSET = 21
    T_SACK_OK = 22
    T_NFIELDS = 23


cdef inline PyObject *_slot(object o, Py_ssize_t off) noexcept:
    return (<PyObject **>((<char *><PyObject *>o) + off))[0]


cdef inline int64_t _as_i64(object v) except? -1:
    """``PyLong_AsLongLong(v)`` without its slow path: CPython 3.11 converts an int of two or more 30-bit
    digits (every sequence number from 2**30 up) through ``_PyLong_AsByteArray``; ``PyLong_AsLongAndOverflow``
    folds the digits in a loop (a C long is 64 bits on the LP64 platforms the fast path builds for). Past
    64 bits, ``PyLong_AsLongLong``'s OverflowError (issue 10: ~5% of the server's CPU in a 100 KB echo)."""
    cdef int overflow = 0
    cdef long r = PyLong_AsLongAndOverflow(v, &overflow)
    if overflow:
        return PyLong_AsLongLong(v)
    return r


cdef inline object _fget(object o, Py_ssize_t off):
    cdef PyObject *v = _slot(o, off)
    if v == NULL:
        raise AttributeError("TCB field not set")
    return <object>v


cdef inline int64_t _iget(object o, Py_ssize_t off) except? -1:
    cdef PyObject *v = _slot(o, off)
    if v == NULL:
        raise AttributeError("TCB field not set")
    return _as_i64(<object>v)


cdef inline bint _bget(object o, Py_ssize_t off) except -1:
    cdef PyObject *v = _slot(o, off)
    if v == NULL:
        raise AttributeError("TCB field not set")
    return PyObject_IsTrue(<object>v)


cdef inline void _fset(object o, Py_ssize_t off, object value) noexcept:
    cdef PyObject **p = <PyObject **>((<char *><PyObject *>o) + off)
    cdef PyObject *old = p[0]
    Py_INCREF(value)
    p[0] = <PyObject *>value
    Py_XDECREF(old)


cdef class TcbLayout:
    """Where a slotted TCB class keeps the fields the fast path uses (offsets read from its descriptors)."""

    cdef readonly type cls
    cdef Py_ssize_t _off[T_NFIELDS]

    def __cinit__(self, type cls):
        cdef PyMemberDescrObject *d
        cdef int k
        for k, name in enumerate(TCB_FIELDS):
            descr = cls.__dict__.get(name)
            if type(descr).__name__ != "member_descriptor":
                raise TypeError(f"{cls.__name__}.{name} is not a slot")
            d = <PyMemberDescrObject *><PyObject *>descr
            if d.d_member.type != T_OBJECT_EX:
                raise TypeError(f"{cls.__name__}.{name} is not an object slot")
            self._off[k] = d.d_member.offset
        self.cls = cls

    def read(self, tcb):
        """The fast path's view of ``tcb``: {field: value} as C reads it (for tests)."""
        self._check(tcb)
        return {name: _fget(tcb, self._off[k]) for k, name in enumerate(TCB_FIELDS)}

    cdef inline int _check(self, tcb) except -1:
        if type(tcb) is not self.cls:
            raise TypeError("not a TCB of this layout")
        return 0


# The other slotted objects the fast path reads and writes per segment (the
# ``Receiver`` and its ``DelayedAck``): the same offsets-from-descriptors
# access as the TCB's, for the fields named below (``SlotLayout(cls, fields)``
# with the tuples of this module, built by ``TcpLayer``).
RECEIVER_FIELDS = ("rcvbuf", "delack", "delack_timer", "rtt", "recv_high", "ack_now", "unacked", "rd_shutdown",
                   "bytes_received", "high_water", "budget", "wnd_update", "delack_due", "ack_round", "coalesce",
                   "stats", "ooo_acks", "ooo_acks_at", "_owner", "sack_tick")
cdef enum:
    R_RCVBUF = 0
    R_DELACK = 1
    R_DELACK_TIMER = 2
    R_RTT = 3
    R_RECV_HIGH = 4
    R_ACK_NOW = 5
    R_UNACKED = 6
    R_RD_SHUTDOWN = 7
    R_BYTES_RECEIVED = 8
    R_HIGH_WATER = 9
    R_BUDGET = 10
    R_WND_UPDATE = 11
    R_DELACK_DUE = 12
    R_ACK_ROUND = 13
    R_COALESCE = 14
    R_STATS = 15
    R_OOO_ACKS = 16
    R_OOO_ACKS_AT = 17
    R_OWNER = 18
    R_SACK_TICK = 19

DELACK_FIELDS = ("enabled", "ato", "ato_min", "ato_max", "max_quickacks", "quick", "pingpong", "lrcvtime", "pushed",
                 "reader_waiting")
cdef enum:
    D_ENABLED = 0
    D_ATO = 1
    D_ATO_MIN = 2
    D_ATO_MAX = 3
    D_MAX_QUICKACKS = 4
    D_QUICK = 5
    D_PINGPONG = 6
    D_LRCVTIME = 7
    D_PUSHED = 8
    D_READER_WAITING = 9
    SLOT_MAX = 32


cdef class SlotLayout:
    """Where a slotted class keeps the named fields (offsets read from its descriptors, as ``TcbLayout``)."""

    cdef readonly type cls
    cdef readonly tuple fields
    cdef Py_ssize_t _off[SLOT_MAX]

    def __cinit__(self, type cls, tuple fields):
        cdef PyMemberDescrObject *d
        cdef int k
        if len(fields) > SLOT_MAX:
            raise ValueError("too many fields")
        for k, name in enumerate(fields):
            descr = next((c.__dict__[name] for c in cls.__mro__ if name in c.__dict__), None)  # (a base's slot too)
            if type(descr).__name__ != "member_descriptor":
                raise TypeError(f"{cls.__name__}.{name} is not a slot")
            d = <PyMemberDescrObject *><PyObject *>descr
            if d.d_member.type != T_OBJECT_EX:
                raise TypeError(f"{cls.__name__}.{name} is not an object slot")
            self._off[k] = d.d_member.offset
        self.cls = cls
        self.fields = fields

    def read(self, obj):
        """{field: value} as C reads them (for tests)."""
        if type(obj) is not self.cls:
            raise TypeError(f"not a {self.cls.__name__}")
        return {name: _fget(obj, self._off[k]) for k, name in enumerate(self.fields)}
