"""Opening: active and passive open, option negotiation, SYN-SENT and SYN-RECEIVED rules,
simultaneous open, SYN/SYN-ACK retransmission, closed ports, backlog and SYN cookies."""

from __future__ import annotations

import errno

import pytest

from tests.tcp.harness import LOCAL, PEER, Harness, Peer
from ustack.transport.tcp import State
from ustack.transport.tcp.seq import seq_add


def test_active_open_offers_and_negotiates_options():
    h = Harness(mtu=1400, window_scaling=True, timestamps=True, sack=True, rcvbuf=256 * 1024)
    conn = h.layer.connect(None, (PEER, 5000), h.now)
    assert conn.state == State.SYN_SENT
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S", ack=0, win=65535, mss=1360, wscale=7, sack_permitted=True)  # covers rcvbuf_max (6 MiB)
    assert syn.seq == conn.tcb.iss and syn.timestamps[1] == 0
    h.peer.snd_nxt = 7000
    h.peer.send(flags="SA", ack=syn.seq + 1, win=1000, mss=1460, wscale=7, sack_perm=True, ts=(555, syn.timestamps[0]))
    ack = h.peer.expect(flags="A", seq=syn.seq + 1, ack=7001, win=(256 * 1024) >> 7)
    assert ack.timestamps[1] == 555 and ack.mss is None and ack.wscale is None
    info = conn.info()
    assert conn.state == State.ESTABLISHED
    assert (info.snd_mss, info.snd_wscale, info.rcv_wscale, info.timestamps, info.sack) == (1348, 7, 7, True, True)
    assert info.snd_wnd == 1000  # the window of a SYN-ACK is not scaled
    h.peer.send(flags="A", win=100, ts=(556, ack.timestamps[0]))
    assert conn.tcb.snd_wnd == 100 << 7
    conn.send(b"x" * 3000, now=h.now)
    # Segments of the negotiated size; Minshall's Nagle lets the short tail go at once.
    assert [len(s.payload) for s in h.drain()] == [1348, 1348, 304]
    conn.send(b"y" * 10, now=h.now)
    h.peer.expect_nothing()  # an earlier short segment (the 304) is unacknowledged
    h.peer.send(flags="A", win=100, ts=(557, ack.timestamps[0]))
    h.peer.expect(flags="PA", length=10)


def test_peer_without_options_gets_none():
    h = Harness(window_scaling=True, timestamps=True, sack=True, rcvbuf=256 * 1024)
    conn = h.layer.connect(None, (PEER, 5000), h.now)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S", wscale=7)
    h.peer.send(flags="SA", ack=syn.seq + 1, win=5000)  # no options at all
    h.peer.expect(flags="A", win=65535, timestamps=None, sack_blocks=())  # unscaled, capped at 65535
    info = conn.info()
    assert (info.snd_mss, info.snd_wscale, info.rcv_wscale, info.timestamps, info.sack) == (536, 0, 0, False, False)


@pytest.mark.parametrize("mtu,clamp,want", [(9000, 0, 8960), (1500, 1000, 1000), (576, 0, 536)])
def test_mss_option_follows_route_mtu_and_clamp(mtu, clamp, want):
    h = Harness(mtu=mtu, mss=clamp)
    h.layer.connect(None, (PEER, 5000), h.now)
    h.peer.expect(flags="S", mss=want)


def test_syn_sent_unacceptable_ack_gets_reset():
    h = Harness()
    conn = h.layer.connect(None, (PEER, 5000), h.now)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S")
    for bad in (syn.seq, syn.seq + 2, syn.seq - 100):
        h.peer.send(flags="SA", seq=1000, ack=bad, advance=False)
        h.peer.expect(flags="R", seq=bad, ack=0)
    h.peer.send(flags="RA", seq=1000, ack=syn.seq + 5, advance=False)  # a RST with a bad ACK: dropped
    h.peer.expect_nothing()
    assert conn.state == State.SYN_SENT and h.stats["drop.tcp.bad_ack"] == 4


def test_syn_sent_reset_refuses():
    h = Harness()
    conn = h.layer.connect(None, (PEER, 5000), h.now)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S")
    h.peer.send(flags="R", seq=0, ack=0)  # no ACK: ignored
    assert conn.state == State.SYN_SENT
    h.peer.send(flags="RA", seq=0, ack=syn.seq + 1)
    assert conn.state == State.CLOSED and conn.key not in h.layer.connections
    assert conn.readable and conn.writable
    with pytest.raises(ConnectionRefusedError):
        conn.recv(10)
    assert conn.recv(10) == b""  # reported once
    with pytest.raises(BrokenPipeError):
        conn.send(b"x")
    h.peer.expect_nothing()
    assert not h.timers.next_deadline()


