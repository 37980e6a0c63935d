# Header emit for IPv6 (RFC 8200) into a TX slot from a per-flow template.
# (emit_ipv6, emit_udp6, emit_tcp6 for established segments, emit_tcp_options6
# for SYN and SYN-ACK; ``_tcp6_write`` is the per-flow template's writer too.)
#
# A template is the flow's 14-byte Ethernet + 40-byte IPv6 header (54 bytes)
# with the payload length left for emit to fill; the flow label and traffic
# class are the template's. Upper-layer checksums take the IPv6 pseudo-header
# (RFC 8200 8.1, _pseudo6 in _fp_classify6.pxi).


cdef inline int _check_template6(const unsigned char[::1] template, int nh) except -1:
    if template.shape[0] != 54 or (template[14] >> 4) != 6 or (nh >= 0 and template[20] != nh):
        raise ValueError("IPv6 template must be Ethernet + a 40-byte IPv6 header" +
                         ("" if nh < 0 else f" with next header {nh}"))
    return 0


def emit_ipv6(unsigned char[::1] slot, const unsigned char[::1] template, const unsigned char[::1] payload):
    """Write template (Ethernet + IPv6) and payload (an upper-layer message, checksum done) into slot.

    Fills the payload length. Returns the frame length.
    """
    cdef Py_ssize_t plen = payload.shape[0]
    cdef uint8_t *out
    _check_template6(template, -1)
    if plen > 0xffff:
        raise ValueError("IPv6 payload too long (no jumbograms)")
    if slot.shape[0] < 54 + plen:
        raise ValueError("TX slot too small for this frame")
    out = &slot[0]
    memcpy(out, &template[0], 54)
    if plen:
        memcpy(out + 54, &payload[0], plen)
    _put16(out + 18, <uint16_t>plen)
    return 54 + plen


def emit_udp6(unsigned char[::1] slot, const unsigned char[::1] template, unsigned int sport, unsigned int dport,
              const unsigned char[::1] payload):
    """One UDP datagram over IPv6: template (next header 17), header, payload, checksum (never 0, RFC 8200 8.1)."""
    cdef Py_ssize_t plen = payload.shape[0]
    cdef Py_ssize_t ulen = 8 + plen
    cdef uint8_t *out
    cdef uint16_t s
    _check_template6(template, 17)
    if sport > 0xffff or dport > 0xffff:
        raise ValueError("port out of range")
    if ulen > 0xffff:
        raise ValueError("UDP datagram too long")
    if slot.shape[0] < 54 + ulen:
        raise ValueError("TX slot too small for this frame")
    out = &slot[0]
    memcpy(out, &template[0], 54)
    _put16(out + 18, <uint16_t>ulen)
    _put16(out + 54, <uint16_t>sport)
    _put16(out + 56, <uint16_t>dport)
    _put16(out + 58, <uint16_t>ulen)
    out[60] = 0
    out[61] = 0
    if plen:
        memcpy(out + 62, &payload[0], plen)
    s = c_checksum(out + 54, ulen, _pseudo6(out + 14, 17, <uint32_t>ulen))
    _put16(out + 60, s if s else 0xffff)
    return 54 + ulen


