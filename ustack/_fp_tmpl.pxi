# Per-flow cached frame templates: an established TCP segment (IPv4 or IPv6)
# written into a TX slot with no Python frame (issues 11 and 13).
#
# ``TcpTemplate`` is what ``Ipv4Layer.tcp_template`` / ``Ipv6Layer.tcp_template``
# resolved for one flow through the Python path (route, ARP or neighbour
# cache entry, Ethernet + IPv4 or IPv6 header, the IPv4 flow's IP ID bucket,
# the MTU; for IPv6 the header carries the flow's RFC 6437 flow label and
# hop limit, and the MTU is the path MTU). It stays good while
#
# - the net room's ``Generation`` has not moved since it was built (the ARP
#   layer bumps it when it learns or evicts a neighbour, the NDP layer when a
#   neighbour entry changes state or address, a Router Advertisement or a
#   Redirect arrives, the IP layers through ``invalidate`` and IPv6 on a path
#   MTU change), and
# - ``now`` is before ``valid_until``: the ARP entry's expiry (after it the
#   Python lookup polls the neighbour or forgets it: RFC 1122 2.3.2.1), or for
#   IPv6 the end of the neighbour's REACHABLE time (then the Python lookup
#   moves it to DELAY and probes it, RFC 4861 7.3.3), of the route it took
#   and of the path MTU entry; the template is then rebuilt through them.
#
# ``FlowEmitter`` is a connection's fast emitter (``Output.fast``) with the
# signature of ``TcpHost.tcp_output_segment``: it keeps the flow's template,
# rebuilds it when stale, and writes through it. The IPv4 ID comes from the
# very counter ``IpIdents.next`` would advance (RFC 7739 5.4, per
# destination), the slot and the frame count through ``Link``'s own lists
# (``Link.slot``/``sent`` mirrored by name: ``_slots``, ``_lens``,
# ``_in_round``), so the bytes and the counters are those of
# ``Ipv4Layer.emit_tcp`` / ``Ipv6Layer.emit_tcp``. Anything a template
# declines (an unresolved or unconfirmed neighbour, a frame over the MTU)
# goes through the host's Python emitter. When the host has no template to
# give it answers with the ``Generation`` it would take to change that, and
# the emitter does not ask again until it moves (a flow whose neighbour is
# being probed pays for the Python path, not for the question as well).

from cpython.buffer cimport PyBUF_WRITABLE
from cpython.float cimport PyFloat_AsDouble
from cpython.list cimport PyList_GET_SIZE
from cpython.long cimport PyLong_AsUnsignedLong


cdef class Generation:
    """A counter bumped whenever something a cached frame template copied changes."""

    cdef public unsigned long value
    cdef object link_layout  # the SlotLayout its templates' link was read through (TcpTemplate.emit_ptr), shared

    def bump(self):
        self.value += 1


