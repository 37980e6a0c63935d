"""Per-connection knobs (socket options, sysctl-like defaults), one dataclass.

``TcpLayer`` holds the defaults; ``connect``/``listen`` take keyword
overrides (``nodelay=True``, ``rcvbuf=1 << 20``...), and a connection's
knobs can be changed later with ``Connection.configure(**knobs)``.
Times are seconds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ustack.transport.tcp.congestion import ALGORITHMS

# Under soft memory pressure (tcp_mem_pressure) each connection still gets this much per direction
# beyond what it holds (Linux's tcp_rmem[0] / tcp_wmem[0]), so every connection keeps moving.
PRESSURE_MIN = 4096

# One poll round's coalesced in-order ACK (Receiver.ack_bulk) covers at most this many bytes: past it the
# ACK goes at once. A GRO receiver ACKs each aggregate, at most 64 KiB; a 256-frame AF_XDP round of
# full segments would otherwise be one ACK per 370 KB, a stretch ACK of 256 segments (RFC 5681 4.2,
# RFC 2525 2.13) that starves the sender's ACK clock.
ROUND_ACK_BYTES = 65536

# Loss recovery with SACK (transport/tcp/rack.py, recovery.py); without SACK it is always NewReno.
LOSS_RECOVERIES = ("rack", "rfc6675", "newreno")


@dataclass(slots=True)
class TcpConfig:
    sndbuf: int = 256 * 1024  # send buffer capacity (bytes)
    # Send-buffer growth for a pacing controller (BBR, whose cwnd is 2 BDP + 3 send quanta): the buffer grows to
    # twice cwnd, up to sndbuf_max (Linux's tcp_sndbuf_expand, tcp_wmem[2]); setting sndbuf turns it off, as in Linux.
    sndbuf_auto: bool = True
    sndbuf_max: int = 4 << 20
    rcvbuf: int = 256 * 1024  # receive buffer capacity: the initial one while auto-tuning (Linux tcp_rmem[1])
    # Receive-buffer auto-tuning (transport/tcp/rcvspace.py): the buffer grows, once per RTT, to twice what the
    # application read in an RTT, up to rcvbuf_max (Linux tcp_rmem[2]); the window scale covers rcvbuf_max.
    # Setting rcvbuf on a connection (connect/listen knob, configure, SO_RCVBUF) turns it off, as in Linux.
    rcvbuf_auto: bool = True
    rcvbuf_max: int = 6 << 20
    nodelay: bool = False  # TCP_NODELAY: no Nagle (RFC 896 with Minshall's rule, RFC 1122 4.2.3.4)
    cork: bool = False  # TCP_CORK: hold partial segments until full, uncorked, or CORK_LIMIT (200 ms) passed
    delayed_ack: bool = True  # RFC 1122 4.2.3.2 / RFC 5681 4.2 (heuristics: transport/tcp/delack.py)
    # In-order bulk data ACKed once per connection per poll round, after the application's read (as a GRO
    # receiver does); off: every second full segment. A sender that grows cwnd by at most SMSS per ACK in
    # slow start (RFC 5681 3.1, ustack's own) grows slower against coalesced ACKs on a long path.
    ack_coalescing: bool = True
    delack_timeout: float = 0.04  # the shortest ACK delay (Linux's ATO minimum); below 0.5 s (RFC 1122)
    delack_max: float = 0.2  # the longest ACK delay the adaptive ATO may reach (Linux TCP_DELACK_MAX)
    max_quickacks: int = 16  # quick ACKs granted at the first data and after idle (Linux TCP_MAX_QUICKACKS); 0: none
    quickack: bool = False  # TCP_QUICKACK, one-shot as in Linux: setting True enters quick-ACK mode, False ping-pong
    initial_rto: float = 1.0  # RFC 6298 2.1
    min_rto: float = 0.2  # RFC 6298 2.4 says 1 s; Linux uses 200 ms
    max_rto: float = 60.0  # RFC 6298 2.5
    syn_retries: int = 6  # SYN retransmissions before giving up (TimeoutError)
    synack_retries: int = 5  # SYN-ACK retransmissions before dropping a half-open connection
    max_retries: int = 15  # data retransmissions before giving up (RFC 1122 R2)
    msl: float = 30.0  # maximum segment lifetime: TIME-WAIT lasts 2 * msl
    fin_wait2_timeout: float = 60.0  # how long a closed (orphaned) connection waits in FIN-WAIT-2
    keepalive: bool = False  # RFC 1122 4.2.3.6, off by default
    keepidle: float = 7200.0
    keepintvl: float = 75.0
    keepcnt: int = 9
    window_scaling: bool = True  # RFC 7323
    timestamps: bool = True  # RFC 7323
    sack: bool = True  # RFC 2018: offer SACK-permitted; send SACK blocks when both agree
    congestion: str = "cubic"  # "cubic" (RFC 9438, Linux's default) or "newreno" (RFC 5681/6582); see congestion.py
    loss_recovery: str = "rack"  # with SACK: "rack" (RFC 8985), "rfc6675" or "newreno"; set at the handshake
    mss: int = 0  # TCP_MAXSEG clamp; 0 = from the route MTU (MTU - 40)
    challenge_ack_interval: float = 0.5  # RFC 5961 7: at most one challenge ACK per interval per connection
    challenge_ack_limit: int = 1000  # layer-wide challenge ACKs per second: limit/2 + random(limit) (CVE-2016-5696)
    syncookies: bool = True  # RFC 4987 3.6, used when the SYN queue is full
    syn_backlog: int = 0  # SYN queue bound; 0 = same as the listen backlog
    send_low_water: int | None = None  # on_send_low_water fires when queued bytes fall to this (None: sndbuf/2)
    recv_high_water: int | None = None  # on_recv_high_water fires when readable bytes reach this (None: rcvbuf/2)
    persist_max: float = 60.0  # longest interval between zero-window probes
    max_ooo_runs: int = 256  # bound on out-of-order runs held for reassembly
    # Layer-wide limits (read from the TcpLayer's config; see transport/tcp/layer.py):
    orphan_retries: int = 8  # timer expiries without progress before a closed (orphaned) connection is reset
    max_orphans: int = 4096  # orphans held at once; a connection closed beyond it is reset at once
    tcp_mem: int = 64 << 20  # bytes all connections' send + receive buffers may hold together (the hard level)
    tcp_mem_pressure: int | None = None  # the soft level above which buffers stop growing; None: 3/4 of tcp_mem
    max_connections: int = 65536  # TCBs of all states; SYNs beyond are dropped, connect() raises ENOBUFS
    max_time_wait: int = 32768  # TIME-WAIT records held at once (tcp_max_tw_buckets); beyond, the oldest ends

    @property
    def rcvbuf_ceiling(self) -> int:
        """The largest receive buffer a connection may reach: the window scale is chosen to cover it."""
        if self.rcvbuf_auto and self.rcvbuf_max > self.rcvbuf:
            return self.rcvbuf_max
        return self.rcvbuf

    def derive(self, **knobs) -> TcpConfig:
        """A copy with some knobs changed; unknown names raise TypeError. An explicit ``rcvbuf``
        (SO_RCVBUF) turns receive-buffer auto-tuning off unless ``rcvbuf_auto`` is given too."""
        if not knobs:
            return dataclasses.replace(self)
        if "rcvbuf" in knobs and "rcvbuf_auto" not in knobs:
            knobs["rcvbuf_auto"] = False
        if "sndbuf" in knobs and "sndbuf_auto" not in knobs:
            knobs["sndbuf_auto"] = False
        cfg = dataclasses.replace(self, **knobs)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if self.sndbuf <= 0 or self.rcvbuf <= 0:
            raise ValueError("buffer sizes must be positive")
        if self.rcvbuf_max < 0 or self.sndbuf_max < 0:
            raise ValueError("rcvbuf_max and sndbuf_max must not be negative")
        if not 0 < self.delack_timeout < 0.5:
            raise ValueError("delack_timeout must be in (0, 0.5) seconds (RFC 1122 4.2.3.2)")
        if not self.delack_timeout <= self.delack_max < 0.5:
            raise ValueError("delack_max must be in [delack_timeout, 0.5) seconds (RFC 1122 4.2.3.2)")
        if self.max_quickacks < 0:
            raise ValueError("max_quickacks must not be negative")
        if self.min_rto <= 0 or self.max_rto < self.min_rto:
            raise ValueError("need 0 < min_rto <= max_rto")
        if self.msl < 0:
            raise ValueError("msl must not be negative")
        if (self.orphan_retries < 0 or self.max_orphans < 0 or self.max_time_wait < 0 or self.max_connections <= 0
                or self.tcp_mem <= 0):
            raise ValueError("orphan_retries, max_orphans, max_time_wait must be >= 0, max_connections, tcp_mem > 0")
        if self.tcp_mem_pressure is not None and not 0 < self.tcp_mem_pressure <= self.tcp_mem:
            raise ValueError("tcp_mem_pressure must be in (0, tcp_mem]")
        if self.mss and self.mss < 88:
            raise ValueError("mss clamp below 88 bytes")
        if self.loss_recovery not in LOSS_RECOVERIES:
            raise ValueError(f"unknown loss recovery {self.loss_recovery!r} (known: {', '.join(LOSS_RECOVERIES)})")
        if self.congestion.lower() not in ALGORITHMS:
            raise ValueError(f"unknown congestion control {self.congestion!r} (known: {', '.join(sorted(ALGORITHMS))})")
