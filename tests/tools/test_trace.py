"""``ustack trace``: dissection lines, relative TCP numbers, analysis markers, --follow, damaged files.

Captures are built with scapy's ``wrpcap`` (microsecond pcap), ustack's own
``PcapWriter`` (nanosecond pcap) and scapy's ``wrpcapng``; one is a genuine
capture of two ustack stacks talking TCP over a lossy pipe link, whose
retransmissions the tracer must find.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import signal
import struct
import subprocess
import sys
import threading

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP, fragment
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.utils import wrpcap, wrpcapng

from ustack.capture import PcapDevice
from ustack.pcap import PcapWriter
from ustack.tools import trace, trace_records

A, B = "198.18.0.1", "198.18.0.2"
MAC_A, MAC_B = "02:00:00:00:00:01", "02:00:00:00:00:02"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WAIT = 60.0  # bound on every wait for a subprocess


def eth(src_is_a: bool):
    return Ether(src=MAC_A, dst=MAC_B) if src_is_a else Ether(src=MAC_B, dst=MAC_A)


def client(flags, seq, ack=0, win=8192, data=b"", options=()):
    """B:40000 -> A:80."""
    return eth(False) / IP(src=B, dst=A) / TCP(sport=40000, dport=80, flags=flags, seq=seq % 2**32,
                                               ack=ack % 2**32, window=win, options=list(options)) / data


def server(flags, seq, ack=0, win=8192, data=b"", options=()):
    """A:80 -> B:40000."""
    return eth(True) / IP(src=A, dst=B) / TCP(sport=80, dport=40000, flags=flags, seq=seq % 2**32,
                                              ack=ack % 2**32, window=win, options=list(options)) / data


def write(path, pkts, t0=100.0, step=0.001):
    for i, p in enumerate(pkts):
        p.time = t0 + i * step
    wrpcap(str(path), pkts)
    return str(path)


def run(capsys, *argv):
    rc = trace.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err


def body(line: str) -> str:
    """The line without its time stamp."""
    return line.split(" ", 1)[1]


def markers(line: str) -> list[str]:
    """The analysis markers at the end of a TCP line."""
    m = re.search(r" len \d+(?: options \[[^\]]*\])?((?: \[[^\]]+\])*)$", line)
    assert m, line
    return re.findall(r"\[([^\]]+)\]", m.group(1))


SYN_OPTS = [("MSS", 1460), ("SAckOK", b""), ("Timestamp", (100, 0)), ("NOP", None), ("WScale", 7)]
SYNACK_OPTS = [("MSS", 1460), ("SAckOK", b""), ("Timestamp", (200, 100)), ("NOP", None), ("WScale", 7)]


def handshake_data_fin(ci=0xFFFFFF00, si=5000):
    """A connection whose client ISN wraps within the first 300 octets."""
    return [
        client("S", ci, win=64240, options=SYN_OPTS),
        server("SA", si, ci + 1, win=65160, options=SYNACK_OPTS),
        client("A", ci + 1, si + 1, win=502),
        client("PA", ci + 1, si + 1, win=502, data=b"q" * 300),
        server("A", si + 1, ci + 301, win=510),
        server("PA", si + 1, ci + 301, win=510, data=b"r" * 20),
        client("A", ci + 301, si + 21, win=502),
        client("FA", ci + 301, si + 21, win=502),
        server("FA", si + 21, ci + 302, win=510),
        client("A", ci + 302, si + 22, win=502),
    ]


C2S = "TCP 198.18.0.2:40000 > 198.18.0.1:80"
S2C = "TCP 198.18.0.1:80 > 198.18.0.2:40000"
HANDSHAKE_LINES = [
    "0.000000 " + C2S + " [S] seq 0 win 64240 len 0 options [mss 1460,sackOK,TS val 100 ecr 0,nop,wscale 7]",
    "0.001000 " + S2C + " [S.] seq 0 ack 1 win 65160 len 0 options [mss 1460,sackOK,TS val 200 ecr 100,nop,wscale 7]",
    "0.002000 " + C2S + " [.] seq 1 ack 1 win 502 (x128=64256) len 0",
    "0.003000 " + C2S + " [P.] seq 1:301 ack 1 win 502 (x128=64256) len 300",
    "0.004000 " + S2C + " [.] seq 1 ack 301 win 510 (x128=65280) len 0",
    "0.005000 " + S2C + " [P.] seq 1:21 ack 301 win 510 (x128=65280) len 20",
    "0.006000 " + C2S + " [.] seq 301 ack 21 win 502 (x128=64256) len 0",
    "0.007000 " + C2S + " [F.] seq 301 ack 21 win 502 (x128=64256) len 0",
    "0.008000 " + S2C + " [F.] seq 21 ack 302 win 510 (x128=65280) len 0",
    "0.009000 " + C2S + " [.] seq 302 ack 22 win 502 (x128=64256) len 0",
]


# ---------------------------------------------------------------- TCP lines


def test_handshake_data_fin_relative_to_each_isn(tmp_path, capsys):
    path = write(tmp_path / "hs.pcap", handshake_data_fin())
    rc, lines, err = run(capsys, path)
    assert rc == 0, err
    assert lines == HANDSHAKE_LINES


def test_absolute_numbers_and_frame_numbers(tmp_path, capsys):
    path = write(tmp_path / "hs.pcap", handshake_data_fin())
    rc, lines, _ = run(capsys, path, "-S", "-N")
    assert rc == 0
    assert lines[0].startswith("1 0.000000 " + C2S + " [S] seq 4294967040 win 64240 len 0")
    assert lines[3] == "4 0.003000 " + C2S + " [P.] seq 4294967041:45 ack 5001 win 502 (x128=64256) len 300"


def test_capture_starting_mid_connection_counts_from_the_first_numbers_seen(tmp_path, capsys):
    pkts = [client("PA", 777777, 888888, data=b"x" * 100), server("A", 888888, 777877),
            server("PA", 888888, 777877, data=b"y" * 10), client("A", 777877, 888898)]
    rc, lines, _ = run(capsys, write(tmp_path / "mid.pcap", pkts))
    assert rc == 0
    assert [body(x) for x in lines] == [
        C2S + " [P.] seq 0:100 ack 0 win 8192 len 100",
        S2C + " [.] seq 0 ack 100 win 8192 len 0",
        S2C + " [P.] seq 0:10 ack 100 win 8192 len 10",
        C2S + " [.] seq 100 ack 10 win 8192 len 0",
    ]


def test_window_not_scaled_unless_both_syns_carried_the_option(tmp_path, capsys):
    pkts = [client("S", 1, win=64240, options=[("WScale", 7)]), server("SA", 9, 2, win=65160),
            client("A", 2, 10, win=502)]
    rc, lines, _ = run(capsys, write(tmp_path / "ws.pcap", pkts))
    assert body(lines[2]) == C2S + " [.] seq 1 ack 1 win 502 len 0"


def test_options_are_printed_like_tcpdump(tmp_path, capsys):
    ci, si = 1000, 5000
    pkts = [
        client("S", ci, options=SYN_OPTS),
        server("SA", si, ci + 1, options=SYNACK_OPTS),
        # SACK blocks are relative to the acknowledged (client's) sequence space.
        server("A", si + 1, ci + 1,
               options=[("NOP", None), ("NOP", None), ("SAck", (ci + 101, ci + 201, ci + 301, ci + 401))]),
        # An unknown kind with data; then (next frame) an MSS of length 3: named, skipped by its length.
        client("A", ci + 1, si + 1, options=[(30, b"ab"), ("NOP", None), ("NOP", None)]),
    ]
    raw = bytes(client("A", ci + 1, si + 1))
    bad = bytearray(raw[:34] + raw[34:54] + b"\x02\x03\x05\x01")  # data offset 6: 4 option octets
    bad[34 + 12] = 6 << 4
    bad[16:18] = struct.pack("!H", 44)
    pkts.append(Ether(bytes(bad)))
    rc, lines, _ = run(capsys, write(tmp_path / "opts.pcap", pkts))
    assert rc == 0
    assert lines[2].endswith("len 0 options [nop,nop,sack 2 {101:201}{301:401}]")
    assert lines[3].endswith("len 0 options [opt-30 0x6162,nop,nop,eol]")  # scapy pads with EOL
    assert lines[4].endswith("len 0 options [bad-opt 2 len 3,nop]")


MARKER_SCRIPT = [
    # (segment, markers expected on its line)
    (client("S", 1000), []),
    (server("SA", 5000, 1001), []),
    (client("A", 1001, 5001), []),
    (client("PA", 1001, 5001, data=b"a" * 100), []),                      # 1:101
    (client("PA", 1101, 5001, data=b"b" * 100), []),                      # 101:201
    (client("PA", 1301, 5001, data=b"d" * 100), ["previous segment not captured"]),  # 301:401
    (client("PA", 1201, 5001, data=b"c" * 100), ["out-of-order"]),        # 201:301 fills the hole
    (server("A", 5001, 1101), []),
    (client("PA", 1401, 5001, data=b"e" * 100), []),                      # 401:501
    (server("A", 5001, 1101), ["dup ack #1"]),
    (server("A", 5001, 1101), ["dup ack #2"]),
    (server("A", 5001, 1101), ["dup ack #3"]),
    (client("PA", 1101, 5001, data=b"b" * 100), ["retransmission"]),      # 101:201 again
    (server("A", 5001, 1501, win=0), ["zero window"]),
    (client("PA", 1501, 5001, data=b"f"), ["zero window probe"]),         # 501:502
    (server("A", 5001, 1501, win=0), ["zero window"]),                    # not a dup ack: window 0
    (server("A", 5001, 1502, win=4096), []),
    (server("A", 5001, 1502, win=8192), ["window update"]),
    (client("A", 1501, 5001), ["keep-alive"]),                            # one below the next expected
    (server("A", 5001, 1502, win=8192), []),                              # nothing outstanding: no dup ack
    (client("PA", 1502, 5001, data=b"g" * 100), []),
    (client("PA", 1451, 5001, data=b"h" * 200), ["retransmission"]),     # repacketized: 451:651
    (server("A", 5001, 1702), []),
    (server("A", 5001, 1702), []),                                        # nothing outstanding: no dup ack
]


def test_markers_on_exactly_the_lines_they_describe(tmp_path, capsys):
    path = write(tmp_path / "markers.pcap", [p for p, _ in MARKER_SCRIPT])
    rc, lines, err = run(capsys, path)
    assert rc == 0, err
    assert len(lines) == len(MARKER_SCRIPT)
    for line, (_, want) in zip(lines, MARKER_SCRIPT):
        assert markers(line) == want, line
    assert body(lines[6]) == C2S + " [P.] seq 201:301 ack 1 win 8192 len 100 [out-of-order]"
    assert body(lines[11]) == S2C + " [.] seq 1 ack 101 win 8192 len 0 [dup ack #3]"
    assert body(lines[12]) == C2S + " [P.] seq 101:201 ack 1 win 8192 len 100 [retransmission]"
    assert body(lines[21]) == C2S + " [P.] seq 451:651 ack 1 win 8192 len 200 [retransmission]"


def test_syn_and_fin_retransmissions_and_a_new_connection_on_the_same_ports(tmp_path, capsys):
    pkts = [client("S", 1000), client("S", 1000), server("SA", 5000, 1001), client("A", 1001, 5001),
            client("FA", 1001, 5001), client("FA", 1001, 5001), server("FA", 5001, 1002), client("A", 1002, 5002),
            client("S", 77000), server("SA", 99000, 77001)]
    rc, lines, _ = run(capsys, write(tmp_path / "reuse.pcap", pkts))
    assert rc == 0
    assert [markers(x) for x in lines] == [[], ["retransmission"], [], [], [], ["retransmission"], [], [], [], []]
    assert body(lines[8]) == C2S + " [S] seq 0 win 8192 len 0"
    assert body(lines[9]) == S2C + " [S.] seq 0 ack 1 win 8192 len 0"


def test_sequence_space_wraps_cleanly(tmp_path, capsys):
    ci = 2**32 - 150
    pkts = [client("S", ci), server("SA", 7, ci + 1)]
    pkts += [client("PA", ci + 1 + 100 * i, 8, data=b"z" * 100) for i in range(4)]
    pkts += [client("PA", ci + 101, 8, data=b"z" * 100)]  # crosses 2**32, already sent
    rc, lines, _ = run(capsys, write(tmp_path / "wrap.pcap", pkts))
    assert [body(x).split(" len")[0].split("] ")[1] for x in lines[2:]] == [
        "seq 1:101 ack 1 win 8192", "seq 101:201 ack 1 win 8192", "seq 201:301 ack 1 win 8192",
        "seq 301:401 ack 1 win 8192", "seq 101:201 ack 1 win 8192"]
    assert [markers(x) for x in lines] == [[]] * 6 + [["retransmission"]]


# ---------------------------------------------------------------- other protocols


def other_protocols():
    udp = eth(False) / IP(src=B, dst=A, id=77) / UDP(sport=5000, dport=7) / (b"u" * 3000)
    frags = fragment(udp, fragsize=1480)
    quoted_udp = IP(src=A, dst=B) / UDP(sport=7, dport=5000)
    quoted_tcp = IP(src=A, dst=B) / TCP(sport=80, dport=40000)
    return [
        Ether(src=MAC_B, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=MAC_B, psrc=B, pdst=A),
        eth(True) / ARP(op=2, hwsrc=MAC_A, psrc=A, hwdst=MAC_B, pdst=B),
        Ether(src=MAC_B, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=MAC_B, psrc=B, pdst=B),
        eth(False) / IP(src=B, dst=A) / ICMP(type=8, id=0x1234, seq=7) / (b"p" * 56),
        eth(True) / IP(src=A, dst=B) / ICMP(type=0, id=0x1234, seq=7) / (b"p" * 56),
        eth(True) / IP(src=A, dst=B) / ICMP(type=3, code=3) / quoted_udp,
        eth(True) / IP(src=A, dst=B) / ICMP(type=3, code=4, nexthopmtu=1400) / quoted_tcp,
        eth(True) / IP(src=A, dst=B) / ICMP(type=11, code=0) / quoted_udp,
        eth(False) / IP(src=B, dst=A) / UDP(sport=5000, dport=7) / b"hello world",
        Ether(src=MAC_B, dst=MAC_A) / Dot1Q(vlan=5) / IP(src=B, dst=A) / UDP(sport=5001, dport=7) / b"tagged",
        *frags,
        eth(False) / IP(src=B, dst=A, proto=47) / (b"g" * 24),
        Ether(src=MAC_B, dst=MAC_A, type=0x88CC) / (b"\x00" * 46),
        Ether(src=MAC_B, dst=MAC_A) / IPv6(src="2001:db8::2", dst="2001:db8::1") / UDP(sport=1, dport=2),
    ]


OTHER_LINES = [
    "ARP who-has 198.18.0.1 tell 198.18.0.2",
    "ARP 198.18.0.1 is-at 02:00:00:00:00:01",
    "ARP who-has 198.18.0.2 tell 198.18.0.2 (gratuitous)",
    "ICMP 198.18.0.2 > 198.18.0.1 type 8 code 0 echo request id 4660 seq 7 len 56",
    "ICMP 198.18.0.1 > 198.18.0.2 type 0 code 0 echo reply id 4660 seq 7 len 56",
    "ICMP 198.18.0.1 > 198.18.0.2 type 3 code 3 port unreachable for UDP 198.18.0.1:7 > 198.18.0.2:5000",
    "ICMP 198.18.0.1 > 198.18.0.2 type 3 code 4 fragmentation needed (mtu 1400) "
    "for TCP 198.18.0.1:80 > 198.18.0.2:40000",
    "ICMP 198.18.0.1 > 198.18.0.2 type 11 code 0 ttl exceeded in transit for UDP 198.18.0.1:7 > 198.18.0.2:5000",
    "UDP 198.18.0.2:5000 > 198.18.0.1:7 len 11",
    "UDP 198.18.0.2:5001 > 198.18.0.1:7 len 6",
    "IP 198.18.0.2:5000 > 198.18.0.1:7 frag id 77 offset 0 MF proto udp len 1480",
    "IP 198.18.0.2 > 198.18.0.1 frag id 77 offset 1480 MF proto udp len 1480",
    "IP 198.18.0.2 > 198.18.0.1 frag id 77 offset 2960 proto udp len 48",
    "IP 198.18.0.2 > 198.18.0.1 proto 47 len 24",
    "ETH 02:00:00:00:00:02 > 02:00:00:00:00:01 type 0x88cc len 60",
    "UDP [2001:db8::2]:1 > [2001:db8::1]:2 len 0",
]


def test_arp_icmp_udp_fragment_and_other_lines(tmp_path, capsys):
    rc, lines, err = run(capsys, write(tmp_path / "misc.pcap", other_protocols()))
    assert rc == 0, err
    assert [body(x) for x in lines] == OTHER_LINES


def test_nanosecond_pcap_from_ustack_writer(tmp_path, capsys):
    """PcapWriter's nanosecond stamps give microsecond relative times, truncated, not rounded."""
    path = str(tmp_path / "ns.pcap")
    w = PcapWriter(path)
    pkts = handshake_data_fin()[:4]
    for when, p in zip((1000.0, 1000.0000012, 1000.0019996, 1002.5), pkts):
        w.write(when, bytes(p))
    w.close()
    rc, lines, _ = run(capsys, path)
    assert rc == 0
    assert [x.split(" ", 1)[0] for x in lines] == ["0.000000", "0.000001", "0.001999", "2.500000"]
    assert [body(x) for x in lines] == [body(x) for x in HANDSHAKE_LINES[:4]]


