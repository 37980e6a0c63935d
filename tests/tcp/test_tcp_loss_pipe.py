"""Whole stacks over the pipe under random loss and reordering (manual clock): echo exact both ways,
retransmission timeouts rare (RACK-TLP, PRR, D-SACK undo; RFC 8985, 6937, 2883), for each recovery."""

from __future__ import annotations

import pytest

from ustack.tools.pipe_pair import PipePair
from ustack.transport.tcp.tcb import State


def echo(size: int, loss: float, reorder: float, seed: int = 3, **knobs):
    """``size`` patterned bytes from b to a and back over a 1 ms RTT pipe; returns both connections."""
    pair = PipePair(seed=seed, delay=0.0005, loss=loss, reorder=reorder, reorder_delay=0.0003)
    link, a, b = pair.link, pair.a, pair.b
    lst, conn = pair.connect(80, **knobs)
    data = bytes((i * 7 + i // 1000) % 251 for i in range(size))
    view = memoryview(data)
    sent = echoed = 0
    back = bytearray()
    server = None
    pending = bytearray()

    def step(now: float) -> bool:
        nonlocal sent, echoed, server
        if server is None:
            server = lst.accept()
        acted = False
        if sent < size and conn.state == State.ESTABLISHED:
            n = conn.send(view[sent:sent + 65536], now)
            sent += n
            acted |= n > 0
        if server is not None:
            while chunk := server.recv(1 << 20, now):
                pending.extend(chunk)
                acted = True
            if pending:
                n = server.send(pending, now)
                del pending[:n]
                echoed += n
                acted |= n > 0
        while chunk := conn.recv(1 << 20, now):
            back.extend(chunk)
            acted = True
        return acted

    assert pair.run(step, lambda: len(back) >= size, max_time=120.0), "transfer stalled"
    assert bytes(back) == data and echoed == size
    assert link.a.counters["lost"] and link.b.counters["lost"] and link.a.counters["reordered"]
    for s in (a, b):
        assert s.stats["stack.internal_error"] == 0
    return conn, server


@pytest.mark.parametrize("loss,size,max_rto", [(0.01, 1_000_000, 1), (0.03, 1_000_000, 1), (0.10, 200_000, 4)])
def test_echo_under_loss_and_reordering_with_rack(loss, size, max_rto):
    conn, server = echo(size, loss, reorder=0.02)
    for c in (conn, server):
        info = c.info()
        assert info.loss_recovery == "rack" and info.sack
        assert info.timeouts <= max_rto, info
        assert info.lost and info.retransmits
    if size >= 1_000_000:  # the pipe reorders 2% of frames: over a megabyte RACK notices
        assert conn.info().reordering + server.info().reordering >= 1


@pytest.mark.parametrize("recovery,sack", [("rfc6675", True), ("newreno", False)])
def test_echo_under_loss_with_the_other_recoveries(recovery, sack):
    """RFC 6675 and NewReno (RFC 6582 partial ACKs, no SACK) stay selectable and exact under 3% loss."""
    conn, server = echo(300_000, 0.03, reorder=0.02, loss_recovery=recovery, sack=sack)
    for c in (conn, server):
        info = c.info()
        assert info.loss_recovery == recovery and info.sack == sack and info.retransmits


def test_bench_loss_pipe_rows():
    """The bench's loss row (pipe part): exact transfers at 1% and 3%, figures that make sense."""
    from ustack.tools import bench_loss

    rows = bench_loss.pipe_rows(300_000)
    assert [r["loss"] for r in rows] == [0.01, 0.03]
    assert all(r["exact"] and r["mb_s_simulated"] > 0 and r["timeouts"] <= 1 for r in rows)
    assert rows[1]["retransmits"] > 0
    lines = bench_loss.format_lines(rows, None, 3)
    assert len(lines) == 2 and lines[1].startswith("bulk under loss, pipe 3% each way:")
