"""Helpers for the AF_XDP backend tests: open on a topology, wait for frames, build frames."""

from __future__ import annotations

import os
import select
import socket
import struct
import subprocess
import sys
import time
from typing import Callable

from pyroute2 import IPRoute
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from ustack.backends.afxdp import AfXdpDevice

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def open_device(topo, **opts) -> AfXdpDevice:
    with topo.in_stack_ns():
        return AfXdpDevice(topo.stack_ifname, **opts)


def collect(dev, match: Callable[[bytes], bool], n: int, timeout: float = 5.0) -> list[bytes]:
    """Frames (copied) for which ``match`` holds, until ``n`` of them or ``timeout``.

    Waits in select() on the device's fd (need_wakeup), releasing every frame.
    """
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        frames = dev.rx_burst(64)
        if frames:
            out += [bytes(f) for f in frames if match(bytes(f))]
            dev.rx_release(frames)
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            break
        select.select([dev.fileno()], [], [], min(left, 0.1))
    return out


def udp_dport(frame: bytes) -> int | None:
    if len(frame) < 42 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    ihl = (frame[14] & 0x0F) * 4
    if len(frame) < 14 + ihl + 8:
        return None
    return struct.unpack_from("!H", frame, 14 + ihl + 2)[0]


def udp_frame(topo, payload: bytes, sport: int, dport: int) -> bytes:
    """A complete Ethernet/IPv4/UDP frame from the stack end to the peer (DF set, checksums)."""
    pkt = (
        Ether(src=topo.stack_mac, dst=topo.peer_mac)
        / IP(src=topo.stack_addr, dst=topo.peer_addr, flags="DF", id=0x1234)
        / UDP(sport=sport, dport=dport)
        / payload
    )
    return bytes(pkt)


def transmit(dev, frames: list[bytes], timeout: float = 5.0) -> None:
    """Send every frame (waiting for TX slots with a bounded wait)."""
    deadline = time.monotonic() + timeout
    i = 0
    while i < len(frames):
        slots = dev.tx_reserve(min(64, len(frames) - i))
        if not slots:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no TX slot for frame {i} within {timeout}s")
            select.select([], [dev.fileno()], [], 0.01)
            continue
        lengths = []
        for slot in slots:
            f = frames[i]
            slot[: len(f)] = f
            lengths.append(len(f))
            i += 1
        dev.tx_commit(lengths)


def xdp_prog_id(topo) -> int:
    """The id of the XDP program attached to the stack end (0: none)."""
    with topo.in_stack_ns(), IPRoute() as ipr:
        link = ipr.link("get", ifname=topo.stack_ifname)[0]
    xdp = link.get_attr("IFLA_XDP")
    if xdp is None:
        return 0
    return xdp.get_attr("IFLA_XDP_PROG_ID") or 0


def peer_udp(topo, port: int, timeout: float = 5.0) -> socket.socket:
    with topo.in_peer_ns():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind((topo.peer_addr, port))
    s.settimeout(timeout)
    return s


def peer_capture(topo) -> socket.socket:
    """A raw AF_PACKET socket on the peer end: sees whole frames as the kernel got them."""
    with topo.in_peer_ns():
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
        s.bind((topo.peer_ifname, 0x0003))
    s.settimeout(5)
    return s


def open_in_child(topo, opts: dict, setpriv: list[str]) -> str:
    """Open a device in a child process with reduced privileges; returns 'ErrorClass: message' or 'OK'."""
    code = (
        "import sys\n"
        f"sys.path.insert(0, {REPO!r})\n"
        "from ustack.backends.afxdp import AfXdpDevice\n"
        "try:\n"
        f"    AfXdpDevice({topo.stack_ifname!r}, **{opts!r}).close()\n"
        "    print('OK')\n"
        "except Exception as exc:\n"
        "    print(f'{type(exc).__name__}: {exc}')\n"
    )
    proc = topo.stack_popen(["setpriv", *setpriv, sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return out.strip().splitlines()[-1] if out.strip() else err
