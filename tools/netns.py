"""Test topologies in their own network namespaces: a veth pair or a TAP device.

The one topology helper that tests, tools and the CLI share; pyroute2 only
(no ``ip``/``ethtool`` processes).

- ``Topology.veth()``: two fresh namespaces joined by a veth pair. The peer
  end is addressed (``peer_addr/prefixlen``) and owned by the kernel; the
  stack end is up with no address, so that namespace's kernel never answers
  for the user-space stack that opens a device on it.
- ``Topology.tap()``: one namespace holding a persistent TAP device that the
  kernel side addresses; the user-space stack attaches to it by name.

``topology.open_device(kind)`` opens a backend on the stack end from inside
the stack namespace and waits until the link is running (the kernel drops
frames until it has processed the carrier change).

Checksum and segmentation offloads are turned off on both ends (FACTS.md:
with tx-checksum on, veth hands AF_PACKET frames whose L4 checksum holds only
the pseudo-header sum; with TSO/GSO it hands 64 KiB TCP frames). IPv6 is
disabled in both namespaces so no router solicitations or MLD reports appear
on the link, unless ``ipv6=True``: then the peer end (only) speaks IPv6 too,
``peer_addr6/prefixlen6`` (fd00::1/64) configured without DAD and with DAD
off for its link-local address, so both are usable at once; the stack end's
kernel still has IPv6 off.

Namespaces are process-wide resources: every name is recorded in this
module's reaper *before* it is created and removed by ``close()``, at
interpreter exit, or on SIGTERM/SIGINT, so an interrupted set-up or a failing
test leaves nothing behind.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import itertools
import os
import select
import signal
import socket
import subprocess
import threading
import time
import weakref
from typing import Iterator, Optional, Sequence

from pyroute2 import IPRoute
from pyroute2 import netns as pyroute2_netns
from pyroute2.ethtool.ioctl import EthtoolError, IoctlEthtool

PEER_ADDR = "198.18.0.1"
STACK_ADDR = "198.18.0.2"
PREFIXLEN = 24
PEER_ADDR6 = "fd00::1"
STACK_ADDR6 = "fd00::2"
PREFIXLEN6 = 64
IFA_F_NODAD = 0x02
# The MAC the user-space stack uses on a TAP topology (locally administered).
TAP_STACK_MAC = bytes.fromhex("027573000002")
IFNAMSIZ = 16  # including the terminating NUL: 15 usable characters

# Offloads that make the kernel hand over frames that are not what a wire
# would carry: partial checksums, super-frames, stripped VLAN tags.
OFFLOADS_OFF = (
    "tx-checksum-ip-generic",
    "tx-checksum-ipv4",
    "tx-checksum-sctp",
    "tx-tcp-segmentation",
    "tx-tcp-ecn-segmentation",
    "tx-tcp-mangleid-segmentation",
    "tx-tcp-accecn-segmentation",
    "tx-tcp6-segmentation",
    "tx-udp-segmentation",
    "tx-generic-segmentation",
    "tx-gso-list",
    "rx-gro",
    "rx-gro-list",
    "tx-vlan-hw-insert",
    "rx-vlan-hw-parse",
)
# "off": OFFLOADS_OFF on both ends; "default": every feature as the kernel sets
# a new device up (a veth: tx checksumming and TSO on, GRO off), what a user
# who makes a veth pair by hand gets.
OFFLOAD_MODES = ("off", "default")
# These must end up off or the topology is refused.
OFFLOADS_REQUIRED_OFF = ("tx-checksum-ip-generic", "tx-tcp-segmentation", "tx-generic-segmentation")


class TopologyError(RuntimeError):
    """A topology could not be built or torn down."""


def _netns_path(name: str) -> str:
    return os.path.join(pyroute2_netns.NETNS_RUN_DIR, name)


def _remove_netns(name: str) -> None:
    """Unmount and unlink a named namespace; quiet when it is (partly) gone already."""
    try:
        pyroute2_netns.remove(name)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.EINVAL):
            raise


class _Reaper:
    """Process-wide record of the namespaces this process created.

    Namespaces outlive Python objects but not the process that reaps them, so
    this is the one piece of process state here: the live topologies (each
    knows its namespaces, recorded before they are created), a serial for
    unique names, and the exit/signal hooks.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.topologies: "weakref.WeakSet[Topology]" = weakref.WeakSet()
        self.serial = itertools.count()
        self.hooked = False
        self.previous: dict[int, object] = {}

    def adopt(self, topology: "Topology") -> None:
        with self.lock:
            self.topologies.add(topology)
            if not self.hooked:
                self.hooked = True
                atexit.register(self.reap_all)
                if threading.current_thread() is threading.main_thread():
                    for signum in (signal.SIGTERM, signal.SIGINT):
                        self.previous[signum] = signal.getsignal(signum)
                        signal.signal(signum, self._on_signal)

    def reap_all(self) -> None:
        with self.lock:
            live = list(self.topologies)
        for topology in live:
            topology.close()

    def _on_signal(self, signum, frame) -> None:
        previous = self.previous.get(signum)
        if previous == signal.SIG_IGN:
            return
        self.reap_all()
        if callable(previous):
            previous(signum, frame)  # SIGINT: default_int_handler raises KeyboardInterrupt
        else:  # SIG_DFL, or a handler installed outside Python
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)


