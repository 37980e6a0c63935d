# Internet checksum (RFC 1071) and incremental update (RFC 1624).
#
# The sum is taken over native-order 32-bit loads into a 64-bit accumulator
# and byte-swapped once at the end: the ones'-complement sum is
# byte-order independent (RFC 1071 section 2(B)), and the order of the
# additions does not matter either (2(A)), so long runs are summed 64 bytes
# at a time in four 64-bit lanes of AVX2 registers where the CPU has them
# (checked at run time; elsewhere the scalar loop does it all).

from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

cdef extern from *:
    """
    static inline uint16_t us_bswap16(uint16_t v) { return (uint16_t)((v >> 8) | (v << 8)); }
    """
    uint16_t us_bswap16(uint16_t v) nogil

cdef extern from *:
    """
    #if defined(__GNUC__) && defined(__x86_64__)
    #include <immintrin.h>
    /* Sum the native-order 32-bit words of `blocks` 64-byte blocks into 64-bit lanes (no carries
       are lost: each lane gains < 2^32 per word). */
    __attribute__((target("avx2")))
    static uint64_t us_sum_blocks_avx2(const uint8_t *p, Py_ssize_t blocks) {
        const __m256i zero = _mm256_setzero_si256();
        __m256i lo = zero, hi = zero;
        uint64_t lanes[4];
        for (; blocks > 0; blocks--, p += 64) {
            __m256i a = _mm256_loadu_si256((const __m256i *)p);
            __m256i b = _mm256_loadu_si256((const __m256i *)(p + 32));
            lo = _mm256_add_epi64(lo, _mm256_unpacklo_epi32(a, zero));
            hi = _mm256_add_epi64(hi, _mm256_unpackhi_epi32(a, zero));
            lo = _mm256_add_epi64(lo, _mm256_unpacklo_epi32(b, zero));
            hi = _mm256_add_epi64(hi, _mm256_unpackhi_epi32(b, zero));
        }
        _mm256_storeu_si256((__m256i *)lanes, _mm256_add_epi64(lo, hi));
        return lanes[0] + lanes[1] + lanes[2] + lanes[3];
    }
    static inline int us_have_avx2(void) { return __builtin_cpu_supports("avx2"); }
    #else
    static uint64_t us_sum_blocks_avx2(const uint8_t *p, Py_ssize_t blocks) { (void)p; (void)blocks; return 0; }
    static inline int us_have_avx2(void) { return 0; }
    #endif
    """
    uint64_t us_sum_blocks_avx2(const uint8_t *p, Py_ssize_t blocks) nogil
    int us_have_avx2() nogil


cdef inline uint64_t _sum_native(const uint8_t *p, Py_ssize_t n) noexcept nogil:
    """Accumulate native-order words of p[0:n] (n may be odd) into a 64-bit sum."""
    cdef uint64_t acc = 0
    cdef uint32_t w32
    cdef uint16_t w16 = 0
    if n >= 128 and us_have_avx2():
        acc = us_sum_blocks_avx2(p, n >> 6)
        p += n & ~(<Py_ssize_t>63)
        n &= 63
    while n >= 32:
        memcpy(&w32, p, 4); acc += w32
        memcpy(&w32, p + 4, 4); acc += w32
        memcpy(&w32, p + 8, 4); acc += w32
        memcpy(&w32, p + 12, 4); acc += w32
        memcpy(&w32, p + 16, 4); acc += w32
        memcpy(&w32, p + 20, 4); acc += w32
        memcpy(&w32, p + 24, 4); acc += w32
        memcpy(&w32, p + 28, 4); acc += w32
        p += 32
        n -= 32
    while n >= 4:
        memcpy(&w32, p, 4); acc += w32
        p += 4
        n -= 4
    if n >= 2:
        memcpy(&w16, p, 2); acc += w16
        p += 2
        n -= 2
    if n:
        w16 = 0
        (<uint8_t *>&w16)[0] = p[0]
        acc += w16
    return acc


cdef inline uint16_t _fold(uint64_t acc) noexcept nogil:
    acc = (acc & 0xffffffffULL) + (acc >> 32)
    acc = (acc & 0xffffffffULL) + (acc >> 32)
    acc = (acc & 0xffff) + (acc >> 16)
    acc = (acc & 0xffff) + (acc >> 16)
    return <uint16_t>acc


cdef inline uint16_t c_ones_sum(const uint8_t *p, Py_ssize_t n, uint16_t initial) noexcept nogil:
    """Ones'-complement sum in network order (0..0xffff), `initial` in network order."""
    cdef uint64_t acc = _sum_native(p, n)
    acc += us_bswap16(initial)
    return us_bswap16(_fold(acc))


cdef inline uint16_t c_checksum(const uint8_t *p, Py_ssize_t n, uint16_t initial) noexcept nogil:
    return <uint16_t>(~c_ones_sum(p, n, initial))


cdef inline uint16_t c_add16(uint16_t a, uint16_t b) noexcept nogil:
    cdef uint32_t s = <uint32_t>a + b
    return <uint16_t>((s & 0xffff) + (s >> 16))


cdef inline uint16_t c_pseudo_sum(uint32_t src, uint32_t dst, uint8_t proto, uint32_t length) noexcept nogil:
    """Pseudo-header sum (src/dst as host-order integers of the network-order addresses)."""
    cdef uint64_t acc = (src >> 16) + (src & 0xffff) + (dst >> 16) + (dst & 0xffff) + proto + length
    return _fold(acc)


def ones_sum(const unsigned char[::1] data, unsigned int initial=0):
    """Ones'-complement sum of data (16-bit big-endian words) plus initial, 0..0xffff."""
    if initial > 0xffff:
        raise ValueError("initial must be a 16-bit value")
    cdef Py_ssize_t n = data.shape[0]
    if n == 0:
        return initial
    return c_ones_sum(&data[0], n, <uint16_t>initial)


def checksum(const unsigned char[::1] data, unsigned int initial=0):
    """The Internet checksum field value for data (ones' complement of ones_sum)."""
    if initial > 0xffff:
        raise ValueError("initial must be a 16-bit value")
    cdef Py_ssize_t n = data.shape[0]
    if n == 0:
        return (~initial) & 0xffff
    return c_checksum(&data[0], n, <uint16_t>initial)


def checksum_update(unsigned int old_checksum, unsigned int old_word, unsigned int new_word):
    """RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') for one 16-bit field changing m -> m'."""
    if old_checksum > 0xffff or old_word > 0xffff or new_word > 0xffff:
        raise ValueError("checksum and words are 16-bit values")
    cdef uint16_t s = c_add16(c_add16(<uint16_t>(~old_checksum), <uint16_t>(~old_word)), <uint16_t>new_word)
    return <uint16_t>(~s)


def checksum_update32(unsigned int old_checksum, unsigned long old_value, unsigned long new_value):
    """RFC 1624 update for a 32-bit field (two 16-bit words), e.g. an address rewrite."""
    if old_checksum > 0xffff or old_value > 0xffffffff or new_value > 0xffffffff:
        raise ValueError("checksum is 16-bit, values are 32-bit")
    cdef uint16_t s = <uint16_t>(~old_checksum)
    s = c_add16(s, <uint16_t>(~(old_value >> 16)))
    s = c_add16(s, <uint16_t>(~(old_value & 0xffff)))
    s = c_add16(s, <uint16_t>(new_value >> 16))
    s = c_add16(s, <uint16_t>(new_value & 0xffff))
    return <uint16_t>(~s)
