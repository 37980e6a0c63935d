# _fp_push.pxi: ustack.wire.push.data_without_push in C (Stack.poll(hold=True) asks it of every
# burst's last frame): is the frame a TCP segment with data and none of PSH, FIN, SYN, RST (its
# sender's write goes on, RFC 9293 3.9.1.2)? The same checks, in the same order, as the Python
# reference; every length is checked before a field is read.

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE


cdef bint _data_without_push(const unsigned char *f, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t ihl, l4, l4_len, ip_len, doff
    cdef unsigned int etype
    if n < 14 + 20:
        return False
    etype = (f[12] << 8) | f[13]
    if etype == 0x0800:
        ihl = (f[14] & 0x0F) * 4
        if (f[14] >> 4) != 4 or ihl < 20 or f[23] != 6 or (((f[20] << 8) | f[21]) & 0x3FFF):
            return False
        ip_len = (f[16] << 8) | f[17]
        l4 = 14 + ihl
        l4_len = ip_len - ihl
        if ip_len > n - 14:
            return False
    elif etype == 0x86DD:
        if n < 14 + 40 or (f[14] >> 4) != 6 or f[20] != 6:
            return False
        l4 = 14 + 40
        l4_len = (f[18] << 8) | f[19]
        if l4_len > n - l4:
            return False
    else:
        return False
    if l4_len < 20:
        return False
    doff = (f[l4 + 12] >> 4) * 4
    if doff < 20 or l4_len <= doff:
        return False
    return (f[l4 + 13] & 0x0F) == 0  # none of FIN, SYN, RST, PSH


def data_without_push(frame):
    """``ustack.wire.push.data_without_push`` in C: True for a TCP segment with data and none of PSH, FIN, SYN, RST."""
    cdef Py_buffer b
    cdef bint r
    PyObject_GetBuffer(frame, &b, PyBUF_SIMPLE)
    r = _data_without_push(<const unsigned char *>b.buf, b.len)
    PyBuffer_Release(&b)
    return r