def test_syn_retransmission_backoff_then_timeout():
    h = Harness(syn_retries=3)
    conn = h.layer.connect(None, (PEER, 5000), h.now)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S")
    for gap in (1.0, 2.0, 4.0):
        assert h.fire_next() == pytest.approx(gap)
        h.peer.expect(flags="S", seq=syn.seq)
    assert h.fire_next() == pytest.approx(8.0)
    h.peer.expect_nothing()
    assert conn.state == State.CLOSED
    assert isinstance(conn.error, TimeoutError) and conn.error.errno == errno.ETIMEDOUT
    assert conn.info().retransmits == 3


def test_syn_timeout_raises_rto_to_three_seconds():
    """RFC 6298 5.7: after a SYN timeout the RTO is re-initialised to 3 s once data flows."""
    h = Harness()
    conn = h.layer.connect(None, (PEER, 5000), h.now)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S")
    h.fire_next()
    h.peer.expect(flags="S")
    h.peer.send(flags="SA", ack=syn.seq + 1)
    h.peer.expect(flags="A")
    assert conn.info().rto == 3.0 and conn.info().srtt is None  # Karn: no sample from a retransmitted SYN
    conn.send(b"data", now=h.now)
    h.peer.expect(flags="PA")
    assert h.fire_next() == pytest.approx(3.0)
    h.peer.expect(flags="PA", payload=b"data")


def test_simultaneous_open():
    h = Harness()
    conn = h.layer.connect(None, (PEER, 5000), h.now)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S")
    h.peer.snd_nxt = 3000
    h.peer.send(flags="S", mss=1460)  # the peer's SYN crosses ours
    assert conn.state == State.SYN_RECEIVED
    h.peer.expect(flags="SA", seq=syn.seq, ack=3001, mss=1460)
    h.peer.send(flags="SA", seq=3000, ack=syn.seq + 1, advance=False)  # the peer's SYN-ACK
    assert conn.state == State.ESTABLISHED
    h.peer.expect_nothing()
    conn.send(b"both ways", now=h.now)
    h.peer.expect(flags="PA", seq=syn.seq + 1, ack=3001, payload=b"both ways")


def test_simultaneous_open_completed_by_plain_ack():
    h = Harness()
    conn = h.layer.connect(None, (PEER, 5000), h.now)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S")
    h.peer.snd_nxt = 3000
    h.peer.send(flags="S")
    h.peer.expect(flags="SA")
    h.peer.send(flags="A", ack=syn.seq + 1)
    assert conn.state == State.ESTABLISHED


def test_passive_open_negotiates_what_the_peer_offered():
    h = Harness(window_scaling=True, timestamps=True, sack=True, rcvbuf=256 * 1024)
    lst = h.layer.listen((LOCAL, 80), 5)
    h.peer.send(flags="S", win=29200, mss=1400, wscale=7, sack_perm=True, ts=(100, 0))
    synack = h.peer.expect(flags="SA", ack=1001, win=65535, mss=1460, wscale=7, sack_permitted=True)
    assert synack.timestamps[1] == 100
    assert lst.half_open == 1 and lst.accept() is None and not lst.readable
    h.peer.send(flags="A", ack=synack.seq + 1, win=229, ts=(101, synack.timestamps[0]))
    conn = lst.accept()
    assert conn.state == State.ESTABLISHED and lst.half_open == 0 and lst.accept() is None
    info = conn.info()
    assert (info.snd_mss, info.snd_wscale, info.rcv_wscale, info.timestamps, info.sack) == (1388, 7, 7, True, True)
    assert info.snd_wnd == 229 << 7


def test_passive_open_without_options_offers_none_back():
    h = Harness(window_scaling=True, timestamps=True, sack=True)
    h.layer.listen((LOCAL, 80), 5)
    h.peer.send(flags="S")
    h.peer.expect(flags="SA", mss=1460, wscale=None, sack_permitted=False, timestamps=None)


def test_synack_retransmission_and_retransmitted_syn():
    h = Harness(synack_retries=2)
    lst = h.layer.listen((LOCAL, 80), 5)
    h.peer.send(flags="S")
    synack = h.peer.expect(flags="SA")
    h.peer.send(flags="S", seq=1000, advance=False)  # the peer did not get it: SYN again
    h.peer.expect(flags="SA", seq=synack.seq, ack=1001)
    assert h.fire_next() == pytest.approx(1.0)
    h.peer.expect(flags="SA", seq=synack.seq)
    assert h.fire_next() == pytest.approx(2.0)
    h.peer.expect(flags="SA", seq=synack.seq)
    h.fire_next()  # gives up quietly
    h.peer.expect_nothing()
    assert lst.half_open == 0 and not h.layer.connections and h.stats["tcp.synack_timeouts"] == 1


