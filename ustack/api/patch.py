"""``patch(driver)`` / ``unpatch()``: install a socket *class* as ``socket.socket`` so stdlib code runs on ustack.

The installed class (``PatchedSocket``) is a subclass of the stdlib's
``socket.socket``, so ``isinstance(s, socket.socket)`` holds for what it
makes. Each instance decides where it lives at its first addressing call:

- ``fileno=`` given, a family other than AF_INET (or AF_INET6 on a stack
  with IPv6), or a type other than SOCK_STREAM / SOCK_DGRAM: the kernel, at
  once (AF_UNIX stays kernel);
- ``bind``/``connect``/``connect_ex``/``sendto``/``sendmsg`` to an address
  in 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104 (or "localhost"): the kernel,
  or, when patched with ``loopback=`` a driver (``ustack run --loopback``),
  ustack on that driver's loopback stack (``ustack.api.loopback``), so both
  ends of a loopback connection are ustack sockets;
- ``bind`` to 0.0.0.0 or :: (or ``listen`` unbound) with a loopback driver:
  ustack on both stacks, one socket each on the same port
  (``ustack.api.wildcard``), until a first ``connect`` keeps the one
  whose stack owns the destination;
- any other address, or a call that needs a decision first (``listen``,
  ``fileno``, ``send``...): ustack, on the patched driver.

Names: while patched, ``socket.getaddrinfo``, ``gethostbyname``,
``gethostbyname_ex``, ``gethostbyaddr`` and ``getnameinfo`` (numeric only) answer through
``ustack.api.resolver`` (/etc/hosts, then DNS over ustack's own UDP).

Options set before the decision (``setsockopt``, timeouts, blocking) are
replayed on whichever socket is chosen. ``accept`` and ``dup`` return
instances of the class too. Code that looked ``socket.socket`` up before
``patch()`` (``from socket import socket``) keeps the kernel class.

TLS: ``ssl.SSLSocket`` takes the fd over with ``detach()``, and ours is a
readiness fd, not a socket; so while patched, ``SSLContext.wrap_socket``
gives a ``ustack.api.tls.TlsSocket`` (SSLObject on memory BIOs) for a
ustack-backed socket (an ``ssl.SSLSocket`` subclass; the wrapped socket
is detached, as SSLSocket leaves it) and an ``ssl.SSLSocket`` for a kernel one. Wrapping a patched
socket before its first addressing call (no address yet to decide by) is
refused by ``detach()`` with EOPNOTSUPP.
"""

from __future__ import annotations

import errno
import os
import socket as _std
import ssl
import stat
import warnings
import weakref

from ustack.transport.ports import check_port
from ustack.api.readiness import ReadinessFd
from ustack.api.resolver import Resolver
from ustack.api.socket import socket as _make_ustack
from ustack.api.tls import TlsDispatch, TlsSocket
from ustack.api.wildcard import WildcardDatagram, WildcardStream, bind_pair

_ORIGINAL = _std.socket
_NAME_CALLS = ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr", "getnameinfo")
_ORIGINAL_NAMES = {name: getattr(_std, name) for name in _NAME_CALLS}
_LOOPBACK_FIRST_OCTET = "127."
_DECIDING = ("bind", "connect", "connect_ex")
_RECORDED = ("setsockopt", "settimeout", "setblocking")
_DELEGATED = ("accept", "close", "detach", "dup", "fileno", "getpeername", "getsockname", "getsockopt",
              "gettimeout", "getblocking", "listen", "recv", "recv_into", "recvfrom",
              "recvfrom_into", "recvmsg", "recvmsg_into", "send", "sendall", "sendfile", "shutdown")


def _is_loopback(address) -> bool:
    return (isinstance(address, tuple) and len(address) >= 1 and isinstance(address[0], str)
            and (address[0].startswith(_LOOPBACK_FIRST_OCTET) or address[0] in ("localhost", "::1")
                 or address[0].startswith("::ffff:" + _LOOPBACK_FIRST_OCTET)))


def _is_wildcard(address) -> bool:
    return isinstance(address, tuple) and len(address) >= 2 and address[0] in ("", "0.0.0.0", "::")


