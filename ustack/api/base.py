"""What every ustack socket shares: address parsing, timeouts, blocking waits (see ``ustack.api.socket``).

A socket is made on a ``Driver`` (``ustack.api.driver``): the driver owns
the clock and the poll loop, the socket waits through it. Blocking calls
drive the stack's poll loop through the driver; non-blocking calls raise
BlockingIOError; timeouts raise TimeoutError (``socket.timeout``), as the
stdlib does. Addresses are text at this edge and packed bytes below it
(``ustack.net.addr``).

Each socket object has a handle (``Handle``) that ``dup()`` shares: the
protocol object, the readiness fd and a reference count; the connection is
released when the last duplicate is closed (as the kernel does when the
last fd of an open file is closed). ``makefile()`` is the stdlib's own
(``socket.SocketIO`` over this socket, with its reference counting): the
socket really closes when ``close()`` was called and the last file is
closed. A socket garbage-collected unclosed is closed (its connection
too) with a ResourceWarning, like a stdlib socket.
"""

from __future__ import annotations

import errno
import operator
import os
import socket as _std
import struct
import warnings
from typing import Callable, Optional

from ustack.net import addr
from ustack.net.addr import ANY4, ANY6, BROADCAST4
from ustack.transport.ports import check_port

from ustack.api.readiness import ReadinessFd

AF_INET = _std.AF_INET
AF_INET6 = _std.AF_INET6
IPPROTO_IPV6 = _std.IPPROTO_IPV6
IPV6_V6ONLY = _std.IPV6_V6ONLY
V4_MAPPED = bytes(10) + b"\xff\xff"
SOCK_DGRAM = _std.SOCK_DGRAM
SOCK_STREAM = _std.SOCK_STREAM
SOL_SOCKET = _std.SOL_SOCKET

MSG_OOB = _std.MSG_OOB
MSG_PEEK = _std.MSG_PEEK
MSG_DONTWAIT = _std.MSG_DONTWAIT
MSG_WAITALL = _std.MSG_WAITALL
MSG_NOSIGNAL = _std.MSG_NOSIGNAL  # Python ignores SIGPIPE: EPIPE is raised either way


def parse_address(address, family: int = AF_INET, v6only: bool = False, zone=None) -> tuple[bytes, int]:
    """An AF_INET (host, port) pair -> (packed address, port), with the stdlib's errors.

    AF_INET6 takes (host, port[, flowinfo[, scope_id]]); an IPv4-mapped
    address (::ffff:a.b.c.d) becomes the 4-byte IPv4 address below this
    edge (unless ``v6only``: ENETUNREACH, as Linux), "" and "::" the IPv6
    wildcard (dual-stack unless ``v6only``). ``zone`` is the stack's one
    interface as (scope id, name) (``interface_zone``): a link-scoped
    address (RFC 4007) may name it by a "%name" or "%index" suffix or by
    ``scope_id``; 0 and no suffix mean it too (one interface); another
    interface is ENETUNREACH (as Linux for a scope id of an interface it
    cannot route from), an unknown zone name a gaierror (as the stdlib).
    """
    if family == AF_INET6:
        return _parse6(address, v6only, zone)
    if not isinstance(address, tuple) or len(address) != 2:
        raise TypeError(f"AF_INET address must be tuple, not {type(address).__name__}")
    host, port = address
    check_port(port)
    if host in ("", "0.0.0.0"):
        return ANY4, port
    if host == "<broadcast>":
        return BROADCAST4, port
    if not isinstance(host, str):
        raise TypeError(f"str, bytes or bytearray expected, not {type(host).__name__}")
    try:
        a = addr.parse(host)
    except ValueError:
        a = None
    if a is None or len(a) != 4:
        raise _std.gaierror(_std.EAI_NONAME, "Name or service not known (ustack takes IPv4 literals)")
    return a, port


