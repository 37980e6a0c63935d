"""The sending half of a connection: segment building, the output loop, retransmission, probes.

``SegmentOutput`` is a mixin of ``Connection`` (it holds no state of its
own). The output loop sends what the windows allow, in this order of
rules:

- usable window = min(SND.WND, cwnd) - (SND.NXT - SND.UNA), cwnd raised by
  one segment per duplicate ACK for the first two (limited transmit, RFC
  3042); during SACK recovery new data is sent by ``SackSender`` instead;
- a full-sized segment always goes; a short one goes only when it empties
  the send queue and nothing is unacknowledged (Nagle, RFC 896 / RFC 1122
  4.2.3.4) or TCP_NODELAY is set or the FIN follows, or when it is at least
  half the largest window the peer ever offered (sender SWS avoidance,
  RFC 9293 3.8.6.2.1), or when the persist timer forces it;
- a FIN goes once all data is sent, even into a zero window;
- when unsent data is left and no timer will clock it out, the persist
  timer is armed; on expiry it sends one byte past a zero window (RFC 9293
  3.8.6.1) or forces a small segment (the SWS override timeout), backing off
  exponentially up to ``persist_max``.

Direct replies (ACKs, challenge ACKs, RSTs, keepalive probes) bypass the
loop. The receive window we advertise follows receiver SWS avoidance (RFC
9293 3.8.6.2.2): the right edge only moves by at least min(RCV.BUFF/2, MSS)
and never moves left.
"""

from __future__ import annotations

from ustack.transport.tcp.seq import MASK, seq_add, seq_diff, seq_gt, seq_lt
from ustack.transport.tcp.tcb import SENDING, SYNCHRONIZED
from ustack.wire.tcp import ACK, FIN, PSH, RST, SYN, TcpHeader


