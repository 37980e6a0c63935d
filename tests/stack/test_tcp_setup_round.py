"""A SYN-ACK leaves as soon as its SYN is handled, not at the end of the poll round's burst.

The peer's connect() waits for the SYN-ACK; other flows' segments behind the SYN in the same
burst (another connection's last ACK or FIN, here a segment for a closed port that earns a RST)
must not add their cost to it. Frames are injected into stack ``a``'s receive side so that one
poll round takes them as one burst; a recording device shows what each transmit kick posted.
"""

from __future__ import annotations

from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from ustack.device import DeviceWrapper
from ustack.net.addr import parse as ip_addr

from .netsim import Net

A_MAC, B_MAC = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
E = Ether(src=B_MAC, dst=A_MAC)
IPH = IP(src="198.18.0.2", dst="198.18.0.1")
SYN_OPTS = [("MSS", 1460), ("WScale", 7), ("SAckOK", b""), ("Timestamp", (7, 0))]


class KickRecorder(DeviceWrapper):
    """Keeps the TCP flags of the frames each ``tx_commit`` posts (one list per kick)."""

    def __init__(self, inner):
        super().__init__(inner)
        self._slots = []
        self.kicks: list[list[str]] = []

    def tx_reserve(self, n):
        self._slots = self.inner.tx_reserve(n)
        return self._slots

    def tx_commit(self, lengths):
        if lengths:
            self.kicks.append([_what(Ether(bytes(slot[:n]))) for slot, n in zip(self._slots, lengths)])
        self.inner.tx_commit(lengths)


def _what(frame) -> str:
    return str(frame[TCP].flags) if TCP in frame else frame.payload.name


def _poll_burst(net, frames) -> None:
    for f in frames:
        net.link.a._deliver(net.clock.now, bytes(f))
    net.a.poll(net.clock.now)


def test_syn_ack_is_kicked_before_the_rest_of_the_burst():
    net = Net(wrap_a=KickRecorder)
    try:
        dev = net.a.device
        net.a.arp.learn(ip_addr("198.18.0.2"), bytes.fromhex(B_MAC.replace(":", "")), net.clock.now)
        net.a.tcp.listen((b"\0\0\0\0", 80), 4)
        net.a.poll(net.clock.now)
        dev.kicks.clear()
        _poll_burst(net, [E / IPH / TCP(sport=4000, dport=80, flags="S", seq=1000, options=SYN_OPTS),
                          E / IPH / TCP(sport=4001, dport=81, flags="A", seq=5, ack=77)])
        # the SYN-ACK alone first, then the closed port's RST (<SEQ=SEG.ACK><CTL=RST>) at the round's end
        assert dev.kicks == [["SA"], ["R"]]
        # a SYN alone in its round: one kick, nothing left for the round's end
        dev.kicks.clear()
        _poll_burst(net, [E / IPH / TCP(sport=4002, dport=80, flags="S", seq=2000, options=SYN_OPTS)])
        assert dev.kicks == [["SA"]]
        assert net.a.tcp.listeners[(b"\0\0\0\0", 80)].half_open == 2
    finally:
        net.close()