def test_pcapng_reads_the_same(tmp_path, capsys):
    pkts = handshake_data_fin()
    for i, p in enumerate(pkts):
        p.time = 100.0 + i * 0.001
    path = str(tmp_path / "hs.pcapng")
    wrpcapng(path, pkts)
    rc, lines, err = run(capsys, path)
    assert rc == 0, err
    assert lines == HANDSHAKE_LINES


def test_snapped_frames_say_so(tmp_path, capsys):
    path = str(tmp_path / "snap.pcap")
    w = PcapWriter(path, snaplen=60)
    w.write(1.0, bytes(client("PA", 1, 2, data=b"s" * 500)))
    w.close()
    rc, lines, _ = run(capsys, path)
    assert rc == 0
    assert body(lines[0]) == C2S + " [P.] seq 0:500 ack 0 win 8192 len 500 [captured 60 of 554 bytes]"


# ---------------------------------------------------------------- filters and count


def test_port_host_and_count_filters(tmp_path, capsys):
    path = write(tmp_path / "mix.pcap", handshake_data_fin() + other_protocols())
    rc, lines, _ = run(capsys, path, "--port", "80")
    assert rc == 0 and len(lines) == 10  # the connection; ICMP quoting port 80 is not port-filtered
    assert all(" TCP " in x for x in lines)
    rc, lines, _ = run(capsys, path, "--port", "7", "--port", "5001")
    assert [body(x) for x in lines] == [OTHER_LINES[8], OTHER_LINES[9], OTHER_LINES[10]]
    rc, lines, _ = run(capsys, path, "--host", "198.18.0.9")
    assert rc == 0 and lines == []
    rc, lines, _ = run(capsys, path, "--host", A, "-c", "3")
    assert lines == HANDSHAKE_LINES[:3]
    rc, lines, _ = run(capsys, path, "--host", B, "--port", "40000", "-c", "2")
    assert lines == HANDSHAKE_LINES[:2]


