# _fp_gso.pxi: TCP segmentation offload on transmit for the AF_PACKET TX ring
# (PACKET_VNET_HDR): consecutive full-sized segments of one flow, as the stack
# wrote them one per slot, become one super-frame that the kernel cuts back
# into those very segments (net/ipv4/tcp_offload.c tcp_gso_segment,
# af_inet.c inet_gso_segment, ip6_offload.c ipv6_gso_segment).
#
#   tpv3_tx_post_gso(ring, tx_off, frame_size, frame_nr, head, lengths, max_len,
#                    max_bytes, max_segs) -> (head, frames_posted, supers, segments_merged)
#
# Every TX slot then carries a 10-byte struct virtio_net_hdr (little endian,
# as af_packet's vio_le() on every little-endian host) at the 48-byte data
# offset and the Ethernet frame right behind it; tp_len counts both. An
# ordinary frame gets an all-zero header (no checksum help, no GSO).
#
# A run of frames f0..fn (n >= 1) is merged only when the kernel's
# segmentation of the super-frame gives back f0..fn byte for byte:
# - Ethernet + IPv4 without options (no fragment bits) or IPv6 without
#   extension headers, next protocol TCP, lengths consistent with the frame;
#   the Ethernet header, TOS/traffic class + flow label, DF, TTL/hop limit
#   and addresses identical; IPv4 IDs f0.id + i (inet_gso_segment numbers the
#   segments from the super-frame's ID, one up per segment);
# - TCP: same ports, ACK number, data offset, window, urgent pointer and
#   options (so the same TSval: RFC 7323 timestamps of one burst); flags
#   exactly ACK on all but the last, which may add PSH (tcp_gso_segment
#   clears PSH/FIN on all but the last segment); SEQ(fi) = SEQ(f0) + i*MSS
#   with MSS = f0's payload length; every payload MSS except the last's
#   (1..MSS bytes);
# - at most ``max_segs`` segments, the IP datagram at most ``max_bytes`` and
#   65535 bytes, the frame within the slot.
# The super-frame: f0's headers with the IP length (and IPv4 header checksum)
# for the whole, f0's flags | fn's PSH, the TCP checksum field holding the
# pseudo-header sum (RFC 9293 3.1) over the whole segment, which the kernel
# completes per segment (VIRTIO_NET_HDR_F_NEEDS_CSUM: csum_start = the TCP
# header, csum_offset 16); the payloads of f0..fn in order. virtio_net_hdr:
# gso_type TCPV4 (1) or TCPV6 (4), gso_size = MSS, hdr_len = Ethernet + IP +
# TCP headers.
#
# The slots are compacted: the posted frames sit in consecutive slots from
# ``head`` and the slots a merge freed stay TP_STATUS_AVAILABLE after them.
# Lengths are all checked before any slot is written; a frame's fields are
# read only after its length covers them (bounds checks are off here).

from libc.string cimport memcmp, memcpy, memset
from libc.stdint cimport uint16_t, uint32_t, uint64_t

cdef enum:
    _VNET_HDR_LEN = 10
    _VNET_F_NEEDS_CSUM = 1
    _VNET_GSO_TCPV4 = 1
    _VNET_GSO_TCPV6 = 4


cdef inline void _gso_put_be16(unsigned char *p, unsigned int v) noexcept nogil:
    p[0] = (v >> 8) & 0xFF
    p[1] = v & 0xFF


cdef inline void _gso_put_le16(unsigned char *p, unsigned int v) noexcept nogil:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF


