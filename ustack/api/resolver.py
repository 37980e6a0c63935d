"""A stub resolver over ustack's own UDP: numeric addresses, /etc/hosts, then DNS (RFC 1035) per resolv.conf.

``Resolver(driver)`` answers ``getaddrinfo``/``gethostbyname``/
``gethostbyname_ex``/``getnameinfo`` with the stdlib's shapes and errors,
in this order:

1. numeric hosts (IPv4 dotted forms, IPv6 literals) at once, as written;
2. the hosts file (``hosts_path``, re-read when its mtime changes);
3. DNS: a query per address type over a UDP socket on the stack (source
   port and query id: random, RFC 5452 9.2 and 4.3), to the nameservers
   of ``resolv_conf`` (re-read when its mtime changes). A nameserver in
   127.0.0.0/8 or ::1 (systemd-resolved's 127.0.0.53) is asked through a
   KERNEL socket, since loopback is not on ustack's interface; an IPv6
   nameserver needs a stack with IPv6 (otherwise it is skipped).

The files are /etc/hosts and /etc/resolv.conf unless given, or named by
the environment variables ``USTACK_HOSTS`` / ``USTACK_RESOLV_CONF``.

resolv.conf, simplified: ``nameserver`` (the first three, as glibc),
``search``/``domain`` (the last one wins), ``options ndots:N timeout:S
attempts:N`` (defaults 1, 5, 2; no ``rotate``, no ``edns0``). A name with
at least ``ndots`` dots (or a trailing dot) is tried as written first,
then with each search suffix; other names the other way round. Each
attempt asks the nameservers in turn, ``timeout`` seconds each. A reply
counts only if it comes from the server's address and port, carries the
query's id and repeats its question; other datagrams are dropped with a
named counter in ``Resolver.stats`` and the wait goes on. NXDOMAIN (on
the last candidate) is ``gaierror(EAI_NONAME)``; SERVFAIL/REFUSED or
silence moves on to the next server, and when none answered,
``gaierror(EAI_AGAIN)``; a truncated reply (TC) is ``gaierror(EAI_FAIL)``
at once: there is no TCP fallback (RFC 7766 is not done). Answers are
cached per (name, type) for their smallest TTL (capped at ``MAX_TTL``),
at most ``cache_size`` entries, least recently used out first; failures are
not cached.

Families: a stack without IPv6 gets IPv4 results only for names and for
``host=None`` under AF_UNSPEC (so ``create_server(None)`` binds IPv4 on
ustack); AF_INET6 asked for a name is EAI_FAMILY; numeric hosts are
answered as written. With IPv6, AF_UNSPEC asks for A and AAAA in
parallel and lists IPv6 addresses first when the name has any, then IPv4.
``gethostbyaddr`` (and so ``socket.getfqdn``) answers from the hosts
file, then by a PTR query (not cached); ``getnameinfo`` is numeric only
(NI_NAMEREQD is EAI_NONAME).
"""

from __future__ import annotations

import collections
import errno
import ipaddress
import os
import secrets
import socket as _std
import threading
import time

from ustack.api import dns_message as dm

DNS_PORT = 53
MAX_NAMESERVERS = 3  # as glibc's MAXNS
DEFAULT_NDOTS, DEFAULT_TIMEOUT, DEFAULT_ATTEMPTS = 1, 5.0, 2
MAX_TTL = 86400
MAX_REPLY = 4096
ENV_HOSTS, ENV_RESOLV_CONF = "USTACK_HOSTS", "USTACK_RESOLV_CONF"  # other files than /etc's (tests, containers)
_NUMERIC_GAI = _std.getaddrinfo  # the C library's, used with AI_NUMERICHOST only: formatting, never a lookup
_NUMERIC_GNI = _std.getnameinfo
_KERNEL_SOCKET = _std.socket