class SegmentOutput:
    __slots__ = ()

    # -- helpers ---------------------------------------------------------

    def _ts_now(self, now: float) -> int:
        """Our TSval clock: milliseconds plus the connection's random offset (RFC 7323 5.4, 7.1)."""
        return (int(now * 1000) + self.tcb.ts_offset) & MASK

    def _select_window(self) -> int:
        """The window field to advertise now (scaled); updates RCV.WND and the advertised right edge."""
        tcb = self.tcb
        rcvbuf = self.rcvbuf
        free = rcvbuf.free
        cur = seq_diff(tcb.rcv_adv, tcb.rcv_nxt)
        if cur < 0:
            cur = 0
        # Receiver SWS avoidance: move the right edge only by a useful amount.
        if free - cur < min(rcvbuf.capacity // 2, tcb.mss_base):
            win = cur
        else:
            win = free
        shift = tcb.rcv_wscale
        field = (win + (1 << shift) - 1) >> shift  # round up: never shrink the window (RFC 7323 2.4)
        if field > 0xFFFF:
            field = 0xFFFF
        actual = field << shift
        tcb.rcv_wnd = actual
        edge = seq_add(tcb.rcv_nxt, actual)
        if seq_gt(edge, tcb.rcv_adv):
            tcb.rcv_adv = edge
        return field

    def _sack_blocks(self, limit: int) -> tuple:
        """SACK blocks for the out-of-order runs, the most recently changed first (RFC 2018 4)."""
        runs = self.rcvbuf.runs()
        if not runs:
            return ()
        base = self.tcb.rcv_nxt
        last = self.rcvbuf.last_run
        first = [r for r in runs if r[0] == last]
        ordered = first + [r for r in runs if r[0] != last]
        return tuple((seq_add(base, s), seq_add(base, e)) for s, e in ordered[:limit])

    def _emit(self, seq: int, flags: int, now: float, payload=b"", ack: int | None = None) -> None:
        """Build one segment from the TCB and hand it to the host."""
        tcb = self.tcb
        ts = None
        sack_blocks = ()
        mss = wscale = None
        sack_perm = False
        if ack is None:
            ack = tcb.rcv_nxt if flags & ACK else 0
        if flags & RST:
            window = 0
        elif flags & SYN:
            # RFC 7323 2.2: the window in a SYN is never scaled.
            window = min(self.rcvbuf.free, 0xFFFF)
            tcb.rcv_wnd = window
            if flags & ACK:
                tcb.rcv_adv = seq_add(tcb.rcv_nxt, window)
            mss = self._own_mss
            if self._offer_ws:
                wscale = tcb.rcv_wscale
            sack_perm = self._offer_sack
            if self._offer_ts:
                ts = (self._ts_now(now), tcb.ts_recent if flags & ACK else 0)
        else:
            window = self._select_window()
            if tcb.ts_ok:
                ts = (self._ts_now(now), tcb.ts_recent)
            if tcb.sack_ok and not payload and self.rcvbuf.ooo_bytes:
                sack_blocks = self._sack_blocks(3 if ts else 4)
        fast = self._fast_output
        if not (fast is not None and not sack_blocks and not flags & (SYN | RST)
                and fast(self.local_addr, self.remote_addr, self.local_port, self.remote_port, seq, ack, flags,
                         window, ts, payload)):
            # The general path: SYNs and RSTs (options), SACK blocks, or a host without the fast emitter.
            hdr = TcpHeader(self.local_port, self.remote_port, seq, ack, flags, window, 0, 0,
                            mss, wscale, sack_perm, sack_blocks, ts)
            hl = hdr.header_len
            n = len(payload)
            seg = bytearray(hl + n)
            if n:
                seg[hl:] = payload
            hdr.emit(seg, 0, self.local_addr, self.remote_addr, n)
            self.host.tcp_output(self.local_addr, self.remote_addr, seg)
        self.segs_out += 1
        self.host.stats.inc("tcp.out_segs")
        if flags & ACK and not flags & RST:
            tcb.last_ack_sent = tcb.rcv_nxt
            self._ack_now = False
            self._wnd_update = False
            self._unacked = 0
            if self._delack_timer.deadline is not None:
                self._delack_timer.cancel()

    # -- direct replies --------------------------------------------------

    def _send_ack(self, now: float) -> None:
        # A segment without data carries SND.MAX, the highest sequence number sent (the RFC's SND.NXT;
        # BSD does the same). After a timeout pulled snd_nxt back (go-back-N), an ACK numbered
        # snd_nxt can fall left of the peer's RCV.NXT: the peer finds it unacceptable and ignores its
        # ACK field (RFC 9293 3.10.7.4), and two such peers can stall each other to a timeout.
        self._emit(self.tcb.snd_max, ACK, now)

    def _send_syn(self, now: float) -> None:
        tcb = self.tcb
        self._emit(tcb.iss, SYN, now)
        tcb.snd_nxt = tcb.snd_max = seq_add(tcb.iss, 1)
        self._rtx_timer.arm(now + self.rtt.rto)

    def _send_synack(self, now: float) -> None:
        tcb = self.tcb
        self._emit(tcb.iss, SYN | ACK, now)
        tcb.snd_nxt = tcb.snd_max = seq_add(tcb.iss, 1)
        if self._rtx_timer.deadline is None:
            self._rtx_timer.arm(now + self.rtt.rto)

    def _reply_rst(self, seq: int, ack: int | None = None) -> None:
        """A reset answering a bad segment: <SEQ=seq><CTL=RST> or, with ``ack``, RST+ACK."""
        if ack is None:
            self._emit(seq, RST, 0.0, ack=0)
        else:
            self._emit(seq, RST | ACK, 0.0, ack=ack)
        self.host.stats.inc("tcp.out_rsts")

    def _challenge_ack(self, now: float) -> None:
        """RFC 5961 3.2/4.2/5.2 challenge ACK, rate-limited per connection and per layer (section 7)."""
        if now - self._last_challenge < self.config.challenge_ack_interval or not self.layer._challenge_allowed(now):
            self.host.stats.inc("tcp.challenge_acks_suppressed")
            return
        self._last_challenge = now
        self.challenge_acks += 1
        self.host.stats.inc("tcp.challenge_acks")
        self._send_ack(now)

    # -- data ------------------------------------------------------------

    def _send_data(self, seq: int, n: int, fin: bool, now: float, advance: bool = True, probe: bool = False) -> None:
        """Send ``n`` bytes from the send buffer starting at ``seq`` (plus FIN)."""
        tcb = self.tcb
        off = seq_diff(seq, tcb.snd_una)
        sndbuf = self.sndbuf
        payload = sndbuf.peek(off, n) if n else b""
        flags = ACK
        if fin:
            flags |= FIN
        if n and off + n == len(sndbuf):
            flags |= PSH
        self._emit(seq, flags, now, payload)
        end = seq_add(seq, n + 1 if fin else n)
        if seq_lt(seq, tcb.snd_max):
            self.retransmits += 1
            self.host.stats.inc("tcp.retrans_segs")
        elif n and not probe and self._rtt_seq is None and not tcb.ts_ok:
            self._rtt_seq = end  # time this segment (Karn: only never-retransmitted ones)
            self._rtt_time = now
        if advance:
            tcb.snd_nxt = end
        if seq_gt(end, tcb.snd_max):
            tcb.snd_max = end
        if not probe and self._rtx_timer.deadline is None:
            self._rtx_timer.arm(now + self.rtt.rto)

    def _retransmit_head(self, now: float) -> None:
        """Retransmit the first unacknowledged segment (fast retransmit, partial ACK)."""
        tcb = self.tcb
        outstanding = seq_diff(tcb.snd_max, tcb.snd_una)
        buffered = len(self.sndbuf)
        n = min(tcb.snd_mss, buffered, outstanding)
        fin = tcb.fin_queued and n == buffered and outstanding > buffered
        if n <= 0 and not fin:
            return
        self._rtt_seq = None  # Karn
        self._send_data(tcb.snd_una, n, fin, now, advance=False)

    def _output(self, now: float, budget: int | None = None) -> None:
        """Send whatever the windows, Nagle and SWS avoidance allow.

        During SACK recovery new data goes only through ``SackSender`` (rule 2
        of NextSeg), which passes ``budget`` = cwnd - pipe instead of cwnd.
        """
        tcb = self.tcb
        if tcb.state not in SENDING:
            return
        cc = self.cc
        if budget is None and tcb.sack_ok and cc.in_recovery:
            return
        sndbuf = self.sndbuf
        buffered = len(sndbuf)
        una = tcb.snd_una
        if tcb.snd_wnd == 0 and buffered and seq_gt(tcb.snd_nxt, una):
            # The window closed with data outstanding: pull SND.NXT back and
            # probe instead of retransmitting into a closed window (as BSD does).
            tcb.snd_nxt = una
            self._rtx_timer.cancel()
            self._rtx_count = 0
            if self._persist_timer.deadline is None:
                self._arm_persist(now)
        mss = tcb.snd_mss
        cwnd = cc.window
        if not cc.in_recovery and cc.dupacks:
            cwnd += min(cc.dupacks, 2) * mss  # RFC 3042 limited transmit: one new segment per dup ACK
        force = self._force
        self._force = False
        cfg = self.config
        while True:
            nxt = tcb.snd_nxt
            off = seq_diff(nxt, una)
            if off > buffered:
                break  # the FIN is out
            avail = buffered - off
            usable = min(tcb.snd_wnd, cwnd) - off if budget is None else min(tcb.snd_wnd - off, budget)
            n = avail if avail < mss else mss
            if n > usable:
                n = usable if usable > 0 else 0
            fin = tcb.fin_queued and off + n == buffered and not tcb.fin_acked
            if n == 0 and not fin:
                break
            if 0 < n < mss and not seq_lt(nxt, tcb.snd_max) and not force:
                if n == avail:
                    # Nagle: a short final segment waits while data is unacknowledged.
                    if not (cfg.nodelay or tcb.fin_queued or tcb.snd_max == una):
                        break
                elif n < tcb.max_snd_wnd // 2:
                    break  # sender SWS avoidance: wait for the window to open further
            self._send_data(nxt, n, fin, now)
            force = False
            if budget is not None:
                budget -= n
            if fin:
                break
        # Timers: something outstanding needs the retransmission timer; unsent
        # data with nothing outstanding needs the persist timer.
        if self._rtx_timer.deadline is None and self._persist_timer.deadline is None:
            if tcb.snd_max != tcb.snd_una:
                self._rtx_timer.arm(now + self.rtt.rto)
            elif seq_diff(tcb.snd_nxt, una) < len(sndbuf):
                self._arm_persist(now)

    # -- persist ---------------------------------------------------------

    def _arm_persist(self, now: float) -> None:
        interval = self.rtt.rto * (1 << min(self._persist_backoff, 16))
        self._persist_timer.arm(now + min(interval, self.config.persist_max))

    def _on_persist_timer(self, now: float) -> None:
        tcb = self.tcb
        if tcb.state not in SENDING:
            return
        off = seq_diff(tcb.snd_nxt, tcb.snd_una)
        closed = tcb.snd_wnd == 0
        if not len(self.sndbuf) or (off >= len(self.sndbuf) and not closed):
            return  # nothing left to push
        self._persist_backoff += 1
        if closed:
            # Zero-window probe: one octet of new data past the window (RFC 9293 3.8.6.1). The
            # connection stays open while the peer answers (RFC 1122 4.2.2.17); unanswered
            # probes count like retransmissions.
            self._probes_out += 1
            if self._probes_out > self.config.max_retries:
                self._fail(self._timeout_error())
                return
            self.window_probes += 1
            self.host.stats.inc("tcp.window_probes")
            tcb.snd_nxt = tcb.snd_una  # always the first unacknowledged octet
            self._send_data(tcb.snd_una, 1, False, now, probe=True)
        else:
            self._force = True  # SWS override timeout
            self._output(now)
        if self._rtx_timer.deadline is None and (
                tcb.snd_wnd == 0 or seq_diff(tcb.snd_nxt, tcb.snd_una) < len(self.sndbuf)):
            self._arm_persist(now)
        self._notify()

    def _on_delack_timer(self, now: float) -> None:
        tcb = self.tcb
        if tcb.state in SYNCHRONIZED and (tcb.last_ack_sent != tcb.rcv_nxt or self._ack_now or self._unacked):
            self._send_ack(now)
