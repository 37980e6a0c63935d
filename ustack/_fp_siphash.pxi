# SipHash (Aumasson and Bernstein, "SipHash: a fast short-input PRF", 2012): a keyed hash for tables that
# remote traffic fills. With a secret random key an attacker cannot choose keys that collide (issue 25:
# 1,500 IPv6 sources of one /64 sharing one bucket of the unkeyed flow hash made every lookup linear).
# SipHash-c-d: c compression rounds per 8-byte word, d finalization rounds; the flow table uses 1-3
# (as CPython's str hash and Rust's HashMap default do), ``siphash`` takes any c and d for the tests'
# published 2-4 vectors. Words are read little-endian, as the specification says.

from libc.stdint cimport uint64_t


cdef inline uint64_t _rotl(uint64_t x, int b) noexcept nogil:
    return (x << b) | (x >> (64 - b))


cdef struct SipState:
    uint64_t v0
    uint64_t v1
    uint64_t v2
    uint64_t v3


cdef inline void _sip_round(SipState *s) noexcept nogil:
    s.v0 += s.v1
    s.v1 = _rotl(s.v1, 13)
    s.v1 ^= s.v0
    s.v0 = _rotl(s.v0, 32)
    s.v2 += s.v3
    s.v3 = _rotl(s.v3, 16)
    s.v3 ^= s.v2
    s.v0 += s.v3
    s.v3 = _rotl(s.v3, 21)
    s.v3 ^= s.v0
    s.v2 += s.v1
    s.v1 = _rotl(s.v1, 17)
    s.v1 ^= s.v2
    s.v2 = _rotl(s.v2, 32)


cdef inline void _sip_init(SipState *s, uint64_t k0, uint64_t k1) noexcept nogil:
    s.v0 = k0 ^ <uint64_t>0x736f6d6570736575ULL
    s.v1 = k1 ^ <uint64_t>0x646f72616e646f6dULL
    s.v2 = k0 ^ <uint64_t>0x6c7967656e657261ULL
    s.v3 = k1 ^ <uint64_t>0x7465646279746573ULL


cdef inline void _sip_word(SipState *s, uint64_t m, int c) noexcept nogil:
    cdef int i
    s.v3 ^= m
    for i in range(c):
        _sip_round(s)
    s.v0 ^= m


cdef inline uint64_t _sip_final(SipState *s, int d) noexcept nogil:
    cdef int i
    s.v2 ^= 0xff
    for i in range(d):
        _sip_round(s)
    return s.v0 ^ s.v1 ^ s.v2 ^ s.v3


cdef inline uint64_t _le64(const uint8_t *p) noexcept nogil:
    cdef uint64_t m = 0
    cdef int i
    for i in range(8):
        m |= (<uint64_t>p[i]) << (8 * i)
    return m


cdef inline uint64_t _siphash13_40(uint64_t k0, uint64_t k1, uint64_t m0, uint64_t m1, uint64_t m2, uint64_t m3,
                                   uint64_t m4) noexcept nogil:
    """SipHash-1-3 of a 40-byte message given as its five little-endian words (the flow table's key)."""
    cdef SipState s
    _sip_init(&s, k0, k1)
    _sip_word(&s, m0, 1)
    _sip_word(&s, m1, 1)
    _sip_word(&s, m2, 1)
    _sip_word(&s, m3, 1)
    _sip_word(&s, m4, 1)
    _sip_word(&s, <uint64_t>40 << 56, 1)  # the last block: no bytes left, the length in the top byte
    return _sip_final(&s, 3)


def siphash(bytes key, const uint8_t[:] data, int c=1, int d=3):
    """SipHash-c-d of ``data`` under the 16-byte ``key`` (an int below 2**64); for tests and tools."""
    cdef SipState s
    cdef Py_ssize_t n = data.shape[0], i = 0
    cdef uint64_t last
    cdef int j
    if len(key) != 16:
        raise ValueError("a SipHash key is 16 bytes")
    if c < 1 or d < 1:
        raise ValueError("at least one round of each kind")
    _sip_init(&s, _le64(<const uint8_t *><const char *>key), _le64(<const uint8_t *><const char *>key + 8))
    while n - i >= 8:
        _sip_word(&s, _le64(&data[i]), c)
        i += 8
    last = (<uint64_t>(n & 0xff)) << 56
    for j in range(n - i):
        last |= (<uint64_t>data[i + j]) << (8 * j)
    _sip_word(&s, last, c)
    return _sip_final(&s, d)
