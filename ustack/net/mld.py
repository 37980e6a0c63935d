"""Multicast Listener Discovery version 2, the listener (host) side (RFC 3810).

A node joins the all-nodes group and the solicited-node group of each of
its addresses (RFC 4861 7.2.1), and joining a group on a link means telling
the link's multicast routers and MLD-snooping switches so: without a report,
a snooping switch may never forward the Neighbor Solicitations aimed at our
solicited-node groups. This module keeps the groups of the interface
(``Interface6.groups``) announced:

- a change of the joined set is reported at once with State Change Records
  (CHANGE_TO_EXCLUDE_MODE with no sources for a join, CHANGE_TO_INCLUDE_MODE
  with no sources for a leave, RFC 3810 6.1) and repeated ``robustness - 1``
  more times at random moments within ``unsolicited_interval`` (9.11, 9.2);
- a Query (general, or for one group) is answered with Current State
  Records (MODE_IS_EXCLUDE) after a random delay within its Maximum Response
  Delay (6.2, 6.3); a query not sent from a link-local address with hop limit
  1 is dropped (5.1.14; the Router Alert rule of 5.1.14 is the IPv6 layer's);
- the all-nodes group ff02::1 is never reported (6);
- every report goes to ff02::16 (all MLDv2-capable routers) with hop limit 1
  and a Hop-by-Hop Router Alert option (RFC 2711, 5.2.15), from our
  link-local address, or from :: while there is none yet (5.2.13).

MLDv1 compatibility (RFC 3810 8.2.1, RFC 2710): a Query of exactly 24
octets is an MLDv1 query (one of 25-27 octets is dropped as
``mld.bad_query_length``, 8.1). It puts the interface in MLDv1 mode for the
Older Version Querier Present Timeout (9.13: robustness x ``query_interval``
+ ``query_response_interval``, 260 s by default), re-armed by each further
MLDv1 query; entering and leaving the mode cancel the pending answers and
retransmissions. In MLDv1 mode only MLDv1 is spoken: each group queried is
answered by its own Report (type 131, to the group) after a random delay
within the query's Maximum Response Delay (a running delay is only ever
shortened, RFC 2710 4), another listener's Report for the group cancels ours
(report suppression); a join is reported with MLDv1 Reports and a leave with
a Done (type 132, to ff02::2), repeated as the MLDv2 change records would be;
an MLDv2 query heard meanwhile is answered in MLDv1 too. When the timeout
passes, MLDv2 again. Source-specific filtering is not used (we never join
with a source list).
"""

from __future__ import annotations

import random
import struct
from typing import Callable, Optional

from ustack.net.route6 import ALL_NODES
from ustack.stats import Stats
from ustack.timers import TimerHeap
from ustack.wire.icmpv6 import checksum_of

QUERY = 130
REPORT_V1 = 131
DONE_V1 = 132
REPORT_V2 = 143
ALL_MLDV2_ROUTERS = bytes.fromhex("ff020000000000000000000000000016")
ALL_ROUTERS = bytes.fromhex("ff020000000000000000000000000002")
V1_QUERY_LEN, V2_QUERY_MIN_LEN = 24, 28  # RFC 3810 8.1: how the two versions' queries are told apart
ANY6 = bytes(16)
MODE_IS_EXCLUDE, CHANGE_TO_INCLUDE, CHANGE_TO_EXCLUDE = 2, 3, 4
# Hop-by-Hop header before the report: next header ICMPv6, length 0 (8 bytes), Router Alert (type 5,
# length 2, value 0: MLD) and a 2-byte PadN.
ROUTER_ALERT_HBH = bytes((58, 0, 5, 2, 0, 0, 1, 0))
MAX_RECORDS = 80  # records per report: 8 + 80 * 20 bytes stays inside the 1280-byte minimum MTU


def report(records: list[tuple[int, bytes]], src: bytes) -> bytes:
    """An MLDv2 Report (RFC 3810 5.2) with ``records`` of (type, group), checksum filled, no sources."""
    body = bytearray(struct.pack("!BBHHH", REPORT_V2, 0, 0, 0, len(records)))
    for rtype, group in records:
        body += struct.pack("!BBH", rtype, 0, 0) + group
    struct.pack_into("!H", body, 2, checksum_of(body, src, ALL_MLDV2_ROUTERS))
    return bytes(body)


def v1_message(mtype: int, group: bytes, src: bytes, dst: bytes) -> bytes:
    """An MLDv1 Report or Done (RFC 2710 3) for ``group``, checksum filled."""
    body = bytearray(struct.pack("!BBHHH", mtype, 0, 0, 0, 0) + group)
    struct.pack_into("!H", body, 2, checksum_of(body, src, dst))
    return bytes(body)


