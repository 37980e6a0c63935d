"""TCP segmentation offload on transmit against the kernel: ``ustack serve --gso`` on the packet backend over veth,
on afxdp (its runs through an AF_PACKET socket beside the AF_XDP one) and on TAP (IFF_VNET_HDR).

The stack's runs of full-sized segments leave as super-frames that the
kernel segments (the veth has TSO and checksum offload off, as
ustack.tools.netns sets it up, so the kernel cuts and checksums every
segment in software before the driver). The kernel client, IPv4 and IPv6:
- pulls 100 MB from the source service and pushes 100 MB through the echo
  service and back, sha256-exact;
- captures a pull on its own veth: every segment from ustack is at most
  MSS-sized, its IP and TCP checksums are right (computed here), IPv4 IDs
  step by one and the data comes in order (a step back is a retransmission);
- counts no TCP checksum error (TcpInCsumErrors);
then serve exits 0 and its device counters show the super-frames. On TAP
the kernel takes each super-frame whole as one GSO skb (no wire to
capture): the sha256-exact transfers are its test.
"""

from __future__ import annotations

import hashlib
import re
import socket
import struct
import subprocess
import threading
import time

import pytest

from tests.conftest import require_tool
from tests.interop.harness import peer_tcp6, serving
from ustack.tools.services import PATTERN_BLOCK, pattern_sha256
from ustack.wire.checksum import ones_sum

pytestmark = pytest.mark.privileged
MB100 = 100_000_000


@pytest.fixture(scope="module", params=["packet-gso", "afxdp-gso", "tap-gso"])
def served(request, tmp_path_factory):
    yield from serving(request.param, tmp_path_factory, "tcp-" + request.param,
                       ["--tcp-echo", "7", "--tcp-source", "19", "--source-bytes", str(MB100),
                        "--pcap-snaplen", "64"], ipv6=True)


