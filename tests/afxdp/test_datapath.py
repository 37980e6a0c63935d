"""XskDataPath (ustack/_fp_xsk.pxi) against a simulated kernel: no privileges.

The SimKernel (backends/afxdp/sim.py) plays the kernel's side of the four
rings, so these tests check the ring protocol itself: frames lent and taken
back, descriptors validated, multi-buffer gathered and split, completions
recycled, kicks only when the kernel asks for them.
"""

from __future__ import annotations

import os

import pytest

from ustack.backends.afxdp.sim import XDP_PACKET_HEADROOM, XDP_PKT_CONTD, XDP_RING_NEED_WAKEUP, SimKernel


def frame(n: int, seed: int = 0) -> bytes:
    return bytes((seed + i * 7) & 0xFF for i in range(n))


# -- receive ----------------------------------------------------------------------


def test_initial_fill_ring_holds_every_rx_frame():
    sim = SimKernel(num_frames=64)
    assert sim.fill.pending() == 32
    addrs = sim.fill.take_addrs(32)
    assert sorted(addrs) == [i * 4096 for i in range(32)]


def test_rx_lends_exact_bytes_and_release_refills():
    sim = SimKernel()
    data = [frame(60, 1), frame(1514, 2), frame(3840, 3)]  # 3840 = a frame minus headroom
    for f in data:
        assert sim.receive(f)
    fill_before = sim.fill.producer
    got = sim.path.rx_burst(64)
    assert [bytes(g) for g in got] == data
    assert sim.rx.consumer == 3  # consumer index published
    assert sim.path.rx_lent() == 3
    assert sim.fill.producer == fill_before  # nothing returned yet
    sim.path.rx_release(got)
    assert sim.path.rx_lent() == 0
    assert sim.fill.producer == fill_before + 3


def test_rx_views_point_into_umem_at_the_descriptor_address():
    sim = SimKernel()
    sim.receive(b"\xaa" * 100)
    (view,) = sim.path.rx_burst(8)
    sim.umem[XDP_PACKET_HEADROOM] = 0x55  # the first fill address is frame 0
    assert view[0] == 0x55  # a view, not a copy
    sim.path.rx_release([view])


def test_rx_burst_respects_max_and_keeps_the_rest():
    sim = SimKernel()
    for i in range(10):
        sim.receive(frame(64, i))
    first = sim.path.rx_burst(4)
    assert len(first) == 4
    sim.path.rx_release(first)
    rest = sim.path.rx_burst(64)
    assert [bytes(r) for r in rest] == [frame(64, i) for i in range(4, 10)]
    sim.path.rx_release(rest)
    assert sim.path.rx_burst(64) == []


def test_rx_recycles_frames_forever():
    sim = SimKernel(num_frames=16, ring_size=8)
    for i in range(200):
        assert sim.receive(frame(90, i))
        got = sim.path.rx_burst(8)
        assert [bytes(g) for g in got] == [frame(90, i)]
        sim.path.rx_release(got)
    assert sim.path.counters()["rx_packets"] == 200


def test_double_release_is_counted_not_refilled():
    sim = SimKernel()
    sim.receive(frame(60))
    got = sim.path.rx_burst(8)
    sim.path.rx_release(got)
    producer = sim.fill.producer
    sim.path.rx_release(got)
    assert sim.fill.producer == producer
    assert sim.path.counters()["rx_release_unknown"] == 1


def test_release_of_a_foreign_object_is_a_type_error():
    sim = SimKernel()
    with pytest.raises(TypeError):
        sim.path.rx_release([b"not a view"])


@pytest.mark.parametrize(
    "make_desc",
    [
        pytest.param(lambda sim, a: (sim.rx_frames * 4096 + 256, 60, 0), id="addr-in-tx-region"),
        pytest.param(lambda sim, a: (len(sim.umem) + 256, 60, 0), id="addr-beyond-umem"),
        pytest.param(lambda sim, a: (2**63, 60, 0), id="addr-huge"),
        pytest.param(lambda sim, a: (a, 0, 0), id="zero-length"),
        pytest.param(lambda sim, a: (a, 4096 - 256 + 1, 0), id="crosses-frame-end"),
        pytest.param(lambda sim, a: (a, 0xFFFFFFFF, 0), id="length-huge"),
    ],
)
def test_bad_rx_descriptor_is_a_counted_drop(make_desc):
    sim = SimKernel()
    base = sim.fill.take_addrs(1)[0]
    sim.rx.put_descs([make_desc(sim, base + 256)])
    sim.receive(frame(70, 9))  # a good one behind it still arrives
    got = sim.path.rx_burst(8)
    assert [bytes(g) for g in got] == [frame(70, 9)]
    assert sim.path.counters()["rx_bad_desc"] == 1
    sim.path.rx_release(got)


