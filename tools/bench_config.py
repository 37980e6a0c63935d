"""What ``ustack bench`` measures and how much: service ports, message size, metrics, the suites.

The servers listen on the classic service ports (UDP/TCP echo 7, discard 9,
chargen-like source 19); every echo carries ``MESSAGE`` bytes. ``METRICS``
and ``RING_METRICS`` name each figure with its column header and unit (RTTs
in µs, throughput in MB/s of 10^6 bytes, connections/s, frames in kpps).
``LATENCY_SIZES`` are the message sizes of the latency suite (TCP echo
round trips by size, a ping at ``ping_interval`` spacing, connect() time
and connect+close per second). ``BenchConfig.for_args`` picks the default
or the ``--quick`` suite and applies the size options.
"""

from __future__ import annotations

from dataclasses import dataclass

USTACK_BACKENDS = ("afxdp", "packet", "tap")
REFERENCE_KINDS = ("lwip", "pytcp")  # other stacks measured beside ustack (optional: skipped when absent)
ROW_KINDS = USTACK_BACKENDS + REFERENCE_KINDS
UDP_ECHO, TCP_ECHO, TCP_DISCARD, TCP_SOURCE = 7, 7, 9, 19
MESSAGE = 64  # bytes of payload in every echo request

# (key, column header, unit); RTTs in µs, throughput in MB/s (10^6 bytes), connections/s.
METRICS = (
    ("udp_rtt_p50_us", "UDP p50", "µs"),
    ("udp_rtt_p99_us", "UDP p99", "µs"),
    ("tcp_rtt_p50_us", "TCP p50", "µs"),
    ("tcp_rtt_p99_us", "TCP p99", "µs"),
    ("push_mbps", "push", "MB/s"),
    ("pull_mbps", "pull", "MB/s"),
    ("conn_per_s", "conn/s", "1/s"),
)
# The server process's CPU while the client pushes, pulls and connects: % of one CPU, µs per MSS-sized
# (1448-byte) segment of payload moved, µs per connection (connect, 64-byte request/response, close).
SERVER_CPU_METRICS = (
    ("push_cpu_pct", "push CPU", "%"),
    ("push_us_per_seg", "push µs/seg", "µs"),
    ("pull_cpu_pct", "pull CPU", "%"),
    ("pull_us_per_seg", "pull µs/seg", "µs"),
    ("conn_cpu_us", "µs/conn", "µs"),
)
SEGMENT = 1448  # payload bytes of a full segment at 1500 MTU with timestamps
LATENCY_SIZES = (64, 1000, 2000, 3000, 20_000, 100_000)  # bytes per echo in the latency suite
RING_METRICS = (
    ("rx_kpps", "rx kpps", "kpps"),
    ("rx_cpu_us", "rx µs/frame", "µs"),
    ("tx_kpps", "tx kpps", "kpps"),
    ("tx_cpu_us", "tx µs/frame", "µs"),
)


@dataclass
class BenchConfig:
    """Sizes and repetitions; ``for_args`` picks the default or the --quick suite."""

    reps: int = 3
    rtt_count: int = 2000
    rtt_warmup: int = 200
    bulk_bytes: int = 50_000_000
    bulk_seconds: float = 8.0  # a transfer stops here even if bulk_bytes are not through
    cps_seconds: float = 2.0
    ring_seconds: float = 1.0
    ring_runs: int = 3
    rings: bool = True
    latency: bool = True  # the latency suite (sizes, ping, connect)
    lat_count: int = 500  # timed round trips per size up to 3000 B (a quarter at 20 KB, a tenth at 100 KB)
    lat_warmup: int = 20
    ping_count: int = 200  # pings at ping_interval spacing: the stack idles in between
    ping_interval: float = 0.01
    connect_seconds: float = 2.0  # connect+close for this long (or connect_max connections)
    connect_max: int = 20_000
    program: bool = True  # the unmodified-program rows (python -m http.server, ustack.tools.bench_program)
    program_seconds: float = 3.0  # of back-to-back HTTP requests per repetition
    steer_client_rx: bool = False  # RPS on the client's veth (bench_runner.steer_peer_receive)

    def lat_count_for(self, size: int) -> int:
        """Round trips for one message size: fewer for the big ones (a 100 KB echo takes milliseconds)."""
        if size <= 3000:
            return self.lat_count
        return max(10, self.lat_count // (4 if size <= 20_000 else 10))

    @classmethod
    def for_args(cls, args) -> "BenchConfig":
        if args.quick:
            cfg = cls(reps=1, rtt_count=300, rtt_warmup=50, bulk_bytes=4_000_000, bulk_seconds=3.0,
                      cps_seconds=1.0, ring_seconds=0.5, ring_runs=1, lat_count=60, lat_warmup=5, ping_count=40,
                      connect_seconds=0.5, program_seconds=1.0)
        else:
            cfg = cls()
        for name in ("reps", "rtt_count", "rtt_warmup", "bulk_bytes", "bulk_seconds", "cps_seconds",
                     "ring_seconds", "ring_runs", "lat_count", "ping_count", "connect_seconds", "program_seconds"):
            value = getattr(args, name, None)
            if value is not None:
                setattr(cfg, name, value)
        cfg.rings = not args.no_rings
        cfg.latency = not getattr(args, "no_latency", False)
        cfg.program = not getattr(args, "no_program", False)
        cfg.steer_client_rx = bool(getattr(args, "steer_client_rx", False))
        return cfg
