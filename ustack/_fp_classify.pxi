# Burst classify: validate and parse Ethernet / IPv4 / UDP / TCP / ICMP of a
# whole burst in one call, one typed record (a Packet) per frame.
#
# The TCP header is parsed here once, options included (RFC 9293 3.1/3.2,
# RFC 7323, RFC 2018), with the rules of ustack.wire.tcp._parse_options; the
# Packet exposes it under TcpHeader's attribute names so TCP code can take
# either.
#
# Every length is checked before a field is read: bounds checks are off in
# this module, so these checks are the only guard against hostile frames.
# Records hold no reference to the frame: the ring may reuse its memory as
# soon as the burst is released.

cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.object cimport Py_TYPE
from cpython.ref cimport Py_REFCNT

# Record kinds (Packet.kind). The only definition: Python code imports them from here.
K_DROP = 0         # malformed or not for us; reason says why
K_ARP = 1          # ARP: slow path parses it (l3 is the ARP packet's offset)
K_UDP = 2          # IPv4/UDP, header and checksum verified
K_TCP = 3          # IPv4/TCP, header, checksum and option list verified and parsed
K_ICMP = 4         # IPv4/ICMP, checksum verified
K_FRAG = 5         # IPv4 fragment: reassemble, then L4 is checked by the slow path
K_IP_OTHER = 6     # IPv4 with another protocol number
# IPv6 kinds: see _fp_classify6.pxi
K_UDP6 = 7         # IPv6/UDP (no extension headers), header and checksum verified
K_TCP6 = 8         # IPv6/TCP (no extension headers), as K_TCP
K_ICMP6 = 9        # IPv6/ICMPv6 (no extension headers), checksum verified
K_IP6 = 10         # IPv6 with extension headers or another next header: the slow path walks it

_KIND_NAMES = ("K_DROP", "K_ARP", "K_UDP", "K_TCP", "K_ICMP", "K_FRAG", "K_IP_OTHER", "K_UDP6", "K_TCP6", "K_ICMP6",
               "K_IP6")

# Drop reasons (Packet.reason indexes REASONS); names match ustack.wire's WireError reasons
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
    "tcp.bad_options",
    "ipv6.truncated",
    "ipv6.bad_version",
    "ipv6.bad_payload_length",
    "udp.zero_checksum",
    "icmpv6.truncated",
    "icmpv6.bad_checksum",
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
    RC_TCP_OPTIONS = 18
    RC_IP6_TRUNC = 19
    RC_IP6_VERSION = 20
    RC_IP6_PLEN = 21
    RC_UDP6_ZERO_CSUM = 22
    RC_ICMP6_TRUNC = 23
    RC_ICMP6_CSUM = 24

cdef enum:
    CK_DROP = 0
    CK_ARP = 1
    CK_UDP = 2
    CK_TCP = 3
    CK_ICMP = 4
    CK_FRAG = 5
    CK_IP_OTHER = 6
    CK_UDP6 = 7
    CK_TCP6 = 8
    CK_ICMP6 = 9
    CK_IP6 = 10

# Which TCP options a Packet carries (Packet._opts bits).
cdef enum:
    OPTF_MSS = 1
    OPTF_WSCALE = 2
    OPTF_TIMESTAMPS = 4

# At most 40 octets of TCP options (data offset <= 15 words, RFC 9293 3.1), so
# one SACK option (length 8n+2 <= 40, RFC 2018 section 3) holds at most 4 blocks.
cdef enum:
    TCP_MAX_OPTIONS = 40
    SACK_MAX_BLOCKS = 4


cdef inline uint16_t _be16(const uint8_t *p) noexcept nogil:
    return (<uint16_t>p[0] << 8) | p[1]


