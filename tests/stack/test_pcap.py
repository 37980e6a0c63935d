"""ustack.pcap: the writer and the reader agree, other writers' files read the same, damage is named.

Files come from ``PcapWriter`` (nanosecond, little-endian), scapy's
``wrpcap`` (microsecond) and hand-packed big-endian headers; the reader is
fed whole files, single bytes, and files that grow, shrink and are replaced.
"""

from __future__ import annotations

import errno
import os
import stat
import struct

import pytest
from scapy.utils import wrpcap
from scapy.layers.l2 import Ether

from ustack import pcap
from ustack.pcap import PcapDamaged, PcapError, PcapFollower, PcapReader, PcapWriter, Record, Restarted, read_pcap

FRAMES = [bytes(range(60)), b"\xff" * 1514, b"\x01" * 14, bytes(range(256)) * 3]


def written(tmp_path, frames=FRAMES, snaplen=65535, t0=1000.25):
    path = str(tmp_path / "w.pcap")
    with PcapWriter(path, snaplen=snaplen, overwrite=True) as w:
        for i, f in enumerate(frames):
            w.write(t0 + i * 0.0000015, f)
    assert w.frames == len(frames)
    return path


def test_writer_and_reader_round_trip_with_nanosecond_stamps(tmp_path):
    path = written(tmp_path)
    records = list(read_pcap(path))
    assert [r.data for r in records] == FRAMES
    assert [r.orig_len for r in records] == [len(f) for f in FRAMES]
    assert {r.linktype for r in records} == {pcap.LINKTYPE_ETHERNET}
    assert [r.ts_ns for r in records] == [1000_250_000_000, 1000_250_001_500, 1000_250_003_000, 1000_250_004_500]
    head = open(path, "rb").read(24)
    assert pcap.parse_header(head) == pcap.PcapHeader("<", 10**9, 65535, 1)
    assert struct.unpack("<IHH", head[:8]) == (0xA1B23C4D, 2, 4)


def test_snaplen_cuts_frames_and_keeps_their_length(tmp_path):
    path = written(tmp_path, snaplen=64)
    records = list(read_pcap(path))
    assert [len(r.data) for r in records] == [60, 64, 14, 64]
    assert [r.orig_len for r in records] == [60, 1514, 14, 768]
    assert records[1].data == FRAMES[1][:64]


def test_a_stamp_rounding_up_to_a_whole_second_carries():
    sec, nsec, cap, length = struct.unpack("<IIII", pcap.record_header(5.9999999999, 10, 20))
    assert (sec, nsec, cap, length) == (6, 0, 10, 20)


def test_microsecond_files_in_either_byte_order(tmp_path):
    pkts = [Ether(bytes(range(14)) + b"x" * 46), Ether(bytes(range(14)) + b"y" * 50)]
    for i, p in enumerate(pkts):
        p.time = 7.000001 + i
    little = str(tmp_path / "scapy.pcap")
    wrpcap(little, pkts)
    recs = list(read_pcap(little))
    assert [r.data for r in recs] == [bytes(p) for p in pkts]
    assert [r.ts_ns for r in recs] == [7_000_001_000, 8_000_001_000]
    big = tmp_path / "big.pcap"
    body = b"".join(struct.pack(">IIII", 3, 250_000, len(f), len(f) + 4) + f for f in FRAMES[:2])
    big.write_bytes(struct.pack(">IHHiIII", pcap.MAGIC_US, 2, 4, 0, 0, 9000, 1) + body)
    assert list(read_pcap(str(big))) == [Record(3_250_000_000, 1, f, len(f) + 4) for f in FRAMES[:2]]


def test_bytes_fed_one_at_a_time_give_the_same_records(tmp_path):
    data = open(written(tmp_path), "rb").read()
    reader = PcapReader()
    got = []
    for i in range(len(data)):
        got += reader.feed(data[i:i + 1])
        assert reader.offset + reader.pending == i + 1
    reader.finish()
    assert got == list(read_pcap(written(tmp_path)))
    assert reader.frames == len(FRAMES)


