"""A snapshot of one Stack as plain data: what ``ustack stats`` shows, read in one pass.

``snapshot(stack, now)`` returns a dict of dicts, lists, strings and numbers
(JSON as it is), copied out of the stack so it can be encoded or printed
after the caller lets go of the stack::

    stack      address, prefix length, gateway, MAC, MTU, backend mode, now
    counters   every named counter (``Stats.snapshot()``)
    drops      the drop counters by reason (``Stats.drops()``)
    tcp        one ``Connection.info()`` per connection, fields by name,
               endpoints as "A.B.C.D:port", the negotiated options as a list
    listeners  accept queue and backlog, SYN queue, overflows, SYN cookies
    udp        bound and connected endpoints: queue in bytes and datagrams,
               receive buffer, drops
    arp        the ARP cache: address, MAC, seconds until it expires
    ipv6       (a stack with IPv6 only) addresses with prefix length and DAD
               state, default routers, link MTU
    ndp        (the same) the neighbour cache: address, MAC, state

It reads only these surfaces of a Stack: ``stats`` (``snapshot()``,
``drops()``), ``iface`` (address, prefix length, gateway, MAC, MTU),
``device.capabilities.mode``, ``arp.entries(now)``, ``tcp.connections``
(``info()``), ``tcp.listeners`` (local, backlog, queue lengths, overflow
and cookie counts) and the endpoints of ``udp.bound`` and ``udp.connected``
(local address and port, remote, queue, receive buffer, drops). The caller
holds whatever lock keeps the stack still (the driver's) while it runs;
nothing here blocks or reads a clock.
"""

from __future__ import annotations

import dataclasses
import enum

from ustack.net.addr import to_str


def snapshot(stack, now: float) -> dict:
    """The stack's state at ``now`` as plain data (see the module docstring)."""
    stats = stack.stats
    tcp, udp = stack.tcp, stack.udp
    addr, prefixlen, gateway = interface_address(stack)
    endpoints = {id(ep): ep for ep in list(udp.bound.values()) + list(udp.connected.values())}
    return {
        "stack": {
            "addr": addr,
            "prefixlen": prefixlen,
            "gateway": gateway,
            "mac": stack.iface.mac.hex(":"),
            "mtu": stack.iface.mtu,
            "mode": stack.device.capabilities.mode,
            "now": now,
        },
        "counters": stats.snapshot(),
        "drops": stats.drops(),
        "tcp": [_connection(conn.info()) for conn in tcp.connections.values()],
        "listeners": [_listener(lst) for entry in tcp.listeners.values()
                      for lst in getattr(entry, "members", (entry,))],  # a SO_REUSEPORT group: each member
        "udp": [_udp_endpoint(ep) for ep in endpoints.values()],
        "arp": [{"ip": ip, "mac": mac, "expires": round(left, 3)} for ip, mac, left in stack.arp.entries(now)],
        **(_ipv6(stack, now) if getattr(stack, "ipv6", None) is not None else {}),
    }


def _ipv6(stack, now: float) -> dict:
    iface6 = stack.iface6
    return {
        "ipv6": {
            "addresses": [{"addr": str(e.prefix), "state": e.state, "origin": e.origin}
                          for e in iface6.addresses.values()],
            "routers": [to_str(r) for r, t in iface6.routers.items() if t > now]
                       + ([to_str(iface6.gateway)] if iface6.gateway is not None else []),
            "mtu": iface6.mtu,
        },
        "ndp": [{"ip": ip, "mac": mac, "state": state} for ip, mac, state in stack.ndp.entries(now)],
    }


def interface_address(stack) -> tuple[str, int, str | None]:
    """Our address, prefix length and gateway as text (an IPv6-only stack: its first configured IPv6 address)."""
    iface = stack.iface
    if iface.addr is None:
        first = next(iter(stack.iface6.addresses.values())).prefix
        gateway = stack.iface6.gateway
        return to_str(first.addr), first.length, None if gateway is None else to_str(gateway)
    gateway = iface.gateway
    return to_str(iface.addr), iface.prefixlen, None if gateway is None else to_str(gateway)


def _host(addr: bytes) -> str:
    return to_str(bytes(addr))


def _plain(value):
    """An enum member by its name; anything else as it is."""
    return value.name if isinstance(value, enum.Enum) else value


def _endpoint(addr, port) -> str:
    return f"{_host(addr)}:{port}"


def _connection(info) -> dict:
    d = {f.name: _plain(getattr(info, f.name)) for f in dataclasses.fields(info)}
    d["local"] = _endpoint(*info.local)
    d["remote"] = _endpoint(*info.remote)
    opts = []
    if info.timestamps:
        opts.append("ts")
    if info.sack:
        opts.append("sack")
    if info.snd_wscale or info.rcv_wscale:
        opts.append("wscale")
    d["options"] = opts
    return d


def _listener(lst) -> dict:
    return {"local": _endpoint(*lst.local), "state": "LISTEN", "accept_queue": lst.pending, "backlog": lst.backlog,
            "syn_queue": lst.half_open, "syn_backlog": lst.syn_backlog, "overflows": lst.overflows,
            "cookies_sent": lst.cookies_sent, "cookies_accepted": lst.cookies_accepted,
            "cookies_rejected": lst.cookies_rejected}


def _udp_endpoint(ep) -> dict:
    remote = ep.remote
    return {"local": _endpoint(ep.local_addr, ep.local_port), "remote": _endpoint(*remote) if remote else None,
            "state": "ESTAB" if remote else "UNCONN", "recv_q": ep.queued_bytes, "datagrams": len(ep.queue),
            "rcvbuf": ep.rcvbuf, "drops": ep.drops}
