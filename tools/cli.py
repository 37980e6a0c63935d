"""The ``ustack`` command line: serve and ping from the user-space stack.

    ustack serve --backend {pipe,tap,packet,afxdp} --ifname IF --addr 198.18.0.2/24
                 [--gateway IP] [--pcap FILE] [--udp-echo PORT]
    ustack serve ... [--tcp-echo PORT] [--tcp-discard PORT] [--tcp-source PORT [--source-bytes N]]
    ustack send  --backend B --ifname IF --addr A/N --connect HOST:PORT --bytes N
    ustack recv  --backend B --ifname IF --addr A/N {--listen PORT | --connect HOST:PORT}
    ustack demo  [--backend B] [--pipe] [--pcap FILE]
    ustack ping  --backend B --ifname IF --addr A/N [--gateway IP] DEST [-c N] [-i S] [-s SIZE] [-W S]

``serve`` prints ``ready`` once the stack is up, answers ARP and ping (and
UDP echo on --udp-echo), and on SIGINT/SIGTERM exits 0 after printing its
counters, drops by reason included. ``--backend pipe`` needs no privileges:
the served stack sits on one end of an in-memory link and a second stack on
the other end checks it (ping and UDP echo) and reports.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys

from ustack.capture import PcapDevice
from ustack.api.clock import MonotonicClock
from ustack.device import DeviceError
from ustack.api.driver import Driver
from ustack.net.route import ip_int, ip_str
from ustack.stack import Stack

BACKENDS = ("pipe", "tap", "packet", "afxdp")


def _device_opts(args) -> dict:
    opts = {}
    for name in ("queue", "xdp_mode", "zerocopy", "rx_version"):
        value = getattr(args, name, None)
        if value is not None:
            opts[name] = value
    return opts


def open_stack(args, clock):
    """Open the device named by the arguments and build a Stack on it. Returns (stack, extras)."""
    extras = {}
    if args.backend == "pipe":
        from ustack.backends.pipe import PipeLink

        link = PipeLink(clock, mtu=args.mtu or 1500)
        device = link.a
        extras["link"] = link
    else:
        if not args.ifname:
            raise SystemExit(f"ustack: --ifname is required for the {args.backend} backend")
        from ustack.backends.registry import open_device

        device = open_device(args.backend, args.ifname, **_device_opts(args))
    if getattr(args, "pcap", None):
        device = PcapDevice(device, args.pcap, clock, snaplen=args.pcap_snaplen)
    stack = Stack(device, args.addr, gateway=args.gateway, mtu=args.mtu, clock=clock)
    return stack, extras


def start_stack(args, name: str):
    """Open the device and stack for a command, with its Driver; None (reported) when that fails."""
    clock = MonotonicClock()
    try:
        stack, extras = open_stack(args, clock)
    except (DeviceError, OSError, ValueError) as e:
        print(f"ustack {name}: {e}", file=sys.stderr)
        return None
    return stack, Driver(stack, clock), extras


def stop_stack(stack) -> None:
    stack.close()
    stack.device.close()


def _pipe_peer(stack, link, clock):
    """For --backend pipe: a second stack on the other end of the link."""
    net = stack.iface
    peer_addr = ip_str(net.network | ((net.addr - net.network + 1) % (1 << (32 - net.prefixlen)) or 1))
    peer = Stack(link.b, f"{peer_addr}/{net.prefixlen}", clock=clock)
    return peer


def cmd_serve(args) -> int:
    started = start_stack(args, "serve")
    if started is None:
        return 2
    stack, driver, extras = started
    clock = driver.clock
    stop = {"flag": False}

    def on_signal(signum, frame):
        stop["flag"] = True
        driver.kick()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    echo = None
    if args.udp_echo:
        echo = stack.udp.endpoint()
        stack.udp.bind(echo, 0, args.udp_echo)
    from ustack.tools.services import TcpDiscard, TcpEcho, TcpSource

    services = []
    if args.tcp_echo:
        services.append(TcpEcho(stack, args.tcp_echo))
    if args.tcp_discard:
        services.append(TcpDiscard(stack, args.tcp_discard))
    if args.tcp_source:
        services.append(TcpSource(stack, args.tcp_source, args.source_bytes))
    stack.poll(clock())
    from ustack.tools.stats_server import StatsPublisher

    publisher = StatsPublisher(stack, driver).start()
    caps = stack.device.capabilities
    print(f"ustack: {stack.addr}/{stack.iface.prefixlen} mac {stack.iface.mac.hex(':')} mtu {stack.iface.mtu} "
          f"on {args.backend}:{args.ifname or '-'} ({caps.mode})", flush=True)
    print(f"ustack: live stats with: ustack stats --socket {publisher.path}", flush=True)
    print("ready", flush=True)
    if args.backend == "pipe":
        import threading

        peer = _pipe_peer(stack, extras["link"], clock)
        threading.Thread(target=_pipe_selftest, args=(stack, peer, clock, args), daemon=True).start()
    capture = stack.device if isinstance(stack.device, PcapDevice) else None
    try:
        while not stop["flag"]:
            driver.wait_until(lambda: stop["flag"] or (echo is not None and bool(echo.queue)), 0.25)
            if capture is not None:
                with driver.lock:
                    capture.flush()  # at most ~0.25 s behind: `ustack trace --follow` sees it live
            if echo is not None and echo.queue:
                with driver.lock, stack.tx_batch():
                    now = clock()
                    while echo.queue:
                        payload, src, sport = echo.pop()
                        try:
                            echo.sendto(payload, src, sport, now)
                        except OSError as e:
                            stack.stats.inc("udp.echo_send_errors")
                            stack.stats.inc(f"udp.echo_send_error.{type(e).__name__}")
    finally:
        publisher.close()
        stack.close()
        if hasattr(stack.device, "flush"):
            stack.device.flush()
        print("counters:")
        print(stack.stats.format() or "(none)")
        drops = stack.stats.drops()
        print("drops by reason:")
        for reason, count in drops.items():
            print(f"  {reason:38s} {count}")
        if not drops:
            print("  (none)")
        sys.stdout.flush()
        stack.device.close()
    return 0


def _pipe_selftest(stack, peer, clock, args) -> None:
    """For --backend pipe: the peer stack pings the served stack and tries its UDP echo (own thread)."""
    from ustack.api.socket import SOCK_DGRAM, socket as usocket

    driver = Driver(peer, clock)
    got = {}
    peer_ident = 4242

    def handler(seq, ident, data, src, now, ttl):
        got.setdefault(seq, now)

    with driver.lock:
        peer.icmp.echo_handlers[peer_ident] = handler
    for seq in range(1, 4):
        t0 = clock()
        with driver.lock:
            peer.icmp.ping(stack.iface.addr, peer_ident, seq, b"u" * 56)
        if driver.wait_until(lambda: seq in got, 2.0):
            print(f"pipe peer {peer.addr}: 64 bytes from {stack.addr}: icmp_seq={seq} "
                  f"time={(got[seq] - t0) * 1000:.3f} ms", flush=True)
        else:
            print(f"pipe peer {peer.addr}: no reply to icmp_seq={seq}", flush=True)
    if args.udp_echo:
        with usocket(peer, type=SOCK_DGRAM) as s:
            s.settimeout(2.0)
            s.sendto(b"hello over the pipe", (stack.addr, args.udp_echo))
            try:
                data, addr = s.recvfrom(2048)
                print(f"pipe peer {peer.addr}: udp echo from {addr[0]}:{addr[1]}: {data!r}", flush=True)
            except TimeoutError:
                print(f"pipe peer {peer.addr}: udp echo timed out", flush=True)
    driver.start()  # keep answering ARP for the served stack afterwards


def cmd_ping(args) -> int:
    started = start_stack(args, "ping")
    if started is None:
        return 2
    stack, driver, _ = started
    clock = driver.clock
    try:
        dst = ip_int(args.dest)
    except ValueError:
        print(f"ustack ping: {args.dest}: Name or service not known", file=sys.stderr)
        return 2
    ident = os.getpid() & 0xFFFF
    size = args.size
    payload = bytes((i & 0xFF) for i in range(size))
    replies: dict[int, tuple[float, int]] = {}
    stack.icmp.echo_handlers[ident] = lambda seq, i, data, src, now, ttl: (
        replies.setdefault(seq, (now, ttl)) if data == payload and src == dst else None)
    interrupted = {"flag": False}

    def on_signal(signum, frame):
        interrupted["flag"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(f"PING {args.dest} ({args.dest}) {size}({size + 28}) bytes of data.", flush=True)
    rtts = []
    sent_at = {}
    start = clock()
    transmitted = 0
    try:
        driver.poll()
        for seq in range(1, args.count + 1):
            if interrupted["flag"]:
                break
            t0 = clock()
            sent_at[seq] = t0
            with driver.lock:
                try:
                    stack.icmp.ping(dst, ident, seq, payload)
                except OSError as e:
                    print(f"ping: sendmsg: {e.strerror}", flush=True)
            transmitted += 1
            ok = driver.wait_until(lambda: seq in replies or interrupted["flag"], args.timeout)
            if ok and seq in replies:
                when, ttl = replies[seq]
                rtt = (when - t0) * 1000
                rtts.append(rtt)
                print(f"{size + 8} bytes from {args.dest}: icmp_seq={seq} ttl={ttl} time={rtt:.3f} ms", flush=True)
            if seq < args.count and not interrupted["flag"]:
                remaining = args.interval - (clock() - t0)
                if remaining > 0:
                    driver.wait_until(lambda: interrupted["flag"], remaining)
    finally:
        elapsed = (clock() - start) * 1000
        received = len([s for s in replies if s in sent_at])
        loss = 100.0 * (transmitted - received) / transmitted if transmitted else 0.0
        print(f"\n--- {args.dest} ping statistics ---")
        print(f"{transmitted} packets transmitted, {received} received, {loss:.0f}% packet loss, time {elapsed:.0f}ms")
        if rtts:
            mdev = statistics.pstdev(rtts)
            print(f"rtt min/avg/max/mdev = {min(rtts):.3f}/{statistics.mean(rtts):.3f}/{max(rtts):.3f}/{mdev:.3f} ms")
        sys.stdout.flush()
        stop_stack(stack)
    return 0 if received == transmitted and transmitted else 1


def _report(nbytes: int, seconds: float, digest: str, peer) -> None:
    rate = nbytes / seconds / 1e6 if seconds > 0 else 0.0
    print(f"bytes {nbytes} seconds {seconds:.3f} MB/s {rate:.2f} sha256 {digest} peer {peer[0]}:{peer[1]}",
          flush=True)


def _host_port(text: str, name: str):
    """"HOST:PORT" -> (host, port), or None after saying what is wrong."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        print(f"ustack {name}: --connect wants HOST:PORT, not {text!r}", file=sys.stderr)
        return None
    return host, int(port)