def test_bad_filter_arguments_exit_2(tmp_path, capsys):
    path = write(tmp_path / "hs.pcap", handshake_data_fin())
    for argv, word in ((["--host", "nope"], "--host"), (["--port", "70000"], "--port"), (["-c", "0"], "-c"),
                       (["--port", "-1"], "--port"), (["--interval", "0"], "--interval"),
                       (["--interval", "nan"], "--interval"), (["-c", "x"], "-c")):
        with pytest.raises(SystemExit) as exc:  # refused by the parser: one line, status 2
            run(capsys, path, *argv)
        out, err = capsys.readouterr()
        assert exc.value.code == 2 and out == "", argv
        assert f"ustack trace: error: argument {word}" in err and "Traceback" not in err, err


def test_add_parser_wires_a_trace_subcommand(tmp_path, capsys):
    path = write(tmp_path / "hs.pcap", handshake_data_fin())
    parser = argparse.ArgumentParser(prog="ustack")
    sub = parser.add_subparsers(dest="command", required=True)
    trace.add_parser(sub)
    args = parser.parse_args(["trace", path, "-c", "1"])
    assert args.func(args) == 0
    assert capsys.readouterr().out.splitlines() == HANDSHAKE_LINES[:1]


# ---------------------------------------------------------------- damaged input