class _FdTable:
    """The ustack sockets whose fds were handed out, by the fd's (device, inode): ``live`` ones weakly
    (``fileno()``), ``detach()``-ed ones strongly (their fd holds the socket until adopted)."""

    def __init__(self):
        self.live = weakref.WeakValueDictionary()
        self.detached: dict = {}


class PatchedSocket(_ORIGINAL):
    """``socket.socket`` while patched: ustack for AF_INET, the kernel for loopback and everything else."""

    _driver = None  # set by patch() on the class it installs
    _resolver = None  # likewise
    _loopback = None  # the loopback stack's driver, or None: loopback stays on the kernel
    _pid = None  # the process that owns the stack (set by patch(); a forked child does not)
    _forked = True  # set False by patch(), True again in a forked child (os.register_at_fork): no getpid per call
    _early_rfd = None  # a readiness fd handed out before the decision (loopback mode)
    _fds = None  # set by patch(): an _FdTable
    _wildcard_loopback = False  # loopback mode: a socket decided with no address at all goes to the loopback stack

    _explicit = None  # (family, type, proto) a socket made from a ustack fd shows (the caller's, as the stdlib)

    def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
        self._u = None
        self._kernel = False
        self._pending: list = []
        if fileno is not None:
            u = self._ustack_of(fileno)
            if u is not None:  # an fd of a ustack socket (fromfd, detach, socket(fileno=s.fileno()))
                self._u = u.adopt(fileno)
                self._explicit = (u.family if family == -1 else family, u.type if type == -1 else type,
                                  u.proto if proto == -1 else proto)
                self._args = (self._u.family, self._u.type, self._u.proto)
                self._io_refs, self._closed = 0, False
                return
            self._args = (family, type, proto)  # (-1: the kernel reads them from the fd)
            self._become_kernel(fileno)
            return
        family = _std.AF_INET if family == -1 else family
        type = _std.SOCK_STREAM if type == -1 else type
        proto = 0 if proto == -1 else proto
        self._args = (family, type, proto)
        if type & _std.SOCK_NONBLOCK:
            self._pending.append(("setblocking", (False,)))  # (timeout 0 before the decision too)
        base = type & ~(_std.SOCK_NONBLOCK | _std.SOCK_CLOEXEC)
        ours = family == _std.AF_INET or (family == _std.AF_INET6 and (
            self._loopback is not None or (self._driver is not None
                                           and getattr(self._driver.stack, "ipv6", None) is not None)))
        if fileno is not None or not ours or base not in (_std.SOCK_STREAM, _std.SOCK_DGRAM):
            self._become_kernel(fileno)
        else:
            self._io_refs = 0
            self._closed = False

    @staticmethod
    def _fd_key(fd):
        """(device, inode) of an fd that is a socket, or None: the identity a ustack socket's fds share."""
        try:
            st = os.fstat(fd)
        except (OSError, TypeError, ValueError, OverflowError):
            return None
        return (st.st_dev, st.st_ino) if stat.S_ISSOCK(st.st_mode) else None

    @classmethod
    def _ustack_of(cls, fd):
        """The ustack socket whose readiness fd ``fd`` is (or a dup of), or None."""
        key = cls._fd_key(fd)
        if key is None or cls._fds is None:
            return None
        u = cls._fds.detached.get(key) or cls._fds.live.get(key)
        if u is None or u._h.rfd is None or u._h.rfd.closed or cls._fd_key(u._h.rfd.fileno()) != key:
            return None
        cls._fds.detached.pop(key, None)  # (adopted: the new object keeps it)
        return u

    def _remember_fd(self, u, fd: int, detached: bool = False) -> None:
        key = self._fd_key(fd)
        if key is None or self._fds is None:
            return
        if detached:
            self._fds.detached[key] = u
        else:
            self._fds.live[key] = u

    @classmethod
    def _wrap(cls, usock):
        obj = cls.__new__(cls)
        obj._u, obj._kernel, obj._pending = usock, False, []
        obj._args = (usock.family, usock.type, usock.proto)
        obj._io_refs, obj._closed = 0, False
        return obj

    def _become_kernel(self, fileno=None) -> None:
        io_refs, closed = getattr(self, "_io_refs", 0), getattr(self, "_closed", False)
        early, self._early_rfd = self._early_rfd, None
        if early is not None:
            early.close()  # (an AF_INET6 socket of the loopback mode used off loopback on a v4-only stack)
        _ORIGINAL.__init__(self, *self._args, fileno)
        self._io_refs, self._closed = io_refs, closed  # files from makefile() made before the decision
        self._kernel = True
        for name, args in self._pending:
            getattr(_ORIGINAL, name)(self, *args)
        self._pending = []

    def _become_ustack(self, driver=None, made=None):
        """Decide for ustack: a socket on ``driver`` (default: the main one), or ``made``, a socket already
        made with the options recorded so far (``_bind_wildcard``)."""
        u = self._u = made if made is not None else _make_ustack(driver or self._driver, *self._args)
        early = getattr(self, "_early_rfd", None)
        if early is not None:  # the fd handed out before the decision becomes this socket's readiness fd
            self._early_rfd = None
            with u._driver.lock:
                u._h.rfd = early
                u._watch()
                early.set(*u._readiness())
            u._driver.ensure_running()
        pending, self._pending = self._pending, []
        for name, args in pending:
            if made is None or name != "setsockopt":
                getattr(u, name)(*args)
        u._sync_blocking()  # (the early fd's O_NONBLOCK)
        return u

    def _bind_wildcard(self, address) -> None:
        """Bind to 0.0.0.0 or :: with a loopback stack: a socket on each stack, same port (``ustack.api.wildcard``),
        as Linux's wildcard spans every interface. An AF_INET6 socket on a main stack without IPv6 lives on
        the loopback stack alone."""
        family, kind = self._args[0], self._args[1] & ~(_std.SOCK_NONBLOCK | _std.SOCK_CLOEXEC)
        if family == _std.AF_INET6 and getattr(self._driver.stack, "ipv6", None) is None:
            self._become_ustack(self._loopback).bind(address)
            return
        cls = WildcardStream if kind == _std.SOCK_STREAM else WildcardDatagram
        options = [args for name, args in self._pending if name == "setsockopt"]

        def make():
            main = cls(self._driver, *self._args, _make_ustack(self._loopback, *self._args))
            for args in options:
                main.setsockopt(*args)  # (on the twin too)
            return main

        self._become_ustack(made=bind_pair(make, address))

    def _settle(self, u, address):
        """The first connect of a socket bound to the wildcard on both stacks: the socket of the stack that
        owns ``address`` stays (taking over the readiness fd), the other closes."""
        twin = getattr(u, "_twin", None)
        if twin is None:
            return u
        if not _is_loopback(address):
            u.drop_twin().close()
            return u
        self._u = twin = u.hand_over()
        if self._fds is not None and twin._h.rfd is not None:
            self._remember_fd(twin, twin._h.rfd.fileno())
        return twin

    def _impl(self, address=None):
        """The ustack socket, or None for the kernel; decides (by ``address``) when undecided."""
        if self._u is not None:
            if self._forked:
                raise OSError(errno.EBADF, "a ustack socket does not survive fork(): the stack stayed in the parent")
            return self._u
        if self._kernel:
            return None
        if address is not None and _is_loopback(address):
            if self._loopback is not None:
                return self._become_ustack(self._loopback)
            self._become_kernel()
            return None
        if address is None and self._loopback is not None and self._wildcard_loopback:
            return self._become_ustack(self._loopback)  # no address came (a wildcard server): the loopback stack
        if self._args[0] == _std.AF_INET6 and getattr(self._driver.stack, "ipv6", None) is None:
            self._become_kernel()  # an AF_INET6 socket made for the loopback stack, used elsewhere
            return None
        return self._become_ustack()

    # -- the stdlib's attributes -----------------------------------------------
    @property
    def family(self):
        """The address family, as ``socket.socket.family`` (an ``AddressFamily``)."""
        if self._explicit:
            return _std._intenum_converter(self._explicit[0], _std.AddressFamily)
        return self._u.family if self._u is not None else _std.AddressFamily(self._args[0]) \
            if not self._kernel else _ORIGINAL.family.__get__(self)

    @property
    def type(self):
        """The socket type without SOCK_NONBLOCK/SOCK_CLOEXEC, as ``socket.socket.type``."""
        if self._explicit:
            return _std._intenum_converter(self._explicit[1], _std.SocketKind)
        if self._u is not None:
            return self._u.type
        if self._kernel:
            return _ORIGINAL.type.__get__(self)
        return _std.SocketKind(self._args[1] & ~(_std.SOCK_NONBLOCK | _std.SOCK_CLOEXEC))

    @property
    def timeout(self):
        """The timeout in seconds, or ``None``, as ``socket.socket.timeout``."""
        return self.gettimeout()

    @property
    def proto(self):
        """The protocol number given at creation, as ``socket.socket.proto``."""
        if self._kernel:
            return _ORIGINAL.proto.__get__(self)
        return self._explicit[2] if self._explicit else self._args[2]

    def __repr__(self):
        """The stdlib's shape (fd, family, type, proto, laddr, raddr), read without side effects: an fd not
        made yet shows as -1, an undecided socket's address as unbound."""
        if self._kernel:
            return _ORIGINAL.__repr__(self)
        u, closed = self._u, getattr(self, "_closed", False)
        if u is not None:
            fd = -1 if u._dead else u._fd if u._fd >= 0 else u._h.rfd.fileno() if u._h.rfd is not None else -1
        else:
            fd = self._early_rfd.fileno() if self._early_rfd is not None else -1
        cls = type(self)
        text = (f"<{cls.__module__}.{cls.__qualname__}{' [closed]' if closed else ''} fd={fd}, "
                f"family={self.family}, type={self.type}, proto={self.proto}")
        if not closed:
            if u is None:
                text += f", laddr={('::', 0, 0, 0) if self._args[0] == _std.AF_INET6 else ('0.0.0.0', 0)}"
            else:
                for name, call in (("laddr", u.getsockname), ("raddr", u.getpeername)):
                    try:
                        text += f", {name}={call()}"
                    except OSError:
                        pass
        return text + ">"

    def __del__(self):
        """A ustack socket dropped unclosed: closed with the stdlib's ResourceWarning, naming this object."""
        u = self.__dict__.get("_u")
        if u is None:
            if not self.__dict__.get("_kernel", True) and not getattr(self, "_closed", True):  # never decided
                warnings.warn(f"unclosed {self!r}", ResourceWarning, source=self)
                early, self._early_rfd = self._early_rfd, None
                if early is not None:
                    early.close()
                return
            _ORIGINAL.__del__(self)
            return
        if u._dead or self._forked:
            return
        warnings.warn(f"unclosed {self!r}", ResourceWarning, source=self)
        try:
            self._close_from_finalizer()  # (dead now: its own finalizer does not warn again)
        except Exception:  # noqa: BLE001 - nothing may escape a finalizer
            pass

    def _close_from_finalizer(self) -> None:
        """The ustack socket's finalizer close (``SocketBase._close_from_finalizer``: no lock, no segment, the
        driver's next round sends the FIN), for this object's finalizer and a ``TlsSocket``'s over it."""
        u = self.__dict__.get("_u")
        self._closed = True
        if u is not None and not u._dead and self._pid == os.getpid():
            u._close_from_finalizer()

    def _tls_take(self):
        """For ``ustack.api.tls``: hand this socket's state to a new object of the class, as SSLSocket's
        ``detach()`` does, and leave this one closed (fd -1). Returns (the new object, None) for a ustack
        socket, (it, False) for one not yet addressed, None for a kernel one (SSLSocket takes that)."""
        if self._u is not None:
            inner = type(self)._wrap(self._u)
            self._u, self._kernel = None, True
            return inner, None
        if self._kernel:
            return None
        inner = type(self).__new__(type(self))
        inner.__dict__.update(self.__dict__)
        inner._io_refs, inner._closed = self._io_refs, self._closed  # (socket.socket's slots)
        self._u, self._kernel, self._pending, self._early_rfd = None, True, [], None
        return inner, False

    def _sendfile_use_sendfile(self, file, offset=0, count=None):
        """os.sendfile() needs a kernel socket: a ustack one reads the file into its send buffer instead
        (``StreamSocket.sendfile_direct``), with the stdlib's checks and give-ups."""
        if self._impl() is None:
            return _ORIGINAL._sendfile_use_sendfile(self, file, offset, count)
        self._check_sendfile_params(file, offset, count)
        return self._impl().sendfile_direct(file, offset, count)

    # -- the calls -------------------------------------------------------------------
    def sendto(self, data, *args):
        """Send a datagram, as ``socket.socket.sendto``: through the stack that owns the destination.

        ``sendto(data, address)`` or ``sendto(data, flags, address)``; a socket still undecided
        becomes a ustack socket (or a kernel one for 127/8 without ``--loopback``).

        Returns:
            The number of bytes sent.

        Raises:
            OSError: as the ustack socket's ``sendto`` (or the kernel's).
        """
        u = self._impl(args[-1] if args else None)
        # (a socket on both stacks sends through the one that owns the destination: WildcardDatagram._send)
        if u is None:
            return _ORIGINAL.sendto(self, data, *args)
        return u.sendto(data, *args[:-1], _numeric(self, u, args[-1])) if args else u.sendto(data)

    def sendmsg(self, buffers, ancdata=(), flags=0, address=None):
        """Send from several buffers, as ``socket.socket.sendmsg``.

        Returns:
            The number of bytes sent.

        Raises:
            OSError: EOPNOTSUPP for non-empty ``ancdata`` on ustack; otherwise as ``send``/``sendto``.
        """
        u = self._impl(address)
        if u is None:
            return _ORIGINAL.sendmsg(self, buffers, ancdata, flags, *(() if address is None else (address,)))
        return u.sendmsg(buffers, ancdata, flags, None if address is None else _numeric(self, u, address))


