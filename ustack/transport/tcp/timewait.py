"""TIME-WAIT as a light record (RFC 9293 3.6, 3.10.7.4; RFC 7323; RFC 6191).

When a connection enters TIME-WAIT its heavy parts (sender, receiver,
buffers, timers) are no longer needed: the layer replaces it in its demux
table with a ``TimeWait``, a small slotted record keeping only what
TIME-WAIT needs (like Linux's inet_timewait_sock): the 4-tuple, RCV.NXT,
SND.MAX, the window to advertise (frozen when the record is made), the
right edge last advertised, TS.Recent and the timestamp clock offset, and
the 2 MSL deadline. The C flow table no longer holds the flow, so the fast
path never sees it.

Segments are handled exactly as ``Connection`` handled them in TIME-WAIT:

- timestamps on: a non-RST segment without a TSopt is the drop
  tcp.no_timestamp; an old TSval is the drop tcp.paws, answered by an ACK
  (RFC 7323 3.2, 5.3);
- a SYN the layer did not take as a new incarnation (RFC 6191, see
  ``reusable``) is the drop tcp.syn_in_window with a challenge ACK (RFC
  5961 4.2);
- the peer's FIN again (ending exactly at RCV.NXT: our ACK was lost) is
  ACKed at once and restarts the 2 MSL (tcp.time_wait_fin_acked); a bare
  ACK at RCV.NXT draws nothing; anything else is the drop
  tcp.time_wait_unacceptable with an ACK at most every
  ``challenge_ack_interval`` (else tcp.invalid_ack_ratelimited);
- a RST: out of window the drop tcp.rst_out_of_window; exactly at RCV.NXT
  it ends TIME-WAIT (tcp.resets_received; not RFC 1337's choice, as
  before); in window elsewhere the drop tcp.rst_not_exact with a challenge
  ACK (RFC 5961 3.2).

The user's ``Connection`` (if the application still holds it) stays in
TIME_WAIT and is closed (``terminate``) when the record ends; the record
holds it by a weak reference only, so a connection the application closed
is freed at once. The layer bounds the records (``max_time_wait``, Linux's
tcp_max_tw_buckets): beyond it the oldest is dropped (tcp.time_wait_overflow).
"""

from __future__ import annotations

from ustack.transport.tcp.info import TcpInfo
from ustack.transport.tcp.rtt import ts_clock
from ustack.transport.tcp.seq import seq_add, seq_diff, seq_gt, seq_in, seq_lt
from ustack.transport.tcp.tcb import TIME_WAIT
from ustack.wire.tcp import ACK, FIN, RST, SYN, TcpHeader

# RFC 7323 5.5: TS.Recent is invalid after 24 days of idleness (as connection.PAWS_IDLE).
PAWS_IDLE = 24 * 24 * 3600.0
_NEG_INF = float("-inf")