def _parse6(address, v6only: bool, zone) -> tuple[bytes, int]:
    if not isinstance(address, tuple) or not 2 <= len(address) <= 4:
        raise TypeError(f"AF_INET6 address must be a tuple (host, port[, flowinfo[, scopeid]]), "
                        f"not {type(address).__name__}")
    host, port = address[0], address[1]
    check_port(port)
    flowinfo = address[2] if len(address) > 2 else 0
    scope_id = address[3] if len(address) > 3 else 0
    for value in (flowinfo, scope_id):
        if not isinstance(value, int):
            raise TypeError(f"'{type(value).__name__}' object cannot be interpreted as an integer")
    if not 0 <= flowinfo <= 0xFFFFF:
        raise OverflowError("flowinfo must be 0-1048575.")
    if host in ("", "::"):
        return ANY6, port
    if not isinstance(host, str):
        raise TypeError(f"str, bytes or bytearray expected, not {type(host).__name__}")
    host, _, zone_name = host.partition("%")
    try:
        a = addr.parse(host)
    except ValueError:
        a = None
    if a is None or len(a) != 16:
        raise _std.gaierror(_std.EAI_NONAME, "Name or service not known (ustack takes IPv6 literals here)")
    if zone is not None and link_scoped(a):
        _check_zone(zone, zone_name, scope_id)
    if a[:12] == V4_MAPPED:
        if v6only:
            raise OSError(errno.ENETUNREACH, "Network is unreachable (IPv4-mapped address on an IPV6_V6ONLY socket)")
        return a[12:], port
    return a, port


def _check_zone(zone, name: str, scope_id: int) -> None:
    """A link-scoped address's zone ("%name", "%index" or ``scope_id``) must be the stack's interface."""
    ours, ifname = zone
    if name:
        if name.isdigit():
            named = int(name)
        elif name == ifname:
            named = ours
        else:
            raise _std.gaierror(_std.EAI_NONAME, f"Name or service not known (no interface {name!r} on this "
                                                 f"stack; its interface is {ifname or 'unnamed'})")
        if scope_id and scope_id != named:
            raise OSError(errno.EINVAL, f"Invalid argument (zone %{name} and scope id {scope_id} disagree)")
        scope_id = named
    if scope_id and scope_id != ours:
        raise OSError(errno.ENETUNREACH, f"Network is unreachable (scope id {scope_id} is not this stack's "
                                         f"interface {ifname or '(pipe)'}, scope id {ours})")


def link_scoped(a: bytes) -> bool:
    """Addresses that need a zone (RFC 4007 6): link-local unicast fe80::/10 and link-local multicast ff02::/16."""
    return (a[0] == 0xFE and (a[1] & 0xC0) == 0x80) or (a[0] == 0xFF and (a[1] & 0x0F) == 2)


def interface_zone(stack) -> tuple[int, Optional[str]]:
    """The stack's interface as (scope id, name): the kernel's index of the backend's interface (the name in
    ``Capabilities.extra['ifname']``, looked up in this process's namespace), or 1 for a device with none
    (the pipe) or one the kernel does not know here."""
    name = stack.device.capabilities.extra.get("ifname")
    if name:
        try:
            return _std.if_nametoindex(name), name
        except OSError:
            pass
    return 1, name


def format_address(packed: bytes, port: int, family: int = AF_INET, scope_id: int = 0) -> tuple:
    """Packed address and port -> what the stdlib returns for ``family`` (IPv4 in AF_INET6 as ::ffff:a.b.c.d;
    a link-scoped IPv6 address with ``scope_id``, the interface's index, as Linux reports it)."""
    if family != AF_INET6:
        return addr.to_str(packed), port
    if len(packed) == 4:
        return ("::ffff:" + addr.to_str(packed) if packed != ANY4 else "::"), port, 0, 0
    return addr.to_str(packed), port, 0, (scope_id if link_scoped(packed) else 0)


def set_callback(obj, attr: str, fn) -> None:
    """Set a protocol object's callback slot; a chain already there (``ustack.api.aio``'s Hook, with its
    ``prev``) keeps its place and calls ``fn`` first, so a transport never loses its events."""
    cur = getattr(obj, attr)
    if cur is not None and hasattr(cur, "prev"):
        cur.prev = fn
    else:
        setattr(obj, attr, fn)


