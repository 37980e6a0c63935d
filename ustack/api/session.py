"""A stack, its Driver and ``ustack.patch`` set up for a whole program; ``from_environment()`` for a sitecustomize.

``from_environment()`` reads the ``USTACK_*`` variables and, when
``USTACK_ADDR`` is set, opens the device, builds the Stack, starts its
Driver thread, patches ``socket.socket`` and registers the teardown with
atexit; it returns the Session (None when ``USTACK_ADDR`` is unset, so a
sitecustomize can call it unconditionally)::

    # sitecustomize.py
    from ustack.api.session import from_environment
    from_environment()

    USTACK_ADDR=198.18.0.2/24 USTACK_IFNAME=veth1 python app.py

The variables: USTACK_ADDR (A.B.C.D/N, required), USTACK_BACKEND (pipe,
tap, packet, afxdp; default packet), USTACK_IFNAME (required except for
pipe), USTACK_GATEWAY, USTACK_PCAP (a new capture file, created 0600;
USTACK_PCAP_OVERWRITE=1 replaces an existing one),
USTACK_MTU, USTACK_FASTPATH (0: the TCP fast path in C off,
``ustack.api.environment``), USTACK_BUSY_POLL (seconds, see ``ustack.api.driver``),
USTACK_ANTICIPATE (1: anticipate steady spaced flows, ``ustack.api.arrivals``; off by default),
USTACK_LOOPBACK (1: 127/8 and ::1 on an in-process ustack loopback
interface, ``ustack.api.loopback``, instead of the kernel's), USTACK_ASYNCIO (native, the default: asyncio's loops poll the stack
themselves, ``ustack.api.aio``; stock: asyncio's own loop on readiness fds). With
the pipe backend the other end of the in-memory link is ``session.link.b``
(tests put a peer stack there). ``ustack run`` does the same from its
command line (ustack.tools.run_program).
"""

from __future__ import annotations

import atexit
import os
from typing import Mapping, Optional

from ustack.api import environment
from ustack.api.aio import install_policy, uninstall_policy
from ustack.api.clock import MonotonicClock
from ustack.api.driver import DEFAULT_BUSY_POLL, Driver
from ustack.api.loopback import close_loopback, open_loopback
from ustack.api.patch import patch, unpatch
from ustack.capture import PcapDevice
from ustack.stack import Stack

BACKENDS = ("pipe", "tap", "packet", "afxdp")
ASYNCIO_MODES = ("native", "stock")
PREFIX = "USTACK_"