class Config:
    """What resolv.conf says, in the simplified reading the module docstring gives."""

    def __init__(self, nameservers=(), search=(), ndots=DEFAULT_NDOTS, timeout=DEFAULT_TIMEOUT,
                 attempts=DEFAULT_ATTEMPTS):
        self.nameservers, self.search = list(nameservers), list(search)
        self.ndots, self.timeout, self.attempts = ndots, timeout, attempts

    @classmethod
    def parse(cls, text: str) -> "Config":
        """Read resolv.conf text: ``nameserver`` (the first three), ``search``/``domain``, ``options``.

        Args:
            text: the file's contents.

        Returns:
            A :class:`Config`; lines it does not understand are skipped, as glibc does.
        """
        conf = cls()
        for line in text.splitlines():
            words = line.split("#", 1)[0].split(";", 1)[0].split()
            if not words:
                continue
            key, args = words[0], words[1:]
            if key == "nameserver" and args and len(conf.nameservers) < MAX_NAMESERVERS:
                try:
                    conf.nameservers.append(str(ipaddress.ip_address(args[0].split("%", 1)[0])))
                except ValueError:
                    pass
            elif key in ("search", "domain") and args:
                conf.search = [d.rstrip(".").lower() for d in (args if key == "search" else args[:1])]
            elif key == "options":
                for opt in args:
                    name, _, value = opt.partition(":")
                    try:
                        if name == "ndots":
                            conf.ndots = min(max(int(value), 0), 15)
                        elif name == "timeout":
                            conf.timeout = float(min(max(int(value), 1), 30))
                        elif name == "attempts":
                            conf.attempts = min(max(int(value), 1), 5)
                    except ValueError:
                        pass
        return conf


class _FileCache:
    """A file's parsed contents, re-parsed when its mtime or size changes (missing file: ``empty``)."""

    def __init__(self, path, parse, empty):
        self.path, self._parse, self._empty = path, parse, empty
        self._key, self._value = None, empty

    def get(self):
        try:
            st = os.stat(self.path)
            key = (st.st_mtime_ns, st.st_size)
        except OSError:
            return self._empty
        if key != self._key:
            with open(self.path, encoding="utf-8", errors="replace") as f:
                self._value = self._parse(f.read())
            self._key = key
        return self._value


def parse_hosts(text: str) -> dict:
    """{name: (canonical name, [aliases], [(family, address)])} from a hosts file's text."""
    table: dict = {}
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) < 2:
            continue
        try:
            ip = ipaddress.ip_address(words[0].split("%", 1)[0])
        except ValueError:
            continue
        family = _std.AF_INET6 if ip.version == 6 else _std.AF_INET
        canonical, aliases = words[1], words[2:]
        for name in words[1:]:
            entry = table.setdefault(name.lower().rstrip("."), (canonical, aliases, []))
            if (family, str(ip)) not in entry[2]:
                entry[2].append((family, str(ip)))
    return table


def _gaierror(code, text):
    return _std.gaierror(code, text)


def _is_loopback(server: str) -> bool:
    return ipaddress.ip_address(server).is_loopback


