"""ustack.snapshot: a stack's state as plain data, equal to what the stack itself says, on a manual clock.

Stack b listens and has accepted nothing yet; a is connected to it with 2000
bytes acknowledged, holds two UDP datagrams from b, has b in its ARP cache
and dropped one frame under a named reason.
"""

from __future__ import annotations

import json

import pytest

from ustack.net.addr import ANY4
from ustack.snapshot import interface_address, snapshot
from ustack.transport.tcp.tcb import State

from tests.stack.netsim import Net

A_IP, B_IP = "198.18.0.1", "198.18.0.2"
B = bytes([198, 18, 0, 2])


@pytest.fixture
def net():
    with Net() as n:
        listener = n.b.tcp.listen((b"\0\0\0\0", 80), 8)
        conn = n.a.tcp.connect(None, (B, 80), n.clock.now)
        ep_a = n.a.udp.endpoint()
        n.a.udp.bind(ep_a, ANY4, 7)
        ep_b = n.b.udp.endpoint()
        n.b.udp.bind(ep_b, ANY4, 9)
        assert n.run(lambda: conn.state == State.ESTABLISHED and listener.pending == 1, 5)
        assert conn.send(b"s" * 2000, now=n.clock.now) == 2000
        for size in (10, 20):
            ep_b.sendto(b"u" * size, bytes([198, 18, 0, 1]), 7, n.clock.now)
        slot = n.link.b.tx_reserve(1)[0]
        bad = n.a.iface.mac + n.b.iface.mac + b"\x88\xb5" + bytes(40)  # IEEE local experimental: not spoken here
        slot[:len(bad)] = bad
        n.link.b.tx_commit([len(bad)])
        assert n.run(lambda: conn.info().bytes_acked == 2000 and len(ep_a.queue) == 2
                     and n.a.stats["drop.eth.unknown_ethertype"] == 1, 5)
        n.conn, n.listener, n.ep_a = conn, listener, ep_a
        yield n


def test_snapshot_is_plain_data_equal_to_the_stack(net):
    a = net.a
    snap = snapshot(a, net.clock.now)
    assert json.loads(json.dumps(snap)) == snap  # plain data: survives JSON unchanged
    assert snap["stack"] == {"addr": A_IP, "prefixlen": 24, "gateway": None, "mac": a.iface.mac.hex(":"),
                             "mtu": 1500, "mode": a.device.capabilities.mode, "now": net.clock.now}
    assert snap["counters"] == a.stats.snapshot()
    assert snap["drops"] == a.stats.drops() == {"eth.unknown_ethertype": 1}
    [conn] = snap["tcp"]
    info = net.conn.info()
    assert (conn["state"], conn["local"], conn["remote"]) == ("ESTABLISHED", f"{A_IP}:{net.conn.local_port}",
                                                             f"{B_IP}:80")
    assert (conn["bytes_acked"], conn["cwnd"], conn["srtt"], conn["snd_mss"]) == (
        2000, info.cwnd, info.srtt, info.snd_mss)
    assert conn["options"] == ["ts", "sack", "wscale"]
    assert snap["listeners"] == []
    assert snap["udp"] == [{"local": "0.0.0.0:7", "remote": None, "state": "UNCONN", "recv_q": 30,
                            "datagrams": 2, "rcvbuf": net.ep_a.rcvbuf, "drops": 0}]
    [arp] = snap["arp"]
    assert (arp["ip"], arp["mac"]) == (B_IP, net.b.iface.mac.hex(":"))
    assert 0 < arp["expires"] <= 60.0


def test_listener_queues_and_the_accepted_child(net):
    snap = snapshot(net.b, net.clock.now)
    assert snap["listeners"] == [{"local": "0.0.0.0:80", "state": "LISTEN", "accept_queue": 1, "backlog": 8,
                                  "syn_queue": 0, "syn_backlog": net.listener.syn_backlog, "overflows": 0,
                                  "cookies_sent": 0, "cookies_accepted": 0, "cookies_rejected": 0}]
    [child] = snap["tcp"]
    assert (child["local"], child["recv_queue"]) == (f"{B_IP}:80", 2000)


def test_arp_expiry_counts_down_with_the_given_time(net):
    now = net.clock.now
    first = snapshot(net.a, now)["arp"][0]["expires"]
    later = snapshot(net.a, now + 10.0)["arp"][0]["expires"]
    assert first - later == pytest.approx(10.0)
    assert snapshot(net.a, now + 3600.0)["arp"] == []  # expired entries are not shown


def test_the_interface_address_prefix_and_gateway_are_text():
    with Net(a_addr="198.18.3.4/20", b_addr="198.18.3.5/20", gateway_a="198.18.0.1") as n:
        assert interface_address(n.a) == ("198.18.3.4", 20, "198.18.0.1")
        assert interface_address(n.b) == ("198.18.3.5", 20, None)
        assert snapshot(n.a, n.clock.now)["stack"]["gateway"] == "198.18.0.1"
