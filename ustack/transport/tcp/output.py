"""Segment output: one segment built from the TCB and handed to the host; the direct replies.

``Output`` is shared by the connection's parts. Every segment carries what
the receiving side says at that moment: RCV.NXT as the acknowledgment,
the window the ``Receiver`` advertises, TSval/TS.Recent once timestamps are
on (RFC 7323 3.2), and SACK blocks on segments without data (RFC 2018 4).
Leaving with an ACK, a segment pays what the receiver owed (delayed ACK,
window update).

An established segment without options other than timestamps goes to the
host's fast emitter (``TcpHost.tcp_output_segment``, straight into a TX
slot); SYNs and RSTs (options), segments with SACK blocks, and segments
the fast emitter declines are built here (``write_segment``) and passed to
``TcpHost.tcp_output``.

Direct replies bypass the sender's output loop: ``send_ack`` (a pure ACK:
its sequence number is SND.MAX, see there), ``send_rst``, and the SYN and
SYN-ACK options (``emit_syn``). A SYN's options are packed straight into
bytes by ``syn_options`` (no TcpHeader object: connection setup pays for
every allocation) and the host writes the segment into a TX slot in C
(``TcpHost.tcp_output_options``); when it cannot (next hop unresolved,
IPv6), ``syn_segment`` builds the whole segment for ``tcp_output``. Both
equal ``TcpHeader(...).to_bytes`` (tests/tcp check it).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ustack._fastpath import emit_control
from ustack.transport.tcp.rtt import ts_clock
from ustack.wire.checksum import ones_sum, pseudo_header_sum
from ustack.wire.proto import PROTO_TCP
from ustack.wire.tcp import ACK, OPT_MSS, OPT_NOP, OPT_SACK_PERMITTED, OPT_TIMESTAMPS, OPT_WSCALE, RST, TcpHeader

if TYPE_CHECKING:
    from ustack.transport.tcp.receiver import Receiver
    from ustack.transport.tcp.tcb import Tcb


def write_segment(host, src: bytes, dst: bytes, hdr: TcpHeader, now: float, payload=b"") -> None:
    """Emit ``hdr`` + ``payload`` (checksum filled) into a new buffer and hand it to the host."""
    hl = hdr.header_len
    n = len(payload)
    seg = bytearray(hl + n)
    if n:
        seg[hl:] = payload
    hdr.emit(seg, 0, src, dst, n)
    host.tcp_output(src, dst, seg, now)


_HEADER = struct.Struct("!HHIIBBHHH")
_MSS = struct.Struct("!BBH")
_TS = struct.Struct("!BBII")
_TS_SACK_OK = bytes((OPT_SACK_PERMITTED, 2))  # SACK-permitted in the two bytes before the timestamps
_TS_NOPS = bytes((OPT_NOP, OPT_NOP))
_SACK_OK = bytes((OPT_NOP, OPT_NOP, OPT_SACK_PERMITTED, 2))


def syn_options(mss: int, wscale: int | None, sack_permitted: bool, ts: tuple | None) -> bytes:
    """The options of a SYN or SYN-ACK (RFC 9293 3.7.1; RFC 7323; RFC 2018), padded to 4 bytes.

    Order and padding as ``TcpHeader.options_bytes``: MSS; SACK-permitted
    and timestamps (or NOP NOP SACK-permitted); NOP window scale.
    """
    opts = _MSS.pack(OPT_MSS, 4, mss)
    if ts is not None:
        opts += (_TS_SACK_OK if sack_permitted else _TS_NOPS) + _TS.pack(OPT_TIMESTAMPS, 10, ts[0], ts[1])
    elif sack_permitted:
        opts += _SACK_OK
    if wscale is not None:
        opts += bytes((OPT_NOP, OPT_WSCALE, 3, wscale))
    return opts


def syn_segment(src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int, window: int,
                mss: int, wscale: int | None, sack_permitted: bool, ts: tuple | None,
                opts: bytes | None = None) -> bytearray:
    """A SYN or SYN-ACK with its options (``syn_options``, or ``opts`` made by it), checksum filled."""
    if opts is None:
        opts = syn_options(mss, wscale, sack_permitted, ts)
    hl = 20 + len(opts)
    seg = bytearray(hl)
    _HEADER.pack_into(seg, 0, sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, (hl // 4) << 4, flags & 0xFF,
                      window, 0, 0)
    seg[20:] = opts
    csum = ~ones_sum(seg, pseudo_header_sum(src, dst, PROTO_TCP, hl)) & 0xFFFF
    seg[16] = csum >> 8
    seg[17] = csum & 0xFF
    return seg


class Output:
    """The segment writer of one connection."""

    __slots__ = ("tcb", "receiver", "host", "stats", "fast", "local_addr", "local_port", "remote_addr",
                 "remote_port", "segs_out", "fast_sack", "ctl")

    def __init__(self, tcb: Tcb, receiver: Receiver, host, local: tuple, remote: tuple):
        self.tcb = tcb
        self.receiver = receiver
        self.host = host
        self.stats = host.stats
        # The flow's cached frame template (``FlowEmitter``) where the host offers one, else its emitter.
        emitter = getattr(host, "tcp_emitter", None)
        self.fast = emitter() if emitter is not None else host.tcp_output_segment
        # A pure ACK with SACK blocks from the template too (``FlowEmitter.sack``), where the emitter has one.
        self.fast_sack = getattr(self.fast, "sack", None)
        self.local_addr, self.local_port = local
        self.remote_addr, self.remote_port = remote
        self.segs_out = 0
        # The fast path's ``EstablishedPath`` (set by the connection when the fast path is on): a segment
        # without data is written in C (``_fastpath.emit_control``), as ``emit`` below writes it.
        self.ctl = None

    def emit(self, seq: int, flags: int, now: float, payload=b"") -> None:
        """An established segment (``flags`` include ACK): data, FIN, a probe or a pure ACK."""
        if not payload and self.ctl is not None and emit_control(self.ctl, self, seq, flags, now):
            return
        tcb = self.tcb
        rcv = self.receiver
        window = rcv.select_window()
        ts = (ts_clock(now, tcb.ts_offset), tcb.ts_recent) if tcb.ts_ok else None
        ack = tcb.rcv_nxt
        if tcb.sack_ok and not payload:
            limit = 3 if ts else 4
            while older := rcv.sack_backlog(limit):  # more changed runs than one ACK reports (RFC 2018 4)
                self.write_sack(seq, ack, flags, window, ts, older, now)
                self.segs_out += 1
                self.stats.inc("tcp.out_segs")
                self.stats.inc("tcp.sack_extra_acks")
            blocks = rcv.sack_blocks(limit)
        else:
            blocks = ()
        if blocks:
            self.write_sack(seq, ack, flags, window, ts, blocks, now)
        elif not self.fast(self.local_addr, self.remote_addr, self.local_port, self.remote_port, seq, ack, flags,
                           window, ts, payload, now):
            self.write(seq, ack, flags, window, ts, blocks, now, payload)
        self.segs_out += 1
        self.stats.inc("tcp.out_segs")
        tcb.last_ack_sent = ack
        rcv.ack_sent(now, bool(payload))

    def write_sack(self, seq: int, ack: int, flags: int, window: int, ts, blocks: tuple, now: float) -> None:
        """A segment without data carrying SACK ``blocks``: from the flow's template when it has one (the C
        path's ``_emit_blocks`` does the same), else built here."""
        fast_sack = self.fast_sack
        if fast_sack is None or not fast_sack(self.local_addr, self.remote_addr, self.local_port, self.remote_port,
                                              seq, ack, flags, window, ts, blocks, now):
            self.write(seq, ack, flags, window, ts, blocks, now)

    def write(self, seq: int, ack: int, flags: int, window: int, ts, blocks: tuple, now: float, payload=b"") -> None:
        """Build an established segment here and hand it to the host (what the fast emitter declined).

        The C fast path (``_fastpath``, _fp_ack.pxi) calls it too for a pure ACK.
        """
        write_segment(self.host, self.local_addr, self.remote_addr,
                      TcpHeader(self.local_port, self.remote_port, seq, ack, flags, window, 0, 0,
                                None, None, False, blocks, ts), now, payload)

    def emit_syn(self, flags: int, now: float, mss: int, wscale: int | None, sack_permitted: bool,
                 timestamps: bool) -> None:
        """Our SYN or SYN-ACK (sequence number ISS) with the options we offer (RFC 9293 3.7.1, RFC 7323, RFC 2018)."""
        tcb = self.tcb
        synack = bool(flags & ACK)
        window = self.receiver.syn_window(synack)
        ack = tcb.rcv_nxt if synack else 0
        ts = (ts_clock(now, tcb.ts_offset), tcb.ts_recent if synack else 0) if timestamps else None
        src, dst = self.local_addr, self.remote_addr
        opts = syn_options(mss, wscale, sack_permitted, ts)
        host = self.host
        # Straight into a TX slot when the host can (the next hop known); else built here for tcp_output.
        if not host.tcp_output_options(src, dst, self.local_port, self.remote_port, tcb.iss, ack, flags, window,
                                       opts, now):
            host.tcp_output(src, dst, syn_segment(src, dst, self.local_port, self.remote_port, tcb.iss, ack, flags,
                                                  window, mss, wscale, sack_permitted, ts, opts), now)
        self.segs_out += 1
        self.stats.inc("tcp.out_segs")
        if synack:
            tcb.last_ack_sent = ack
            self.receiver.ack_sent(now, False)

    def send_ack(self, now: float) -> None:
        """A pure ACK: <SEQ=SND.MAX><ACK=RCV.NXT><CTL=ACK>.

        A segment without data carries SND.MAX, the highest sequence number
        sent (the RFC's SND.NXT; BSD does the same), not our snd_nxt: after a
        timeout pulled snd_nxt back (go-back-N), an ACK numbered snd_nxt can
        fall left of the peer's RCV.NXT, and the peer finds it unacceptable
        and ignores its ACK field (RFC 9293 3.10.7.4 first step); two such
        peers can stall each other until a timeout.
        """
        self.emit(self.tcb.snd_max, ACK, now)

    def send_rst(self, now: float, seq: int, ack: int | None = None) -> None:
        """A reset: <SEQ=seq><CTL=RST>, or <SEQ=seq><ACK=ack><CTL=RST,ACK> when ``ack`` is given."""
        if ack is None:
            hdr = TcpHeader(self.local_port, self.remote_port, seq, 0, RST, 0)
        else:
            hdr = TcpHeader(self.local_port, self.remote_port, seq, ack, RST | ACK, 0)
        write_segment(self.host, self.local_addr, self.remote_addr, hdr, now)
        self.segs_out += 1
        stats = self.stats
        stats.inc("tcp.out_segs")
        stats.inc("tcp.out_rsts")
