"""The Cython ring functions (ustack/_fp_ring.pxi) on synthetic rings: no privileges needed.

Rings are built here byte by byte in the <linux/if_packet.h> layouts, valid
and corrupted: a hostile header must stop the walk, never reach outside its
block (TPACKET_V3) or its slot (TPACKET_V2).
"""

from __future__ import annotations

import ctypes
import struct
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ustack import _fastpath as fp

BS = 4096  # block size
MAC = 82  # where the kernel puts the frame for a 14-byte link header
TX_FS = 2048


def put_block(ring: bytearray, block: int, packets, *, status: int = fp.TP_STATUS_USER, first: int = 48) -> None:
    """Write one TPACKET_V3 block: ``packets`` are (frame bytes, tp_status[, tp_len])."""
    base = block * BS
    pos = first
    for i, packet in enumerate(packets):
        data, pstatus = packet[0], packet[1]
        plen = packet[2] if len(packet) > 2 else len(data)
        stride = (MAC + len(data) + 15) & ~15
        nxt = 0 if i == len(packets) - 1 else stride
        struct.pack_into("=IIIIIIHH", ring, base + pos, nxt, 0, 0, len(data), plen, pstatus, MAC, MAC + 14)
        ring[base + pos + MAC : base + pos + MAC + len(data)] = data
        pos += stride
    struct.pack_into("=IIIIII", ring, base, 3, 0, status, len(packets), first, pos)


def status_of(ring, block: int) -> int:
    return struct.unpack_from("=I", ring, block * BS + 8)[0]


def address(view) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def frames_of(ring, block=0, max_frames=64):
    mv = memoryview(ring)
    npkts, first = fp.tpv3_block_open(mv, block * BS, BS)
    frames, statuses = [], []
    result = fp.tpv3_rx_take(mv, block * BS, BS, first, npkts, max_frames, frames, statuses)
    return (npkts, first), result, frames, statuses


def test_walk_a_valid_block_in_two_bursts():
    ring = bytearray(BS * 2)
    payloads = [bytes([i]) * (60 + i) for i in range(3)]
    put_block(ring, 0, [(payloads[0], 1), (payloads[1], 1 | fp.TP_STATUS_CSUM_VALID),
                        (payloads[2], 1 | fp.TP_STATUS_CSUMNOTREADY | fp.TP_STATUS_LOSING)])
    mv = memoryview(ring)
    assert fp.tpv3_block_open(mv, 0, BS) == (3, 48)
    frames, statuses = [], []
    taken, pos, left, truncated, notready, valid, losing = fp.tpv3_rx_take(mv, 0, BS, 48, 3, 2, frames, statuses)
    assert (taken, left, truncated, notready, valid, losing) == (2, 1, 0, 0, 1, 0)
    taken, pos, left, truncated, notready, valid, losing = fp.tpv3_rx_take(mv, 0, BS, pos, left, 64, frames, statuses)
    assert (taken, left, notready, losing) == (1, 0, 1, 1)
    assert [bytes(f) for f in frames] == payloads
    assert statuses == [0, fp.TP_STATUS_CSUM_VALID, fp.TP_STATUS_CSUMNOTREADY | fp.TP_STATUS_LOSING]
    # frames are views into the ring, not copies
    assert address(frames[0]) == address(mv) + 48 + MAC


def test_block_still_owned_by_the_kernel():
    ring = bytearray(BS)
    put_block(ring, 0, [(b"x" * 60, 1)], status=fp.TP_STATUS_KERNEL)
    assert fp.tpv3_block_open(memoryview(ring), 0, BS) == (-1, 0)


@pytest.mark.parametrize("block_off, block_size", [(BS, BS), (-8, BS), (4, BS), (0, 16), (0, BS * 2)])
def test_block_outside_the_buffer(block_off, block_size):
    ring = bytearray(BS)
    put_block(ring, 0, [(b"x" * 60, 1)])
    assert fp.tpv3_block_open(memoryview(ring), block_off, block_size) == (-3, 0)


@pytest.mark.parametrize("first", [0, 47, 50, BS - 47, BS, 0xFFFFFFFF])
def test_corrupt_first_packet_offset(first):
    ring = bytearray(BS)
    put_block(ring, 0, [(b"x" * 60, 1)])
    struct.pack_into("=I", ring, 16, first)
    assert fp.tpv3_block_open(memoryview(ring), 0, BS) == (-2, 0)


