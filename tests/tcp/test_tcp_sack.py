"""SACK at the sender: the scoreboard, and RFC 6675 loss recovery (pipe, NextSeg) driven by a scripted peer;
RFC 3042 limited transmit."""

from __future__ import annotations

from tests.tcp.harness import Harness
from ustack.transport.tcp.scoreboard import Scoreboard

MSS = 1000


# -- scoreboard -----------------------------------------------------------------

def test_scoreboard_merges_slides_and_ignores_bogus_blocks():
    b = Scoreboard()
    una, snd_max = 5000, 15000
    b.update([(6000, 7000)], una, snd_max)
    b.update([(8000, 9000), (6500, 8000)], una, snd_max)  # bridges into one run
    assert b.blocks == [[1000, 4000]]
    b.update([(4000, 4500)], una, snd_max)  # below SND.UNA (a D-SACK): ignored
    b.update([(14000, 16000)], una, snd_max)  # beyond SND.MAX: ignored
    b.update([(12000, 11000)], una, snd_max)  # inverted: ignored
    assert b.blocks == [[1000, 4000]] and b.sacked == 3000
    b.advance(2000)
    assert b.blocks == [[0, 2000]]
    b.advance(2500)
    assert b.blocks == []


def test_holes_and_is_lost():
    b = Scoreboard()
    b.blocks = [[1000, 2000], [3000, 5000], [6000, 7000]]
    holes = b.holes(MSS)
    # the first hole has 4000 SACKed above it (> 2 MSS) and 3 runs: lost;
    # the second has 3000 above (> 2 MSS): lost; the third only 1000: not lost
    assert holes == [(0, 1000, True), (2000, 3000, True), (5000, 6000, False)]
    assert b.tail(10000) == (7000, 10000) and b.tail(7000) is None


# -- scripted recovery -------------------------------------------------------------

def sack_established(**cfg):
    cfg.setdefault("loss_recovery", "rfc6675")  # this file is about RFC 6675 (RACK-TLP: test_tcp_rack.py)
    h = Harness(delayed_ack=False, sack=True, **cfg)
    conn = h.layer.connect(None, (h.peer.addr, h.peer.port), h.now)
    h.peer.local_port = conn.local_port
    syn = h.peer.expect(flags="S", sack_permitted=True)
    h.advance(0.1)
    h.peer.send(flags="SA", ack=syn.seq + 1, mss=MSS, sack_perm=True)
    h.peer.expect(flags="A")
    while conn.sender.cc.window < 10 * MSS:  # grow cwnd to 10 segments
        conn.send(b"g" * MSS, now=h.now)
        h.drain()
        h.peer.ack()
    return h, conn


def test_second_hole_retransmitted_without_waiting_for_a_partial_ack():
    # explicitly NewReno: the pipe-against-cwnd steps below are worked with its halving (ssthresh 5 of 10)
    h, conn = sack_established(congestion="newreno")
    conn.send(b"".join(bytes([65 + i]) * MSS for i in range(10)), now=h.now)
    segs = h.drain()
    assert len(segs) == 10
    una = segs[0].seq

    def sack(*ranges):  # segment index ranges [i, j) that arrived
        h.peer.send(flags="A", ack=una, sack=[(una + i * MSS, una + j * MSS) for i, j in ranges], advance=False)

    # segments 0 and 3 are lost
    sack((1, 2))
    sack((1, 3))
    h.peer.expect_nothing()
    sack((1, 3), (4, 5))  # third duplicate ACK: recovery, segment 0 again
    h.peer.expect(flags="A", seq=una, payload=segs[0].payload)
    assert conn.sender.recovery.in_recovery and conn.sender.cc.window == conn.sender.cc.ssthresh == 5 * MSS
    sack((1, 3), (4, 6))
    h.peer.expect_nothing()  # pipe = 1000 (retransmitted) + 1000 (hole 3) + 4000 (tail) > cwnd
    sack((1, 3), (4, 7))  # now 3000 bytes SACKed above hole 3: lost; pipe drops to 4000
    h.peer.expect(flags="A", seq=una + 3 * MSS, payload=segs[3].payload)
    h.peer.expect_nothing()
    sack((1, 3), (4, 8))  # room for one more: no new data, no unSACKed hole left: the rescue (rule 4)
    h.peer.expect(flags="A", seq=una + 9 * MSS, payload=segs[9].payload)
    h.peer.expect_nothing()
    conn.send(b"N" * MSS, now=h.now)
    h.peer.expect_nothing()  # during recovery new data waits for NextSeg
    sack((1, 3), (4, 9))
    h.peer.expect(flags="A", seq=una + 10 * MSS, payload=b"N" * MSS)
    h.peer.send(flags="A", ack=una + 3 * MSS, sack=[(una + 4 * MSS, una + 9 * MSS)], advance=False)  # partial
    h.peer.expect_nothing()  # nothing to do: hole 3 already went again
    h.peer.send(flags="A", ack=una + 11 * MSS, advance=False)
    assert not conn.sender.recovery.in_recovery
    info = conn.info()
    assert info.retransmits == 3 and info.timeouts == 0 and info.fast_retransmits == 1


