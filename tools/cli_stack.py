"""The stack a command runs on, built from its command-line arguments.

``add_stack_arguments(p)`` adds the options every stack-running command
shares (--backend, --ifname, --addr, --gateway, --mtu, --pcap, --busy-poll,
the backend knobs). ``start_stack(args, name)`` opens the device (``--backend pipe``: one
end of an in-memory link, the other end in ``extras["link"]``), wraps it in
the pcap capture decorator for ``--pcap``, builds the Stack and its Driver on
a monotonic clock, and reports a failure in one line instead of a traceback.

The argument types (``port``, ``int_range`` ...: ustack.tools.cli_types) check ranges in
the parser, so a user's mistake is one line from argparse and exit status 2,
never a traceback from deep inside the stack.
"""

from __future__ import annotations

import argparse
import os
import sys

from ustack.api import environment
from ustack.api.clock import MonotonicClock
from ustack.api.driver import DEFAULT_BUSY_POLL, DEFAULT_PUSH_WAIT, PUSH_HOLD_MAX, Driver
from ustack.capture import PcapDevice
from ustack.device import DeviceError
from ustack.stack import Stack
from ustack.transport.tcp.config import TcpConfig
from ustack.transport.tcp.congestion import ALGORITHMS
from ustack.tools.cli_types import byte_count, float_range, int_range, port  # noqa: F401  (re-exported)

BACKENDS = ("pipe", "tap", "packet", "afxdp")
MIN_MTU, MAX_MTU = 68, 65535  # as ustack.stack checks: RFC 791's minimum, the IPv4 total length field


def _device_opts(args) -> dict:
    opts = {}
    for name in ("queue", "xdp_mode", "zerocopy", "rx_version", "gso"):
        value = getattr(args, name, None)
        if value is not None:
            opts[name] = value
    if args.backend == "packet" and "gso" not in opts and os.environ.get("USTACK_PACKET_GSO") in ("0", "1"):
        opts["gso"] = os.environ["USTACK_PACKET_GSO"] == "1"  # the device's default otherwise (benchmarks' A/B)
    if args.backend == "afxdp" and "gso" not in opts and os.environ.get("USTACK_AFXDP_GSO") in ("0", "1"):
        opts["gso"] = os.environ["USTACK_AFXDP_GSO"] == "1"
    if args.backend == "packet" and getattr(args, "claim", True):
        opts["claim"] = [a.split("/")[0] for a in args.addr]
    return opts


def open_stack(args, clock):
    """Open the device named by the arguments and build a Stack on it. Returns (stack, extras).

    Args:
        args: the parsed arguments of :func:`add_stack_arguments`.
        clock: the clock the stack runs on.

    Raises:
        ustack.device.DeviceError: the device could not be opened.
        ValueError: what :class:`~ustack.stack.Stack` refuses.
    """
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
        if getattr(device, "claim_problem", ""):
            print(f"ustack: warning: the kernel's IP input still sees frames to our addresses "
                  f"({device.claim_problem}; --no-claim silences this)", file=sys.stderr)
    if getattr(args, "pcap", None):
        try:
            device = PcapDevice(device, args.pcap, clock, snaplen=args.pcap_snaplen,
                                max_bytes=getattr(args, "pcap_max_bytes", None),
                                overwrite=getattr(args, "pcap_overwrite", False))
        except BaseException:
            device.close()
            raise
    gateway, gateway6 = split_gateways(args.gateway)
    congestion = getattr(args, "congestion", None)
    stack = Stack(device, args.addr, gateway=gateway, gateway6=gateway6, mtu=args.mtu,
                  fastpath=environment.fastpath(),
                  tcp_config=TcpConfig(congestion=congestion) if congestion else None)
    if not environment.syn_c():
        stack.tcp.flows.syn = None  # USTACK_SYN_C=0: SYNs through the Python path (an A/B of _fastpath.SynPath)
    if not environment.ack_c():
        stack.tcp.flows.hsk = None  # USTACK_ACK_C=0: handshake ACKs through the Python path (_fastpath.HandshakePath)
    return stack, extras


def split_gateways(gateways):
    """--gateway values (a string, a list or None) -> (IPv4 gateway, IPv6 gateway)."""
    if gateways is None:
        return None, None
    if isinstance(gateways, str):
        gateways = [gateways]
    v4 = [g for g in gateways if ":" not in g]
    v6 = [g for g in gateways if ":" in g]
    if len(v4) > 1 or len(v6) > 1:
        raise ValueError("at most one IPv4 and one IPv6 --gateway")
    return (v4[0] if v4 else None), (v6[0] if v6 else None)


