"""Less travelled paths: data on a SYN-ACK or on a cookie ACK, SHUT_RD, resets in closing states,
resets during a simultaneous open, segments without ACK, TIME-WAIT reuse by timestamps, knobs."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import pytest

from tests.tcp.harness import LOCAL, PEER, Harness, Peer
from ustack.transport.ports import EPHEMERAL_HIGH, EPHEMERAL_LOW
from ustack.transport.tcp import State
from ustack.wire.tcp import ACK, PSH, SYN, TcpHeader


def test_data_and_fin_on_the_syn_ack():
    h = Harness(delayed_ack=False)
    conn = h.layer.connect(None, (PEER, 5000), h.now)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S")
    h.peer.send(flags="FSA", ack=syn.seq + 1, payload=b"early bird")
    h.peer.expect(flags="A", ack=1001 + 10 + 1)
    assert conn.state == State.CLOSE_WAIT and conn.recv(100) == b"early bird" and conn.eof


def test_data_riding_on_the_cookie_ack():
    h = Harness(syn_backlog=1, delayed_ack=False)
    lst = h.layer.listen((LOCAL, 80), 5)
    h.peer.send(flags="S")
    h.pop()
    p2 = Peer(h, port=5001)
    p2.send(flags="S", seq=100)
    cookie = h.pop()
    p2.send(flags="PA", seq=101, ack=cookie.seq + 1, payload=b"piggyback")
    conn = lst.accept()
    assert conn.recv(100) == b"piggyback"
    assert h.pop().ack == 110


def test_shut_rd_discards_what_arrives_but_keeps_the_window_open():
    h = Harness(delayed_ack=False, rcvbuf=2000)
    conn = h.open_active()
    conn.shutdown(socket.SHUT_RD)
    for _ in range(5):
        h.peer.send(flags="PA", payload=b"x" * 1000)
        h.peer.expect(flags="A", win=2000)
    assert conn.recv(10) == b"" and conn.eof and conn.state == State.ESTABLISHED


@pytest.mark.parametrize("closing_state", ["LAST_ACK", "CLOSING", "TIME_WAIT"])
def test_reset_in_closing_states_closes_without_error(closing_state):
    h = Harness(delayed_ack=False)
    conn = h.open_active()
    if closing_state == "LAST_ACK":
        h.peer.send(flags="FA")
        h.drain()
        conn.close(now=h.now)
        h.drain()
    else:
        conn.close(now=h.now)
        fin = h.peer.expect(flags="FA")
        h.peer.send(flags="FA", ack=fin.seq + (1 if closing_state == "TIME_WAIT" else 0))
        h.drain()
    assert conn.state.name == closing_state
    h.peer.send(flags="R", seq=h.peer.snd_nxt)
    assert conn.state == State.CLOSED and conn.error is None and not h.layer.connections


def test_reset_during_simultaneous_open_refuses():
    h = Harness()
    conn = h.layer.connect(None, (PEER, 5000), h.now)
    h.peer.local_port = conn.local_port
    h.peer.expect(flags="S")
    h.peer.send(flags="S", seq=3000)
    h.peer.expect(flags="SA")
    h.peer.send(flags="R", seq=3001)
    assert conn.state == State.CLOSED and isinstance(conn.error, ConnectionRefusedError)


def test_segment_without_ack_is_dropped():
    h = Harness(delayed_ack=False)
    conn = h.open_active()
    h.peer.send(flags="P", payload=b"no ack bit", advance=False)
    h.peer.expect_nothing()
    assert h.stats["drop.tcp.no_ack"] == 1 and len(conn.receiver.rcvbuf) == 0


def test_segment_with_no_syn_in_syn_sent_dropped():
    h = Harness()
    conn = h.layer.connect(None, (PEER, 5000), h.now)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S")
    h.peer.send(flags="A", ack=syn.seq + 1)
    h.peer.expect_nothing()
    assert conn.state == State.SYN_SENT and h.stats["drop.tcp.no_syn"] == 1


def test_time_wait_reuse_decided_by_timestamps():
    h = Harness(delayed_ack=False, timestamps=True)
    lst = h.layer.listen((LOCAL, 80), 5)
    h.peer.send(flags="S", ts=(100, 0))
    synack = h.peer.expect(flags="SA")
    h.peer.use_ts = True
    h.peer.ts_clock = 101
    h.peer.send(flags="A", ack=synack.seq + 1)
    conn = lst.accept()
    conn.close(now=h.now)
    fin = h.peer.expect(flags="FA")
    h.peer.ts_clock = 102
    h.peer.send(flags="FA", ack=fin.seq + 1)
    h.peer.expect(flags="A")
    assert conn.state == State.TIME_WAIT
    h.peer.send(flags="S", seq=10, ts=(200, 0))  # an older ISN, but a newer timestamp: a new incarnation
    h.peer.expect(flags="SA", ack=11)
    assert conn.state == State.CLOSED and lst.half_open == 1


def test_listen_on_port_zero_picks_a_port():
    h = Harness()
    lst = h.layer.listen((LOCAL, 0), 5)
    assert EPHEMERAL_LOW <= lst.local[1] <= EPHEMERAL_HIGH and h.layer.listeners[lst.key] is lst
    lst.close()
    assert not h.layer.listeners


def test_listener_close_resets_pending_connections():
    h = Harness()
    lst = h.layer.listen((LOCAL, 80), 5)
    h.peer.send(flags="S")
    synack = h.peer.expect(flags="SA")
    h.peer.send(flags="A", ack=synack.seq + 1)
    p2 = Peer(h, port=5001)
    p2.send(flags="S")
    h.pop()
    lst.close(h.now)
    resets = h.drain()
    assert sorted(s.dst_port for s in resets) == [5000, 5001] and all(s.flag_str == "RA" for s in resets)
    assert not h.layer.connections and lst.readable
    h.peer.send(flags="S", seq=7000)
    assert h.pop().flag_str == "RA"  # closed port now


def test_configure_knobs_on_a_live_connection():
    h = Harness(delayed_ack=True)
    conn = h.open_active()
    conn.configure(delayed_ack=False, sndbuf=100, congestion="reno", keepalive=True, keepidle=5.0, now=h.now)
    h.peer.send(flags="PA", payload=b"now")
    h.peer.expect(flags="A", ack=1004)  # no delay any more
    assert conn.send(b"y" * 500) == 100
    h.advance(5.5)
    assert any(s.seg_len == 0 for s in h.drain())  # a keepalive probe went out
    with pytest.raises(TypeError):
        conn.configure(no_such_knob=1)
    with pytest.raises(ValueError):
        conn.configure(congestion="bbr9")


def test_configure_copies_the_shared_defaults():
    """connect() without knobs shares the layer's TcpConfig; configure() copies it before changing a knob."""
    h = Harness()
    defaults = h.layer.config
    nodelay = defaults.nodelay
    first = h.layer.connect(None, (PEER, 5000), h.now)
    second = h.layer.connect(None, (PEER, 5001), h.now)
    assert first.config is defaults and second.config is defaults
    first.configure(nodelay=not nodelay, sndbuf=1000)
    assert first.config.nodelay is (not nodelay) and first.config.sndbuf == 1000
    assert defaults.nodelay is nodelay and defaults.sndbuf != 1000
    assert second.config is defaults and second.sender.nodelay is nodelay
    tuned = h.layer.connect(None, (PEER, 5002), h.now, rcvbuf=4096)
    assert tuned.config is not defaults and tuned.config.rcvbuf == 4096 and defaults.rcvbuf != 4096