cdef inline uint32_t _be32(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


@cython.final
@cython.no_gc
@cython.auto_pickle(False)
cdef class Packet:
    """One classified frame, made by ``classify()`` / ``classify_one()`` only.

    Every field is a C value, read-only from Python. ``kind`` is one of the
    module's ``K_*`` constants; for ``K_DROP``, ``reason`` indexes
    ``REASONS`` (``reason_name``), otherwise it is 0. Offsets (``l3``,
    ``l4``, ``payload_off``) are from the start of the frame.

    - ``K_ARP``: ``l3`` only.
    - IP kinds (IPv4, and IPv6 with 16-byte addresses: _fp_classify6.pxi): ``l3``, ``ihl``, ``total_len``, ``proto``, ``ttl``,
      ``l4``, ``payload_off``, ``payload_len``, ``src``/``dst`` (packed
      4-byte ``bytes``, built on each access: bind them once). A fragment
      or another protocol: the payload is everything after the IPv4 header.
    - ``K_UDP``/``K_TCP``: ``src_port``, ``dst_port``. ``K_ICMP``:
      ``icmp_type``, ``icmp_code``.
    - ``K_TCP``: the header under ``ustack.wire.tcp.TcpHeader``'s names
      (``seq``, ``ack``, ``flags``, ``window``, ``urgent``, ``checksum``,
      ``header_len``, ``mss``, ``wscale``, ``sack_permitted``,
      ``sack_blocks``, ``timestamps``, ``unknown_options``); the option
      values are kept in C and the tuples built when read.

    Fields that do not apply to the kind are 0, ``b""``, ``None`` or ``()``.
    """

    cdef readonly int kind
    cdef readonly int reason
    cdef readonly int l3
    cdef readonly int ihl
    cdef readonly int total_len
    cdef readonly int proto
    cdef readonly int ttl
    cdef readonly int l4
    cdef readonly int payload_off
    cdef readonly int payload_len
    cdef readonly int src_port
    cdef readonly int dst_port
    cdef readonly int icmp_type
    cdef readonly int icmp_code
    # TCP header (RFC 9293 3.1)
    cdef readonly uint32_t seq
    cdef readonly uint32_t ack
    cdef readonly int flags
    cdef readonly int window
    cdef readonly int checksum
    cdef readonly int urgent
    cdef readonly int header_len
    cdef readonly bint sack_permitted
    # How the UDP/TCP checksum was accepted: CSUM_STATE_VERIFIED (checked here, or no L4 sum),
    # CSUM_STATE_TRUSTED (the device marked it verified or written locally; or a device that
    # verifies everything), CSUM_STATE_PARTIAL (a local sender's pseudo-header-only sum, recognised)
    cdef readonly int csum_state
    cdef readonly bint link_group  # the destination MAC's group bit: link-layer broadcast or multicast
    # TCP options, C side (properties below build the Python values)
    cdef uint8_t _opts             # OPTF_* bits
    cdef uint8_t _wscale
    cdef uint16_t _mss
    cdef uint32_t _tsval
    cdef uint32_t _tsecr
    cdef uint8_t _nsack            # blocks of the last SACK option
    cdef uint32_t _sack[2 * SACK_MAX_BLOCKS]
    cdef uint8_t _unklen           # options of other kinds, copied whole (kind, length, data)
    cdef uint8_t _unk[TCP_MAX_OPTIONS]
    # addresses, network order; _alen is 4 for IPv4, 16 for IPv6, 0 when not IP
    cdef uint8_t _alen
    cdef uint8_t _src[16]
    cdef uint8_t _dst[16]

    def __init__(self):
        raise TypeError("Packet records are made by _fastpath.classify()")

    @property
    def reason_name(self):
        return REASONS[self.reason]

    @property
    def src(self):
        return PyBytes_FromStringAndSize(<const char *>self._src, self._alen)

    @property
    def dst(self):
        return PyBytes_FromStringAndSize(<const char *>self._dst, self._alen)

    @property
    def mss(self):
        return self._mss if self._opts & OPTF_MSS else None

    @property
    def wscale(self):
        return self._wscale if self._opts & OPTF_WSCALE else None

    @property
    def timestamps(self):
        return (self._tsval, self._tsecr) if self._opts & OPTF_TIMESTAMPS else None

    @property
    def sack_blocks(self):
        if not self._nsack:
            return ()
        return tuple([(self._sack[2 * k], self._sack[2 * k + 1]) for k in range(self._nsack)])

    @property
    def unknown_options(self):
        """``(kind, data)`` for each option of a kind not parsed into a field, in order."""
        cdef Py_ssize_t i = 0
        if not self._unklen:
            return ()
        out = []
        # _tcp_options copied whole options only, each with its checked length (>= 2).
        while i + 1 < self._unklen:
            out.append((self._unk[i], PyBytes_FromStringAndSize(<const char *>self._unk + i + 2, self._unk[i + 1] - 2)))
            i += self._unk[i + 1]
        return tuple(out)

    def __repr__(self):
        if self.kind == CK_DROP:
            return f"<Packet K_DROP {self.reason_name}>"
        if self.kind == CK_ARP:
            return f"<Packet K_ARP l3={self.l3}>"
        text = f"<Packet {_KIND_NAMES[self.kind]} {bytes(self.src).hex()} > {bytes(self.dst).hex()} proto={self.proto}"
        if self.kind in (CK_UDP, CK_TCP, CK_UDP6, CK_TCP6):
            text += f" ports={self.src_port}>{self.dst_port}"
        elif self.kind == CK_ICMP or self.kind == CK_ICMP6:
            text += f" type={self.icmp_type} code={self.icmp_code}"
        if self.kind == CK_TCP or self.kind == CK_TCP6:
            text += f" seq={self.seq} ack={self.ack} flags={self.flags:#04x} win={self.window}"
        return text + f" payload={self.payload_off}+{self.payload_len}>"


cdef inline bint _ip_options_ok(const uint8_t *o, Py_ssize_t n) noexcept nogil:
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


cdef bint _tcp_options(Packet p, const uint8_t *o, Py_ssize_t n) noexcept:
    """Walk the TCP option list o[0:n] (n <= 40) into p; False when it is malformed.

    The same rules as ustack.wire.tcp._parse_options, in the same order:
    - RFC 9293 3.1: kind 0 (End of Option List) ends the walk, whatever
      follows is padding; kind 1 (No-Operation) is one octet; every other
      option is kind, length (counting both), data. A missing length octet,
      a length below 2 or one running past the header is malformed
      (RFC 9293 3.1 MUST-7 asks to be prepared for an illegal length).
    - Known kinds must have their exact lengths: MSS 4 (RFC 9293 3.2),
      window scale 3 (RFC 7323 2.2), SACK-permitted 2 (RFC 2018 section 2),
      SACK 8n+2 with n >= 1 (RFC 2018 section 3), timestamps 10
      (RFC 7323 3.2). A repeated option: the last one counts.
    - Other kinds are kept, in order, for unknown_options.
    """
    cdef Py_ssize_t i = 0, j, k
    cdef uint8_t kind, olen
    while i < n:
        kind = o[i]
        if kind == 0:
            break
        if kind == 1:
            i += 1
            continue
        if i + 1 >= n:
            return False
        olen = o[i + 1]
        if olen < 2 or i + olen > n:
            return False
        # From here o[i:i + olen] is inside the list.
        if kind == 2:  # Maximum Segment Size
            if olen != 4:
                return False
            p._mss = _be16(o + i + 2)
            p._opts |= OPTF_MSS
        elif kind == 3:  # Window Scale
            if olen != 3:
                return False
            p._wscale = o[i + 2]
            p._opts |= OPTF_WSCALE
        elif kind == 4:  # SACK-permitted
            if olen != 2:
                return False
            p.sack_permitted = True
        elif kind == 5:  # SACK: (left, right) edges, 8 octets each
            if olen < 10 or (olen - 2) % 8:
                return False
            k = (olen - 2) // 8
            if k > SACK_MAX_BLOCKS:  # cannot happen with n <= 40; guards _sack
                return False
            p._nsack = <uint8_t>k
            j = 0
            while j < k:
                p._sack[2 * j] = _be32(o + i + 2 + 8 * j)
                p._sack[2 * j + 1] = _be32(o + i + 6 + 8 * j)
                j += 1
        elif kind == 8:  # Timestamps: TSval, TSecr
            if olen != 10:
                return False
            p._tsval = _be32(o + i + 2)
            p._tsecr = _be32(o + i + 6)
            p._opts |= OPTF_TIMESTAMPS
        else:  # kept whole for unknown_options
            if p._unklen + olen > TCP_MAX_OPTIONS:  # cannot happen: the options fit in n <= 40; guards _unk
                return False
            memcpy(p._unk + p._unklen, o + i, olen)
            p._unklen += olen
        i += olen
    return True


cdef inline Packet _new():
    return Packet.__new__(Packet)


cdef inline void _reset(Packet p) noexcept:
    """Every C field of ``p`` back to 0, as a new record has them (Packet holds no Python object)."""
    cdef char *first = <char *>&p.kind  # the first field declared
    memset(first, 0, Py_TYPE(p).tp_basicsize - (first - <char *><void *>p))


cdef Packet _drop(Packet p, int reason):
    _reset(p)  # whatever was filled in before the frame turned out bad
    p.reason = reason
    return p


cdef inline Packet _ip(Packet p, int kind, Py_ssize_t l3, Py_ssize_t ihl, Py_ssize_t tot, const uint8_t *ip):
    """Fill in the IPv4 fields of the (zeroed) record (ip points at a checked 20-byte header)."""
    p.kind = kind
    p.l3 = <int>l3
    p.ihl = <int>ihl
    p.total_len = <int>tot
    p.proto = ip[9]
    p.ttl = ip[8]
    p.l4 = <int>(l3 + ihl)
    p._alen = 4
    memcpy(p._src, ip + 12, 4)
    memcpy(p._dst, ip + 16, 4)
    return p


# How classify judges a frame's UDP/TCP checksum (its ``verify_l4`` per frame).
cdef enum:
    CC_SKIP = 0           # trust it: the device verified it, or marked it written on this host
    CC_VERIFY = 1         # verify it in software: a frame that crossed a wire
    CC_LOCAL_PARTIAL = 2  # verify it, but accept the pseudo-header-only sum of a sender on this host
    CC_STATE_VERIFIED = 0
    CC_STATE_TRUSTED = 1
    CC_STATE_PARTIAL = 2
    CC_RX_TRUSTED = 0x8 | 0x80
CSUM_SKIP, CSUM_VERIFY, CSUM_LOCAL_PARTIAL = CC_SKIP, CC_VERIFY, CC_LOCAL_PARTIAL  # for Python
# A sender on this host whose device offers checksum offload (a veth, as the kernel sets one up)
# leaves the L4 checksum partial (Linux's CHECKSUM_PARTIAL): the field holds only the folded
# pseudo-header sum, for hardware that a veth does not have to finish. The kernel's own input
# trusts such frames (they never left the machine); AF_PACKET marks them (TP_STATUS_CSUMNOTREADY),
# AF_XDP does not, so on a link where no wire can corrupt a frame (a veth) the form is recognised.
# Packet.csum_state; and the rx_status bits (Linux's tpacket ones, CC_RX_TRUSTED) that make
# classify trust a frame's L4 checksum: TP_STATUS_CSUMNOTREADY 0x8 | TP_STATUS_CSUM_VALID 0x80
CSUM_STATE_VERIFIED, CSUM_STATE_TRUSTED, CSUM_STATE_PARTIAL = CC_STATE_VERIFIED, CC_STATE_TRUSTED, CC_STATE_PARTIAL
RX_CSUM_PARTIAL, RX_CSUM_VALID = 0x8, 0x80


cdef inline bint _l4_sum_ok(Packet p, const uint8_t *l4p, Py_ssize_t n, Py_ssize_t csum_at, uint16_t pseudo,
                            int mode) noexcept:
    """Whether the UDP/TCP datagram l4p[0:n] (checksum at ``csum_at``) passes under ``mode``;
    records how in ``p.csum_state``. ``pseudo`` is the folded pseudo-header sum (RFC 9293 3.1,
    RFC 768, RFC 8200 8.1)."""
    cdef uint16_t field
    if mode == CC_SKIP:
        p.csum_state = CC_STATE_TRUSTED
        return True
    if mode == CC_LOCAL_PARTIAL:
        field = _be16(l4p + csum_at)
        # ones' complement has two zeros: the kernel may write either form of the sum
        if field == pseudo or (field == 0 and pseudo == 0xffff) or (field == 0xffff and pseudo == 0):
            p.csum_state = CC_STATE_PARTIAL
            return True
    p.csum_state = CC_STATE_VERIFIED
    return c_ones_sum(l4p, n, pseudo) == 0xffff


cdef Packet _classify_one(Packet p, const uint8_t *f, Py_ssize_t n, const uint8_t *mac, int verify_l4):
    """Classify frame f[0:n] into the zeroed record ``p`` (returned)."""
    cdef Py_ssize_t l3 = 14, ihl, tot, l4, l4len, ulen, doff
    cdef uint16_t ethertype, frag
    cdef uint8_t proto
    cdef uint32_t src, dst
    cdef uint16_t s
    if n < 14:
        return _drop(p, RC_ETH_TRUNC)
    ethertype = _be16(f + 12)
    if ethertype == 0x8100:  # one 802.1Q tag
        if n < 18:
            return _drop(p, RC_ETH_TRUNC)
        ethertype = _be16(f + 16)
        l3 = 18
    # Destination MAC: ours, broadcast, or multicast (group bit) only. A group-addressed frame draws no ICMP
    # error (RFC 1122 3.2.2, RFC 4443 2.4 (e.3)): the record says so (``link_group``).
    p.link_group = f[0] & 1
    if mac != NULL and not (f[0] & 1):
        if f[0] != mac[0] or f[1] != mac[1] or f[2] != mac[2] or f[3] != mac[3] or f[4] != mac[4] or f[5] != mac[5]:
            return _drop(p, RC_NOT_FOR_US)
    if ethertype == 0x0806:
        p.kind = CK_ARP
        p.l3 = <int>l3
        return p
    if ethertype == 0x86dd:
        return _classify_ipv6(p, f, n, l3, verify_l4)
    if ethertype != 0x0800:
        return _drop(p, RC_ETHERTYPE)
    if n - l3 < 20:
        return _drop(p, RC_IP_TRUNC)
    if (f[l3] >> 4) != 4:
        return _drop(p, RC_IP_VERSION)
    ihl = (f[l3] & 0x0f) * 4
    if ihl < 20 or l3 + ihl > n:
        return _drop(p, RC_IP_IHL)
    tot = _be16(f + l3 + 2)
    if tot < ihl or l3 + tot > n:
        return _drop(p, RC_IP_TOTLEN)
    if c_ones_sum(f + l3, ihl, 0) != 0xffff:
        return _drop(p, RC_IP_CSUM)
    if ihl > 20 and not _ip_options_ok(f + l3 + 20, ihl - 20):
        return _drop(p, RC_IP_OPTIONS)
    # From here f[l3:l3 + tot] is inside the frame and holds the whole header.
    proto = f[l3 + 9]
    frag = _be16(f + l3 + 6)
    l4 = l3 + ihl
    l4len = tot - ihl
    if frag & 0x3fff:  # MF set or non-zero offset (RFC 791)
        _ip(p, CK_FRAG, l3, ihl, tot, f + l3)
        p.payload_off = <int>l4
        p.payload_len = <int>l4len
        return p
    if proto == 17:
        if l4len < 8:
            return _drop(p, RC_UDP_TRUNC)
        ulen = _be16(f + l4 + 4)
        if ulen < 8 or ulen > l4len:
            return _drop(p, RC_UDP_LEN)
        if _be16(f + l4 + 6) != 0:  # zero = no checksum (RFC 768)
            src = _be32(f + l3 + 12)
            dst = _be32(f + l3 + 16)
            if not _l4_sum_ok(p, f + l4, ulen, 6, c_pseudo_sum(src, dst, 17, <uint32_t>ulen), verify_l4):
                return _drop(p, RC_UDP_CSUM)
        _ip(p, CK_UDP, l3, ihl, tot, f + l3)
        p.src_port = _be16(f + l4)
        p.dst_port = _be16(f + l4 + 2)
        p.payload_off = <int>(l4 + 8)
        p.payload_len = <int>(ulen - 8)
        return p
    if proto == 6:
        # RFC 9293 3.1; checks in TcpHeader.parse's order: length, data offset, checksum, options.
        if l4len < 20:
            return _drop(p, RC_TCP_TRUNC)
        doff = (f[l4 + 12] >> 4) * 4
        if doff < 20 or doff > l4len:
            return _drop(p, RC_TCP_DOFF)
        src = _be32(f + l3 + 12)
        dst = _be32(f + l3 + 16)
        if not _l4_sum_ok(p, f + l4, l4len, 16, c_pseudo_sum(src, dst, 6, <uint32_t>l4len), verify_l4):
            return _drop(p, RC_TCP_CSUM)
        _ip(p, CK_TCP, l3, ihl, tot, f + l3)
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
        p.payload_len = <int>(l4len - doff)
        return p
    if proto == 1:
        if l4len < 8:
            return _drop(p, RC_ICMP_TRUNC)
        if c_ones_sum(f + l4, l4len, 0) != 0xffff:
            return _drop(p, RC_ICMP_CSUM)
        _ip(p, CK_ICMP, l3, ihl, tot, f + l3)
        p.icmp_type = f[l4]
        p.icmp_code = f[l4 + 1]
        p.payload_off = <int>(l4 + 8)
        p.payload_len = <int>(l4len - 8)
        return p
    _ip(p, CK_IP_OTHER, l3, ihl, tot, f + l3)
    p.payload_off = <int>l4
    p.payload_len = <int>l4len
    return p


cdef inline Packet _classify_frame(Packet p, object frame, const uint8_t *mac, int verify_l4):
    cdef Py_buffer b
    PyObject_GetBuffer(frame, &b, PyBUF_SIMPLE)  # contiguous bytes, or BufferError/TypeError
    try:
        _classify_one(p, <const uint8_t *>b.buf, b.len, mac, verify_l4)
    finally:
        PyBuffer_Release(&b)
    return p


cdef const uint8_t *_mac_ptr(object mac, Py_buffer *mb) except? NULL:
    """The 6-byte MAC filter (held in mb until released), or NULL for none."""
    if mac is None:
        return NULL
    PyObject_GetBuffer(mac, mb, PyBUF_SIMPLE)
    if mb.len != 6:
        PyBuffer_Release(mb)
        raise ValueError("mac must be 6 bytes")
    return <const uint8_t *>mb.buf


def classify(frames, mac=None, int verify_l4=CC_VERIFY):
    """Classify a burst: one new ``Packet`` per frame, in order.

    ``frames`` are contiguous buffers (memoryviews into the ring, bytes...).
    ``mac`` (6 bytes) filters unicast frames not addressed to us; None
    accepts any. ``verify_l4``: CSUM_VERIFY (True) checks the UDP/TCP checksums,
    CSUM_SKIP (False) skips them (the device verified them), CSUM_LOCAL_PARTIAL
    checks them but accepts a local sender's pseudo-header-only sum; the IPv4
    header and ICMP checksums are always checked.
    (``Classifier`` does the same without making records burst after burst.)
    """
    cdef Py_buffer mb
    cdef list burst = frames if type(frames) is list else list(frames)
    cdef Py_ssize_t i, n = len(burst)
    cdef list out = [None] * n
    cdef const uint8_t *macp = _mac_ptr(mac, &mb)
    try:
        for i in range(n):
            out[i] = _classify_frame(_new(), burst[i], macp, verify_l4)
    finally:
        if macp != NULL:
            PyBuffer_Release(&mb)
    return out


def classify_one(frame, mac=None, int verify_l4=CC_VERIFY):
    """Classify one frame (the same ``Packet`` as classify() makes)."""
    cdef Py_buffer mb
    cdef const uint8_t *macp = _mac_ptr(mac, &mb)
    try:
        return _classify_frame(_new(), frame, macp, verify_l4)
    finally:
        if macp != NULL:
            PyBuffer_Release(&mb)


@cython.final
cdef class Classifier:
    """Burst classify into records kept from one burst to the next: ``classify()`` without the
    allocation and freeing of a ``Packet`` per frame.

    ``classify(frames)`` returns a new list of ``Packet`` equal to what the
    module's ``classify(frames, mac, verify_l4)`` returns, made of records
    this object keeps. A record is refilled by a later call only when
    nothing but the pool holds it any more (its reference count says so):
    a record somebody kept, or one of a burst still being delivered when a
    callback classifies again, is left alone and the pool takes a new one
    in its place. So a record never changes under whoever holds it.
    """

    cdef list _pool
    cdef Py_buffer _mb
    cdef const uint8_t *_mac
    cdef readonly int verify_l4
    cdef readonly uint64_t reused, made
    cdef readonly uint64_t trusted, partial  # L4 checksums taken on a device's mark / recognised as partial
    cdef object counters                     # the stack's Stats counters (or None): rx.csum_trusted, rx.csum_partial

    def __cinit__(self):
        self._mac = NULL

    def __init__(self, mac=None, int verify_l4=CC_VERIFY, counters=None):
        if verify_l4 not in (CC_SKIP, CC_VERIFY, CC_LOCAL_PARTIAL):
            raise ValueError("verify_l4 must be CSUM_SKIP, CSUM_VERIFY or CSUM_LOCAL_PARTIAL")
        self._pool = []
        self._mac = _mac_ptr(mac, &self._mb)
        self.verify_l4 = verify_l4
        self.counters = counters

    def __dealloc__(self):
        if self._mac != NULL:
            PyBuffer_Release(&self._mb)

    @property
    def mac(self):
        return None if self._mac == NULL else PyBytes_FromStringAndSize(<const char *>self._mac, 6)

    def classify(self, frames, list marks=None):
        """One record per frame, in order.

        ``marks``: the device's ``rx_status`` for this burst (one int per frame) or None; a frame
        whose mark has a CC_RX_TRUSTED bit (the kernel verified its checksum, or a sender on this
        host left it partial) skips the software UDP/TCP checksum, counted in ``trusted``.
        """
        cdef list pool = self._pool
        cdef list burst = frames if type(frames) is list else list(frames)
        cdef Py_ssize_t i, n = len(burst), have = len(pool)
        cdef list out = [None] * n
        cdef Packet p
        cdef const uint8_t *mac = self._mac
        cdef int verify_l4 = self.verify_l4, mode
        cdef Py_ssize_t trusted = 0, partial = 0
        cdef bint marked = marks is not None and len(marks) == n
        for i in range(n):
            mode = verify_l4
            if marked and (<long>marks[i]) & CC_RX_TRUSTED:
                mode = CC_SKIP
            if i < have:
                p = <Packet>pool[i]
                if Py_REFCNT(p) == 2:  # held by the pool and p only: no list, no caller has it
                    _reset(p)
                    self.reused += 1
                else:
                    p = _new()
                    pool[i] = p
                    self.made += 1
            else:
                p = _new()
                pool.append(p)
                have += 1
                self.made += 1
            out[i] = _classify_frame(p, burst[i], mac, mode)
            if p.csum_state:
                if p.csum_state == CC_STATE_PARTIAL:
                    partial += 1
                elif mode == CC_SKIP and verify_l4 != CC_SKIP:
                    trusted += 1
        if trusted or partial:
            self.trusted += trusted
            self.partial += partial
            if self.counters is not None:
                if trusted:
                    self.counters["rx.csum_trusted"] += trusted
                if partial:
                    self.counters["rx.csum_partial"] += partial
        return out
