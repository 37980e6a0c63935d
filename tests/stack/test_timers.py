"""The timer heap (ustack/timers.py): lazy cancellation with the stale entries bounded."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from ustack.timers import COMPACT_SLACK, TimerHeap


def test_discarded_timers_do_not_pile_up_until_their_deadline():
    """A fragment flood arms a 30 s timer per datagram and evicts it at once: the heap must not keep them all."""
    heap = TimerHeap()
    keep = heap.timer(lambda now: None)
    keep.arm(1000.0)
    for i in range(100_000):
        t = heap.timer(lambda now: None)
        t.arm(30.0 + i * 1e-6)
        t.cancel()
    assert heap.live == 1
    assert len(heap) <= 2 * heap.live + COMPACT_SLACK + 1
    assert heap.next_deadline() == 1000.0


def test_rearming_one_timer_many_times_stays_bounded_and_fires_once():
    heap = TimerHeap()
    fired = []
    t = heap.timer(fired.append)
    for i in range(50_000):
        t.arm(10.0 + i)
    assert len(heap) <= 2 + COMPACT_SLACK + 1
    assert heap.run(10.0 + 49_999) is None
    assert fired == [10.0 + 49_999] and heap.live == 0


def test_callbacks_that_arm_during_run_survive_a_rebuild():
    """A callback may arm enough timers to rebuild the heap in the middle of run(): nothing is lost."""
    heap = TimerHeap()
    fired = []
    children = []

    def spawn(now):
        fired.append(("parent", now))
        for i in range(3 * COMPACT_SLACK):  # armed and cancelled: stale entries, then a rebuild
            c = heap.timer(lambda now: None)
            c.arm(now + 100)
            c.cancel()
        child = heap.timer(lambda now: fired.append(("child", now)))
        child.arm(now)  # due at once: must fire in this same run
        children.append(child)

    a = heap.timer(spawn)
    a.arm(5.0)
    b = heap.timer(lambda now: fired.append(("b", now)))
    b.arm(6.0)
    assert heap.run(6.0) is None
    assert fired == [("parent", 6.0), ("b", 6.0), ("child", 6.0)]  # deadline order, then arming order
    assert heap.live == 0


def test_owner_timer_calls_the_function_with_its_owner():
    """``timer(fn, owner)`` fires ``fn(owner, now)`` (no bound method per timer), in deadline order."""
    heap = TimerHeap()
    fired = []

    class Owner:
        def __init__(self, name):
            self.name = name

        def on_timer(self, now):
            fired.append((self.name, now))

    a, b = Owner("a"), Owner("b")
    ta, tb = heap.timer(Owner.on_timer, a), heap.timer(Owner.on_timer, b)
    tb.arm(2.0)
    ta.arm(3.0)
    assert heap.run(2.5) == 3.0
    assert fired == [("b", 2.5)]  # callbacks get the time of the run
    assert heap.run(3.0) is None
    assert fired == [("b", 2.5), ("a", 3.0)] and heap.live == 0


def test_unarmed_placeholder_reads_as_a_cancelled_timer():
    from ustack.timers import UNARMED

    assert UNARMED.deadline is None
    UNARMED.cancel()  # does nothing, raises nothing
    assert UNARMED.deadline is None


def test_rearming_later_pushes_nothing_and_fires_at_the_new_deadline():
    """The per-ACK re-arm of RFC 6298 5.3 (always later) leaves the heap entry in place (lazy re-arm);
    next_deadline() and run() still see the latest deadline."""
    heap = TimerHeap()
    fired = []
    t = heap.timer(fired.append)
    t.arm(1.0)
    for i in range(1, 1000):
        t.arm(1.0 + i * 0.001)
    assert len(heap) == 1 and t.deadline == 1.999
    assert heap.run(1.5) == 1.999 and fired == []  # the old entry surfaced: pushed again for 1.999
    assert heap.next_deadline() == 1.999
    t.arm(1.2)  # earlier than the entry: pushed at once
    assert heap.next_deadline() == 1.2
    assert heap.run(1.999) is None
    assert fired == [1.999] and heap.live == 0


def _eager_model(ops):
    """What an eager heap (one push per arm) fires: [(timer, now)] in order."""
    armed = {}  # timer -> (deadline, arming order)
    fired = []
    for k, (op, i, x) in enumerate(ops):
        if op == "arm":
            armed[i] = (x, k)
        elif op == "cancel":
            armed.pop(i, None)
        else:
            for key, i2 in sorted((v, j) for j, v in armed.items()):
                if key[0] <= x:
                    fired.append((i2, x))
                    del armed[i2]
    return fired


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["arm", "arm", "cancel", "run"]), st.integers(0, 3),
                          st.integers(0, 20).map(float)), max_size=60))
def test_lazy_rearm_fires_as_an_eager_heap_would(ops):
    """Any sequence of arms (earlier, later, equal), cancels and runs fires the same timers at the same
    runs in the same order as a heap that pushes on every arm (deadline, then arming order)."""
    heap = TimerHeap()
    fired = []
    timers = [heap.timer(lambda owner, now: fired.append((owner, now)), i) for i in range(4)]
    for op, i, x in ops:
        if op == "arm":
            timers[i].arm(x)
        elif op == "cancel":
            timers[i].cancel()
        else:
            nd = heap.next_deadline()
            live = [t.deadline for t in timers if t.deadline is not None]
            assert nd == (min(live) if live else None)
            heap.run(x)
    assert fired == _eager_model(ops)
    assert heap.live == sum(t.deadline is not None for t in timers)