def cmd_send(args) -> int:
    import hashlib

    from ustack.tools.services import PATTERN_BLOCK
    from ustack.api.socket import socket as usocket

    target = _host_port(args.connect, "send")
    if target is None:
        return 2
    host, port = target
    started = start_stack(args, "send")
    if started is None:
        return 2
    stack, driver, _ = started
    clock = driver.clock
    try:
        with usocket(stack) as s:
            s.settimeout(30)
            try:
                s.connect((host, port))
            except OSError as e:
                print(f"ustack send: connect {args.connect}: {e.strerror or e}", file=sys.stderr)
                return 1
            h = hashlib.sha256()
            left = args.bytes
            t0 = clock()
            while left:
                chunk = memoryview(PATTERN_BLOCK)[:min(left, len(PATTERN_BLOCK))]
                s.sendall(chunk)
                h.update(chunk)
                left -= len(chunk)
            s.shutdown(1)  # half-close: the peer may still answer
            s.settimeout(60)
            reply = bytearray()
            while True:  # read until the peer's FIN: every byte was taken
                d = s.recv(65536)
                if not d:
                    break
                if len(reply) < 4096:
                    reply += d[:4096 - len(reply)]
            _report(args.bytes, clock() - t0, h.hexdigest(), s.getpeername())
            if reply:
                print(f"reply {bytes(reply).decode(errors='replace').strip()}", flush=True)
            info = s.tcp_info()
            print(f"retransmits {info.retransmits} srtt_ms {info.srtt * 1000:.3f} cwnd {info.cwnd}", flush=True)
        return 0
    except (OSError, TimeoutError) as e:
        print(f"ustack send: {e}", file=sys.stderr)
        return 1
    finally:
        stop_stack(stack)