def test_corrupt_next_offset_stops_after_the_good_frame():
    ring = bytearray(BS)
    put_block(ring, 0, [(b"a" * 60, 1), (b"b" * 60, 1)])
    struct.pack_into("=I", ring, 48, BS)  # tp_next_offset past the block end
    _, (taken, pos, left, *_), frames, _ = frames_of(ring)
    assert (taken, left) == (1, -1)
    assert bytes(frames[0]) == b"a" * 60


@pytest.mark.parametrize("nxt", [0, 4, 47])
def test_next_offset_that_does_not_advance_is_corrupt(nxt):
    ring = bytearray(BS)
    put_block(ring, 0, [(b"a" * 60, 1), (b"b" * 60, 1)])
    struct.pack_into("=I", ring, 48, nxt)
    _, (taken, pos, left, *_), frames, _ = frames_of(ring)
    assert (taken, left) == (1, -1)


@pytest.mark.parametrize("field, value", [("snaplen", BS), ("snaplen", 0xFFFFFFFF), ("mac", 0), ("mac", 47), ("mac", 0xFFFF)])
def test_frame_reaching_outside_its_block_is_not_lent(field, value):
    ring = bytearray(BS * 2)
    put_block(ring, 0, [(b"a" * 60, 1)])
    if field == "snaplen":
        struct.pack_into("=II", ring, 48 + 12, value, value)
    else:
        struct.pack_into("=H", ring, 48 + 24, value)
    _, (taken, pos, left, *_), frames, _ = frames_of(ring)
    assert (taken, left, frames) == (0, -1, [])


def test_truncated_frame_is_skipped_and_counted():
    ring = bytearray(BS)
    put_block(ring, 0, [(b"a" * 60, 1 | fp.TP_STATUS_COPY, 9000), (b"b" * 60, 1)])
    _, (taken, pos, left, truncated, *_), frames, _ = frames_of(ring)
    assert (taken, left, truncated) == (1, 0, 1)
    assert bytes(frames[0]) == b"b" * 60


def test_release_returns_the_block_when_the_last_reference_goes():
    ring = bytearray(BS * 2)
    put_block(ring, 1, [(b"a" * 60, 1), (b"b" * 60, 1)])
    mv = memoryview(ring)
    refs = array("i", [0, 1])  # the cursor holds block 1
    frames, statuses = [], []
    fp.tpv3_rx_take(mv, BS, BS, 48, 2, 64, frames, statuses)
    refs[1] += len(frames)
    assert fp.tpv3_block_unref(mv, refs, 1, BS) == 0  # cursor leaves; frames still lent
    assert status_of(ring, 1) == fp.TP_STATUS_USER
    assert fp.tpv3_rx_release(mv, frames[:1], BS * 2, BS, refs) == (0, 0)
    assert status_of(ring, 1) == fp.TP_STATUS_USER
    assert fp.tpv3_rx_release(mv, frames[1:], BS * 2, BS, refs) == (1, 0)
    assert status_of(ring, 1) == fp.TP_STATUS_KERNEL
    assert list(refs) == [0, 0]
    # releasing again, or releasing something that is not ours, changes nothing
    assert fp.tpv3_rx_release(mv, frames, BS * 2, BS, refs) == (0, 2)
    assert fp.tpv3_rx_release(mv, [memoryview(bytearray(10)), b"xx"], BS * 2, BS, refs) == (0, 2)
    assert list(refs) == [0, 0]


def test_release_outside_rx_part_of_the_mapping_is_foreign():
    ring = bytearray(BS * 2)
    mv = memoryview(ring)
    refs = array("i", [1])
    # a view into the TX area that follows the RX ring
    assert fp.tpv3_rx_release(mv, [mv[BS + 100 : BS + 160]], BS, BS, refs) == (0, 1)
    assert list(refs) == [1]


def tx_ring(slots=4):
    return bytearray(TX_FS * slots + 4096)


def tx_status(ring, tx_off, i):
    return struct.unpack_from("=I", ring, tx_off + i * TX_FS + 20)[0]


