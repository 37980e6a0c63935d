"""AF_XDP multi-buffer through the whole stack: 8,000-byte UDP datagrams over an MTU-9000 veth,
both directions, without IP fragmentation (the kernel side checks its own counters too)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading

import pytest

from tests.conftest import require_privileged

pytestmark = pytest.mark.privileged


def afxdp_available():
    try:
        from ustack.backends.registry import available_backends

        return "afxdp" in available_backends()
    except Exception:
        return False


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_8000_byte_datagrams_without_fragmentation(mode, tmp_path):
    require_privileged()
    if not afxdp_available():
        pytest.fail("the afxdp backend is not available on this machine")
    from ustack.tools.netns import Topology, peer_socket

    with Topology.veth(mtu=9000, tag="j") as t:
        p = t.stack_popen([sys.executable, "-m", "ustack", "serve", "--backend", "afxdp", "--xdp-mode", mode,
                           "--ifname", t.stack_ifname, "--addr", f"{t.stack_addr}/{t.prefixlen}", "--udp-echo", "7"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        ready = threading.Event()

        def reader():
            for line in p.stdout:
                lines.append(line)
                if line.strip() == "ready":
                    ready.set()

        th = threading.Thread(target=reader, daemon=True)
        th.start()
        try:
            assert ready.wait(30), "".join(lines)
            assert "mtu 9000" in lines[0] and " sg" in lines[0], lines[0]
            with peer_socket(t) as s:
                s.settimeout(5)
                for i in range(50):
                    payload = bytes([i]) * 8000
                    s.sendto(payload, (t.stack_addr, 7))
                    assert s.recvfrom(65535) == (payload, (t.stack_addr, 7))
            snmp = t.peer_run(["cat", "/proc/net/snmp"], capture_output=True, text=True, timeout=10).stdout
            ip_head, ip_vals = [l.split() for l in snmp.splitlines() if l.startswith("Ip:")][:2]
            ip = dict(zip(ip_head[1:], map(int, ip_vals[1:])))
            assert ip["ReasmReqds"] == 0 and ip["FragCreates"] == 0, ip  # the kernel never fragmented either
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(20)
            th.join(10)
    text = "".join(lines)
    counters = dict((m.group(1), int(m.group(2))) for m in re.finditer(r"^(\S+)\s+(\d+)$", text, re.M))
    assert counters.get("udp.datagrams_received") == 50 and counters.get("udp.datagrams_sent") == 50, text
    assert "ipv4.fragments_sent" not in counters and "ipv4.fragments_received" not in counters, text