def test_what_is_not_a_pcap_file_says_why(tmp_path):
    with pytest.raises(PcapError, match=r"not a pcap file \(only 10 bytes\)"):
        pcap.parse_header(b"\0" * 10)
    with pytest.raises(PcapError, match=r"not a pcap file \(magic 0x74686973\)"):
        pcap.parse_header(b"this is not a capture at all")
    ng = struct.pack("<I", pcap.PCAPNG_MAGIC) + b"\0" * 28
    assert pcap.is_pcapng(ng)
    with pytest.raises(PcapError, match="pcapng"):
        pcap.parse_header(ng)
    short = tmp_path / "short.pcap"
    short.write_bytes(pcap.global_header()[:12])
    with pytest.raises(PcapError, match=f"{short}: not a pcap file") as exc:
        list(read_pcap(str(short)))
    assert not isinstance(exc.value, PcapDamaged)


def test_a_cut_last_record_is_damage_after_the_records_before_it(tmp_path):
    data = open(written(tmp_path), "rb").read()
    path = tmp_path / "cut.pcap"
    path.write_bytes(data[:-5])
    got = []
    with pytest.raises(PcapDamaged, match=r"truncated record at the end \(frame 4: 779 bytes of it in the file\)"):
        for rec in read_pcap(str(path)):
            got.append(rec.data)
    assert got == FRAMES[:3]


def test_a_corrupt_record_header_is_raised_after_the_good_records(tmp_path):
    data = bytearray(open(written(tmp_path), "rb").read())
    third = 24 + (16 + 60) + (16 + 1514)
    struct.pack_into("<I", data, third + 8, 0x7FFFFFF0)
    reader = PcapReader()
    assert [r.data for r in reader.feed(bytes(data))] == FRAMES[:2]
    with pytest.raises(PcapDamaged, match=f"corrupt record header at offset {third} "
                                          r"\(frame 3: 2147483632 captured bytes\)"):
        reader.feed(b"")
    with pytest.raises(PcapDamaged):
        reader.finish()


def test_follower_waits_for_the_file_and_for_partial_records(tmp_path):
    path = tmp_path / "grow.pcap"
    whole = open(written(tmp_path), "rb").read()
    follower = PcapFollower(str(path))
    assert follower.poll() == [] and not follower.opened
    cuts = [0, 10, 24 + 7, 24 + 16 + 60 + 30, len(whole)]
    seen = []
    with open(path, "wb") as f:
        for a, b in zip(cuts, cuts[1:]):
            f.write(whole[a:b])
            f.flush()
            while True:
                got = follower.poll()
                if not got:
                    break
                seen += [r.data for r in got]
    assert follower.opened
    assert seen == FRAMES
    follower.close()


def test_follower_restarts_on_truncation_and_on_replacement(tmp_path):
    path = tmp_path / "live.pcap"
    first = open(written(tmp_path, FRAMES[:2]), "rb").read()
    path.write_bytes(first)
    follower = PcapFollower(str(path))
    assert [r.data for r in follower.poll()] == FRAMES[:2]
    path.write_bytes(b"")  # truncated in place
    with pytest.raises(Restarted):
        follower.poll()
    with open(path, "ab") as f:
        f.write(pcap.global_header() + pcap.record_header(1.0, 5, 5) + b"hello")
    assert [r.data for r in follower.poll()] == [b"hello"]
    replacement = tmp_path / "new.pcap"
    replacement.write_bytes(pcap.global_header() + pcap.record_header(2.0, 3, 3) + b"new")
    os.replace(replacement, path)  # same name, another file
    with pytest.raises(Restarted):
        follower.poll()
    assert follower.poll() == [Record(2_000_000_000, 1, b"new", 3)]
    assert follower.poll() == []
    follower.close()


def test_follower_reports_damage_with_the_path(tmp_path):
    path = tmp_path / "junk.pcap"
    path.write_bytes(b"\0" * 100)
    follower = PcapFollower(str(path))
    with pytest.raises(PcapError, match=f"{path}: not a pcap file"):
        follower.poll()
    follower.close()


# -- issue 12, item 6: private files, no symlinks followed, a size cap ------------------------------
def test_capture_file_is_created_private(tmp_path):
    path = tmp_path / "cap.pcap"
    PcapWriter(str(path)).close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