def test_tx_available_post_and_wrap():
    ring = tx_ring()
    mv = memoryview(ring)
    off = 4096
    assert fp.tpv3_tx_available(mv, off, TX_FS, 4, 0, 10) == (4, 0)
    head = fp.tpv3_tx_post(mv, off, TX_FS, 4, 0, [60, 1514, 100], 1514)
    assert head == 3
    assert [tx_status(ring, off, i) for i in range(4)] == [1, 1, 1, 0]
    assert struct.unpack_from("=IIII", ring, off + TX_FS, ) == (0, 0, 0, 1514)
    assert struct.unpack_from("=I", ring, off + TX_FS + 16)[0] == 1514
    assert fp.tpv3_tx_available(mv, off, TX_FS, 4, 3, 10) == (1, 0)  # slot 0 is still the kernel's
    # the kernel sent slots 0 and 1; slot 2 it rejected
    struct.pack_into("=I", ring, off + 20, 0)
    struct.pack_into("=I", ring, off + TX_FS + 20, 0)
    struct.pack_into("=I", ring, off + 2 * TX_FS + 20, fp.TP_STATUS_WRONG_FORMAT)
    assert fp.tpv3_tx_available(mv, off, TX_FS, 4, 3, 10) == (4, 1)
    assert fp.tpv3_tx_post(mv, off, TX_FS, 4, 3, [60, 60], 1514) == 1  # wraps


@pytest.mark.parametrize("lengths", [[60, 13], [60, 1515], [0]])
def test_tx_post_with_a_bad_length_posts_nothing(lengths):
    ring = tx_ring()
    mv = memoryview(ring)
    with pytest.raises(ValueError):
        fp.tpv3_tx_post(mv, 4096, TX_FS, 4, 0, lengths, 1514)
    assert [tx_status(ring, 4096, i) for i in range(4)] == [0, 0, 0, 0]


@pytest.mark.parametrize(
    "tx_off, frame_size, frame_nr, head, max_len",
    [(4096, TX_FS, 5, 0, 1514), (4096, TX_FS, 4, 4, 1514), (4096, 2040, 4, 0, 1514), (4096, TX_FS, 4, 0, TX_FS), (-16, TX_FS, 4, 0, 1514)],
)
def test_tx_geometry_outside_the_buffer_is_refused(tx_off, frame_size, frame_nr, head, max_len):
    mv = memoryview(tx_ring())
    with pytest.raises(ValueError):
        fp.tpv3_tx_post(mv, tx_off, frame_size, frame_nr, head, [60], max_len)
    if max_len <= frame_size - 48:
        with pytest.raises(ValueError):
            fp.tpv3_tx_available(mv, tx_off, frame_size, frame_nr, head, 1)


def u32s():
    """Mostly plausible header values, sometimes anything at all."""
    return st.one_of(st.integers(0, 200), st.integers(0, BS + 64), st.integers(0, 0xFFFFFFFF))


@settings(max_examples=400, deadline=None)
@given(
    headers=st.lists(
        st.tuples(
            st.one_of(st.integers(3, 25).map(lambda k: 16 * k), u32s()),  # tp_next_offset
            u32s(),  # tp_snaplen
            st.one_of(st.just(0), u32s()),  # tp_len (0: never "truncated")
            st.integers(0, 0xFF),  # tp_status
            st.one_of(st.integers(48, 128), st.integers(0, 0xFFFF)),  # tp_mac
        ),
        min_size=1,
        max_size=40,
    ),
    npkts=st.one_of(st.integers(0, 50), st.integers(0, 0xFFFFFFFF)),
    first=st.one_of(st.just(48), u32s()),
    max_frames=st.integers(1, 300),
    noise=st.binary(min_size=0, max_size=256),
)
def test_hostile_block_never_lends_outside_it(headers, npkts, first, max_frames, noise):
    """A hostile header chain in block 1 of 3: every lent frame lies inside block 1, the walk ends."""
    ring = bytearray(b"\xee" * (BS * 3))
    ring[BS + 48 : BS + 48 + len(noise)] = noise
    pos = first
    for nxt, snaplen, plen, status, mac in headers:
        if not 0 <= pos <= BS - 48:
            break
        struct.pack_into("=IIIIIIHH", ring, BS + pos, nxt, 0, 0, snaplen, plen, status, mac, 0)
        pos += nxt
    struct.pack_into("=IIII", ring, BS + 8, fp.TP_STATUS_USER, npkts, first, BS)
    mv = memoryview(ring)
    n, f = fp.tpv3_block_open(mv, BS, BS)
    if n <= 0:
        assert n in (0, -2)
        return
    frames, statuses = [], []
    pos, left = f, n
    for _ in range(BS):  # every call takes at least one packet or ends the block
        taken, pos, left, *_ = fp.tpv3_rx_take(mv, BS, BS, pos, left, max_frames, frames, statuses)
        if left <= 0:
            break
    else:
        raise AssertionError("walk did not end")
    base = address(mv)
    for frame in frames:
        assert len(frame) <= BS
        if len(frame):
            start = address(frame) - base
            assert BS <= start and start + len(frame) <= 2 * BS
    assert len(statuses) == len(frames)


