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


def test_bench_loss_veth_lines_give_rtos_per_10_mb():
    """The veth rows print each stack's rate against Linux -> Linux and ustack's RTOs per 10 MB."""
    from ustack.tools import bench_loss

    run = {"mb_s": 50.0, "bytes": 20_000_000, "retransmits": 400, "timeouts": 3, "tlps": 40}
    veth = {"linux": {"mb_s": 100.0, "runs": [{"mb_s": 100.0}]},
            "ustack_to_kernel": {"mb_s": 50.0, "runs": [run, dict(run, timeouts=1), dict(run, timeouts=5)]}}
    lines = bench_loss.format_lines([], veth, 3)
    assert lines[0] == "bulk under loss, veth 3% each way, linux: 100.0 MB/s (1.00x Linux -> Linux); runs 100.0"
    assert lines[1] == ("bulk under loss, veth 3% each way, ustack to kernel: 50.0 MB/s (0.50x Linux -> Linux), "
                        "ustack retransmitted 400, RTOs 3 (1.5 per 10 MB), TLPs 40; runs 50.0, 50.0, 50.0")


def test_bench_loss_compares_congestion_controls_interleaved_in_one_run(monkeypatch):
    """``--congestion newreno,cubic,bbr``: ustack -> kernel once per algorithm, each run with its knob,
    the algorithms alternating within every repetition (the machine's load falls on all alike); kernel
    -> ustack once, with the first (ustack only receives there: its controller never acts)."""
    from ustack.tools import bench_loss

    calls = []

    def fake(kind):
        def run(size, percent, backend, **knobs):
            calls.append((kind, knobs.get("congestion")))
            return {"mb_s": 10.0 if knobs.get("congestion") == "newreno" else 12.0, "bytes": size,
                    "retransmits": 1, "timeouts": 0, "tlps": 0}
        return run

    def linux(size, percent, congestion=None):
        calls.append(("linux", congestion))
        return {None: 20.0, "reno": 8.0, "cubic": 10.0}[congestion]

    monkeypatch.setattr(bench_loss, "linux_to_linux", linux)
    monkeypatch.setattr(bench_loss, "ustack_to_kernel", fake("u2k"))
    monkeypatch.setattr(bench_loss, "kernel_to_ustack", fake("k2u"))
    # The kernel's default is BBR: Linux -> Linux runs again on each of ustack's other algorithms (Linux's
    # names for them), interleaved too; ustack's BBR is compared with the default row.
    veth = bench_loss.veth_rows(1000, 3, 2, "packet", algorithms=("newreno", "cubic", "bbr"), kernel_default="bbr")
    one = [("linux", None), ("linux", "reno"), ("linux", "cubic"), ("u2k", "newreno"), ("u2k", "cubic"),
           ("u2k", "bbr"), ("k2u", "newreno")]
    assert calls == one * 2
    assert list(veth) == ["linux", "linux_newreno", "linux_cubic", "ustack_to_kernel_newreno",
                          "ustack_to_kernel_cubic", "ustack_to_kernel_bbr", "kernel_to_ustack_newreno"]
    lines = bench_loss.format_lines([], veth, 3)
    assert lines[0].startswith("bulk under loss, veth 3% each way, linux (bbr): 20.0 MB/s (1.00x Linux -> Linux)")
    assert lines[2].startswith("bulk under loss, veth 3% each way, linux cubic: 10.0 MB/s (0.50x Linux -> Linux)")
    # ustack -> kernel beside Linux -> Linux on the same algorithm as well
    assert lines[4].startswith("bulk under loss, veth 3% each way, ustack to kernel cubic: 12.0 MB/s "
                               "(0.60x Linux -> Linux; 1.20x Linux -> Linux cubic)")
    assert "(0.50x Linux -> Linux; 1.25x Linux -> Linux newreno)" in lines[3]
    assert lines[5].startswith("bulk under loss, veth 3% each way, ustack to kernel bbr: 12.0 MB/s "
                               "(0.60x Linux -> Linux)")
    assert "Linux -> Linux cubic" not in lines[6]  # kernel -> ustack: the kernel's default sender
    assert lines[6].startswith("bulk under loss, veth 3% each way, kernel (bbr) to ustack: 10.0 MB/s")
    calls.clear()
    veth = bench_loss.veth_rows(1000, 3, 1, "packet", kernel_default="cubic")  # the default is ustack's
    assert calls == [("linux", None), ("u2k", None), ("k2u", None)] and "linux_cubic" not in veth
    with pytest.raises(SystemExit):
        bench_loss.main(["--congestion", "newreno,bbr9"])  # refused before anything runs


def test_rx_loss_drops_only_tcp_frames_and_releases_them():
    """bench_loss.RxLoss, in front of ustack's device: loses TCP frames (seeded) before the stack sees
    them and hands them straight back to the device; ARP and UDP pass."""
    from ustack.tools import bench_loss

    def frame(proto: int, ethertype: bytes = b"\x08\x00") -> bytes:
        return bytes(12) + ethertype + bytes(9) + bytes([proto]) + bytes(30)

    class Device:
        released: list = []

        def rx_burst(self, n):
            return [frame(6) for _ in range(50)] + [frame(17), frame(6, b"\x08\x06")]

        def rx_release(self, frames):
            self.released.extend(frames)

        def fileno(self):
            return 7

    dev = Device()
    lossy = bench_loss.RxLoss(dev, 50, seed=3)
    kept = lossy.rx_burst(64)
    assert 0 < lossy.lost < 50 and len(kept) == 52 - lossy.lost and len(dev.released) == lossy.lost
    assert all(f[23] == 6 and f[13] == 0 for f in dev.released)  # only IPv4 TCP frames were lost
    assert frame(17) in kept and frame(6, b"\x08\x06") in kept
    assert lossy.fileno() == 7  # the rest of the Device protocol passes through
    assert bench_loss.RxLoss(dev, 0).rx_burst(64) == dev.rx_burst(64)