class FdSlot:
    """One fd number of a socket, as the kernel sees it: socket objects over the same number share it
    (``socket.socket(fileno=s.fileno())``); closing any of them closes the number, and the others' calls
    then fail with EBADF, as two Python objects over one kernel fd do."""

    __slots__ = ("open",)

    def __init__(self):
        self.open = True


class Handle:
    """What duplicates of one socket share: the protocol state, the readiness fd, and a reference count:
    the number of open fd slots (``dup()`` and ``fromfd()`` add one, closing one removes it)."""

    def __init__(self):
        self.refs = 1
        self.rfd: Optional[ReadinessFd] = None
        self.slot0 = FdSlot()  # the readiness fd's own number
        self.slots: dict[int, FdSlot] = {}  # fd number -> its open slot (for socket(fileno=n))


class shared:
    """A socket attribute kept on its ``Handle``, so every ``dup()`` of the socket sees the same value."""

    __slots__ = ("name",)

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        return obj._h.__dict__[self.name]

    def __set__(self, obj, value):
        obj._h.__dict__[self.name] = value


def bad_flags(flags: int, allowed: int, oob_errno: int = errno.EOPNOTSUPP) -> None:
    """Reject flags this socket does not implement, with Linux's errno (MSG_OOB: EINVAL or EOPNOTSUPP)."""
    extra = flags & ~allowed
    if not extra:
        return
    if extra & MSG_OOB:
        raise OSError(oob_errno, os.strerror(oob_errno))
    raise OSError(errno.EOPNOTSUPP, "Operation not supported (flags %#x)" % extra)


INT_MIN, INT_MAX = -2 ** 31, 2 ** 31 - 1


def c_int(value, what: str = "argument") -> int:
    """``value`` as the C int the stdlib's socket calls take: TypeError if not an integer, OverflowError
    outside the int range (``listen(2**31)``, ``shutdown(2**31)``), as theirs."""
    value = operator.index(value)
    if not INT_MIN <= value <= INT_MAX:
        raise OverflowError(f"{what}: signed integer is {'greater than maximum' if value > 0 else 'less than minimum'}")
    return value


def byte_view(data) -> memoryview:
    """``data`` as a flat byte view, with the stdlib's TypeError for what is not bytes-like."""
    try:
        return memoryview(data).cast("B")
    except TypeError:
        raise TypeError(f"a bytes-like object is required, not '{type(data).__name__}'") from None


def sendmsg_data(buffers, ancdata, flags) -> bytes:
    """sendmsg()'s arguments checked as the stdlib checks them (TypeError for a buffer that is not
    bytes-like, an ancillary item that is not (int, int, bytes-like), flags not an int), then the data
    gathered. ustack sends no ancillary data: a well-formed non-empty ``ancdata`` is EOPNOTSUPP."""
    data = b"".join([byte_view(b) for b in buffers])
    items = list(ancdata)
    for item in items:
        if not isinstance(item, tuple) or len(item) != 3:
            raise TypeError("[sendmsg() ancillary data items]() argument must be sequence of length 3")
        operator.index(item[0])
        operator.index(item[1])
        byte_view(item[2])
    operator.index(flags)
    if items:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported (ustack sockets carry no ancillary data)")
    return data


def writable_views(buffers, call: str = "recvmsg_into") -> list[memoryview]:
    """``buffers`` as byte views to receive into, all checked before anything is taken (a read-only or
    non-contiguous buffer is a TypeError, as the stdlib's, and the data stays queued)."""
    views = []
    for b in buffers:
        try:
            v = memoryview(b)
        except TypeError:
            v = None
        if v is None or v.readonly or not v.contiguous:
            raise TypeError(f"{call}() argument 1 must be an iterable of single-segment read-write buffers")
        views.append(v.cast("B"))
    return views