def max_response_delay(code: int) -> float:
    """Seconds from a Query's Maximum Response Code (RFC 3810 5.1.3: exponential form from 32768)."""
    if code < 32768:
        return code / 1000.0
    mant, exp = code & 0x0FFF, (code >> 12) & 0x7
    return ((mant | 0x1000) << (exp + 3)) / 1000.0


class MldListener:
    """The MLDv2 listener of one IPv6 interface.

    ``send(src, dst, packet)`` puts ``packet`` (Hop-by-Hop header + report)
    on the wire to ``dst`` with next header 0 and hop limit 1.
    ``sync(now)`` compares the interface's groups with what was announced
    (the Stack calls it when the set changes); ``query(msg, src, hop_limit,
    now)`` takes a Multicast Listener Query.
    """

    def __init__(self, iface, timers: TimerHeap, stats: Stats, send: Callable[[bytes, bytes, bytes], None], *,
                 robustness: int = 2, unsolicited_interval: float = 1.0, query_interval: float = 125.0,
                 query_response_interval: float = 10.0, rng: Optional[random.Random] = None):
        self.iface = iface
        self.stats = stats
        self.send = send
        self.robustness = robustness
        self.unsolicited_interval = unsolicited_interval
        # RFC 3810 9.13: how long an MLDv1 querier is assumed present after its last query
        self.older_querier_timeout = robustness * query_interval + query_response_interval
        self.rng = rng or random.Random()
        self.v1_until: Optional[float] = None  # MLDv1 compatibility mode until then (RFC 3810 8.2.1)
        self._v1_due: dict[bytes, float] = {}  # group -> when its MLDv1 answer is due
        self._v1_timer = timers.timer(self._v1_answer)
        self._v1_end_timer = timers.timer(self._leave_v1)
        self.announced: frozenset = frozenset()  # groups we have reported joining
        self.seen = None  # the interface's groups object at the last sync
        self._pending: dict[bytes, tuple[int, int]] = {}  # group -> (change record type, retransmissions left)
        self._change_timer = timers.timer(self._retransmit)
        self._answer_timer = timers.timer(self._answer)
        self._answer_groups: Optional[set] = None  # None: a general query's answer is due

    def _reportable(self) -> frozenset:
        return frozenset(g for g in self.iface.groups if g != ALL_NODES)

    def _source(self) -> bytes:
        return self.iface.link_local or ANY6

    @property
    def v1_mode(self) -> bool:
        return self.v1_until is not None

    def _emit(self, records: list[tuple[int, bytes]]) -> None:
        src = self._source()
        if self.v1_until is not None:  # MLDv1 mode: a Report per group joined or present, a Done per group left
            for rtype, group in records:
                if rtype == CHANGE_TO_INCLUDE:
                    self.send(src, ALL_ROUTERS, ROUTER_ALERT_HBH + v1_message(DONE_V1, group, src, ALL_ROUTERS))
                    self.stats.inc("mld.v1_dones_sent")
                else:
                    self.send(src, group, ROUTER_ALERT_HBH + v1_message(REPORT_V1, group, src, group))
                    self.stats.inc("mld.v1_reports_sent")
            return
        for i in range(0, len(records), MAX_RECORDS):
            self.send(src, ALL_MLDV2_ROUTERS, ROUTER_ALERT_HBH + report(records[i:i + MAX_RECORDS], src))
            self.stats.inc("mld.reports_sent")

    # -- state changes (RFC 3810 6.1) ------------------------------------------------------
    def sync(self, now: float) -> None:
        """Report what joined or left since the last sync."""
        self.seen = self.iface.groups
        now_set = self._reportable()
        joined, left = now_set - self.announced, self.announced - now_set
        if not joined and not left:
            return
        self.announced = now_set
        for g in joined:
            self._pending[g] = (CHANGE_TO_EXCLUDE, self.robustness - 1)
        for g in left:
            self._pending[g] = (CHANGE_TO_INCLUDE, self.robustness - 1)
        self._emit([(CHANGE_TO_EXCLUDE, g) for g in sorted(joined)] + [(CHANGE_TO_INCLUDE, g) for g in sorted(left)])
        self._arm_change(now)

    def _arm_change(self, now: float) -> None:
        if any(left > 0 for _, left in self._pending.values()):
            self._change_timer.arm(now + self.rng.uniform(0, self.unsolicited_interval))
        else:
            self._pending.clear()
            self._change_timer.cancel()

    def _retransmit(self, now: float) -> None:
        records = []
        for g, (rtype, left) in list(self._pending.items()):
            if left > 0:
                records.append((rtype, g))
                self._pending[g] = (rtype, left - 1)
        if records:
            self._emit(records)
        self._arm_change(now)

    # -- queries (RFC 3810 6.2, 6.3) ----------------------------------------------------------
    def query(self, body: bytes, src: bytes, hop_limit: int, now: float) -> None:
        """A Multicast Listener Query: ``body`` is the ICMPv6 message (checksum already verified)."""
        if len(body) < 24:
            self.stats.drop("mld.short_query")
            return
        if hop_limit != 1 or src[:2] != b"\xfe\x80":
            self.stats.drop("mld.bad_query_source")  # RFC 3810 5.1.14: link-local source, hop limit 1
            return
        code = struct.unpack_from("!H", body, 4)[0]
        group = bytes(body[8:24])
        if len(body) == V1_QUERY_LEN:
            self._v1_query(group, code / 1000.0, now)  # RFC 2710 3.4: milliseconds, no exponential form
            return
        if len(body) < V2_QUERY_MIN_LEN:
            self.stats.drop("mld.bad_query_length")  # RFC 3810 8.1: neither version's query
            return
        self.stats.inc("mld.queries_received")
        if self.v1_until is not None:
            self._v1_answer_query(group, max_response_delay(code), now)  # MLDv1 mode: only MLDv1 is spoken
            return
        delay = self.rng.uniform(0, max_response_delay(code))
        due = self._answer_timer.deadline
        if group == ANY6:
            self._answer_groups = None  # a general query: every group
        elif group not in self.announced:
            return  # a query for a group we are not in
        elif self._answer_timer.deadline is not None and self._answer_groups is None:
            pass  # a general answer is already due and covers it
        else:
            self._answer_groups = (self._answer_groups or set()) | {group}
        if due is None or now + delay < due:
            self._answer_timer.arm(now + delay)

    def _answer(self, now: float) -> None:
        groups = self._reportable() if self._answer_groups is None else self._answer_groups & self._reportable()
        self._answer_groups = None
        if groups:
            self._emit([(MODE_IS_EXCLUDE, g) for g in sorted(groups)])

    # -- MLDv1 compatibility (RFC 3810 8.2.1, RFC 2710 4) -------------------------------------------
    def _v1_query(self, group: bytes, max_delay: float, now: float) -> None:
        stats = self.stats
        stats.inc("mld.v1_queries_received")
        if self.v1_until is None:
            stats.inc("mld.v1_mode_entered")
            self._cancel_pending()
        self.v1_until = now + self.older_querier_timeout
        self._v1_end_timer.arm(self.v1_until)
        self._v1_answer_query(group, max_delay, now)

    def _v1_answer_query(self, group: bytes, max_delay: float, now: float) -> None:
        reportable = self._reportable()
        groups = reportable if group == ANY6 else reportable & {group}
        due = self._v1_due
        for g in groups:
            t = now + self.rng.uniform(0, max_delay)
            if g not in due or t < due[g]:  # RFC 2710 4: a running delay is only ever shortened
                due[g] = t
        if due:
            self._v1_timer.arm(min(due.values()))

    def _v1_answer(self, now: float) -> None:
        due = self._v1_due
        ready = sorted(g for g, t in due.items() if t <= now)
        for g in ready:
            del due[g]
        ready = [g for g in ready if g in self._reportable()]
        if ready:
            self._emit([(MODE_IS_EXCLUDE, g) for g in ready])
        if due:
            self._v1_timer.arm(min(due.values()))

    def report_heard(self, body: bytes, now: float) -> None:
        """Another listener's MLDv1 Report: in MLDv1 mode, ours for the same group is not needed (RFC 2710 4)."""
        if self.v1_until is None or len(body) < 24:
            self.stats.inc("mld.other_reports_ignored")  # an MLDv2 host ignores other listeners (RFC 3810 6)
            return
        group = bytes(body[8:24])
        if self._v1_due.pop(group, None) is not None:
            self.stats.inc("mld.v1_reports_suppressed")
            if not self._v1_due:
                self._v1_timer.cancel()

    def _leave_v1(self, now: float) -> None:
        """The Older Version Querier Present timer expired: back to MLDv2 (RFC 3810 8.2.1)."""
        self.v1_until = None
        self._cancel_pending()
        self.stats.inc("mld.v1_mode_left")

    def _cancel_pending(self) -> None:
        """RFC 3810 8.2.1: a change of compatibility mode cancels pending answers and retransmissions."""
        self._pending.clear()
        self._change_timer.cancel()
        self._answer_timer.cancel()
        self._answer_groups = None
        self._v1_due.clear()
        self._v1_timer.cancel()
