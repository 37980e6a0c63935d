"""Ephemeral port choice (ustack.transport.ports): RFC 6056 Algorithm 3 per destination, a keyed draw without one."""

import errno

import pytest

from ustack.transport.ports import EPHEMERAL_HIGH, EPHEMERAL_LOW, EphemeralPorts

SECRET = bytes(range(32))
LADDR, RADDR = bytes([198, 18, 0, 2]), bytes([198, 18, 0, 1])


def test_one_destination_sees_its_ports_advance_in_order():
    ports = EphemeralPorts(SECRET, b"tcp")
    got = [ports.pick(LADDR, RADDR, 80, lambda p: False) for _ in range(5)]
    assert [b - a for a, b in zip(got, got[1:])] == [1, 1, 1, 1]
    assert all(EPHEMERAL_LOW <= p <= EPHEMERAL_HIGH for p in got)


def test_binds_without_a_destination_do_not_tell_the_next_port():
    ports = EphemeralPorts(SECRET, b"udp")
    got = [ports.pick_unconnected(LADDR, lambda p: False) for _ in range(20)]
    assert len(set(got)) == 20 and all(EPHEMERAL_LOW <= p <= EPHEMERAL_HIGH for p in got)
    assert sum(abs(b - a) > 64 for a, b in zip(got, got[1:])) >= 15  # scattered over the range, not in order
    again = EphemeralPorts(SECRET, b"udp")  # keyed: the same secret draws the same sequence
    assert [again.pick_unconnected(LADDR, lambda p: False) for _ in range(20)] == got
    other = EphemeralPorts(bytes(32), b"udp")
    assert [other.pick_unconnected(LADDR, lambda p: False) for _ in range(20)] != got


def test_a_taken_draw_moves_on_to_the_next_free_port_and_a_full_range_is_eaddrnotavail():
    ports = EphemeralPorts(SECRET, b"udp", low=40000, high=40003)
    first = EphemeralPorts(SECRET, b"udp", low=40000, high=40003).pick_unconnected(LADDR, lambda p: False)
    got = ports.pick_unconnected(LADDR, lambda p: p == first)
    assert got == 40000 + (first - 40000 + 1) % 4
    with pytest.raises(OSError) as e:
        ports.pick_unconnected(LADDR, lambda p: True)
    assert e.value.errno == errno.EADDRNOTAVAIL


def test_the_offset_is_rfc6056_f_a_keyed_hash_of_the_destination_that_the_counter_advances():
    import hashlib

    ports = EphemeralPorts(SECRET, b"tcp")
    f = int.from_bytes(hashlib.blake2s(LADDR + RADDR + (80).to_bytes(2, "big"), key=SECRET, digest_size=4,
                                       person=b"tcp").digest(), "big")
    span = EPHEMERAL_HIGH - EPHEMERAL_LOW + 1
    assert ports.pick(LADDR, RADDR, 80, lambda p: False) == EPHEMERAL_LOW + f % span  # next_ephemeral = 0
    assert ports.pick(LADDR, RADDR, 80, lambda p: False) == EPHEMERAL_LOW + (f + 1) % span
    assert ports.pick(LADDR, RADDR, 443, lambda p: False) != EPHEMERAL_LOW + (f + 2) % span  # another F
