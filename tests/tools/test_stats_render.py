"""ustack.tools.stats_render: snapshots (plain dicts, as a client receives them) as ss/nstat-like text."""

from __future__ import annotations

from ustack.tools import stats_render
from ustack.transport.tcp.congestion import INFINITE_SSTHRESH


def connection(**over) -> dict:
    c = {"state": "ESTABLISHED", "local": "198.18.0.1:40000", "remote": "198.18.0.2:80", "recv_queue": 5,
         "send_queue": 7, "options": ["ts", "sack", "wscale"], "congestion": "cubic", "snd_wscale": 7,
         "rcv_wscale": 9, "rto": 0.2045, "srtt": 0.0015, "rttvar": 0.00075, "snd_mss": 1448, "rcv_mss": 536,
         "cwnd": 14480, "ssthresh": INFINITE_SSTHRESH, "bytes_acked": 100, "bytes_received": 200, "segs_out": 3,
         "segs_in": 4, "bytes_in_flight": 0, "snd_wnd": 65535, "rcv_wnd": 64240, "unsent": 0, "ooo_bytes": 0,
         "timeouts": 0, "fast_retransmits": 0, "dup_acks": 0, "challenge_acks": 0, "backoff": 0,
         "retransmits": 0, "in_recovery": False, "snd_una": 1, "snd_nxt": 2, "snd_max": 2, "rcv_nxt": 3}
    c.update(over)
    return c


def snapshot(**over) -> dict:
    snap = {"version": 1, "stack": {"pid": 42, "addr": "198.18.0.1", "prefixlen": 24, "gateway": "198.18.0.254",
                                    "mac": "02:00:00:00:00:0a", "mtu": 1500, "mode": "pipe", "now": 10.0,
                                    "uptime": 3725.0},
            "counters": {"a.x": 1, "drop.ipv4.bad_checksum": 2}, "drops": {"ipv4.bad_checksum": 2},
            "tcp": [connection()], "listeners": [], "udp": [], "arp": []}
    snap.update(over)
    return snap


def test_header_names_the_stack_and_its_uptime():
    assert stats_render.render_header(snapshot()) == (
        "ustack pid 42  198.18.0.1/24 gateway 198.18.0.254  mac 02:00:00:00:00:0a  mtu 1500  backend pipe  "
        "uptime 1h02m05s")


def test_connection_detail_in_ss_units():
    detail = stats_render.tcp_detail(connection()).split()
    assert detail[:4] == ["ts", "sack", "cubic", "wscale:7,9"]
    assert "rto:204.5" in detail and "rtt:1.5/0.75" in detail and "cwnd:10" in detail
    assert not any(d.startswith("ssthresh:") for d in detail)  # infinite: not shown, as in ss
    assert "ssthresh:5" in stats_render.tcp_detail(connection(ssthresh=5 * 1448)).split()
    assert "send 77.2Mbps" in stats_render.tcp_detail(connection())
    assert "recovery" in stats_render.tcp_detail(connection(in_recovery=True)).split()
    everything = stats_render.tcp_detail(connection(), everything=True).split()
    assert "dupacks:0" in everything and "snd_una:1" in everything and "cwnd_bytes:14480" in everything


def test_tables_with_nothing_in_them_say_so():
    text = stats_render.render(snapshot(tcp=[]))
    assert "TCP: no connections, no listeners" in text
    assert "UDP: no sockets" in text and "ARP: cache empty" in text


def test_an_ipv6_only_stack_shows_no_arp_table():
    v6 = {"addresses": [{"addr": "fd00::1/64", "state": "preferred", "origin": "static"}], "mtu": 1500,
          "routers": []}
    stack = dict(snapshot()["stack"], addr="fd00::1", prefixlen=64, gateway=None)
    text = stats_render.render(snapshot(tcp=[], stack=stack, ipv6=v6, ndp=[]))
    assert "ARP" not in text and "IPv6 fd00::1/64 mtu 1500" in text and "NDP: cache empty" in text
    dual = stats_render.render(snapshot(tcp=[], ipv6=v6, ndp=[]))
    assert "ARP: cache empty\n\nIPv6 fd00::1/64" in dual


def test_render_counters_deltas_exactly():
    snap1 = {"stack": {"now": 10.0, "uptime": 5.0}, "drops": {"ipv4.bad_checksum": 1},
             "counters": {"a.x": 5, "b.y": 7, "drop.ipv4.bad_checksum": 1}}
    snap2 = {"stack": {"now": 12.0, "uptime": 7.0}, "drops": {"ipv4.bad_checksum": 4},
             "counters": {"a.x": 5, "b.y": 11, "c.z": 1, "drop.ipv4.bad_checksum": 4}}
    assert [line.split() for line in stats_render.render_counters(snap2, snap1)] == [
        ["#counters:", "deltas", "over", "2.00s", "(delta,", "rate/s)"],
        ["b.y", "4", "2.0"], ["c.z", "1", "0.5"],
        [], ["drops", "by", "reason", "(4", "total)"], ["ipv4.bad_checksum", "4", "+3"]]
    coloured = stats_render.render_counters(snap2, snap1, color=True)
    assert coloured[-2] == "\x1b[1;31mdrops by reason (4 total)\x1b[0m" and coloured[-1].startswith("\x1b[1m")