def address(text: str) -> str:
    """An argparse type for --addr: A.B.C.D/N or an IPv6 X::Y/N."""
    from ustack.net.addr import Prefix

    try:
        Prefix(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
    return text


def describe_error(e: BaseException) -> str:
    """One line for a user: 'path: reason' for OSErrors about a file, else the message."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    return str(e)


def start_stack(args, name: str):
    """Open the device and stack for a command, with its Driver; None (reported) when that fails.

    Args:
        args: the parsed arguments of :func:`add_stack_arguments`.
        name: the command's name, for the error line (``ustack NAME: ...``).

    Returns:
        ``(stack, driver, extras)``, or ``None`` after printing one line on stderr.
    """
    clock = MonotonicClock()
    try:
        stack, extras = open_stack(args, clock)
    except (DeviceError, OSError, ValueError) as e:
        print(f"ustack {name}: {describe_error(e)}", file=sys.stderr)
        return None
    return stack, Driver(stack, clock, busy_poll=getattr(args, "busy_poll", DEFAULT_BUSY_POLL),
                         push_wait=getattr(args, "push_wait", DEFAULT_PUSH_WAIT),
                         anticipate=getattr(args, "anticipate", False)), extras


def wait_ipv6_ready(stack, driver, timeout: float = 5.0) -> bool:
    """Poll until duplicate address detection has settled every IPv6 address (RFC 4862 5.4)."""
    if stack.iface6 is None:
        return True
    return driver.wait_until(lambda: stack.iface6.link_local is not None and not any(
        a.state == "tentative" for a in stack.iface6.addresses.values()), timeout)


def stop_stack(stack) -> None:
    """Close a stack started by :func:`start_stack` and its device (the Driver is the caller's)."""
    stack.close()
    stack.device.close()


def add_stack_arguments(p: argparse.ArgumentParser) -> None:
    """The options of every command that runs a stack."""
    p.add_argument("--backend", choices=BACKENDS, default="packet")
    p.add_argument("--ifname", help="interface (veth end or TAP device) to attach to")
    p.add_argument("--addr", required=True, action="append", type=address,
                   help="our address, A.B.C.D/N; repeat it for IPv6 ones (--addr fd00::2/64): at most one IPv4 "
                        "address and any number of IPv6 ones (a link-local one is made, RFC 4862/7217); "
                        "IPv6 ones alone make an IPv6-only stack")
    p.add_argument("--gateway", action="append",
                   help="default gateway inside the subnet (repeat it for an IPv6 one)")
    p.add_argument("--mtu", type=int_range(MIN_MTU, MAX_MTU, "an IPv4 MTU"), help="IP MTU (default: the device's)")
    p.add_argument("--congestion", choices=sorted(ALGORITHMS),
                   help="TCP congestion control of every connection (default: cubic); bbr paces")
    p.add_argument("--pcap", help="write every frame in and out to this new pcap file (created 0600; an existing "
                                  "file or a symlink is refused)")
    p.add_argument("--pcap-overwrite", action="store_true",
                   help="replace an existing --pcap file (its name is unlinked and a new file created: a hard "
                        "link's other names keep their bytes, a symlink's target is never touched)")
    p.add_argument("--pcap-snaplen", type=int_range(1, 262144, "a snap length"), default=65535, metavar="BYTES",
                   help="bytes of each frame to keep in the pcap (default: all)")
    p.add_argument("--pcap-max-bytes", type=int_range(24, None, "a file size"), metavar="BYTES",
                   help="stop writing the pcap at this size (the frames left out are counted)")
    p.add_argument("--busy-poll", type=float_range(0.0), default=DEFAULT_BUSY_POLL, metavar="SECONDS",
                   help="spin on the RX ring this long after each round that received frames before "
                        f"sleeping, like SO_BUSY_POLL (default {DEFAULT_BUSY_POLL * 1e6:.0f} µs; 0: never spin; "
                        "longer than a flow's spacing: lower latency, one CPU busy while it flows)")
    p.add_argument("--push-wait", type=float_range(0.0, high=PUSH_HOLD_MAX), default=DEFAULT_PUSH_WAIT, metavar="SECONDS",
                   help="when a round ends on a TCP segment of a write still going on (data, no PSH), wait "
                        "this long for its next frame before the applications are told (one read and one "
                        f"answer per write; default {DEFAULT_PUSH_WAIT * 1e6:.0f} µs, at most "
                        f"{PUSH_HOLD_MAX * 1e6:.0f} µs in all; 0: tell them after every RX burst)")
    p.add_argument("--anticipate", action="store_true",
                   help="anticipate steady spaced flows (off by default): once requests come at a steady "
                        "period of ~6 ms to 1 s the poller wakes just before each is due and spins ~0.3 ms "
                        "around it, at most 5%% of a CPU (ustack.api.arrivals)"),
    p.add_argument("--no-anticipate", dest="anticipate", action="store_false",
                   help="(the default) sleep until the stack's next deadline or a frame")
    p.add_argument("--queue", type=int_range(0, 65535, "a queue number"), help="afxdp: NIC queue to bind")
    p.add_argument("--xdp-mode", choices=("auto", "native", "generic"), help="afxdp: XDP attach mode")
    p.add_argument("--zerocopy", choices=("auto", "on", "off"), help="afxdp: zero-copy mode")
    p.add_argument("--rx-version", type=int, choices=(2, 3),
                   help="packet: TPACKET_V2 RX ring (default: each frame visible at once) or V3 "
                        "(block-batched: cheapest per frame, up to 1 ms of added latency)")
    p.add_argument("--gso", action=argparse.BooleanOptionalAction, default=None,
                   help="packet, afxdp: hand the kernel runs of full-sized TCP segments as one super-frame "
                        "(PACKET_VNET_HDR; the kernel segments them back; afxdp: through an AF_PACKET socket "
                        "beside the AF_XDP one, in copy mode on a noqueue interface)")
    p.add_argument("--no-claim", dest="claim", action="store_false",
                   help="packet: let the kernel's own IP input see frames to our addresses too (by default an "
                        "nftables ingress rule, after the packet socket's tap, keeps them from it, as AF_XDP's "
                        "redirect does: no kernel RSTs or route lookups for ustack's traffic)")
