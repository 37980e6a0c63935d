"""The receiving side of a connection: receive buffer, reassembly, delayed ACK, window, SACK blocks.

``Receiver`` owns what RFC 9293 3.10.7.4 (seventh step, segment text) and
3.8.6.2.2 need, apart from the sequence space in the shared ``Tcb``
(RCV.NXT, RCV.WND, the advertised right edge):

- text: in-order bytes go to the ``ReceiveBuffer`` for the user,
  out-of-order runs are kept for reassembly (bounded), and RCV.NXT moves;
- ACK policy (RFC 5681 4.2, RFC 1122 4.2.3.2): an ACK for every second
  full-sized segment; at once for one that fills a gap and for an
  out-of-order segment, except that, with SACK, after the first DupThresh
  (3) ACKs for one RCV.NXT later ones are compressed into one ACK at the
  end of the poll round (``ack_round``; Linux's tcp_comp_sack holds them up
  to 1 ms): its SACK blocks say all those ACKs would, and a burst of
  segments above a hole no longer costs an ACK each; otherwise as ``delack.DelayedAck`` decides (quick-ACK mode,
  ping-pong mode, PSH with a waiting reader, the adaptive delay). ``ack_now``
  says an ACK is owed now; whoever sends a segment with an ACK calls
  ``ack_sent``. While the stack delivers a poll round's burst
  (``TcpLayer.in_round``), the bulk reasons (every second segment, quick-ACK
  mode) owe the ACK at the round's end instead (``ack_round``): one
  cumulative ACK per connection per burst, sent after the application has
  read, so it carries the window the read opened (receive ACK coalescing,
  as a GRO receiver ACKs one aggregated segment);
- the window we advertise follows receiver SWS avoidance (RFC 9293
  3.8.6.2.2): the right edge moves only by at least min(RCV.BUFF/2, MSS),
  never left, and a read that opens it usefully asks for a window update;
- SACK blocks for the out-of-order runs, the most recently changed first
  (RFC 2018 4).

The connection decides what a segment's text is (acceptability, trimming)
and what the peer's FIN means for the state machine; ``receive_fin`` only
moves RCV.NXT past it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ustack.timers import UNARMED
from ustack.transport.tcp.config import PRESSURE_MIN, ROUND_ACK_BYTES
from ustack.transport.tcp.delack import DelayedAck
from ustack.transport.tcp.rcvspace import ReceiveSpace
from ustack.transport.tcp.recvbuf import ReceiveBuffer
from ustack.transport.tcp.scoreboard import DUP_THRESH
from ustack.transport.tcp.seq import seq_add, seq_diff, seq_gt
from ustack.transport.tcp.tcb import RECEIVING, SYNCHRONIZED

if TYPE_CHECKING:
    from ustack.transport.tcp.config import TcpConfig
    from ustack.transport.tcp.tcb import Tcb


class Receiver:
    __slots__ = ("tcb", "rcvbuf", "stats", "delack_timer", "_timers", "_owner", "_on_delack", "delack", "rtt",
                 "recv_high", "high_water", "ack_now", "wnd_update", "unacked", "rd_shutdown", "bytes_received",
                 "budget", "dsack", "delack_due", "ack_round", "coalesce", "ooo_acks", "ooo_acks_at", "sack_tick",
                 "gap_round", "space")

    def __init__(self, tcb: Tcb, config: TcpConfig, stats, timers, owner, on_delack: Callable,
                 high_water: Callable[[], None]):
        self.tcb = tcb
        self.rcvbuf = ReceiveBuffer(config.rcvbuf, config.max_ooo_runs)
        self.stats = stats
        # The delayed-ACK timer, ``on_delack(owner, now)`` on ``timers``: made when first armed (a
        # connection that never delays an ACK never pays for it); until then the shared UNARMED.
        self.delack_timer = UNARMED
        self._timers = timers
        self._owner = owner
        self._on_delack = on_delack
        # When the delayed ACK is due (None: no delayed ACK runs). The timer is re-armed lazily: an ACK
        # that leaves clears this field and leaves the timer be; a firing that finds the ACK due later
        # re-arms it for then (``delack_fired``). A bulk stream costs no timer operation per ACK.
        self.delack_due = None
        self.high_water = high_water  # called when readable bytes reach ``recv_high``
        self.ack_now = False  # an ACK is owed now (out of order, gap filled, FIN, every 2nd segment...)
        # an ACK is owed by the end of this poll round (compressed SACKs; the in-order ACK of a burst,
        # TcpLayer.ack_at_round_end)
        self.ack_round = False
        self.ooo_acks = 0  # immediate ACKs for out-of-order segments since RCV.NXT was ``ooo_acks_at``
        self.ooo_acks_at = None
        self.wnd_update = False  # a read opened the window: advertise it
        self.unacked = 0  # in-order bytes received since our last ACK
        self.rd_shutdown = False  # SHUT_RD: received bytes are discarded
        self.bytes_received = 0
        self.dsack = None  # (left, right) of duplicate data to report first in the next ACK (RFC 2883)
        self.sack_tick = 0  # the out-of-order runs' change stamp (ReceiveBuffer.tick) when an ACK last left
        self.gap_round = False  # a gap filled in this round: the round's end ACKs once more (TcpLayer.flush)
        self.budget = None  # the TcpLayer: its memory budget (mem_room(), under_pressure); set by the connection
        self.rtt = None  # the sender's RttEstimator (RTO and SRTT bound the delay), set by the connection
        # What configure() sets, without setting it twice: the buffer got its sizes above, and a new
        # DelayedAck is what configure() would leave (config.validate: delack_timeout <= delack_max).
        self.delack = DelayedAck(config.delayed_ack, config.delack_timeout, config.delack_max, config.max_quickacks)
        self.recv_high = config.recv_high_water if config.recv_high_water is not None else config.rcvbuf // 2
        # ack_bulk may wait for the round's end, for at most this many bytes (0: ack_coalescing off)
        self.coalesce = ROUND_ACK_BYTES if config.ack_coalescing else 0
        # receive-buffer auto-tuning (rcvspace.py): limit 0 when off
        self.space = ReceiveSpace(config.rcvbuf_ceiling if config.rcvbuf_auto else 0)

    def configure(self, config: TcpConfig) -> None:
        space = self.space
        if config.rcvbuf_auto:
            # auto-tuning may have grown the buffer: other knobs leave it as it is
            self.rcvbuf.capacity = max(self.rcvbuf.capacity, config.rcvbuf)
            # (the window scale, fixed at the handshake, covers the ceiling of the config it had then)
            space.limit = min(config.rcvbuf_ceiling, space.limit) if space.limit else 0
        else:
            self.rcvbuf.capacity = config.rcvbuf  # an explicit size: no more auto-tuning (Linux SOCK_RCVBUF_LOCK)
            space.limit = 0
        self.rcvbuf.max_runs = config.max_ooo_runs
        self.delack.configure(config.delayed_ack, config.delack_timeout, config.delack_max, config.max_quickacks)
        self.recv_high = config.recv_high_water if config.recv_high_water is not None else config.rcvbuf // 2
        self.coalesce = ROUND_ACK_BYTES if config.ack_coalescing else 0

    # -- text ------------------------------------------------------------

    def receive(self, dseq: int, data, now: float, push: bool = False) -> None:
        """Text at ``dseq`` (already trimmed to the window, RFC 9293 3.10.7.4 seventh step); ``push``: PSH set."""
        tcb = self.tcb
        rcvbuf = self.rcvbuf
        off = seq_diff(dseq, tcb.rcv_nxt)
        had_gap = rcvbuf.ooo_bytes > 0
        before = len(rcvbuf)
        dup = had_gap and off > 0 and rcvbuf.holds(off, len(data))
        adv = rcvbuf.write(off, data)
        if adv < 0:
            self.stats.drop("tcp.ooo_overflow")
            self.ack_now = True
            return
        if off > 0:
            if dup:
                self.duplicate(dseq, seq_add(dseq, len(data)))  # already held out of order
            self.stats.inc("tcp.ooo_segs")
            self.ooo_ack()
            return
        if adv == 0:
            return
        self.in_order(adv, len(data), had_gap, before, now, push)

    def ooo_ack(self) -> None:
        """An out-of-order segment arrived: RFC 5681 4.2 ACKs it at once; with SACK, beyond the first
        DupThresh ACKs for this RCV.NXT (the sender's fast retransmit needs them), the round's end does."""
        tcb = self.tcb
        if self.ooo_acks_at != tcb.rcv_nxt:
            self.ooo_acks_at = tcb.rcv_nxt
            self.ooo_acks = 0
        if self.ooo_acks < DUP_THRESH or not tcb.sack_ok or self.budget is None:
            self.ooo_acks += 1
            self.ack_now = True
        else:
            self.stats.inc("tcp.sack_compressed")
            self._ack_at_round_end(self.budget)

    def in_order(self, adv: int, dlen: int, had_gap: bool, before: int, now: float, push: bool) -> None:
        """``adv`` new in-order bytes (from a segment of ``dlen`` bytes) are in the buffer, which held
        ``before`` readable bytes: RCV.NXT moves, the ACK policy decides, high water is checked.

        ``had_gap``: out-of-order data was held before the segment. The fast path
        (``_fastpath.EstablishedPath``) appends a predicted segment itself and calls this.
        """
        tcb = self.tcb
        rcvbuf = self.rcvbuf
        tcb.rcv_nxt = seq_add(tcb.rcv_nxt, adv)
        self.bytes_received += adv
        if dlen > tcb.rcv_mss:
            tcb.rcv_mss = min(dlen, tcb.mss_base)
        delack = self.delack
        rtt = self.rtt
        rto = rtt.rto if rtt is not None else 1.0
        delack.data_received(now, rto, rcvbuf.free, tcb.rcv_mss)
        self.unacked += adv
        if not delack.enabled:
            self.ack_now = True  # no delayed ACKs at all
        elif had_gap:
            self.ack_gap()  # this segment filled (part of) a gap
        elif self.unacked >= 2 * tcb.rcv_mss:
            self.ack_bulk()  # every second full-sized segment (RFC 5681 4.2)
        elif delack.quickack_mode():
            self.ack_bulk()
        elif push and delack.push_wants_ack():
            self.ack_now = True
        elif self.delack_due is None:
            self.arm_delack(now + delack.timeout(rtt.srtt if rtt is not None else None))
        if self.rd_shutdown:
            rcvbuf.read(len(rcvbuf))
        elif before < self.recv_high <= len(rcvbuf):
            self.high_water()

    def ack_gap(self) -> None:
        """A segment filled (part of) a gap: RFC 5681 4.2 ACKs it at once; during a poll round's
        delivery, at the round's end (``ack_round``, unless ``ack_coalescing`` is off), after the
        application read. Sent before the read, that ACK offered the window less everything the
        filled gap released at once (kernel -> ustack at 3%: 392 bytes of 256 KiB), and when the
        window update after the read was lost the kernel's sender waited out its persist timer
        (200 ms). That ACK goes twice (``gap_round``: the round's end sends one more, whoever sent the
        first, the C path included): it replaces the two (at once, then the
        window update), and alone, when lost, it left the sender with a repaired hole it did not
        know of (the seeded pipe at 3%: one more RTO)."""
        budget = self.budget
        if self.coalesce and budget is not None and budget.in_round:
            self.gap_round = True
            self._ack_at_round_end(budget)
        else:
            self.ack_now = True

    def ack_bulk(self) -> None:
        """The in-order policy owes an ACK (every second segment, quick-ACK mode): now, or, during a
        poll round's delivery (``budget.in_round``), once at the round's end (``ack_round``) unless the
        connection's ``ack_coalescing`` is off or the ACK covers a whole GRO aggregate (another full
        segment would take it past ``coalesce``, config.ROUND_ACK_BYTES: no stretch ACK beyond what a
        GRO receiver sends, which ACKs every aggregate; a TSO super-frame taken whole is one)."""
        budget = self.budget
        if (self.coalesce and budget is not None and budget.in_round
                and self.unacked + self.tcb.rcv_mss <= self.coalesce):
            self._ack_at_round_end(budget)
        else:
            self.ack_now = True

    def _ack_at_round_end(self, budget) -> None:
        """Owe one ACK, sent by the layer's flush at the end of this poll round (``TcpLayer.ack_at_round_end``)."""
        if not self.ack_round:
            self.ack_round = True
            budget.ack_at_round_end(self._owner)

    def receive_fin(self) -> None:
        """The peer's FIN is in sequence: RCV.NXT moves past it, and it is acknowledged at once."""
        tcb = self.tcb
        tcb.rcv_nxt = seq_add(tcb.rcv_nxt, 1)
        tcb.fin_rcvd = True
        tcb.fin_rcvd_seq = None
        self.ack_now = True

    def after_read(self, now: float | None = None) -> bool:
        """The user took bytes: True when a window update should go out (RFC 9293 3.8.6.2.2).

        ``now`` (None: when data last arrived) drives receive-buffer auto-tuning (``space_adjust``)."""
        tcb = self.tcb
        if tcb.state not in RECEIVING:
            return False
        rcvbuf = self.rcvbuf
        if self.space.limit:
            self.space_adjust(now)
        cur = seq_diff(tcb.rcv_adv, tcb.rcv_nxt)
        cap = rcvbuf.capacity
        if cur <= cap // 2 and self.offerable() - cur >= min(cap // 2, tcb.mss_base):
            self.wnd_update = True
            return True
        delack = self.delack
        if delack.pushed and not delack.pingpong and not len(rcvbuf) and self.unacked:
            # A read emptied the buffer after a pushed segment: ACK it now (Linux tcp_cleanup_rbuf).
            self.ack_now = True
            return True
        return False

    def space_adjust(self, now: float | None) -> None:
        """Receive-buffer auto-tuning (``rcvspace.ReceiveSpace``) after a read: the receiver's RTT
        sample, then, once per RTT, the buffer grows when the application read more than before."""
        if now is None:
            now = self.delack.lrcvtime
            if now is None:
                return
        space = self.space
        rcvbuf = self.rcvbuf
        tcb = self.tcb
        received = self.bytes_received
        space.measure_rtt(received, tcb.rcv_wnd, now)
        rtt = self.rtt
        budget = self.budget
        cap = rcvbuf.capacity
        new = space.adjust(received - len(rcvbuf), cap, tcb.rcv_mss, rtt.srtt if rtt is not None else None, now,
                           budget is not None and budget.under_pressure)
        if new != cap:
            rcvbuf.capacity = new
            self.stats.inc("tcp.rcvbuf_grown")

    def shutdown(self) -> None:
        """SHUT_RD: what is buffered and what arrives later is discarded."""
        self.rd_shutdown = True
        self.rcvbuf.read(len(self.rcvbuf))

    # -- what outgoing segments carry --------------------------------------

    def offerable(self) -> int:
        """Free receive space the window may offer: the buffer's, within the layer's memory budget."""
        rcvbuf = self.rcvbuf
        free = rcvbuf.free
        layer = self.budget
        if layer is not None:
            room = layer.mem_room()
            if room < free:  # tcp_mem (hard): offer no more than the layer can still hold
                free = max(room, 0)
            if layer.under_pressure:
                # Soft pressure: the buffer is trimmed to what it holds plus PRESSURE_MIN, so the window
                # stops growing (what was advertised stays: ``cur`` in select_window, RFC 7323 2.4).
                trimmed = PRESSURE_MIN - len(rcvbuf) - rcvbuf.ooo_bytes
                if trimmed < free:
                    free = max(trimmed, 0)
        return free

    def select_window(self) -> int:
        """The window field to advertise now (scaled); updates RCV.WND and the advertised right edge."""
        tcb = self.tcb
        rcvbuf = self.rcvbuf
        free = self.offerable()
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

    def syn_window(self, synack: bool) -> int:
        """The window of our SYN or SYN-ACK: never scaled (RFC 7323 2.2)."""
        tcb = self.tcb
        window = min(self.rcvbuf.free, 0xFFFF)
        tcb.rcv_wnd = window
        if synack:
            tcb.rcv_adv = seq_add(tcb.rcv_nxt, window)
        return window

    def duplicate(self, left: int, right: int) -> None:
        """Data [left, right) arrived that was already received: a D-SACK (RFC 2883) in the next ACK, sent now."""
        if self.tcb.sack_ok and left != right:
            self.dsack = (left, right)
            self.ack_now = True

    def sack_blocks(self, limit: int) -> tuple:
        """SACK blocks for the out-of-order runs, the most recently changed first (RFC 2018 4: the
        block of the latest segment, then the most recently reported, so that every block is reported
        again in the next ACKs; in sequence order, a fourth run above the lowest two was never
        reported and the sender's RACK took its segments for lost), after a D-SACK block for
        duplicate data when one is owed (RFC 2883 4, reported once)."""
        rcvbuf = self.rcvbuf
        dsack = self.dsack
        if not rcvbuf.ooo_bytes:
            if dsack is None:
                return ()
            self.stats.inc("tcp.dsack_sent")
            return (dsack,)
        base = self.tcb.rcv_nxt
        blocks = tuple((seq_add(base, s), seq_add(base, e)) for s, e in rcvbuf.recent(limit - (dsack is not None)))
        if dsack is not None:
            self.stats.inc("tcp.dsack_sent")
            blocks = (dsack,) + blocks
        return blocks

    def sack_backlog(self, limit: int) -> tuple:
        """SACK blocks for one more ACK ahead of the next, when more out-of-order runs changed since
        the last ACK than one ACK can report with ``limit`` blocks (its D-SACK block included): the
        oldest changes, most recent first; else (). A compressed ACK (one per poll round) would
        otherwise report only the latest runs, and the sender's RACK (RFC 8985 6.2) would take the
        segments of a run extended earlier in the round, never reported, for lost, as they were
        sent before segments it saw SACKed. Marks them reported."""
        rcvbuf = self.rcvbuf
        if not rcvbuf.ooo_bytes or not self.tcb.sack_ok:
            return ()
        changed = rcvbuf.changed_since(self.sack_tick)
        room = limit - (self.dsack is not None)
        if len(changed) <= room:
            return ()
        older = changed[:min(limit, len(changed) - room)]
        self.sack_tick = older[-1][2]
        base = self.tcb.rcv_nxt
        return tuple((seq_add(base, s), seq_add(base, e)) for s, e, _ in reversed(older))

    def ack_sent(self, now: float, data: bool) -> None:
        """A segment acknowledging RCV.NXT left (``data``: it carried data): nothing is owed any more."""
        delack = self.delack
        if data:
            delack.data_sent(now)
        delack.ack_sent(self.unacked > 0)
        self.ack_now = False
        self.ack_round = False
        self.wnd_update = False
        self.dsack = None
        self.unacked = 0
        if not data:  # a segment with data carries no SACK blocks (Output.emit): it reported no run
            self.sack_tick = self.rcvbuf.tick
        self.delack_due = None  # (the timer stays: lazy, see ``delack_fired``)

    def stop(self) -> None:
        """No more delayed ACKs (TIME-WAIT, CLOSED)."""
        self.delack_due = None
        self.delack_timer.cancel()

    def arm_delack(self, due: float) -> None:
        """The delayed ACK is due at ``due``: the timer fires then, or earlier and re-arms (lazy)."""
        self.delack_due = due
        timer = self.delack_timer
        if timer is UNARMED:
            timer = self.delack_timer = self._timers.timer(self._on_delack, self._owner)
        deadline = timer.deadline
        if deadline is None or deadline > due:
            timer.arm(due)

    def delack_fired(self, now: float) -> bool:
        """The delayed-ACK timer fired: True when an ACK is to go now.

        A timer left from an ACK that has since left finds no delayed ACK due
        (nothing to do) or one due later (re-armed for then).
        """
        due = self.delack_due
        if due is None:
            return False
        if due > now:
            self.delack_timer.arm(due)
            return False
        self.delack_due = None
        return self.delack_expired()

    def delack_expired(self) -> bool:
        """The delayed-ACK timer fired: True when an ACK is owed (the delay adapts, ``DelayedAck``)."""
        if not self.ack_owed():
            return False
        rtt = self.rtt
        self.delack.timer_expired(rtt.rto if rtt is not None else 1.0)
        return True

    def quickack(self, on: bool) -> bool:
        """TCP_QUICKACK: on enters quick-ACK mode (True when an ACK is owed now), off enters ping-pong mode."""
        delack = self.delack
        if not on:
            delack.pingpong = True
            return False
        delack.enter_quickack(self.rcvbuf.free, self.tcb.rcv_mss)
        if self.tcb.state in SYNCHRONIZED and self.unacked:
            self.ack_now = True
            return True
        return False

    def ack_owed(self) -> bool:
        """The delayed-ACK timer expired: is an ACK still owed?"""
        tcb = self.tcb
        return tcb.state in SYNCHRONIZED and (tcb.last_ack_sent != tcb.rcv_nxt or self.ack_now or self.ack_round
                                              or self.unacked > 0)
