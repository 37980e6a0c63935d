"""Helpers for hostile scenarios: a fresh pair of stacks, frames injected at A, what A sent back."""

from __future__ import annotations

from scapy.layers.l2 import Ether

from ustack.net.addr import ANY4

from tests.stack.netsim import Net

A_MAC, B_MAC = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
A_IP, B_IP = "198.18.0.1", "198.18.0.2"
E = Ether(src=B_MAC, dst=A_MAC)


def fresh(**kw):
    """Two stacks, no gateway; A has a UDP socket on 7 and a TCP listener on 80."""
    net = Net(**kw)
    ep = net.a.udp.endpoint()
    net.a.udp.bind(ep, ANY4, 7)
    lst = net.a.tcp.listen((ANY4, 80), 16)
    net.step()  # announcements out of the way
    return net, ep, lst


def inject(net, *frames) -> int:
    """Deliver frames to A and poll it once; returns how many frames A transmitted meanwhile."""
    before = net.link.a.counters["tx"]
    for f in frames:
        net.link.a._deliver(net.clock.now, bytes(f))
    net.a.poll(net.clock.now)
    return net.link.a.counters["tx"] - before


def drops(net, reason: str) -> int:
    return net.a.stats["drop." + reason]
