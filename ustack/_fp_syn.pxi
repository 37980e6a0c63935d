# -- the SYN to a listener in one C call (issue 11's connect+close, issue 10's connect()) ----------------------
#
# ``FlowTable.deliver_burst`` hands a SYN it finds no flow for to ``SynPath.take`` before the stack's
# ``_deliver``. For the SYN in its common form the whole round is done here: the stack's screening of the
# addresses (``Stack._deliver``, ``_tcp_input``/``_tcp_input6``), the layer's demux (``TcpLayer.segment_arrives``:
# no record for the 4-tuple, a listener on the address or the wildcard), the listener's LISTEN checks
# (``Listener.segment_arrives``: room in the accept queue, under the connection limit, the SYN queue not full)
# and then what that path does: the ``SynReceived`` record in the layer and the listener's SYN queue, its SYN-ACK
# (``SynReceived.send_syn_ack``) and the push. Anything else (a screened address, a record for the 4-tuple,
# TIME-WAIT, no listener, a full queue: cookies, the connection limit, flags other than SYN alone) is False
# and goes to the Python path unchanged. The core's objects are reached through the ``layer``, ``stack`` and
# the record class given at construction (this module imports nothing of the core).

cdef inline void _syn_put32(uint8_t *b, uint32_t v) noexcept:
    b[0] = <uint8_t>(v >> 24)
    b[1] = <uint8_t>(v >> 16)
    b[2] = <uint8_t>(v >> 8)
    b[3] = <uint8_t>v


# -- RFC 7693 BLAKE2s, for the layer's ``isn+ts`` digest (``isn.KeyedHash.connection_hashes``) in C ----------------
# The same keyed, personalized 8-byte digest of the 4-tuple hashlib gives (``test_tcp_syn_c`` holds them equal).
cdef uint32_t _B2S_IV[8]
_B2S_IV[:] = [0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19]
cdef uint8_t _B2S_SIGMA[10][16]
_B2S_SIGMA[0][:] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
_B2S_SIGMA[1][:] = [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3]
_B2S_SIGMA[2][:] = [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4]
_B2S_SIGMA[3][:] = [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8]
_B2S_SIGMA[4][:] = [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13]
_B2S_SIGMA[5][:] = [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9]
_B2S_SIGMA[6][:] = [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11]
_B2S_SIGMA[7][:] = [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10]
_B2S_SIGMA[8][:] = [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5]
_B2S_SIGMA[9][:] = [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0]


cdef inline uint32_t _rotr32(uint32_t x, int n) noexcept nogil:
    return (x >> n) | (x << (32 - n))


cdef void _b2s_compress(uint32_t *h, const uint8_t *block, uint32_t t, bint last) noexcept nogil:
    """RFC 7693 3.2 F over one 64-byte block (``t``: bytes so far, below 2**32 here)."""
    cdef uint32_t v[16]
    cdef uint32_t m[16]
    cdef int i, r
    cdef const uint8_t *s
    for i in range(16):
        m[i] = (<uint32_t>block[4 * i] | (<uint32_t>block[4 * i + 1] << 8) | (<uint32_t>block[4 * i + 2] << 16)
                | (<uint32_t>block[4 * i + 3] << 24))
    for i in range(8):
        v[i] = h[i]
        v[i + 8] = _B2S_IV[i]
    v[12] ^= t
    if last:
        v[14] = ~v[14]
    for r in range(10):
        s = _B2S_SIGMA[r]
        _b2s_g(v, 0, 4, 8, 12, m[s[0]], m[s[1]])
        _b2s_g(v, 1, 5, 9, 13, m[s[2]], m[s[3]])
        _b2s_g(v, 2, 6, 10, 14, m[s[4]], m[s[5]])
        _b2s_g(v, 3, 7, 11, 15, m[s[6]], m[s[7]])
        _b2s_g(v, 0, 5, 10, 15, m[s[8]], m[s[9]])
        _b2s_g(v, 1, 6, 11, 12, m[s[10]], m[s[11]])
        _b2s_g(v, 2, 7, 8, 13, m[s[12]], m[s[13]])
        _b2s_g(v, 3, 4, 9, 14, m[s[14]], m[s[15]])
    for i in range(8):
        h[i] ^= v[i] ^ v[i + 8]


cdef inline void _b2s_g(uint32_t *v, int a, int b, int c, int d, uint32_t x, uint32_t y) noexcept nogil:
    v[a] = v[a] + v[b] + x
    v[d] = _rotr32(v[d] ^ v[a], 16)
    v[c] = v[c] + v[d]
    v[b] = _rotr32(v[b] ^ v[c], 12)
    v[a] = v[a] + v[b] + y
    v[d] = _rotr32(v[d] ^ v[a], 8)
    v[c] = v[c] + v[d]
    v[b] = _rotr32(v[b] ^ v[c], 7)