def test_isn_secret_replaced_on_the_host_is_used():
    """The layer keys its ISN hash once, but a host whose secret is replaced gets ISNs from the new one."""
    from ustack.transport.tcp.isn import initial_sequence_number

    h = Harness()
    conn = h.layer.connect(None, (PEER, 5000), h.now)
    assert conn.tcb.iss == initial_sequence_number(h.host.isn_secret, *conn.key, h.now)
    h.host.isn_secret = bytes(range(50, 66))
    conn = h.layer.connect(None, (PEER, 5001), h.now)
    assert conn.tcb.iss == initial_sequence_number(bytes(range(50, 66)), *conn.key, h.now)


def test_config_validation():
    with pytest.raises(ValueError):
        Harness(delack_timeout=0.6)
    with pytest.raises(TypeError):
        Harness(bogus=True)


# -- ICMP errors (RFC 1122 4.2.3.9, RFC 5927, RFC 1191) ------------------------------------

def _int(addr: bytes) -> int:
    return int.from_bytes(addr, "big")


def test_port_unreachable_aborts_a_connecting_socket():
    h = Harness()
    conn = h.layer.connect(None, (PEER, 5000), h.now)
    h.layer.icmp_error(_int(LOCAL), conn.local_port, _int(PEER), 5000, 3, 3)
    assert conn.state == State.CLOSED and isinstance(conn.error, ConnectionRefusedError)


def test_unreachable_is_soft_once_established():
    h = Harness(delayed_ack=False, max_retries=2)
    conn = h.open_active()
    h.layer.icmp_error(LOCAL, conn.local_port, PEER, 5000, 3, 1)  # host unreachable
    assert conn.state == State.ESTABLISHED
    conn.send(b"x", now=h.now)
    for _ in range(3):
        h.fire_next()
    assert conn.state == State.CLOSED and conn.error.errno == __import__("errno").EHOSTUNREACH