def client(served, v6: bool, port: int) -> socket.socket:
    from ustack.tools.netns import peer_socket

    if v6:
        return peer_tcp6(served.topo, port)
    s = peer_socket(served.topo, type=socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect((served.topo.stack_addr, port))
    return s


def read_to_eof(s, h, limit=None) -> int:
    n = 0
    buf = bytearray(1 << 20)
    while limit is None or n < limit:
        k = s.recv_into(buf)
        if not k:
            break
        h.update(memoryview(buf)[:k])
        n += k
    return n


def in_csum_errors(served) -> int:
    text = served.topo.peer_run(["cat", "/proc/net/snmp"], capture_output=True, text=True).stdout
    rows = [line.split() for line in text.splitlines() if line.startswith("Tcp:")]
    return int(rows[1][rows[0].index("InCsumErrors")])


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
def test_kernel_pulls_100mb_sha256_exact(served, v6):
    errors = in_csum_errors(served)
    with client(served, v6, 19) as s:
        h = hashlib.sha256()
        assert read_to_eof(s, h) == MB100
    assert h.hexdigest() == pattern_sha256(MB100)
    assert in_csum_errors(served) == errors


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
def test_kernel_pushes_100mb_through_the_echo_and_back_sha256_exact(served, v6):
    with client(served, v6, 7) as s:
        back = hashlib.sha256()
        got = [0]
        t = threading.Thread(target=lambda: got.__setitem__(0, read_to_eof(s, back)))
        t.start()
        sent = hashlib.sha256()
        left = MB100
        while left:
            k = min(left, len(PATTERN_BLOCK))
            s.sendall(PATTERN_BLOCK[:k])
            sent.update(PATTERN_BLOCK[:k])
            left -= k
        s.shutdown(socket.SHUT_WR)
        t.join(120)
        assert not t.is_alive()
    assert got[0] == MB100 and back.hexdigest() == sent.hexdigest()


def check_segments(pcap: str, v6: bool) -> int:
    """Every segment from ustack's address in ``pcap``: MSS-sized at most, checksums right, IPv4 IDs +1 and
    no gap in the data (a segment that is not the next is a retransmission of data already seen). Returns how many carried data."""
    from scapy.utils import RawPcapReader

    data_segs = 0
    next_seq = last_id = None
    for frame, _ in RawPcapReader(pcap):
        if v6:
            if frame[12:14] != b"\x86\xdd" or frame[20] != 6 or frame[22:38] != socket.inet_pton(
                    socket.AF_INET6, "fd00::2"):
                continue
            src, dst, l3 = frame[22:38], frame[38:54], 40
            l4len = struct.unpack_from("!H", frame, 18)[0]
            pseudo = src + dst + struct.pack("!IxxxB", l4len, 6)
        else:
            if frame[12:14] != b"\x08\x00" or frame[23] != 6 or frame[26:30] != bytes([198, 18, 0, 2]):
                continue
            assert ones_sum(frame[14:34]) == 0xFFFF, "bad IPv4 header checksum"
            src, dst, l3 = frame[26:30], frame[30:34], 20
            l4len = struct.unpack_from("!H", frame, 16)[0] - 20
            pseudo = src + dst + struct.pack("!xBH", 6, l4len)
            ident = struct.unpack_from("!H", frame, 18)[0]
            if last_id is not None:
                assert ident == (last_id + 1) & 0xFFFF, (last_id, ident)
            last_id = ident
        seg = frame[14 + l3:14 + l3 + l4len]
        assert len(seg) == l4len and len(frame) <= 1514
        assert ones_sum(seg, ones_sum(pseudo)) == 0xFFFF, "bad TCP checksum"
        hl = (seg[12] >> 4) * 4
        seq = struct.unpack_from("!I", seg, 4)[0]
        if l4len > hl:
            data_segs += 1
            end = (seq + l4len - hl) & 0xFFFFFFFF
            if next_seq is not None and seq != next_seq:  # only a retransmission (a tail loss probe) may
                assert ((next_seq - end) & 0xFFFFFFFF) < 1 << 30, "a gap: segments out of order"  # step back
                continue
            next_seq = end
    return data_segs


# Packet and afxdp: a TAP has no wire, the kernel takes the super-frame whole as one GSO skb and never segments it
# (there the sha256-exact transfers above are the proof).
@pytest.mark.parametrize("served", ["packet-gso", "afxdp-gso"], indirect=True)
@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
def test_the_kernel_made_segments_are_valid_on_the_wire(served, v6, tmp_path):
    require_tool("tcpdump")
    pcap = str(tmp_path / "peer.pcap")
    filt = "tcp and src host " + (served.topo.stack_addr6 if v6 else served.topo.stack_addr)
    dump = served.topo.peer_popen(["tcpdump", "-i", served.topo.peer_ifname, "-nn", "-U", "-s", "0", "-B", "65536", "-w", pcap,
                                   filt], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = dump.stderr.readline()  # "listening on ...": the capture is attached
        assert "listening" in line, line
        with client(served, v6, 19) as s:
            h = hashlib.sha256()
            assert read_to_eof(s, h, limit=5_000_000) >= 5_000_000
    finally:
        dump.terminate()
        dump.wait(10)
    n = check_segments(pcap, v6)
    # ~3,500 data segments in a 5 MB pull; a capture under load can lose some (tcpdump's own drops), and
    # what it kept is checked one by one above: enough of them that the super-frames were cut many times.
    assert n > 1000, f"{n} data segments captured of the ~3,500 of a 5 MB pull"


def test_serve_exits_0_and_counts_super_frames(served):
    rc = served.stop()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(l.startswith("device counters") for l in served.lines):
        time.sleep(0.01)
    text = "".join(served.lines)
    assert rc == 0, text
    prefix = {"tap-gso": "tap.", "packet-gso": "packet_ring.", "afxdp-gso": "tx_"}[served.backend]
    frames = int(re.search(prefix + r"gso_frames\s+(\d+)", text).group(1))
    segments = int(re.search(prefix + r"gso_segments\s+(\d+)", text).group(1))
    if served.backend == "afxdp-gso":  # every run found the AF_XDP ring empty, no sendmsg refused
        assert "tx_gso_unordered" not in text and "tx_gso_error" not in text, text
    # 4 x 100 MB went out mostly as super-frames (~9 segments each with the Python path, more in C)
    assert frames > 1000 and segments > 4 * frames, text
