# Header emit for IPv6 (RFC 8200) into a TX slot from a per-flow template.
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


def emit_tcp6(unsigned char[::1] slot, const unsigned char[::1] template,
              unsigned int sport, unsigned int dport, unsigned long seq, unsigned long ack,
              unsigned int flags, unsigned int window, tsval, unsigned long tsecr,
              const unsigned char[::1] payload):
    """One established TCP segment over IPv6 (as ``emit_tcp``: no options, or NOP NOP timestamps)."""
    cdef Py_ssize_t plen = payload.shape[0]
    cdef Py_ssize_t hl = 32 if tsval is not None else 20
    cdef uint8_t *out
    cdef uint8_t *t
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
    out = &slot[0]
    memcpy(out, &template[0], 54)
    _put16(out + 18, <uint16_t>(hl + plen))
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
    if hl == 32:
        t[20] = 1
        t[21] = 1
        t[22] = 8
        t[23] = 10
        _put32(t + 24, tsv)
        _put32(t + 28, <uint32_t>tsecr)
    if plen:
        memcpy(t + hl, &payload[0], plen)
    _put16(t + 16, c_checksum(t, hl + plen, _pseudo6(out + 14, 6, <uint32_t>(hl + plen))))
    return 54 + hl + plen
