"""What ``ustack stats`` prints: a snapshot as ``ss -tni``-like tables and ``nstat``-like counters.

``render(snap, prev)`` gives the whole text: a header line (pid, address,
MAC, MTU, backend, uptime), the TCP listeners and connections with their
``ss -i`` detail line, the UDP sockets, the ARP cache, the counters (totals,
or per-interval deltas and rates against ``prev``) and the drops by reason
last. Units as in ss: rto and rtt in milliseconds, cwnd and ssthresh in
segments of the sender MSS (the snapshot keeps bytes).

Every string of the snapshot, keys included, is escaped first (``escaped``):
the publisher is another process, and a name holding a terminal escape must
print as the text ``\\x1b[...``, not act on the terminal.
"""

from __future__ import annotations

from ustack.transport.tcp.congestion import INFINITE_SSTHRESH

SS_STATE = {
    "ESTABLISHED": "ESTAB", "SYN_SENT": "SYN-SENT", "SYN_RECEIVED": "SYN-RECV", "FIN_WAIT_1": "FIN-WAIT-1",
    "FIN_WAIT_2": "FIN-WAIT-2", "CLOSE_WAIT": "CLOSE-WAIT", "CLOSING": "CLOSING", "LAST_ACK": "LAST-ACK",
    "TIME_WAIT": "TIME-WAIT", "CLOSED": "CLOSED", "LISTEN": "LISTEN",
}
CLEAR = "\x1b[H\x1b[2J"
RED, BOLD, RESET = "\x1b[1;31m", "\x1b[1m", "\x1b[0m"


def printable(text: str) -> str:
    """``text`` with every control or non-printable character as a visible escape (no terminal escapes)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def escaped(value):
    """A decoded JSON value with every string, keys included, made ``printable``."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(k) if isinstance(k, str) else k: escaped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [escaped(v) for v in value]
    return value


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}".rstrip("0").rstrip(".")


def _rate(bits_per_s: float) -> str:
    for unit, scale in (("Gbps", 1e9), ("Mbps", 1e6), ("Kbps", 1e3)):
        if bits_per_s >= scale:
            return f"{bits_per_s / scale:.1f}{unit}"
    return f"{bits_per_s:.0f}bps"


def tcp_detail(c: dict, everything: bool = False) -> str:
    """The indented ``ss -i`` line of one connection."""
    mss = c["snd_mss"] or 1
    parts = list(c.get("options", []))
    parts = [p for p in parts if p != "wscale"]
    parts.append(c["congestion"])
    parts.append(f"wscale:{c['snd_wscale']},{c['rcv_wscale']}")
    parts.append(f"rto:{_ms(c['rto'])}")
    if c["srtt"] is not None:
        parts.append(f"rtt:{_ms(c['srtt'])}/{_ms(c['rttvar'])}")
    parts += [f"mss:{c['snd_mss']}", f"rcvmss:{c['rcv_mss']}", f"cwnd:{c['cwnd'] // mss}"]
    if c["ssthresh"] < INFINITE_SSTHRESH:
        parts.append(f"ssthresh:{c['ssthresh'] // mss}")
    parts += [f"bytes_acked:{c['bytes_acked']}", f"bytes_received:{c['bytes_received']}",
              f"segs_out:{c['segs_out']}", f"segs_in:{c['segs_in']}"]
    if c["srtt"]:
        parts.append(f"send {_rate(c['cwnd'] * 8 / c['srtt'])}")
    parts += [f"inflight:{c['bytes_in_flight']}", f"peer_wnd:{c['snd_wnd']}", f"rcv_wnd:{c['rcv_wnd']}"]
    for key, label in (("unsent", "unsent"), ("ooo_bytes", "ooo"), ("timeouts", "timeouts"),
                       ("fast_retransmits", "fast_retrans"), ("dup_acks", "dupacks"),
                       ("challenge_acks", "challenge_acks")):
        if c[key] or everything:
            parts.append(f"{label}:{c[key]}")
    parts.append(f"retrans:{c['backoff']}/{c['retransmits']}")
    if c["in_recovery"]:
        parts.append("recovery")
    if everything:
        parts += [f"cwnd_bytes:{c['cwnd']}", f"snd_una:{c['snd_una']}", f"snd_nxt:{c['snd_nxt']}",
                  f"snd_max:{c['snd_max']}", f"rcv_nxt:{c['rcv_nxt']}"]
    return " ".join(parts)


def _table(rows: list[tuple], header: tuple) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header] + [r for r, _ in rows]) for i in range(len(header))]
    right = {1, 2}  # the queue columns, right-aligned like ss
    lines = []

    def fmt(cells):
        return " ".join(str(v).rjust(w) if i in right else str(v).ljust(w)
                        for i, (v, w) in enumerate(zip(cells, widths))).rstrip()

    lines.append(fmt(header))
    for cells, detail in rows:
        lines.append(fmt(cells))
        if detail:
            lines.append("\t " + detail)
    return lines


SS_HEADER = ("State", "Recv-Q", "Send-Q", "Local Address:Port", "Peer Address:Port")


def render_header(snap: dict) -> str:
    s = snap["stack"]
    gw = f" gateway {s['gateway']}" if s.get("gateway") else ""
    return (f"ustack pid {s['pid']}  {s['addr']}/{s['prefixlen']}{gw}  mac {s['mac']}  mtu {s['mtu']}  "
            f"backend {s['mode']}  uptime {_uptime(s['uptime'])}")


