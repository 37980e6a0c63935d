"""The pipe backend against the Device protocol (it has no kernel on the other side, so the
kernel-facing conformance suite cannot run on it; these check the same contract end to end)."""

from __future__ import annotations

import select

import pytest

from ustack.backends.pipe import PipeLink
from ustack.api.clock import ManualClock
from ustack.device import Device


def frame(i: int, size: int = 60) -> bytes:
    return b"\x02\x00\x00\x00\x00\x0b" + b"\x02\x00\x00\x00\x00\x0a" + b"\x88\xb5" + i.to_bytes(4, "big") + bytes(size - 18)


def send(dev, frames) -> None:
    slots = dev.tx_reserve(len(frames))
    assert len(slots) == len(frames)
    for slot, f in zip(slots, frames):
        assert len(slot) >= dev.capabilities.frame_size >= dev.capabilities.mtu + 14
        slot[:len(f)] = f
    dev.tx_commit([len(f) for f in frames])


def test_ends_implement_the_protocol():
    link = PipeLink(ManualClock())
    assert isinstance(link.a, Device) and isinstance(link.b, Device)
    assert link.a.capabilities.mac != link.b.capabilities.mac


def test_frames_cross_exactly_in_order_and_are_lent_until_released():
    clock = ManualClock()
    link = PipeLink(clock)
    sent = [frame(i, 60 + i) for i in range(100)]
    send(link.a, sent)
    got = []
    while True:
        burst = link.b.rx_burst(16)
        if not burst:
            break
        assert len(burst) <= 16
        got.extend(bytes(f) for f in burst)
        link.b.rx_release(burst)
        with pytest.raises(ValueError):
            bytes(burst[0])  # released views are no longer readable
    assert got == sent


def test_uncommitted_reserved_slots_go_back_and_bad_commits_are_refused():
    link = PipeLink(ManualClock())
    link.a.tx_reserve(8)
    link.a.tx_commit([])
    assert link.b.rx_burst(64) == []
    link.a.tx_reserve(2)
    with pytest.raises(ValueError):
        link.a.tx_commit([60, 60, 60])  # more than reserved
    link.a.tx_reserve(1)
    with pytest.raises(ValueError):
        link.a.tx_commit([0])


def test_fileno_becomes_readable_with_a_frame_and_quiet_when_drained():
    link = PipeLink(ManualClock())
    fd = link.b.fileno()
    assert select.select([fd], [], [], 0)[0] == []
    send(link.a, [frame(1)])
    assert select.select([fd], [], [], 1.0)[0] == [fd]
    burst = link.b.rx_burst(64)
    link.b.rx_release(burst)
    assert select.select([fd], [], [], 0)[0] == []


def test_delay_follows_the_clock_and_poll_at_says_when():
    clock = ManualClock(10.0)
    link = PipeLink(clock, delay=0.5)
    send(link.a, [frame(1)])
    assert link.b.rx_burst(64) == []
    assert link.b.poll_at(0.0) == 10.5
    clock.advance(0.5)
    assert len(link.b.rx_burst(64)) == 1


def test_seeded_impairments_are_reproducible():
    def run(seed):
        clock = ManualClock()
        link = PipeLink(clock, seed=seed, loss=0.1, duplicate=0.1, reorder=0.2, corrupt=0.1, delay=0.001)
        send(link.a, [frame(i) for i in range(64)])
        send(link.a, [frame(i) for i in range(64, 128)])
        clock.advance(1.0)
        out = [bytes(f) for f in link.b.rx_burst(1000)]
        return out, dict(link.a.counters)

    first, counters = run(7)
    assert run(7) == (first, counters)
    assert run(8)[0] != first
    assert counters["lost"] and counters["duplicated"] and counters["reordered"] and counters["corrupted"]
    assert len(first) == 128 - counters["lost"] + counters["duplicated"]


def test_closed_end_refuses_to_send_and_bad_probabilities_are_refused():
    link = PipeLink(ManualClock())
    link.a.close()
    link.a.tx_reserve(1)
    with pytest.raises(OSError):
        link.a.tx_commit([60])
    with pytest.raises(ValueError):
        PipeLink(ManualClock(), loss=1.5)


def test_the_signal_byte_is_written_under_the_receivers_lock(monkeypatch):
    """A signal written after the lock is released can land after a drain that already cleared
    the flag: the byte then stays, the fd is readable forever and a poller spins. The write
    must happen while the lock that rx_burst drains under is held."""
    import ustack.backends.memory as memory  # the pipe's device plumbing (shared with the loopback device)

    link = PipeLink(ManualClock())
    held = []
    real_write = memory.os.write

    def write(fd, data):
        held.append(link.b._lock.locked())
        return real_write(fd, data)

    monkeypatch.setattr(memory.os, "write", write)
    send(link.a, [frame(1)])
    assert held == [True]
    link.b.rx_release(link.b.rx_burst(64))
    assert select.select([link.b.fileno()], [], [], 0)[0] == []
    link.close()