def test_tx_status_reads_one_slot():
    ring = tx_ring()
    mv = memoryview(ring)
    fp.tpv3_tx_post(mv, 4096, TX_FS, 4, 2, [60], 1514)
    assert [fp.tpv3_tx_status(mv, 4096, TX_FS, 4, i) for i in range(4)] == [0, 0, fp.TP_STATUS_SEND_REQUEST, 0]
    with pytest.raises(ValueError):
        fp.tpv3_tx_status(mv, 4096, TX_FS, 4, 4)


# -- TPACKET_V2 RX: fixed slots with a tp_status word each ------------------------

FS2 = 2048  # V2 slot size
MAC2 = 66  # where the kernel puts an Ethernet frame in a V2 slot
USER = fp.TP_STATUS_USER


def put_slot(ring, index: int, data: bytes, status: int = USER, *, plen=None, snaplen=None, mac: int = MAC2) -> None:
    """Write one struct tpacket2_hdr (status, len, snaplen, mac, net) and its frame, as the kernel does."""
    base = index * FS2
    snap = len(data) if snaplen is None else snaplen
    struct.pack_into("=IIIHH", ring, base, status, len(data) if plen is None else plen, snap, mac, (mac + 14) & 0xFFFF)
    if 0 <= mac and base + mac + len(data) <= len(ring):
        ring[base + mac : base + mac + len(data)] = data


def slot_status(ring, index: int) -> int:
    return struct.unpack_from("=I", ring, index * FS2)[0]


def take2(ring, lent, head=0, max_frames=64, nr=None):
    frames, statuses = [], []
    result = fp.tpv2_rx_take(memoryview(ring), FS2, nr or len(lent), head, lent, max_frames, frames, statuses)
    return result, frames, statuses


def test_v2_walk_valid_slots_in_two_bursts():
    ring, lent = bytearray(FS2 * 4), bytearray(4)
    payloads = [bytes([0x41 + i]) * (60 + i) for i in range(3)]
    put_slot(ring, 0, payloads[0])
    put_slot(ring, 1, payloads[1], USER | fp.TP_STATUS_CSUM_VALID)
    put_slot(ring, 2, payloads[2], USER | fp.TP_STATUS_CSUMNOTREADY | fp.TP_STATUS_LOSING)
    mv = memoryview(ring)
    frames, statuses = [], []
    assert fp.tpv2_rx_take(mv, FS2, 4, 0, lent, 2, frames, statuses) == (2, 2, 0, 0, 0, 1, 0)
    assert fp.tpv2_rx_take(mv, FS2, 4, 2, lent, 64, frames, statuses) == (1, 3, 0, 0, 1, 0, 1)
    assert [bytes(f) for f in frames] == payloads
    assert statuses == [0, fp.TP_STATUS_CSUM_VALID, fp.TP_STATUS_CSUMNOTREADY | fp.TP_STATUS_LOSING]
    assert list(lent) == [1, 1, 1, 0]
    # lent slots stay the user's until released; views point into the slots, no copy
    assert [slot_status(ring, i) & USER for i in range(4)] == [1, 1, 1, 0]
    assert [address(f) - address(mv) for f in frames] == [MAC2, FS2 + MAC2, 2 * FS2 + MAC2]
    # slot 3 is still the kernel's: nothing more
    assert fp.tpv2_rx_take(mv, FS2, 4, 3, lent, 64, frames, statuses) == (0, 3, 0, 0, 0, 0, 0)


def test_v2_walk_wraps_round_the_ring():
    ring, lent = bytearray(FS2 * 4), bytearray(4)
    put_slot(ring, 3, b"c" * 60)
    put_slot(ring, 0, b"d" * 60)
    (taken, head, *_), frames, _ = take2(ring, lent, head=3)
    assert (taken, head) == (2, 1)
    assert [bytes(f) for f in frames] == [b"c" * 60, b"d" * 60]