cdef class TcpTemplate:
    """The cached frame template of one TCP flow (built by ``Ipv4Layer.tcp_template`` or
    ``Ipv6Layer.tcp_template``; ``idents`` None for IPv6)."""

    cdef readonly bytes header          # Ethernet + 20-byte IPv4 or 40-byte IPv6 header, per-packet fields zero
    cdef readonly bint v6
    cdef readonly Generation gen
    cdef readonly unsigned long gen_seen
    cdef readonly double valid_until    # the neighbour entry's expiry
    cdef readonly Py_ssize_t mtu        # largest IP packet
    cdef list idents                    # IpIdents.counters (IPv4)
    cdef object sent_key                # "ipv4.packets_sent" or "ipv6.packets_sent"
    cdef Py_ssize_t bucket              # this flow's counter in it
    cdef object link
    cdef object counters                # the stack's Stats counters
    cdef object link_layout             # SlotLayout of the link's _lens, _slots, _in_round; False: not slotted

    def __cinit__(self, bytes header, Generation gen, double valid_until, Py_ssize_t mtu, list idents,
                  Py_ssize_t bucket, link, counters):
        if idents is None:  # IPv6: no identification in the fixed header
            if len(header) != 54 or (header[14] >> 4) != 6 or header[20] != 6:
                raise ValueError("TCP template must be Ethernet + a 40-byte IPv6 header with next header 6")
            self.v6 = True
            self.sent_key = "ipv6.packets_sent"
        else:
            if len(header) != 34 or (header[14] & 0x0f) != 5 or header[23] != 6:
                raise ValueError("TCP template must be Ethernet + a 20-byte IPv4 header with protocol 6")
            if not 0 <= bucket < len(idents):
                raise ValueError("IP ID bucket out of range")
            self.sent_key = "ipv4.packets_sent"
        self.header = header
        self.gen = gen
        self.gen_seen = gen.value
        self.valid_until = valid_until
        self.mtu = mtu
        self.idents = idents
        self.bucket = bucket
        self.link = link
        self.counters = counters

    cdef inline bint fresh(self, double now) noexcept:
        return self.gen_seen == self.gen.value and now < self.valid_until

    cdef int emit(self, uint16_t sport, uint16_t dport, uint32_t seq, uint32_t ack, uint8_t flags, uint16_t window,
                  bint has_ts, uint32_t tsv, uint32_t tsecr, object payload) except -1:
        """The segment into a TX slot: 1, or 0 when it does not fit the MTU or the ring is full (nothing sent)."""
        cdef Py_buffer pb
        PyObject_GetBuffer(payload, &pb, PyBUF_SIMPLE)
        try:
            return self.emit_ptr(sport, dport, seq, ack, flags, window, has_ts, tsv, tsecr, <const uint8_t *>pb.buf,
                                 pb.len)
        finally:
            PyBuffer_Release(&pb)

    cdef int emit_ptr(self, uint16_t sport, uint16_t dport, uint32_t seq, uint32_t ack, uint8_t flags,
                      uint16_t window, bint has_ts, uint32_t tsv, uint32_t tsecr, const uint8_t *payload,
                      Py_ssize_t plen, Py_ssize_t olen=0) except -1:
        """``emit`` with the payload as ``plen`` bytes at ``payload`` (the send ring's, for _fp_tx.pxi).
        ``olen``: the first ``olen`` bytes of it are TCP options after the timestamps (a multiple of 4,
        ``emit_sack``), counted in the header's data offset."""
        cdef Py_ssize_t hl = 32 if has_ts else 20
        cdef Py_ssize_t used, n
        cdef Py_ssize_t lh = 40 if self.v6 else 20   # the IP header
        cdef Py_buffer sb
        cdef uint16_t ident = 0
        cdef Py_ssize_t *lo = NULL
        link = self.link
        if lh + hl + plen > self.mtu:
            return 0
        # The link's fields through their slot offsets (issue 10: three attribute lookups a segment otherwise)
        lay = self.link_layout
        if lay is None or (lay is not False and type(link) is not (<SlotLayout>lay).cls):
            # (made once per IP layer: its Generation keeps it for the next flows' templates; a SlotLayout
            # costs more than the frame: issue 10, one template per connection)
            lay = self.gen.link_layout
            if lay is None or (lay is not False and type(link) is not (<SlotLayout>lay).cls):
                try:
                    lay = SlotLayout(type(link), ("_lens", "_slots", "_in_round"))
                except TypeError:
                    lay = False
                self.gen.link_layout = lay
            self.link_layout = lay
        if lay is not False:
            lo = (<SlotLayout>lay)._off
        # Link.slot(): the next lent slot, or a fresh reservation (Link's own method)
        lens = _fget(link, lo[0]) if lo != NULL else link._lens
        slots = _fget(link, lo[1]) if lo != NULL else link._slots
        used = PyList_GET_SIZE(lens)
        if used < len(slots):
            slot = slots[used]
        else:
            slot = link.slot()
            if slot is None:
                return 0
        if not self.v6:  # IpIdents.next for this flow's bucket
            ident = <uint16_t>((<long>self.idents[self.bucket] + 1) & 0xFFFF)
            self.idents[self.bucket] = ident
        PyObject_GetBuffer(slot, &sb, PyBUF_WRITABLE)
        try:
            if sb.len < 14 + lh + hl + plen:
                raise ValueError("TX slot too small for this frame")
            if self.v6:
                n = _tcp6_write(<uint8_t *>sb.buf, <const uint8_t *><const char *>self.header, sport, dport,
                                seq, ack, flags, window, has_ts, tsv, tsecr, payload, plen)
            else:
                n = _tcp4_write(<uint8_t *>sb.buf, <const uint8_t *><const char *>self.header, ident, sport,
                                dport, seq, ack, flags, window, has_ts, tsv, tsecr, payload, plen)
            if olen:
                _tcp_options_fixup(<uint8_t *>sb.buf, self.v6, hl, olen, plen)
        finally:
            PyBuffer_Release(&sb)
        # Link.sent(n)
        if (_bget(link, lo[2]) if lo != NULL else link._in_round):
            # (not ``lens``: a reservation above committed and replaced the list)
            (<list>(_fget(link, lo[0]) if lo != NULL else link._lens)).append(n)
            self.counters["eth.frames_sent"] += 1
        else:
            link.sent(n)
        self.counters[self.sent_key] += 1
        return 1


    cdef int emit_sack(self, uint16_t sport, uint16_t dport, uint32_t seq, uint32_t ack, uint8_t flags,
                       uint16_t window, bint has_ts, uint32_t tsv, uint32_t tsecr, tuple blocks) except -1:
        """A segment without data carrying SACK blocks ``((left, right), ...)`` (RFC 2018 3), its options as
        ``TcpHeader.options_bytes`` writes them (NOP NOP timestamps, then NOP NOP SACK): 1, or 0 as ``emit``
        (nothing sent; more blocks than fit is 0 too)."""
        cdef uint8_t opts[36]
        cdef Py_ssize_t n = len(blocks), k
        if n < 1 or n > (3 if has_ts else 4):
            return 0
        opts[0] = 1
        opts[1] = 1
        opts[2] = 5
        opts[3] = <uint8_t>(2 + 8 * n)
        for k in range(n):
            left, right = blocks[k]
            _put32(opts + 4 + 8 * k, <uint32_t>PyLong_AsUnsignedLong(left))
            _put32(opts + 8 + 8 * k, <uint32_t>PyLong_AsUnsignedLong(right))
        return self.emit_ptr(sport, dport, seq, ack, flags, window, has_ts, tsv, tsecr, opts, 4 + 8 * n, 4 + 8 * n)


