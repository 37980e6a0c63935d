# Header emit into a TX slot from a per-flow template.
#
# A template holds the Ethernet + IPv4 (+ UDP) header of a flow with every
# per-packet field left for emit to fill: IPv4 total length, identification,
# flags/fragment offset, header checksum; UDP length and checksum.


cdef inline void _put16(uint8_t *p, uint16_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 8)
    p[1] = <uint8_t>v


cdef inline void _ipv4_finish(uint8_t *ip, Py_ssize_t total_len, uint16_t ident, uint16_t frag) noexcept nogil:
    _put16(ip + 2, <uint16_t>total_len)
    _put16(ip + 4, ident)
    _put16(ip + 6, frag)
    ip[10] = 0
    ip[11] = 0
    _put16(ip + 10, c_checksum(ip, (ip[0] & 0x0f) * 4, 0))


def emit_udp(unsigned char[::1] slot, const unsigned char[::1] template, unsigned int ident, const unsigned char[::1] payload):
    """Write template (14-byte Ethernet + 20-byte IPv4 + 8-byte UDP) and payload into slot.

    Fills IPv4 total length, identification (DF clear, no fragment), header
    checksum, UDP length and checksum (0 sent as 0xffff, RFC 768).
    Returns the frame length.
    """
    cdef Py_ssize_t tl = template.shape[0]
    cdef Py_ssize_t plen = payload.shape[0]
    cdef Py_ssize_t ulen = 8 + plen
    cdef Py_ssize_t flen = 42 + plen
    cdef uint8_t *out
    cdef uint16_t s
    if tl != 42:
        raise ValueError("UDP template must be 42 bytes (Ethernet + IPv4 without options + UDP)")
    if ulen > 0xffff - 20:
        raise ValueError("UDP datagram too long")
    if slot.shape[0] < flen:
        raise ValueError("TX slot too small for this frame")
    out = &slot[0]
    memcpy(out, &template[0], 42)
    if plen:
        memcpy(out + 42, &payload[0], plen)
    _ipv4_finish(out + 14, 20 + ulen, <uint16_t>ident, 0)
    _put16(out + 38, <uint16_t>ulen)
    out[40] = 0
    out[41] = 0
    s = c_checksum(out + 34, ulen, c_pseudo_sum(_be32(out + 26), _be32(out + 30), 17, <uint32_t>ulen))
    if s == 0:
        s = 0xffff
    _put16(out + 40, s)
    return flen


def emit_ipv4(unsigned char[::1] slot, const unsigned char[::1] template, unsigned int ident, unsigned int frag, const unsigned char[::1] payload):
    """Write template (14-byte Ethernet + IPv4 header, options allowed) and payload into slot.

    ``frag`` is the 16-bit flags/fragment-offset field. Fills total length,
    identification and header checksum; the payload (an L4 message or a
    fragment of one) is copied as is. Returns the frame length.
    """
    cdef Py_ssize_t tl = template.shape[0]
    cdef Py_ssize_t plen = payload.shape[0]
    cdef Py_ssize_t ihl
    cdef uint8_t *out
    if tl < 34:
        raise ValueError("template must hold Ethernet + IPv4 headers")
    ihl = (template[14] & 0x0f) * 4
    if ihl < 20 or 14 + ihl != tl:
        raise ValueError("template length does not match its IPv4 IHL")
    if ihl + plen > 0xffff:
        raise ValueError("IPv4 packet too long")
    if frag > 0xffff:
        raise ValueError("frag is a 16-bit field")
    if slot.shape[0] < tl + plen:
        raise ValueError("TX slot too small for this frame")
    out = &slot[0]
    memcpy(out, &template[0], tl)
    if plen:
        memcpy(out + tl, &payload[0], plen)
    _ipv4_finish(out + 14, ihl + plen, <uint16_t>ident, <uint16_t>frag)
    return tl + plen
