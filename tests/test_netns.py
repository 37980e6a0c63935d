"""ustack.tools.netns.Topology: namespaces, links, offloads, and never leaving anything behind."""

from __future__ import annotations

import select
import signal
import socket
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pyroute2 import IPRoute
from pyroute2 import netns as pyroute2_netns

from ustack.tools import netns as tn
from ustack.tools.netns import Topology
from ustack.wire.checksum import ones_sum, pseudo_header_sum

pytestmark = pytest.mark.privileged

REPO = Path(__file__).resolve().parents[1]


def existing() -> set[str]:
    return set(pyroute2_netns.listnetns())


def link_info(nsname: str, ifname: str) -> dict:
    with tn._inside(nsname), IPRoute() as ipr:
        index = ipr.link_lookup(ifname=ifname)[0]
        link = ipr.link("get", index=index)[0]
        addrs = [a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(index=index)]
        with open(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6") as f:
            ipv6_off = f.read().strip() == "1"
    return {
        "state": link.get_attr("IFLA_OPERSTATE"),
        "mtu": link.get_attr("IFLA_MTU"),
        "mac": bytes.fromhex(link.get_attr("IFLA_ADDRESS").replace(":", "")),
        "kind": link.get_attr("IFLA_LINKINFO").get_attr("IFLA_INFO_KIND"),
        "addrs": addrs,
        "ipv6_off": ipv6_off,
    }


def active_features(nsname: str, ifname: str) -> set[str]:
    from pyroute2.ethtool.ioctl import IoctlEthtool

    with tn._inside(nsname):
        ethtool = IoctlEthtool(ifname)
        try:
            return {name for name, value, available, *_ in ethtool.get_features() if value}
        finally:
            ethtool.close()


def test_veth_topology_shape(privileged):
    with Topology.veth(tag="n") as topo:
        names = {topo.stack_ns, topo.peer_ns}
        assert len(names) == 2 and names <= existing()
        assert len(topo.stack_ifname) <= 15 and len(topo.peer_ifname) <= 15
        peer = link_info(topo.peer_ns, topo.peer_ifname)
        stack = link_info(topo.stack_ns, topo.stack_ifname)
        assert peer["kind"] == stack["kind"] == "veth"
        assert peer["state"] == stack["state"] == "UP"
        assert peer["addrs"] == ["198.18.0.1"] and topo.prefixlen == 24
        assert stack["addrs"] == []  # the stack end has no address
        assert peer["mac"] == topo.peer_mac and stack["mac"] == topo.stack_mac
        assert peer["ipv6_off"] and stack["ipv6_off"]
        for ns, ifname in ((topo.peer_ns, topo.peer_ifname), (topo.stack_ns, topo.stack_ifname)):
            active = active_features(ns, ifname)
            for off in ("tx-checksum-ip-generic", "tx-tcp-segmentation", "tx-generic-segmentation", "rx-gro"):
                assert off not in active, (ifname, off)
    assert not names & existing()


def test_tap_topology_shape(privileged):
    with Topology.tap(tag="n") as topo:
        assert topo.stack_ns == topo.peer_ns
        assert topo.stack_ns in existing()
        info = link_info(topo.peer_ns, topo.peer_ifname)
        assert info["kind"] == "tun"
        assert info["addrs"] == ["198.18.0.1"]
        assert info["mac"] == topo.peer_mac
        assert topo.stack_mac == tn.TAP_STACK_MAC != topo.peer_mac
    assert topo.stack_ns not in existing()


def test_names_are_unique(privileged):
    with Topology.veth(tag="n") as a, Topology.veth(tag="n") as b:
        assert a.name != b.name
        assert {a.stack_ns, a.peer_ns}.isdisjoint({b.stack_ns, b.peer_ns})


def test_tag_that_makes_names_too_long():
    with pytest.raises(ValueError):
        Topology.veth(tag="waytoolongtag")


def test_kernel_udp_frame_on_the_stack_end_has_a_complete_checksum(privileged):
    """With offloads off, the frame a plain capture sees carries a full, correct UDP checksum."""
    with Topology.veth(tag="n") as topo:
        topo.add_peer_neighbour()
        with topo.in_stack_ns():
            cap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
            cap.bind((topo.stack_ifname, 0x0800))
        with topo.in_peer_ns():
            tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with cap, tx:
            tx.sendto(b"checksum me" * 10, (topo.stack_addr, 7000))
            assert select.select([cap], [], [], 5)[0]
            frame = cap.recv(2048)
        assert frame[:6] == topo.stack_mac and frame[6:12] == topo.peer_mac
        ihl = (frame[14] & 15) * 4
        udp = frame[14 + ihl :]
        assert struct.unpack_from("!H", udp, 2)[0] == 7000
        assert struct.unpack_from("!H", udp, 6)[0] != 0
        src, dst = frame[26:30], frame[30:34]
        assert ones_sum(udp, pseudo_header_sum(src, dst, 17, len(udp))) == 0xFFFF


def test_exception_inside_the_with_block_leaves_nothing(privileged):
    with pytest.raises(RuntimeError, match="boom"):
        with Topology.veth(tag="n") as topo:
            names = {topo.stack_ns, topo.peer_ns}
            assert names <= existing()
            raise RuntimeError("boom")
    assert not names & existing()
    assert topo.namespaces() == []
    topo.close()  # idempotent


def test_interrupt_during_set_up_leaves_nothing(privileged, monkeypatch):
    calls = []

    def interrupted(self, ipr, ifname, *, address):
        calls.append(set(self.namespaces()))
        raise KeyboardInterrupt

    monkeypatch.setattr(Topology, "_configure", interrupted)
    for make in (Topology.veth, Topology.tap):
        with pytest.raises(KeyboardInterrupt):
            make(tag="n")
    assert len(calls) == 2 and all(calls)  # the namespaces did exist when the interrupt came
    assert not set().union(*calls) & existing()


def test_processes_run_in_their_namespaces_and_die_with_the_topology(privileged):
    probe = [sys.executable, "-c", "import socket; print(sorted(n for _, n in socket.if_nameindex()))"]
    with Topology.veth(tag="n") as topo:
        out = topo.peer_run(probe, capture_output=True, text=True)
        assert out.stdout.strip() == repr(sorted(["lo", topo.peer_ifname]))
        proc = topo.stack_popen(probe, stdout=subprocess.PIPE, text=True)
        assert proc.communicate(timeout=30)[0].strip() == repr(sorted(["lo", topo.stack_ifname]))
        sleeper = topo.peer_popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert sleeper.wait(timeout=10) != 0  # killed by close()


def test_set_mtu_changes_both_ends(privileged):
    with Topology.veth(tag="n", mtu=1400) as topo:
        assert link_info(topo.stack_ns, topo.stack_ifname)["mtu"] == 1400
        topo.set_mtu(9000)
        assert link_info(topo.peer_ns, topo.peer_ifname)["mtu"] == 9000
        assert link_info(topo.stack_ns, topo.stack_ifname)["mtu"] == 9000
        assert topo.mtu == 9000


def test_set_offloads_reports_the_state(privileged):
    with Topology.veth(tag="n") as topo:
        assert topo.set_offloads("peer", tx_checksum_ip_generic=True) == {"tx-checksum-ip-generic": True}
        assert "tx-checksum-ip-generic" in active_features(topo.peer_ns, topo.peer_ifname)
        assert "tx-checksum-ip-generic" not in active_features(topo.stack_ns, topo.stack_ifname)
        with pytest.raises(ValueError):
            topo.set_offloads("nowhere", rx_gro=True)


CHILD = textwrap.dedent(
    """
    import sys, time
    from ustack.tools.netns import Topology
    topo = Topology.veth(tag="n")
    print(topo.stack_ns, topo.peer_ns, flush=True)
    if sys.argv[1] == "exit":
        sys.exit(0)  # no close(): atexit must clean up
    time.sleep(60)
    """
)


@pytest.mark.parametrize("how", ["exit", signal.SIGTERM, signal.SIGINT])
def test_exit_and_signals_leave_nothing(privileged, how):
    arg = "exit" if how == "exit" else "wait"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, arg], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        names = set(proc.stdout.readline().split())
        assert len(names) == 2, proc.stderr.read()
        if how != "exit":
            assert names <= existing()
            proc.send_signal(how)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not (names & existing()), f"left behind: {names & existing()}"