def test_not_a_capture_is_a_clear_error_with_status_2(tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("this is not a capture, just some words in a file\n")
    rc, lines, err = run(capsys, text)
    assert rc == 2 and lines == []
    assert "not a pcap file (magic 0x74686973)" in err
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    rc, _, err = run(capsys, empty)
    assert rc == 2 and "not a pcap file (only 0 bytes)" in err
    rc, _, err = run(capsys, tmp_path / "missing.pcap")
    assert rc == 2 and "No such file or directory" in err


def test_truncated_last_record_prints_the_rest_and_exits_1(tmp_path, capsys):
    path = write(tmp_path / "hs.pcap", handshake_data_fin())
    data = open(path, "rb").read()
    for cut in (10, len(bytes(handshake_data_fin()[-1])) + 8):  # inside the data; inside the record header
        short = tmp_path / f"cut{cut}.pcap"
        short.write_bytes(data[:-cut])
        rc, lines, err = run(capsys, short)
        assert rc == 1
        assert lines == HANDSHAKE_LINES[:-1]
        assert "truncated record at the end (frame 10:" in err
    header_only = tmp_path / "header.pcap"
    header_only.write_bytes(data[:24])
    assert run(capsys, header_only)[:2] == (0, [])
    half_header = tmp_path / "half_header.pcap"
    half_header.write_bytes(data[:12])
    rc, _, err = run(capsys, half_header)
    assert rc == 2 and "only 12 bytes" in err


def test_corrupt_record_header_stops_with_status_1(tmp_path, capsys):
    path = write(tmp_path / "hs.pcap", handshake_data_fin())
    data = bytearray(open(path, "rb").read())
    # The third record's header: after the global header and two records.
    off = 24
    for _ in range(2):
        off += 16 + struct.unpack_from("<I", data, off + 8)[0]
    struct.pack_into("<I", data, off + 8, 0x7FFFFFF0)
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(bytes(data))
    rc, lines, err = run(capsys, bad)
    assert rc == 1 and lines == HANDSHAKE_LINES[:2]
    assert f"corrupt record header at offset {off} (frame 3: 2147483632 captured bytes)" in err


def malformed_frames():
    ok_tcp = bytes(client("A", 1, 2))
    ip_bad_ihl = bytearray(bytes(eth(False) / IP(src=B, dst=A) / UDP(sport=1, dport=2)))
    ip_bad_ihl[14] = 0x43
    ip_short_total = bytearray(bytes(eth(False) / IP(src=B, dst=A) / UDP(sport=1, dport=2)))
    ip_short_total[16:18] = b"\x00\x0a"
    tcp_bad_offset = bytearray(ok_tcp)
    tcp_bad_offset[14 + 20 + 12] = 0xF0
    tcp_short = bytes(eth(False) / IP(src=B, dst=A, proto=6) / (b"\x00" * 8))
    udp_bad_len = bytearray(bytes(eth(False) / IP(src=B, dst=A) / UDP(sport=1, dport=2) / b"abcd"))
    udp_bad_len[14 + 20 + 4:14 + 20 + 6] = b"\x00\x04"
    icmp_short = bytes(eth(False) / IP(src=B, dst=A, proto=1) / b"\x08\x00")
    return [
        (b"\x01\x02\x03", "? len 3 short frame 010203"),
        (bytes(ip_bad_ihl), "IP 198.18.0.2 > 198.18.0.1 bad header (version 4, ihl 12, total length 28)"),
        (bytes(ip_short_total), "IP 198.18.0.2 > 198.18.0.1 bad header (version 4, ihl 20, total length 10)"),
        (bytes(tcp_bad_offset), C2S + " bad data offset 60 (segment 20 bytes)"),
        (tcp_short, "TCP 198.18.0.2 > 198.18.0.1 truncated header (8 bytes) len 8"),
        (bytes(udp_bad_len), "UDP 198.18.0.2:1 > 198.18.0.1:2 len 0 [bad udp length 4]"),
        (icmp_short, "ICMP 198.18.0.2 > 198.18.0.1 truncated header (2 bytes)"),
        (bytes(eth(False) / IP(src=B, dst=A, proto=17) / b"\x00\x07"),
         "UDP 198.18.0.2 > 198.18.0.1 truncated header len 2"),
        (bytes(range(60)), "ETH 06:07:08:09:0a:0b > 00:01:02:03:04:05 type 0x0c0d len 60"),
    ]


def test_malformed_frames_get_one_line_each_and_no_traceback(tmp_path, capsys):
    cases = malformed_frames()
    path = str(tmp_path / "bad.pcap")
    w = PcapWriter(path)
    for i, (frame, _) in enumerate(cases):
        w.write(1.0 + i, frame)
    w.close()
    rc, lines, err = run(capsys, path)
    assert rc == 0 and err == ""
    assert len(lines) == len(cases)
    assert [body(x) for x in lines] == [want for _, want in cases]


def test_mutated_frames_never_raise(tmp_path, capsys):
    rnd = random.Random(1234)
    seeds = [bytes(p) for p in handshake_data_fin() + other_protocols() + [p for p, _ in MARKER_SCRIPT]]
    path = str(tmp_path / "fuzz.pcap")
    w = PcapWriter(path)
    n = 1500
    for i in range(n):
        f = bytearray(rnd.choice(seeds))
        for _ in range(rnd.randrange(1, 6)):
            f[rnd.randrange(len(f))] = rnd.randrange(256)
        if rnd.random() < 0.3:
            del f[rnd.randrange(len(f)):]
        w.write(i * 0.001, bytes(f))
    w.close()
    rc, lines, err = run(capsys, path)
    assert rc == 0 and err == ""
    assert len(lines) == n
    assert not any("Traceback" in x for x in lines)


def test_random_records_after_a_valid_header_end_cleanly(tmp_path, capsys):
    rnd = random.Random(99)
    for i in range(20):
        junk = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 400)))
        path = tmp_path / f"junk{i}.pcap"
        path.write_bytes(GLOBAL_NS + junk)
        rc, lines, err = run(capsys, path)
        assert rc in (0, 1)
        assert (rc == 1) == ("truncated record" in err or "corrupt record header" in err), err
        assert "Traceback" not in err


