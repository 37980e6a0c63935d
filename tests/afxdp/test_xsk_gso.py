"""AF_XDP's TCP segmentation offload on transmit (XskDataPath.set_gso, ustack/_fp_gso.pxi's AF_XDP part).

Against the simulated kernel (no privileges), the super-frames go to one end
of a datagram socketpair instead of an AF_PACKET socket: each datagram is what
the kernel would get (virtio_net_hdr + super-frame), and segmenting it in
software as the kernel does (tests/backends/test_fp_gso.software_segment)
must give back the stack's frames byte for byte; a run is sent only while the
AF_XDP ring holds nothing earlier (the simulated kernel never consumes inside
a kick, so anything after a frame left in the ring goes frame by frame);
a refused sendmsg sends the run frame by frame. On a real veth (privileged):
a mix of runs and other frames reaches the peer's interface byte-exact and
in commit order.
"""

from __future__ import annotations

import socket
import subprocess
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.afxdp.helpers import open_device, peer_capture
from tests.backends.test_fp_gso import VNET, bulk, software_segment, tcp_frame
from ustack.backends.afxdp.sim import SimKernel

UDP_LIKE = bytes.fromhex("0200000000010200000000020800") + bytes(46)  # not TCP: never merged


def gso_sim(**kw):
    sim = SimKernel(num_frames=512, ring_size=256, **kw)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    b.setblocking(False)
    sim.path.set_gso(a.fileno(), 65535, 64)
    return sim, a, b


def commit(path, frames):
    slots = path.tx_reserve(len(frames))
    assert len(slots) == len(frames)
    for slot, f in zip(slots, frames):
        slot[:len(f)] = f
    path.tx_commit([len(f) for f in frames])


def datagrams(sock) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(sock.recv(1 << 17))
        except BlockingIOError:
            return out


def segmented(grams) -> list[bytes]:
    return [seg for g in grams for seg in software_segment(g[:VNET], g[VNET:])]


@pytest.mark.parametrize("v6", [False, True])
def test_a_burst_leaves_as_one_super_frame_that_segments_back_exactly(v6):
    sim, a, b = gso_sim()
    frames = bulk(30, v6=v6, last=100)
    commit(sim.path, frames)
    grams = datagrams(b)
    assert len(grams) == 1 and segmented(grams) == frames
    assert sim.transmit() == []  # nothing in the AF_XDP ring
    c = sim.path.counters()
    assert (c["tx_gso_frames"], c["tx_gso_segments"], c["tx_packets"], c["tx_descs"]) == (1, 31, 31, 0)
    assert sim.path.tx_in_flight() == 0  # the slots came back at once
    a.close(), b.close()


def test_runs_stop_at_64_segments_and_65535_bytes():
    sim, a, b = gso_sim()
    frames = bulk(100)
    commit(sim.path, frames)
    grams = datagrams(b)
    assert [len(software_segment(g[:VNET], g[VNET:])) for g in grams] == [45, 45, 10]  # 45 * 1448 + 52 <= 65535
    assert all(len(g) - VNET - 14 <= 65535 for g in grams)
    assert segmented(grams) == frames
    sim.path.set_gso(a.fileno(), 65535, 8)
    seq = 1000 + 100 * 1448
    commit(sim.path, bulk(20, seq=seq, ident=200))
    assert [len(software_segment(g[:VNET], g[VNET:])) for g in datagrams(b)] == [8, 8, 4]
    a.close(), b.close()


def test_after_a_frame_left_in_the_ring_the_rest_of_the_commit_goes_frame_by_frame():
    sim, a, b = gso_sim()
    frames = [UDP_LIKE] + bulk(10)
    commit(sim.path, frames)
    assert datagrams(b) == []
    assert sim.transmit() == frames  # in order, through the ring
    assert sim.path.counters()["tx_gso_unordered"] == 1
    # the ring empty again: the next run is merged
    more = bulk(5, seq=1000 + 10 * 1448, ident=110)
    commit(sim.path, more)
    assert segmented(datagrams(b)) == more
    # a frame of an earlier commit still in the ring holds the run back as well
    commit(sim.path, [UDP_LIKE])
    later = bulk(5, seq=1000 + 15 * 1448, ident=115)
    commit(sim.path, later)
    assert datagrams(b) == [] and sim.transmit() == [UDP_LIKE] + later
    a.close(), b.close()