class Session:
    """One stack for one program: opened by ``open()``, patched by ``install()``, undone by ``close()``.

    Args:
        backend: "pipe", "tap", "packet" or "afxdp".
        addr: the stack's address, "A.B.C.D/N" (or IPv6).
        ifname: the interface (every backend but pipe).
        gateway, pcap, mtu, busy_poll, anticipate: as the command line's options.
        asyncio: "native" (ustack's loop) or "stock" (asyncio's own on readiness fds).
        loopback: 127/8 and ::1 on an in-process ustack loopback interface.
        fastpath: the TCP fast path in C (default: on unless ``USTACK_FASTPATH=0``).

    Raises:
        ValueError: an unknown backend or asyncio mode, a missing ``ifname``, or what
            :class:`~ustack.stack.Stack` refuses.
        ustack.device.DeviceError: the device could not be opened (the message says why).
    """

    def __init__(self, backend: str, addr: str, *, ifname: Optional[str] = None, gateway: Optional[str] = None,
                 pcap: Optional[str] = None, mtu: Optional[int] = None, busy_poll: float = DEFAULT_BUSY_POLL,
                 asyncio: str = "native", loopback: bool = False, fastpath: Optional[bool] = None,
                 anticipate: bool = False, pcap_overwrite: bool = False):
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r} (one of {', '.join(BACKENDS)})")
        if backend != "pipe" and not ifname:
            raise ValueError(f"the {backend} backend needs an interface name")
        if asyncio not in ASYNCIO_MODES:
            raise ValueError(f"unknown asyncio mode {asyncio!r} (one of {', '.join(ASYNCIO_MODES)})")
        self.asyncio = asyncio
        if fastpath is None:  # the core reads no environment: USTACK_FASTPATH is read here
            fastpath = environment.fastpath()
        self.clock = MonotonicClock()
        self.link = None
        if backend == "pipe":
            from ustack.backends.pipe import PipeLink

            self.link = PipeLink(self.clock, mtu=mtu or 1500)
            device = self.link.a
        else:
            from ustack.backends.registry import open_device

            device = open_device(backend, ifname)
        try:
            if pcap:
                device = PcapDevice(device, pcap, self.clock, overwrite=pcap_overwrite)
            self.stack = Stack(device, addr, gateway=gateway, mtu=mtu, fastpath=fastpath)
        except BaseException:
            device.close()
            raise
        self.driver = Driver(self.stack, self.clock, busy_poll=busy_poll, anticipate=anticipate)
        self.loopback = open_loopback(self.clock, busy_poll=busy_poll, fastpath=fastpath) if loopback else None
        self.installed = False
        self.closed = False

    def install(self) -> "Session":
        """Start the Driver thread, patch ``socket.socket`` onto this stack, set the asyncio policy."""
        lo = self.loopback
        if lo is not None:
            lo.start()
        self.driver.start()
        stack = self.stack
        if stack.iface6 is not None:  # RFC 4862 5.4: the program's first connect needs a settled address
            self.driver.wait_until(lambda: stack.iface6.link_local is not None and not any(
                a.state == "tentative" for a in stack.iface6.addresses.values()), 5.0)
        patch(self.driver, loopback=lo)
        if self.asyncio == "native":
            install_policy(self.driver, *((lo,) if lo is not None else ()))
        self.installed = True
        return self

    def close(self) -> None:
        """Unpatch (if installed), stop the Driver, close the stack and its device. Idempotent."""
        if self.closed:
            return
        self.closed = True
        if self.installed:
            uninstall_policy()
            unpatch()
        if self.loopback is not None:
            close_loopback(self.loopback)
        self.driver.close()
        self.stack.close()
        self.stack.device.close()


def settings(environ: Mapping[str, str]) -> Optional[dict]:
    """The Session arguments the ``USTACK_*`` variables ask for; None without USTACK_ADDR."""
    addr = environ.get(PREFIX + "ADDR")
    if not addr:
        return None
    kw = {"backend": environ.get(PREFIX + "BACKEND") or "packet", "addr": addr}
    for name in ("ifname", "gateway", "pcap", "asyncio"):
        value = environ.get(PREFIX + name.upper())
        if value:
            kw[name] = value
    mtu = environ.get(PREFIX + "MTU")
    if mtu:
        try:
            kw["mtu"] = int(mtu, 10)
        except ValueError:
            raise ValueError(f"{PREFIX}MTU={mtu!r} is not an integer") from None
    if PREFIX + "FASTPATH" in environ:
        kw["fastpath"] = environment.fastpath(environ)
    if environ.get(PREFIX + "LOOPBACK", "") not in ("", "0"):
        kw["loopback"] = True
    if environ.get(PREFIX + "PCAP_OVERWRITE", "") not in ("", "0"):
        kw["pcap_overwrite"] = True
    if environ.get(PREFIX + "ANTICIPATE", "") not in ("", "0"):
        kw["anticipate"] = True
    busy = environ.get(PREFIX + "BUSY_POLL")
    if busy:
        try:
            kw["busy_poll"] = float(busy)
        except ValueError:
            raise ValueError(f"{PREFIX}BUSY_POLL={busy!r} is not a number of seconds") from None
    return kw


def from_environment(environ: Optional[Mapping[str, str]] = None) -> Optional[Session]:
    """Open, install and register (atexit) a Session from the ``USTACK_*`` variables; None when unset.

    Args:
        environ: the variables to read (default: ``os.environ``).

    Returns:
        The installed :class:`Session`, or ``None``.

    Raises:
        ValueError: a malformed ``USTACK_MTU`` or ``USTACK_BUSY_POLL``, or what :class:`Session` refuses.
        ustack.device.DeviceError: the device could not be opened.
    """
    kw = settings(os.environ if environ is None else environ)
    if kw is None:
        return None
    session = Session(**kw).install()
    atexit.register(session.close)
    return session