_REAPER = _Reaper()


@contextlib.contextmanager
def _inside(nsname: str) -> Iterator[None]:
    """Move this thread into namespace ``nsname`` and back (setns is per thread)."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        try:
            pyroute2_netns.setns(nsname, flags=0)
            yield
        finally:
            pyroute2_netns.setns(home, flags=0)
    finally:
        os.close(home)


def _sysctl_ipv6_off(ifname: Optional[str] = None) -> None:
    """Disable IPv6 in the current thread's namespace (all/default, or one interface)."""
    names = ("all", "default") if ifname is None else (ifname,)
    for name in names:
        path = f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6"
        if os.path.exists(path):
            with open(path, "w") as f:
                f.write("1")


def _sysctl_ipv6_on(ifname: str) -> None:
    """IPv6 on for one interface of the current thread's namespace, DAD off (usable at once)."""
    for name in ("all", ifname):
        with open(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6", "w") as f:
            f.write("0")
    for key in ("accept_dad", "dad_transmits"):
        with open(f"/proc/sys/net/ipv6/conf/{ifname}/{key}", "w") as f:
            f.write("0")


def _set_features(ifname: str, features: dict[str, bool], *, strict: Sequence[str] = ()) -> dict[str, bool]:
    """Change ethtool features of ``ifname`` (current namespace) through SIOCETHTOOL.

    Features the device does not have are skipped. Returns the resulting
    state of every requested feature; raises if one named in ``strict`` did
    not take the requested value.
    """
    ethtool = IoctlEthtool(ifname)
    try:
        current = ethtool.get_features()
        changed = False
        for name, value in features.items():
            if name in current and current.is_available(name) and current[name] != bool(value):
                current[name] = bool(value)
                changed = True
        if changed:
            try:
                ethtool.set_features(current)
            except (OSError, EthtoolError):
                pass  # ETHTOOL_F_WISH & co: some bits did not change; checked below
        after = ethtool.get_features()
        result = {name: after[name] for name in features if name in after}
    finally:
        ethtool.close()
    for name in strict:
        if name in result and result[name] != bool(features[name]):
            raise TopologyError(f"could not set {name}={features[name]} on {ifname}")
    return result


def _mac_text(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


class Topology:
    """A veth pair or a TAP device in namespaces of its own; see the module docstring.

    Use as a context manager (or call ``close()``, which is idempotent).
    """

    peer_addr: str = PEER_ADDR
    stack_addr: str = STACK_ADDR
    prefixlen: int = PREFIXLEN
    peer_addr6: str = PEER_ADDR6
    stack_addr6: str = STACK_ADDR6
    prefixlen6: int = PREFIXLEN6

    def __init__(self, kind: str, *, mtu: int = 1500, tag: str = "t", ipv6: bool = False, offloads: str = "off"):
        if kind not in ("veth", "tap"):
            raise ValueError(f"unknown topology kind {kind!r}")
        if offloads not in OFFLOAD_MODES:
            raise ValueError(f"offloads must be one of {', '.join(OFFLOAD_MODES)}, not {offloads!r}")
        self.offloads = offloads
        if not tag.isalnum():
            raise ValueError("tag must be alphanumeric")
        self.kind = kind
        self.mtu = mtu
        self.ipv6 = ipv6
        self.name = f"us{tag}{os.getpid()}{next(_REAPER.serial)}"
        if len(self.name) + 1 > IFNAMSIZ - 1:
            raise ValueError(f"topology name {self.name!r} too long for an interface name; use a shorter tag")
        if kind == "veth":
            self.stack_ns, self.peer_ns = self.name + "s", self.name + "p"
            self.stack_ifname, self.peer_ifname = self.name + "s", self.name + "p"
        else:
            self.stack_ns = self.peer_ns = self.name + "n"
            self.stack_ifname = self.peer_ifname = self.name
        self.peer_mac = b""
        self.stack_mac = b""
        self._namespaces: list[str] = []  # in creation order; recorded before creation
        self._children: list[subprocess.Popen] = []
        self._closed = False
        self._lock = threading.RLock()
        _REAPER.adopt(self)
        try:
            if kind == "veth":
                self._build_veth()
            else:
                self._build_tap()
        except BaseException:
            self.close()
            raise

    # -- construction -------------------------------------------------------

    @classmethod
    def veth(cls, *, mtu: int = 1500, tag: str = "t", ipv6: bool = False, offloads: str = "off") -> "Topology":
        return cls("veth", mtu=mtu, tag=tag, ipv6=ipv6, offloads=offloads)

    @classmethod
    def tap(cls, *, mtu: int = 1500, tag: str = "t", ipv6: bool = False, offloads: str = "off") -> "Topology":
        return cls("tap", mtu=mtu, tag=tag, ipv6=ipv6, offloads=offloads)

    def _create_ns(self, name: str) -> None:
        if name in pyroute2_netns.listnetns():
            raise TopologyError(f"network namespace {name} already exists")
        with self._lock:
            if self._closed:
                raise TopologyError("topology closed during set-up")
            self._namespaces.append(name)
        # pyroute2 creates the namespace in a forked child; with SIGINT/SIGTERM
        # held off (the child inherits the mask) it either exists completely
        # or not at all when a pending signal's handler reaps it.
        held = {signal.SIGINT, signal.SIGTERM}
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
        try:
            pyroute2_netns.create(name)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        with _inside(name):
            _sysctl_ipv6_off()
            with IPRoute() as ipr:
                ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")

    def _build_veth(self) -> None:
        self._create_ns(self.peer_ns)
        self._create_ns(self.stack_ns)
        stack_fd = os.open(_netns_path(self.stack_ns), os.O_RDONLY)
        try:
            with self.in_peer_ns(), IPRoute() as ipr:
                # Created inside the peer namespace with its other end placed
                # straight into the stack namespace: nothing touches the host's.
                ipr.link(
                    "add",
                    ifname=self.peer_ifname,
                    kind="veth",
                    peer={"ifname": self.stack_ifname, "net_ns_fd": stack_fd},
                )
                self.peer_mac = self._configure(ipr, self.peer_ifname, address=True)
        finally:
            os.close(stack_fd)
        with self.in_stack_ns(), IPRoute() as ipr:
            self.stack_mac = self._configure(ipr, self.stack_ifname, address=False)
        self.wait_running()

    def _build_tap(self) -> None:
        self._create_ns(self.peer_ns)
        with self.in_peer_ns(), IPRoute() as ipr:
            # pyroute2 creates tuntap devices with TUNSETIFF + TUNSETPERSIST in
            # this thread's namespace.
            ipr.link(
                "add",
                ifname=self.peer_ifname,
                kind="tuntap",
                mode="tap",
                ifr={"no_pi": True, "one_queue": False, "vnet_hdr": False, "multi_queue": False},
            )
            self.peer_mac = self._configure(ipr, self.peer_ifname, address=True)
        self.stack_mac = TAP_STACK_MAC

    def _configure(self, ipr: IPRoute, ifname: str, *, address: bool) -> bytes:
        """MTU, offloads, IPv6 off, optional address, up. Returns the interface's MAC."""
        index = ipr.link_lookup(ifname=ifname)[0]
        ipr.link("set", index=index, mtu=self.mtu)
        _sysctl_ipv6_off(ifname)
        if self.offloads == "off":
            _set_features(ifname, {f: False for f in OFFLOADS_OFF}, strict=OFFLOADS_REQUIRED_OFF)
        if address:
            ipr.addr("add", index=index, address=self.peer_addr, prefixlen=self.prefixlen)
            if self.ipv6:
                _sysctl_ipv6_on(ifname)
        ipr.link("set", index=index, state="up")
        if address and self.ipv6:
            ipr.addr("add", index=index, address=self.peer_addr6, prefixlen=self.prefixlen6, flags=IFA_F_NODAD)
        link = ipr.link("get", index=index)[0]
        return bytes.fromhex(link.get_attr("IFLA_ADDRESS").replace(":", ""))

    # -- namespaces ---------------------------------------------------------

    def in_stack_ns(self) -> contextlib.AbstractContextManager:
        """This thread in the stack's namespace for the with-block (open sockets/devices there)."""
        return _inside(self.stack_ns)

    def in_peer_ns(self) -> contextlib.AbstractContextManager:
        """This thread in the kernel peer's namespace for the with-block."""
        return _inside(self.peer_ns)

    def _popen(self, nsname: str, argv, **kw) -> subprocess.Popen:
        def enter() -> None:
            pyroute2_netns.setns(nsname, flags=0)

        proc = subprocess.Popen(argv, preexec_fn=enter, **kw)
        with self._lock:
            self._children.append(proc)
        return proc

    def peer_popen(self, argv, **kw) -> subprocess.Popen:
        """Start a process in the peer namespace; close() kills it if still running."""
        return self._popen(self.peer_ns, argv, **kw)

    def stack_popen(self, argv, **kw) -> subprocess.Popen:
        """Start a process in the stack namespace; close() kills it if still running."""
        return self._popen(self.stack_ns, argv, **kw)

    def peer_run(self, argv, timeout: float = 30, **kw) -> subprocess.CompletedProcess:
        """Run a process in the peer namespace to completion (subprocess.run semantics)."""

        def enter() -> None:
            pyroute2_netns.setns(self.peer_ns, flags=0)

        return subprocess.run(argv, timeout=timeout, preexec_fn=enter, **kw)

    def wait_running(self, timeout: float = 5.0) -> None:
        """Wait until every end of the link is operationally UP.

        The kernel applies a carrier change (veth ends coming up, a TAP
        getting its first reader) in its linkwatch work, which can lag by up
        to a second when many links change; until then its transmit queue
        drops everything. A veth topology waits before the constructor
        returns; for a TAP call this after attaching the device (or use
        ``open_device``).
        """
        deadline = time.monotonic() + timeout
        for nsname, ifname in self._ends():
            with _inside(nsname), IPRoute() as ipr:
                ipr.bind()  # link notifications wake the wait early
                index = ipr.link_lookup(ifname=ifname)[0]
                poller = select.poll()  # not select(2): fds may exceed FD_SETSIZE in a busy process
                poller.register(ipr.fileno(), select.POLLIN)
                while ipr.link("get", index=index)[0].get_attr("IFLA_OPERSTATE") != "UP":
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TopologyError(f"{ifname} in {nsname} not running after {timeout} s")
                    if poller.poll(min(remaining, 0.01) * 1000.0):
                        ipr.get()

    def open_device(self, kind: Optional[str] = None, **opts):
        """Open a backend on the stack end (``kind`` defaults to "tap" / "packet").

        Opens it inside the stack namespace (a TAP with the topology's stack
        MAC, attaching to the existing device), then waits until the link is
        running. Returns the Device.
        """
        from ustack.backends.registry import open_device

        kind = kind or ("tap" if self.kind == "tap" else "packet")
        defaults = {"mac": self.stack_mac, "create": False} if kind == "tap" else {}
        with self.in_stack_ns():
            device = open_device(kind, self.stack_ifname, **{**defaults, **opts})
        try:
            self.wait_running()
        except BaseException:
            device.close()
            raise
        return device

    # -- changes ------------------------------------------------------------

    def _ends(self) -> list[tuple[str, str]]:
        if self.kind == "veth":
            return [(self.peer_ns, self.peer_ifname), (self.stack_ns, self.stack_ifname)]
        return [(self.peer_ns, self.peer_ifname)]

    def set_mtu(self, mtu: int) -> None:
        """Set the MTU of both ends (the TAP device for a tap topology)."""
        for nsname, ifname in self._ends():
            with _inside(nsname), IPRoute() as ipr:
                ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], mtu=mtu)
        self.mtu = mtu

    def set_offloads(self, side: str, **features: bool) -> dict[str, bool]:
        """Set ethtool features on one end: ``side`` is "peer", "stack" or an ifname.

        Feature names use underscores for dashes (``tx_checksum_ip_generic=True``).
        Returns the resulting state of the requested features.
        """
        if side == "peer":
            nsname, ifname = self.peer_ns, self.peer_ifname
        elif side == "stack":
            nsname, ifname = self.stack_ns, self.stack_ifname
        else:
            ends = [end for end in self._ends() if end[1] == side]
            if not ends:
                raise ValueError(f"unknown side {side!r}")
            nsname, ifname = ends[0]
        wanted = {name.replace("_", "-"): bool(value) for name, value in features.items()}
        with _inside(nsname):
            return _set_features(ifname, wanted)

    def add_peer_neighbour(self, addr: Optional[str] = None, mac: Optional[bytes] = None) -> None:
        """A permanent ARP entry in the peer namespace (default: stack_addr -> stack_mac).

        Lets the kernel peer send unicast to the user-space stack before that
        stack answers ARP.
        """
        addr = addr or self.stack_addr
        mac = mac or self.stack_mac
        with self.in_peer_ns(), IPRoute() as ipr:
            index = ipr.link_lookup(ifname=self.peer_ifname)[0]
            ipr.neigh("replace", dst=addr, lladdr=_mac_text(mac), ifindex=index, state="permanent")

    # -- teardown -----------------------------------------------------------

    def close(self) -> None:
        """Kill our processes and delete our namespaces (and with them the links). Idempotent."""
        with self._lock:
            self._closed = True
            children, self._children = self._children, []
            names = list(self._namespaces)
        for proc in children:
            if proc.poll() is None:
                proc.kill()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        for name in reversed(names):
            _remove_netns(name)
            with self._lock:
                if name in self._namespaces:
                    self._namespaces.remove(name)
        with _REAPER.lock:
            _REAPER.topologies.discard(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def namespaces(self) -> list[str]:
        """The namespaces this topology created and has not deleted yet."""
        with self._lock:
            return list(self._namespaces)

    def __enter__(self) -> "Topology":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Topology({self.kind}, stack={self.stack_ns}/{self.stack_ifname}, "
            f"peer={self.peer_ns}/{self.peer_ifname} {self.peer_addr}/{self.prefixlen})"
        )


def peer_socket(topology: Topology, family: int = socket.AF_INET, type: int = socket.SOCK_DGRAM, proto: int = 0) -> socket.socket:
    """A socket created in the peer namespace (it stays there whatever thread uses it)."""
    with topology.in_peer_ns():
        return socket.socket(family, type, proto)
