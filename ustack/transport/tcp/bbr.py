"""BBR congestion control, version 1 (draft-cardwell-iccrg-bbr-congestion-control-00).

BBR builds a model of the path from two estimates and sends at the rate
the model says the bottleneck delivers, rather than reacting to loss:

- BtlBw: the windowed maximum of the delivery rate (``ratesample``) over
  the last ``BW_ROUNDS`` (10) round trips; samples taken while the sender
  was application-limited count only when they raise it (4.1.1);
- RTprop: the windowed minimum RTT over ``MIN_RTT_WINDOW`` (10 s) (4.1.2).

A round trip starts when a packet sent after the previous round's start
is delivered (``next_round_delivered``). The state machine (4.3):

- STARTUP: pacing and cwnd gain 2/ln 2 (``HIGH_GAIN``), doubling the
  sending rate each round; the pipe is full when three rounds in a row
  (not app-limited) grew BtlBw by less than 25%, then DRAIN;
- DRAIN: pacing gain 1/HIGH_GAIN until the data in flight is at most one
  BDP (BtlBw x RTprop), then PROBE_BW;
- PROBE_BW: the pacing gain cycles through 5/4, 3/4 and six phases of 1,
  each about RTprop long (a 5/4 phase lasts until inflight reaches 5/4 BDP
  or a loss, a 3/4 phase ends early once inflight is down to one BDP); the
  cycle starts at a phase chosen at random, never the 3/4 one;
- PROBE_RTT: when RTprop has not been refreshed for 10 s, cwnd drops to
  four segments for at least 200 ms and one round trip, so that a queue
  drains and the minimum RTT can be measured again; then PROBE_BW (or
  STARTUP when the pipe was never found full).

The pacing rate is pacing_gain x BtlBw, 1% below it (as Linux); in STARTUP
it only grows. Before the first RTT sample it is HIGH_GAIN x the initial
window per SRTT (1 ms without one). cwnd (4.2.3) is cwnd_gain (2 in
PROBE_BW) x BDP plus three send quanta (``quantum``: the bytes paced in
1 ms, from 2 segments to 64 KB: Linux's TSO autosizing that the draft's
"quantization budget" covers); it grows by the bytes each ACK delivers
toward that target (any size before the pipe is found full), never below
four segments.

Loss (what this implementation chooses, 4.2.3.4): BBR v1 does not reduce
its model on loss. On entering fast recovery it keeps its window as the
target of the recovery (``ssthresh`` = cwnd), so that the recovery's PRR
(RFC 6937) sends in its slow-start reduction bound: packet conservation
(what is delivered goes out again) plus one segment per ACK, the draft's
"conservation" for the first round and the refill toward cwnd after it.
The window from before the recovery comes back when it ends (4.2.3.5,
``prior_cwnd``). A retransmission timeout sets cwnd to one segment (the
recovery after it sends within cwnd - pipe and cwnd grows by what each ACK
delivers), resets the full-pipe detector and restores the window it saved
when the recovery after it ends. Long-term bandwidth sampling for policers
(Linux's lt_bw) is not implemented.

The sender feeds it through ``on_rate_sample(sampler, pipe, recovering,
srtt, now)`` on every ACK, including those in loss recovery (the window
growth hook ``on_ack`` does nothing for BBR), and paces its new data at
``pacing_rate`` (``pacing.Pacer``).
"""

from __future__ import annotations

import random

from ustack.transport.tcp.window import INFINITE_SSTHRESH, Window

STARTUP, DRAIN, PROBE_BW, PROBE_RTT = "startup", "drain", "probe_bw", "probe_rtt"

HIGH_GAIN = 2885 / 1000  # 2/ln(2): the smallest gain that doubles the delivery rate each round (4.3.2.1)
DRAIN_GAIN = 1000 / 2885
CWND_GAIN = 2.0
PACING_GAINS = (5 / 4, 3 / 4, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)  # PROBE_BW's cycle (4.3.4.2)
BW_ROUNDS = 10  # BtlBw filter window, in round trips
MIN_RTT_WINDOW = 10.0  # RTprop filter window, in seconds
PROBE_RTT_TIME = 0.2  # the least time spent in PROBE_RTT
FULL_BW_GROWTH = 1.25  # STARTUP: a round that grew BtlBw by less than this ...
FULL_BW_ROUNDS = 3  # ... three times in a row: the pipe is full
MIN_CWND_SEGS = 4
INIT_CWND_SEGS = 10  # the target before any RTT sample (Linux's TCP_INIT_CWND)
PACING_MARGIN = 0.99  # pace 1% below the estimate (Linux's bbr_pacing_margin_percent)
QUANTUM_TIME = 1 / 1024  # Linux's sk_pacing_shift 10: ~1 ms of data per send quantum
QUANTUM_MAX = 65536


