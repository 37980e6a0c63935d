"""ICMP echo replies written in C (``_fastpath.EchoResponder``, issue 10): the same frames and counters as
the Python path, only for sources the Python path answered, and only while their template is good.
Two stacks over the pipe backend, manual clock; the fast path is chosen per stack, so these run the
same under ``--fastpath=off``."""

from __future__ import annotations

import pytest

from ustack.net.addr import parse as ip_addr
from ustack.wire.icmp import IcmpMessage

from .netsim import Net, Recorder

A = ip_addr("198.18.0.1")
B = ip_addr("198.18.0.2")
SECRET = bytes(range(16))  # the same IP ID sequence on both paths
COUNTED = ("icmp.echo_requests_received", "icmp.echo_replies_sent", "ipv4.packets_sent", "eth.frames_sent",
           "eth.frames_received")


def _net(fast: bool, **kw) -> Net:
    return Net(wrap_a=Recorder, a_kw={"fastpath": fast, "isn_secret": SECRET}, **kw)


def _request(net: Net, msg: IcmpMessage, src=B, dst=A) -> None:
    buf = bytearray(msg.length)
    msg.emit(buf)
    net.b.ipv4.output(src, dst, 1, buf, net.clock.now)


def _exchange(net: Net, msg: IcmpMessage) -> tuple[list[bytes], dict]:
    """A's frames and counter changes for one request from B (run until the reply is back at B)."""
    dev = net.a.device
    sent_before = len(dev.sent)
    before = {k: net.a.stats[k] for k in COUNTED}
    got = net.b.stats["icmp.echo_replies_received"]
    _request(net, msg)
    net.run(lambda: net.b.stats["icmp.echo_replies_received"] > got, 1.0)
    return dev.sent[sent_before:], {k: net.a.stats[k] - before[k] for k in COUNTED}


def _warm(net: Net) -> None:
    """One echo answered by the Python path (ARP resolved both ways; the fast path learns B)."""
    _exchange(net, IcmpMessage(8, 0, 1, 0, b"warm"))


@pytest.mark.parametrize("msg", [IcmpMessage(8, 0, 0x1234, 7, b"x" * 56),
                                 IcmpMessage(8, 5, 0xBEEF, 0xFFFF, b"odd"),  # odd length, a non-zero code
                                 IcmpMessage(8, 0, 1, 2, b""),
                                 IcmpMessage(8, 0, 3, 4, bytes(range(256)) * 5 + bytes(192))])  # 1472: the MTU
def test_c_reply_is_the_python_reply_byte_for_byte(msg):
    frames, counts = {}, {}
    for fast in (False, True):
        with _net(fast) as net:
            _warm(net)
            answered = net.a.tcp.flows.echo.answered if fast else 0
            frames[fast], counts[fast] = _exchange(net, msg)
            if fast:
                assert net.a.tcp.flows.echo.answered == answered + 1  # C wrote it
    assert frames[True] == frames[False]
    assert len(frames[True]) == 1
    reply = IcmpMessage.parse(frames[True][0][34:])
    assert (reply.type, reply.code, reply.ident, reply.seq, reply.payload) == (0, 0, msg.ident, msg.seq,
                                                                               msg.payload)
    assert counts[True] == counts[False] == {"icmp.echo_requests_received": 1, "icmp.echo_replies_sent": 1,
                                             "ipv4.packets_sent": 1, "eth.frames_sent": 1,
                                             "eth.frames_received": 1}


