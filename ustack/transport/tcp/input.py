"""The receiving half of a connection: SEGMENT ARRIVES (RFC 9293 3.10.7.3 and 3.10.7.4).

``SegmentInput`` is a mixin of ``Connection``. The pipeline for a
synchronized connection (and SYN-RECEIVED), in order:

0. SYN-RECEIVED special cases: a retransmitted SYN gets the SYN-ACK again;
   the peer's SYN-ACK in a simultaneous open completes the handshake.
1. Timestamps (RFC 7323): once negotiated, a non-RST segment without a
   TSopt is dropped (3.2); PAWS rejects an old TSval with an ACK (5.3 R1).
2. A SYN gets a challenge ACK whatever its sequence number (RFC 5961 4.2).
3. Acceptability test (3.10.7.4 first step, the four cases); an
   unacceptable segment is answered with an ACK unless it is a RST, then
   trimmed to the window. TS.Recent is updated (RFC 7323 4.3).
4. RST: reset only when SEG.SEQ == RCV.NXT, otherwise a challenge ACK
   (RFC 5961 3.2).
5. ACK: SYN-RECEIVED -> ESTABLISHED; acceptable range
   SND.UNA - MAX.SND.WND <= SEG.ACK <= SND.NXT else challenge ACK (RFC 5961
   5.2); new data acknowledged (RTT, congestion control, RTO restart), SACK
   blocks into the scoreboard, duplicate ACKs (RFC 5681 2) and fast
   retransmit (NewReno, or RFC 6675 when SACK was negotiated), window update
   (SND.WL1/WL2); FIN-WAIT-1, CLOSING and LAST-ACK transitions.
6. URG: ignored (urgent data is delivered in line, RFC 6093).
7. Text: delivered in order, out-of-order runs kept for reassembly;
   delayed ACK (every second full segment, bounded delay), immediate ACK
   for out-of-order data and for data that fills a gap (RFC 5681 4.2).
8. FIN: in sequence only (an early FIN waits for the gap to fill).
Then the output loop runs, and an ACK goes out if one is still owed.
"""

from __future__ import annotations

import errno

from ustack.transport.tcp.seq import MASK, seq_add, seq_diff, seq_ge, seq_gt, seq_in, seq_le, seq_lt
from ustack.transport.tcp.tcb import RECEIVING, SENDING, State
from ustack.wire.tcp import ACK, FIN, RST, SYN

# RFC 7323 5.5: TS.Recent is invalid after 24 days of idleness.
PAWS_IDLE = 24 * 24 * 3600.0