def test_reset_in_syn_received_returns_to_listen():
    h = Harness()
    lst = h.layer.listen((LOCAL, 80), 5)
    h.peer.send(flags="S")
    h.peer.expect(flags="SA")
    h.peer.send(flags="R", seq=1001)
    assert lst.half_open == 0 and not h.layer.connections
    h.peer.send(flags="S", seq=5000)  # still listening
    h.peer.expect(flags="SA", ack=5001)


def test_bad_ack_in_syn_received_gets_reset():
    h = Harness()
    lst = h.layer.listen((LOCAL, 80), 5)
    h.peer.send(flags="S")
    synack = h.peer.expect(flags="SA")
    h.peer.send(flags="A", ack=synack.seq + 7)
    h.peer.expect(flags="R", seq=synack.seq + 7)
    assert lst.half_open == 1 and lst.accept() is None


def test_closed_port_resets():
    """RFC 9293 3.10.7.1."""
    h = Harness()
    h.peer.send(flags="S", seq=100)
    h.peer.expect(flags="RA", seq=0, ack=101)
    h.peer.send(flags="FPA", seq=200, ack=999, payload=b"abc")
    h.peer.expect(flags="R", seq=999)
    h.peer.send(flags="PU", seq=300, payload=b"abcd")  # no ACK, no SYN
    h.peer.expect(flags="RA", seq=0, ack=304)
    h.peer.send(flags="R", seq=1)
    h.peer.send(flags="RA", seq=1, ack=2)
    h.peer.expect_nothing()
    assert h.stats["drop.tcp.no_socket"] == 5 and h.stats["tcp.out_rsts"] == 3


def test_bad_checksum_is_a_named_drop():
    h = Harness()
    h.layer.listen((LOCAL, 80), 5)
    h.peer.send(flags="S", bad_checksum=True)
    h.peer.expect_nothing()
    assert h.stats.drops() == {"tcp.bad_checksum": 1}
    h.layer.input(PEER, LOCAL, memoryview(b"\x00" * 12), h.now)
    assert h.stats["drop.tcp.truncated"] == 1


def test_listener_on_any_address_and_most_specific_first():
    h = Harness()
    wild = h.layer.listen((b"\0\0\0\0", 80), 5)
    exact = h.layer.listen((LOCAL, 80), 5)
    h.peer.send(flags="S")
    synack = h.peer.expect(flags="SA")
    h.peer.send(flags="A", ack=synack.seq + 1)
    assert exact.accept() is not None and wild.accept() is None
    other = Peer(h, port=6000, local_port=80)
    other.addr = PEER
    h.layer.input(PEER, bytes([198, 18, 0, 9]), memoryview(
        __import__("ustack.wire.tcp", fromlist=["TcpHeader"]).TcpHeader(6000, 80, 1, 0, 2, 1000).to_bytes(
            PEER, bytes([198, 18, 0, 9]))), h.now)
    assert wild.half_open == 1  # another local address: the wildcard listener takes it
    with pytest.raises(OSError):
        h.layer.listen((LOCAL, 80), 5)


def test_accept_queue_bound():
    h = Harness()
    lst = h.layer.listen((LOCAL, 80), 1)
    h.peer.send(flags="S")
    synack = h.peer.expect(flags="SA")
    h.peer.send(flags="A", ack=synack.seq + 1)
    assert lst.pending == 1
    second = Peer(h, port=5001)
    second.send(flags="S")
    h.peer.expect_nothing()  # dropped: the accept queue is full
    assert h.stats["drop.tcp.listen_overflow"] == 1
    lst.accept()
    second.send(flags="S", seq=1000)
    assert h.pop().hdr.flags == 0x12


def test_completing_ack_waits_while_accept_queue_is_full():
    h = Harness(syn_backlog=5)
    lst = h.layer.listen((LOCAL, 80), 1)
    second = Peer(h, port=5001)
    h.peer.send(flags="S")
    synack1 = h.peer.expect(flags="SA")
    second.send(flags="S")
    synack2 = h.pop()
    h.peer.send(flags="A", ack=synack1.seq + 1)
    second.send(flags="A", ack=synack2.seq + 1)  # no room: dropped, stays half-open
    assert lst.pending == 1 and lst.half_open == 1 and h.stats["drop.tcp.accept_queue_full"] == 1
    lst.accept()
    second.send(flags="PA", ack=synack2.seq + 1, payload=b"hi")  # the next segment completes it
    conn = lst.accept()
    assert conn.state == State.ESTABLISHED and conn.recv(10) == b"hi"