def test_ip_ids_follow_one_counter_across_both_paths():
    """Python reply, C replies, Python again after the ARP entry changed: IDs advance by one each."""
    with _net(True) as net:
        _warm(net)
        frames = []
        for seq in range(3):
            frames += _exchange(net, IcmpMessage(8, 0, 9, seq, b"id"))[0]
        net.a.arp.gen.bump()  # as an ARP update does: the template is stale, Python answers and relearns
        answered = net.a.tcp.flows.echo.answered
        frames += _exchange(net, IcmpMessage(8, 0, 9, 3, b"id"))[0]
        assert net.a.tcp.flows.echo.answered == answered
        frames += _exchange(net, IcmpMessage(8, 0, 9, 4, b"id"))[0]
        assert net.a.tcp.flows.echo.answered == answered + 1
    ids = [int.from_bytes(f[18:20], "big") for f in frames]
    assert ids == [(ids[0] + i) & 0xFFFF for i in range(5)]


def test_first_request_goes_to_python_and_teaches_the_source():
    with _net(True) as net:
        echo = net.a.tcp.flows.echo
        assert echo.sources == []
        _warm(net)
        assert echo.answered == 0 and echo.sources == [B]


def test_expired_arp_entry_sends_the_request_to_python():
    with _net(True) as net:
        _warm(net)
        echo = net.a.tcp.flows.echo
        entry = net.a.arp.cache[B]
        net.clock.advance(entry[1] - net.clock.now + 0.001)  # past the entry's expiry
        answered = echo.answered
        frames, counts = _exchange(net, IcmpMessage(8, 0, 5, 5, b"late"))
        assert echo.answered == answered
        assert counts["icmp.echo_replies_sent"] == 1  # Python answered (and refreshed the neighbour)


@pytest.mark.parametrize("msg, dst, drop", [
    (IcmpMessage(8, 0, 6, 6, b"bcast"), "198.18.0.255", "drop.icmp.broadcast_echo_ignored"),
    (IcmpMessage(13, 0, 1, 1, bytes(12)), None, "drop.icmp.unsupported_type"),  # a timestamp request
], ids=["broadcast-echo", "other-type"])
def test_what_c_does_not_answer_goes_to_python_and_its_drop(msg, dst, drop):
    """A broadcast echo request and other ICMP types are not the C path's: Python drops them, named."""
    with _net(True) as net:
        _warm(net)
        _request(net, msg, **({"dst": ip_addr(dst)} if dst else {}))
        net.run(max_time=0.5)
        assert net.a.stats[drop] == 1
        assert net.a.tcp.flows.echo.answered == 0


def test_sources_are_capped_oldest_replaced_and_counted():
    with _net(True) as net:
        _warm(net)
        echo = net.a.tcp.flows.echo
        cap = echo.capacity
        template = net.a.ipv4.echo_template(A, B, net.clock.now)
        # learn cap more sources (templates toward made-up neighbours of the same segment)
        for i in range(cap):
            peer = ip_addr(f"198.18.0.{10 + i}")
            net.a.arp.cache[peer] = (b"\x02\0\0\0\0" + bytes([i]), net.clock.now + 60)
            echo.learn(net.a.ipv4.echo_template(A, peer, net.clock.now))
        assert len(echo.sources) == cap and B not in echo.sources
        assert net.a.stats["icmp.echo_fast_replaced"] == 1
        assert echo.sources[0] == ip_addr("198.18.0.10")
        echo.learn(template)
        assert echo.sources[-1] == B and ip_addr("198.18.0.10") not in echo.sources
        assert net.a.stats["icmp.echo_fast_replaced"] == 2


def test_template_rejects_a_header_that_is_not_ipv4_icmp():
    from ustack import _fastpath

    with _net(True) as net:
        good = net.a.ipv4.echo_template(A, B, net.clock.now)
        assert good is None or good.peer == B
        _warm(net)
        good = net.a.ipv4.echo_template(A, B, net.clock.now)
        assert (good.local, good.peer) == (A, B)
        bad = bytearray(good.header)
        bad[23] = 6
        with pytest.raises(ValueError):
            _fastpath.EchoTemplate(bytes(bad), good.gen, 0.0, 1500, [0], 0)
        with pytest.raises(ValueError):
            _fastpath.EchoTemplate(good.header, good.gen, 0.0, 1500, [0], 1)