# -- issue 25, item 7: never truncate an existing file, nor a hard link's other names ---------------------
def test_an_existing_file_is_refused_and_kept(tmp_path):
    path = tmp_path / "cap.pcap"
    path.write_bytes(b"old secrets")
    os.chmod(path, 0o644)
    with pytest.raises(FileExistsError) as err:
        PcapWriter(str(path))
    assert err.value.errno == errno.EEXIST and err.value.filename == str(path)
    assert "--pcap-overwrite" in str(err.value)
    assert path.read_bytes() == b"old secrets" and stat.S_IMODE(os.stat(path).st_mode) == 0o644


def test_overwrite_replaces_the_name_and_leaves_a_hard_link_alone(tmp_path):
    precious = tmp_path / "shadow"
    precious.write_bytes(b"root:x:0:0")
    os.chmod(precious, 0o644)
    path = tmp_path / "cap.pcap"
    os.link(precious, path)  # what a hostile user plants where root will write a capture
    with pytest.raises(FileExistsError):
        PcapWriter(str(path))
    PcapWriter(str(path), overwrite=True).close()
    assert precious.read_bytes() == b"root:x:0:0" and stat.S_IMODE(os.stat(precious).st_mode) == 0o644
    assert os.stat(precious).st_nlink == 1  # the capture is a new file, no longer a name of it
    assert len(path.read_bytes()) == 24 and stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_overwrite_replaces_a_symlink_without_following_it(tmp_path):
    target = tmp_path / "precious"
    target.write_bytes(b"keep me")
    link = tmp_path / "cap.pcap"
    link.symlink_to(target)
    PcapWriter(str(link), overwrite=True).close()
    assert target.read_bytes() == b"keep me"
    assert not link.is_symlink() and len(link.read_bytes()) == 24


def test_a_dangling_symlink_is_refused_not_created_through(tmp_path):
    link = tmp_path / "cap.pcap"
    link.symlink_to(tmp_path / "made-by-root")
    with pytest.raises(OSError) as err:
        PcapWriter(str(link))
    assert err.value.errno == errno.ELOOP
    assert not (tmp_path / "made-by-root").exists()


def test_a_symlink_is_refused_not_followed(tmp_path):
    target = tmp_path / "precious"
    target.write_bytes(b"keep me")
    link = tmp_path / "cap.pcap"
    link.symlink_to(target)
    with pytest.raises(OSError) as err:
        PcapWriter(str(link))
    assert err.value.errno == errno.ELOOP and "symbolic link" in str(err.value) and err.value.filename == str(link)
    assert target.read_bytes() == b"keep me"


def test_max_bytes_stops_writing_and_counts(tmp_path):
    path = tmp_path / "cap.pcap"
    frame = b"\xab" * 84  # 16 + 84 = 100 bytes per record
    with PcapWriter(str(path), max_bytes=24 + 3 * 100 + 50) as w:
        for i in range(10):
            w.write(1.0 + i, frame)
    assert w.frames == 3 and w.records_dropped == 7 and w.cap_reached
    assert os.path.getsize(path) == 24 + 300
    assert [r.data for r in read_pcap(str(path))] == [frame] * 3


def test_nonsense_snaplen_and_cap_are_refused(tmp_path):
    with pytest.raises(ValueError):
        PcapWriter(str(tmp_path / "a.pcap"), snaplen=-1)
    with pytest.raises(ValueError):
        PcapWriter(str(tmp_path / "b.pcap"), max_bytes=10)


def test_a_write_error_stops_the_capture_without_raising(tmp_path):
    w = PcapWriter(str(tmp_path / "cap.pcap"), flush_interval=0.0)

    class Full:
        closed = False

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        flush = close = lambda self: None

    w.file = Full()
    w.write(1.0, b"x" * 60)  # must not raise into the data path
    w.write(2.0, b"y" * 60)
    w.flush()
    assert w.error is not None and w.error.errno == errno.ENOSPC
    assert w.records_dropped == 2 and w.frames == 0


def test_overwrite_never_replaces_what_is_not_a_regular_file():
    for path in ("/dev/null", "/dev/full"):
        with pytest.raises(FileExistsError) as err:
            PcapWriter(path, overwrite=True)
        assert err.value.filename == path and "not a regular file" in str(err.value)
    assert os.path.exists("/dev/null") and stat.S_ISCHR(os.stat("/dev/null").st_mode)