class SocketBase:
    """What UDP and TCP sockets share: the driver, timeouts, blocking waits, readiness fds, close and dup."""

    _io_refs = 0

    def __init__(self, driver, family: int = AF_INET, type: int = SOCK_STREAM, proto: int = 0):
        if not hasattr(driver, "wait_until"):
            raise TypeError(f"a ustack socket takes a ustack.api.driver.Driver, not {driver.__class__.__name__}")
        self._dead = True  # until fully built: __del__ must not act on a half-made socket
        self.stack = driver.stack
        self._family = _std.AddressFamily(family)
        self._type = _std.SocketKind(type & ~(_std.SOCK_NONBLOCK | _std.SOCK_CLOEXEC))
        self._proto = proto
        self._driver = driver
        self._timeout: Optional[float] = 0.0 if type & _std.SOCK_NONBLOCK else _std.getdefaulttimeout()
        self._closed = False  # close() was called (the stdlib's flag; files may keep the socket open)
        self._io_refs = 0
        self._fd = -1  # this object's own fd number when it is a dup (else the handle's)
        self._h = Handle()
        self._slot = self._h.slot0
        self._dead = False  # the socket is closed for good (EBADF)

    # -- the stdlib's attributes ---------------------------------------------------
    family = property(lambda self: self._family, doc="The address family (socket.AddressFamily).")
    type = property(lambda self: self._type, doc="The socket type (socket.SocketKind).")
    proto = property(lambda self: self._proto, doc="The protocol number given at creation (0 by default).")

    _v6only = False  # IPV6_V6ONLY (AF_INET6 sockets; Linux's default net.ipv6.bindv6only = 0)

    def _parse(self, address) -> tuple[bytes, int]:
        return parse_address(address, self._family, self._v6only, self._zone if self._family == AF_INET6 else None)

    def _format(self, packed: bytes, port: int) -> tuple:
        if self._family == AF_INET6 and len(packed) == 16 and link_scoped(packed):
            return format_address(packed, port, AF_INET6, self._zone[0])
        return format_address(packed, port, self._family)

    @property
    def _zone(self) -> tuple[int, Optional[str]]:
        """The stack's interface as (scope id, name), looked up once per socket (``interface_zone``)."""
        zone = self.__dict__.get("_zone_cache")
        if zone is None:
            zone = self.__dict__["_zone_cache"] = interface_zone(self.stack)
        return zone

    def _local_ok(self, packed: bytes) -> bool:
        """An address this socket may bind: ours (either family) or a wildcard."""
        stack = self.stack
        if len(packed) == 4:
            return stack.iface.is_ours(packed)
        return packed == ANY6 or (stack.iface6 is not None and stack.iface6.is_ours(packed))

    def _v6only_opt(self, level: int, optname: int, value=None, set_it: bool = False):
        """IPV6_V6ONLY on an AF_INET6 socket (before bind); None when (level, optname) is something else."""
        if level != IPPROTO_IPV6 or optname != IPV6_V6ONLY:
            return None
        if self._family != AF_INET6:
            raise OSError(errno.ENOPROTOOPT, "Protocol not available")
        if set_it:
            self._v6only = bool(value)
        return int(self._v6only)

    @property
    def timeout(self) -> Optional[float]:
        """The timeout in seconds (``None``: blocking, ``0.0``: non-blocking), as ``socket.socket.timeout``."""
        return self._timeout

    # -- housekeeping ---------------------------------------------------------
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_dead", True):
            return
        warnings.warn(f"unclosed {self!r}", ResourceWarning, source=self)
        try:
            self._close_from_finalizer()
        except Exception:  # noqa: BLE001 - nothing may escape a finalizer (the driver may be gone)
            pass

    def _close_from_finalizer(self) -> None:
        """close() for a finalizer, which may run anywhere (inside the stack's poll, in another thread,
        under any lock): no lock, no segment; the driver's next round releases the protocol object
        (``_orphan``) and that round's flush sends the FIN or RST (``Driver.defer``)."""
        self._closed = True
        self._real_close(finalizing=True)

    def _check(self) -> None:
        if self._dead or not self._slot.open:
            raise OSError(errno.EBADF, "Bad file descriptor")

    def close(self) -> None:
        """Close; with files from ``makefile()`` still open, the socket lives until the last one closes."""
        self._closed = True
        if self._io_refs <= 0:
            self._real_close()

    def _real_close(self, finalizing: bool = False) -> None:
        if self._dead:
            return
        self._dead = True
        h, slot = self._h, self._slot
        if not slot.open:  # another object over this fd number closed it
            raise OSError(errno.EBADF, "Bad file descriptor")
        slot.open = False
        if self._fd >= 0:
            h.slots.pop(self._fd, None)
            os.close(self._fd)
            self._fd = -1
        elif h.rfd is not None and h.slots.get(h.rfd.fileno()) is slot:
            del h.slots[h.rfd.fileno()]
        h.refs -= 1
        if h.refs > 0:
            return
        if finalizing:
            release, rfd = self._orphan(), h.rfd

            def release_and_close_rfd():
                try:
                    release()
                finally:
                    if rfd is not None:
                        rfd.close()

            self._driver.defer(release_and_close_rfd)
            return
        try:
            self._release()
        finally:
            if h.rfd is not None:
                with self._driver.lock:
                    h.rfd.close()

    def _release(self) -> None:
        """Give the protocol object up (the last duplicate was closed)."""
        raise NotImplementedError

    def _orphan(self) -> Callable[[], None]:
        """What ``_release`` does, as a call that holds no reference to this socket, needs no time
        and sends nothing itself: the driver runs it under its lock in the next round."""
        raise NotImplementedError

    def detach(self) -> int:
        """Close this socket object but not what it stands for; returns its fd number.

        Like the stdlib, the connection stays open: nothing but the returned
        readiness fd refers to it any more (ustack cannot rebuild a socket
        object from an fd number).
        """
        self._check()
        fd = self.fileno()
        self._dead = self._closed = True  # (the fd's slot stays open: the number still holds the socket)
        return fd

    def adopt(self, fd: int):
        """A new socket object for ``fd``, an fd of this socket's readiness (``socket.socket(fileno=fd)``,
        ``socket.fromfd``, after ``detach()``): it shares the slot of a number an object holds or held
        (detached), else ``fd`` gets a slot of its own; closing the object closes the number. The timeout
        is the default timeout, as for the stdlib's socket made from an fd."""
        h = self._h
        if h.rfd is None or h.rfd.closed:
            raise OSError(errno.EBADF, "Bad file descriptor")
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._closed = new._dead = False
        new._io_refs = 0
        slot = h.slots.get(fd)
        if slot is None or not slot.open:  # a number no object holds yet (os.dup() by fromfd): a new slot
            slot = h.slots[fd] = FdSlot()
            h.refs += 1
        new._slot = slot
        new._fd = -1 if fd == h.rfd.fileno() else fd
        new._timeout = _std.getdefaulttimeout()
        new._sync_blocking()
        return new

    # -- stdlib file plumbing (socket.SocketIO reference counting) -----------------
    makefile = _std.socket.makefile
    _decref_socketios = _std.socket._decref_socketios

    def dup(self):
        """A new socket object for the same endpoint (its own fd number, the same readiness and state)."""
        self._check()
        self.fileno()  # make the readiness fd: the duplicate needs its own number for it
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._closed = False
        new._io_refs = 0
        new._fd = self._h.rfd.dup()
        new._slot = self._h.slots[new._fd] = FdSlot()
        self._h.refs += 1
        return new

    # -- readiness ------------------------------------------------------------------
    def fileno(self) -> int:
        """This socket's own fd: readable and writable as the socket is (select, poll, epoll, selectors).

        Made on first use; the driver's background thread is started then, so
        the stack keeps being polled while the application sleeps in select().
        """
        if self._dead:
            return -1
        if self._fd >= 0:
            return self._fd
        h = self._h
        if h.rfd is None:
            driver = self._driver
            with driver.lock:
                if h.rfd is None:
                    h.rfd = ReadinessFd(*self._readiness())
                    h.rfd.set_blocking(self._timeout is None)
                    if h.slot0.open:
                        h.slots[h.rfd.fileno()] = h.slot0
                    self._watch()
            start = getattr(driver, "ensure_running", None)
            if start is not None:
                start()
        return h.rfd.fileno()

    def _readiness(self) -> tuple[bool, bool]:
        """(readable, writable) as select() would report them for a kernel socket in this state."""
        raise NotImplementedError

    def _watch(self) -> None:
        """Install the protocol callbacks that keep the readiness fd current (when there is one)."""

    def _refresh(self) -> None:
        """Bring the readiness fd up to date after a user call (reads, writes, accepts change it)."""
        rfd = self._h.rfd
        if rfd is not None:
            rfd.set(*self._readiness())

    # -- timeouts ---------------------------------------------------------------------
    def settimeout(self, value: Optional[float]) -> None:
        """Set the timeout of blocking calls, as ``socket.socket.settimeout``.

        Args:
            value: seconds (a float >= 0), ``0.0`` for non-blocking, ``None`` for blocking without a limit.

        Raises:
            ValueError: a negative value.
        """
        if value is not None:
            value = float(value)
            if value < 0:
                raise ValueError("Timeout value out of range")
        self._timeout = value
        self._sync_blocking()

    def _sync_blocking(self) -> None:
        rfd = self._h.rfd
        if rfd is not None and not self._dead:
            rfd.set_blocking(self._timeout is None)

    def gettimeout(self) -> Optional[float]:
        """Return the timeout in seconds, ``0.0`` (non-blocking) or ``None`` (blocking)."""
        return self._timeout

    def setblocking(self, flag: bool) -> None:
        """Blocking (``True``: timeout ``None``) or non-blocking (``False``: timeout ``0.0``).

        The readiness fd's O_NONBLOCK follows, as ``fcntl(F_GETFL)`` shows on a kernel socket.
        """
        self._timeout = None if flag else 0.0
        self._sync_blocking()

    def getblocking(self) -> bool:
        """Return ``True`` unless the socket is non-blocking (timeout ``0.0``)."""
        return self._timeout != 0.0

    def _wait(self, predicate, flags: int = 0, timeo: str = "") -> None:
        """Block until predicate() holds, per the timeout; BlockingIOError / TimeoutError otherwise.

        MSG_DONTWAIT in ``flags`` makes this one call non-blocking. On a
        blocking socket (timeout None) ``timeo`` names the SO_RCVTIMEO /
        SO_SNDTIMEO bound, whose expiry is EAGAIN as on Linux; a Python
        timeout's expiry is TimeoutError, as in the stdlib.
        """
        if predicate():
            return  # answerable at once (data buffered, room to send): no lock, no round, no system call
        driver = self._driver
        timeout = 0.0 if flags & MSG_DONTWAIT else self._timeout
        eagain = False
        if timeout is None and timeo:
            timeout = self._h.__dict__.get(timeo)
            eagain = timeout is not None
        if timeout == 0.0:
            with driver.lock:
                if predicate():
                    return
                driver.poll()  # (wakes the threads asleep on the device fd if it received frames)
                if predicate():
                    return
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        if not driver.wait_until(predicate, timeout):
            if eagain:
                raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
            raise TimeoutError("timed out")

    # -- socket options shared by both kinds ---------------------------------------------
    def _timeo_opt(self, optname: int, value) -> bool:
        """SO_RCVTIMEO / SO_SNDTIMEO (struct timeval); True when ``optname`` was one of them."""
        key = {_std.SO_RCVTIMEO: "rcvtimeo", _std.SO_SNDTIMEO: "sndtimeo"}.get(optname)
        if key is None:
            return False
        if not isinstance(value, (bytes, bytearray)) or len(value) < 16:
            raise OSError(errno.EINVAL, "Invalid argument (SO_RCVTIMEO takes struct timeval)")
        sec, usec = struct.unpack("qq", bytes(value[:16]))
        if sec < 0 or not 0 <= usec < 1_000_000:
            raise OSError(errno.EDOM, "Numerical argument out of domain")
        t = sec + usec / 1e6
        self._h.__dict__[key] = t if t else None  # zero: wait forever, as Linux
        return True

    def _timeo_get(self, optname: int):
        key = {_std.SO_RCVTIMEO: "rcvtimeo", _std.SO_SNDTIMEO: "sndtimeo"}.get(optname)
        if key is None:
            return None
        t = self._h.__dict__.get(key) or 0.0
        sec = int(t)
        return struct.pack("qq", sec, int(round((t - sec) * 1e6)))
