# Burst classify, the IPv6 part (RFC 8200): the fixed header, then UDP, TCP or
# ICMPv6 when one follows it directly (the common case, handled here in C).
# Anything else (an extension header, another next header) is K_IP6: the slow
# path (ustack.net.ipv6) walks the chain with a limit, reassembles fragments,
# and runs the upper-layer datagram through classify again as a frame without
# extension headers, so L4 validation has one home.
#
# Records carry 16-byte addresses; ``ihl`` is 40 (the fixed header), ``ttl``
# the hop limit, ``total_len`` 40 + the payload length. Bytes past the
# payload length are Ethernet padding. UDP with a zero checksum is dropped
# (RFC 8200 8.1: the checksum is mandatory over IPv6); ICMPv6 checksums are
# always verified (they cover a pseudo-header, RFC 4443 2.3).


cdef inline uint16_t _pseudo6(const uint8_t *ip6, uint8_t nh, uint32_t length) noexcept nogil:
    """IPv6 pseudo-header sum (RFC 8200 8.1): addresses, 32-bit length, next header; network order."""
    cdef uint16_t s = c_ones_sum(ip6 + 8, 32, 0)
    s = c_add16(s, <uint16_t>(length >> 16))
    s = c_add16(s, <uint16_t>(length & 0xffff))
    return c_add16(s, nh)


cdef inline Packet _ip6(Packet p, int kind, Py_ssize_t l3, Py_ssize_t tot, const uint8_t *ip6):
    """A record with the IPv6 fields filled in (ip6 points at a checked 40-byte header)."""
    p.kind = kind
    p.l3 = <int>l3
    p.ihl = 40
    p.total_len = <int>tot
    p.proto = ip6[6]
    p.ttl = ip6[7]
    p.l4 = <int>(l3 + 40)
    p._alen = 16
    memcpy(p._src, ip6 + 8, 16)
    memcpy(p._dst, ip6 + 24, 16)
    return p


cdef Packet _classify_ipv6(Packet p, const uint8_t *f, Py_ssize_t n, Py_ssize_t l3, int verify_l4):
    cdef Py_ssize_t plen, l4, ulen, doff
    cdef uint8_t nh
    if n - l3 < 40:
        return _drop(p, RC_IP6_TRUNC)
    if (f[l3] >> 4) != 6:
        return _drop(p, RC_IP6_VERSION)
    plen = _be16(f + l3 + 4)
    if l3 + 40 + plen > n:
        return _drop(p, RC_IP6_PLEN)
    # From here f[l3:l3 + 40 + plen] is inside the frame.
    nh = f[l3 + 6]
    l4 = l3 + 40
    if nh == 17:
        if plen < 8:
            return _drop(p, RC_UDP_TRUNC)
        ulen = _be16(f + l4 + 4)
        if ulen < 8 or ulen > plen:
            return _drop(p, RC_UDP_LEN)
        if _be16(f + l4 + 6) == 0:
            return _drop(p, RC_UDP6_ZERO_CSUM)
        if not _l4_sum_ok(p, f + l4, ulen, 6, _pseudo6(f + l3, 17, <uint32_t>ulen), verify_l4):
            return _drop(p, RC_UDP_CSUM)
        _ip6(p, CK_UDP6, l3, 40 + plen, f + l3)
        p.src_port = _be16(f + l4)
        p.dst_port = _be16(f + l4 + 2)
        p.payload_off = <int>(l4 + 8)
        p.payload_len = <int>(ulen - 8)
        return p
    if nh == 6:
        # The checks of the IPv4 branch, in the same order (RFC 9293 3.1).
        if plen < 20:
            return _drop(p, RC_TCP_TRUNC)
        doff = (f[l4 + 12] >> 4) * 4
        if doff < 20 or doff > plen:
            return _drop(p, RC_TCP_DOFF)
        if not _l4_sum_ok(p, f + l4, plen, 16, _pseudo6(f + l3, 6, <uint32_t>plen), verify_l4):
            return _drop(p, RC_TCP_CSUM)
        _ip6(p, CK_TCP6, l3, 40 + plen, f + l3)
        if doff > 20 and not _tcp_options(p, f + l4 + 20, doff - 20):
            return _drop(p, RC_TCP_OPTIONS)
        p.src_port = _be16(f + l4)
        p.dst_port = _be16(f + l4 + 2)
        p.seq = _be32(f + l4 + 4)
        p.ack = _be32(f + l4 + 8)
        p.header_len = <int>doff
        p.flags = f[l4 + 13]
        p.window = _be16(f + l4 + 14)
        p.checksum = _be16(f + l4 + 16)
        p.urgent = _be16(f + l4 + 18)
        p.payload_off = <int>(l4 + doff)
        p.payload_len = <int>(plen - doff)
        return p
    if nh == 58:
        if plen < 8:
            return _drop(p, RC_ICMP6_TRUNC)
        if c_ones_sum(f + l4, plen, _pseudo6(f + l3, 58, <uint32_t>plen)) != 0xffff:
            return _drop(p, RC_ICMP6_CSUM)
        _ip6(p, CK_ICMP6, l3, 40 + plen, f + l3)
        p.icmp_type = f[l4]
        p.icmp_code = f[l4 + 1]
        p.payload_off = <int>(l4 + 8)
        p.payload_len = <int>(plen - 8)
        return p
    _ip6(p, CK_IP6, l3, 40 + plen, f + l3)
    p.payload_off = <int>l4
    p.payload_len = <int>plen
    return p
