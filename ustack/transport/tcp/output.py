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
SYN-ACK options (``emit_syn``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ustack.transport.tcp.rtt import ts_clock
from ustack.wire.tcp import ACK, RST, TcpHeader

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


class Output:
    """The segment writer of one connection."""

    __slots__ = ("tcb", "receiver", "host", "stats", "fast", "local_addr", "local_port", "remote_addr",
                 "remote_port", "segs_out")

    def __init__(self, tcb: Tcb, receiver: Receiver, host, local: tuple, remote: tuple):
        self.tcb = tcb
        self.receiver = receiver
        self.host = host
        self.stats = host.stats
        self.fast = host.tcp_output_segment
        self.local_addr, self.local_port = local
        self.remote_addr, self.remote_port = remote
        self.segs_out = 0

    def emit(self, seq: int, flags: int, now: float, payload=b"") -> None:
        """An established segment (``flags`` include ACK): data, FIN, a probe or a pure ACK."""
        tcb = self.tcb
        rcv = self.receiver
        window = rcv.select_window()
        ts = (ts_clock(now, tcb.ts_offset), tcb.ts_recent) if tcb.ts_ok else None
        ack = tcb.rcv_nxt
        blocks = rcv.sack_blocks(3 if ts else 4) if tcb.sack_ok and not payload else ()
        if blocks or not self.fast(self.local_addr, self.remote_addr, self.local_port, self.remote_port, seq, ack,
                                   flags, window, ts, payload, now):
            write_segment(self.host, self.local_addr, self.remote_addr,
                          TcpHeader(self.local_port, self.remote_port, seq, ack, flags, window, 0, 0,
                                    None, None, False, blocks, ts), now, payload)
        self.segs_out += 1
        self.stats.inc("tcp.out_segs")
        tcb.last_ack_sent = ack
        rcv.ack_sent(now, bool(payload))

    def emit_syn(self, flags: int, now: float, mss: int, wscale: int | None, sack_permitted: bool,
                 timestamps: bool) -> None:
        """Our SYN or SYN-ACK (sequence number ISS) with the options we offer (RFC 9293 3.7.1, RFC 7323, RFC 2018)."""
        tcb = self.tcb
        synack = bool(flags & ACK)
        window = self.receiver.syn_window(synack)
        ack = tcb.rcv_nxt if synack else 0
        ts = (ts_clock(now, tcb.ts_offset), tcb.ts_recent if synack else 0) if timestamps else None
        write_segment(self.host, self.local_addr, self.remote_addr,
                      TcpHeader(self.local_port, self.remote_port, tcb.iss, ack, flags, window, 0, 0,
                                mss, wscale, sack_permitted, (), ts), now)
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
