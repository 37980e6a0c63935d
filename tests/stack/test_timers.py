"""The timer heap (ustack/timers.py): lazy cancellation with the stale entries bounded."""

from __future__ import annotations

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