cdef inline void _tcp_options_fixup(uint8_t *frame, bint v6, Py_ssize_t hl, Py_ssize_t olen,
                                    Py_ssize_t plen) noexcept:
    """A frame ``_tcp4_write``/``_tcp6_write`` wrote with options as the first ``olen`` bytes of its payload:
    the data offset covers them, the TCP checksum again over the same bytes."""
    cdef uint8_t *t = frame + (54 if v6 else 34)
    t[12] = <uint8_t>(((hl + olen) // 4) << 4)
    t[16] = 0
    t[17] = 0
    if v6:
        _put16(t + 16, c_checksum(t, hl + plen, _pseudo6(frame + 14, 6, <uint32_t>(hl + plen))))
    else:
        _put16(t + 16, c_checksum(t, hl + plen, c_pseudo_sum(_be32(frame + 26), _be32(frame + 30), 6,
                                                             <uint32_t>(hl + plen))))


cdef class FlowEmitter:
    """A connection's fast emitter over its cached template (``TcpHost.tcp_output_segment``'s signature)."""

    cdef object host
    cdef public TcpTemplate template
    cdef readonly unsigned long builds      # templates built (the first, then one per invalidation)
    cdef readonly unsigned long refusals    # times the host declined to build one
    cdef Generation refused                 # the host declined under this generation: not asked again
    cdef unsigned long refused_at           # until it moves (a neighbour confirmed, a route learned)

    def __cinit__(self, host):
        self.host = host

    def __call__(self, src, dst, sport, dport, seq, ack, flags, window, ts, payload, now):
        return self.send(src, dst, sport, dport, seq, ack, flags, window, ts, payload, now) == 1

    def options(self, src, dst, sport, dport, seq, ack, flags, window, bytes opts, now):
        """A segment without data whose header carries ``opts`` (a SYN-ACK: ``TcpHost.tcp_output_options``'s
        arguments) from the flow's template, the frame ``Ipv4Layer.emit_tcp_options`` writes: True; False
        (nothing sent) without a fresh template or when it declines (the caller's own path then)."""
        cdef Py_ssize_t n = len(opts)
        if n > 40 or n & 3:
            return False
        cdef TcpTemplate t = self._fresh(src, dst, sport, dport, now)
        if t is None:
            return False
        return t.emit_ptr(sport, dport, seq, ack, flags, window, False, 0, 0, <const uint8_t *><const char *>opts,
                          n, n) == 1

    def sack(self, src, dst, sport, dport, seq, ack, flags, window, ts, tuple blocks, now):
        """``send_sack`` for Python (``Output.emit``): True when written from the template."""
        return self.send_sack(src, dst, sport, dport, seq, ack, flags, window, ts, blocks, now) == 1

    cdef int send_sack(self, src, dst, sport, dport, seq, ack, flags, window, ts, tuple blocks, now) except -1:
        """A segment without data with SACK blocks from the template (``TcpTemplate.emit_sack``): 1, or 0 when
        there is none or it declined (the caller builds the segment: ``Output.write``)."""
        cdef TcpTemplate t = self._fresh(src, dst, sport, dport, now)
        if t is None:
            return 0
        if ts is None:
            return t.emit_sack(sport, dport, seq, ack, flags, window, False, 0, 0, blocks)
        return t.emit_sack(sport, dport, seq, ack, flags, window, True, ts[0], ts[1], blocks)

    cdef TcpTemplate _fresh(self, src, dst, sport, dport, now):
        """The flow's template, rebuilt when stale (``send``'s first half), or None."""
        cdef TcpTemplate t = self.template
        cdef double when = PyFloat_AsDouble(now)
        if t is None or not t.fresh(when):
            t = None
            if self.refused is None or self.refused.value != self.refused_at:
                got = self.host.tcp_template(src, dst, sport, dport, now)
                self.refused = None
                if type(got) is Generation:
                    self.refused = <Generation>got
                    self.refused_at = self.refused.value
                    self.refusals += 1
                elif got is not None:
                    t = <TcpTemplate?>got
                    self.builds += 1
            self.template = t
        return t

    cdef int send(self, src, dst, sport, dport, seq, ack, flags, window, ts, payload, now) except -1:
        """1 when written from the template, 0 when it declined; without one (an unresolved or unconfirmed
        neighbour, no route, a host without templates for the family), what the host's own emitter did."""
        # The host's answer when stale: a template, or the Generation under which it has none to give (the
        # neighbour not confirmed: only an ARP/NDP update, which bumps it, changes that), or None.
        cdef TcpTemplate t = self._fresh(src, dst, sport, dport, now)
        if t is not None:  # (declined: too big for the MTU or the ring full, as Ipv4Layer.emit_tcp declines)
            if ts is None:
                return t.emit(sport, dport, seq, ack, flags, window, False, 0, 0, payload)
            return t.emit(sport, dport, seq, ack, flags, window, True, ts[0], ts[1], payload)
        return 1 if self.host.tcp_output_segment(src, dst, sport, dport, seq, ack, flags, window, ts, payload,
                                                 now) else 0