class Bbr(Window):
    """BBR v1 (see the module docstring). Windows and BDPs in bytes, rates in bytes per second."""

    name = "bbr"
    paces = True  # the sender paces new data at ``pacing_rate`` and feeds ``on_rate_sample``
    __slots__ = ("mode", "pacing_rate", "pacing_gain", "cwnd_gain", "bw_round", "bw_max", "round_count",
                 "round_start", "next_round_delivered", "min_rtt", "min_rtt_stamp", "full_bw", "full_bw_count",
                 "full_bw_reached", "cycle_index", "cycle_stamp", "prior_cwnd", "probe_rtt_done", "probe_rtt_round_done",
                 "reducing", "has_rtt", "rng", "delivered", "btl_bw", "quantum")

    def __init__(self, mss: int, cwnd: int | None = None, ssthresh: int | None = None, seed: int = 0):
        super().__init__(mss, cwnd, None)
        self.mode = STARTUP
        self.pacing_gain = HIGH_GAIN
        self.cwnd_gain = HIGH_GAIN
        self.bw_round = [-1] * BW_ROUNDS  # the round each slot of the max filter holds ...
        self.bw_max = [0.0] * BW_ROUNDS  # ... and that round's largest delivery rate
        self.round_count = 0
        self.round_start = False
        self.next_round_delivered = 0
        self.min_rtt = None  # RTprop (seconds)
        self.min_rtt_stamp = 0.0
        self.full_bw = 0.0
        self.full_bw_count = 0
        self.full_bw_reached = False
        self.cycle_index = 0
        self.cycle_stamp = 0.0
        self.prior_cwnd = 0  # the window saved by a recovery, a timeout or PROBE_RTT (4.2.3.4)
        self.probe_rtt_done = None  # when PROBE_RTT may end (None: inflight not yet down to 4 segments)
        self.probe_rtt_round_done = False
        self.reducing = False  # a recovery or timeout saved prior_cwnd and has not ended yet
        self.has_rtt = False
        self.rng = random.Random(seed)  # PROBE_BW's first phase (seeded: tests and runs repeat)
        self.delivered = 0  # C.delivered as of the latest sample
        self.btl_bw = 0.0  # BtlBw: the filter's maximum, kept as the filter changes
        self.quantum = 2 * mss  # the send quantum, kept as the pacing rate changes
        self.set_rate(HIGH_GAIN * self.cwnd / 0.001)  # 4.2.1: the initial window per 1 ms

    def set_mss(self, mss: int) -> None:
        super().set_mss(mss)
        if not self.has_rtt:
            self.set_rate(HIGH_GAIN * self.cwnd / 0.001)

    def _undo_slots(self) -> tuple:
        return ("cwnd", "ssthresh", "prior_cwnd")

    # -- the model ------------------------------------------------------------------------

    def _filter_max(self) -> float:
        """The windowed maximum delivery rate (bytes/s) over the last BW_ROUNDS rounds."""
        low = self.round_count - BW_ROUNDS
        best = 0.0
        for r, bw in zip(self.bw_round, self.bw_max):
            if r > low and bw > best:
                best = bw
        return best

    def bdp(self, gain: float, bw: float | None = None) -> int:
        """gain x BtlBw x RTprop in bytes, rounded up to whole segments (INIT_CWND before any RTT)."""
        if self.min_rtt is None:
            return INIT_CWND_SEGS * self.mss
        bw = self.btl_bw if bw is None else bw
        segs = -(-int(bw * self.min_rtt * gain) // self.mss)
        return segs * self.mss

    def set_rate(self, rate: float) -> None:
        """The pacing rate, and with it the send quantum: ~1 ms of data at that rate, 2 segments to
        64 KB, whole segments."""
        self.pacing_rate = rate
        mss = self.mss
        q = min(int(rate * QUANTUM_TIME), QUANTUM_MAX) // mss * mss
        self.quantum = q if q > 2 * mss else 2 * mss

    def target_cwnd(self, gain: float) -> int:
        """4.2.3.2: gain x BDP plus three send quanta, in even segments (+2 in PROBE_BW's 5/4 phase)."""
        mss = self.mss
        segs = (self.bdp(gain) + 3 * self.quantum) // mss
        segs = (segs + 1) & ~1
        if self.mode == PROBE_BW and self.cycle_index == 0:
            segs += 2
        return segs * mss

    # -- per ACK ----------------------------------------------------------------------------

    def on_rate_sample(self, sampler, pipe: int, recovering: bool, srtt: float | None, now: float) -> None:
        """Every ACK: update the model from ``sampler.sample``, then the pacing rate and cwnd.
        ``pipe``: bytes in flight after the ACK; ``recovering``: loss recovery is under way."""
        rs = sampler.sample
        self.delivered = sampler.delivered
        self._update_bw(rs)
        self._update_cycle(rs, pipe, now)
        self._check_full_pipe(rs)
        self._check_drain(pipe, now)
        self._update_min_rtt(sampler, rs, pipe, now)
        if not self.has_rtt and srtt:
            self.has_rtt = True
            self.set_rate(HIGH_GAIN * self.cwnd / srtt)  # 4.2.1, once SRTT is known
        self._set_pacing_rate(self.btl_bw * self.pacing_gain)
        if self.reducing and not recovering:
            self._restore()  # 4.2.3.5: the recovery or timeout is over
        self._set_cwnd(rs.newly_delivered, recovering)

    def _update_bw(self, rs) -> None:
        """4.1.1.5: round counting and the BtlBw max filter."""
        self.round_start = False
        rate = rs.delivery_rate
        if rate is None:
            return
        if rs.prior_delivered >= self.next_round_delivered:
            self.next_round_delivered = self.delivered
            self.round_count += 1
            self.round_start = True
            self.btl_bw = self._filter_max()  # a round left the window
        if not rs.is_app_limited or rate >= self.btl_bw:
            slot = self.round_count % BW_ROUNDS
            if self.bw_round[slot] != self.round_count:
                self.bw_round[slot] = self.round_count
                self.bw_max[slot] = rate
            elif rate > self.bw_max[slot]:
                self.bw_max[slot] = rate
            if rate > self.btl_bw:
                self.btl_bw = rate

    def _update_cycle(self, rs, pipe: int, now: float) -> None:
        """4.3.4.3: PROBE_BW's gain cycle advances after about RTprop (with the 5/4 and 3/4 exceptions)."""
        if self.mode != PROBE_BW:
            return
        full_length = self.min_rtt is not None and now - self.cycle_stamp > self.min_rtt
        gain = self.pacing_gain
        if gain > 1:
            advance = full_length and pipe >= self.bdp(gain)
        elif gain < 1:
            advance = full_length or pipe <= self.bdp(1.0)
        else:
            advance = full_length
        if advance:
            self._advance_cycle(now)

    def _advance_cycle(self, now: float) -> None:
        self.cycle_index = (self.cycle_index + 1) % len(PACING_GAINS)
        self.cycle_stamp = now
        self.pacing_gain = PACING_GAINS[self.cycle_index]

    def _check_full_pipe(self, rs) -> None:
        """4.3.2.2: three rounds without 25% growth of BtlBw (not app-limited): the pipe is full."""
        if self.full_bw_reached or not self.round_start or rs.is_app_limited:
            return
        bw = self.btl_bw
        if bw >= self.full_bw * FULL_BW_GROWTH:
            self.full_bw = bw
            self.full_bw_count = 0
            return
        self.full_bw_count += 1
        if self.full_bw_count >= FULL_BW_ROUNDS:
            self.full_bw_reached = True

    def _check_drain(self, pipe: int, now: float) -> None:
        """4.3.3: STARTUP -> DRAIN once the pipe is full; DRAIN -> PROBE_BW once inflight <= BDP."""
        if self.mode == STARTUP and self.full_bw_reached:
            self.mode = DRAIN
            self.pacing_gain = DRAIN_GAIN
            self.cwnd_gain = HIGH_GAIN
        if self.mode == DRAIN and pipe <= self.bdp(1.0):
            self._enter_probe_bw(now)

    def _enter_probe_bw(self, now: float) -> None:
        """4.3.4.1: PROBE_BW at a random phase of the cycle, never the 3/4 one."""
        self.mode = PROBE_BW
        self.cwnd_gain = CWND_GAIN
        self.cycle_index = len(PACING_GAINS) - 1 - self.rng.randrange(len(PACING_GAINS) - 1)
        self._advance_cycle(now)

    def _update_min_rtt(self, sampler, rs, pipe: int, now: float) -> None:
        """4.1.2.3 and 4.3.5: the RTprop filter; PROBE_RTT when it expired."""
        expired = self.min_rtt is not None and now > self.min_rtt_stamp + MIN_RTT_WINDOW
        rtt = rs.rtt
        if rtt is not None and (self.min_rtt is None or rtt < self.min_rtt or expired):
            self.min_rtt = rtt
            self.min_rtt_stamp = now
        if expired and self.mode != PROBE_RTT:
            self.mode = PROBE_RTT
            self.pacing_gain = 1.0
            self.cwnd_gain = 1.0
            self._save_cwnd()
            self.probe_rtt_done = None
        if self.mode != PROBE_RTT:
            return
        sampler.mark_app_limited(pipe)  # 4.3.5: the low rates of PROBE_RTT are no bandwidth samples
        mss = self.mss
        if self.probe_rtt_done is None:
            if pipe <= MIN_CWND_SEGS * mss:
                self.probe_rtt_done = now + PROBE_RTT_TIME
                self.probe_rtt_round_done = False
                self.next_round_delivered = self.delivered
            return
        if self.round_start:
            self.probe_rtt_round_done = True
        if self.probe_rtt_round_done and now >= self.probe_rtt_done:
            self.min_rtt_stamp = now
            self.cwnd = max(self.cwnd, self.prior_cwnd)
            if self.full_bw_reached:
                self._enter_probe_bw(now)
            else:
                self.mode = STARTUP
                self.pacing_gain = self.cwnd_gain = HIGH_GAIN

    def _set_pacing_rate(self, rate: float) -> None:
        """4.2.1: pace at the gain's rate (1% below); in STARTUP only ever faster."""
        rate *= PACING_MARGIN
        if rate > 0 and rate != self.pacing_rate and (self.full_bw_reached or rate > self.pacing_rate):
            self.set_rate(rate)

    def _set_cwnd(self, acked: int, recovering: bool) -> None:
        """4.2.3: grow toward the target by what was delivered; four segments at least (and at most in
        PROBE_RTT). In recovery the target is also the recovery's (``ssthresh``, see the docstring)."""
        mss = self.mss
        cwnd = self.cwnd
        if acked:
            target = self.target_cwnd(self.cwnd_gain)
            if self.full_bw_reached:
                cwnd = min(cwnd + acked, target)
            elif cwnd < target or self.delivered < INIT_CWND_SEGS * mss:
                cwnd += acked
            cwnd = max(cwnd, MIN_CWND_SEGS * mss)
        if self.mode == PROBE_RTT:
            cwnd = min(cwnd, MIN_CWND_SEGS * mss)
        self.cwnd = cwnd
        if recovering and self.reducing:
            self.ssthresh = max(cwnd, 2 * mss)

    def _save_cwnd(self) -> None:
        """4.2.3.4: remember the last good window (the larger one when a reduction is already running)."""
        if not self.reducing and self.mode != PROBE_RTT:
            self.prior_cwnd = self.cwnd
        else:
            self.prior_cwnd = max(self.prior_cwnd, self.cwnd)

    def _restore(self) -> None:
        self.reducing = False
        self.cwnd = max(self.cwnd, self.prior_cwnd)
        self.ssthresh = INFINITE_SSTHRESH

    # -- the CongestionControl events --------------------------------------------------------

    def on_ack(self, acked: int, rtt: float | None, now: float) -> None:
        """Growth is ``on_rate_sample``'s (every ACK, recovery or not)."""

    def on_congestion(self, in_flight: int, now: float) -> None:
        """Fast recovery starts: no reduction of the model; the window is the recovery's target."""
        self._save_cwnd()
        self.reducing = True
        self.ssthresh = max(self.cwnd, 2 * self.mss)

    def on_recovery_end(self, in_flight: int, now: float) -> None:
        self._restore()

    def end_reduction(self, now: float) -> None:
        self._restore()

    def on_rto(self, in_flight: int, now: float) -> None:
        """A timeout: one segment, the window saved, the full-pipe search restarted (Linux's
        CA_EVENT_LOSS: the RTO counts as the end of a round)."""
        self._save_cwnd()
        self.reducing = True
        self.cwnd = self.mss
        self.ssthresh = max(self.prior_cwnd, 2 * self.mss)
        self.full_bw = 0.0
        self.full_bw_count = 0
        self.round_start = True

    def restore(self, snap: tuple) -> None:
        """A spurious reduction undone (RFC 3708): the window as it was; the full-pipe search restarts
        (Linux's bbr_undo_cwnd)."""
        super().restore(snap)
        self.full_bw = 0.0
        self.full_bw_count = 0