def test_syn_cookies_when_the_syn_queue_is_full():
    h = Harness(syn_backlog=1)
    lst = h.layer.listen((LOCAL, 80), 5)
    h.peer.send(flags="S")  # fills the SYN queue
    h.peer.expect(flags="SA")
    assert len(h.layer.connections) == 1
    p2 = Peer(h, port=5001)
    p2.snd_nxt = 9000
    p2.send(flags="S", mss=1400)
    cookie = h.pop()
    assert cookie.flag_str == "SA" and cookie.ack == 9001 and cookie.mss == 1460
    assert len(h.layer.connections) == 1 and lst.half_open == 1  # no state kept
    p2.send(flags="A", ack=cookie.seq + 1)
    conn = lst.accept()
    assert conn is not None and conn.state == State.ESTABLISHED and conn.remote == (PEER, 5001)
    assert conn.info().snd_mss == 1400 and h.stats["tcp.syncookies_accepted"] == 1  # from the MSS table
    assert conn.info().rto == 1.0 and conn.info().srtt is None  # no handshake sample, initial RTO
    p2.send(flags="PA", ack=cookie.seq + 1, payload=b"over a cookie")
    assert conn.recv(100) == b"over a cookie"
    conn.send(b"reply", now=h.now)
    out = h.drain()
    assert out[-1].payload == b"reply" and out[-1].seq == cookie.seq + 1


def test_forged_cookie_ack_is_reset():
    h = Harness(syn_backlog=1)
    lst = h.layer.listen((LOCAL, 80), 5)
    p3 = Peer(h, port=5002)
    p3.send(flags="A", seq=4242, ack=0x12345678)
    r = h.pop()
    assert r.flag_str == "R" and r.seq == 0x12345678
    # no cookie was sent lately: the ACK is not even checked as one (tests/tcp/test_tcp_hostile.py)
    assert lst.accept() is None and h.stats["tcp.syncookie_not_expected"] == 1
    assert h.stats["drop.tcp.listen_bad_ack"] == 1 and h.stats["drop.tcp.syncookie_bad"] == 0
    # a genuine cookie replayed from another port is forged too
    h.peer.send(flags="S")
    h.pop()
    p2 = Peer(h, port=5001)
    p2.send(flags="S", seq=100)
    cookie = h.pop()
    p3.send(flags="A", seq=101, ack=cookie.seq + 1)
    assert h.pop().flag_str == "R" and lst.accept() is None
    # and it expires
    h.advance(200.0)
    p2.send(flags="A", seq=101, ack=cookie.seq + 1)
    assert h.drain()[-1].flag_str == "R" and lst.accept() is None


def test_syn_cookie_keeps_window_scale_and_sack_through_timestamps():
    h = Harness(syn_backlog=1, window_scaling=True, timestamps=True, sack=True, rcvbuf=256 * 1024)
    lst = h.layer.listen((LOCAL, 80), 5)
    h.peer.send(flags="S", ts=(1, 0))
    h.pop()
    p2 = Peer(h, port=5001)
    p2.send(flags="S", seq=100, mss=1460, wscale=6, sack_perm=True, ts=(777, 0))
    cookie = h.pop()
    assert cookie.wscale == 7 and cookie.sack_permitted and cookie.timestamps[1] == 777
    p2.send(flags="A", seq=101, ack=cookie.seq + 1, win=10, ts=(778, cookie.timestamps[0]))
    conn = lst.accept()
    info = conn.info()
    assert (info.snd_wscale, info.rcv_wscale, info.sack, info.timestamps, info.snd_mss) == (6, 7, True, True, 1448)
    assert info.snd_wnd == 10 << 6


def test_ephemeral_ports_are_distinct():
    h = Harness()
    ports = {h.layer.connect(None, (PEER, 5000), h.now).local_port for _ in range(50)}
    assert len(ports) == 50 and all(49152 <= p <= 65535 for p in ports)
    c = h.layer.connect((LOCAL, 4000), (PEER, 5000), h.now)
    assert c.local == (LOCAL, 4000)
    with pytest.raises(OSError):
        h.layer.connect((LOCAL, 4000), (PEER, 5000), h.now)


def test_data_queued_before_established_goes_after_handshake():
    h = Harness()
    conn = h.layer.connect(None, (PEER, 5000), h.now)
    h.peer.local_port = conn.local_port
    assert conn.send(b"early") == 5
    syn = h.peer.expect(flags="S")
    h.peer.expect_nothing()
    h.peer.send(flags="SA", ack=syn.seq + 1)
    h.peer.expect(flags="PA", seq=syn.seq + 1, payload=b"early")  # the ACK rides on the data
    h.peer.expect_nothing()
    assert seq_add(syn.seq, 6) == conn.tcb.snd_nxt
