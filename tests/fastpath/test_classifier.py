"""``_fastpath.Classifier``: classify with records kept burst after burst, equal to ``classify()``.

A reused record must come out exactly as a new one (no field of an earlier,
different frame left behind), and a record somebody still holds must never
change under them.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ustack import _fastpath as fp

from .oracle import BLANK, MAC, check_blanks, fields
from .test_fastpath import golden_frames

FRAMES = [bytes(p) for p in golden_frames()]


def every_field(rec) -> dict:
    return {"kind": rec.kind, **{name: getattr(rec, name) for name in BLANK}}


def test_reused_records_equal_new_ones_burst_after_burst():
    """Bursts of shuffled golden frames (every kind, drops, options): each record, refilled from a
    record of another kind, equals classify()'s and keeps the blanks of its kind."""
    rng = random.Random(5)
    for verify_l4 in (True, False):
        c = fp.Classifier(MAC, verify_l4)
        for _ in range(60):
            burst = [memoryview(f) for f in rng.choices(FRAMES, k=rng.randrange(1, 40))]
            got = c.classify(burst)
            want = fp.classify(burst, MAC, verify_l4)
            assert len(got) == len(want)
            for g, w in zip(got, want):
                check_blanks(g)
                assert every_field(g) == every_field(w)
            del got, g, w
        assert c.made <= 40 < c.reused  # the pool grew to the largest burst, then was refilled


@given(st.lists(st.tuples(st.sampled_from(FRAMES), st.integers(0, 2000), st.integers(0, 255)), max_size=12))
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_mutated_bursts_agree_with_classify(items):
    c = fp.Classifier(MAC)
    c.classify([memoryview(f) for f in FRAMES])  # every pool record holds some other frame's fields first
    burst = []
    for frame, pos, val in items:
        buf = bytearray(frame)
        buf[pos % len(buf)] = val
        burst.append(bytes(buf))
    for g, w in zip(c.classify(burst), fp.classify(burst, MAC)):
        assert fields(g) == fields(w) and every_field(g) == every_field(w)


def test_a_kept_record_never_changes_under_its_holder():
    c = fp.Classifier(MAC)
    udp, tcp = FRAMES[0], FRAMES[2]
    first = c.classify([udp, udp])
    kept = first[1]
    before = every_field(kept)
    del first
    second = c.classify([tcp, tcp, tcp])  # pool slot 0 is free again, slot 1 is held by ``kept``
    assert every_field(kept) == before and kept.kind == fp.K_UDP
    assert [r.kind for r in second] == [fp.K_TCP] * 3
    assert second[1] is not kept
    # a burst still being delivered (its list alive) when a callback classifies again: untouched
    third = c.classify([tcp, tcp])
    assert all(r.kind == fp.K_TCP for r in second) and third[0] is not second[0]


def test_classifier_takes_any_iterable_and_checks_its_mac():
    import pytest

    c = fp.Classifier(MAC)
    assert c.mac == MAC and fp.Classifier().mac is None
    assert [r.kind for r in c.classify(iter([FRAMES[0]]))] == [fp.K_UDP]
    assert c.classify(()) == []
    with pytest.raises(ValueError):
        fp.Classifier(b"short")
    with pytest.raises(BufferError):
        c.classify([memoryview(b"x" * 120)[::2]])
    with pytest.raises(TypeError):
        c.classify([12345])


def test_link_group_is_the_destination_macs_group_bit_in_new_and_reused_records():
    """``Packet.link_group`` (issue 25 item 4: no ICMP error to a link-layer broadcast or multicast): set from
    the destination MAC for every kind, and never left over from an earlier frame in a reused record."""
    dsts = [(MAC, False), (b"\xff" * 6, True), (bytes.fromhex("01005e000001"), True),
            (bytes.fromhex("333300000001"), True)]
    taken = [f for f in FRAMES if fp.classify_one(f, MAC).kind != fp.K_DROP and f[:6] == MAC]
    assert len(taken) > 10
    classifier = fp.Classifier(MAC)
    for _ in range(2):
        for dst, group in dsts + dsts[::-1]:
            burst = [dst + f[6:] for f in taken]
            for one, rec in zip(burst, classifier.classify(burst)):
                assert rec.kind != fp.K_DROP and rec.link_group is group
                assert fp.classify_one(one, MAC).link_group is group
