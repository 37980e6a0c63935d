"""ustack._fastpath.RxWatch / spin_wait: the driver's busy-poll on a ring word, without the GIL (issue 30)."""

from __future__ import annotations

import struct
import threading
import time

import pytest

from ustack._fastpath import RxWatch, spin_wait
from ustack.backends.afxdp.sim import SimRing

TP_STATUS_USER = 1


def test_a_tpacket_status_word_ends_the_spin_once_the_kernel_hands_the_slot_over():
    ring = bytearray(4096)
    watch = RxWatch.tp_status(ring)
    watch.at(2048)
    assert not watch() and spin_wait(watch, 0.001) is False
    struct.pack_into("<I", ring, 2048, TP_STATUS_USER | 0x80)  # TP_STATUS_USER with other bits (CSUM_VALID)
    assert watch() and spin_wait(watch, 10.0) is True
    watch.at(0)  # the next slot: still the kernel's
    assert spin_wait(watch, 0.001) is False
    watch.release()


def test_a_status_word_outside_the_ring_is_refused():
    watch = RxWatch.tp_status(bytearray(64))
    for offset in (-4, 62, 64, 2):
        with pytest.raises(ValueError):
            watch.at(offset)
    watch.release()
    with pytest.raises(ValueError):
        watch.at(0)


def test_an_xsk_rx_ring_ends_the_spin_when_its_producer_moves():
    rx = SimRing(8, 16)
    watch = RxWatch.xsk(rx.ring)
    assert spin_wait(watch, 0.001) is False
    rx.put_descs([(0, 60, 0)])
    assert spin_wait(watch, 10.0) is True


def test_the_spin_releases_the_gil_so_another_thread_produces_the_frame_meanwhile():
    """A Python thread makes the slot ready while the spin runs: with the GIL held it never could, and
    the spin would end by its 5 s timeout instead."""
    ring = bytearray(4096)
    watch = RxWatch.tp_status(ring)
    watch.at(0)
    counted = []

    def producer():
        for i in range(1000):  # pure Python work: needs the GIL
            counted.append(i)
        struct.pack_into("<I", ring, 0, TP_STATUS_USER)

    thread = threading.Thread(target=producer)
    start = time.monotonic()
    thread.start()
    assert spin_wait(watch, 5.0) is True
    assert time.monotonic() - start < 2.5 and len(counted) == 1000
    thread.join()
    watch.release()