class Resolver:
    """getaddrinfo and friends for a patched program, over ``driver``'s stack (see the module docstring)."""

    def __init__(self, driver, *, hosts_path=None, resolv_conf=None,
                 kernel_socket=_KERNEL_SOCKET, cache_size=256, clock=time.monotonic, port=DNS_PORT, loopback=None):
        if hosts_path is None:
            hosts_path = os.environ.get(ENV_HOSTS) or "/etc/hosts"
        if resolv_conf is None:
            resolv_conf = os.environ.get(ENV_RESOLV_CONF) or "/etc/resolv.conf"
        self._driver = driver
        self._loopback = loopback  # the loopback stack's driver (``ustack run --loopback``), or None
        self._port = port  # the nameservers' port (resolv.conf has none; tests use another)
        self._hosts = _FileCache(hosts_path, parse_hosts, {})
        self._conf = _FileCache(resolv_conf, Config.parse, Config())
        self._kernel_socket = kernel_socket
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._cache_size = cache_size
        self._clock = clock
        self._lock = threading.Lock()
        self.stats: collections.Counter = collections.Counter()

    @property
    def ipv6(self) -> bool:
        """Whether the stack has IPv6 (and so whether names get AAAA answers)."""
        return getattr(self._driver.stack, "ipv6", None) is not None

    # -- the stdlib's calls -----------------------------------------------------------
    def getaddrinfo(self, host, port, family=0, type=0, proto=0, flags=0):
        """Answer as ``socket.getaddrinfo``: numeric hosts, the hosts file, then DNS over ustack UDP.

        Args:
            host: a name, a numeric address, bytes (IDNA) or ``None`` (the wildcard / loopback).
            port: a number, a service name or ``None``.
            family, type, proto, flags: as ``socket.getaddrinfo``.

        Returns:
            A list of ``(family, type, proto, canonname, sockaddr)`` tuples.

        Raises:
            socket.gaierror: EAI_NONAME (no such name), EAI_AGAIN (no nameserver answered),
                EAI_FAIL (a truncated reply), EAI_FAMILY (AF_INET6 on a stack without IPv6,
                or an unknown family), EAI_SERVICE (an unknown service name).
        """
        if isinstance(host, bytes):
            host = host.decode("idna")
        if host is None:  # the wildcard or loopback: IPv4 only without IPv6 on either stack (asyncio's servers)
            six = self.ipv6 or getattr(getattr(self._loopback, "stack", None), "ipv6", None) is not None
            return _NUMERIC_GAI(None, port, family or (0 if six else _std.AF_INET), type, proto, flags)
        if flags & _std.AI_NUMERICHOST or self._numeric(host):
            return _NUMERIC_GAI(host, port, family, type, proto, flags)
        if family not in (_std.AF_UNSPEC, _std.AF_INET, _std.AF_INET6):
            raise _gaierror(_std.EAI_FAMILY, "ai_family not supported")
        if family == _std.AF_INET6 and not self.ipv6:
            raise _gaierror(_std.EAI_FAMILY, "ai_family not supported (the stack has no IPv6)")
        canonical, addrs = self.resolve(host, family)
        out = []
        for fam, addr in addrs:
            for entry in _NUMERIC_GAI(addr, port, fam, type, proto, (flags & ~_std.AI_CANONNAME) | _std.AI_NUMERICHOST):
                out.append(entry)
        if out and flags & _std.AI_CANONNAME:
            f, t, p, _, sa = out[0]
            out[0] = (f, t, p, canonical, sa)
        return out

    def gethostbyname(self, name):
        """Answer as ``socket.gethostbyname``: the first IPv4 address of ``name``.

        Raises:
            socket.gaierror: as :meth:`getaddrinfo`.
        """
        return self.gethostbyname_ex(name)[2][0]

    def gethostbyname_ex(self, name):
        """Answer as ``socket.gethostbyname_ex``.

        Returns:
            ``(canonical_name, aliases, ipv4_addresses)``.

        Raises:
            socket.gaierror: as :meth:`getaddrinfo`.
        """
        if self._numeric(name):
            try:
                addr = _NUMERIC_GAI(name, None, _std.AF_INET, 0, 0, _std.AI_NUMERICHOST)[0][4][0]
            except _std.gaierror:
                raise _gaierror(_std.EAI_NONAME, "Name or service not known") from None
            return name, [], [addr]
        canonical, addrs = self.resolve(name, _std.AF_INET)
        aliases = [name] if name.lower().rstrip(".") != canonical.lower() else []
        return canonical, aliases, [a for _, a in addrs]

    def gethostbyaddr(self, address):
        """(name, aliases, [address]): the hosts file, then a PTR query (RFC 1035 3.5) over ustack UDP."""
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            ip = ipaddress.ip_address(self.gethostbyname(address))  # as glibc: a name is resolved first
        for canonical, aliases, addrs in self._hosts.get().values():
            if any(a == str(ip) for _, a in addrs):
                return canonical, list(aliases), [str(ip)]
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        qname = ip.reverse_pointer
        try:
            answer = self._ask(qname, [dm.TYPE_PTR], self._conf.get())
        except _std.gaierror as e:
            raise _std.herror(2, f"Host name lookup failure ({e.strerror})") from None  # TRY_AGAIN
        names = [] if answer is None else answer[dm.TYPE_PTR][1]
        if not names:
            raise _std.herror(1, "Unknown host")  # HOST_NOT_FOUND
        return names[0], names[1:], [str(ip)]

    def getnameinfo(self, sockaddr, flags):
        """Answer as ``socket.getnameinfo``, numerically (no PTR lookup here).

        Returns:
            ``(host, port)`` as text.

        Raises:
            socket.gaierror: EAI_NONAME when NI_NAMEREQD asks for a name.
            TypeError: a malformed ``sockaddr``, as the stdlib.
        """
        if flags & _std.NI_NAMEREQD:
            raise _gaierror(_std.EAI_NONAME, "Name or service not known (ustack's resolver does no PTR lookups)")
        try:
            return _NUMERIC_GNI(sockaddr, flags | _std.NI_NUMERICHOST)
        except TypeError:
            # the traceback keeps this frame: it must not keep the caller's argument alive (the C call does not)
            del sockaddr
            raise

    @staticmethod
    def _numeric(host: str) -> bool:
        try:
            _NUMERIC_GAI(host, None, 0, 0, 0, _std.AI_NUMERICHOST)
            return True
        except (_std.gaierror, UnicodeError, ValueError):
            return False

    # -- names ---------------------------------------------------------------------------
    def resolve(self, name: str, family: int = _std.AF_UNSPEC) -> tuple[str, list[tuple[int, str]]]:
        """(canonical name, [(family, address)]) for ``name``: hosts file, then DNS; gaierror otherwise."""
        want6 = self.ipv6 and family in (_std.AF_UNSPEC, _std.AF_INET6)
        want4 = family in (_std.AF_UNSPEC, _std.AF_INET)
        try:
            key = name.rstrip(".").encode("idna").decode("ascii").lower()
        except UnicodeError:
            raise _gaierror(_std.EAI_NONAME, "Name or service not known") from None
        if not key or len(key) > 253:
            raise _gaierror(_std.EAI_NONAME, "Name or service not known")
        entry = self._hosts.get().get(key)
        if entry is not None:
            found = [(f, a) for f, a in entry[2] if f == _std.AF_INET6 and want6 or f == _std.AF_INET and want4]
            if found:
                found.sort(key=lambda fa: fa[0] != _std.AF_INET6)  # IPv6 first (only there when wanted)
                return entry[0], found
        qtypes = ([dm.TYPE_AAAA] if want6 else []) + ([dm.TYPE_A] if want4 else [])
        conf = self._conf.get()
        nxdomain = False
        for candidate in self._candidates(key, name.endswith("."), conf):
            answers = self._lookup(candidate, qtypes, conf)
            if answers is None:
                nxdomain = True
                continue
            canonical, found = answers
            if found:
                return canonical, found
        raise _gaierror(_std.EAI_NONAME, "Name or service not known" if nxdomain else
                        "Name or service not known (no address of the family asked for)")

    @staticmethod
    def _candidates(name: str, absolute: bool, conf: Config) -> list[str]:
        if absolute or not conf.search:
            return [name]
        suffixed = [f"{name}.{d}" for d in conf.search if d]
        return [name, *suffixed] if name.count(".") >= conf.ndots else [*suffixed, name]

    def _lookup(self, name: str, qtypes: list[int], conf: Config):
        """(canonical, [(family, address)]) for ``name`` (possibly empty: no data), or None for NXDOMAIN."""
        now = self._clock()
        results, missing = {}, []
        with self._lock:
            for qtype in qtypes:
                hit = self._cache.get((name, qtype))
                if hit is not None and hit[0] > now:
                    self._cache.move_to_end((name, qtype))
                    results[qtype] = hit[1]
                    self.stats["dns.cache_hit"] += 1
                else:
                    missing.append(qtype)
        if missing:
            fresh = self._ask(name, missing, conf)
            if fresh is None:
                return None
            with self._lock:
                for qtype, (canonical, addrs, ttl) in fresh.items():
                    results[qtype] = (canonical, addrs)
                    ttl = min(ttl, MAX_TTL)
                    if addrs and ttl > 0:
                        self._cache[(name, qtype)] = (now + ttl, (canonical, addrs))
                        self._cache.move_to_end((name, qtype))
                        while len(self._cache) > self._cache_size:
                            self._cache.popitem(last=False)
        canonical, found = name, []
        for qtype in qtypes:  # AAAA first when asked for (see the docstring), then A
            c, addrs = results[qtype]
            if addrs and not found:
                canonical = c
            fam = _std.AF_INET6 if qtype == dm.TYPE_AAAA else _std.AF_INET
            found += [(fam, _std.inet_ntop(fam, a)) for a in addrs]
        return canonical, found

    # -- the wire --------------------------------------------------------------------------
    def _ask(self, name: str, qtypes: list[int], conf: Config):
        """{qtype: (canonical, [rdata], ttl)} from the first nameserver that answers, or None for NXDOMAIN."""
        servers = [s for s in conf.nameservers if _is_loopback(s) or ":" not in s or self.ipv6]
        if not servers:
            raise _gaierror(_std.EAI_AGAIN, "Temporary failure in name resolution (no usable nameserver)")
        for _ in range(conf.attempts):
            for server in servers:
                answer = self._exchange(server, name, qtypes, conf.timeout)
                if answer is not None:
                    return answer.get("result")
        raise _gaierror(_std.EAI_AGAIN, "Temporary failure in name resolution")

    def _socket(self, server: str):
        family = _std.AF_INET6 if ":" in server else _std.AF_INET
        if _is_loopback(server):
            self.stats["dns.query_via_kernel"] += 1
            return self._kernel_socket(family, _std.SOCK_DGRAM)
        from ustack.api.socket import socket as ustack_socket

        self.stats["dns.query_via_ustack"] += 1
        sock = ustack_socket(self._driver, family, _std.SOCK_DGRAM)
        # RFC 5452 9.2: a random source port, which binding port 0 gives (ustack.transport.ports draws a
        # fresh keyed-hash start for every bind without a destination).
        sock.bind(("::" if family == _std.AF_INET6 else "0.0.0.0", 0))
        return sock

    def _exchange(self, server: str, name: str, qtypes: list[int], timeout: float):
        """{"result": ...} once every question is answered by ``server``; None: silence or a failure rcode."""
        pending = {}  # qid -> qtype
        for qtype in qtypes:
            qid = secrets.randbits(16)
            while qid in pending:
                qid = secrets.randbits(16)
            pending[qid] = qtype
        result = {}
        sock = self._socket(server)
        try:
            try:
                sock.connect((server, self._port))
                peer = sock.getpeername()[:2]
                for qid, qtype in pending.items():
                    sock.send(dm.query(qid, name, qtype))
                    self.stats["dns.query_sent"] += 1
            except OSError as e:  # no route to this server (ENETUNREACH...): the next one may have one
                self.stats[f"dns.send_error.{errno.errorcode.get(e.errno, e.errno)}"] += 1
                return None
            deadline = self._clock() + timeout
            while pending:
                left = deadline - self._clock()
                if left <= 0:
                    self.stats["dns.timeout"] += 1
                    return None
                sock.settimeout(left)
                try:
                    data, src = sock.recvfrom(MAX_REPLY)
                except TimeoutError:
                    continue
                except OSError as e:  # ICMP port unreachable and its kin: this server will not answer
                    if e.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH):
                        self.stats["dns.server_unreachable"] += 1
                        return None
                    raise
                verdict = self._accept(data, src[:2], peer, name, pending)
                if verdict is None:
                    continue
                qtype, reply = verdict
                del pending[reply.qid]
                if reply.truncated:
                    self.stats["dns.reply_truncated"] += 1
                    raise _gaierror(_std.EAI_FAIL, f"truncated DNS reply for {name!r} (TC set; ustack's resolver "
                                                   "has no TCP fallback)")
                if reply.rcode == dm.RCODE_NXDOMAIN:
                    self.stats["dns.reply_nxdomain"] += 1
                    return {"result": None}
                if reply.rcode != dm.RCODE_NOERROR:
                    self.stats[f"dns.reply_rcode_{reply.rcode}"] += 1
                    return None
                try:
                    result[qtype] = dm.addresses(reply, name, qtype)
                except dm.FormatError:
                    self.stats["dns.reply_cname_chain"] += 1
                    return None
            return {"result": result}
        finally:
            sock.close()

    def _accept(self, data, src, peer, name, pending):
        """(qtype, Reply) if ``data`` answers one of ``pending``; None (counted) otherwise."""
        if src[0] != peer[0] or src[1] != peer[1]:
            self.stats["dns.reply_wrong_source"] += 1
            return None
        try:
            reply = dm.parse_reply(data)
        except dm.FormatError:
            self.stats["dns.reply_malformed"] += 1
            return None
        qtype = pending.get(reply.qid)
        if qtype is None:
            self.stats["dns.reply_wrong_id"] += 1
            return None
        if reply.qname != name or reply.qtype != qtype or reply.qclass != dm.CLASS_IN:
            self.stats["dns.reply_wrong_question"] += 1
            return None
        if reply.flags & dm.OPCODE_MASK:
            self.stats["dns.reply_malformed"] += 1
            return None
        return qtype, reply
