"""Stack: assembles one interface's layers over a device and runs ``poll(now)``; nothing else.

The parts, bottom up (each gets only the collaborators it uses, never the Stack)::

    device -> Link (TX slots, batching, Ethernet framing)
           -> ArpLayer (neighbour cache)  ->  Ipv4Layer (an IpLayer: routing, output, fragments)
           -> ProtocolTable {TCP, UDP}    ->  IcmpLayer (echo, errors out, errors in -> the table)
           -> UdpLayer, TcpLayer (through transport.tcp.ip_host.TcpOverIp, its TcpHost on an IpLayer)
    and, when the stack has IPv6 (an IPv6 address among ``addr``, or ``ipv6={...}``), beside them:
           -> NdpLayer (neighbour cache, SLAAC, DAD) -> Ipv6Layer (the second IpLayer) -> Icmpv6Layer
    with the same ProtocolTable, UDP and TCP layers (the address length picks the IP layer).

``poll(now)`` is one run-to-completion round:

1. RX burst from the device (views into backend memory);
2. ``_fastpath.Classifier.classify`` validates and parses the whole burst
   in one call, one typed record (``_fastpath.Packet``) per frame, the
   records kept and refilled from round to round;
3. each record goes to its kind's handler (one dict lookup): UDP/TCP/ICMP/
   ARP/fragments to their layers, drops counted under their named reason;
4. the frames are released back to the device, but for those whose TCP
   payload a receive buffer keeps as a view (``ustack.rxhold``: one copy
   per byte on the socket path; at most ``rx_hold`` frames, by default
   half the device's RX frames up to 128); they go back once read;
5. due timers fire (ARP retries, reassembly timeouts, TCP timers);
6. everything emitted during the round is posted with one ``tx_commit``.

Exception barrier: an exception escaping the handling of one frame, one
timer or the TCP flush is a bug, never the sender's fault; it must not stop
the host (a ``serve`` loop, a Driver thread). ``poll`` counts it
(``stack.internal_error`` and ``stack.internal_error.<ExceptionType>``),
drops the frame (``drop.stack.internal_error``), keeps the last one in
``last_internal_error`` for debugging, and goes on with the round.

Martian sources (``Ipv4Layer.martian_source``: broadcast, multicast,
0/8, 127/8, our own address) are dropped before any transport, the
reassembler or ICMP sees the datagram.

It returns the next deadline (absolute time, or None when idle) so the
caller knows how long it may sleep. Nothing here reads a clock, sleeps,
blocks or starts a thread, and nothing here knows the adapters above
(``ustack.api``): time comes in as ``now``. Emission outside ``poll`` (an
application's send) is committed at once by the Link, or batched with
``tx_batch()``.
"""

from __future__ import annotations

import os
from typing import Optional

from ustack import _fastpath
from ustack._fastpath import (K_ARP, K_DROP, K_FRAG, K_ICMP, K_ICMP6, K_IP6, K_IP_OTHER, K_TCP, K_TCP6, K_UDP,
                              K_UDP6, REASONS)
from ustack.device import Device
from ustack.net.addr import Prefix, parse, to_str
from ustack.net.arp import ArpLayer
from ustack.net.icmp import IcmpLayer
from ustack.net.ip import ProtocolTable
from ustack.net.icmpv6 import Icmpv6Layer
from ustack.net.mld import MldListener
from ustack.net.ipv4 import Ipv4Layer
from ustack.net.ipv6 import Ipv6Layer
from ustack.net.link import Link
from ustack.net.loopback import LoopbackNeighbours
from ustack.net.route import Interface
from ustack.net.route6 import PREFERRED, Interface6
from ustack.rxhold import RxHold
from ustack.snapshot import snapshot
from ustack.stats import Stats
from ustack.timers import TimerHeap
from ustack.transport.tcp.config import TcpConfig
from ustack.transport.tcp.connection import Connection
from ustack.transport.tcp.ip_host import TcpOverIp
from ustack.transport.tcp.layer import TcpLayer
from ustack.transport.tcp.listener import Listener
from ustack.transport.tcp.output import syn_segment
from ustack.transport.tcp.synrecv import SynReceived
from ustack.transport.tcp.tcb import CLOSED, ESTABLISHED, FIN_WAIT_1, SYN_RECEIVED, TIME_WAIT
from ustack.transport.udp import UdpLayer
from ustack.wire.icmp import DEST_UNREACHABLE, PORT_UNREACHABLE, PROTOCOL_UNREACHABLE, TIME_EXCEEDED
from ustack.wire import icmpv6 as icmp6wire
from ustack.wire.proto import PROTO_TCP, PROTO_UDP
from ustack.wire.push import data_without_push


