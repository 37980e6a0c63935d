# Burst classify: validate and parse Ethernet / IPv4 / UDP / TCP / ICMP of a
# whole burst in one call, one flat record (a tuple) per frame.
#
# Every length is checked before a field is read: bounds checks are off in
# this module, so these checks are the only guard against hostile frames.

# Record kinds
K_DROP = 0         # malformed or not for us; reason says why
K_ARP = 1          # ARP: slow path parses it
K_UDP = 2          # IPv4/UDP, header and checksum verified
K_TCP = 3          # IPv4/TCP, header and checksum verified
K_ICMP = 4         # IPv4/ICMP, checksum verified
K_FRAG = 5         # IPv4 fragment: reassemble, then L4 is checked by the slow path
K_IP_OTHER = 6     # IPv4 with another protocol number

# Drop reasons (index into REASONS); names match ustack.wire's WireError reasons
R_OK = 0
REASONS = (
    "ok",
    "eth.truncated",
    "eth.not_for_us",
    "eth.unknown_ethertype",
    "ipv4.truncated",
    "ipv4.bad_version",
    "ipv4.bad_ihl",
    "ipv4.bad_total_length",
    "ipv4.bad_checksum",
    "udp.truncated",
    "udp.bad_length",
    "udp.bad_checksum",
    "tcp.truncated",
    "tcp.bad_data_offset",
    "tcp.bad_checksum",
    "icmp.truncated",
    "icmp.bad_checksum",
    "ipv4.bad_options",
)
cdef enum:
    RC_ETH_TRUNC = 1
    RC_NOT_FOR_US = 2
    RC_ETHERTYPE = 3
    RC_IP_TRUNC = 4
    RC_IP_VERSION = 5
    RC_IP_IHL = 6
    RC_IP_TOTLEN = 7
    RC_IP_CSUM = 8
    RC_UDP_TRUNC = 9
    RC_UDP_LEN = 10
    RC_UDP_CSUM = 11
    RC_TCP_TRUNC = 12
    RC_TCP_DOFF = 13
    RC_TCP_CSUM = 14
    RC_ICMP_TRUNC = 15
    RC_ICMP_CSUM = 16
    RC_IP_OPTIONS = 17

cdef enum:
    CK_DROP = 0
    CK_ARP = 1
    CK_UDP = 2
    CK_TCP = 3
    CK_ICMP = 4
    CK_FRAG = 5
    CK_IP_OTHER = 6


cdef inline uint16_t _be16(const uint8_t *p) noexcept nogil:
    return (<uint16_t>p[0] << 8) | p[1]