def test_v2_release_in_any_order_never_lets_the_walker_skip():
    ring, lent = bytearray(FS2 * 4), bytearray(4)
    for i in range(4):
        put_slot(ring, i, bytes([i]) * 60)
    (taken, head, *_), frames, _ = take2(ring, lent)
    assert (taken, head) == (4, 0)
    mv = memoryview(ring)
    # out of order: slots 2 and 0 go back, 1 and 3 stay lent (and say TP_STATUS_USER)
    assert fp.tpv2_rx_release(mv, [frames[2], frames[0]], FS2, 4, lent) == (2, 0)
    assert [slot_status(ring, i) for i in range(4)] == [0, USER, 0, USER]
    assert list(lent) == [0, 1, 0, 1]
    assert take2(ring, lent)[0][:2] == (0, 0)  # slot 0 is the kernel's again: nothing new
    # the kernel refills slot 0 (it fills in order), and also -- hostile -- slot 2
    put_slot(ring, 0, b"new0" * 15)
    put_slot(ring, 2, b"new2" * 15)
    (taken, head, *_), again, _ = take2(ring, lent)
    # slot 1 is still lent: the walk stops there, it neither re-lends 1 nor skips to 2
    assert (taken, head) == (1, 1)
    assert [bytes(f) for f in again] == [b"new0" * 15]
    assert bytes(frames[1]) == bytes([1]) * 60 and bytes(frames[3]) == bytes([3]) * 60  # held frames intact
    assert fp.tpv2_rx_release(mv, [frames[1]], FS2, 4, lent) == (1, 0)
    (taken, head, *_), more, _ = take2(ring, lent, head=1)
    assert (taken, head) == (0, 1)  # slot 1 went back to the kernel; slot 2 waits behind it
    put_slot(ring, 1, b"new1" * 15)
    (taken, head, *_), more, _ = take2(ring, lent, head=1)
    assert (taken, head) == (2, 3)  # 1 then 2, in ring order; 3 is still lent
    assert [bytes(f) for f in more] == [b"new1" * 15, b"new2" * 15]
    assert fp.tpv2_rx_release(mv, again + more + [frames[3]], FS2, 4, lent) == (4, 0)
    assert list(lent) == [0, 0, 0, 0] and [slot_status(ring, i) for i in range(4)] == [0, 0, 0, 0]


def test_v2_release_of_foreign_or_twice_released_views_changes_nothing():
    ring, lent = bytearray(FS2 * 5), bytearray(4)  # a fifth slot's worth of bytes past the ring
    put_slot(ring, 0, b"a" * 60)
    (taken, *_), frames, _ = take2(ring, lent)
    mv = memoryview(ring)
    outsiders = [memoryview(bytearray(100)), b"xx", mv[4 * FS2 + 100 : 4 * FS2 + 160], mv[FS2 + 66 : FS2 + 126], 7]
    assert fp.tpv2_rx_release(mv, outsiders, FS2, 4, lent) == (0, 5)
    assert list(lent) == [1, 0, 0, 0] and slot_status(ring, 0) == USER
    assert fp.tpv2_rx_release(mv, frames + frames, FS2, 4, lent) == (1, 1)
    assert list(lent) == [0, 0, 0, 0] and slot_status(ring, 0) == 0


@pytest.mark.parametrize(
    "mac, snaplen",
    [(0, 60), (31, 60), (FS2 - 59, 60), (FS2, 0), (0xFFFF, 60), (MAC2, FS2 - MAC2 + 1), (MAC2, 0xFFFFFFFF)],
)
def test_v2_slot_reaching_outside_itself_is_returned_and_counted(mac, snaplen):
    ring, lent = bytearray(b"\xee" * (FS2 * 4)), bytearray(4)
    put_slot(ring, 0, b"a" * 60, mac=mac, snaplen=snaplen, plen=min(snaplen, 60))
    put_slot(ring, 1, b"b" * 60)
    (taken, head, truncated, corrupt, *_), frames, statuses = take2(ring, lent)
    assert (taken, head, truncated, corrupt) == (1, 2, 0, 1)
    assert [bytes(f) for f in frames] == [b"b" * 60] and len(statuses) == 1
    assert slot_status(ring, 0) == fp.TP_STATUS_KERNEL  # handed straight back
    assert list(lent) == [0, 1, 0, 0]