cdef class SynPath:
    """The SYN round in C for one stack (``Stack`` installs it on its layer's ``FlowTable.syn``)."""

    cdef object stack          # its screening sets (_suspect_first, _suspect_src), iface, iface6, ipv6
    cdef object layer          # the TcpLayer: connections, listeners, config, host
    cdef object record         # synrecv.SynReceived
    cdef object listener_type  # listener.Listener: another entry (a ReuseportGroup) is the Python path's
    cdef object on_rtx         # SynReceived._on_rtx_timer, the SYN-ACK timer's callback
    cdef object syn_segment    # output.syn_segment: the SYN-ACK built whole when neither fast emitter wrote it
    cdef object counters
    cdef object _secret        # the host's isn_secret the keyed state below is for (None: not made yet)
    cdef uint32_t _keyed[8]    # BLAKE2s(key=the secret, digest_size=8, person=b"isn+ts") after its key block
    cdef readonly unsigned long taken   # SYNs done here

    def __cinit__(self, stack, layer, record, syn_segment, listener_type):
        self.stack = stack
        self.listener_type = listener_type
        self.layer = layer
        self.record = record
        self.on_rtx = record._on_rtx_timer
        self.syn_segment = syn_segment
        self.counters = layer.host.stats.counters

    cdef bint take(self, Packet p, now) except -1:
        """The SYN round for ``p`` (a TCP or TCP6 record no flow took): True when done here."""
        cdef int sport = p.src_port, dport = p.dst_port
        if p.flags != 0x02 or sport == 0 or dport == 0:
            return False
        stack = self.stack
        src = p.src
        dst = p.dst
        if p._alen == 4:
            if p.kind != CK_TCP:
                return False
            if p._src[0] in stack._suspect_first or src in stack._suspect_src:
                return False  # (Stack._deliver's martian screen)
            if dst != stack.iface.addr:
                return False  # (another of ours, a broadcast: _tcp_input's screen)
        elif p._alen == 16:
            if p.kind != CK_TCP6 or stack.ipv6 is None:
                return False
            if p._src[0] == 0 or p._src[0] == 0xFF or p._dst[0] == 0xFF:
                return False
            iface6 = stack.iface6
            ours = iface6.valid_set
            if src in ours or dst not in ours:
                return False
        else:
            return False
        layer = self.layer
        connections = layer.connections
        key = (dst, dport, src, sport)
        if key in connections:
            return False  # a connection, SYN-RECEIVED or TIME-WAIT record: theirs
        listeners = layer.listeners
        lst = listeners.get((dst, dport))
        if lst is None:
            if p._alen == 4:
                lst = listeners.get((b"\0\0\0\0", dport))
                if lst is None:
                    lst = listeners.get((b"\0" * 16, dport))
                    if lst is not None and lst.v6only:
                        lst = None
            else:
                lst = listeners.get((b"\0" * 16, dport))
            if lst is None:
                return False
        if type(lst) is not self.listener_type:
            return False  # an SO_REUSEPORT group picks its member in Python
        if len(lst._accept) >= lst.backlog or len(connections) >= layer.config.max_connections:
            return False
        if len(lst._syn_queue) >= lst.syn_backlog:
            return False  # cookies or the drop
        counters = self.counters
        counters["tcp.in_segs"] += 1
        rec = self.record(layer, lst.config, lst, (dst, dport), (src, sport), p, now)
        connections[key] = rec  # outside the C flow table until built
        lst._syn_queue.add(rec)
        self._send_syn_ack(rec, layer, lst.config, dst, dport, src, sport, p, now)
        layer.host.tcp_push()
        self.taken += 1
        return True

    cdef int _send_syn_ack(self, rec, layer, cfg, laddr, int lport, raddr, int rport, Packet p, now) except -1:
        """``SynReceived.send_syn_ack`` for the record ``take`` made: the same ISS, options, frame, counters
        and timer (RFC 9293 3.10.7.2; RFC 7323; RFC 2018; RFC 6528 through the layer's keyed digest)."""
        cdef uint8_t opt[40]
        cdef Py_ssize_t n = 0
        cdef double when = PyFloat_AsDouble(now)
        cdef long own_mss, cmss
        cdef uint32_t iss, tsval, ack
        cdef int wscale = -1
        cdef bint sack, ts
        host = layer.host
        own_mss = host.route_mtu(raddr) - (60 if p._alen == 16 else 40)
        cmss = cfg.mss
        if cmss and cmss < own_mss:
            own_mss = cmss
        if own_mss < 88:
            own_mss = 88
        rec.own_mss = own_mss
        hashes = rec.hashes = self._hashes(layer, laddr, lport, raddr, rport)
        isn_f, ts_offset = hashes
        iss = <uint32_t>((<uint64_t>(when * 250000.0) + <uint64_t>(<uint32_t>isn_f)) & 0xFFFFFFFF)  # isn_at
        rec.iss = iss
        if cfg.window_scaling and p._opts & OPTF_WSCALE:
            wscale = cfg.rcvbuf_ceiling.bit_length() - 16  # window_shift_for
            wscale = 0 if wscale < 0 else (14 if wscale > 14 else wscale)
        sack = bool(cfg.sack) and p.sack_permitted
        ts = bool(cfg.timestamps) and (p._opts & OPTF_TIMESTAMPS) != 0
        window = min(cfg.rcvbuf, 0xFFFF)  # an empty receive buffer's room, never scaled (RFC 7323 2.2)
        ack = p.seq + 1
        # output.syn_options: MSS; SACK-permitted and timestamps (or NOP NOP SACK-permitted); NOP window scale
        opt[0] = 2
        opt[1] = 4
        opt[2] = <uint8_t>(own_mss >> 8)
        opt[3] = <uint8_t>own_mss
        n = 4
        if ts:
            tsval = <uint32_t>((<uint64_t>(when * 1000.0) + <uint64_t>(<uint32_t>ts_offset)) & 0xFFFFFFFF)  # ts_clock
            if sack:
                opt[4] = 4
                opt[5] = 2
            else:
                opt[4] = 1
                opt[5] = 1
            opt[6] = 8
            opt[7] = 10
            _syn_put32(&opt[8], tsval)
            _syn_put32(&opt[12], p._tsval)
            n = 16
        elif sack:
            opt[4] = 1
            opt[5] = 1
            opt[6] = 4
            opt[7] = 2
            n = 8
        if wscale >= 0:
            opt[n] = 1
            opt[n + 1] = 3
            opt[n + 2] = 3
            opt[n + 3] = <uint8_t>wscale
            n += 4
        opts = PyBytes_FromStringAndSize(<const char *>opt, n)
        make = getattr(host, "tcp_emitter", None)
        emitter = rec.emitter = make() if make is not None else None
        if emitter is not None and emitter.options(laddr, raddr, lport, rport, iss, ack, 0x12, window, opts, now):
            pass
        elif not host.tcp_output_options(laddr, raddr, lport, rport, iss, ack, 0x12, window, opts, now):
            host.tcp_output(laddr, raddr, self.syn_segment(laddr, raddr, lport, rport, iss, ack, 0x12, window,
                                                           own_mss, wscale if wscale >= 0 else None, sack,
                                                           (tsval, p._tsval) if ts else None, opts), now)
        counters = self.counters
        counters["tcp.out_segs"] += 1
        counters["tcp.passive_opens"] += 1
        timer = rec.timer = host.timers.timer(self.on_rtx, rec)
        timer.arm(now + max(cfg.min_rto, min(cfg.initial_rto, cfg.max_rto)))  # RttEstimator's first RTO
        return 0

    cdef object _hashes(self, layer, laddr, int lport, raddr, int rport):
        """``layer.keyed.connection_hashes(...)`` (F of the ISN, the timestamp offset) with the digest in C while the
        layer's keyed hash is the host's secret's (else the layer's own, which renews it)."""
        cdef uint8_t block[64]
        cdef uint32_t h[8]
        cdef const uint8_t *k
        cdef Py_ssize_t klen, alen = len(laddr), i
        secret = layer.host.isn_secret
        if (layer._keyed.secret is not secret or type(secret) is not bytes or len(<bytes>secret) > 32
                or type(laddr) is not bytes or type(raddr) is not bytes or len(raddr) != alen or alen > 16):
            return layer.keyed.connection_hashes(laddr, lport, raddr, rport)
        if secret is not self._secret:
            k = <const uint8_t *><const char *>(<bytes>secret)
            klen = len(<bytes>secret)
            for i in range(8):
                self._keyed[i] = _B2S_IV[i]
            self._keyed[0] ^= 0x01010000 ^ (<uint32_t>klen << 8) ^ 8  # digest 8, key length, fanout 1, depth 1
            self._keyed[6] ^= 0x2B6E7369  # person b"isn+ts\0\0", little-endian words
            self._keyed[7] ^= 0x00007374
            memset(block, 0, 64)
            memcpy(block, k, klen)
            _b2s_compress(self._keyed, block, 64, False)
            self._secret = secret
        for i in range(8):
            h[i] = self._keyed[i]
        memset(block, 0, 64)
        memcpy(block, <const char *><bytes>laddr, alen)
        memcpy(&block[alen], <const char *><bytes>raddr, alen)
        block[2 * alen] = <uint8_t>(lport >> 8)
        block[2 * alen + 1] = <uint8_t>lport
        block[2 * alen + 2] = <uint8_t>(rport >> 8)
        block[2 * alen + 3] = <uint8_t>rport
        _b2s_compress(h, block, <uint32_t>(64 + 2 * alen + 4), True)
        # the digest's 8 bytes are h[0], h[1] little-endian; read big-endian: F the first 4, the offset the last 4
        return (_bswap32(h[0]), _bswap32(h[1]))

    def connection_hashes(self, laddr, int lport, raddr, int rport):
        """What the SYN path takes for ``layer.keyed.connection_hashes`` (for tests)."""
        return self._hashes(self.layer, bytes(laddr), lport, bytes(raddr), rport)


cdef inline uint32_t _bswap32(uint32_t x) noexcept nogil:
    return ((x & 0xFF) << 24) | ((x & 0xFF00) << 8) | ((x >> 8) & 0xFF00) | (x >> 24)