cdef inline uint32_t _be32(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline bint _options_ok(const uint8_t *o, Py_ssize_t n) noexcept nogil:
    """Walk an IPv4 option list (RFC 791 section 3.1): every option fits, lengths >= 2."""
    cdef Py_ssize_t i = 0
    cdef uint8_t kind, length
    while i < n:
        kind = o[i]
        if kind == 0:  # End of Option List
            return True
        if kind == 1:  # No Operation
            i += 1
            continue
        if i + 1 >= n:
            return False
        length = o[i + 1]
        if length < 2 or i + length > n:
            return False
        i += length
    return True


cdef tuple _drop(int reason):
    return (CK_DROP, reason, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)


cdef tuple _classify_one(const uint8_t *f, Py_ssize_t n, const uint8_t *mac, bint verify_l4):
    cdef Py_ssize_t l3 = 14, ihl, tot, l4, l4len, ulen, doff
    cdef uint16_t ethertype, frag
    cdef uint8_t proto
    cdef uint32_t src, dst
    cdef uint16_t s
    if n < 14:
        return _drop(RC_ETH_TRUNC)
    ethertype = _be16(f + 12)
    if ethertype == 0x8100:  # one 802.1Q tag
        if n < 18:
            return _drop(RC_ETH_TRUNC)
        ethertype = _be16(f + 16)
        l3 = 18
    # Destination MAC: ours, broadcast, or multicast (group bit) only.
    if mac != NULL and not (f[0] & 1):
        if f[0] != mac[0] or f[1] != mac[1] or f[2] != mac[2] or f[3] != mac[3] or f[4] != mac[4] or f[5] != mac[5]:
            return _drop(RC_NOT_FOR_US)
    if ethertype == 0x0806:
        return (CK_ARP, 0, l3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    if ethertype != 0x0800:
        return _drop(RC_ETHERTYPE)
    if n - l3 < 20:
        return _drop(RC_IP_TRUNC)
    if (f[l3] >> 4) != 4:
        return _drop(RC_IP_VERSION)
    ihl = (f[l3] & 0x0f) * 4
    if ihl < 20 or l3 + ihl > n:
        return _drop(RC_IP_IHL)
    tot = _be16(f + l3 + 2)
    if tot < ihl or l3 + tot > n:
        return _drop(RC_IP_TOTLEN)
    if c_ones_sum(f + l3, ihl, 0) != 0xffff:
        return _drop(RC_IP_CSUM)
    if ihl > 20 and not _options_ok(f + l3 + 20, ihl - 20):
        return _drop(RC_IP_OPTIONS)
    proto = f[l3 + 9]
    src = _be32(f + l3 + 12)
    dst = _be32(f + l3 + 16)
    frag = _be16(f + l3 + 6)
    l4 = l3 + ihl
    l4len = tot - ihl
    if frag & 0x3fff:  # MF set or non-zero offset (RFC 791)
        return (CK_FRAG, 0, l3, ihl, tot, proto, src, dst, l4, 0, 0, l4, l4len, 0)
    if proto == 17:
        if l4len < 8:
            return _drop(RC_UDP_TRUNC)
        ulen = _be16(f + l4 + 4)
        if ulen < 8 or ulen > l4len:
            return _drop(RC_UDP_LEN)
        if verify_l4 and _be16(f + l4 + 6) != 0:  # zero = no checksum (RFC 768)
            s = c_ones_sum(f + l4, ulen, c_pseudo_sum(src, dst, 17, ulen))
            if s != 0xffff:
                return _drop(RC_UDP_CSUM)
        return (CK_UDP, 0, l3, ihl, tot, proto, src, dst, l4, _be16(f + l4), _be16(f + l4 + 2), l4 + 8, ulen - 8, 0)
    if proto == 6:
        if l4len < 20:
            return _drop(RC_TCP_TRUNC)
        doff = (f[l4 + 12] >> 4) * 4
        if doff < 20 or doff > l4len:
            return _drop(RC_TCP_DOFF)
        if verify_l4:
            s = c_ones_sum(f + l4, l4len, c_pseudo_sum(src, dst, 6, l4len))
            if s != 0xffff:
                return _drop(RC_TCP_CSUM)
        return (CK_TCP, 0, l3, ihl, tot, proto, src, dst, l4, _be16(f + l4), _be16(f + l4 + 2), l4 + doff, l4len - doff, f[l4 + 13])
    if proto == 1:
        if l4len < 8:
            return _drop(RC_ICMP_TRUNC)
        if c_ones_sum(f + l4, l4len, 0) != 0xffff:
            return _drop(RC_ICMP_CSUM)
        return (CK_ICMP, 0, l3, ihl, tot, proto, src, dst, l4, f[l4], f[l4 + 1], l4 + 8, l4len - 8, 0)
    return (CK_IP_OTHER, 0, l3, ihl, tot, proto, src, dst, l4, 0, 0, l4, l4len, 0)


def classify(frames, mac=None, bint verify_l4=True):
    """Classify a burst. Returns one record per frame:

    (kind, reason, l3_off, ihl, total_len, proto, src, dst, l4_off,
     sport|icmp_type, dport|icmp_code, payload_off, payload_len, tcp_flags)

    src/dst are IPv4 addresses as integers. For K_DROP, ``reason`` indexes
    REASONS. ``mac`` (6 bytes) filters unicast frames not addressed to us.
    """
    cdef const unsigned char[::1] fv
    cdef const unsigned char[::1] mv
    cdef const uint8_t *macp = NULL
    cdef list out = []
    if mac is not None:
        mv = mac
        if mv.shape[0] != 6:
            raise ValueError("mac must be 6 bytes")
        macp = &mv[0]
    for frame in frames:
        fv = frame
        if fv.shape[0] == 0:
            out.append(_drop(RC_ETH_TRUNC))
        else:
            out.append(_classify_one(&fv[0], fv.shape[0], macp, verify_l4))
    return out


def classify_one(frame, mac=None, bint verify_l4=True):
    """Classify one frame (same record as classify())."""
    return classify((frame,), mac, verify_l4)[0]
