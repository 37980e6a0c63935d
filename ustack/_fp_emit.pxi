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


cdef inline void _put32(uint8_t *p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


cdef Py_ssize_t _tcp4_write(uint8_t *out, const uint8_t *template, uint16_t ident, uint16_t sport, uint16_t dport,
                            uint32_t seq, uint32_t ack, uint8_t flags, uint16_t window, bint has_ts, uint32_t tsv,
                            uint32_t tsecr, const uint8_t *payload, Py_ssize_t plen) noexcept nogil:
    """``emit_tcp``'s frame into ``out`` (room checked by the caller); returns the frame length."""
    cdef Py_ssize_t hl = 32 if has_ts else 20
    cdef uint8_t *t = out + 34
    memcpy(out, template, 34)
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
    _ipv4_finish(out + 14, 20 + hl + plen, ident, 0x4000)
    _put16(t + 16, c_checksum(t, hl + plen, c_pseudo_sum(_be32(out + 26), _be32(out + 30), 6, <uint32_t>(hl + plen))))
    return 34 + hl + plen


def emit_tcp(unsigned char[::1] slot, const unsigned char[::1] template, unsigned int ident,
             unsigned int sport, unsigned int dport, unsigned long seq, unsigned long ack,
             unsigned int flags, unsigned int window, tsval, unsigned long tsecr,
             const unsigned char[::1] payload):
    """Write one TCP segment of an established flow straight into a TX slot.

    ``template`` is the flow's 14-byte Ethernet + 20-byte IPv4 header (proto 6).
    The TCP header carries no options, or only the timestamps option as
    NOP NOP TS (RFC 7323 appendix A layout) when ``tsval`` is not None.
    Fills IPv4 total length, identification, DF and header checksum, and the
    TCP checksum over the pseudo-header, header and payload. Returns the frame
    length. (SYNs, RSTs and segments with SACK blocks take the general path.)
    """
    cdef Py_ssize_t plen = payload.shape[0]
    cdef Py_ssize_t hl = 32 if tsval is not None else 20
    cdef Py_ssize_t flen = 34 + hl + plen
    cdef uint32_t tsv = 0
    if template.shape[0] != 34 or (template[14] & 0x0f) != 5 or template[23] != 6:
        raise ValueError("TCP template must be Ethernet + a 20-byte IPv4 header with protocol 6")
    if sport > 0xffff or dport > 0xffff or flags > 0xff or window > 0xffff:
        raise ValueError("port, flags or window out of range")
    if seq > 0xffffffffUL or ack > 0xffffffffUL or tsecr > 0xffffffffUL:
        raise ValueError("sequence numbers and timestamps are 32-bit")
    if tsval is not None:
        if not 0 <= tsval <= 0xffffffff:
            raise ValueError("sequence numbers and timestamps are 32-bit")
        tsv = <uint32_t>tsval
    if 20 + hl + plen > 0xffff:
        raise ValueError("IPv4 packet too long")
    if slot.shape[0] < flen:
        raise ValueError("TX slot too small for this frame")
    _tcp4_write(&slot[0], &template[0], <uint16_t>ident, <uint16_t>sport, <uint16_t>dport, <uint32_t>seq,
                <uint32_t>ack, <uint8_t>flags, <uint16_t>window, hl == 32, tsv, <uint32_t>tsecr,
                &payload[0] if plen else NULL, plen)
    return flen


def emit_tcp_options(unsigned char[::1] slot, const unsigned char[::1] template, unsigned int ident,
                     unsigned int sport, unsigned int dport, unsigned long seq, unsigned long ack,
                     unsigned int flags, unsigned int window, const unsigned char[::1] options):
    """Write one TCP segment without data but with ``options`` (a SYN or SYN-ACK) into a TX slot.

    ``template`` as for ``emit_tcp``; ``options`` are the header's option
    bytes, padded by the caller to a multiple of 4 and at most 40 (RFC 9293
    3.1). Fills IPv4 total length, identification, DF and header checksum,
    the data offset and the TCP checksum. Returns the frame length.
    """
    cdef Py_ssize_t olen = options.shape[0]
    cdef Py_ssize_t hl = 20 + olen
    cdef Py_ssize_t flen = 34 + hl
    cdef uint8_t *out
    cdef uint8_t *t
    if template.shape[0] != 34 or (template[14] & 0x0f) != 5 or template[23] != 6:
        raise ValueError("TCP template must be Ethernet + a 20-byte IPv4 header with protocol 6")
    if olen > 40 or olen & 3:
        raise ValueError("TCP options must be a multiple of 4 bytes, at most 40")
    if sport > 0xffff or dport > 0xffff or flags > 0xff or window > 0xffff:
        raise ValueError("port, flags or window out of range")
    if seq > 0xffffffffUL or ack > 0xffffffffUL:
        raise ValueError("sequence numbers are 32-bit")
    if slot.shape[0] < flen:
        raise ValueError("TX slot too small for this frame")
    out = &slot[0]
    memcpy(out, &template[0], 34)
    t = out + 34
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
    _ipv4_finish(out + 14, 20 + hl, <uint16_t>ident, 0x4000)
    _put16(t + 16, c_checksum(t, hl, c_pseudo_sum(_be32(out + 26), _be32(out + 30), 6, <uint32_t>hl)))
    return flen
