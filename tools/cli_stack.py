"""The stack a command runs on, built from its command-line arguments.

``add_stack_arguments(p)`` adds the options every stack-running command
shares (--backend, --ifname, --addr, --gateway, --mtu, --pcap, the backend
knobs). ``start_stack(args, name)`` opens the device (``--backend pipe``: one
end of an in-memory link, the other end in ``extras["link"]``), wraps it in
the pcap capture decorator for ``--pcap``, builds the Stack and its Driver on
a monotonic clock, and reports a failure in one line instead of a traceback.
"""

from __future__ import annotations

import argparse
import sys

from ustack.api.clock import MonotonicClock
from ustack.api.driver import Driver
from ustack.capture import PcapDevice
from ustack.device import DeviceError
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
    stack = Stack(device, args.addr, gateway=args.gateway, mtu=args.mtu)
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


def add_stack_arguments(p: argparse.ArgumentParser) -> None:
    """The options of every command that runs a stack."""
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