cdef inline unsigned int _gso_sum16(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """One's-complement sum of ``n`` (even) bytes, folded to 16 bits (not complemented)."""
    cdef uint64_t s = 0
    cdef Py_ssize_t i
    for i in range(0, n, 2):
        s += (<unsigned int>p[i] << 8) | p[i + 1]
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return <unsigned int>s


cdef inline Py_ssize_t _gso_headers(const unsigned char *f, Py_ssize_t length, int *v6) noexcept nogil:
    """Length of Ethernet + IP + TCP headers of a frame that may head or join a super-frame, or 0."""
    cdef unsigned int etype = _be16(f + 12)
    cdef Py_ssize_t l3, th
    if etype == 0x0800:
        if length < 14 + 20 + 20 or f[14] != 0x45 or f[23] != 6:
            return 0
        if _be16(f + 16) != <unsigned int>(length - 14) or (_be16(f + 20) & 0x3FFF) != 0:
            return 0
        v6[0] = 0
        l3 = 20
    elif etype == 0x86DD:
        if length < 14 + 40 + 20 or (f[14] >> 4) != 6 or f[20] != 6:
            return 0
        if _be16(f + 18) != <unsigned int>(length - 54):
            return 0
        v6[0] = 1
        l3 = 40
    else:
        return 0
    th = (f[14 + l3 + 12] >> 4) * 4
    if th < 20 or 14 + l3 + th >= length:  # a TCP header and at least one byte of payload
        return 0
    return 14 + l3 + th


cdef inline bint _gso_joins(const unsigned char *a, const unsigned char *b, Py_ssize_t blen, Py_ssize_t hl,
                            int v6, unsigned int index, unsigned int mss) noexcept nogil:
    """Is ``b`` segment ``index`` of the run headed by ``a`` (headers ``hl`` bytes, payload ``mss``)?"""
    cdef Py_ssize_t l3 = 40 if v6 else 20
    cdef const unsigned char *ta = a + 14 + l3
    cdef const unsigned char *tb = b + 14 + l3
    cdef Py_ssize_t pay = blen - hl
    cdef unsigned int flags
    if pay <= 0 or <unsigned int>pay > mss or memcmp(a, b, 14) != 0:
        return False
    if v6:
        if (b[14] >> 4) != 6 or b[20] != 6 or _be16(b + 18) != <unsigned int>(blen - 54):
            return False
        if memcmp(a + 14, b + 14, 4) != 0 or memcmp(a + 21, b + 21, 33) != 0:  # tc/flow; hop limit, addresses
            return False
    else:
        if b[14] != 0x45 or b[15] != a[15] or _be16(b + 16) != <unsigned int>(blen - 14):
            return False
        if _be16(b + 18) != <uint16_t>(_be16(a + 18) + index):
            return False
        if _be16(b + 20) != _be16(a + 20) or memcmp(a + 22, b + 22, 2) != 0 or memcmp(a + 26, b + 26, 8) != 0:
            return False
    flags = tb[13]
    if flags != 0x10 and flags != 0x18:  # ACK, or ACK|PSH ending the run
        return False
    if memcmp(ta, tb, 4) != 0 or memcmp(ta + 8, tb + 8, 5) != 0 or memcmp(ta + 14, tb + 14, 2) != 0:
        return False  # ports; ACK number and data offset; window
    if memcmp(ta + 18, tb + 18, hl - 14 - l3 - 18) != 0:  # urgent pointer and options
        return False
    return _be32(tb + 4) == <uint32_t>(_be32(ta + 4) + index * mss)


def tpv3_tx_post_gso(object ring, Py_ssize_t tx_off, Py_ssize_t frame_size, Py_ssize_t frame_nr,
                     Py_ssize_t head, lengths, Py_ssize_t max_len, Py_ssize_t max_bytes, Py_ssize_t max_segs):
    """``tpv3_tx_post`` for a TX socket with PACKET_VNET_HDR, merging runs of segments (see the top of the file).

    The frames were written at 48 + 10 bytes into their slots. Returns ``(head, posted, supers, merged)``:
    the new head, the slots handed to the kernel, how many of them are super-frames and how many
    segments those carry.
    """
    cdef Py_buffer rb
    cdef unsigned char *base
    cdef unsigned char *dst
    cdef unsigned char *src
    cdef unsigned char *nxt
    cdef unsigned char *th
    cdef Py_ssize_t k, j, count, length, hl, total, room, out, posted = 0, supers = 0, merged = 0
    cdef Py_ssize_t l4len, csum_start, l3
    cdef unsigned int mss, run
    cdef int v6 = 0
    cdef uint64_t s
    cdef list lens = list(lengths)
    count = len(lens)
    PyObject_GetBuffer(ring, &rb, PyBUF_WRITABLE)
    try:
        if not _ring_tx_geometry_ok(&rb, tx_off, frame_size, frame_nr, head):
            raise ValueError("bad TX ring geometry")
        room = frame_size - _TPV3_H3_SIZE - _VNET_HDR_LEN
        if max_len > room or count > frame_nr:
            raise ValueError("bad TX ring geometry")
        if max_bytes > 65535:
            max_bytes = 65535
        for k in range(count):
            length = lens[k]
            if length < 14 or length > max_len:
                raise ValueError(f"TX frame length {length} outside 14..{max_len}")
        base = <unsigned char *>rb.buf + tx_off
        out = head
        k = 0
        while k < count:
            src = base + ((head + k) % frame_nr) * frame_size + _TPV3_H3_SIZE + _VNET_HDR_LEN
            dst = base + out * frame_size + _TPV3_H3_SIZE + _VNET_HDR_LEN
            length = lens[k]
            if dst != src:
                memcpy(dst, src, length)  # slot ``out`` is behind ``k``: its frame is already posted or merged
            run = 1
            total = length
            hl = 0
            if max_segs > 1:
                hl = _gso_headers(dst, length, &v6)
            l3 = 40 if v6 else 20
            if hl and dst[14 + l3 + 13] == 0x10:  # a run starts with flags exactly ACK
                mss = <unsigned int>(length - hl)
                while k + run < count and run < <unsigned int>max_segs:
                    nxt = base + ((head + k + run) % frame_nr) * frame_size + _TPV3_H3_SIZE + _VNET_HDR_LEN
                    j = lens[k + run]
                    if total + (j - hl) - 14 > max_bytes or total + (j - hl) > room:
                        break
                    if not _gso_joins(dst, nxt, j, hl, v6, run, mss):
                        break
                    memcpy(dst + total, nxt + hl, j - hl)
                    total += j - hl
                    run += 1
                    if <unsigned int>(j - hl) < mss or nxt[14 + l3 + 13] != 0x10:
                        break  # a short or PSH segment ends the run
            memset(dst - _VNET_HDR_LEN, 0, _VNET_HDR_LEN)
            if run > 1:
                csum_start = 14 + l3
                th = dst + csum_start
                l4len = total - csum_start
                if v6:
                    _gso_put_be16(dst + 18, <unsigned int>l4len)
                else:
                    _gso_put_be16(dst + 16, <unsigned int>(total - 14))
                    dst[24] = 0
                    dst[25] = 0
                    _gso_put_be16(dst + 24, (~_gso_sum16(dst + 14, 20)) & 0xFFFF)
                # the last segment's PSH (tcp_gso_segment sets FIN/PSH on the last segment only)
                th[13] = th[13] | (base + ((head + k + run - 1) % frame_nr) * frame_size + _TPV3_H3_SIZE
                                   + _VNET_HDR_LEN)[csum_start + 13] & 0x08
                # pseudo-header sum (RFC 9293 3.1) over the whole segment, not complemented
                s = _gso_sum16(dst + (22 if v6 else 26), 32 if v6 else 8) + 6 + <uint64_t>l4len
                while s >> 16:
                    s = (s & 0xFFFF) + (s >> 16)
                _gso_put_be16(th + 16, <unsigned int>s)
                nxt = dst - _VNET_HDR_LEN
                nxt[0] = _VNET_F_NEEDS_CSUM
                nxt[1] = _VNET_GSO_TCPV6 if v6 else _VNET_GSO_TCPV4
                _gso_put_le16(nxt + 2, <unsigned int>hl)
                _gso_put_le16(nxt + 4, mss)
                _gso_put_le16(nxt + 6, <unsigned int>csum_start)
                _gso_put_le16(nxt + 8, 16)
                supers += 1
                merged += run
            nxt = base + out * frame_size
            ustack_ring_put_u32(nxt + _TPV3_H3_NEXT, 0)
            ustack_ring_put_u32(nxt + _TPV3_H3_SNAPLEN, <unsigned int>(total + _VNET_HDR_LEN))
            ustack_ring_put_u32(nxt + _TPV3_H3_LEN, <unsigned int>(total + _VNET_HDR_LEN))
            ustack_ring_store_release_u32(nxt + _TPV3_H3_STATUS, _TPV3_ST_SEND_REQUEST)
            posted += 1
            out += 1
            if out == frame_nr:
                out = 0
            k += run
        return (out, posted, supers, merged)
    finally:
        PyBuffer_Release(&rb)


# -- AF_XDP: runs of segments through an AF_PACKET socket with PACKET_VNET_HDR --
#
# AF_XDP descriptors carry no offload metadata, so an AF_XDP socket in copy
# mode sends frame by frame (one skb, one softirq and one receive by a local
# peer per frame). XskDataPath.tx_commit, given such a socket on the same
# interface (set_gso), hands each run of segments that qualifies (the rules
# above, _gso_run) to the kernel as one super-frame through it instead: one
# sendmsg of a virtio_net_hdr, the run's first headers (rewritten as above)
# and the run's payloads straight from the UMEM (an iovec each: no copy on our
# side). Both sockets transmit synchronously in the calling thread when the
# interface has no queueing discipline (noqueue, a veth's default: AF_XDP's
# generic transmit through __dev_direct_xmit, AF_PACKET's through
# dev_queue_xmit), so the wire order is the commit order as long as the AF_XDP
# ring is empty before each super-frame (tx_commit checks, else sends the run
# frame by frame).

from posix.uio cimport iovec

cdef extern from *:
    """
    #include <string.h>
    #include <sys/uio.h>
    #include <sys/socket.h>
    static inline long ustack_gso_sendmsg(int fd, struct iovec *iov, int n)
    {
        struct msghdr m;
        memset(&m, 0, sizeof m);
        m.msg_iov = iov;
        m.msg_iovlen = (size_t)n;
        return (long)sendmsg(fd, &m, MSG_DONTWAIT);
    }
    """
    long ustack_gso_sendmsg(int fd, iovec *iov, int n) nogil

cdef enum:
    _GSO_SCRATCH = _VNET_HDR_LEN + 14 + 40 + 60  # virtio_net_hdr + the largest Ethernet/IP/TCP headers merged


cdef Py_ssize_t _gso_run(unsigned char **frames, const uint32_t *lens, Py_ssize_t k, Py_ssize_t n,
                         Py_ssize_t max_bytes, Py_ssize_t max_segs, Py_ssize_t *hl_out, int *v6_out) noexcept nogil:
    """How many of frames k.. (``n`` in all) make one super-frame by the rules above (1: not a run)."""
    cdef int v6 = 0
    cdef Py_ssize_t hl = _gso_headers(frames[k], lens[k], &v6)
    cdef Py_ssize_t l3, total, j, run = 1
    cdef unsigned int mss
    if not hl or max_segs < 2:
        return 1
    l3 = 40 if v6 else 20
    if frames[k][14 + l3 + 13] != 0x10:  # a run starts with flags exactly ACK
        return 1
    mss = <unsigned int>(lens[k] - hl)
    total = lens[k]
    if max_bytes > 65535:
        max_bytes = 65535
    while k + run < n and run < max_segs:
        j = lens[k + run]
        if total + (j - hl) - 14 > max_bytes:
            break
        if not _gso_joins(frames[k], frames[k + run], j, hl, v6, <unsigned int>run, mss):
            break
        total += j - hl
        run += 1
        if <unsigned int>(j - hl) < mss or frames[k + run - 1][14 + l3 + 13] != 0x10:
            break  # a short or PSH segment ends the run
    hl_out[0] = hl
    v6_out[0] = v6
    return run


cdef long _gso_send_run(int fd, unsigned char **frames, const uint32_t *lens, Py_ssize_t k, Py_ssize_t run,
                        Py_ssize_t hl, int v6, unsigned char *scratch, iovec *iov) noexcept nogil:
    """Send frames k..k+run-1 (a run _gso_run found) as one super-frame: sendmsg's result (-1: errno).

    The frames are not written to: the super-frame's headers are built in ``scratch`` (_GSO_SCRATCH bytes)
    and its payloads are the frames' own, one iovec each (``iov``: run + 1 entries).
    """
    cdef Py_ssize_t l3 = 40 if v6 else 20
    cdef Py_ssize_t csum_start = 14 + l3
    cdef Py_ssize_t i, total = hl
    cdef unsigned char *h = scratch + _VNET_HDR_LEN
    cdef unsigned char *th = h + csum_start
    cdef Py_ssize_t l4len
    cdef uint64_t s
    memcpy(h, frames[k], hl)
    iov[0].iov_base = scratch
    iov[0].iov_len = <size_t>(_VNET_HDR_LEN + hl)
    for i in range(run):
        iov[i + 1].iov_base = frames[k + i] + hl
        iov[i + 1].iov_len = <size_t>(lens[k + i] - hl)
        total += lens[k + i] - hl
    l4len = total - csum_start
    if v6:
        _gso_put_be16(h + 18, <unsigned int>l4len)
    else:
        _gso_put_be16(h + 16, <unsigned int>(total - 14))
        h[24] = 0
        h[25] = 0
        _gso_put_be16(h + 24, (~_gso_sum16(h + 14, 20)) & 0xFFFF)
    th[13] = th[13] | (frames[k + run - 1][csum_start + 13] & 0x08)  # the last segment's PSH
    s = _gso_sum16(h + (22 if v6 else 26), 32 if v6 else 8) + 6 + <uint64_t>l4len  # RFC 9293 3.1 pseudo-header
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    _gso_put_be16(th + 16, <unsigned int>s)
    scratch[0] = _VNET_F_NEEDS_CSUM
    scratch[1] = _VNET_GSO_TCPV6 if v6 else _VNET_GSO_TCPV4
    _gso_put_le16(scratch + 2, <unsigned int>hl)
    _gso_put_le16(scratch + 4, <unsigned int>(lens[k] - hl))
    _gso_put_le16(scratch + 6, <unsigned int>csum_start)
    _gso_put_le16(scratch + 8, 16)
    return ustack_gso_sendmsg(fd, iov, <int>(run + 1))