MIN_MTU = 68  # RFC 791: the datagram every IPv4 module must forward without fragmenting further
MAX_MTU = 65535  # the IPv4 total length field
MIN_MTU6 = 1280  # RFC 8200 section 5: the minimum link MTU of IPv6
MAX_TIMER_FAILURES = 64  # failing timers tolerated in one round before the rest wait for the next


class Stack:
    """A user-space IPv4 and/or IPv6 host on one device.

    ``addr`` is "A.B.C.D/N", or a list of addresses: at most one IPv4 "A.B.C.D/N"
    and any number of IPv6 "X::Y/N" (each runs duplicate address detection
    at start; a link-local address is generated, RFC 4862/7217). Without an
    IPv4 address the stack is IPv6-only: IPv4 and ARP frames are dropped as
    ``ipv4.disabled`` and IPv4 destinations are ENETUNREACH.
    ``gateway`` is an optional IPv4 default router inside the subnet,
    ``gateway6`` an IPv6 one (Router Advertisements may teach one too).
    ``ipv6`` (``Ipv6Layer`` keywords, ``ndp`` a dict of ``NdpLayer``'s) and
    ``icmpv6`` enable IPv6 even without an address of it (link-local only). ``arp``, ``ipv4``, ``icmp`` and ``udp`` are optional dicts of
    keywords for those layers (their caps and rates: ``ArpLayer``'s
    ``max_entries``, ``max_pending``, ``request_rate``...; ``IcmpLayer``'s
    ``max_buckets``; ``UdpLayer``'s ``datagram_overhead``...), documented
    with each layer. ``fastpath=False`` turns off TCP receive header
    prediction in C (default: on; the core reads no environment, the
    adapters map ``USTACK_FASTPATH=0`` onto it: ``ustack.api.environment``).

    ``loopback=True`` makes this a loopback interface (Linux's ``lo``) over
    a device that delivers its TX to its own RX (``ustack.backends.loopback``):
    ``addr`` is then "127.0.0.1/8" (and "::1/128" for IPv6), neighbours
    resolve to our own MAC at once (``ustack.net.loopback``: no ARP, no ND,
    no DAD), and sources in 127/8, ::1 and our own address are accepted
    instead of dropped as martians.

    Args:
        device: the Device to run on (``open_device(...)``, a ``PipeLink`` end, a decorator).
        addr: the address(es), as above.
        gateway, gateway6: default routers; mac: the interface's MAC (default: the device's);
            mtu: the IP MTU (default: the device's); burst: RX/TX burst size; tcp_config: the
            TCP defaults (``TcpConfig``); rx_hold: the RX frames receive buffers may hold;
            isn_secret: the key of ISNs, ports and IP IDs (default: random); announce: send a
            gratuitous ARP at start.

    Raises:
        ValueError: no address, more than one IPv4 address, an address that does not parse, an MTU
            outside 68..65535 (1280.. for IPv6-only) or larger than the device's TX slots.
    """

    def __init__(self, device: Device, addr: str, *, gateway: Optional[str] = None, mac: Optional[bytes] = None,
                 mtu: Optional[int] = None, burst: Optional[int] = None, arp_ttl: float = 60.0,
                 isn_secret: Optional[bytes] = None, announce: bool = True, tcp_config: Optional[TcpConfig] = None,
                 arp: Optional[dict] = None, ipv4: Optional[dict] = None, icmp: Optional[dict] = None,
                 udp: Optional[dict] = None, gateway6: Optional[str] = None, ipv6: Optional[dict] = None,
                 icmpv6: Optional[dict] = None, fastpath: bool = True, loopback: bool = False,
                 rx_hold: Optional[int] = None):
        caps = device.capabilities
        texts = [addr] if isinstance(addr, str) else list(addr)
        v4 = [a for a in texts if ":" not in a]
        v6 = [Prefix(a) for a in texts if ":" in a]
        if len(v4) > 1 or not (v4 or v6):
            raise ValueError("give one IPv4 address (A.B.C.D/N), IPv6 ones (X::Y/N), or both")
        addr = v4[0] if v4 else None  # None: an IPv6-only stack (IPv4 unnumbered, its frames dropped)
        self.device = device
        self.stats = stats = Stats()
        self.timers = timers = TimerHeap()
        self.iface = iface = Interface(mac or caps.mac, addr, mtu or caps.mtu, gateway)
        if addr is None and iface.mtu < MIN_MTU6:
            raise ValueError(f"MTU {iface.mtu} is below IPv6's minimum link MTU of {MIN_MTU6} (RFC 8200 section 5)")
        if not MIN_MTU <= iface.mtu <= MAX_MTU:
            raise ValueError(f"MTU {iface.mtu} is outside {MIN_MTU}..{MAX_MTU} (RFC 791: every host takes 68-byte "
                             "datagrams; an IPv4 datagram is at most 65,535 bytes)")
        if iface.mtu + 14 > caps.frame_size:
            raise ValueError(f"MTU {iface.mtu} does not fit the device's {caps.frame_size}-byte TX slots")
        self.isn_secret = secret = isn_secret if isn_secret is not None else os.urandom(16)
        self.link = link = Link(device, iface.mac, iface.mtu, burst or caps.max_burst, stats)
        self.loopback = loopback
        if loopback:
            self.arp = LoopbackNeighbours(iface.mac, stats, "arp.loopback")
        else:
            self.arp = ArpLayer(link, iface, timers, stats, **{"ttl": arp_ttl, **(arp or {})})
        self.ipv4 = ip = Ipv4Layer(link, iface, self.arp, timers, stats, **{"id_secret": secret, **(ipv4 or {})})
        ip.loopback = loopback
        if loopback and addr is not None:
            iface.own_prefix()  # Linux's lo: the whole 127.0.0.0/8 is local (ustack.net.route)
        self.protocols = ProtocolTable()
        self.icmp = icmp = IcmpLayer(ip, iface, self.protocols, stats, **(icmp or {}))
        self.udp = UdpLayer(ip, iface, stats, secret,
                            lambda dgram, src, now, link_group=False: icmp.send_error(
                                DEST_UNREACHABLE, PORT_UNREACHABLE, dgram, src, now, link_group=link_group),
                            **(udp or {}))
        self._tcp_host = TcpOverIp(ip, timers, stats, secret)
        self.tcp = self._tcp_host.tcp = TcpLayer(self._tcp_host, tcp_config, fastpath)
        ordered = bool(caps.extra.get("rx_ordered"))
        if rx_hold is None:
            ring = caps.extra.get("rx_frames") or 256
            # an ordered ring must not come round to a held unit: fewer than half of them, counted in age too
            rx_hold = max(1, min(128, (ring - 2) // 2 if ordered else ring // 2))
        # frames go back through the device's rx_release as it is then (AF_XDP swaps it on open and close)
        self.rx_hold = self.tcp.rx_hold = RxHold(lambda frames: device.rx_release(frames), rx_hold, stats, ordered)
        self._tcp_flows = self.tcp.flows.input if self.tcp.fastpath else None
        # With the fast path the poll loop runs in C (FlowTable.deliver_burst): established flows' segments
        # go straight to their connections, every other frame to _deliver, in order.
        self._tcp_burst = self.tcp.flows.deliver_burst if self.tcp.fastpath else None
        self.flush_held = False  # the last poll(hold=True) left the TCP flush to a later round
        if self.tcp.fastpath:  # a SYN to a listener in its common form: its whole round in C (_fp_syn.pxi)
            self.tcp.flows.syn = _fastpath.SynPath(self, self.tcp, SynReceived, syn_segment, Listener)
            # ... and the handshake's ACK to its SYN-RECEIVED record, the connection copied (_fp_hsk.pxi)
            self.tcp.flows.hsk = _fastpath.HandshakePath(self, self.tcp, SynReceived, Listener,
                                                         Connection._on_rtx_timer,
                                                         (SYN_RECEIVED, ESTABLISHED, FIN_WAIT_1, CLOSED, TIME_WAIT))
        if self.tcp.fastpath:  # echo requests from a source answered before: in that same C loop (_fp_echo.pxi)
            icmp.fast_echo = self.tcp.flows.echo = _fastpath.EchoResponder(self.link, stats.counters)
        self.protocols.register(PROTO_UDP, self.udp)
        self.protocols.register(PROTO_TCP, self._tcp_host)
        ip.redeliver = self._deliver
        ip.on_time_exceeded = lambda original, src, now: icmp.send_error(TIME_EXCEEDED, 1, original, src, now)
        self._handlers = {K_UDP: self.udp.input, K_TCP: self._tcp_input, K_ICMP: self._icmp_input,
                          K_ARP: self._arp_input, K_FRAG: ip.input_fragment, K_IP_OTHER: self._other_input,
                          K_UDP6: self._no_ipv6, K_TCP6: self._no_ipv6, K_ICMP6: self._no_ipv6, K_IP6: self._no_ipv6}
        self.iface6 = self.ipv6 = self.ndp = self.icmpv6 = self.mld = None
        if v6 or ipv6 is not None or icmpv6 is not None or gateway6 is not None:
            self._enable_ipv6(v6, gateway6, ipv6 or {}, icmpv6 or {})
        if addr is None:  # IPv6-only: IPv4 and ARP frames are counted and dropped, never answered
            self._handlers.update(dict.fromkeys((K_UDP, K_TCP, K_ICMP, K_ARP, K_FRAG, K_IP_OTHER), self._no_ipv4))
        # How classify judges UDP/TCP checksums: the device's verdict, or in software (accepting a
        # local sender's partial sum where the device says it may come unmarked); per frame, a
        # device's rx_status marks (AF_PACKET's TP_STATUS_CSUMNOTREADY/CSUM_VALID) are trusted.
        if caps.rx_checksum_verified:
            self._verify_l4 = _fastpath.CSUM_SKIP
        elif caps.rx_partial_checksum:
            self._verify_l4 = _fastpath.CSUM_LOCAL_PARTIAL
        else:
            self._verify_l4 = _fastpath.CSUM_VERIFY
        self._marked = hasattr(device, "rx_status")
        # Burst classify into records kept from round to round (none is refilled while held).
        self._classifier = _fastpath.Classifier(self.link.mac, self._verify_l4, stats.counters)
        self._ip_kinds = frozenset((K_UDP, K_TCP, K_ICMP, K_FRAG, K_IP_OTHER))
        self._ip6_kinds = frozenset((K_UDP6, K_TCP6, K_ICMP6, K_IP6))
        self._suspect_first = frozenset((0, 127, *range(224, 256)))  # see Ipv4Layer.martian_source
        self._suspect_src = frozenset((iface.addr, iface.broadcast))
        self._started = False
        self._announce = announce
        self.last_internal_error: Optional[BaseException] = None

    def _enable_ipv6(self, prefixes: list, gateway6: Optional[str], ipv6: dict, icmpv6: dict) -> None:
        iface = self.iface
        gw = parse(gateway6) if gateway6 else None
        if gw is not None and len(gw) != 16:
            raise ValueError("gateway6 must be an IPv6 address")
        self.iface6 = iface6 = Interface6(iface.mac, iface.mtu, gw)
        self.ipv6 = ip6 = Ipv6Layer(self.link, iface6, self.timers, self.stats, secret=self.isn_secret, **ipv6)
        if self.loopback:
            # RFC 4291 2.5.3: ::1 on the loopback interface, no DAD (RFC 4862 5.4), no link-local address
            ip6.loopback = True
            ip6.ndp = LoopbackNeighbours(iface.mac, self.stats, "ndp.loopback")
            for prefix in prefixes:
                iface6.add(prefix, "static", PREFERRED)
        else:
            for prefix in prefixes:
                ip6.ndp.add_static(prefix)
            ip6.ndp.progress = self._tcp_progress6  # TCP confirms next hops (RFC 4861 7.3.1)
        self.ndp = ip6.ndp
        self.icmpv6 = icmp6 = Icmpv6Layer(ip6, self.protocols, self.stats, **icmpv6)
        # RFC 3810: the groups the interface joins (solicited-node ones) reported to routers and snooping switches
        if not self.loopback:  # nobody to report groups to on a loopback link
            self.mld = icmp6.mld = MldListener(iface6, self.timers, self.stats, ip6.send_mld)
        ip6.redeliver = self._deliver
        ip6.send_error = icmp6.send_error
        udp = self.udp
        udp.ip6, udp.iface6 = ip6, iface6
        udp.unreachable6 = lambda dgram, src, now, link_group=False: icmp6.send_error(
            icmp6wire.DEST_UNREACHABLE, icmp6wire.PORT_UNREACHABLE, dgram, src, now, link_group=link_group)
        self._tcp_host.ip6 = ip6
        self._handlers.update({K_UDP6: udp.input6, K_TCP6: self._tcp_input6, K_ICMP6: icmp6.input,
                               K_IP6: ip6.input_ext})

    def _tcp_progress6(self, hop: bytes, now: float) -> dict:
        """The forward progress (SND.UNA) of the TCP connections whose IPv6 next hop is ``hop``."""
        iface6 = self.iface6

        def through(raddr: bytes) -> bool:
            if len(raddr) != 16:
                return False
            try:
                return iface6.next_hop(raddr, now) == hop
            except OSError:
                return False
        return self.tcp.forward_progress(through)

    # -- the poll loop ------------------------------------------------------
    def start(self, now: float) -> None:
        """Bring the interface up: gratuitous ARP (RFC 5227); IPv6: link-local address, DAD, router solicitation.

        Args:
            now: the present time on the stack's clock.
        """
        if not self._started:
            self._started = True
            if self._announce and self.iface.addr is not None:
                self.arp.announce()
            if self.ndp is not None:
                self.ndp.start(now)
            self.link.commit()

    def poll(self, now: float, hold: bool = False) -> Optional[float]:
        """One round: RX burst, deliver, timers, TX commit. Returns the next deadline.

        ``hold``: when the burst's last frame is a TCP segment of one of our connections in the middle of
        its sender's write (data, no PSH: ``_mid_write``), or this round received nothing while an earlier
        one held,
        leave the TCP flush (the applications' notifications, in-order ACKs, output after them) to a
        later round: ``flush_held`` says so and the round returns ``now``. The caller bounds the wait
        (``ustack.api.driver``); a round without ``hold`` always flushes.

        Args:
            now: the present time on the stack's clock (the core reads none).
            hold: allow the flush to be held, as above.

        Returns:
            The next deadline (absolute time on the same clock) at which ``poll`` must run again even
            without a new frame; ``None`` when nothing is scheduled; ``now`` when the flush was held.
            An internal error while handling a frame or timer is counted, never raised.
        """
        if not self._started:
            self.start(now)
        link = self.link
        opened = link.begin_round()
        frames = None
        held = False
        try:
            device = self.device
            frames = device.rx_burst(link.burst)
            if hold and not frames:
                held = self.flush_held
            if frames:
                self.stats.inc("eth.frames_received", len(frames))
                rxh = self.rx_hold
                at = rxh.at
                rxh.in_round = True
                tcp = self.tcp
                tcp.in_round = True  # in-order ACKs wait for the round's end (tcp.flush, after the reads)
                try:
                    records = self._classifier.classify(frames, device.rx_status if self._marked else None)
                    if hold:
                        held = self._mid_write(records[-1])
                    deliver = self._deliver
                    if self._tcp_burst is not None:
                        self._tcp_burst(frames, records, now, deliver, self._frame_failed, self.iface6, rxh)
                    else:
                        for frame, rec in zip(frames, records):
                            at(frame)
                            try:
                                deliver(frame, rec, now)
                            except Exception as e:  # the barrier: one frame's bug never stops the host
                                self._frame_failed(e)
                finally:
                    rxh.current = None
                    rxh.in_round = False
                    tcp.in_round = False
                    device.rx_release(rxh.unheld(frames))  # frames a receive buffer keeps go back later
            self._run_timers(now)
            mld = self.mld
            if mld is not None and mld.seen is not self.iface6.groups:
                try:
                    mld.sync(now)  # the joined groups changed (an address added, DAD done or failed)
                except Exception as e:
                    self._internal_error(e)
            self.flush_held = held
            if not held:
                try:
                    self.tcp.flush(now)
                except Exception as e:
                    self._internal_error(e)
            deadline = self.timers.next_deadline()
        finally:
            if opened:
                link.end_round()
        if held:
            return now  # the rest of the write is due: poll again at once
        t = self.device.poll_at(now)
        if t is not None and (deadline is None or t < deadline):
            deadline = t
        if frames and len(frames) >= link.burst:
            return now  # more may be waiting: poll again at once
        return deadline

    def _mid_write(self, rec) -> bool:
        """The push wait's question (``ustack.wire.push``) asked of the burst's last classify record: a TCP
        segment that passed classify (to our MAC, not a group's; checksums verified) with data and none of PSH,
        FIN, SYN, RST, of a connection of ours that takes data. Junk (another MAC, a bad checksum, a flow not
        ours, issue 25) never holds the round's flush."""
        kind = rec.kind
        if (kind != K_TCP and kind != K_TCP6) or rec.link_group or not data_without_push(rec):
            return False
        return self.tcp.receiving(rec.dst, rec.dst_port, rec.src, rec.src_port)

    def _run_timers(self, now: float) -> None:
        """Fire the due timers; one that raises is counted and the others still fire."""
        timers = self.timers
        for _ in range(MAX_TIMER_FAILURES):
            try:
                timers.run(now)
                return
            except Exception as e:  # the failed timer was popped before it fired; the rest run next turn
                self._internal_error(e)
        # A timer that re-arms itself for now and fails each time: leave the rest to the next round.

    def _frame_failed(self, exc: Exception) -> None:
        self._internal_error(exc)
        self.stats.drop("stack.internal_error")

    def _internal_error(self, exc: Exception) -> None:
        stats = self.stats
        stats.inc("stack.internal_error")
        stats.inc("stack.internal_error." + type(exc).__name__)
        self.last_internal_error = exc

    def _deliver(self, frame: memoryview, pkt, now: float) -> None:
        """One classify record (``_fastpath.Packet``) to its kind's handler."""
        kind = pkt.kind
        if kind == K_DROP:
            self.stats.drop(REASONS[pkt.reason])
            return
        if kind in self._ip6_kinds:
            ip6 = self.ipv6
            if ip6 is not None:
                src, dst = pkt.src, pkt.dst
                ours = self.iface6.valid_set
                # Cheap screen first (first octet 0 or 0xff, our own address); then the verdict.
                if src[0] == 0 or src[0] == 0xFF or src in ours:  # ::, ::1 and ::ffff:0:0/96 start with 0
                    martian = ip6.martian_source(src, pkt.proto)
                    if martian is not None:
                        self.stats.drop(martian)
                        return
                if dst not in ours and not ip6.accepts(frame, dst):
                    self.stats.drop("ipv6.not_for_us")
                    return
        elif kind in self._ip_kinds:
            src = pkt.src
            # Cheap screen first (first octet 0, 127 or >= 224, our address, our broadcast); then the verdict.
            if src[0] in self._suspect_first or src in self._suspect_src:
                martian = self.ipv4.martian_source(src, pkt.proto, pkt.dst_port)
                if martian is not None:
                    self.stats.drop(martian)
                    return
        self._handlers[kind](frame, pkt, now)

    def _tcp_input(self, frame: memoryview, pkt, now: float) -> None:
        if self._tcp_flows is not None and self._tcp_flows(pkt, frame, now):
            return  # a connection's segment, demuxed in C (its local address is ours)
        iface = self.iface
        if pkt.dst != iface.addr and not iface.owns(pkt.dst):
            self.stats.drop("ipv4.not_for_us" if not iface.is_local_dest(pkt.dst) else "tcp.broadcast")
            return
        # classify verified the checksum and parsed the header and options: the record is the header
        off = pkt.payload_off
        self.tcp.segment_arrives(pkt.src, pkt.dst, pkt, frame[off:off + pkt.payload_len], now)

    def _tcp_input6(self, frame: memoryview, pkt, now: float) -> None:
        if self._tcp_flows is not None and self._tcp_flows(pkt, frame, now):
            return  # a connection's segment, demuxed in C (its local address is ours, unicast)
        if pkt.dst[0] == 0xFF:
            self.stats.drop("tcp.multicast")
            return
        off = pkt.payload_off
        self.tcp.segment_arrives(pkt.src, pkt.dst, pkt, frame[off:off + pkt.payload_len], now)

    def _no_ipv6(self, frame: memoryview, pkt, now: float) -> None:
        self.stats.drop("ipv6.disabled")

    def _no_ipv4(self, frame: memoryview, pkt, now: float) -> None:
        self.stats.drop("ipv4.disabled")

    def _icmp_input(self, frame: memoryview, pkt, now: float) -> None:
        if self.iface.is_local_dest(pkt.dst):
            self.icmp.input(frame, pkt, now)
        else:
            self.stats.drop("ipv4.not_for_us")

    def _arp_input(self, frame: memoryview, pkt, now: float) -> None:
        self.arp.input(frame, pkt.l3, now)

    def _other_input(self, frame: memoryview, pkt, now: float) -> None:
        self.stats.drop("ipv4.unknown_protocol")
        if self.iface.owns(pkt.dst):
            l3 = pkt.l3
            self.icmp.send_error(DEST_UNREACHABLE, PROTOCOL_UNREACHABLE, frame[l3:l3 + pkt.total_len], pkt.src, now,
                                 link_group=pkt.link_group)

    # -- for applications' batches and the end -----------------------------------
    def tx_batch(self):
        """Batch the frames emitted inside the block into one tx_commit (as poll does)."""
        return self.link.batch()

    def flush(self) -> None:
        """Post what the current TX batch holds now (one ``tx_commit``), outside a poll round."""
        self.link.commit()

    def snapshot(self, now: float) -> dict:
        """The stack's state at ``now`` as plain data (``ustack.snapshot``): what ``ustack stats`` shows.

        Args:
            now: the present time on the stack's clock.

        Returns:
            A dict of plain data (counters, drops by reason, connections with their TCP_INFO, caches).
        """
        return snapshot(self, now)

    @property
    def addr(self) -> str:
        """The interface address as text, such as '198.18.0.2' (an IPv6-only stack gives its first configured one)."""
        if self.iface.addr is None:
            return to_str(next(iter(self.iface6.addresses.values())).prefix.addr)
        return to_str(self.iface.addr)

    def addrs(self) -> list[str]:
        """Every address as text with its prefix length, IPv6 ones with their state when not preferred.

        Returns:
            A list such as ``['198.18.0.2/24', 'fd00::2/64', 'fe80::.../64 (tentative)']``.
        """
        out = [str(self.iface)] if self.iface.addr is not None else []
        if self.iface6 is not None:
            for a in self.iface6.addresses.values():
                out.append(str(a.prefix) + ("" if a.state == "preferred" else f" ({a.state})"))
        return out

    def close(self) -> None:
        """Post what is still batched for transmission. The device is the caller's to close."""
        self.link.commit()
