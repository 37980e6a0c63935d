"""``ustack serve``: run the stack on a device, answer ARP and ping, and the services asked for.

``--udp-echo``, ``--tcp-echo``, ``--tcp-discard`` and ``--tcp-source`` start
those services (ustack.tools.services). The command prints ``ready`` once the
stack is up and publishes live stats (ustack.tools.stats_server); on
SIGINT/SIGTERM it exits 0 after printing its counters, drops by reason
included. With ``--pcap`` the capture is flushed at least every ~0.25 s so
``ustack trace --follow`` sees it live. ``--backend pipe`` needs no
privileges: the served stack sits on one end of an in-memory link and a
second stack on the other end checks it (ping and UDP echo) and reports.
"""

from __future__ import annotations

import ipaddress
import signal
import sys
import threading

from ustack.api import environment
from ustack.api.driver import Driver
from ustack.capture import PcapDevice
from ustack.net.addr import ANY4, ANY6, parse as ip_addr
from ustack.snapshot import interface_address
from ustack.stack import Stack
from ustack.stats import Stats
from ustack.tools import privileges
from ustack.tools.cli_stack import add_stack_arguments, byte_count, port, start_stack, wait_ipv6_ready


def add_parser(subparsers):
    """Add the ``serve`` subcommand to the ``ustack`` command line."""
    p = subparsers.add_parser("serve", help="run the stack: answer ARP and ping, optional UDP echo")
    add_stack_arguments(p)
    privileges.add_arguments(p)
    p.add_argument("--udp-echo", type=port, metavar="PORT", help="echo UDP datagrams on PORT")
    p.add_argument("--tcp-echo", type=port, metavar="PORT", help="TCP echo service on PORT")
    p.add_argument("--tcp-discard", type=port, metavar="PORT", help="TCP discard service on PORT")
    p.add_argument("--tcp-source", type=port, metavar="PORT",
                   help="send --source-bytes of a deterministic pattern to each client, then close")
    p.add_argument("--source-bytes", type=byte_count, default=100_000_000, metavar="N")
    p.set_defaults(func=cmd_serve)
    return p


def _pipe_peer(stack, link, clock):
    """For --backend pipe: a second stack on the other end of the link."""
    addr, prefixlen, _ = interface_address(stack)
    net = ipaddress.ip_interface(f"{addr}/{prefixlen}").network
    ours = int(ipaddress.ip_address(addr)) - int(net.network_address)
    peer_addr = net.network_address + (ours + 1 if ours + 2 < net.num_addresses else 1)  # the next host, wrapping
    peer = Stack(link.b, f"{peer_addr}/{prefixlen}", fastpath=environment.fastpath())
    return peer


def cmd_serve(args) -> int:
    """Run ``ustack serve``: a stack with the asked services until SIGINT/SIGTERM, then its counters.

    Args:
        args: the parsed arguments (the stack's, ``--udp-echo``, ``--tcp-echo``, ``--tcp-discard``,
            ``--tcp-source``...).

    Returns:
        The exit status: 0 on success, 2 when the stack could not be started (one line on stderr).
    """
    started = start_stack(args, "serve")
    if started is None:
        return 2
    stack, driver, extras = started
    ok, keeper = privileges.drop_for_command(stack, args, "serve")  # before any thread starts
    if not ok:
        stack.close()
        stack.device.close()
        return 2
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
        stack.udp.bind(echo, ANY6 if stack.ipv6 is not None else ANY4, args.udp_echo)  # :: hears IPv4 too
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
    addr, prefixlen, _ = interface_address(stack)
    print(f"ustack: {addr}/{prefixlen} mac {stack.iface.mac.hex(':')} mtu {stack.iface.mtu} "
          f"on {args.backend}:{args.ifname or '-'} ({caps.mode})", flush=True)
    if stack.ipv6 is not None:
        wait_ipv6_ready(stack, driver)
        v6 = stack.addrs()[0 if stack.iface.addr is None else 1:]
        print(f"ustack: IPv6 {' '.join(v6)}", flush=True)
    print(f"ustack: live stats with: ustack stats --socket {publisher.path}", flush=True)
    print("ready", flush=True)
    if args.backend == "pipe":
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
        if capture is not None:
            _report_capture(capture.writer)
        print("counters:")
        print(stack.stats.format() or "(none)")
        drops = stack.stats.drops()
        print("drops by reason:")
        for reason, count in drops.items():
            print(f"  {reason:38s} {count}")
        if not drops:
            print("  (none)")
        dev = stack.device
        while not isinstance(getattr(dev, "stats", None), Stats) and getattr(dev, "inner", None) is not None:
            dev = dev.inner  # through decorators (capture, impairment) to the backend
        if isinstance(getattr(dev, "stats", None), Stats) and dev.stats.format():
            print("device counters:")
            print(dev.stats.format())
        elif callable(getattr(dev, "stats", None)):  # afxdp: its data path's counters as a dict
            counts = {k: v for k, v in dev.stats().items() if v}
            if counts:
                print("device counters:")
                for name, count in counts.items():
                    print(f"{name:40s} {count}")  # unindented, as Stats.format (not a drop line)
        sys.stdout.flush()
        stack.device.close()
        if keeper is not None:
            keeper.finish()  # the XDP detach / nft claim removal that needs the root we gave up
    return 0


def _report_capture(writer) -> None:
    """Say when the capture file is not the whole story (the size cap, a write error)."""
    if writer.error is not None:
        print(f"pcap: capture stopped by an error: {writer.error} ({writer.records_dropped} frames not written)")
    elif writer.records_dropped:
        print(f"pcap: capture stopped at --pcap-max-bytes {writer.max_bytes} "
              f"({writer.records_dropped} frames not written)")


def _pipe_selftest(stack, peer, clock, args) -> None:
    """For --backend pipe: the peer stack pings the served stack and tries its UDP echo (own thread)."""
    from ustack.api.socket import AF_INET, AF_INET6, SOCK_DGRAM, socket as usocket

    driver = Driver(peer, clock)
    served, here = interface_address(stack)[0], interface_address(peer)[0]
    got = {}
    peer_ident = 4242

    def handler(seq, ident, data, src, now, ttl):
        got.setdefault(seq, now)

    icmp = peer.icmpv6 if ":" in served else peer.icmp  # an IPv6-only stack is pinged over ICMPv6
    if icmp is peer.icmpv6:
        wait_ipv6_ready(peer, driver)
    with driver.lock:
        icmp.echo_handlers[peer_ident] = handler
    for seq in range(1, 4):
        t0 = clock()
        with driver.lock:
            icmp.ping(ip_addr(served), peer_ident, seq, clock(), b"u" * 56)
        if driver.wait_until(lambda: seq in got, 2.0):
            print(f"pipe peer {here}: 64 bytes from {served}: icmp_seq={seq} "
                  f"time={(got[seq] - t0) * 1000:.3f} ms", flush=True)
        else:
            print(f"pipe peer {here}: no reply to icmp_seq={seq}", flush=True)
    if args.udp_echo:
        with usocket(driver, AF_INET6 if icmp is peer.icmpv6 else AF_INET, SOCK_DGRAM) as s:
            s.settimeout(2.0)
            s.sendto(b"hello over the pipe", (served, args.udp_echo))
            try:
                data, addr = s.recvfrom(2048)
                print(f"pipe peer {here}: udp echo from {addr[0]}:{addr[1]}: {data!r}", flush=True)
            except TimeoutError:
                print(f"pipe peer {here}: udp echo timed out", flush=True)
    driver.start()  # keep answering ARP for the served stack afterwards