def test_fragmentation_needed_lowers_the_mss_and_resends():
    h = Harness(delayed_ack=False)
    conn = h.open_active()
    conn.send(b"m" * 3000, now=h.now)
    first = h.drain()[0]
    assert len(first.payload) == 1460
    h.layer.icmp_error(LOCAL, conn.local_port, PEER, 5000, 3, 4, 1000, now=h.now)
    h.peer.expect(flags="A", seq=first.seq, length=960)
    assert conn.info().snd_mss == 960
    h.layer.icmp_error(LOCAL, conn.local_port, PEER, 5000, 3, 4, 100, now=h.now)  # absurd: floor 552
    assert conn.info().snd_mss == 512
    h.layer.icmp_error(LOCAL, 1, PEER, 5000, 3, 4, 1000)
    assert h.stats["drop.tcp.icmp_no_connection"] == 1


@dataclass(frozen=True, slots=True)
class Record:
    """A parsed segment that is not a TcpHeader: only the attribute names the engine reads
    (what the fast path's classify will hand over)."""

    src_port: int
    dst_port: int
    seq: int
    ack: int
    flags: int
    window: int
    urgent: int = 0
    header_len: int = 20
    mss: int | None = None
    wscale: int | None = None
    sack_permitted: bool = False
    sack_blocks: tuple = ()
    timestamps: tuple | None = None


def test_segment_arrives_takes_any_record_with_the_header_fields():
    h = Harness(delayed_ack=False)
    lst = h.layer.listen((LOCAL, 80), 5)
    h.layer.segment_arrives(PEER, LOCAL, Record(5000, 80, 41, 0, SYN, 8000, mss=1400), memoryview(b""), h.now)
    synack = h.peer.expect(flags="SA", ack=42, mss=1460)
    h.layer.segment_arrives(PEER, LOCAL, Record(5000, 80, 42, synack.seq + 1, ACK, 8000), memoryview(b""), h.now)
    conn = lst.accept()
    assert conn is not None and conn.state == State.ESTABLISHED and conn.tcb.snd_mss == 1400
    h.layer.segment_arrives(PEER, LOCAL, Record(5000, 80, 42, synack.seq + 1, ACK | PSH, 8000),
                            memoryview(b"hello"), h.now)
    assert conn.recv(100) == b"hello"
    h.peer.expect(flags="A", seq=synack.seq + 1, ack=47)
    h.layer.segment_arrives(PEER, LOCAL, Record(0, 80, 47, synack.seq + 1, ACK, 8000), memoryview(b""), h.now)
    assert h.stats["drop.tcp.bad_port"] == 1 and h.stats["tcp.in_segs"] == 3


def test_input_checksum_ok_skips_the_checksum():
    """The stack passes checksum_ok=True when classify (or the device) verified it already."""
    h = Harness()
    h.layer.listen((LOCAL, 80), 5)
    syn = bytearray(TcpHeader(5000, 80, 41, 0, SYN, 8000).to_bytes(PEER, LOCAL))
    syn[16] ^= 0xFF  # a checksum nobody looks at
    h.layer.input(PEER, LOCAL, memoryview(bytes(syn)), h.now)
    h.peer.expect_nothing()
    assert h.stats["drop.tcp.bad_checksum"] == 1
    h.layer.input(PEER, LOCAL, memoryview(bytes(syn)), h.now, checksum_ok=True)
    h.peer.expect(flags="SA", ack=42)


def test_abort_and_listener_close_empty_the_layer():
    h = Harness()
    lst = h.layer.listen((LOCAL, 80), 5)
    conn = h.open_active()
    lst.close(h.now)
    conn.abort(h.now)
    assert not h.layer.connections and not h.layer.listeners and conn.state == State.CLOSED
    assert h.drain()[-1].flag_str == "RA"


def test_icmp_error_quoting_a_sequence_number_we_never_sent_is_ignored():
    h = Harness()
    conn = h.layer.connect(None, (PEER, 5000), h.now)
    iss = conn.tcb.iss
    h.layer.icmp_error(LOCAL, conn.local_port, PEER, 5000, 3, 3, quoted_seq=iss + 100)
    assert conn.state == State.SYN_SENT and h.stats["drop.tcp.icmp_bad_seq"] == 1
    h.layer.icmp_error(LOCAL, conn.local_port, PEER, 5000, 3, 3, quoted_seq=iss)
    assert conn.state == State.CLOSED