def _uptime(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def render_tcp(snap: dict, everything: bool = False) -> list[str]:
    rows = []
    for lst in snap["listeners"]:
        detail = (f"accept_q:{lst['accept_queue']}/{lst['backlog']} syn_q:{lst['syn_queue']}/{lst['syn_backlog']}"
                  f" overflows:{lst['overflows']}")
        if everything or lst["cookies_sent"]:
            detail += (f" cookies_sent:{lst['cookies_sent']} cookies_accepted:{lst['cookies_accepted']}"
                       f" cookies_rejected:{lst['cookies_rejected']}")
        rows.append((("LISTEN", lst["accept_queue"], lst["backlog"], lst["local"], "0.0.0.0:*"), detail))
    for c in sorted(snap["tcp"], key=lambda c: (c["local"], c["remote"])):
        rows.append(((SS_STATE.get(c["state"], c["state"]), c["recv_queue"], c["send_queue"], c["local"],
                      c["remote"]), tcp_detail(c, everything)))
    if not rows:
        return ["TCP: no connections, no listeners"]
    return ["TCP"] + _table(rows, SS_HEADER)


def render_udp(snap: dict) -> list[str]:
    rows = [((u["state"], u["recv_q"], 0, u["local"], u["remote"] or "0.0.0.0:*"),
             f"datagrams:{u['datagrams']} rcvbuf:{u['rcvbuf']} drops:{u['drops']}")
            for u in sorted(snap["udp"], key=lambda u: u["local"])]
    if not rows:
        return ["UDP: no sockets"]
    return ["UDP"] + _table(rows, SS_HEADER)


def render_arp(snap: dict) -> list[str]:
    """The ARP cache, like ``ip -4 neigh`` (nothing on an IPv6-only stack: its header address is IPv6)."""
    if not snap["arp"]:
        return [] if ":" in snap["stack"].get("addr", "") else ["ARP: cache empty", ""]
    return ["ARP"] + [f"{e['ip']:<15} lladdr {e['mac']} expires {e['expires']:.1f}s" for e in snap["arp"]] + [""]


def render_ndp(snap: dict) -> list[str]:
    """IPv6 addresses and the neighbour cache, like ``ip -6 addr`` and ``ip -6 neigh`` (IPv6 stacks only)."""
    if "ipv6" not in snap:
        return []
    v6 = snap["ipv6"]
    out = ["IPv6 " + " ".join(f"{a['addr']}" + ("" if a["state"] == "preferred" else f" ({a['state']})")
                              for a in v6["addresses"]) + f" mtu {v6['mtu']}"]
    if v6["routers"]:
        out.append("default via " + " ".join(v6["routers"]))
    if not snap["ndp"]:
        return out + ["NDP: cache empty", ""]
    return out + ["NDP"] + [f"{e['ip']:<28} lladdr {e['mac'] or '-':<17} {e['state']}" for e in snap["ndp"]] + [""]


def render_counters(snap: dict, prev: dict | None = None, everything: bool = False, color: bool = False) -> list[str]:
    """nstat-like: totals on the first round, per-interval deltas and rates after (``prev``)."""
    cur = snap["counters"]
    names = [n for n in cur if not n.startswith("drop.")]
    width = max([40] + [len(n) for n in cur])
    lines = []
    if prev is None:
        lines.append(f"#counters since start ({_uptime(snap['stack']['uptime'])})")
        shown = [(n, cur[n]) for n in names if cur[n] or everything]
        lines += [f"{n:<{width}} {v:>14}" for n, v in shown]
    else:
        old = prev["counters"]
        interval = max(snap["stack"]["now"] - prev["stack"]["now"], 1e-9)
        lines.append(f"#counters: deltas over {interval:.2f}s" + ("   (delta, rate/s, total)" if everything
                                                                  else "   (delta, rate/s)"))
        for n in names:
            d = cur[n] - old.get(n, 0)
            if d or everything:
                tail = f" {cur[n]:>14}" if everything else ""
                lines.append(f"{n:<{width}} {d:>14} {d / interval:>12.1f}{tail}")
    drops = snap["drops"]
    total = sum(drops.values())
    head = f"drops by reason ({total} total)" if drops else "drops by reason: none"
    lines.append("")
    lines.append(f"{RED}{head}{RESET}" if color and drops else head)
    old_drops = prev["drops"] if prev is not None else {}
    for reason, count in drops.items():
        delta = count - old_drops.get(reason, 0)
        line = f"{reason:<{width}} {count:>14}" + (f" {'+' + str(delta):>12}" if prev is not None else "")
        lines.append(f"{BOLD}{line}{RESET}" if color and (prev is None or delta) else line)
    return lines


def render(snap: dict, prev: dict | None = None, *, tcp: bool = True, udp: bool = True, counters: bool = True,
           everything: bool = False, color: bool = False) -> str:
    snap = escaped(snap)
    prev = escaped(prev) if prev is not None else None
    out = [render_header(snap), ""]
    if tcp:
        out += render_tcp(snap, everything) + [""]
    if udp:
        out += render_udp(snap) + [""] + render_arp(snap) + render_ndp(snap)
    if counters:
        out += render_counters(snap, prev, everything, color)
    return "\n".join(out).rstrip("\n") + "\n"