def _numeric(sock, u, address):
    """``address`` with a host name resolved as the kernel's socket calls do (the patch's resolver)."""
    if not (isinstance(address, tuple) and len(address) >= 2 and isinstance(address[0], str)):
        return address
    host = address[0]
    if host in ("", "<broadcast>") or _std_is_numeric(host):
        return address
    port = address[1]
    check_port(port)  # as the kernel's calls: a bad port is refused before the name is looked up
    infos = sock._resolver.getaddrinfo(host, 0, u.family, u.type)
    if not infos:
        raise _std.gaierror(_std.EAI_NONAME, "Name or service not known")
    return (infos[0][4][0], port) + tuple(address[2:])


def _std_is_numeric(host: str) -> bool:
    for fam in (_std.AF_INET, _std.AF_INET6):
        try:
            _std.inet_pton(fam, host.split("%", 1)[0])
            return True
        except OSError:
            pass
    return False


def _deciding(name):
    kernel = getattr(_ORIGINAL, name)

    def call(self, address, *rest):
        if (name == "bind" and self._loopback is not None and self._u is None and not self._kernel
                and _is_wildcard(address) and not rest):
            # a wildcard spans every interface: with two stacks, a socket on each (ustack.api.wildcard)
            return self._bind_wildcard(address)
        u = self._impl(address)
        if u is None:
            return kernel(self, address, *rest)
        if name != "bind":
            u = self._settle(u, address)
        return getattr(u, name)(_numeric(self, u, address), *rest)

    call.__name__ = name
    call.__doc__ = (f"As ``socket.socket.{name}``: the address decides the stack (ustack's, or the kernel's for "
                    f"AF_UNIX and 127/8 without ``--loopback``); takes, returns and raises as that socket's {name}.")
    return call


