"""The one-copy buffers and the lending bound: SendBuffer as a ring with reservations, ReceiveBuffer
chunks that are views into held RX frames, RxHold's bound and reclaim (no network: a fake device)."""

from __future__ import annotations

import pytest

from ustack.rxhold import RxHold
from ustack.stats import Stats
from ustack.transport.tcp.recvbuf import LentViews, ReceiveBuffer
from ustack.transport.tcp.sendbuf import SendBuffer


# -- send buffer: a ring --------------------------------------------------------

def test_send_ring_wraps_and_peek_lends_views():
    sb = SendBuffer(10)
    assert sb.write(b"abcdefgh") == 8
    sb.acknowledge(6)
    assert sb.write(b"ijklmnop") == 8 and sb.free == 0  # wraps the ring's end
    p = sb.peek(0, 4)
    assert isinstance(p, memoryview) and p == b"ghij"  # contiguous: a view, no copy
    assert sb.peek(2, 5) == b"ijklm" and isinstance(sb.peek(2, 5), bytes)  # wraps: joined
    assert sb.peek(9, 5) == b"p" and sb.peek(10, 1) == b""
    sb.acknowledge(10)
    assert len(sb) == 0 and sb.free == 10


def test_send_reserve_commit_queues_without_copy():
    sb = SendBuffer(16)
    sb.write(b"0123456789")
    sb.acknowledge(8)  # head at 8, 2 queued: the free space runs to the ring's end (6), then wraps
    v = sb.reserve(100)
    assert len(v) == 6  # contiguous only
    v[:6] = b"ABCDEF"
    with pytest.raises(BufferError):
        sb.write(b"x")  # one writer at a time
    with pytest.raises(BufferError):
        sb.reserve(1)
    assert sb.commit(4) == 4 and len(sb) == 6
    with pytest.raises(ValueError):
        v[0]  # released on commit
    assert sb.peek(0, 6) == b"89ABCD"
    w = sb.reserve(100)
    assert len(w) == 2  # the rest of the ring's end
    w[:2] = b"xy"
    sb.commit(2)
    w = sb.reserve(100)
    assert len(w) == 8  # wrapped: from the ring's start up to the head
    w[:3] = b"xyz"
    with pytest.raises(ValueError):
        sb.commit(9)
    sb.commit(3)
    assert sb.peek(0, 11) == b"89ABCDxyxyz"
    sb.reserve(2)
    sb.cancel()
    assert len(sb) == 11 and sb.reserved == 0
    with pytest.raises(BufferError):
        sb.commit(1)


def test_acknowledging_everything_while_a_reservation_is_out_keeps_it_where_it_was_lent():
    # The application writes into its reservation without the stack's lock; meanwhile the peer may
    # acknowledge every queued byte. The empty ring must not restart at its beginning under the view
    # (found by the kernel test over TAP: a stretch of the stream sent from stale ring bytes).
    sb = SendBuffer(16)
    sb.write(b"0123456789")
    v = sb.reserve(4)
    sb.acknowledge(10)
    assert len(sb) == 0
    v[:4] = b"WXYZ"
    assert sb.commit(4) == 4
    assert sb.peek(0, 4) == b"WXYZ"
    sb.acknowledge(4)
    assert len(sb.reserve(100)) == 16  # empty and nothing lent: the whole ring again, from its start


def test_send_ring_capacity_change_keeps_order_and_old_views():
    sb = SendBuffer(8)
    sb.write(b"abcdef")
    sb.acknowledge(4)
    sb.write(b"ghijkl")  # wraps
    old = sb.peek(0, 2)
    sb.capacity = 32
    assert sb.write(b"mn") == 2
    assert sb.peek(0, 10) == b"efghijklmn" and old == b"ef"
    full = SendBuffer(4)
    assert len(full.reserve(4)) == 4 and full.commit(4) == 4
    assert len(full.reserve(1)) == 0  # full: an empty view
    full.cancel()


# -- receive buffer over held frames ----------------------------------------------

class FakeDevice:
    def __init__(self):
        self.released = []

    def rx_release(self, frames):
        self.released.extend(frames)


def held_buffer(limit=4, capacity=1000):
    dev = FakeDevice()
    stats = Stats()
    hold = RxHold(dev.rx_release, limit, stats)
    rb = ReceiveBuffer(capacity)
    rb.hold = hold
    return dev, hold, rb, stats


def deliver(hold, rb, frame: bytearray, start: int):
    """As Stack.poll + the fast path: ``frame`` is current, its payload from ``start`` is appended."""
    hold.in_round = True
    hold.current = frame_view = memoryview(frame)
    rb.append(frame_view[start:])
    hold.current = None
    hold.in_round = False
    hold.release(hold.unheld([frame_view]))  # the end of the round: the frames nobody holds go back
    return frame_view


def test_chunks_are_views_into_held_frames_and_read_copies_once():
    dev, hold, rb, _ = held_buffer()
    f1 = bytearray(b"HDRabcdef")
    v1 = deliver(hold, rb, f1, 3)
    assert dev.released == [] and hold.held == 1  # kept past the round
    f1[3] = ord("X")  # the chunk is the frame's memory: no copy was made
    assert rb.peek(3) == b"Xbc"
    v2 = deliver(hold, rb, bytearray(b"HDRghi"), 3)
    buf = bytearray(4)
    assert rb.read_into(buf) == 4 and buf == b"Xbcd"
    assert dev.released == [] and rb.held == 2  # f1 still has "ef"
    assert rb.read(10) == b"efghi"
    assert dev.released == [v1, v2] and hold.held == 0 and rb.held == 0 and len(rb) == 0