def test_descriptor_for_a_frame_the_kernel_does_not_own_is_dropped():
    sim = SimKernel()
    sim.receive(frame(60))
    (lent,) = sim.path.rx_burst(8)
    # a second descriptor naming the frame we hold: must not be lent twice
    sim.rx.put_descs([(256, 60, 0)])
    assert sim.path.rx_burst(8) == []
    assert sim.path.counters()["rx_bad_desc"] == 1
    sim.path.rx_release([lent])
    assert sim.path.rx_lent() == 0


def test_bogus_producer_index_reads_nothing():
    sim = SimKernel(ring_size=32)
    sim.rx.producer = 1000  # more entries than the ring has
    assert sim.path.rx_burst(64) == []
    assert sim.rx.consumer == 0


def test_rx_bad_desc_frame_goes_back_to_the_fill_ring():
    sim = SimKernel(num_frames=16, ring_size=8)
    for _ in range(20):  # would run out of fill buffers if bad frames leaked
        base = sim.fill.take_addrs(1)[0]
        sim.rx.put_descs([(base + 256, 0, 0)])
        assert sim.path.rx_burst(8) == []
    assert sim.path.counters()["rx_bad_desc"] == 20
    assert sim.fill.pending() == 8


# -- multi-buffer receive ------------------------------------------------------------


def test_multi_buffer_frame_is_gathered_into_one():
    sim = SimKernel(sg=True)
    jumbo = frame(9014, 5)
    assert sim.receive(jumbo)
    assert sim.rx.pending() == 3  # 3840 + 3840 + 1334
    sim.receive(frame(60, 6))
    got = sim.path.rx_burst(64)
    assert [bytes(g) for g in got] == [jumbo, frame(60, 6)]
    counters = sim.path.counters()
    assert counters["rx_multi_buffer"] == 1 and counters["rx_packets"] == 2
    # the pieces went back to the fill ring at once (they were copied)
    assert sim.path.rx_lent() == 1
    sim.path.rx_release(got)
    assert sim.path.rx_lent() == 0
    assert sim.fill.pending() == 32 - len(sim.spare)


def test_incomplete_multi_buffer_frame_waits_for_its_end():
    sim = SimKernel(sg=True)
    addrs = sim.fill.take_addrs(2)
    first = frame(3840, 1)
    sim.umem[addrs[0] + 256:addrs[0] + 256 + 3840] = first
    sim.rx.put_descs([(addrs[0] + 256, 3840, XDP_PKT_CONTD)])
    assert sim.path.rx_burst(8) == []
    assert sim.rx.consumer == 0  # not consumed
    sim.umem[addrs[1] + 256:addrs[1] + 256 + 10] = b"0123456789"
    sim.rx.put_descs([(addrs[1] + 256, 10, 0)])
    (got,) = sim.path.rx_burst(8)
    assert bytes(got) == first + b"0123456789"
    sim.path.rx_release([got])


def test_multi_buffer_frame_with_a_bad_piece_is_dropped_whole():
    sim = SimKernel(sg=True)
    a, b = sim.fill.take_addrs(2)
    sim.rx.put_descs([(a + 256, 3840, XDP_PKT_CONTD), (b + 256, 5000, 0)])
    assert sim.path.rx_burst(8) == []
    assert sim.path.counters()["rx_bad_desc"] == 1
    assert sim.rx.consumer == 2
    assert sim.fill.pending() == 32  # both frames back


def test_multi_buffer_frame_beyond_max_frame_is_dropped():
    sim = SimKernel(sg=True, max_frame=5000)
    assert sim.receive(frame(6000))
    assert sim.path.rx_burst(8) == []
    assert sim.path.counters()["rx_oversize"] == 1


# -- transmit ---------------------------------------------------------------------