def test_a_refused_sendmsg_sends_the_run_frame_by_frame():
    sim, a, b = gso_sim()
    b.close()  # the datagram's receiver is gone: sendmsg fails (ECONNREFUSED)
    frames = bulk(6, last=10)
    commit(sim.path, frames)
    assert sim.transmit() == frames
    c = sim.path.counters()
    assert c["tx_gso_error"] == 1 and c["tx_gso_frames"] == 0
    assert sim.path.last_gso_errno != 0
    a.close()


def test_without_gso_and_for_frames_that_do_not_join_nothing_is_merged():
    sim, a, b = gso_sim()
    # not consecutive, another flow, a pure ACK, a short segment in the middle: each goes alone
    frames = [tcp_frame(1000, b"x" * 1448, ident=1), tcp_frame(9000, b"x" * 1448, ident=2),
              tcp_frame(1000, b"y" * 1448, ident=3, sport=20), tcp_frame(5, b"", ident=4)]
    commit(sim.path, frames)
    assert datagrams(b) == [] and sim.transmit() == frames
    sim.path.set_gso(-1)
    frames = bulk(10)
    commit(sim.path, frames)
    assert datagrams(b) == [] and sim.transmit() == frames
    assert sim.path.counters()["tx_gso_frames"] == 0
    with pytest.raises(ValueError):
        sim.path.set_gso(a.fileno(), 65535, 1)
    a.close(), b.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["run", "run6", "other", "ack"]), st.integers(1, 50),
                          st.integers(0, 1448)), min_size=1, max_size=8))
def test_random_commits_leave_exactly_and_in_order(parts):
    """Whatever the mix, the super-frames (all sent before any frame in the ring, since a run is only sent
    while the ring is empty) segmented, then the ring's frames, are the committed frames in order."""
    sim, a, b = gso_sim()
    frames, seq = [], 1000
    for kind, n, last in parts:
        if kind in ("run", "run6"):
            run = bulk(n, v6=kind == "run6", seq=seq, ident=len(frames), last=last or None)
            seq += 1448 * (n + 1)
            frames += run
        elif kind == "other":
            frames.append(UDP_LIKE)
        else:
            frames.append(tcp_frame(seq, b"", ident=len(frames)))
    frames = frames[:200]
    commit(sim.path, frames)
    got = segmented(datagrams(b)) + sim.transmit()
    assert got == frames
    a.close(), b.close()


# -- on a real veth ------------------------------------------------------------------


@pytest.mark.privileged
def test_runs_and_other_frames_reach_the_peer_exact_and_in_commit_order(topo):
    assert (topo.stack_addr, topo.peer_addr) == ("198.18.0.2", "198.18.0.1")  # test_fp_gso's frames' addresses

    def ours(frame: bytes) -> bytes:  # this topology's MACs (outside every checksum)
        return topo.peer_mac + topo.stack_mac + frame[12:]

    udp = ours(UDP_LIKE)
    frames = [udp] + [ours(f) for f in bulk(20, last=700)] + [udp] + [ours(f) for f in bulk(
        40, seq=900000, ident=500, sport=33)] + [ours(tcp_frame(5, b"", ident=9))] + [ours(f) for f in bulk(3)]
    with open_device(topo) as dev, peer_capture(topo) as cap:
        assert dev.gso and "gso" in dev.capabilities.mode
        cap.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE: every frame held until read
        cap.setblocking(False)
        commit(dev, frames)
        seen, deadline = [], time.monotonic() + 5
        while len(seen) < len(frames) and time.monotonic() < deadline:
            try:
                f = cap.recv(65536)
            except BlockingIOError:
                time.sleep(0.001)
                continue
            if f[6:12] == topo.stack_mac:
                seen.append(f)
        stats = dev.stats()
    assert seen == frames
    assert stats["tx_gso_frames"] == 3 and stats["tx_gso_segments"] == 21 + 40 + 3
    assert stats["tx_gso_unordered"] == 0 and stats["tx_gso_error"] == 0


@pytest.mark.privileged
def test_gso_false_and_auto_on_a_queued_interface_transmit_frame_by_frame(topo):
    with open_device(topo, gso=False) as dev:
        assert not dev.gso and dev.capabilities.tx_tcp_segmentation == 0
    subprocess.run(["ip", "netns", "exec", topo.stack_ns, "tc", "qdisc", "add", "dev", topo.stack_ifname, "root",
                    "pfifo"], check=True)
    with open_device(topo) as dev:
        assert not dev.gso and dev.capabilities.extra["qdisc"] == "pfifo"
    from ustack.backends.afxdp.errors import ModeUnavailableError

    with pytest.raises(ModeUnavailableError, match="noqueue"):
        open_device(topo, gso=True)