def cmd_recv(args) -> int:
    import hashlib

    from ustack.api.socket import socket as usocket

    target = _host_port(args.connect, "recv") if args.connect else None
    if args.connect and target is None:
        return 2
    started = start_stack(args, "recv")
    if started is None:
        return 2
    stack, driver, _ = started
    clock = driver.clock
    try:
        with usocket(stack) as srv:
            if target is not None:
                conn = usocket(stack)
                conn.settimeout(30)
                try:
                    conn.connect(target)
                except OSError as e:
                    print(f"ustack recv: connect {args.connect}: {e.strerror or e}", file=sys.stderr)
                    return 1
                peer = conn.getpeername()
            else:
                srv.bind(("0.0.0.0", args.listen))
                srv.listen(1)
                print("listening", flush=True)
                conn, peer = srv.accept()
            h = hashlib.sha256()
            n = 0
            buf = bytearray(1 << 18)
            t0 = clock()
            with conn:
                conn.settimeout(60)
                while True:
                    k = conn.recv_into(buf)
                    if not k:
                        break
                    h.update(memoryview(buf)[:k])
                    n += k
            _report(n, clock() - t0, h.hexdigest(), peer)
        return 0
    except (OSError, TimeoutError) as e:
        print(f"ustack recv: {e}", file=sys.stderr)
        return 1
    finally:
        stop_stack(stack)