@pytest.mark.parametrize("status, plen", [(USER, 9000), (USER | fp.TP_STATUS_COPY, 60)])
def test_v2_truncated_frame_is_returned_and_counted(status, plen):
    ring, lent = bytearray(FS2 * 4), bytearray(4)
    put_slot(ring, 0, b"a" * 60, status, plen=plen)
    put_slot(ring, 1, b"b" * 60)
    (taken, head, truncated, corrupt, *_), frames, _ = take2(ring, lent)
    assert (taken, head, truncated, corrupt) == (1, 2, 1, 0)
    assert bytes(frames[0]) == b"b" * 60
    assert slot_status(ring, 0) == fp.TP_STATUS_KERNEL and list(lent) == [0, 1, 0, 0]


def test_v2_one_lap_at_most_even_when_every_slot_is_bad():
    ring, lent = bytearray(FS2 * 4), bytearray(4)
    for i in range(4):
        put_slot(ring, i, b"a" * 60, mac=0)
    (taken, head, truncated, corrupt, *_), frames, _ = take2(ring, lent, head=2)
    assert (taken, head, corrupt, frames) == (0, 2, 4, [])


def test_v2_max_frames_bounds_the_walk():
    ring, lent = bytearray(FS2 * 4), bytearray(4)
    for i in range(4):
        put_slot(ring, i, b"a" * 60)
    assert take2(ring, lent, max_frames=0)[0][:2] == (0, 0)
    assert take2(ring, lent, max_frames=3)[0][:2] == (3, 3)


@pytest.mark.parametrize(
    "frame_size, frame_nr, head, lent_len",
    [(FS2, 5, 0, 5), (FS2 + 8, 4, 0, 4), (16, 4, 0, 4), (FS2, 4, 4, 4), (FS2, 4, -1, 4), (FS2, 4, 0, 3), (FS2, 0, 0, 4)],
)
def test_v2_geometry_outside_the_buffers_is_refused(frame_size, frame_nr, head, lent_len):
    ring = bytearray(FS2 * 4)
    with pytest.raises(ValueError):
        fp.tpv2_rx_take(memoryview(ring), frame_size, frame_nr, head, bytearray(lent_len), 64, [], [])
    if head == 0:
        with pytest.raises(ValueError):
            fp.tpv2_rx_release(memoryview(ring), [], frame_size, frame_nr, bytearray(lent_len))


@settings(max_examples=300, deadline=None)
@given(
    slots=st.lists(
        st.tuples(
            st.one_of(st.integers(0, 0xFF), st.integers(0, 0xFFFFFFFF)),  # tp_status
            u32s(),  # tp_len
            st.one_of(st.integers(0, FS2), u32s()),  # tp_snaplen
            st.one_of(st.just(MAC2), st.integers(0, FS2 + 16), st.integers(0, 0xFFFF)),  # tp_mac
        ),
        min_size=4,
        max_size=4,
    ),
    head=st.integers(0, 3),
    max_frames=st.integers(1, 10),
    pre_lent=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_v2_hostile_slots_never_lend_outside_them(slots, head, max_frames, pre_lent):
    """Hostile headers in the 4 slots of a ring inside a larger buffer: every
    lent frame lies inside its own slot after the header, no slot is lent
    twice, the walk ends, and releasing everything hands the slots back."""
    buf = bytearray(b"\xee" * (FS2 * 6))
    ring = memoryview(buf)[FS2 : 5 * FS2]  # guard slots either side
    for i, (status, plen, snaplen, mac) in enumerate(slots):
        struct.pack_into("=IIIH", ring, i * FS2, status, plen, snaplen, mac)
    lent = bytearray(1 if x else 0 for x in pre_lent)
    frames, statuses = [], []
    for _ in range(8):
        taken, head, *_ = fp.tpv2_rx_take(ring, FS2, 4, head, lent, max_frames, frames, statuses)
        if taken == 0:
            break
    assert len(statuses) == len(frames) <= 4
    base = address(ring)
    seen = set()
    for frame in frames:
        if len(frame) == 0:
            continue
        start = address(frame) - base
        index = start // FS2
        assert 0 <= index < 4 and index not in seen
        seen.add(index)
        assert start - index * FS2 >= 32 and start + len(frame) <= (index + 1) * FS2
    # releasing every lent view (empty ones too) unmarks exactly the slots this walk lent
    assert fp.tpv2_rx_release(ring, frames, FS2, 4, lent) == (len(frames), 0)
    assert [bool(x) for x in lent] == pre_lent
    assert bytes(buf[:FS2]) == b"\xee" * FS2 and bytes(buf[5 * FS2 :]) == b"\xee" * FS2