def _recorded(name):
    kernel = getattr(_ORIGINAL, name)

    def call(self, *args):
        if self._u is None and not self._kernel:
            if name == "setsockopt" and args and args[0] == _std.IPPROTO_IPV6 and self._args[0] == _std.AF_INET:
                # as Linux answers an AF_INET socket at once (http.server's dual-stack bind tries it)
                raise OSError(errno.ENOPROTOOPT, "Protocol not available")
            self._pending.append((name, args))
            if self._early_rfd is not None and name != "setsockopt":
                self._early_rfd.set_blocking(self.gettimeout() is None)
            return None
        u = self._u
        return kernel(self, *args) if u is None else getattr(u, name)(*args)

    call.__name__ = name
    call.__doc__ = (f"As ``socket.socket.{name}``; before the socket has picked a stack the call is recorded and "
                    f"replayed on the chosen socket (returns None); raises as that socket's {name}.")
    return call


def _delegated(name):
    kernel = getattr(_ORIGINAL, name)

    def call(self, *args, **kw):
        if name in ("gettimeout", "getblocking") and self._u is None and not self._kernel:
            timeout = _std.getdefaulttimeout()
            for n, a in self._pending:
                if n == "settimeout":
                    timeout = a[0]
                elif n == "setblocking":
                    timeout = None if a[0] else 0.0
            return timeout if name == "gettimeout" else timeout != 0.0
        if name == "fileno" and self._u is None and not self._kernel and self._loopback is not None:
            # selectors register a socket before it is bound or connected; with two stacks the address
            # that picks one has not come yet: the readiness fd is made now and adopted at the decision
            if self._early_rfd is None:  # as a fresh kernel socket: TCP readable and writable (HUP), UDP writable
                tcp = self._args[1] & ~(_std.SOCK_NONBLOCK | _std.SOCK_CLOEXEC) == _std.SOCK_STREAM
                self._early_rfd = ReadinessFd(tcp, True)
                self._early_rfd.set_blocking(self.gettimeout() is None)
            return self._early_rfd.fileno()
        if name == "getsockopt" and self._u is None and not self._kernel and self._loopback is not None:
            # asking before the first address (asyncore's set_reuse_addr): a scratch socket with the
            # options set so far answers, and the decision still waits for the address
            scratch = _make_ustack(self._loopback, *self._args)
            try:
                for n, a in self._pending:
                    if n == "setsockopt":
                        scratch.setsockopt(*a)
                return scratch.getsockopt(*args, **kw)
            finally:
                scratch.close()
        if name == "listen" and self._u is None and not self._kernel and self._loopback is not None and (
                self._args[1] & ~(_std.SOCK_NONBLOCK | _std.SOCK_CLOEXEC)) == _std.SOCK_STREAM:
            # listen() before bind: Linux binds the wildcard and an ephemeral port, every interface's
            self._bind_wildcard(("::" if self._args[0] == _std.AF_INET6 else "0.0.0.0", 0))
        if name == "close" and self._u is None and not self._kernel:
            early, self._early_rfd = self._early_rfd, None
            if early is not None:
                early.close()
            self._closed = True
            self._kernel = True  # nothing was made: close the (never opened) kernel object
            return _ORIGINAL.close(self)
        if name == "close" and self._u is not None:
            # as the stdlib's close: files from makefile() (the stdlib's, on this object) keep it open
            self._closed = True
            if self._io_refs > 0 or self._forked:
                return None  # (a forked child leaves the parent's stack alone)
            return self._u.close()
        u = self._impl()
        if u is None:
            return kernel(self, *args, **kw)
        result = getattr(u, name)(*args, **kw)
        if name == "fileno":
            self._remember_fd(u, result)  # socket.socket(fileno=...) and fromfd() find the socket by it
        elif name == "detach":
            self._closed = True
            self._remember_fd(u, result, detached=True)
        if name == "accept":
            child, addr = result
            return type(self)._wrap(child), addr
        if name == "dup":
            return type(self)._wrap(result)
        return result

    call.__name__ = name
    call.__doc__ = (f"As ``socket.socket.{name}``, on the ustack socket underneath (or the kernel's); takes, "
                    f"returns and raises as that socket's {name}.")
    return call