def test_recovery_starts_when_sack_says_the_first_hole_is_lost():
    """RFC 6675 section 5: IsLost(HighACK + 1) enters recovery without three duplicate ACKs."""
    h, conn = sack_established()
    conn.send(b"x" * 6 * MSS, now=h.now)
    segs = h.drain()
    una = segs[0].seq
    h.peer.send(flags="A", ack=una, sack=[(una + MSS, una + 4 * MSS)], advance=False)  # one ACK, 3000 SACKed
    h.peer.expect(flags="A", seq=una, length=MSS)
    assert conn.sender.recovery.in_recovery and conn.info().dup_acks == 1


def test_advancing_ack_is_no_duplicate_and_a_timeout_recovers_the_tail():
    h, conn = sack_established()
    conn.send(b"t" * 4 * MSS, now=h.now)
    segs = h.drain()
    una = segs[0].seq
    # 0 lost, 1 and 2 arrive, 3 (the tail) lost too
    h.peer.send(flags="A", ack=una, sack=[(una + MSS, una + 2 * MSS)], advance=False)
    h.peer.send(flags="A", ack=una, sack=[(una + MSS, una + 3 * MSS)], advance=False)
    h.peer.expect_nothing()
    h.peer.send(flags="A", ack=una + 3 * MSS, advance=False)  # not a duplicate: no recovery
    h.peer.expect_nothing()
    # a fresh episode: everything but the last segment is acknowledged; a timeout is what saves it
    h.fire_next()
    h.peer.expect(flags="PA", seq=una + 3 * MSS)


def test_timeout_clears_the_scoreboard():
    h, conn = sack_established()
    conn.send(b"y" * 5 * MSS, now=h.now)
    segs = h.drain()
    una = segs[0].seq
    h.peer.send(flags="A", ack=una, sack=[(una + 2 * MSS, una + 3 * MSS)], advance=False)
    assert conn.sender.recovery.board.blocks
    h.fire_next()
    h.peer.expect(flags="A", seq=una)
    assert conn.sender.recovery.board.blocks == [] and not conn.sender.recovery.in_recovery


def test_limited_transmit_sends_new_data_on_the_first_two_duplicates():
    """RFC 3042."""
    h = Harness(delayed_ack=False)
    conn = h.open_active(peer_mss=MSS)
    conn.send(b"L" * 4 * MSS, now=h.now)  # IW = 4 MSS for a 1000-byte MSS
    segs = h.drain()
    assert len(segs) == 4
    conn.send(b"M" * 3 * MSS, now=h.now)
    h.peer.expect_nothing()
    una = segs[0].seq
    h.peer.ack(ack=una)
    h.peer.expect(flags="A", seq=una + 4 * MSS, payload=b"M" * MSS)
    h.peer.ack(ack=una)
    h.peer.expect(flags="A", seq=una + 5 * MSS, payload=b"M" * MSS)
    h.peer.ack(ack=una)  # third: fast retransmit, not more new data
    h.peer.expect(flags="A", seq=una, payload=segs[0].payload)


def test_scoreboard_is_bounded():
    from ustack.transport.tcp.scoreboard import MAX_BLOCKS

    b = Scoreboard()
    for i in range(1, 400):
        b.update([(i * 10, i * 10 + 1)], 0, 100_000)
    assert len(b.blocks) == MAX_BLOCKS and b.blocks[0] == [10, 11]
