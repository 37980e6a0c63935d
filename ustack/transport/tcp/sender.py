"""The sending side of a connection: send buffer, output loop, ACK processing, RTT, timers' work.

``Sender`` owns the send buffer, the RTT estimator (RFC 6298), the
congestion controller (``congestion``), the loss recovery (``recovery``),
the retransmission and persist timers and the counters of what it sent;
the sequence space (SND.UNA, SND.NXT, SND.MAX, SND.WND...) is in the shared
``Tcb``. The connection tells it about acceptable ACKs (``on_ack``) and
timer expiries (``retransmit_timeout``, ``persist_timeout``) and asks it to
send (``output``).

The output loop sends what the windows allow, in this order of rules:

- usable window = min(SND.WND, window) - (SND.NXT - SND.UNA), where the
  window is the congestion window as loss recovery sees it (inflation,
  RFC 3042 limited transmit); during SACK recovery new data is sent by
  the recovery's NextSeg instead, within the ``budget`` it passes;
- a full-sized segment always goes; a short one that empties the send
  queue (a partial segment) follows Nagle's algorithm (RFC 896, RFC 1122
  4.2.3.4) in Minshall's variant, as Linux does: it is held back only
  while an earlier *short* segment is unacknowledged (SND.UNA < snd_sml,
  the end of the last short segment sent), so a 2000-byte write leaves as
  1448 + 552 at once and only a stream of small writes is coalesced.
  TCP_NODELAY (``nodelay``) sends it at once. TCP_CORK (``cork``) holds it
  whatever is outstanding, until it fills up, the cork is removed, a FIN
  follows, or ``CORK_LIMIT`` (Linux's 200 ms) has passed since the cork
  first held it (the cork timer then pushes it out). Uncorking runs the
  output loop again: as in Linux, Nagle (Minshall) still applies then
  unless ``nodelay`` is set;
- a short segment that does not empty the queue (the window limits it)
  goes only when it is at least half the largest window the peer ever
  offered (sender SWS avoidance, RFC 9293 3.8.6.2.1), or when the persist
  timer forces it;
- a FIN goes once all data is sent, even into a zero window;
- when unsent data is left and no timer will clock it out, the persist
  timer is armed; on expiry it sends one byte past a zero window (RFC 9293
  3.8.6.1) or forces a small segment (the SWS override timeout), backing off
  exponentially up to ``persist_max``.

A controller that paces (BBR: ``cc.paces``) adds two parts: ``rs``, the
delivery rate sampler (``ratesample``: every transmission recorded, every
ACK sampled, then ``cc.on_rate_sample`` before the recovery sends), and
``pacer`` (``pacing``): outside loss recovery new data goes no further than
the pacer's allowance, and the pacing timer (``pace_timer``) runs the loop
again when it held a segment back; the send buffer then grows to twice
cwnd (``sndbuf_max``). Other controllers have neither and send as before.

``snd_nxt`` is pulled back to SND.UNA by a timeout (go-back-N) and when the
peer's window closes with data outstanding (then probing, as BSD does);
``snd_max`` keeps the highest sequence number sent.

With the fast path on, ``tx`` is the layer's ``_fastpath.TxPath``
(_fp_tx.pxi): the loop hands it the full-sized segments of new data first
(it stops at the first segment these rules would treat otherwise), and
header prediction hands it the pure ACKs of new data (``on_ack`` in C, on
this object's, the estimator's and the controller's own fields). The
rules above stay the reference: tests/tcp/test_tcp_fastpath_diff.py holds
both to the same bytes and state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ustack._fastpath import lone_fin
from ustack.timers import UNARMED
from ustack.transport.tcp.congestion import make
from ustack.transport.tcp.pacing import Pacer
from ustack.transport.tcp.rack import RTO, RackRecovery
from ustack.transport.tcp.ratesample import RateSampler
from ustack.transport.tcp.recovery import NewRenoRecovery, SackRecovery
from ustack.transport.tcp.rtt import RttEstimator, ts_clock, tsecr_rtt
from ustack.transport.tcp.sendbuf import SendBuffer
from ustack.transport.tcp.seq import seq_add, seq_diff, seq_ge, seq_gt, seq_le, seq_lt
from ustack.transport.tcp.tcb import SENDING
from ustack.wire.tcp import ACK, FIN, PSH, SYN

# TCP_CORK: the longest a partial segment is held by the cork (Linux: 200 ms).
CORK_LIMIT = 0.2

if TYPE_CHECKING:
    from ustack.transport.tcp.config import TcpConfig
    from ustack.transport.tcp.congestion import CongestionControl
    from ustack.transport.tcp.output import Output
    from ustack.transport.tcp.recovery import Recovery
    from ustack.transport.tcp.tcb import Tcb


class Sender:
    __slots__ = ("tcb", "out", "stats", "sndbuf", "rtt", "cc", "recovery", "rtx_timer", "persist_timer",
                 "cork_timer", "low_water", "nodelay", "cork", "push", "max_retries", "persist_max", "send_low",
                 "rtx_count", "persist_backoff", "probes_out", "rtt_seq", "rtt_time", "force",
                 "retransmits", "timeouts", "dup_acks", "bytes_acked", "rtx_kind", "ack_tsecr", "loss_recovery", "psh_next",
                 "tx", "rto_tsval", "rs", "pacer", "pace_timer", "sndbuf_max", "timer_maker")

    def __init__(self, tcb: Tcb, config: TcpConfig, stats, out: Output, rtx_timer, persist_timer,
                 low_water: Callable[[], None], mss: int, cork_timer, pace_timer=None):
        self.tcb = tcb
        self.out = out
        self.stats = stats
        self.sndbuf = SendBuffer(config.sndbuf)
        self.rtt = RttEstimator(config.initial_rto, config.min_rto, config.max_rto)
        self.cc: CongestionControl = make(config.congestion, mss)
        self.recovery: Recovery = NewRenoRecovery(self, 0)  # until the handshake settles SACK (use_sack)
        self.rtx_timer = rtx_timer  # fires the connection's retransmission timeout
        self.persist_timer = persist_timer  # fires the connection's persist timeout
        self.cork_timer = cork_timer  # fires the connection's cork timeout (CORK_LIMIT)
        self.push = False  # the cork timer pushes the partial segment out whatever Nagle and the cork say
        self.low_water = low_water  # called when queued bytes fall to ``send_low``
        self.rtx_count = 0  # consecutive retransmission timeouts (RFC 1122 4.2.3.5 R2)
        self.persist_backoff = 0
        self.probes_out = 0  # zero-window probes the peer has not answered
        self.rtt_seq = None  # sequence number whose ACK ends the RTT measurement in progress
        self.rtt_time = 0.0
        self.force = False  # the persist timer forces a small segment (SWS override)
        self.retransmits = self.timeouts = self.dup_acks = self.bytes_acked = 0
        self.rtx_kind = RTO  # what the retransmission timer stands for (RACK-TLP: RTO, REO or PTO)
        self.ack_tsecr = None  # TSecr of the ACK in progress (RACK, Eifel)
        self.psh_next = False  # the next data segment carries PSH (a tail loss probe: the receiver ACKs it at once)
        self.tx = None  # the C transmit path (``_fastpath.TxPath``: full-sized new segments), set by the connection
        self.rto_tsval = None  # our TSval when the last timeout retransmitted; older echoes are no RTT samples
        self.pace_timer = pace_timer  # fires when the pacer lets data go again (a controller that paces)
        self.rs = None  # delivery rate estimation (``ratesample``), for a controller that paces (BBR)
        self.pacer = None  # pacing (``pacing``), for the same
        # Makes the persist, cork and pacing timers on their first arm when they were passed as
        # ``timers.UNARMED`` (``timer_maker.sender_timer(name)``: most connections never arm them).
        self.timer_maker = None
        self._model_parts()
        self.configure(config)

    def configure(self, config: TcpConfig) -> None:
        self.sndbuf.capacity = config.sndbuf
        self.sndbuf_max = config.sndbuf_max if config.sndbuf_auto else 0  # growth limit for a pacing controller
        self.rtt.min_rto, self.rtt.max_rto = config.min_rto, config.max_rto
        self.nodelay = config.nodelay
        self.cork = config.cork
        self.max_retries = config.max_retries
        self.persist_max = config.persist_max
        self.loss_recovery = config.loss_recovery
        self.send_low = config.send_low_water if config.send_low_water is not None else config.sndbuf // 2

    def set_congestion(self, name: str) -> None:
        """Switch algorithm on a live connection: the new one starts from cwnd and ssthresh."""
        cc = self.cc
        new = make(name, self.tcb.snd_mss, cc.window, cc.ssthresh)
        if new.name != cc.name:
            self.cc = new
            self._model_parts()

    def _model_parts(self) -> None:
        """A controller that paces (BBR) gets the delivery rate sampler and the pacer; others neither."""
        if getattr(self.cc, "paces", False):
            if self.rs is None:
                self.rs = RateSampler()
                self.pacer = Pacer()
        else:
            self.rs = self.pacer = None
            if self.pace_timer is not None and self.pace_timer.deadline is not None:
                self.pace_timer.cancel()

    def pipe(self) -> int:
        """Bytes in flight: sent, not acknowledged, not SACKed and not marked lost (RFC 6675's pipe, as
        RACK-TLP counts it)."""
        tcb = self.tcb
        recovery = self.recovery
        sacked = getattr(recovery, "sacked_bytes", None)
        if sacked is None:
            sacked = self.rs.sacked if self.rs is not None else 0
        n = seq_diff(tcb.snd_max, tcb.snd_una) - sacked - getattr(recovery, "lost_bytes", 0)
        return n if n > 0 else 0

    # -- the handshake ---------------------------------------------------

    def use_sack(self, sack_ok: bool) -> None:
        """The handshake settled SACK (RFC 2018): loss recovery as ``loss_recovery`` says when SACK
        is on (RACK-TLP, RFC 8985; the scoreboard, RFC 6675; or NewReno), NewReno's (RFC 6582)
        without it; "recover" is initialised to the ISS (RFC 6582 3.2 step 1)."""
        kind = self.loss_recovery if sack_ok else "newreno"
        cls = RackRecovery if kind == "rack" else SackRecovery if kind == "rfc6675" else NewRenoRecovery
        self.recovery = cls(self, self.tcb.iss)

    def arm_rtx(self, now: float, restart: bool = True) -> None:
        """Run the retransmission timer for a SYN or SYN-ACK just sent."""
        if restart or self.rtx_timer.deadline is None:
            self.rtx_timer.arm(now + self.rtt.rto)

    def syn_timeout(self, limit: int) -> bool:
        """The SYN or SYN-ACK timed out: back off for a retransmission, or False after ``limit`` of them."""
        if self.rtx_count >= limit:
            return False
        self.rtx_count += 1
        self.timeouts += 1
        self.retransmits += 1
        self.rtt.backoff()
        self.stats.inc("tcp.retrans_segs")
        return True

    def established(self, syn_retransmitted: bool) -> None:
        """The handshake completed: stop its timer; the controller learns SMSS."""
        self.rtx_timer.cancel()
        self.rtx_count = 0
        self.rtt.reset_backoff()
        if syn_retransmitted:
            self.rtt.set_floor(3.0)  # RFC 6298 5.7
        self.cc.set_mss(self.tcb.snd_mss)
        self.tcb.snd_sml = self.tcb.snd_una

    def sample_tsecr(self, ts, now: float) -> bool:
        """RFC 7323 4.1: an RTT sample from the TSecr of ``ts``; False when the segment echoes none."""
        tcb = self.tcb
        if ts is None or not ts[1] or not tcb.ts_ok:
            return False
        stamp = self.rto_tsval
        if stamp is not None:
            if ((ts[1] - stamp) & 0xFFFFFFFF) > 0x7FFFFFFF:
                # An echo of a TSval from before the timeout: its "RTT" spans the wait for the timeout
                # (lost ACKs, then the RTO), not the path (Karn's rule, RFC 6298 3, for what the
                # echo stands for). Taken would make SRTT ~RTO/8, the PTO and RACK's windows with it.
                return True
            self.rto_tsval = None
        r = tsecr_rtt(now, tcb.ts_offset, ts[1])
        if r is not None:
            self.rtt.sample(r)
        return True

    # -- acknowledgments (RFC 9293 3.10.7.4, fifth step) -----------------

    def on_ack(self, seg, dlen: int, now: float) -> None:
        """An acceptable ACK in a synchronized state (``dlen`` = the segment's data length)."""
        tcb = self.tcb
        ack = seg.ack
        una = tcb.snd_una
        snd_max = tcb.snd_max
        ts = seg.timestamps
        self.ack_tsecr = ts[1] if ts is not None and tcb.ts_ok else None
        advanced = seq_diff(ack, una)
        seg_wnd = seg.window << tcb.snd_wscale
        if advanced > 0:
            self._advance(ack, advanced, seg.timestamps, now)
        elif (advanced == 0 and dlen == 0 and not seg.flags & (SYN | FIN) and seg_wnd == tcb.snd_wnd
              and snd_max != una and tcb.snd_wnd):
            # RFC 5681 section 2: a duplicate ACK.
            self.dup_acks += 1
            self.recovery.on_dup_ack(ack, seq_diff(snd_max, una), now)
        # Window update, guarded by SND.WL1/SND.WL2 against old segments.
        seq = seg.seq
        wl1 = tcb.snd_wl1
        if seq_lt(wl1, seq) or (wl1 == seq and seq_le(tcb.snd_wl2, ack)):
            old = tcb.snd_wnd
            tcb.snd_wnd = seg_wnd
            tcb.snd_wl1 = seq
            tcb.snd_wl2 = ack
            if seg_wnd > tcb.max_snd_wnd:
                tcb.max_snd_wnd = seg_wnd
            if seg_wnd and not old and self.persist_timer.deadline is not None:
                self.persist_timer.cancel()
                self.persist_backoff = 0
        if tcb.state in SENDING:
            recovery = self.recovery
            if self.rs is not None:
                self.sample_ack(ack, seg.sack_blocks, now)
            recovery.after_ack(ack, seg.sack_blocks, now)
            recovery.arm_timer(now)

    def sample_ack(self, ack: int, sack_blocks, now: float) -> None:
        """A controller that paces: the rate sample of this ACK, then the model (BBR) on every ACK, in
        recovery too, before the recovery sends (the draft's order: the model, then transmission); the
        send buffer grows to twice cwnd (Linux's tcp_sndbuf_expand). The C ACK path calls it too."""
        rs = self.rs
        rs.on_ack(ack, sack_blocks, now, self.tcb.snd_mss)
        cc = self.cc
        recovery = self.recovery
        cc.on_rate_sample(rs, self.pipe(), recovery.in_recovery or getattr(recovery, "in_loss", False),
                          self.rtt.srtt, now)
        want = 2 * cc.window
        sndbuf = self.sndbuf
        if want > sndbuf.capacity and sndbuf.capacity < self.sndbuf_max:
            sndbuf.capacity = min(want, self.sndbuf_max)

    def _advance(self, ack: int, advanced: int, ts, now: float) -> None:
        """SND.UNA moves to ``ack``, ``advanced`` sequence numbers on."""
        tcb = self.tcb
        sndbuf = self.sndbuf
        before = len(sndbuf)
        acked = advanced
        if advanced > before:
            acked = before
            if tcb.fin_queued:
                tcb.fin_acked = True
        if acked:
            sndbuf.acknowledge(acked)
        tcb.snd_una = ack
        if seq_lt(tcb.snd_nxt, ack):
            tcb.snd_nxt = ack
        if seq_lt(tcb.snd_sml, ack):
            tcb.snd_sml = ack  # kept within reach of SND.UNA, so that no wrap makes it look ahead
        self.bytes_acked += acked
        self.rtx_count = 0
        rtt = self.rtt
        if not self.sample_tsecr(ts, now) and self.rtt_seq is not None and seq_ge(ack, self.rtt_seq):
            rtt.sample(now - self.rtt_time)
            self.rtt_seq = None
        if not self.recovery.on_ack(ack, advanced, acked, seq_diff(tcb.snd_max, ack), now):
            self.cc.on_ack(acked, rtt.srtt, now)
        self.rtx_kind = RTO
        if tcb.snd_max == ack:
            self.rtx_timer.cancel()  # RFC 6298 5.2
        else:
            self.rtx_timer.arm(now + rtt.rto)  # RFC 6298 5.3
        if before > self.send_low >= len(sndbuf):
            self.low_water()

    # -- sending ---------------------------------------------------------

    def send_data(self, seq: int, n: int, fin: bool, now: float, advance: bool = True, probe: bool = False,
                  arm: bool = True) -> None:
        """Send ``n`` bytes from the send buffer starting at ``seq`` (plus FIN); ``arm``: False when the
        caller arms the retransmission timer itself afterwards (``output`` for RACK-TLP)."""
        tcb = self.tcb
        off = seq_diff(seq, tcb.snd_una)
        sndbuf = self.sndbuf
        payload = sndbuf.peek(off, n) if n else b""
        flags = ACK
        if fin:
            flags |= FIN
        if n and (off + n == len(sndbuf) or self.psh_next):
            flags |= PSH
            self.psh_next = False
        self.out.emit(seq, flags, now, payload)
        end = seq_add(seq, n + 1 if fin else n)
        self.recovery.on_send(seq, n + 1 if fin else n, now)
        if self.rs is not None:
            self.rs.on_send(tcb.snd_una, seq, n + 1 if fin else n, now)
            self.pacer.spend(n, self.cc.quantum)
        if seq_lt(seq, tcb.snd_max):
            self.retransmits += 1
            self.stats.inc("tcp.retrans_segs")
        else:
            if n and not probe and self.rtt_seq is None and not tcb.ts_ok:
                self.rtt_seq = end  # time this segment (Karn: only never-retransmitted ones)
                self.rtt_time = now
            if 0 < n < tcb.snd_mss and not probe:
                tcb.snd_sml = end  # Minshall: the last short segment sent
        if advance:
            tcb.snd_nxt = end
        if seq_gt(end, tcb.snd_max):
            tcb.snd_max = end
        if arm and not probe and self.rtx_timer.deadline is None:
            self.rtx_kind = RTO
            self.rtx_timer.arm(now + self.rtt.rto)

    def retransmit(self, seq: int, n: int, now: float) -> None:
        """Send ``n`` bytes from ``seq`` again; SND.NXT stays, no RTT sample (Karn)."""
        self.rtt_seq = None
        self.send_data(seq, n, False, now, advance=False)

    def retransmit_head(self, now: float) -> None:
        """Retransmit the first unacknowledged segment (fast retransmit, partial ACK, smaller MSS)."""
        tcb = self.tcb
        outstanding = seq_diff(tcb.snd_max, tcb.snd_una)
        buffered = len(self.sndbuf)
        n = min(tcb.snd_mss, buffered, outstanding)
        fin = tcb.fin_queued and n == buffered and outstanding > buffered
        if n <= 0 and not fin:
            return
        self.rtt_seq = None  # Karn
        self.send_data(tcb.snd_una, n, fin, now, advance=False)

    def output(self, now: float, budget: int | None = None) -> None:
        """Send whatever the windows, Nagle and SWS avoidance allow (see the module docstring).

        ``budget`` (SACK recovery's cwnd - pipe) replaces the congestion window.
        """
        tcb = self.tcb
        if tcb.state not in SENDING:
            return
        sndbuf = self.sndbuf
        if not len(sndbuf) and ((not tcb.fin_queued and tcb.snd_max == tcb.snd_una)
                                or (tcb.snd_nxt != tcb.snd_una and self.rtx_timer.deadline is not None)):
            # Nothing to send: nothing outstanding (an ACK of the handshake, a read), or only our FIN
            # (or SYN) and its timer running. What the loop and the timers below come to, without them.
            self.force = self.push = False
            if self.cork_timer.deadline is not None:
                self.cork_timer.cancel()
            if self.rs is not None and not len(sndbuf):
                self.rs.mark_app_limited(self.pipe())  # nothing to send: the application's limit
            return
        if budget is None and self.tx is not None and tcb.fin_queued and not len(sndbuf):
            ctl = self.out.ctl
            if ctl is not None and lone_fin(ctl, self, now):
                return  # all there is to send is our FIN: written in C (_fp_fin.pxi), as the loop below would
        if budget is None and self.tx is not None and self.tx.output_whole(self, now):
            return  # the common case (full segments of new data, a tail Nagle holds) done whole in C
        paced = False
        if budget is None:
            cwnd = self.recovery.window(self.cc.window)
            if cwnd is None:
                return  # SACK recovery sends new data itself
            if self.pacer is not None:
                # pacing: no more than the pacer's allowance beyond what is out (whole segments)
                cc = self.cc
                limit = seq_diff(tcb.snd_nxt, tcb.snd_una) + self.pacer.allowance(cc.pacing_rate, cc.quantum,
                                                                                  tcb.snd_mss, now)
                if limit < cwnd:
                    window, cwnd, paced = cwnd, limit, True
        else:
            cwnd = 0  # unused: the budget stands in for the congestion window
        buffered = len(sndbuf)
        una = tcb.snd_una
        snd_max = tcb.snd_max
        if tcb.snd_wnd == 0 and buffered and seq_gt(tcb.snd_nxt, una):
            # The window closed with data outstanding: pull SND.NXT back and
            # probe instead of retransmitting into a closed window (as BSD does).
            tcb.snd_nxt = una
            self.rtx_timer.cancel()
            self.rtx_count = 0
            if self.persist_timer.deadline is None:
                self.arm_persist(now)
        mss = tcb.snd_mss
        force = self.force
        self.force = False
        push = self.push
        self.push = False
        corked = False
        send_data = self.send_data
        # RACK-TLP arms the timer after new data (arm_timer below, RFC 8985 7.2): the segments leave it to
        # that one arm (else an RTO arm and a PTO arm per flight, as for a lone FIN).
        arm = budget is not None or not self.recovery.arms_after_send
        tx = self.tx
        if tx is not None and budget is None:
            if self.rs is None:
                tx.burst(self, cwnd, now)  # the full-sized segments of new data first, in C (_fp_tx.pxi)
            else:
                nxt = tcb.snd_nxt
                if tx.burst(self, cwnd, now):  # (its segments told to the rate sampler and the pacer as one)
                    n = seq_diff(tcb.snd_nxt, nxt)
                    self.rs.on_send(una, nxt, n, now)
                    self.pacer.spend(n, self.cc.quantum)
        elif tx is not None and self.rs is not None and budget >= mss:
            # a pacing controller's new data in loss recovery: the full segments within the budget in C too
            # (what the loop below would send first; the recovery's on_send is called per segment there)
            nxt = tcb.snd_nxt
            if tx.burst(self, seq_diff(nxt, una) + budget, now):
                n = seq_diff(tcb.snd_nxt, nxt)
                self.rs.on_send(una, nxt, n, now)
                self.pacer.spend(n, self.cc.quantum)
                budget -= n
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
                    # A partial segment: TCP_CORK holds it; Nagle (Minshall's variant) holds it
                    # while an earlier short segment is unacknowledged. A FIN or a push sends it.
                    if not (push or tcb.fin_queued):
                        if self.cork:
                            corked = True
                            break
                        if not self.nodelay and seq_gt(tcb.snd_sml, una):
                            break
                elif n < tcb.max_snd_wnd // 2:
                    break  # sender SWS avoidance: wait for the window to open further
            send_data(nxt, n, fin, now, True, False, arm)
            force = False
            if budget is not None:
                budget -= n
            if fin:
                break
        if self.rs is not None and budget is None:
            self._paced_after(cwnd if paced else None, window if paced else cwnd, now)
        # Timers: something outstanding needs the retransmission timer; unsent
        # data with nothing outstanding needs the persist timer.
        if self.rtx_timer.deadline is None and self.persist_timer.deadline is None:
            if tcb.snd_max != tcb.snd_una:
                if arm or tcb.snd_max == snd_max:  # (else the recovery's arm_timer just below)
                    self.rtx_kind = RTO
                    self.rtx_timer.arm(now + self.rtt.rto)
            elif seq_diff(tcb.snd_nxt, una) < len(sndbuf) and not corked:
                self.arm_persist(now)
        if tcb.snd_max != snd_max and budget is None:
            self.recovery.arm_timer(now)  # new data: RACK-TLP may run the timer as the PTO (RFC 8985 7.2)
        # The cork's 200 ms cap runs from when it first held a partial segment.
        cork_timer = self.cork_timer
        if corked:
            if cork_timer.deadline is None:
                if cork_timer is UNARMED:
                    cork_timer = self.cork_timer = self.timer_maker.sender_timer("cork_timer")
                cork_timer.arm(now + CORK_LIMIT)
        elif cork_timer.deadline is not None and (not self.cork or seq_diff(tcb.snd_nxt, tcb.snd_una) >= len(sndbuf)):
            cork_timer.cancel()

    def _paced_after(self, paced: int | None, cwnd: int, now: float) -> None:
        """After an output of a pacing controller (``paced``: the pacer's limit when it was below the
        window): the pacing timer when the pacer held back a segment the windows allow (not Nagle or
        SWS avoidance); the rate sampler told when the application left the window unused."""
        tcb = self.tcb
        off = seq_diff(tcb.snd_nxt, tcb.snd_una)
        unsent = len(self.sndbuf) - off
        if unsent <= 0:
            pipe = self.pipe()
            if pipe < cwnd:
                self.rs.mark_app_limited(pipe)
            return
        nxt = min(unsent, tcb.snd_mss)
        if paced is not None and paced - off < nxt <= min(tcb.snd_wnd, cwnd) - off:
            cc = self.cc
            timer = self.pace_timer
            at = self.pacer.wake_at(cc.pacing_rate, cc.quantum, now)
            if timer is not None and (timer.deadline is None or at < timer.deadline):
                if timer is UNARMED:
                    timer = self.pace_timer = self.timer_maker.sender_timer("pace_timer")
                timer.arm(at)

    def paced_sent(self, nxt: int, paced: int | None, cwnd: int, now: float) -> None:
        """The C path's output sent new data from ``nxt`` for a pacing controller: its segments told to
        the rate sampler and the pacer as one, then what ``output`` does after its loop (``_paced_after``)."""
        tcb = self.tcb
        n = seq_diff(tcb.snd_nxt, nxt)
        self.rs.on_send(tcb.snd_una, nxt, n, now)
        self.pacer.spend(n, self.cc.quantum)
        self._paced_after(paced, cwnd, now)

    def pace_timeout(self, now: float) -> bool:
        """The pacing timer: the pacer lets data go again. False when there was nothing to send."""
        tcb = self.tcb
        if tcb.state not in SENDING or seq_diff(tcb.snd_nxt, tcb.snd_una) >= len(self.sndbuf):
            return False
        self.output(now)
        return True

    # -- timeouts --------------------------------------------------------

    def retransmit_timeout(self, now: float) -> bool:
        """RFC 6298 5.4-5.6, RFC 5681 3.1: retransmit the earliest segment, back off, go back N.

        False, having done nothing, when ``max_retries`` timeouts in a row were not enough.
        """
        recovery = self.recovery
        kind = self.rtx_kind
        if kind != RTO:
            # RACK-TLP's reorder timer or probe timeout (RFC 8985 6.2, 7.3); the RTO runs again behind it.
            self.rtx_kind = RTO
            self.rtx_timer.arm(now + self.rtt.rto)
            recovery.on_timer(kind, now)
            return True
        if self.rtx_count >= self.max_retries:
            return False
        tcb = self.tcb
        self.rtx_count += 1
        self.timeouts += 1
        self.stats.inc("tcp.rto_expired")
        if tcb.ts_ok:
            self.rto_tsval = ts_clock(now, tcb.ts_offset)
        recovery.before_rto(now)
        self.cc.on_rto(seq_diff(tcb.snd_max, tcb.snd_una), now)
        recovery.on_rto()
        self.rtt.backoff()
        self.rtt_seq = None  # Karn
        if not recovery.rto_retransmit(now):
            tcb.snd_nxt = tcb.snd_una  # go back N
            self.output(now)
        if self.rtx_timer.deadline is None and tcb.snd_max != tcb.snd_una:
            self.rtx_kind = RTO
            self.rtx_timer.arm(now + self.rtt.rto)
        return True

    def cork_timeout(self, now: float) -> bool:
        """``CORK_LIMIT`` passed with a partial segment corked: push it out. False when nothing was pending."""
        tcb = self.tcb
        if tcb.state not in SENDING or seq_diff(tcb.snd_nxt, tcb.snd_una) >= len(self.sndbuf):
            return False
        self.stats.inc("tcp.cork_timeouts")
        self.push = True
        self.output(now)
        return True

    def arm_persist(self, now: float) -> None:
        interval = self.rtt.rto * (1 << min(self.persist_backoff, 16))
        timer = self.persist_timer
        if timer is UNARMED:
            timer = self.persist_timer = self.timer_maker.sender_timer("persist_timer")
        timer.arm(now + min(interval, self.persist_max))

    def persist_pending(self) -> bool:
        """The persist timer expired: is there anything for it to push?"""
        tcb = self.tcb
        buffered = len(self.sndbuf)
        if tcb.state not in SENDING or not buffered:
            return False
        return seq_diff(tcb.snd_nxt, tcb.snd_una) < buffered or tcb.snd_wnd == 0

    def persist_timeout(self, now: float) -> bool:
        """Probe a zero window, or force a small segment; False when the probes went unanswered too long."""
        tcb = self.tcb
        self.persist_backoff += 1
        if tcb.snd_wnd == 0:
            # Zero-window probe: one octet of new data past the window (RFC 9293 3.8.6.1). The
            # connection stays open while the peer answers (RFC 1122 4.2.2.17); unanswered
            # probes count like retransmissions.
            self.probes_out += 1
            if self.probes_out > self.max_retries:
                return False
            self.stats.inc("tcp.window_probes")
            tcb.snd_nxt = tcb.snd_una  # always the first unacknowledged octet
            self.send_data(tcb.snd_una, 1, False, now, probe=True)
        else:
            self.force = True  # SWS override timeout
            self.output(now)
        if self.rtx_timer.deadline is None and (
                tcb.snd_wnd == 0 or seq_diff(tcb.snd_nxt, tcb.snd_una) < len(self.sndbuf)):
            self.arm_persist(now)
        return True

    @property
    def timer_is_rto(self) -> bool:
        """The retransmission timer runs as the RTO (not RACK-TLP's reorder timer or probe timeout)."""
        return self.rtx_kind == RTO

    @property
    def busy(self) -> bool:
        """Data is outstanding or a window probe is due: a timer watches the peer already."""
        tcb = self.tcb
        return tcb.snd_max != tcb.snd_una or self.persist_timer.deadline is not None

    def stop(self) -> None:
        """No more retransmissions or probes (TIME-WAIT, CLOSED)."""
        self.rtx_timer.cancel()
        self.persist_timer.cancel()
        self.cork_timer.cancel()
        if self.pace_timer is not None:
            self.pace_timer.cancel()