class TimeWait:
    """One connection in TIME-WAIT (see the module docstring)."""

    __slots__ = ("layer", "key", "snd_nxt", "rcv_nxt", "rcv_adv", "window", "snd_wscale", "rcv_wscale", "ts_ok",
                 "ts_recent", "ts_recent_age", "ts_offset", "msl", "interval", "last_challenge", "owner", "timer")

    orphaned = True  # the layer's TCB list: nothing for an application to close here

    def __init__(self, layer, conn, window: int, now: float):
        tcb = conn.tcb
        self.layer = layer
        self.key = conn.key
        self.snd_nxt = tcb.snd_max
        self.rcv_nxt = tcb.rcv_nxt
        self.rcv_adv = tcb.rcv_adv
        self.window = window
        self.snd_wscale = tcb.snd_wscale
        self.rcv_wscale = tcb.rcv_wscale
        self.ts_ok = tcb.ts_ok
        self.ts_recent = tcb.ts_recent
        self.ts_recent_age = tcb.ts_recent_age
        self.ts_offset = tcb.ts_offset
        cfg = conn.config
        self.msl = cfg.msl
        self.interval = cfg.challenge_ack_interval
        self.last_challenge = conn._last_challenge
        self.owner = conn.weak()
        self.timer = layer.host.timers.timer(TimeWait._expire, self)
        self.timer.arm(now + 2 * self.msl)

    def __repr__(self) -> str:
        return f"<TimeWait {self.key[0].hex()}:{self.key[1]} -> {self.key[2].hex()}:{self.key[3]}>"

    @property
    def state(self):
        return TIME_WAIT

    @property
    def deadline(self) -> float | None:
        """When TIME-WAIT ends (2 MSL after it began, or after the peer's last FIN)."""
        timer = self.timer
        return timer.deadline if timer is not None else None

    # -- SEGMENT ARRIVES in TIME-WAIT (RFC 9293 3.10.7.4) ---------------------

    def reusable(self, seg) -> bool:
        """A SYN clearly newer than this incarnation (RFC 6191: by timestamp when both have them, else
        by sequence number; RFC 1122 4.2.2.13); the layer checks that someone listens."""
        if seg.flags & (SYN | ACK | RST) != SYN:
            return False
        if self.ts_ok and seg.timestamps is not None:
            return seq_gt(seg.timestamps[0], self.ts_recent)
        return seq_gt(seg.seq, self.rcv_nxt)

    def segment_arrives(self, seg, payload, now: float) -> None:
        stats = self.layer.host.stats
        flags = seg.flags
        seq = seg.seq
        if not flags & RST:
            if self.ts_ok:
                ts = seg.timestamps
                if ts is None:
                    stats.drop("tcp.no_timestamp")  # RFC 7323 3.2
                    return
                if seq_lt(ts[0], self.ts_recent):
                    if now - self.ts_recent_age <= PAWS_IDLE:
                        stats.drop("tcp.paws")  # RFC 7323 5.3 R1
                        self.send_ack(now)
                        return
                    self.ts_recent = ts[0]  # RFC 7323 5.5
                    self.ts_recent_age = now
            if flags & SYN:
                stats.drop("tcp.syn_in_window")
                self._challenge_ack(now)  # RFC 5961 4.2
                return
            # Only the peer's FIN again (our ACK was lost) restarts the 2 MSL and is ACKed at once;
            # anything else draws a rate-limited ACK: forged FINs neither keep the record alive nor
            # make us an ACK pump.
            if flags & FIN and seq_add(seq, len(payload) + 1) == self.rcv_nxt:
                self.timer.arm(now + 2 * self.msl)
                stats.inc("tcp.time_wait_fin_acked")
                self.send_ack(now)
                return
            if not flags & FIN and not len(payload) and seq == self.rcv_nxt:
                return
            stats.drop("tcp.time_wait_unacceptable")
            # At most one ACK per challenge_ack_interval (Linux's tcp_invalid_ratelimit, 500 ms).
            if now - self.last_challenge < self.interval:
                stats.inc("tcp.invalid_ack_ratelimited")
                return
            self.last_challenge = now
            self.send_ack(now)
            return
        # A RST: the acceptability test (3.10.7.4 first step), then RFC 5961 3.2.
        rcv_nxt = self.rcv_nxt
        wnd = seq_diff(self.rcv_adv, rcv_nxt)
        if wnd < 0:
            wnd = 0
        seg_len = len(payload) + (1 if flags & FIN else 0)
        if seg_len == 0:
            ok = seq == rcv_nxt if wnd == 0 else seq_in(seq, rcv_nxt, seq_add(rcv_nxt, wnd))
        elif wnd == 0:
            ok = seq == rcv_nxt
        else:
            end = seq_add(rcv_nxt, wnd)
            ok = seq_in(seq, rcv_nxt, end) or seq_in(seq_add(seq, seg_len - 1), rcv_nxt, end)
        if not ok:
            stats.drop("tcp.rst_out_of_window")
            return
        dlen = len(payload)
        if dlen:
            off = seq_diff(seq, rcv_nxt)
            if off < 0:  # old bytes come off the front first
                dlen += off
                off = 0
            if dlen > wnd - off:
                stats.inc("tcp.rcv_beyond_window")
        if seq == rcv_nxt:
            stats.inc("tcp.resets_received")
            self.close()
        else:
            stats.drop("tcp.rst_not_exact")
            self._challenge_ack(now)

    def _challenge_ack(self, now: float) -> None:
        """RFC 5961 challenge ACK, rate-limited per record and per layer (section 7)."""
        layer = self.layer
        if now - self.last_challenge < self.interval or not layer.challenge_allowed(now):
            layer.host.stats.inc("tcp.challenge_acks_suppressed")
            return
        self.last_challenge = now
        layer.host.stats.inc("tcp.challenge_acks")
        self.send_ack(now)

    def send_ack(self, now: float) -> None:
        """<SEQ=SND.MAX><ACK=RCV.NXT><CTL=ACK> with the frozen window (and timestamps if on)."""
        host = self.layer.host
        laddr, lport, raddr, rport = self.key
        ts = (ts_clock(now, self.ts_offset), self.ts_recent) if self.ts_ok else None
        if not host.tcp_output_segment(laddr, raddr, lport, rport, self.snd_nxt, self.rcv_nxt, ACK, self.window,
                                       ts, b"", now):
            hdr = TcpHeader(lport, rport, self.snd_nxt, self.rcv_nxt, ACK, self.window, 0, 0,
                            None, None, False, (), ts)
            self.layer.send_segment(laddr, raddr, hdr, now)
            return
        host.stats.inc("tcp.out_segs")

    def icmp_error(self, itype: int, code: int, extra: int, now: float | None) -> None:
        """Nothing is in flight in TIME-WAIT: counted, otherwise ignored."""
        self.layer.host.stats.inc("tcp.icmp_errors")

    # -- the end ---------------------------------------------------------

    def _expire(self, now: float) -> None:
        self.close()

    def close(self) -> None:
        """End TIME-WAIT: leave the layer, close the application's connection if it still has it."""
        timer = self.timer
        if timer is None:
            return
        timer.cancel()
        self.timer = None  # no cycle record <-> timer left: freed by reference counting
        self.layer.forget_time_wait(self)
        conn = self.owner()
        if conn is not None:
            conn.terminate()

    def info(self) -> TcpInfo:
        laddr, lport, raddr, rport = self.key
        return TcpInfo(
            state=TIME_WAIT.name, local=(laddr, lport), remote=(raddr, rport),
            snd_una=self.snd_nxt, snd_nxt=self.snd_nxt, snd_max=self.snd_nxt, rcv_nxt=self.rcv_nxt,
            snd_wnd=0, rcv_wnd=self.window << self.rcv_wscale, cwnd=0, ssthresh=0,
            srtt=0.0, rttvar=0.0, rto=0.0, retransmits=0, timeouts=0, backoff=0, fast_retransmits=0, dup_acks=0,
            bytes_in_flight=0, send_queue=0, unsent=0, recv_queue=0, ooo_bytes=0,
            snd_mss=0, rcv_mss=0, snd_wscale=self.snd_wscale, rcv_wscale=self.rcv_wscale,
            timestamps=self.ts_ok, sack=False, congestion="", in_recovery=False,
            segs_in=0, segs_out=0, bytes_acked=0, bytes_received=0, challenge_acks=0,
        )
