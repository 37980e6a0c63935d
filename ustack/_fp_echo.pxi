# ICMP Echo Reply (RFC 792) written in C on the receive path (issue 10: the spaced ping).
#
# A ping that finds the stack asleep runs on a cold cache: the Python answer
# (the stack's _deliver, IcmpLayer.input/_echo, Ipv4Layer.output, the ARP
# lookup, Link) cost ~25 µs of the round here, more than the kernel's whole
# round trip. ``EchoResponder`` answers in ``FlowTable.deliver_burst`` instead,
# for the sources the Python path already answered: after each reply it sent,
# ``IcmpLayer._echo`` hands over an ``EchoTemplate`` built by
# ``Ipv4Layer.echo_template`` (route, ARP entry, Ethernet + IPv4 header with
# protocol 1 and the stack's TTL, the (ours, source, ICMP) IP ID counter, the
# MTU): what ``Ipv4Layer.output`` would write for that reply. The template
# stays good as a TCP template does (_fp_tmpl.pxi: the ARP/IP ``Generation``
# unmoved, the ARP entry unexpired); otherwise, or for anything it does not
# cover (a request to another of our addresses, a reply over the MTU, a full
# TX ring), the request goes to Python as before. The bytes and counters are
# the Python path's: the request's ICMP message with type 0, code 0 and a
# fresh checksum, IP ID from the same counter, DF clear; counted as
# icmp.echo_requests_received, icmp.echo_replies_sent, ipv4.packets_sent and
# eth.frames_sent. Remote traffic cannot grow it: at most ``ECHO_SOURCES``
# sources, the oldest replaced (``icmp.echo_fast_replaced``).

from libc.string cimport memcmp

cdef enum:
    ECHO_SOURCES = 16


cdef class EchoTemplate:
    """What ``Ipv4Layer.output`` would write for an echo reply from ``local`` to one source (built by
    ``Ipv4Layer.echo_template``)."""

    cdef readonly bytes header          # Ethernet + 20-byte IPv4 header (protocol 1), per-packet fields zero
    cdef readonly Generation gen
    cdef readonly unsigned long gen_seen
    cdef readonly double valid_until    # the ARP entry's expiry
    cdef readonly Py_ssize_t mtu        # largest IP packet
    cdef list idents                    # IpIdents.counters
    cdef Py_ssize_t bucket              # this (local, source, ICMP) triple's counter in it
    cdef uint8_t _local[4]
    cdef uint8_t _peer[4]

    def __cinit__(self, bytes header, Generation gen, double valid_until, Py_ssize_t mtu, list idents,
                  Py_ssize_t bucket):
        if len(header) != 34 or header[12] != 0x08 or header[13] != 0 or header[14] != 0x45 or header[23] != 1:
            raise ValueError("echo template must be Ethernet + a 20-byte IPv4 header with protocol 1")
        if not 0 <= bucket < len(idents):
            raise ValueError("IP ID bucket out of range")
        self.header = header
        self.gen = gen
        self.gen_seen = gen.value
        self.valid_until = valid_until
        self.mtu = mtu
        self.idents = idents
        self.bucket = bucket
        memcpy(self._local, (<const uint8_t *><const char *>header) + 26, 4)
        memcpy(self._peer, (<const uint8_t *><const char *>header) + 30, 4)

    @property
    def local(self):
        return PyBytes_FromStringAndSize(<const char *>self._local, 4)

    @property
    def peer(self):
        return PyBytes_FromStringAndSize(<const char *>self._peer, 4)

    cdef inline bint fresh(self, double now) noexcept:
        return self.gen_seen == self.gen.value and now < self.valid_until