def test_lend_keeps_frames_and_window_until_unlend():
    dev, hold, rb, _ = held_buffer(capacity=100)
    v1 = deliver(hold, rb, bytearray(b"..0123456789"), 2)
    views, frames, n = rb.lend(4)  # splits the chunk: the frame now has two holders
    assert n == 4 and [bytes(v) for v in views] == [b"0123"] and [f.frame for f in frames] == [v1]
    assert len(rb) == 6 and rb.lent == 4 and rb.free == 90
    assert rb.read(6) == b"456789" and dev.released == []  # the lent part still holds the frame
    assert rb.free == 96
    for v in views:
        v.release()  # as LentViews.release: a view still alive would keep the frame (test_lent_views_outlive)
    rb.unlend(4, frames)
    assert dev.released == [v1] and rb.free == 100 and rb.held == 0


def test_bound_reclaims_then_copies():
    dev, hold, rb, stats = held_buffer(limit=2)
    other = ReceiveBuffer(1000)
    other.hold = hold
    a = deliver(hold, rb, bytearray(b"--aa"), 2)
    b = deliver(hold, other, bytearray(b"--bb"), 2)
    lent = other.lend(2)  # b's frame now belongs to the application: cannot be taken back
    c = deliver(hold, rb, bytearray(b"--cc"), 2)
    # the bound was reached: rb copied its held bytes out (a returned), c is held in its place
    assert stats["rx_hold.reclaims"] == 1 and a in dev.released and hold.held == 2
    d = deliver(hold, rb, bytearray(b"--dd"), 2)  # reclaim frees c, d is held
    e = deliver(hold, rb, bytearray(b"--ee"), 2)
    assert c in dev.released and d in dev.released
    assert hold.held == 2 and rb.read(100) == b"aaccddee"
    for v in lent[0]:
        v.release()
    other.unlend(lent[2], lent[1])
    assert b in dev.released and e in dev.released and hold.held == 0
    hold.limit = 0
    f = deliver(hold, rb, bytearray(b"--ff"), 2)
    assert stats["rx_hold.copied"] == 1 and hold.held == 0 and f in dev.released and rb.read(2) == b"ff"


def test_clear_and_copy_out_return_frames_and_keep_bytes():
    dev, hold, rb, _ = held_buffer()
    f = deliver(hold, rb, bytearray(b"--xyz"), 2)
    rb.copy_out()
    assert dev.released == [f] and rb.read(3) == b"xyz"
    g = deliver(hold, rb, bytearray(b"--q"), 2)
    rb.clear()
    assert g in dev.released and hold.held == 0 and len(rb) == 0


def test_no_current_frame_means_a_copy():
    dev, hold, rb, _ = held_buffer()
    data = bytearray(b"abc")
    rb.append(memoryview(data))
    data[0] = ord("Z")
    assert rb.read(3) == b"abc" and hold.held == 0


def test_lent_views_release_once():
    given = []
    lv = LentViews([memoryview(b"ab"), memoryview(b"cd")], [], 4, given.append)
    with lv as got:
        assert got.tobytes() == b"abcd" and len(got) == 4
    assert given == [lv] and lv.released
    lv.release()
    assert given == [lv]
    with pytest.raises(ValueError):
        bytes(lv.views[0])


def test_chunk_queue_wraps_and_grows_in_order():
    """The C queue's ring of chunks: wrapped, then grown, the bytes come out in order (with lends between)."""
    dev, hold, rb, _ = held_buffer(limit=1000, capacity=1 << 20)
    expect = bytearray()
    out = bytearray()
    lent = []
    for i in range(300):
        piece = bytes([i % 251]) * (i % 7 + 1)
        deliver(hold, rb, bytearray(b"--" + piece), 2)
        expect += piece
        if i % 3 == 0:
            out += rb.read(5)  # partial chunks, the ring's head moves, so later pushes wrap
        if i % 50 == 49:
            views, frames, n = rb.lend(9)
            out += b"".join(views)
            for v in views:
                v.release()
            lent.append((n, frames))
    buf = bytearray(len(expect))
    out += buf[:rb.read_into(buf)]
    assert out == expect and len(rb) == 0
    for n, frames in lent:
        rb.unlend(n, frames)
    assert hold.held == 0 and rb.held == 0 and len(dev.released) == 300


def test_frame_held_and_read_within_its_round_goes_back_once():
    """A reader called back inside the round (on_event) frees a frame of the burst being delivered:
    it goes back with the burst exactly once (twice would return a ring slot or block still in use)."""
    dev, hold, rb, _ = held_buffer()
    burst = [memoryview(bytearray(b"--abc")), memoryview(bytearray(b"--def"))]
    hold.in_round = True
    for f in burst:
        hold.at(f)
        rb.append(f[2:])
    assert rb.read(4) == b"abcd" and hold.held == 1  # the first frame freed during the round
    hold.at(None)
    hold.in_round = False
    out = hold.unheld(burst)
    assert out == [burst[0]]
    assert rb.read(2) == b"ef" and dev.released == [burst[1]]