def test_command_line_stops_quietly_when_the_reader_goes_away(tmp_path):
    path = str(tmp_path / "many.pcap")
    w = PcapWriter(path)
    frame = bytes(client("PA", 1, 2, data=b"m" * 100))
    for i in range(3000):
        w.write(i * 0.001, frame)
    w.close()
    proc = subprocess.Popen([sys.executable, "-m", "ustack.tools.trace", path], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    try:
        rc = proc.wait(WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert first.decode().startswith("0.000000 " + C2S + " [P.] seq 0:100 ack 0")
    assert rc == 0
    assert proc.stderr.read() == b""


# ---------------------------------------------------------------- --follow


def record_bytes(frames, t0=50.0):
    """Records as PcapWriter lays them out (nanosecond stamps), without the global header."""
    out = []
    for i, f in enumerate(frames):
        when_ns = int(t0 * 10**9) + i * 1000
        out.append(struct.pack("<IIII", when_ns // 10**9, when_ns % 10**9, len(f), len(f)) + f)
    return out


GLOBAL_NS = struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1)


def test_follow_reader_waits_for_partial_records_and_restarts_on_truncation(tmp_path):
    """trace_records.read_records(follow=True) driven by its sleep hook: each 'sleep' lets the writer add a piece."""
    frames = [bytes(p) for p in handshake_data_fin()]
    recs = record_bytes(frames)
    path = str(tmp_path / "grow.pcap")
    blob = GLOBAL_NS + b"".join(recs[:3])
    # Pieces cut at awkward places: in the global header, in a record header, in a frame.
    cuts = [10, 24 + 7, 24 + len(recs[0]) + 30, len(blob)]
    pieces = [blob[a:b] for a, b in zip([0] + cuts, cuts)]
    with open(path, "wb"):
        pass
    script = list(pieces) + ["truncate", GLOBAL_NS + recs[3]]
    sleeps = []

    def sleep(interval):
        sleeps.append(interval)
        if not script:
            raise KeyboardInterrupt
        step = script.pop(0)
        if step == "truncate":
            open(path, "wb").close()
        else:
            with open(path, "ab") as f:
                f.write(step)

    got = []
    with pytest.raises(KeyboardInterrupt):
        for rec in trace_records.read_records(path, follow=True, interval=0.25, sleep=sleep):
            got.append(rec if rec is trace_records.Restart else rec[2])
    assert got == frames[:3] + [trace_records.Restart, frames[3]]
    assert set(sleeps) == {0.25}


def start_follow(path, *extra):
    return subprocess.Popen([sys.executable, "-m", "ustack.tools.trace", "--follow", "--interval", "0.02", str(path),
                             *extra], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class LineWatcher:
    """Collects a stream's lines in a thread; wait(pred) waits (bounded) for the lines to satisfy pred."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream):
        for line in stream:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()

    def wait(self, n: int) -> bool:
        return self.wait_for(lambda lines: len(lines) >= n)

    def wait_for(self, pred) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: pred(self.lines), WAIT)


def test_follow_a_file_written_by_a_thread_until_count(tmp_path):
    path = tmp_path / "live.pcap"
    frames = [bytes(p) for p in handshake_data_fin()[:4]]
    recs = record_bytes(frames)
    with open(path, "wb") as f:
        f.write(GLOBAL_NS)
    proc = start_follow(path, "-c", "4")
    watch = LineWatcher(proc.stdout)
    written = threading.Event()

    def writer():
        with open(path, "ab") as f:
            f.write(recs[0] + recs[1][:20])  # one record and a partial one, in one write
            f.flush()
            if watch.wait(1):
                f.write(recs[1][20:] + recs[2] + recs[3])
                f.flush()
        written.set()

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        rc = proc.wait(WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
    t.join(WAIT)
    watch.thread.join(WAIT)
    assert written.is_set()
    assert rc == 0, proc.stderr.read()
    assert [body(x) for x in watch.lines] == [body(x) for x in HANDSHAKE_LINES[:4]]
    assert watch.lines[1].startswith("0.000001 ")


def test_follow_waits_for_the_file_then_exits_0_on_ctrl_c(tmp_path):
    path = tmp_path / "later.pcap"
    proc = start_follow(path)
    watch = LineWatcher(proc.stdout)
    notes = LineWatcher(proc.stderr)
    try:
        assert notes.wait_for(lambda lines: any("waiting for" in x for x in lines)), notes.lines
        # PcapWriter buffers (the header too): the frames become visible at flush().
        w = PcapWriter(str(path))
        for i, p in enumerate(handshake_data_fin()[:2]):
            w.write(7.0 + i * 0.5, bytes(p))
        w.flush()
        assert watch.wait(2), (watch.lines, proc.poll())
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(WAIT)
        w.close()
    finally:
        if proc.poll() is None:
            proc.kill()
    watch.thread.join(WAIT)
    notes.thread.join(WAIT)
    assert rc == 0, notes.lines
    assert watch.lines == ["0.000000 " + body(HANDSHAKE_LINES[0]), "0.500000 " + body(HANDSHAKE_LINES[1])]
    assert notes.lines == [f"ustack trace: waiting for {path} to appear"]


def test_follow_refuses_a_non_pcap_file(tmp_path):
    path = tmp_path / "junk.pcap"
    path.write_bytes(b"\x00" * 100)
    proc = start_follow(path)
    try:
        rc = proc.wait(WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 2 and "not a pcap file" in proc.stderr.read()


# ---------------------------------------------------------------- a genuine capture


def test_genuine_capture_of_two_stacks_over_a_lossy_pipe(tmp_path, capsys):
    """b pushes 300 kB to a over a link losing 5%; b's own capture shows every resend it made."""
    from tests.stack.netsim import Net
    from ustack.transport.tcp.tcb import State

    path = str(tmp_path / "real.pcap")
    net = Net(seed=3, loss=0.05, delay=0.002, wrap_b=lambda end: PcapDevice(end, path, end.link.clock))
    data = hashlib.sha256(b"trace").digest() * 9600
    listener = net.a.tcp.listen((b"\0\0\0\0", 80), 16)
    got = bytearray()
    box = {}

    def on_data(conn=None):
        while True:
            d = box["conn"].recv(1 << 20)
            if not d:
                return
            got.extend(d)

    def on_listen(lst):
        if "conn" not in box and lst.readable:
            box["conn"] = lst.accept()
            box["conn"].on_event = on_data
            on_data()

    listener.on_event = on_listen
    conn = net.b.tcp.connect(None, (bytes([198, 18, 0, 1]), 80), net.clock.now)
    sent = [0]

    def pump(c=None):
        if conn.state not in (State.ESTABLISHED, State.CLOSE_WAIT):
            return
        while sent[0] < len(data):
            n = conn.send(memoryview(data)[sent[0]:sent[0] + 65536])
            if not n:
                return
            sent[0] += n
        if not conn.wr_shutdown:
            conn.shutdown(1)

    conn.on_event = pump
    conn.on_send_low_water = pump
    assert net.run(lambda: "conn" in box and box["conn"].eof and len(got) == len(data), 300)
    assert bytes(got) == data
    net.b.device.close()
    frames = net.b.device.writer.frames
    info = conn.info()
    assert info.retransmits > 0

    rc, lines, err = run(capsys, path)
    assert rc == 0, err
    assert len(lines) == frames
    tcp = [x for x in lines if " TCP " in x]
    port = conn.local[1]
    c2s = f"TCP 198.18.0.2:{port} > 198.18.0.1:80"
    assert body(tcp[0]).startswith(c2s + " [S] seq 0 win ")
    synack = next(x for x in tcp if "[S.]" in x)
    assert " seq 0 ack 1 win " in synack
    resent = [x for x in tcp if "retransmission" in markers(x)]
    assert len(resent) == info.retransmits
    assert all(body(x).startswith(c2s) for x in resent)
    dups = [m for x in tcp for m in markers(x) if m.startswith("dup ack")]
    assert {"dup ack #1", "dup ack #2", "dup ack #3"} <= set(dups)
    assert any(body(x).startswith(c2s + " [F") for x in tcp)


def test_ipv6_icmpv6_ndp_lines():
    from scapy.layers.inet import TCP, UDP
    from scapy.layers.inet6 import (ICMPv6EchoRequest, ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6NDOptSrcLLAddr,
                                    ICMPv6PacketTooBig, IPv6, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop)
    from scapy.layers.l2 import Ether

    from ustack.tools.trace_format import Tracer

    frames = [
        Ether(dst="33:33:ff:00:00:02") / IPv6(src="fe80::1", dst="ff02::1:ff00:2", hlim=255)
        / ICMPv6ND_NS(tgt="fd00::2") / ICMPv6NDOptSrcLLAddr(lladdr="02:00:00:00:00:01"),
        Ether() / IPv6(src="fd00::2", dst="fd00::1", hlim=255) / ICMPv6ND_NA(tgt="fd00::2", R=0, S=1, O=1),
        Ether() / IPv6(src="fd00::2", dst="fd00::1") / TCP(sport=40000, dport=80, flags="S", options=[("MSS", 1440)]),
        Ether() / IPv6(src="fd00::2", dst="fd00::1") / IPv6ExtHdrFragment(id=77, offset=181, nh=17) / (b"x" * 600),
        Ether() / IPv6(src="fd00::2", dst="fd00::1") / IPv6ExtHdrHopByHop() / UDP(sport=5, dport=7) / b"hi",
        Ether() / IPv6(src="fd00::2", dst="fd00::1") / ICMPv6EchoRequest(id=3, seq=4),
        Ether() / IPv6(src="fd00::2", dst="fd00::1") / ICMPv6PacketTooBig(mtu=1280) / (b"x" * 48),
    ]
    t = Tracer()
    lines = [t.frame(i * 1000, 1, bytes(f), len(bytes(f))).split(" ", 1)[1] for i, f in enumerate(frames)]
    assert lines == [
        "ICMP6 fe80::1 > ff02::1:ff00:2 neighbor solicitation who-has fd00::2 (src lladdr 02:00:00:00:00:01)",
        "ICMP6 fd00::2 > fd00::1 neighbor advertisement fd00::2 [S O]",
        "TCP [fd00::2]:40000 > [fd00::1]:80 [S] seq 0 win 8192 len 0 options [mss 1440]",
        "IP6 fd00::2 > fd00::1 frag id 77 offset 1448 proto udp len 600",
        "UDP [fd00::2]:5 > [fd00::1]:7 len 2 ext [hbh]",
        "ICMP6 fd00::2 > fd00::1 echo request id 3 seq 4 len 0",
        "ICMP6 fd00::2 > fd00::1 type 2 code 0 packet too big (mtu 1280) len 48",
    ]
    assert Tracer(ports=[7]).frame(0, 1, bytes(frames[4]), len(bytes(frames[4]))) is not None
    assert Tracer(ports=[9]).frame(0, 1, bytes(frames[4]), len(bytes(frames[4]))) is None