def test_tx_reserve_commit_posts_exact_frames():
    sim = SimKernel()
    slots = sim.path.tx_reserve(3)
    assert len(slots) == 3 and all(len(s) == 4096 and not s.readonly for s in slots)
    data = [frame(60, 1), frame(1514, 2), frame(4096, 3)]
    for s, d in zip(slots, data):
        s[: len(d)] = d
    sim.path.tx_commit([len(d) for d in data])
    assert sim.transmit() == data
    assert all(opts == 0 for _, _, opts in sim.last_tx_descs)
    # TX addresses lie in the TX half of the UMEM, never in the RX frames
    assert all(addr >= sim.rx_frames * 4096 for addr, _, _ in sim.last_tx_descs)


def test_uncommitted_slots_return_and_completions_recycle():
    sim = SimKernel(num_frames=16, ring_size=8)  # 8 TX slots
    slots = sim.path.tx_reserve(100)
    assert len(slots) == 8
    assert sim.path.tx_reserve(1) == []
    sim.path.tx_commit([60, 60])  # 2 posted, 6 returned
    assert sim.path.tx_in_flight() == 2
    assert len(sim.path.tx_reserve(100)) == 6
    sim.path.tx_commit([])
    sim.transmit(complete=True)
    assert len(sim.path.tx_reserve(100)) == 8  # completions reaped on reserve
    sim.path.tx_commit([])


def test_tx_slots_are_not_reused_before_completion():
    sim = SimKernel(num_frames=16, ring_size=8)
    for s in sim.path.tx_reserve(8):
        s[:4] = b"keep"
    sim.path.tx_commit([4] * 8)
    sim.transmit(complete=False)
    assert sim.path.tx_reserve(8) == []
    sim.comp.put_addrs([a for a, _, _ in sim.last_tx_descs[:3]])
    assert len(sim.path.tx_reserve(8)) == 3
    sim.path.tx_commit([])


def test_tx_reserve_is_limited_by_tx_ring_space():
    sim = SimKernel(num_frames=64, ring_size=8)  # 32 slots, 8 ring entries
    first = sim.path.tx_reserve(32)
    assert len(first) == 8
    sim.path.tx_commit([60] * 8)
    assert sim.path.tx_reserve(32) == []  # the kernel has not consumed anything
    sim.transmit()
    assert len(sim.path.tx_reserve(32)) == 8
    sim.path.tx_commit([])


def test_tx_commit_validates_lengths_before_posting():
    sim = SimKernel()
    sim.path.tx_reserve(2)
    with pytest.raises(ValueError):
        sim.path.tx_commit([60, 4097])
    with pytest.raises(ValueError):
        sim.path.tx_commit([0])
    with pytest.raises(ValueError):
        sim.path.tx_commit([60, 60, 60])  # more than reserved
    assert sim.tx.producer == 0
    sim.path.tx_commit([60])
    assert len(sim.transmit()) == 1


def test_jumbo_tx_is_split_across_descriptors():
    sim = SimKernel(num_frames=64, slot_frames=3, sg=True)
    (slot,) = sim.path.tx_reserve(1)
    assert len(slot) == 3 * 4096
    jumbo = frame(9014, 4)
    slot[: len(jumbo)] = jumbo
    sim.path.tx_commit([len(jumbo)])
    assert sim.transmit(complete=False) == [jumbo]
    descs = sim.last_tx_descs
    assert [(d[1], d[2]) for d in descs] == [(4096, XDP_PKT_CONTD), (4096, XDP_PKT_CONTD), (822, 0)]
    assert [d[0] - descs[0][0] for d in descs] == [0, 4096, 8192]
    # the slot comes back only when all three pieces completed
    free_before = sim.path.tx_slots - sim.path.tx_in_flight()
    sim.comp.put_addrs([descs[0][0], descs[1][0]])
    sim.path.flush()
    assert sim.path.tx_in_flight() == 1
    sim.comp.put_addrs([descs[2][0]])
    sim.path.flush()
    assert sim.path.tx_in_flight() == 0
    assert sim.path.tx_slots - sim.path.tx_in_flight() == free_before + 1


def test_bad_completions_are_counted():
    sim = SimKernel()
    sim.comp.put_addrs([0, len(sim.umem) + 4096, sim.rx_frames * 4096])  # RX frame, beyond, never sent
    sim.path.flush()
    assert sim.path.counters()["tx_bad_completion"] == 3
    assert sim.comp.pending() == 0  # consumed anyway


