"""The kernel's own IP input steps aside for the addresses a user-space stack owns.

An AF_PACKET socket gets a copy of every frame (a "tap"); the kernel then
goes on to run its own input on the frame as well: for an IPv4 frame to an
address the kernel does not have, the route lookup and ``ip_error`` (counted
as InAddrErrors / InNoRoutes), for every frame ustack receives. That work
runs in the receive softirq of whichever CPU delivered the frame, and when
the kernel does hold the address too it answers ustack's peers itself (a RST
to a SYN ustack is answering, a port unreachable). AF_XDP does not have
this problem: its XDP program redirects the frame before the kernel sees it.

``AddressClaim(ifname, addresses)`` installs an nftables table in the
calling thread's network namespace with one chain on the interface's
ingress hook that drops IPv4 and IPv6 frames to ``addresses``. The netdev
ingress hook runs after the packet taps (``__netif_receive_skb_core``
delivers to ``ptype_all`` first), so the packet socket still receives every
frame and the kernel's IP input none of them. Frames to other addresses,
ARP, broadcast and multicast are left alone. ``dropped()`` reads the rule
counters; ``close()`` deletes the table (a stack killed with SIGKILL leaves
it behind: ``nft delete table netdev ustack_claim_<ifindex>_<pid>``; it
goes with the interface or the namespace).

Runs ``nft`` (nftables): where it is missing or refuses, ``AddressClaim``
raises ``ClaimError`` and the caller decides (the CLI warns and goes on).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
from typing import Iterable


class ClaimError(OSError):
    """The claim could not be installed (no nft, no permission, no such interface)."""


def _run_nft(args: list[str], script: str = "") -> str:
    nft = shutil.which("nft")
    if nft is None:
        raise ClaimError("nft (nftables) is not installed")
    try:
        done = subprocess.run([nft, *args], input=script, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ClaimError(f"nft failed: {e}") from None
    if done.returncode:
        raise ClaimError(f"nft {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


class AddressClaim:
    """An nftables ingress chain on ``ifname`` dropping, for the kernel only, frames to ``addresses``."""

    def __init__(self, ifname: str, addresses: Iterable[str]):
        v4, v6 = [], []
        for text in addresses:
            addr = ipaddress.ip_address(str(text).split("/")[0])  # ValueError for anything else
            (v4 if addr.version == 4 else v6).append(str(addr))
        if not v4 and not v6:
            raise ValueError("no address to claim")
        if '"' in ifname or "\\" in ifname:
            raise ClaimError(f"interface name {ifname!r} cannot be quoted for nft")
        try:
            index = socket.if_nametoindex(ifname)
        except OSError:
            raise ClaimError(f"no such interface {ifname!r} in this network namespace") from None
        self.ifname = ifname
        self.addresses = tuple(v4 + v6)
        # One table per interface and process: two stacks on one interface do not remove each other's.
        self.table = f"ustack_claim_{index}_{os.getpid()}"
        rules = []
        if v4:
            rules.append(f"ip daddr {{ {', '.join(v4)} }} counter drop")
        if v6:
            rules.append(f"ip6 daddr {{ {', '.join(v6)} }} counter drop")
        body = "\n".join(f"    {r}" for r in rules)
        script = (f"table netdev {self.table} {{\n"
                  f"  chain ingress {{\n"
                  f'    type filter hook ingress device "{ifname}" priority 0; policy accept;\n'
                  f"{body}\n  }}\n}}\n")
        _run_nft(["-f", "-"], script)
        self._open = True

    def dropped(self) -> int:
        """Frames the kernel's input did not see (the rules' counters)."""
        if not self._open:
            return 0
        listing = json.loads(_run_nft(["-j", "list", "table", "netdev", self.table]))
        total = 0
        for item in listing.get("nftables", []):
            for expr in item.get("rule", {}).get("expr", []):
                if "counter" in expr:
                    total += expr["counter"]["packets"]
        return total

    def hand_over(self) -> list[dict]:
        """Give up the table's removal to a privileged keeper (``ustack.tools.teardown_keeper``): its action."""
        if not self._open:
            return []
        self._open = False
        return [{"do": "nft_delete", "table": self.table}]

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        try:
            _run_nft(["delete", "table", "netdev", self.table])
        except ClaimError:
            pass  # the interface (and with it the chain) or the namespace may be gone already

    def __repr__(self) -> str:
        return f"AddressClaim({self.ifname!r}, {list(self.addresses)!r}, {'open' if self._open else 'closed'})"
