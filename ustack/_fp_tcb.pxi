# The TCP transmission control block as a C record (RFC 9293 3.3.1).
from libc.stdint cimport int64_t
#
# ``ustack.transport.tcp.tcb.Tcb`` is a subclass of this type: the Python
# Sender, Receiver, Output and Connection read and write these fields as
# plain attributes, and the established-path code in _fp_tcp.pxi reads and
# writes the same memory as C fields. One record, no mirror to keep in sync.
#
# Numbers are C int64 (sequence values are kept in 0..2**32-1 by seq_add, and
# the C code casts them to uint32_t for modular comparison); ``state`` keeps
# the Python ``State`` member for Python and its value in ``st`` for C.

cdef enum:
    TCPS_CLOSED = 0
    TCPS_ESTABLISHED = 4


cdef class TcbRecord:
    """Per-connection sequence space, windows and negotiated options (fields: see ``tcb.Tcb``)."""

    cdef readonly int st            # the value of ``state``, for C
    cdef object _state
    # send sequence space
    cdef public int64_t iss, snd_una, snd_nxt, snd_max, snd_sml, snd_wnd, max_snd_wnd, snd_wl1, snd_wl2
    # receive sequence space
    cdef public int64_t irs, rcv_nxt, rcv_wnd, rcv_adv
    # negotiated options
    cdef public int64_t snd_wscale, rcv_wscale, snd_mss, rcv_mss, mss_base
    cdef public bint ts_ok, sack_ok
    cdef public int64_t ts_recent, ts_offset, last_ack_sent
    cdef public double ts_recent_age
    # FIN bookkeeping
    cdef public bint fin_queued, fin_acked, fin_rcvd
    cdef public object fin_rcvd_seq

    def __init__(self, state):
        self.state = state
        self.snd_mss = 536
        self.rcv_mss = 536
        self.mss_base = 536
        self.fin_rcvd_seq = None

    @property
    def state(self):
        return self._state

    @state.setter
    def state(self, value):
        self.st = value
        self._state = value
