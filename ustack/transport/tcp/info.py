"""TCP_INFO-like snapshot of one connection: what the application can see and steer.

``Connection.info()`` returns a ``TcpInfo``: sequence state, windows,
congestion state, RTT estimates, retransmission counters and buffer
occupancy, at the moment of the call.
"""

from __future__ import annotations

from dataclasses import dataclass


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
