"""The fuzz campaign script (tools/fuzz_stack.py) on a short run: no internal error, no lost byte."""

from __future__ import annotations

import json

from ustack.tools import fuzz_stack


def test_fuzz_campaign_20k_frames(capsys):
    rc = fuzz_stack.main(["--frames", "20000", "--seed", "3", "--storms", "12", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["ok"]
    # issue 25: stack-to-stack storms (forged segments each way, timestamps off) all end quiet; on main, half
    # of such storms went on for ever, one ACK per round trip each way
    assert report["storms"] == 12 and report["storms_loud"] == 0 and 0 < report["storm_frames_max"] < 20
    assert report["frames"] == 20000 and report["internal_errors"] == 0
    # the live services really ran through the storm, every byte and datagram checked
    assert report["tcp_bytes_checked"] == report["tcp_bytes_sent"] > 1_000_000
    assert report["tcp_bytes_wrong"] == 0 and report["tcp_state"] == "ESTABLISHED"
    assert report["udp_echoed"] == report["udp_sent"] > 100
    # every kind of frame was generated, and the stack named its drops across the layers
    kinds = report["kinds"]
    for kind in ("arp", "ip_options", "fragment", "icmp", "udp", "tcp", "ethernet_odd", "mutated",
                 "live_out_of_window", "ipv6"):
        assert kinds.get(kind, 0) > 100, kind
    drops = report["drops_a"]
    for prefix in ("eth.", "arp.", "ipv4.", "icmp.", "udp.", "tcp.", "ipv6.", "icmpv6.", "ndp."):
        assert any(r.startswith(prefix) for r in drops), prefix
    assert drops.get("tcp.unacceptable", 0) + drops.get("tcp.rst_out_of_window", 0) > 0


def test_fuzz_campaign_fails_on_a_wrong_byte(monkeypatch, capsys):
    """The check can fail: when the first chunk B sends differs from the stream it checks, exit 1."""
    real = fuzz_stack.stream_bytes
    calls = []

    def first_chunk_damaged(offset, n):
        data = real(offset, n)
        calls.append(offset)
        if len(calls) == 1:  # the first call is B's first send
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        return data

    monkeypatch.setattr(fuzz_stack, "stream_bytes", first_chunk_damaged)
    rc = fuzz_stack.main(["--frames", "2000", "--seed", "3", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1 and not report["ok"] and report["tcp_bytes_wrong"] == 1
