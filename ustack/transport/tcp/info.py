"""TCP_INFO-like snapshot of one connection: what the application can see and steer.

``Connection.info()`` returns a ``TcpInfo``: sequence state, windows,
congestion state, RTT estimates, retransmission counters and buffer
occupancy, at the moment of the call.
"""

from __future__ import annotations

from dataclasses import dataclass

from ustack.transport.tcp.seq import seq_diff


@dataclass(frozen=True, slots=True)
class TcpInfo:
    state: str
    local: tuple
    remote: tuple
    snd_una: int
    snd_nxt: int
    snd_max: int
    rcv_nxt: int
    snd_wnd: int  # the peer's window (scaled, bytes)
    rcv_wnd: int  # window we last advertised (bytes)
    cwnd: int
    ssthresh: int
    srtt: float | None
    rttvar: float
    rto: float
    retransmits: int  # segments retransmitted (timeout, fast retransmit, partial ACK)
    timeouts: int  # retransmission timer expiries
    backoff: int  # current consecutive backoffs
    fast_retransmits: int
    dup_acks: int
    bytes_in_flight: int
    send_queue: int  # bytes in the send buffer (unacknowledged + unsent)
    unsent: int
    recv_queue: int  # bytes ready for the user
    ooo_bytes: int  # bytes held out of order
    snd_mss: int
    rcv_mss: int
    snd_wscale: int
    rcv_wscale: int
    timestamps: bool
    sack: bool
    congestion: str
    in_recovery: bool
    segs_in: int
    segs_out: int
    bytes_acked: int
    bytes_received: int
    challenge_acks: int
    loss_recovery: str = ""  # "rack" (RFC 8985), "rfc6675" or "newreno"
    lost: int = 0  # segments loss detection marked lost (RACK, and every unSACKed one at a timeout)
    reordering: int = 0  # times reordering was seen (RACK.reordering_seen set)
    spurious_undone: int = 0  # reductions undone as spurious (D-SACK RFC 3708, Eifel RFC 3522, F-RTO RFC 5682)
    tlps: int = 0  # tail loss probes sent (RFC 8985 7)
    dsacks: int = 0  # D-SACKs received (RFC 2883)


def connection_info(conn) -> TcpInfo:
    """``Connection.info()``: the connection's state now."""
    tcb = conn.tcb
    sender = conn.sender
    rtt = sender.rtt
    cc = sender.cc
    recovery = sender.recovery
    queued = len(sender.sndbuf)
    rcvbuf = conn.receiver.rcvbuf
    sent = seq_diff(tcb.snd_nxt, tcb.snd_una)
    return TcpInfo(
        state=tcb.state.name, local=conn.local, remote=conn.remote,
        snd_una=tcb.snd_una, snd_nxt=tcb.snd_nxt, snd_max=tcb.snd_max, rcv_nxt=tcb.rcv_nxt,
        snd_wnd=tcb.snd_wnd, rcv_wnd=tcb.rcv_wnd, cwnd=cc.window + recovery.inflation, ssthresh=cc.ssthresh,
        srtt=rtt.srtt, rttvar=rtt.rttvar, rto=rtt.rto, retransmits=sender.retransmits, timeouts=sender.timeouts,
        backoff=rtt.backoffs, fast_retransmits=recovery.fast_retransmits, dup_acks=sender.dup_acks,
        bytes_in_flight=max(0, seq_diff(tcb.snd_max, tcb.snd_una)),
        send_queue=queued, unsent=max(0, queued - max(sent, 0)),
        recv_queue=len(rcvbuf), ooo_bytes=rcvbuf.ooo_bytes,
        snd_mss=tcb.snd_mss, rcv_mss=tcb.rcv_mss, snd_wscale=tcb.snd_wscale, rcv_wscale=tcb.rcv_wscale,
        timestamps=tcb.ts_ok, sack=tcb.sack_ok, congestion=cc.name, in_recovery=recovery.in_recovery,
        segs_in=conn.segs_in, segs_out=conn.out.segs_out, bytes_acked=sender.bytes_acked,
        bytes_received=conn.receiver.bytes_received, challenge_acks=conn.challenge_acks,
        loss_recovery=recovery.name, lost=recovery.lost_segs, reordering=recovery.reorderings,
        spurious_undone=recovery.undos, tlps=recovery.tlps, dsacks=recovery.dsacks,
    )
