"""Stack: one device, one interface, the layers above it, and the poll loop.

``poll(now)`` is one run-to-completion round:

1. RX burst from the device (views into backend memory);
2. ``_fastpath.classify`` validates and parses the whole burst in one call;
3. each record is delivered: UDP/TCP/ICMP/ARP/fragments to their layers,
   drops counted under their named reason;
4. the frames are released back to the device;
5. due timers fire (ARP retries, reassembly timeouts, TCP timers);
6. everything emitted during the round is posted with one ``tx_commit``.

It returns the next deadline (absolute time, or None when idle) so the
caller knows how long it may sleep. Nothing here reads a clock, sleeps,
blocks or starts a thread: adapters (ustack.api.driver, ustack.api.socket) do that.

Emission outside ``poll`` (an application's ``sendto``) is committed at once
by ``flush()``, so a send does not wait for the next round.
"""

from __future__ import annotations

import contextlib
import errno
import os
from typing import Optional

from ustack import _fastpath
from ustack.device import Device
from ustack.net.arp import ArpLayer
from ustack.net.icmp import IcmpLayer
from ustack.net.ipv4 import Ipv4Layer
from ustack.net.route import Interface
from ustack.stats import Stats
from ustack.transport.tcp.config import TcpConfig
from ustack.transport.tcp.layer import TcpLayer
from ustack.timers import TimerHeap
from ustack.wire.icmp import error_to_oserror
from ustack.transport.udp import UdpLayer

K_DROP, K_ARP, K_UDP, K_TCP, K_ICMP, K_FRAG, K_IP_OTHER = range(7)
REASONS = _fastpath.REASONS


