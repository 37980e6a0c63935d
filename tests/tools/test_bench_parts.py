"""The pieces of ``ustack bench`` that need no topology: nearest-rank percentiles, medians, server output,
the raw frame the ring benchmark transmits, the ICMP echo request of the ping, the latency suite's counts."""

from __future__ import annotations

import pytest
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import Ether

from ustack.tools.bench_clients import _echo_request, _pattern, percentile
from ustack.tools.bench_config import LATENCY_SIZES, BenchConfig
from ustack.tools.bench_rings import PAYLOAD, udp_frame
from ustack.tools.bench_runner import median_or_none
from ustack.tools.bench_servers import ustack_drops


def test_percentile_is_nearest_rank():
    values = list(range(100, 0, -1))  # 1..100, unordered
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([7], 99) == 7.0
    assert percentile([1, 2, 3], 50) == 2.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_median_or_none_ignores_missing():
    assert median_or_none([3, None, 1, 2]) == 2
    assert median_or_none([None]) is None


def test_ustack_drops_are_read_from_serve_output():
    lines = ["ustack: 198.18.0.2/24 mac 02:00:00:00:00:01 mtu 1500 on packet:x (packet_ring)", "ready", "counters:",
             "  rx.frames 10", "drops by reason:", "  ipv4.bad_checksum                      3",
             "  arp.bad_hardware                       1"]
    assert ustack_drops(lines) == {"ipv4.bad_checksum": 3, "arp.bad_hardware": 1}
    assert ustack_drops(["drops by reason:", "  (none)"]) == {}


def test_ring_frame_is_a_60_byte_udp_frame_with_right_checksums():
    frame = udp_frame(b"\x02" * 6, b"\x04" * 6, "198.18.0.2", "198.18.0.1", 5000, 9000, b"y" * PAYLOAD)
    assert len(frame) == 60
    pkt = Ether(frame)
    assert (pkt.src, pkt.dst) == ("02:02:02:02:02:02", "04:04:04:04:04:04")
    assert (pkt[IP].src, pkt[IP].dst, pkt[IP].flags.DF) == ("198.18.0.2", "198.18.0.1", True)
    assert (pkt[UDP].sport, pkt[UDP].dport, bytes(pkt[UDP].payload)) == (5000, 9000, b"y" * PAYLOAD)
    ip_sum, udp_sum = pkt[IP].chksum, pkt[UDP].chksum
    del pkt[IP].chksum, pkt[UDP].chksum
    again = Ether(bytes(pkt))  # scapy recomputes both
    assert (again[IP].chksum, again[UDP].chksum) == (ip_sum, udp_sum)


def test_ping_echo_request_is_a_valid_icmp_echo():
    raw = _echo_request(0x1234, 7, bytes(range(56)))
    pkt = ICMP(raw)
    assert (pkt.type, pkt.code, pkt.id, pkt.seq, bytes(pkt.payload)) == (8, 0, 0x1234, 7, bytes(range(56)))
    csum = pkt.chksum
    del pkt.chksum
    assert ICMP(bytes(pkt)).chksum == csum  # scapy computes the same checksum


def test_latency_suite_sizes_counts_and_payloads():
    assert LATENCY_SIZES == (64, 1000, 2000, 3000, 20_000, 100_000)
    cfg = BenchConfig(lat_count=500)
    assert [cfg.lat_count_for(s) for s in LATENCY_SIZES] == [500, 500, 500, 500, 125, 50]
    assert BenchConfig(lat_count=20).lat_count_for(100_000) == 10  # never fewer than 10
    for size in (64, 1000, 100_000, 300):
        data = _pattern(size)
        assert len(data) == size and data[:3] == bytes((0, 7, 14)) and data[256 % size] == 0


def test_afxdp_bench_measures_its_clock_read_and_the_ring_loop():
    """The CPU clock's own cost (taken out of the veth ring figures) is a positive, sub-millisecond
    figure; the simulated ring loop moves frames at well under a microsecond each."""
    from ustack.tools.bench_afxdp import bench_ring_loop, clock_read_ns

    cost = clock_read_ns(201)
    assert 0 < cost < 1e6
    rx_ns, tx_ns = bench_ring_loop(64, frames=5000)
    assert 0 < rx_ns < 1000 and 0 < tx_ns < 1000