cdef class EchoResponder:
    """Echo requests from sources with a fresh ``EchoTemplate`` answered in C (see the top of the file)."""

    cdef object link
    cdef object counters                # the stack's Stats counters
    cdef list _templates                # EchoTemplate or None, ECHO_SOURCES of them
    cdef uint32_t _keys[ECHO_SOURCES]   # each one's source address, as read from the wire
    cdef Py_ssize_t _next               # the slot the next new source takes (round robin: the oldest)
    cdef readonly unsigned long answered

    def __cinit__(self, link, counters):
        self.link = link
        self.counters = counters
        self._templates = [None] * ECHO_SOURCES
        memset(self._keys, 0, sizeof(self._keys))

    @property
    def capacity(self):
        return ECHO_SOURCES

    @property
    def sources(self):
        """The sources with a template (fresh or not), oldest first."""
        out = []
        for i in range(ECHO_SOURCES):
            t = self._templates[(self._next + i) % ECHO_SOURCES]
            if t is not None:
                out.append((<EchoTemplate>t).peer)
        return out

    def learn(self, EchoTemplate t):
        """Keep ``t`` for its source (replacing that source's older one, else the oldest source's)."""
        cdef uint32_t key
        cdef Py_ssize_t i
        memcpy(&key, t._peer, 4)
        for i in range(ECHO_SOURCES):
            if self._templates[i] is not None and self._keys[i] == key:
                self._templates[i] = t
                return
        i = self._next
        if self._templates[i] is not None:
            self.counters["icmp.echo_fast_replaced"] += 1
        self._templates[i] = t
        self._keys[i] = key
        self._next = (i + 1) % ECHO_SOURCES

    def clear(self):
        for i in range(ECHO_SOURCES):
            self._templates[i] = None
        memset(self._keys, 0, sizeof(self._keys))
        self._next = 0

    def answer_frame(self, Packet p not None, frame, now):
        """``answer`` for ``FlowTable.deliver_burst`` (and tests)."""
        return self.answer(p, frame, now)

    cdef bint answer(self, Packet p, frame, now) except -1:
        """Reply to ``p`` (a K_ICMP record of ``frame``) from its source's template: True when sent, False
        when the Python path must answer (nothing written, nothing counted)."""
        cdef uint32_t key
        cdef Py_ssize_t i, msglen, used, n
        cdef EchoTemplate t = None
        cdef Py_buffer fb, sb
        cdef const uint8_t *msg
        cdef uint8_t *out
        cdef uint16_t ident
        if p.kind != CK_ICMP or p._alen != 4 or p.icmp_type != 8:
            return False
        memcpy(&key, p._src, 4)
        for i in range(ECHO_SOURCES):
            if self._keys[i] == key and self._templates[i] is not None:
                t = <EchoTemplate>self._templates[i]
                break
        if t is None or not t.fresh(PyFloat_AsDouble(now)) or memcmp(t._local, p._dst, 4) != 0:
            return False
        msglen = p.l3 + p.total_len - p.l4
        if msglen < 8 or 20 + msglen > t.mtu:
            return False  # too short to be an echo (Python drops it by name), or the reply needs fragments
        # Link.slot(): the next lent slot, or a fresh reservation (as TcpTemplate.emit_ptr)
        link = self.link
        lens = link._lens
        slots = link._slots
        used = PyList_GET_SIZE(lens)
        if used < len(slots):
            slot = slots[used]
        else:
            slot = link.slot()
            if slot is None:
                return False
        PyObject_GetBuffer(frame, &fb, PyBUF_SIMPLE)
        try:
            if fb.len < p.l4 + msglen:
                return False  # classify checked this; a short frame never gets a reply
            msg = (<const uint8_t *>fb.buf) + p.l4
            PyObject_GetBuffer(slot, &sb, PyBUF_WRITABLE)
            try:
                n = 34 + msglen
                if sb.len < n:
                    raise ValueError("TX slot too small for this frame")
                ident = <uint16_t>((<long>t.idents[t.bucket] + 1) & 0xFFFF)  # IpIdents.next
                t.idents[t.bucket] = ident
                out = <uint8_t *>sb.buf
                memcpy(out, <const uint8_t *><const char *>t.header, 34)
                memcpy(out + 34, msg, msglen)
                out[34] = 0  # Echo Reply
                out[35] = 0  # code 0
                out[36] = 0
                out[37] = 0
                _put16(out + 36, c_checksum(out + 34, msglen, 0))
                _ipv4_finish(out + 14, 20 + msglen, ident, 0)  # (unpadded, as Ipv4Layer._emit's frame)
            finally:
                PyBuffer_Release(&sb)
        finally:
            PyBuffer_Release(&fb)
        counters = self.counters
        counters["icmp.echo_requests_received"] += 1
        if link._in_round:  # Link.sent(n)
            (<list>link._lens).append(n)
            counters["eth.frames_sent"] += 1
        else:
            link.sent(n)
        counters["ipv4.packets_sent"] += 1
        counters["icmp.echo_replies_sent"] += 1
        self.answered += 1
        return True