for _name in _DECIDING:
    setattr(PatchedSocket, _name, _deciding(_name))
for _name in _RECORDED:
    setattr(PatchedSocket, _name, _recorded(_name))
for _name in _DELEGATED:
    setattr(PatchedSocket, _name, _delegated(_name))
del _name


_ORIGINAL_WRAP = ssl.SSLContext.wrap_socket


def _wrap_socket(self, sock, server_side=False, do_handshake_on_connect=True, suppress_ragged_eofs=True,
                 server_hostname=None, session=None):
    """``SSLContext.wrap_socket`` while patched: a context whose ``sslsocket_class`` is a custom SSLSocket
    subclass would hand a ustack socket's readiness fd to OpenSSL as if it were the connection (and wait
    on it for ever); a ustack socket gets an instance of a class made of that one over ``TlsSocket``."""
    cls = self.sslsocket_class
    kw = {}
    if (isinstance(sock, PatchedSocket) and not sock._kernel and cls is not TlsDispatch
            and isinstance(cls, type) and issubclass(cls, ssl.SSLSocket) and not issubclass(cls, TlsSocket)):
        # the custom class first, ustack's TLS socket under it: its overrides win, super() reaches TlsSocket
        kw["tls_class"] = type(cls.__name__, (cls, TlsSocket), {"__module__": cls.__module__,
                                                                "__qualname__": cls.__qualname__})
        cls = TlsDispatch
    return cls._create(sock=sock, server_side=server_side, do_handshake_on_connect=do_handshake_on_connect,
                       suppress_ragged_eofs=suppress_ragged_eofs, server_hostname=server_hostname,
                       context=self, session=session, **kw)