def cmd_demo(args) -> int:
    from ustack.tools.demo import main as demo_main

    return demo_main(args)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=BACKENDS, default="packet")
    p.add_argument("--ifname", help="interface (veth end or TAP device) to attach to")
    p.add_argument("--addr", required=True, help="our address, A.B.C.D/N")
    p.add_argument("--gateway", help="default gateway inside the subnet")
    p.add_argument("--mtu", type=int, help="IP MTU (default: the device's)")
    p.add_argument("--pcap", help="write every frame in and out to this pcap file")
    p.add_argument("--pcap-snaplen", type=int, default=65535, metavar="BYTES",
                   help="bytes of each frame to keep in the pcap (default: all)")
    p.add_argument("--queue", type=int, help="afxdp: NIC queue to bind")
    p.add_argument("--xdp-mode", choices=("auto", "native", "generic"), help="afxdp: XDP attach mode")
    p.add_argument("--zerocopy", choices=("auto", "on", "off"), help="afxdp: zero-copy mode")
    p.add_argument("--rx-version", type=int, choices=(2, 3),
                   help="packet: TPACKET_V2 RX ring (default: each frame visible at once) or V3 "
                        "(block-batched: cheapest per frame, up to 1 ms of added latency)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ustack", description="A user-space TCP/UDP/IPv4 stack for Python.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the stack: answer ARP and ping, optional UDP echo")
    _common(serve)
    serve.add_argument("--udp-echo", type=int, metavar="PORT", help="echo UDP datagrams on PORT")
    serve.add_argument("--tcp-echo", type=int, metavar="PORT", help="TCP echo service on PORT")
    serve.add_argument("--tcp-discard", type=int, metavar="PORT", help="TCP discard service on PORT")
    serve.add_argument("--tcp-source", type=int, metavar="PORT",
                       help="send --source-bytes of a deterministic pattern to each client, then close")
    serve.add_argument("--source-bytes", type=int, default=100_000_000, metavar="N")
    send = sub.add_parser("send", help="push N bytes of the pattern to HOST:PORT over TCP; print rate and sha256")
    _common(send)
    send.add_argument("--connect", required=True, metavar="HOST:PORT")
    send.add_argument("--bytes", type=int, default=100_000_000, metavar="N")
    send.set_defaults(func=cmd_send)
    recv = sub.add_parser("recv", help="accept (or make) one TCP connection, read to EOF; print rate and sha256")
    _common(recv)
    where = recv.add_mutually_exclusive_group(required=True)
    where.add_argument("--listen", type=int, metavar="PORT", help="accept one connection on PORT")
    where.add_argument("--connect", metavar="HOST:PORT", help="connect out and read what the server sends")
    recv.set_defaults(func=cmd_recv)
    serve.set_defaults(func=cmd_serve)
    demo = sub.add_parser("demo", help="a guided tour: the kernel and ustack talking (root), or two stacks (no root)")
    from ustack.tools.demo import add_arguments as demo_arguments

    demo_arguments(demo)
    demo.set_defaults(func=cmd_demo)
    from ustack.tools import bench as bench_tool
    from ustack.tools import stats as stats_tool
    from ustack.tools import trace as trace_tool

    stats_tool.add_parser(sub)
    trace_tool.add_parser(sub)
    bench_tool.add_parser(sub)
    ping = sub.add_parser("ping", help="ping from the user-space stack, like ping(8)")
    _common(ping)
    ping.add_argument("dest")
    ping.add_argument("-c", "--count", type=int, default=4)
    ping.add_argument("-i", "--interval", type=float, default=1.0)
    ping.add_argument("-s", "--size", type=int, default=56)
    ping.add_argument("-W", "--timeout", type=float, default=2.0, help="seconds to wait for each reply")
    ping.set_defaults(func=cmd_ping)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