class SegmentInput:
    __slots__ = ()

    def segment_arrives(self, hdr, payload, now: float) -> None:
        """Process one segment for this connection (``payload`` = the data after the header)."""
        self.segs_in += 1
        self._last_rcv = now
        self._keep_probes = 0
        self._probes_out = 0
        st = self.tcb.state
        if st == State.SYN_SENT:
            self._syn_sent_arrives(hdr, payload, now)
        elif st != State.CLOSED:
            self._synchronized_arrives(hdr, payload, now)
        self._notify()

    # -- SYN-SENT (3.10.7.3) ---------------------------------------------

    def _syn_sent_arrives(self, hdr, payload, now: float) -> None:
        tcb = self.tcb
        flags = hdr.flags
        stats = self.host.stats
        if flags & ACK:
            if seq_le(hdr.ack, tcb.iss) or seq_gt(hdr.ack, tcb.snd_max):
                stats.drop("tcp.bad_ack")
                if not flags & RST:
                    self._reply_rst(hdr.ack)
                return
        if flags & RST:
            if flags & ACK:  # acceptable ACK: the peer refused (RFC 5961 3.2 for SYN-SENT)
                self._fail(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))
            else:
                stats.drop("tcp.rst_without_ack")
            return
        if not flags & SYN:
            stats.drop("tcp.no_syn")
            return
        tcb.irs = hdr.seq
        tcb.rcv_nxt = seq_add(hdr.seq, 1)
        tcb.rcv_adv = seq_add(tcb.rcv_nxt, tcb.rcv_wnd)
        tcb.last_ack_sent = tcb.rcv_nxt
        self._negotiate(hdr, now)
        tcb.snd_wnd = hdr.window  # RFC 7323 2.2: never scaled in a SYN
        tcb.max_snd_wnd = max(tcb.max_snd_wnd, tcb.snd_wnd)
        tcb.snd_wl1 = hdr.seq
        tcb.snd_wl2 = hdr.ack
        if flags & ACK:
            tcb.snd_una = hdr.ack
            self._handshake_rtt(hdr, now)
            self._become_established(now)
            self._ack_now = True
            if payload or flags & FIN:  # data on a SYN-ACK: rare, but legal
                data = payload[: max(0, seq_diff(tcb.rcv_adv, tcb.rcv_nxt))]
                if data:
                    self._receive_text(tcb.rcv_nxt, data, now)
                if flags & FIN and len(data) == len(payload):
                    self._fin_arrives(now)
            self._output(now)
            if self._ack_now:
                self._send_ack(now)
        else:
            # Simultaneous open (RFC 9293 3.10.7.3, Figure 7).
            tcb.state = State.SYN_RECEIVED
            self._send_synack(now)

    # -- synchronized states and SYN-RECEIVED (3.10.7.4) -----------------

    def _synchronized_arrives(self, hdr, payload, now: float) -> None:
        tcb = self.tcb
        flags = hdr.flags
        seq = hdr.seq
        st = tcb.state
        stats = self.host.stats

        if st == State.SYN_RECEIVED and flags & SYN and not flags & RST and seq == tcb.irs:
            if not flags & ACK:
                stats.inc("tcp.syn_retransmits_seen")
                self._send_synack(now)  # our SYN-ACK was lost
                return
            if hdr.ack == tcb.snd_max:  # the crossing SYN-ACK of a simultaneous open
                tcb.snd_una = hdr.ack
                tcb.snd_wnd = hdr.window
                tcb.max_snd_wnd = max(tcb.max_snd_wnd, tcb.snd_wnd)
                tcb.snd_wl1 = seq
                tcb.snd_wl2 = hdr.ack
                self._handshake_rtt(hdr, now)
                self._become_established(now)
                self._output(now)
                return

        ts = hdr.timestamps
        if tcb.ts_ok and not flags & RST:
            if ts is None:
                stats.drop("tcp.no_timestamp")  # RFC 7323 3.2
                return
            if seq_lt(ts[0], tcb.ts_recent):
                if now - tcb.ts_recent_age <= PAWS_IDLE:
                    stats.drop("tcp.paws")  # RFC 7323 5.3 R1
                    self._send_ack(now)
                    return
                # RFC 7323 5.5: TS.Recent is stale after 24 idle days; start again from this one.
                tcb.ts_recent = ts[0]
                tcb.ts_recent_age = now

        if flags & SYN and not flags & RST:
            stats.drop("tcp.syn_in_window")
            self._challenge_ack(now)  # RFC 5961 4.2
            return

        if st == State.TIME_WAIT and flags & FIN and not flags & RST:
            self._close_timer.arm(now + 2 * self.config.msl)  # a retransmitted FIN restarts 2 MSL

        # First: the acceptability test.
        rcv_nxt = tcb.rcv_nxt
        rcv_wnd = seq_diff(tcb.rcv_adv, rcv_nxt)
        if rcv_wnd < 0:
            rcv_wnd = 0
        dlen = len(payload)
        seg_len = dlen + (1 if flags & FIN else 0)
        if seg_len == 0:
            ok = seq == rcv_nxt if rcv_wnd == 0 else seq_in(seq, rcv_nxt, seq_add(rcv_nxt, rcv_wnd))
        elif rcv_wnd == 0:
            # Not acceptable as text, but its ACK (and RST) must still be processed.
            ok = seq == rcv_nxt
        else:
            end = seq_add(rcv_nxt, rcv_wnd)
            ok = seq_in(seq, rcv_nxt, end) or seq_in(seq_add(seq, seg_len - 1), rcv_nxt, end)
        if not ok:
            if flags & RST:
                stats.drop("tcp.rst_out_of_window")
                return
            stats.drop("tcp.unacceptable")
            self._send_ack(now)
            return

        # Trim to the window: old bytes off the front, bytes past the window off the end.
        data = payload
        fin = flags & FIN
        dseq = seq
        if seq_lt(seq, rcv_nxt):
            skip = seq_diff(rcv_nxt, seq)
            data = data[skip:]
            dseq = rcv_nxt
        room = rcv_wnd - seq_diff(dseq, rcv_nxt)
        if len(data) > room:
            data = data[: max(room, 0)]
            fin = 0
            self._ack_now = True
            stats.inc("tcp.rcv_beyond_window")

        if tcb.ts_ok and ts is not None and seq_le(seq, tcb.last_ack_sent) and seq_ge(ts[0], tcb.ts_recent):
            tcb.ts_recent = ts[0]  # RFC 7323 4.3 (2)
            tcb.ts_recent_age = now

        # Second: RST (RFC 5961 3.2).
        if flags & RST:
            if seq == rcv_nxt:
                self._reset_received()
            else:
                stats.drop("tcp.rst_not_exact")
                self._challenge_ack(now)
            return

        # Fifth: ACK.
        if not flags & ACK:
            stats.drop("tcp.no_ack")
            return
        if st == State.SYN_RECEIVED:
            ack = hdr.ack
            if not (seq_lt(tcb.snd_una, ack) and seq_le(ack, tcb.snd_max)):
                stats.drop("tcp.bad_ack")
                self._reply_rst(ack)
                return
            if self.listener is not None and not self.listener._has_room():
                stats.drop("tcp.accept_queue_full")
                return
            tcb.snd_una = ack
            tcb.snd_wnd = hdr.window << tcb.snd_wscale
            tcb.max_snd_wnd = max(tcb.max_snd_wnd, tcb.snd_wnd)
            tcb.snd_wl1 = seq
            tcb.snd_wl2 = ack
            self._handshake_rtt(hdr, now)
            self._become_established(now)
        elif not self._process_ack(hdr, dlen, now):
            return
        st = tcb.state

        # Seventh: text.
        if data:
            if st in RECEIVING:
                if self.orphaned:
                    # Data for a connection the user has closed: nobody will read it (RFC 2525 2.17).
                    stats.drop("tcp.data_after_close")
                    self._reply_rst(tcb.snd_max, tcb.rcv_nxt)
                    self._terminate()
                    return
                self._receive_text(dseq, data, now)
            else:
                stats.drop("tcp.data_after_fin")

        # Eighth: FIN.
        if fin:
            fin_seq = seq_add(dseq, len(data))
            if fin_seq == tcb.rcv_nxt and not tcb.fin_rcvd:
                self._fin_arrives(now)
            elif seq_gt(fin_seq, tcb.rcv_nxt):
                tcb.fin_rcvd_seq = fin_seq  # early FIN: wait for the gap to fill
                self._ack_now = True

        if tcb.state != State.CLOSED:
            self._output(now)
            if self._ack_now:
                self._send_ack(now)

    # -- pieces ----------------------------------------------------------

    def _handshake_rtt(self, hdr, now: float) -> None:
        """An RTT sample from the handshake (timestamps, or Karn: only an unretransmitted SYN)."""
        ts = hdr.timestamps
        if self.tcb.ts_ok and ts is not None and ts[1]:
            r = (self._ts_now(now) - ts[1]) & MASK
            if r < 0x7FFFFFFF:
                self.rtt.sample(r / 1000.0)
        elif not self._syn_retransmitted:
            self.rtt.sample(now - self._syn_time)

    def _process_ack(self, hdr, dlen: int, now: float) -> bool:
        """Fifth step for synchronized states; False when the segment is to be dropped."""
        tcb = self.tcb
        ack = hdr.ack
        una = tcb.snd_una
        snd_max = tcb.snd_max
        if seq_gt(ack, snd_max):
            self.host.stats.drop("tcp.ack_unsent")
            self._challenge_ack(now)
            return False
        if seq_lt(ack, seq_add(una, -tcb.max_snd_wnd)):
            self.host.stats.drop("tcp.ack_too_old")
            self._challenge_ack(now)  # RFC 5961 5.2
            return False
        acked = seq_diff(ack, una)
        seg_wnd = hdr.window << tcb.snd_wscale
        sack = tcb.sack_ok
        if acked > 0:
            self._ack_advances(ack, acked, hdr, now)
        if sack and hdr.sack_blocks:
            self._board.update(hdr.sack_blocks, tcb.snd_una, tcb.snd_max)
        if (acked == 0 and dlen == 0 and not hdr.flags & (SYN | FIN) and seg_wnd == tcb.snd_wnd
                and snd_max != una and tcb.snd_wnd):
            # RFC 5681 section 2: a duplicate ACK.
            self.dup_acks += 1
            if self.cc.on_dup_ack(ack, seq_diff(snd_max, una), snd_max, now):
                if sack:
                    self._sack_enter_recovery(now)
                else:
                    self.fast_retransmits += 1
                    self.host.stats.inc("tcp.fast_retransmits")
                    self._retransmit_head(now)
        # Window update, guarded by SND.WL1/SND.WL2 against old segments.
        seq = hdr.seq
        if seq_lt(tcb.snd_wl1, seq) or (tcb.snd_wl1 == seq and seq_le(tcb.snd_wl2, ack)):
            old = tcb.snd_wnd
            tcb.snd_wnd = seg_wnd
            tcb.snd_wl1 = seq
            tcb.snd_wl2 = ack
            if seg_wnd > tcb.max_snd_wnd:
                tcb.max_snd_wnd = seg_wnd
            if seg_wnd and not old and self._persist_timer.deadline is not None:
                self._persist_timer.cancel()
                self._persist_backoff = 0
        if sack and tcb.state in SENDING:
            self._sack_after_ack(ack, now)
        if tcb.fin_acked:
            st = tcb.state
            if st == State.FIN_WAIT_1:
                self._set_state(State.FIN_WAIT_2)
                if self.orphaned:
                    self._close_timer.arm(now + self.config.fin_wait2_timeout)
            elif st == State.CLOSING:
                self._enter_time_wait(now)
            elif st == State.LAST_ACK:
                self._terminate()
                return False
        return True

    def _ack_advances(self, ack: int, acked: int, hdr, now: float) -> None:
        tcb = self.tcb
        sndbuf = self.sndbuf
        before = len(sndbuf)
        data_acked = acked
        if acked > before:
            data_acked = before
            if tcb.fin_queued:
                tcb.fin_acked = True
        if data_acked:
            sndbuf.acknowledge(data_acked)
        if tcb.sack_ok:
            self._board.advance(acked)
        tcb.snd_una = ack
        if seq_lt(tcb.snd_nxt, ack):
            tcb.snd_nxt = ack
        self.bytes_acked += data_acked
        self._rtx_count = 0
        ts = hdr.timestamps
        if tcb.ts_ok and ts is not None and ts[1]:
            r = (self._ts_now(now) - ts[1]) & MASK
            if r < 0x7FFFFFFF:
                self.rtt.sample(r / 1000.0)  # RFC 7323 4: TSecr of an ACK for new data
        elif self._rtt_seq is not None and seq_ge(ack, self._rtt_seq):
            self.rtt.sample(now - self._rtt_time)
            self._rtt_seq = None
        self.cc.srtt = self.rtt.srtt
        if self.cc.on_ack(ack, data_acked, seq_diff(tcb.snd_max, ack), tcb.snd_max, now):
            self.host.stats.inc("tcp.partial_acks")
            self._retransmit_head(now)  # NewReno partial ACK (RFC 6582 3.2 step 4)
        if tcb.snd_max == ack:
            self._rtx_timer.cancel()  # RFC 6298 5.2
        else:
            self._rtx_timer.arm(now + self.rtt.rto)  # RFC 6298 5.3
        low = self._send_low
        if before > low >= len(sndbuf) and self.on_send_low_water is not None:
            self.on_send_low_water(self)

    def _receive_text(self, dseq: int, data, now: float) -> None:
        tcb = self.tcb
        rcvbuf = self.rcvbuf
        off = seq_diff(dseq, tcb.rcv_nxt)
        had_gap = rcvbuf.ooo_bytes > 0
        before = len(rcvbuf)
        adv = rcvbuf.write(off, data)
        if adv < 0:
            self.host.stats.drop("tcp.ooo_overflow")
            self._ack_now = True
            return
        if off > 0:
            self.host.stats.inc("tcp.ooo_segs")
            self._ack_now = True  # RFC 5681 4.2: an out-of-order segment is ACKed at once
            return
        if adv == 0:
            return
        tcb.rcv_nxt = seq_add(tcb.rcv_nxt, adv)
        self.bytes_received += adv
        if len(data) > tcb.rcv_mss:
            tcb.rcv_mss = min(len(data), tcb.mss_base)
        if had_gap or not self.config.delayed_ack:
            self._ack_now = True  # this segment filled (part of) a gap
        else:
            self._unacked += adv
            if self._unacked >= 2 * tcb.rcv_mss:
                self._ack_now = True  # every second full-sized segment
            elif self._delack_timer.deadline is None:
                self._delack_timer.arm(now + self.config.delack_timeout)
        if self.rd_shutdown:
            rcvbuf.read(len(rcvbuf))
        else:
            high = self._recv_high
            if before < high <= len(rcvbuf) and self.on_recv_high_water is not None:
                self.on_recv_high_water(self)
        if tcb.fin_rcvd_seq is not None and tcb.fin_rcvd_seq == tcb.rcv_nxt:
            self._fin_arrives(now)

    def _fin_arrives(self, now: float) -> None:
        tcb = self.tcb
        tcb.rcv_nxt = seq_add(tcb.rcv_nxt, 1)
        tcb.fin_rcvd = True
        tcb.fin_rcvd_seq = None
        self._ack_now = True
        st = tcb.state
        if st in (State.SYN_RECEIVED, State.ESTABLISHED):
            self._set_state(State.CLOSE_WAIT)
        elif st == State.FIN_WAIT_1:
            if tcb.fin_acked:
                self._enter_time_wait(now)
            else:
                self._set_state(State.CLOSING)  # simultaneous close
        elif st == State.FIN_WAIT_2:
            self._enter_time_wait(now)

    def _reset_received(self) -> None:
        st = self.tcb.state
        self.host.stats.inc("tcp.resets_received")
        if st == State.SYN_RECEIVED:
            if self.passive:
                self._terminate()  # back to LISTEN: the listener simply forgets it
            else:
                self._fail(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"))
        elif st in (State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2, State.CLOSE_WAIT):
            self._fail(ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"))
        else:
            self._terminate()