class _PatchScope(type):
    """The metaclass of the class ``patch()`` installs: ``with ustack.patch(driver):`` unpatches on exit."""

    def __enter__(cls):
        return cls

    def __exit__(cls, *exc) -> None:
        unpatch()


def patch(driver, resolver=None, loopback=None, wildcard: str = "main") -> type:
    """Install a PatchedSocket class on ``driver`` as ``socket.socket``; returns the class.

    The class is also a context manager: ``with ustack.patch(driver): ...`` runs
    the block patched and calls ``unpatch()`` when it ends, however it ends.

    ``socket.getaddrinfo``, ``gethostbyname``, ``gethostbyname_ex``,
    ``gethostbyaddr`` and ``getnameinfo`` answer through ``resolver`` (default: a
    ``ustack.api.resolver.Resolver`` on ``driver`` with the system's
    /etc/hosts and /etc/resolv.conf), kept as the class's ``_resolver``.
    ``loopback``: the driver of a loopback stack (``ustack.api.loopback``)
    that gets the sockets addressed to 127/8, ::1 and "localhost"; a
    socket bound to 0.0.0.0 or ::, or listening unbound, is on both
    stacks (``ustack.api.wildcard``); ``wildcard`` ("main" or "loopback")
    is where a socket goes that is decided with no address at all.

    Returns:
        The installed ``PatchedSocket`` subclass (a context manager too).

    Raises:
        ValueError: ``wildcard`` is neither "main" nor "loopback".
    """
    if wildcard not in ("main", "loopback"):
        raise ValueError(f"wildcard must be 'main' or 'loopback', not {wildcard!r}")
    resolver = Resolver(driver, kernel_socket=_ORIGINAL, loopback=loopback) if resolver is None else resolver
    cls = _PatchScope("socket", (PatchedSocket,), {"_driver": driver, "_resolver": resolver, "_loopback": loopback,
                                                     "_pid": os.getpid(), "_fds": _FdTable(),
                                                     "_wildcard_loopback": wildcard == "loopback",
                                                     "__module__": __name__})
    cls._forked = False
    ref = weakref.ref(cls)
    os.register_at_fork(after_in_child=lambda: setattr(ref(), "_forked", True) if ref() is not None else None)
    _std.socket = cls
    for name in _NAME_CALLS:
        setattr(_std, name, getattr(resolver, name))
    ssl.SSLContext.sslsocket_class = TlsDispatch
    ssl.SSLContext.wrap_socket = _wrap_socket
    return cls


def unpatch() -> None:
    """Put the stdlib's socket class, name calls (and SSLContext's socket class) back."""
    _std.socket = _ORIGINAL
    for name, call in _ORIGINAL_NAMES.items():
        setattr(_std, name, call)
    ssl.SSLContext.sslsocket_class = ssl.SSLSocket
    ssl.SSLContext.wrap_socket = _ORIGINAL_WRAP