class Stack:
    """A user-space IPv4 host on one device.

    ``addr`` is "A.B.C.D/N"; ``gateway`` an optional default router inside
    the subnet. ``clock`` is only kept for the adapters (blocking sockets,
    the driver thread); the core is driven through ``poll(now)``.
    """

    def __init__(self, device: Device, addr: str, *, gateway: Optional[str] = None, mac: Optional[bytes] = None,
                 mtu: Optional[int] = None, clock=None, burst: Optional[int] = None, arp_ttl: float = 60.0,
                 isn_secret: Optional[bytes] = None, announce: bool = True, tcp_config: Optional[TcpConfig] = None):
        caps = device.capabilities
        self.device = device
        self.clock = clock
        self.stats = Stats()
        self.timers = TimerHeap()
        self.iface = Interface(mac or caps.mac, addr, mtu or caps.mtu, gateway)
        if self.iface.mtu + 14 > caps.frame_size:
            raise ValueError(f"MTU {self.iface.mtu} does not fit the device's {caps.frame_size}-byte TX slots")
        self.burst = burst or caps.max_burst
        self.isn_secret = isn_secret if isn_secret is not None else os.urandom(16)
        self.now = 0.0
        self.arp = ArpLayer(self, ttl=arp_ttl)
        self.ipv4 = Ipv4Layer(self)
        self.icmp = IcmpLayer(self)
        self.udp = UdpLayer(self)
        self.tcp = TcpLayer(self, tcp_config)
        self._tx_slots: list = []
        self._tx_lens: list[int] = []
        self._in_poll = False
        self._verify_l4 = not caps.rx_checksum_verified
        self._mac = self.iface.mac
        self._started = False
        self._announce = announce
        self.driver = None  # set by ustack.api.driver.Driver

    # -- TX slots -----------------------------------------------------------
    def tx_slot(self) -> Optional[memoryview]:
        """A writable TX slot for one frame, or None (counted) if the ring is full."""
        used = len(self._tx_lens)
        slots = self._tx_slots
        if used >= len(slots):
            if slots:
                self._commit()
            # In a poll round or a tx_batch, reserve a burst; a lone send reserves one slot.
            slots = self._tx_slots = self.device.tx_reserve(self.burst if self._in_poll else 1)
            used = 0
            if not slots:
                self.stats.drop("tx.ring_full")
                return None
        return slots[used]

    def tx_done(self, length: int) -> None:
        """The slot handed out by tx_slot() now holds a frame of ``length`` bytes."""
        self._tx_lens.append(length)
        self.stats.inc("eth.frames_sent")
        if not self._in_poll:
            self._commit()

    def _commit(self) -> None:
        lens = self._tx_lens
        if self._tx_slots or lens:
            self._tx_slots = []
            self._tx_lens = []
            self.device.tx_commit(lens)

    def flush(self) -> None:
        self._commit()

    @contextlib.contextmanager
    def tx_batch(self):
        """Batch the frames emitted inside the block into one tx_commit (as poll does)."""
        if self._in_poll:
            yield
            return
        self._in_poll = True
        try:
            yield
        finally:
            self._in_poll = False
            self._commit()

    # -- the poll loop ------------------------------------------------------
    def start(self, now: float) -> None:
        """Bring the interface up: gratuitous ARP (RFC 5227)."""
        self.now = now
        if not self._started:
            self._started = True
            if self._announce:
                self.arp.announce()
            self._commit()

    def poll(self, now: float) -> Optional[float]:
        """One round: RX burst, deliver, timers, TX commit. Returns the next deadline."""
        if not self._started:
            self.start(now)
        self.now = now
        self._in_poll = True
        try:
            device = self.device
            frames = device.rx_burst(self.burst)
            if frames:
                self.stats.inc("eth.frames_received", len(frames))
                try:
                    records = _fastpath.classify(frames, self._mac, self._verify_l4)
                    deliver = self.deliver
                    for frame, rec in zip(frames, records):
                        deliver(frame, rec, now)
                finally:
                    device.rx_release(frames)
            deadline = self.timers.run(now)
            self.tcp.flush(now)
            deadline = self.timers.next_deadline()
        finally:
            self._in_poll = False
            self._commit()
        poll_at = getattr(self.device, "poll_at", None)
        if poll_at is not None:
            t = poll_at()
            if t is not None and (deadline is None or t < deadline):
                deadline = t
        if frames and len(frames) >= self.burst:
            return now  # more may be waiting: poll again at once
        return deadline

    def deliver(self, frame: memoryview, rec: tuple, now: float, reassembled: bool = False) -> None:
        kind = rec[0]
        if kind == K_UDP:
            self.udp.input(frame, rec, now)
        elif kind == K_TCP:
            dst = rec[7]
            if dst != self.iface.addr:
                self.stats.drop("ipv4.not_for_us" if not self.iface.is_local_dest(dst) else "tcp.broadcast")
                return
            l3, tot, l4 = rec[2], rec[4], rec[8]
            # classify verified the checksum (or the device did): the layer need not redo it
            self.tcp.input(rec[6].to_bytes(4, "big"), self.iface.addr_bytes, frame[l4:l3 + tot], now, checksum_ok=True)
        elif kind == K_ICMP:
            if self.iface.is_local_dest(rec[7]):
                self.icmp.input(frame, rec, now)
            else:
                self.stats.drop("ipv4.not_for_us")
        elif kind == K_ARP:
            self.arp.input(frame, rec[2], now)
        elif kind == K_FRAG:
            self.ipv4.input_fragment(frame, rec, now)
        elif kind == K_DROP:
            self.stats.drop(REASONS[rec[1]])
        else:  # K_IP_OTHER
            self.stats.drop("ipv4.unknown_protocol")
            if rec[7] == self.iface.addr:
                l3, tot = rec[2], rec[4]
                self.icmp.send_error(3, 2, frame[l3:l3 + tot], rec[6])  # protocol unreachable

    # -- errors from below ----------------------------------------------------
    def transport_error(self, proto: int, laddr: int, lport: int, raddr: int, rport: int, itype: int, code: int,
                        extra: int, quoted_seq: Optional[int] = None) -> None:
        """An ICMP error quoting one of our datagrams: surface it on the endpoint (RFC 1122 4.1.3.3)."""
        err = error_to_oserror(itype, code)
        if proto == 17:
            if not self.udp.icmp_error(laddr, lport, raddr, rport, err):
                self.stats.drop("icmp.error_no_socket")
        elif proto == 6:
            self.tcp.icmp_error(laddr, lport, raddr, rport, itype, code, extra, now=self.now, quoted_seq=quoted_seq)

    # -- TcpHost: what the TCP layer needs from the stack ----------------------
    def tcp_output(self, src: bytes, dst: bytes, segment) -> None:
        """A whole TCP segment (checksum filled) to IPv4; DF set for path-MTU discovery (RFC 1191)."""
        try:
            self.ipv4.output(int.from_bytes(dst, "big"), 6, segment, src=int.from_bytes(src, "big"),
                             df=len(segment) + 20 <= self.iface.mtu)
        except OSError as e:
            # No route: the segment is lost like any other; TCP's timers recover or give up.
            self.stats.drop("tcp.output_" + (errno.errorcode.get(e.errno, "error").lower()))

    def tcp_output_segment(self, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
                           window: int, ts, payload) -> bool:
        """Fast path for established flows: emit the segment straight into a TX slot (one C call).

        ``ts`` is (TSval, TSecr) or None. Returns False, having sent nothing,
        when the general path is needed (next hop not in the ARP cache, the
        packet would not fit the MTU, or no TX slot): the caller then builds the
        segment and uses ``tcp_output``.
        """
        iface = self.iface
        n = 20 + (32 if ts is not None else 20) + len(payload)
        if n > iface.mtu:
            return False
        d = int.from_bytes(dst, "big")
        try:
            hop = iface.next_hop(d)
        except OSError:
            return False
        mac = self.arp.lookup(hop, self.now)
        if mac is None:
            return False
        slot = self.tx_slot()
        if slot is None:
            return False
        tmpl = self.ipv4.template(mac, int.from_bytes(src, "big"), d, 6, self.ipv4.ttl)
        if ts is None:
            length = _fastpath.emit_tcp(slot, tmpl, self.ipv4.next_ident(), sport, dport, seq, ack, flags, window,
                                        None, 0, payload)
        else:
            length = _fastpath.emit_tcp(slot, tmpl, self.ipv4.next_ident(), sport, dport, seq, ack, flags, window,
                                        ts[0], ts[1], payload)
        self.tx_done(length)
        self.stats.inc("ipv4.packets_sent")
        return True

    def route_mtu(self, dst: bytes) -> int:
        return self.iface.mtu

    def pick_source(self, dst: bytes) -> bytes:
        return self.iface.addr_bytes

    # -- conveniences ---------------------------------------------------------
    @property
    def addr(self) -> str:
        from ustack.net.route import ip_str

        return ip_str(self.iface.addr)

    def socket(self, family: int = 2, type: int = 1, proto: int = 0):
        """A stdlib-shaped socket on this stack (needs a clock: see ustack.api.socket)."""
        from ustack.api.socket import socket as usocket

        return usocket(self, family, type, proto)

    def close(self) -> None:
        self.flush()