cdef Py_ssize_t _tcp6_write(uint8_t *out, const uint8_t *template, uint16_t sport, uint16_t dport, uint32_t seq,
                            uint32_t ack, uint8_t flags, uint16_t window, bint has_ts, uint32_t tsv, uint32_t tsecr,
                            const uint8_t *payload, Py_ssize_t plen) noexcept nogil:
    """``emit_tcp6``'s frame into ``out`` (room and lengths checked by the caller); returns the frame length."""
    cdef Py_ssize_t hl = 32 if has_ts else 20
    cdef uint8_t *t = out + 54
    memcpy(out, template, 54)
    _put16(out + 18, <uint16_t>(hl + plen))
    _put16(t, sport)
    _put16(t + 2, dport)
    _put32(t + 4, seq)
    _put32(t + 8, ack)
    t[12] = <uint8_t>((hl // 4) << 4)
    t[13] = flags
    _put16(t + 14, window)
    t[16] = 0
    t[17] = 0
    t[18] = 0
    t[19] = 0
    if has_ts:
        t[20] = 1
        t[21] = 1
        t[22] = 8
        t[23] = 10
        _put32(t + 24, tsv)
        _put32(t + 28, tsecr)
    if plen:
        memcpy(t + hl, payload, plen)
    _put16(t + 16, c_checksum(t, hl + plen, _pseudo6(out + 14, 6, <uint32_t>(hl + plen))))
    return 54 + hl + plen


def emit_tcp6(unsigned char[::1] slot, const unsigned char[::1] template,
              unsigned int sport, unsigned int dport, unsigned long seq, unsigned long ack,
              unsigned int flags, unsigned int window, tsval, unsigned long tsecr,
              const unsigned char[::1] payload):
    """One established TCP segment over IPv6 (as ``emit_tcp``: no options, or NOP NOP timestamps)."""
    cdef Py_ssize_t plen = payload.shape[0]
    cdef Py_ssize_t hl = 32 if tsval is not None else 20
    cdef uint32_t tsv = 0
    _check_template6(template, 6)
    if sport > 0xffff or dport > 0xffff or flags > 0xff or window > 0xffff:
        raise ValueError("port, flags or window out of range")
    if seq > 0xffffffffUL or ack > 0xffffffffUL or tsecr > 0xffffffffUL:
        raise ValueError("sequence numbers and timestamps are 32-bit")
    if tsval is not None:
        if not 0 <= tsval <= 0xffffffff:
            raise ValueError("sequence numbers and timestamps are 32-bit")
        tsv = <uint32_t>tsval
    if hl + plen > 0xffff:
        raise ValueError("IPv6 payload too long")
    if slot.shape[0] < 54 + hl + plen:
        raise ValueError("TX slot too small for this frame")
    return _tcp6_write(&slot[0], &template[0], <uint16_t>sport, <uint16_t>dport, <uint32_t>seq, <uint32_t>ack,
                       <uint8_t>flags, <uint16_t>window, hl == 32, tsv, <uint32_t>tsecr,
                       &payload[0] if plen else NULL, plen)


def emit_tcp_options6(unsigned char[::1] slot, const unsigned char[::1] template,
                      unsigned int sport, unsigned int dport, unsigned long seq, unsigned long ack,
                      unsigned int flags, unsigned int window, const unsigned char[::1] options):
    """One TCP segment without data but with ``options`` (a SYN or SYN-ACK) over IPv6 (``emit_tcp_options``).

    ``template`` as for ``emit_tcp6``; ``options`` padded by the caller to a
    multiple of 4, at most 40 (RFC 9293 3.1). Fills the payload length, the
    data offset and the TCP checksum over the IPv6 pseudo-header (RFC 8200
    8.1). Returns the frame length.
    """
    cdef Py_ssize_t olen = options.shape[0]
    cdef Py_ssize_t hl = 20 + olen
    cdef uint8_t *out
    cdef uint8_t *t
    _check_template6(template, 6)
    if olen > 40 or olen & 3:
        raise ValueError("TCP options must be a multiple of 4 bytes, at most 40")
    if sport > 0xffff or dport > 0xffff or flags > 0xff or window > 0xffff:
        raise ValueError("port, flags or window out of range")
    if seq > 0xffffffffUL or ack > 0xffffffffUL:
        raise ValueError("sequence numbers are 32-bit")
    if slot.shape[0] < 54 + hl:
        raise ValueError("TX slot too small for this frame")
    out = &slot[0]
    memcpy(out, &template[0], 54)
    _put16(out + 18, <uint16_t>hl)
    t = out + 54
    _put16(t, <uint16_t>sport)
    _put16(t + 2, <uint16_t>dport)
    _put32(t + 4, <uint32_t>seq)
    _put32(t + 8, <uint32_t>ack)
    t[12] = <uint8_t>((hl // 4) << 4)
    t[13] = <uint8_t>flags
    _put16(t + 14, <uint16_t>window)
    t[16] = 0
    t[17] = 0
    t[18] = 0
    t[19] = 0
    if olen:
        memcpy(t + 20, &options[0], olen)
    _put16(t + 16, c_checksum(t, hl, _pseudo6(out + 14, 6, <uint32_t>hl)))
    return 54 + hl
