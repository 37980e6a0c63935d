"""The report of ``ustack bench``: the text table, the JSON file, the PNG chart and the notes.

``format_table(result)`` prints the machine, the placement, one line per row,
the latency table (``latency_table``: TCP echo RTT by message size, the
spaced ping, connect() time and connect+close per second, each stack side by
side with its ratio to the kernel) and one line per ring path; ``write_json``
keeps everything (each repetition's figures too); ``draw_png`` draws bar charts when matplotlib is there and
otherwise says why not; ``notes_for`` adds the observations worth a line
(the TPACKET_V3 retire timer, server drops, transfers cut by the time cap,
unanswered echoes).
"""

from __future__ import annotations

import json
import statistics
from typing import Optional

from ustack.tools.bench_config import LATENCY_SIZES, MESSAGE, METRICS, RING_METRICS, SERVER_CPU_METRICS
from ustack.tools.bench_matrix import format_matrix
from ustack.tools.bench_program import format_programs


def _fmt(value, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "MB/s":
        return f"{value:.1f}"
    if unit == "µs" and value < 10:
        return f"{value:.2f}"
    return f"{value:.0f}"


def _size(size: int) -> str:
    return f"{size // 1000} KB" if size >= 10_000 else f"{size} B"


def latency_table(result: dict) -> list[dict]:
    """The latency suite as lines of figures: what, unit, and per row {"p50", "p99", "ratio"}.

    ``ratio`` is the row's p50 (or rate) over the kernel row's: above 1 a
    ustack RTT is slower than the kernel's, below 1 a ustack rate is lower.
    Empty when no row ran the suite.
    """
    rows = [r for r in result["rows"] if r["status"] == "ok" and r.get("latency")]
    if not rows:
        return []
    lines = [(f"rtt {size}", f"TCP echo {_size(size)}", "µs",
              lambda lat, size=size: (lat["rtt"][str(size)]["p50"], lat["rtt"][str(size)]["p99"]))
             for size in LATENCY_SIZES]
    method = next((r["latency"]["ping"].get("method") for r in rows), "icmp")
    lines.append(("ping", f"ping {result['config'].get('ping_interval', 0.01) * 1e3:g} ms apart, {method}", "µs",
                  lambda lat: (lat["ping"]["p50"], lat["ping"]["p99"])))
    lines.append(("connect", "connect()", "µs", lambda lat: (lat["connect_p50_us"], lat["connect_p99_us"])))
    lines.append(("connect_close", "connect+close", "1/s", lambda lat: (lat["connect_close_per_s"], None)))
    kernel = next((r for r in rows if r["name"] == "kernel"), None)
    table = []
    for key, label, unit, pick in lines:
        entry = {"key": key, "what": label, "unit": unit, "rows": {}}
        base = pick(kernel["latency"])[0] if kernel else None
        for row in rows:
            p50, p99 = pick(row["latency"])
            ratio = p50 / base if (p50 is not None and base and row is not kernel) else None
            entry["rows"][row["name"]] = {"p50": p50, "p99": p99, "ratio": ratio}
        table.append(entry)
    return table


def format_latency(result: dict) -> list[str]:
    """Text lines of ``latency_table``: one column group per row (p50, p99, and ×kernel for the others)."""
    table = result.get("latency_table") or latency_table(result)
    if not table:
        return []
    names = list(table[0]["rows"])
    width = max(len(e["what"]) for e in table) + 6
    head1 = f"{'':{width}}"
    head2 = f"{'':{width}}"
    for name in names:
        cols = 2 if name == "kernel" else 3
        span = 8 * cols
        head1 += f"  {name:>{span}}"
        head2 += "  " + f"{'p50':>8}{'p99':>8}" + ("" if name == "kernel" else f"{'×kernel':>8}")
    out = ["", f"latency: p50/p99; ×kernel = this row's p50 (or rate) / the kernel's "
               f"(above 1: slower RTT; below 1: fewer connections/s); TCP echo on one connection, TCP_NODELAY",
           head1, head2]
    for entry in table:
        line = f"{entry['what'] + ' (' + entry['unit'] + ')':{width}}"
        for name in names:
            cell = entry["rows"][name]
            line += "  " + f"{_fmt(cell['p50'], entry['unit']):>8}{_fmt(cell['p99'], entry['unit']):>8}"
            if name != "kernel":
                ratio = cell["ratio"]
                line += f"{'-' if ratio is None else f'{ratio:.2f}':>8}"
        out.append(line)
    return out


def format_server_cpu(result: dict) -> list[str]:
    """The server process's CPU during push, pull and connections (all its threads; kernel softirq work
    done on the client's CPU is not in it)."""
    rows = [r for r in result["rows"] if r["status"] == "ok" and
            any(r["metrics"].get(k) is not None for k, _, _ in SERVER_CPU_METRICS)]
    if not rows:
        return []
    width = max([len("row")] + [len(r["name"]) for r in rows])
    out = ["", "server CPU (% of one CPU; µs of CPU per 1448-byte segment moved; µs per connection):",
           f"{'row':{width}}  " + "  ".join(f"{h:>11}" for _, h, _ in SERVER_CPU_METRICS)]
    for row in rows:
        out.append(f"{row['name']:{width}}  " + "  ".join(
            f"{_fmt(row['metrics'].get(k), u):>11}" for k, _, u in SERVER_CPU_METRICS))
    return out


FAMILY_METRICS = (("udp_rtt_p50_us", "UDP p50"), ("tcp_rtt_p50_us", "TCP p50"), ("push_mbps", "push"),
                  ("pull_mbps", "pull"), ("conn_per_s", "conn/s"))
# Where each of them is in a repetition's samples (bench_runner._service_rep).
FAMILY_SAMPLES = {"udp_rtt_p50_us": ("udp_rtt", "p50"), "tcp_rtt_p50_us": ("tcp_rtt", "p50"),
                  "push_mbps": ("push", "mbps"), "pull_mbps": ("pull", "mbps"), "conn_per_s": ("cps", "rate")}


def family_ratio(six: dict, four: dict, key: str) -> Optional[float]:
    """IPv6 / IPv4 of one metric: the median of the per-repetition ratios when both families were
    measured in the same repetitions (back to back: the machine's drift cancels within each pair),
    else the ratio of the two medians."""
    where, field = FAMILY_SAMPLES[key]
    a, b = (six.get("samples") or {}).get(where), (four.get("samples") or {}).get(where)
    if a and b and len(a) == len(b):
        pairs = [x[field] / y[field] for x, y in zip(a, b)
                 if x.get(field) is not None and y.get(field)]
        if len(pairs) == len(a):
            return statistics.median(pairs)
    x, y = six["metrics"].get(key), four["metrics"].get(key)
    return x / y if x is not None and y else None


def format_families(result: dict) -> list[str]:
    """Each IPv6 row beside the same stack's IPv4 row: the ratio IPv6 / IPv4 of RTT, MB/s and conn/s."""
    v4 = {r["name"]: r for r in result["rows"] if r["status"] == "ok" and r.get("family", 4) == 4}
    # An IPv6 row carries its own IPv4 measurement (same server, interleaved: ``paired_v4``);
    # older JSON without it falls back to the IPv4 row of the same stack.
    pairs = [(r, r.get("paired_v4") or v4.get(r["name"][:-3])) for r in result["rows"]
             if r["status"] == "ok" and r.get("family") == 6]
    pairs = [(six, four) for six, four in pairs if four is not None]
    if not pairs:
        return []
    width = max(len(six["name"]) for six, _ in pairs)
    out = ["", "IPv6 beside IPv4 (ratio IPv6 / IPv4 of the same server, the families measured in turn "
               "repetition by repetition, median of the repetitions' ratios; RTT above 1: slower, MB/s and "
               "conn/s below 1: slower):",
           f"{'row':{width}}  " + "  ".join(f"{h:>8}" for _, h in FAMILY_METRICS)]
    for six, four in pairs:
        cells = []
        for key, _ in FAMILY_METRICS:
            r = family_ratio(six, four, key)
            cells.append(f"{r:>8.2f}" if r is not None else f"{'-':>8}")
        out.append(f"{six['name']:{width}}  " + "  ".join(cells))
    return out


def format_table(result: dict) -> str:
    """The human-readable report: machine, placement, both tables, notes."""
    m = result["machine"]
    out = [
        f"machine: {m['cpu_model']}, {m['cpus']} CPUs, kernel {m['kernel']}, Python {m['python']}, "
        f"load {' '.join(str(x) for x in m.get('loadavg_at_start', []))} (shared machine: expect noise)",
        f"placement: {result['placement']['text']}",
        f"suite: {'quick' if result['config'].get('quick') else 'default'}, median of {result['config']['reps']} "
        f"reps; RTT over {result['config']['rtt_count']} round trips of {MESSAGE} B; bulk "
        f"{result['config']['bulk_bytes'] / 1e6:g} MB (capped at {result['config']['bulk_seconds']:g} s) at 1500 MTU; "
        f"conn/s over {result['config']['cps_seconds']:g} s",
        "",
    ]
    heads = [h for _, h, _ in METRICS]
    units = [u for _, _, u in METRICS]
    width = max([len("row")] + [len(r["name"]) for r in result["rows"]])
    out.append(f"{'row':{width}}  " + "  ".join(f"{h:>8}" for h in heads) + "  mode")
    out.append(f"{'':{width}}  " + "  ".join(f"{u:>8}" for u in units))
    for row in result["rows"]:
        if row["status"] != "ok":
            out.append(f"{row['name']:{width}}  {row['status']}: {row['note']}")
            continue
        cells = "  ".join(f"{_fmt(row['metrics'].get(k), u):>8}" for k, _, u in METRICS)
        out.append(f"{row['name']:{width}}  {cells}  {row['mode']}" + (f" ({row['note']})" if row["note"] else ""))
    out += format_server_cpu(result)
    out += format_families(result)
    out += format_latency(result)
    out += format_programs(result)
    out += format_matrix(result.get("matrix"))
    if result.get("rings"):
        out += ["", "ring cost, 60-byte UDP frames (64 on a wire); CPU of the stack-side thread per frame:"]
        width = max([len("path")] + [len(r["name"]) for r in result["rings"]])
        out.append(f"{'path':{width}}  " + "  ".join(f"{h:>11}" for _, h, _ in RING_METRICS))
        for ring in result["rings"]:
            if ring["status"] != "ok":
                out.append(f"{ring['name']:{width}}  {ring['status']}: {ring['note']}")
                continue
            out.append(f"{ring['name']:{width}}  " + "  ".join(
                f"{(f'{ring[k]:.0f}' if u == 'kpps' else f'{ring[k]:.2f}'):>11}" for k, _, u in RING_METRICS))
    if result.get("notes"):
        out += ["", "notes:"] + [f"- {n}" for n in result["notes"]]
    out.append(f"\ntook {result.get('duration_s', 0):.0f} s")
    return "\n".join(out)


def write_json(result: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(result, f, indent=2, sort_keys=False, default=str)
        f.write("\n")


def draw_png(result: dict, path: str) -> Optional[str]:
    """Bar charts of every metric; returns None on success or why no chart was drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:  # not installed (an optional extra) or broken
        return f"matplotlib not available ({type(exc).__name__}: {exc}); no chart (pip install 'ustack[bench]')"
    rows = [r for r in result["rows"] if r["status"] == "ok"]
    rings = [r for r in result.get("rings", []) if r["status"] == "ok"]
    panels = [
        ("UDP echo RTT (µs, log)", [("p50", "udp_rtt_p50_us"), ("p99", "udp_rtt_p99_us")], True),
        ("TCP echo RTT (µs, log)", [("p50", "tcp_rtt_p50_us"), ("p99", "tcp_rtt_p99_us")], True),
        ("TCP throughput (MB/s, log)", [("push", "push_mbps"), ("pull", "pull_mbps")], True),
        ("TCP connections/s", [("conn/s", "conn_per_s")], False),
    ]
    fig, axes = plt.subplots(3, 3, figsize=(16, 12.5))
    axes = axes.ravel()
    names = [r["name"] for r in rows]
    for ax, (title, series, logy) in zip(axes, panels):
        _bars(ax, names, [(label, [r["metrics"].get(key) for r in rows]) for label, key in series], title, logy)
    ring_names = [r["name"] for r in rings]
    _bars(axes[4], ring_names, [("rx", [r["rx_kpps"] for r in rings]), ("tx", [r["tx_kpps"] for r in rings])],
          "ring: 60-byte frames (kpps)", False)
    _bars(axes[5], ring_names, [("rx", [r["rx_cpu_us"] for r in rings]), ("tx", [r["tx_cpu_us"] for r in rings])],
          "ring: CPU µs per frame", False)
    table = {e["key"]: e for e in (result.get("latency_table") or latency_table(result))}
    lat_rows = list(next(iter(table.values()))["rows"]) if table else []
    sizes = [_size(size) for size in LATENCY_SIZES]
    _bars(axes[6], sizes if lat_rows else [],
          [(name, [table[f"rtt {size}"]["rows"][name]["p50"] for size in LATENCY_SIZES]) for name in lat_rows],
          "TCP echo RTT p50 by message size (µs, log)", True)
    _bars(axes[7], ["ping", "connect()"] if lat_rows else [],
          [(name, [table["ping"]["rows"][name]["p50"], table["connect"]["rows"][name]["p50"]]) for name in lat_rows],
          "ping (10 ms apart) and connect() p50 (µs, log)", True)
    _bars(axes[8], lat_rows, [("connect+close/s", [table["connect_close"]["rows"][n]["p50"] for n in lat_rows])]
          if lat_rows else [], "TCP connect+close per second", False)
    m = result["machine"]
    fig.suptitle(f"ustack bench vs the kernel — {m['cpu_model']}, {m['cpus']} CPUs, kernel {m['kernel']}, "
                 f"Python {m['python']} — {result['started'][:16]}", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def _bars(ax, names, series, title, logy) -> None:
    if not names:
        ax.set_title(title, fontsize=10)
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(names))]
        ys = [v if v is not None else 0 for v in values]
        bars = ax.bar(xs, ys, width, label=label)
        for bar, v in zip(bars, values):
            if v is not None:
                ax.annotate(f"{v:.0f}" if v >= 10 else f"{v:.2f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                            va="bottom", fontsize=7)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20, fontsize=8)
    ax.set_title(title, fontsize=10)
    if logy:
        ax.set_yscale("log")
    if len(series) > 1:
        ax.legend(fontsize=8)


def notes_for(result: dict) -> list[str]:
    """Observations worth a line under the tables."""
    notes = []
    rows = {r["name"]: r for r in result["rows"] if r["status"] == "ok"}
    packet = rows.get("ustack/packet")
    if packet and packet["metrics"]["udp_rtt_p50_us"] and packet["metrics"]["udp_rtt_p50_us"] > 700:
        notes.append("ustack/packet RTTs sit near 1 ms: a lone frame waits in a half-empty TPACKET_V3 block "
                     "until the kernel's block-retire timer (1 ms, the smallest it accepts) hands the block over")
    if "kernel" in rows:
        notes.append("the client is one Python process on kernel sockets and the kernel row's server is Python too "
                     "(one selector loop): the kernel row is bounded by them, not by the kernel stack alone")
    if any(row["stack"] == "ustack" for row in rows.values()):
        notes.append("ustack serve busy-polls its device for 50 µs (ustack.api.driver) before it sleeps; the kernel "
                     "server sleeps in epoll and pays a wake-up per request, so ping-pong RTTs of ustack can come "
                     "out below the kernel's")
    methods = {row["latency"]["ping"]["method"] for row in rows.values() if row.get("latency")}
    if methods:
        notes.append(f"ping: {' / '.join(sorted(methods))} echo requests from the kernel client "
                     f"(icmp: an unprivileged ping socket; icmp raw: a raw socket; tcp: a 64-byte TCP echo), one "
                     f"every {result['config'].get('ping_interval', 0.01) * 1e3:g} ms so the server idles in between")
    for row in rows.values():
        lost = (row.get("latency") or {}).get("ping", {}).get("lost")
        if lost:
            notes.append(f"{row['name']}: {lost} pings unanswered (not timed)")
    on_tap = [name for name, row in rows.items() if row["topology"] == "tap"]
    if on_tap:
        notes.append(f"{', '.join(on_tap)} ran over a TAP topology (the kernel client reaches the stack through the "
                     f"tun driver in the same namespace); the other rows over a veth pair")
    for row in rows.values():
        drops = row.get("server_drops") or {}
        if drops:
            top = ", ".join(f"{k} {v}" for k, v in sorted(drops.items(), key=lambda kv: -kv[1])[:4])
            notes.append(f"{row['name']} server drops: {top}")
        for what in ("push", "pull"):
            incomplete = [s for s in row.get("samples", {}).get(what, []) if not s.get("complete", True)]
            if incomplete:
                notes.append(f"{row['name']} {what}: {len(incomplete)} transfer(s) stopped at the time cap "
                             f"(rate from the bytes moved)")
        lost = sum(s.get("lost", 0) for s in row.get("samples", {}).get("udp_rtt", []))
        if lost:
            notes.append(f"{row['name']}: {lost} UDP echo requests unanswered (not timed)")
    return notes
