"""Benchmark (not a test): the Cython fast path against the pure-Python wire/ path.

Prints ns per call / per frame, medians of several runs, and the ratio
fast/pure measured in the same run (the machines are shared and noisy):
- Internet checksum over 1500 bytes;
- classify of a burst of 64 UDP frames (validate Eth/IPv4/UDP + checksums);
- classify of a burst of 64 TCP segments carrying the timestamps option
  (validate Eth/IPv4/TCP + checksum, parse the TCP header and its options
  into the record), pure ACKs and full-sized segments; each classify also
  through a ``Classifier`` (the records kept and refilled burst after burst);
- UDP frame emit from a template.

``--baseline PATH`` also loads another build of the extension (a
``_fastpath.*.so`` kept from an earlier commit) and times its classify on the
same bursts, interleaved run by run with this one, so that a change to
classify is measured under the same machine load:

    python -m ustack.tools.bench_fastpath [--runs 7] [--baseline /tmp/old/_fastpath.cpython-311-x86_64-linux-gnu.so]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time

from ustack import _fastpath as fp
from ustack.wire import WireError
from ustack.wire.checksum import internet_checksum
from ustack.wire.ethernet import EthernetHeader
from ustack.wire.ipv4 import Ipv4Header
from ustack.wire.tcp import TcpHeader
from ustack.wire.udp import UdpHeader

BURST = 64
ETH = bytes.fromhex("020000000001" "020000000002" "0800")


def timeit(fn, n: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n


def median_ns(fn, n: int, runs: int) -> float:
    return statistics.median(timeit(fn, n) for _ in range(runs))


def load_build(path: str):
    """Another build of the extension, imported beside ustack._fastpath (a separate shared object)."""
    spec = importlib.util.spec_from_file_location("ustack_baseline._fastpath", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_udp_frame(payload_len: int) -> bytes:
    ip = bytes.fromhex("4500" "0000" "0000" "0000" "4011" "0000" "c6120002" "c6120001")
    tmpl = ETH + ip + bytes.fromhex("0fa0" "0007" "0000" "0000")
    slot = bytearray(1600)
    n = fp.emit_udp(slot, tmpl, 1, os.urandom(payload_len))
    return bytes(slot[:n])


def make_tcp_frame(payload_len: int, i: int) -> bytes:
    """An established-flow segment with NOP NOP TS (RFC 7323 appendix A), as Linux sends them."""
    ip = bytes.fromhex("4500" "0000" "0000" "0000" "4006" "0000" "c6120002" "c6120001")
    slot = bytearray(1600)
    n = fp.emit_tcp(slot, ETH + ip, i, 40000, 80, 1000 + i * payload_len, 5000, 0x10 if not payload_len else 0x18,
                    502, 123456 + i, 654321, os.urandom(payload_len))
    return bytes(slot[:n])


def pure_classify(frames):
    """The same work with the wire/ Repr classes (Ethernet, IPv4, then UDP or TCP)."""
    out = []
    for f in frames:
        try:
            eth = EthernetHeader.parse(f)
            ip = Ipv4Header.parse(f[eth.header_len:])
            body = f[eth.header_len + ip.header_len:eth.header_len + ip.total_length]
            if ip.proto == 6:
                out.append(TcpHeader.parse(body, ip.src, ip.dst))
            else:
                out.append(UdpHeader.parse(body, ip.src, ip.dst))
        except WireError as e:
            out.append(e.reason)
    return out


def bench_classify(label: str, burst, mac, runs: int, baseline=None) -> None:
    size = len(burst[0])
    if baseline is not None:
        new, old = [], []
        for _ in range(runs):  # interleaved: both see the same load
            new.append(timeit(lambda: fp.classify(burst, mac), 2000) / BURST)
            old.append(timeit(lambda: baseline.classify(burst, mac), 2000) / BURST)
        k_new, k_old = statistics.median(new), statistics.median(old)
        print(f"classify {label} ({size:4d} B) x{BURST}  this build {k_new:8.1f} ns/frame   baseline "
              f"{k_old:8.1f} ns/frame   this/baseline {k_new / k_old:5.2f}")
        return
    k_fast = median_ns(lambda: fp.classify(burst, mac), 2000, runs) / BURST
    classifier = fp.Classifier(mac)
    k_kept = median_ns(lambda: classifier.classify(burst), 2000, runs) / BURST
    k_pure = median_ns(lambda: pure_classify(burst), 20, runs) / BURST
    print(f"classify {label} ({size:4d} B) x{BURST}  fast {k_fast:8.1f} ns/frame   Classifier {k_kept:8.1f} ns/frame"
          f"   pure-Python wire/ {k_pure:8.1f} ns/frame   ratio {k_pure / k_fast:5.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--baseline", metavar="PATH", help="another build of _fastpath to compare classify with")
    args = ap.parse_args()
    runs = args.runs
    baseline = load_build(args.baseline) if args.baseline else None
    mac = bytes.fromhex("020000000001")
    for size in (18, 1472):
        bench_classify("UDP     ", [memoryview(make_udp_frame(size)) for _ in range(BURST)], mac, runs, baseline)
    for size in (0, 1448):
        bench_classify("TCP+TS  ", [memoryview(make_tcp_frame(size, i)) for i in range(BURST)], mac, runs, baseline)
    if baseline is not None:
        print(f"(medians of {runs} interleaved runs; {os.cpu_count()} CPUs; Python {sys.version.split()[0]})")
        return
    data = os.urandom(1500)
    c_fast = median_ns(lambda: fp.checksum(data), 20000, runs)
    c_pure = median_ns(lambda: internet_checksum(data), 20000, runs)
    print(f"checksum 1500 B                   fast {c_fast:8.1f} ns         pure-Python       "
          f"{c_pure:8.1f} ns         ratio {c_pure / c_fast:5.1f}x")
    slot = bytearray(1600)
    tmpl = make_udp_frame(0)[:42]
    payload = os.urandom(1000)
    e_fast = median_ns(lambda: fp.emit_udp(slot, tmpl, 7, payload), 20000, runs)
    print(f"emit UDP frame (1042 B)           fast {e_fast:8.1f} ns/frame (headers + copy + checksum)")
    print(f"(medians of {runs} runs; {os.cpu_count()} CPUs; Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
