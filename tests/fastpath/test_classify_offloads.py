"""classify and the checksums a local sender leaves partial (a veth at the kernel's default offloads).

Linux leaves a locally sent UDP/TCP checksum partial when the device offers
checksum offload (CHECKSUM_PARTIAL): the field holds only the folded
pseudo-header sum, for hardware that a veth does not have to finish. The
kernel's own input trusts such frames; so does classify, in two ways:

- per frame, on the device's mark (``rx_status``: AF_PACKET's
  TP_STATUS_CSUMNOTREADY 0x8 or TP_STATUS_CSUM_VALID 0x80), counted as
  ``rx.csum_trusted``;
- with ``CSUM_LOCAL_PARTIAL`` (AF_XDP on a veth, which gives no mark), by
  recognising the pseudo-header-only form, counted as ``rx.csum_partial``,
  while every other checksum is still verified.

Frames are built by scapy (the independent oracle), then given the partial
form the kernel writes.
"""

from __future__ import annotations

from collections import Counter

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from ustack import _fastpath as fp

MAC = bytes.fromhex("020000000002")
PEER = "02:00:00:00:00:01"


def _fold(total: int) -> int:
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def _words(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    return sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))


def built(family: int, proto: str, payload: bytes) -> tuple[bytes, int, int]:
    """(frame with a full checksum, offset of the L4 header, offset of its checksum field)."""
    l4 = TCP(sport=40000, dport=7, flags="PA", seq=1000, ack=2000) if proto == "tcp" else UDP(sport=40000, dport=7)
    ip = IP(src="198.18.0.1", dst="198.18.0.2") if family == 4 else IPv6(src="fd00::1", dst="fd00::2")
    frame = bytes(Ether(src=PEER, dst="02:00:00:00:00:02") / ip / l4 / payload)
    off = 14 + (20 if family == 4 else 40)
    return frame, off, off + (16 if proto == "tcp" else 6)


def partial(frame: bytes, family: int, proto: str, off: int, at: int) -> bytes:
    """The frame as a local sender with checksum offload hands it over: the field holds the folded
    pseudo-header sum only (Linux: th->check = ~tcp_v4_check(len, saddr, daddr, 0))."""
    n = len(frame) - off
    number = 6 if proto == "tcp" else 17
    if family == 4:
        pseudo = _words(frame[26:34]) + number + n
    else:
        pseudo = _words(frame[22:54]) + (n >> 16) + (n & 0xFFFF) + number
    out = bytearray(frame)
    out[at:at + 2] = _fold(pseudo).to_bytes(2, "big")
    return bytes(out)


CASES = [(4, "tcp"), (4, "udp"), (6, "tcp"), (6, "udp")]
KIND = {(4, "tcp"): fp.K_TCP, (4, "udp"): fp.K_UDP, (6, "tcp"): fp.K_TCP6, (6, "udp"): fp.K_UDP6}


@pytest.mark.parametrize("family,proto", CASES)
def test_a_partial_checksum_is_dropped_where_frames_cross_a_wire(family, proto):
    frame, off, at = built(family, proto, b"hello, offloads")
    rec = fp.classify_one(partial(frame, family, proto, off, at), MAC)
    assert rec.kind == fp.K_DROP and rec.reason_name == f"{proto}.bad_checksum"
    assert fp.classify_one(frame, MAC).kind == KIND[family, proto]  # the full sum passes


@pytest.mark.parametrize("family,proto", CASES)
def test_a_local_senders_partial_checksum_is_recognised_and_nothing_else(family, proto):
    frame, off, at = built(family, proto, b"x" * 333)
    rec = fp.classify_one(partial(frame, family, proto, off, at), MAC, fp.CSUM_LOCAL_PARTIAL)
    assert rec.kind == KIND[family, proto] and rec.csum_state == fp.CSUM_STATE_PARTIAL
    assert rec.payload_len == 333
    # a full checksum is still verified: right, it passes as verified; corrupted data is still caught
    ok = fp.classify_one(frame, MAC, fp.CSUM_LOCAL_PARTIAL)
    assert ok.kind == KIND[family, proto] and ok.csum_state == fp.CSUM_STATE_VERIFIED
    bad = bytearray(frame)
    bad[-1] ^= 0x01
    assert fp.classify_one(bytes(bad), MAC, fp.CSUM_LOCAL_PARTIAL).reason_name == f"{proto}.bad_checksum"
    # a pseudo-header sum over the wrong length (or any other near miss) is not the partial form
    near = bytearray(partial(frame, family, proto, off, at))
    near[at + 1] ^= 0x01
    assert fp.classify_one(bytes(near), MAC, fp.CSUM_LOCAL_PARTIAL).reason_name == f"{proto}.bad_checksum"


@pytest.mark.parametrize("mark", [fp.RX_CSUM_PARTIAL, fp.RX_CSUM_VALID])
def test_the_devices_mark_skips_the_check_per_frame_and_is_counted(mark):
    frame, off, at = built(4, "tcp", b"y" * 100)
    part = partial(frame, 4, "tcp", off, at)
    junk = bytearray(frame)
    junk[-1] ^= 0xFF  # a bad sum the device did not vouch for
    counters = Counter()
    classifier = fp.Classifier(MAC, fp.CSUM_VERIFY, counters)
    recs = classifier.classify([part, part, bytes(junk), frame], [mark, 0, 0, 0x4])  # 0x4: TP_STATUS_LOSING
    assert [r.kind for r in recs] == [fp.K_TCP, fp.K_DROP, fp.K_DROP, fp.K_TCP]
    assert recs[0].csum_state == fp.CSUM_STATE_TRUSTED and recs[3].csum_state == fp.CSUM_STATE_VERIFIED
    assert [r.reason_name for r in recs[1:3]] == ["tcp.bad_checksum"] * 2
    assert counters["rx.csum_trusted"] == 1 and classifier.trusted == 1
    # no marks (or marks that do not match the burst) leave every frame to the software check
    assert classifier.classify([part], None)[0].kind == fp.K_DROP
    assert classifier.classify([part], [mark, mark])[0].kind == fp.K_DROP


def test_recognised_partial_frames_are_counted_by_the_classifier():
    counters = Counter()
    classifier = fp.Classifier(MAC, fp.CSUM_LOCAL_PARTIAL, counters)
    burst = []
    for family, proto in CASES:
        frame, off, at = built(family, proto, b"z" * 50)
        burst += [partial(frame, family, proto, off, at), frame]
    recs = classifier.classify(burst)
    assert all(r.kind != fp.K_DROP for r in recs)
    assert counters["rx.csum_partial"] == 4 and classifier.partial == 4 and "rx.csum_trusted" not in counters


def test_a_tso_super_frame_is_one_segment():
    """A 64 KB TCP super-frame (the kernel's TSO on a veth, taken whole) is one record: its IP length
    covers it, and its partial checksum is trusted on the device's mark."""
    data = bytes(range(256)) * 254  # 65,024 bytes: 45 segments of 1448 and a bit
    frame, off, at = built(4, "tcp", data)
    assert len(frame) > 65000
    rec = fp.Classifier(MAC).classify([partial(frame, 4, "tcp", off, at)], [fp.RX_CSUM_PARTIAL])[0]
    assert rec.kind == fp.K_TCP and rec.payload_len == len(data)
    assert bytes(memoryview(partial(frame, 4, "tcp", off, at))[rec.payload_off:rec.payload_off + rec.payload_len]) == data


def test_classifier_refuses_an_unknown_checksum_mode():
    with pytest.raises(ValueError):
        fp.Classifier(MAC, 7)
