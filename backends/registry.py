"""Open a backend by kind and interface name: the one place that knows every backend.

``open_device("tap" | "packet" | "afxdp", ifname, **opts)`` opens the device in
the calling thread's network namespace (wrap the call in
``Topology.in_stack_ns()`` for a test topology). Backends are imported lazily
so a missing or broken one only fails when it is asked for. The "pipe"
backend has no interface name: its two ends come from ``ustack.backends.pipe.PipeLink``.
"""

from __future__ import annotations

import errno
import os
import socket

from ustack.device import Device, DeviceError

KINDS = ("tap", "packet", "afxdp")


def _afxdp_device():
    """The AF_XDP device class; DeviceError when the backend cannot be loaded here."""
    try:
        from ustack.backends.afxdp import AfXdpDevice
    except Exception as exc:  # ImportError, or the module failing while it loads
        raise DeviceError(errno.ENOSYS, f"the afxdp backend cannot be imported: {exc!r}") from exc
    return AfXdpDevice


def open_device(kind: str, ifname: str, **opts) -> Device:
    """Open a ``kind`` device on ``ifname`` with backend-specific ``opts``.

    Args:
        kind: "tap", "packet" or "afxdp".
        ifname: the interface's name in this network namespace (tap: created when missing).
        opts: the backend's keywords (``queue``, ``xdp_mode``, ``zerocopy``, ``gso``, ``rx_version``,
            ``claim``...; see each backend).

    Returns:
        An open :class:`~ustack.device.Device`; close it with ``close()``.

    Raises:
        ustack.device.DeviceError: an unknown kind, "pipe" (create a ``PipeLink`` instead), or a
            device that cannot be opened (no such interface, no privileges, a busy AF_XDP queue...),
            with the errno and a message that says what to do.
    """
    if kind == "tap":
        from ustack.backends.tap import TapDevice

        return TapDevice(ifname, **opts)
    if kind == "packet":
        from ustack.backends.packet_ring import PacketRingDevice

        return PacketRingDevice(ifname, **opts)
    if kind == "afxdp":
        return _afxdp_device()(ifname, **opts)
    if kind == "pipe":
        raise DeviceError(
            errno.EINVAL, "pipe devices are not opened by interface name: create a ustack.backends.pipe.PipeLink and use its ends"
        )
    raise DeviceError(errno.EINVAL, f"unknown backend kind {kind!r} (known: {', '.join(KINDS)})")


def available_backends() -> list[str]:
    """The kinds ``open_device`` can open on this machine (privileges not checked).

    Returns:
        A list such as ``['tap', 'packet', 'afxdp']``.
    """
    kinds = []
    if os.path.exists("/dev/net/tun"):
        kinds.append("tap")
    if hasattr(socket, "AF_PACKET"):
        kinds.append("packet")
    try:
        _afxdp_device()
    except DeviceError:
        pass
    else:
        kinds.append("afxdp")
    return kinds
