"""Benchmark (not a test): the Cython fast path against the pure-Python wire/ path.

Prints ns per call / per frame, medians of several runs, and the ratio
fast/pure measured in the same run (the machines are shared and noisy):
- Internet checksum over 1500 bytes;
- classify of a burst of 64 UDP frames (validate Eth/IPv4/UDP + checksums);
- UDP frame emit from a template.

    python -m ustack.tools.bench_fastpath [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from ustack import _fastpath as fp
from ustack.wire import WireError
from ustack.wire.checksum import internet_checksum
from ustack.wire.ethernet import EthernetHeader
from ustack.wire.ipv4 import Ipv4Header
from ustack.wire.udp import UdpHeader


def timeit(fn, n: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n


def median_ns(fn, n: int, runs: int) -> float:
    return statistics.median(timeit(fn, n) for _ in range(runs))


def make_frame(payload_len: int) -> bytes:
    eth = bytes.fromhex("020000000001" "020000000002" "0800")
    ip = bytes.fromhex("4500" "0000" "0000" "0000" "4011" "0000" "c6120002" "c6120001")
    tmpl = eth + ip + bytes.fromhex("0fa0" "0007" "0000" "0000")
    slot = bytearray(1600)
    n = fp.emit_udp(slot, tmpl, 1, os.urandom(payload_len))
    return bytes(slot[:n])


def pure_classify(frames):
    out = []
    for f in frames:
        try:
            eth = EthernetHeader.parse(f)
            ip = Ipv4Header.parse(f[eth.header_len:])
            body = f[eth.header_len + ip.header_len:eth.header_len + ip.total_length]
            u = UdpHeader.parse(body, ip.src, ip.dst)
            out.append((u.src_port, u.dst_port))
        except WireError as e:
            out.append(e.reason)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    runs = args.runs
    data = os.urandom(1500)
    c_fast = median_ns(lambda: fp.checksum(data), 20000, runs)
    c_pure = median_ns(lambda: internet_checksum(data), 20000, runs)
    mac = bytes.fromhex("020000000001")
    for size in (18, 1472):
        burst = [memoryview(make_frame(size)) for _ in range(64)]
        k_fast = median_ns(lambda: fp.classify(burst, mac), 500, runs) / 64
        k_pure = median_ns(lambda: pure_classify(burst), 50, runs) / 64
        print(f"classify UDP frame ({size + 42:4d} B)  fast {k_fast:8.1f} ns/frame   pure-Python wire/ "
              f"{k_pure:8.1f} ns/frame   ratio {k_pure / k_fast:5.1f}x")
    print(f"checksum 1500 B              fast {c_fast:8.1f} ns         pure-Python       "
          f"{c_pure:8.1f} ns         ratio {c_pure / c_fast:5.1f}x")
    slot = bytearray(1600)
    tmpl = make_frame(0)[:42]
    payload = os.urandom(1000)
    e_fast = median_ns(lambda: fp.emit_udp(slot, tmpl, 7, payload), 20000, runs)
    print(f"emit UDP frame (1042 B)      fast {e_fast:8.1f} ns/frame (headers + copy + checksum)")
    print(f"(medians of {runs} runs; {os.cpu_count()} CPUs; Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