# -- wakeups ----------------------------------------------------------------------


def test_tx_kick_only_when_the_kernel_asks():
    sim = SimKernel()
    sim.path.tx_reserve(1)
    sim.path.tx_commit([60])
    assert sim.path.counters()["tx_kicks"] == 0
    sim.tx.flags = XDP_RING_NEED_WAKEUP
    sim.path.tx_reserve(1)
    sim.path.tx_commit([60])
    assert sim.path.counters()["tx_kicks"] == 1


def test_tx_kick_every_commit_without_need_wakeup():
    sim = SimKernel(need_wakeup=False)
    for _ in range(3):
        sim.path.tx_reserve(1)
        sim.path.tx_commit([60])
    assert sim.path.counters()["tx_kicks"] == 3


def test_rx_kick_when_fill_ring_needs_wakeup_and_nothing_arrived():
    sim = SimKernel()
    assert sim.path.rx_burst(8) == []
    assert sim.path.counters()["rx_kicks"] == 0
    sim.fill.flags = XDP_RING_NEED_WAKEUP
    assert sim.path.rx_burst(8) == []
    assert sim.path.counters()["rx_kicks"] == 1


# -- lifecycle --------------------------------------------------------------------


def test_closed_path_refuses_work_and_releases_umem():
    sim = SimKernel()
    slots = sim.path.tx_reserve(1)
    sim.path.close()
    sim.path.close()  # idempotent
    with pytest.raises(ValueError):
        sim.path.rx_burst(8)
    with pytest.raises(ValueError):
        slots[0][0]  # TX views were released
    sim.umem.extend(b"x")  # no export left on the UMEM


def test_detached_ring_stops_the_path():
    sim = SimKernel()
    sim.rx.ring.detach()
    with pytest.raises(ValueError):
        sim.path.rx_burst(8)
    sim.rx.mem.extend(b"x")  # the ring's memory is free to go


def test_random_traffic_keeps_the_books_balanced():
    rng = __import__("random").Random(int.from_bytes(os.urandom(4), "little"))
    sim = SimKernel(num_frames=64, ring_size=16, sg=True, slot_frames=2)
    delivered, sent = [], []
    expected_rx, expected_tx = [], []
    for step in range(2000):
        action = rng.random()
        if action < 0.4:
            f = frame(rng.choice([60, 1514, 3840, 5000]), step)
            if sim.receive(f):
                expected_rx.append(f)
        elif action < 0.7:
            got = sim.path.rx_burst(rng.randint(1, 8))
            delivered += [bytes(g) for g in got]
            sim.path.rx_release(got)
        elif action < 0.9:
            slots = sim.path.tx_reserve(rng.randint(1, 4))
            n = rng.randint(0, len(slots))
            lengths = []
            for s in slots[:n]:
                f = frame(rng.choice([60, 4096, 8000]), step)
                s[: len(f)] = f
                lengths.append(len(f))
                expected_tx.append(f)
            sim.path.tx_commit(lengths)
        else:
            sent += sim.transmit()
    got = sim.path.rx_burst(1000)
    delivered += [bytes(g) for g in got]
    sim.path.rx_release(got)
    sent += sim.transmit()
    assert delivered == expected_rx
    assert sent == expected_tx
    c = sim.path.counters()
    assert c["rx_bad_desc"] == c["tx_bad_completion"] == c["rx_release_unknown"] == 0
    assert sim.path.rx_lent() == 0


def test_tx_reserve_kicks_again_when_starved_with_frames_queued():
    sim = SimKernel(num_frames=16, ring_size=8)
    sim.path.tx_reserve(8)
    sim.path.tx_commit([60] * 8)  # the kernel asked for no wakeup: no kick
    assert sim.path.counters()["tx_kicks"] == 0
    sim.tx.flags = XDP_RING_NEED_WAKEUP  # ... and now it sleeps with our frames
    assert sim.path.tx_reserve(1) == []
    assert sim.path.counters()["tx_kicks"] == 1
    assert sim.path.tx_pending() == 8


def test_releasing_a_tx_slot_as_rx_frame_is_refused():
    sim = SimKernel()
    slots = sim.path.tx_reserve(1)
    producer = sim.fill.producer
    sim.path.rx_release(slots)
    assert sim.fill.producer == producer
    assert sim.path.counters()["rx_release_unknown"] == 1
    sim.path.tx_commit([])
