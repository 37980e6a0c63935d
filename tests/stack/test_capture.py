"""The pcap decorator: every frame in and out, stamped with the stack clock, readable by scapy and tcpdump."""

from __future__ import annotations

import os
import subprocess

import pytest

from scapy.layers.inet import ICMP, IP
from scapy.layers.l2 import ARP

from ustack.backends.pipe import PipeLink
from ustack.capture import PcapDevice, dissect
from ustack.api.clock import ManualClock
from ustack.net.addr import parse as ip_addr
from ustack.stack import Stack

from tests.conftest import require_tool


def captured_ping(tmp_path):
    clock = ManualClock(1234.5)
    link = PipeLink(clock)
    path = str(tmp_path / "a.pcap")
    dev = PcapDevice(link.a, path, clock)
    a = Stack(dev, "198.18.0.1/24")
    b = Stack(link.b, "198.18.0.2/24")
    got = []
    b.icmp.echo_handlers[1] = lambda *args: got.append(args)
    b.icmp.ping(ip_addr("198.18.0.1"), 1, 1, clock(), b"cap")
    for _ in range(6):
        a.poll(clock.now)
        b.poll(clock.now)
        clock.advance(0.001)
    assert got
    dev.close()
    return path


def test_capture_holds_both_directions_with_stack_time(tmp_path):
    path = captured_ping(tmp_path)
    pkts = dissect(path)
    kinds = [("arp" if ARP in p else "icmp%d" % p[ICMP].type if ICMP in p else "?") for p in pkts]
    # in: b's announcement, b's who-has; out: a's announcement, is-at, echo reply; in: echo request
    assert kinds.count("icmp8") == 1 and kinds.count("icmp0") == 1
    assert kinds.count("arp") == 4
    assert all(1234.5 <= float(p.time) < 1234.6 for p in pkts)
    reply = [p for p in pkts if ICMP in p and p[ICMP].type == 0][0]
    assert bytes(reply[ICMP].payload) == b"cap" and reply[IP].src == "198.18.0.1"


def test_tcpdump_reads_the_capture(tmp_path):
    require_tool("tcpdump")
    path = captured_ping(tmp_path)
    out = subprocess.run(["tcpdump", "-nn", "-r", path], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    assert "ICMP echo request" in out.stdout and "ICMP echo reply" in out.stdout


def test_capture_size_cap_counts_the_frames_left_out(tmp_path):
    clock = ManualClock(1.0)
    link = PipeLink(clock)
    path = tmp_path / "cap.pcap"
    dev = PcapDevice(link.a, str(path), clock, max_bytes=24 + 16 + 60)  # the file header and one (padded) ARP frame
    stack = Stack(dev, "198.18.0.1/24")
    stack.poll(clock.now)  # the announcement: written
    stack.arp.announce()
    stack.flush()  # a second one: left out
    dev.flush()
    assert dev.records_dropped == 1
    assert os.path.getsize(path) == 24 + 16 + 60
    dev.close()


def test_stack_refuses_an_mtu_ipv4_cannot_carry():
    clock = ManualClock(1.0)
    for mtu in (24, 67, 100_000):
        link = PipeLink(clock, mtu=max(mtu, 1500))
        with pytest.raises(ValueError, match="MTU"):
            Stack(link.a, "198.18.0.1/24", mtu=mtu)
