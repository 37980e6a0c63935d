"""Initial sequence numbers (RFC 6528), timestamp offsets and SYN cookies (RFC 4987 3.6).

ISN = M + F(localip, localport, remoteip, remoteport, secretkey), where M is
a 4-microsecond clock derived from ``now`` and F a keyed hash (BLAKE2s with
the stack's secret as key). The same keyed hash gives each connection a
random-looking timestamp offset (so TSval does not leak uptime) and the
24-bit MAC of a SYN cookie. A connection needs F and its timestamp offset
together: one 8-byte digest of the 4-tuple (purpose ``isn+ts``) gives both,
F in its high half and the offset in its low half (``connection_hashes``),
so opening a connection hashes once. Keying BLAKE2s is done once per layer;
hashing the 12 bytes of a 4-tuple from the keyed state costs about 1 µs in
CPython, less than the Python calls around it (a SipHash in C would save
well under 1 µs per connection).

SYN cookie layout (RFC 4987 3.6): the top 5 bits are t mod 32 (t counts
64-second periods), the next 3 bits index ``COOKIE_MSS``, the low 24 bits
are F(4-tuple, t, the client's ISN). A cookie is good for the period it was
made in and the next one.
"""

from __future__ import annotations

import hashlib
import struct

COOKIE_PERIOD = 64.0
COOKIE_MSS = (536, 1220, 1300, 1360, 1400, 1440, 1460, 8960)

_PORTS = struct.Struct("!HH")
_COOKIE_EXTRA = struct.Struct("!IB")


def _key(secret: bytes) -> bytes:
    secret = bytes(secret)
    if len(secret) < 16:
        raise ValueError("the ISN secret must be at least 16 bytes")
    return secret if len(secret) <= 32 else hashlib.blake2s(secret).digest()


class KeyedHash:
    """F() with one secret: a BLAKE2s state keyed once per purpose, copied for each 4-tuple.

    Keying BLAKE2s (and checking the secret) costs more than hashing the
    12 bytes of a 4-tuple, and a connection needs F() for its ISN and its
    timestamp offset (one digest, ``connection_hashes``) and a SYN cookie
    another: the TcpLayer keeps one of these per
    secret (``TcpLayer.keyed``). Results equal the module functions'.
    """

    __slots__ = ("secret", "_states", "_pair")

    def __init__(self, secret: bytes):
        self.secret = secret
        key = _key(secret)
        self._states = {purpose: hashlib.blake2s(key=key, digest_size=4, person=purpose)
                        for purpose in (b"cookie",)}
        self._pair = hashlib.blake2s(key=key, digest_size=8, person=b"isn+ts")  # connection_hashes

    def hash32(self, purpose: bytes, laddr: bytes, lport: int, raddr: bytes, rport: int, extra: bytes = b"") -> int:
        """F(): a keyed 32-bit hash of the 4-tuple, separated by ``purpose``."""
        state = self._states.get(purpose)
        h = state.copy() if state is not None else hashlib.blake2s(key=_key(self.secret), digest_size=4,
                                                                    person=purpose[:8])
        h.update(bytes(laddr) + bytes(raddr) + _PORTS.pack(lport, rport) + extra)
        return int.from_bytes(h.digest(), "big")

    def connection_hashes(self, laddr: bytes, lport: int, raddr: bytes, rport: int) -> tuple[int, int]:
        """(F(4-tuple, secret) of the ISN, the timestamp offset): both halves of one keyed digest."""
        h = self._pair.copy()
        h.update(bytes(laddr) + bytes(raddr) + _PORTS.pack(lport, rport))
        value = int.from_bytes(h.digest(), "big")
        return value >> 32, value & 0xFFFFFFFF

    def isn(self, laddr: bytes, lport: int, raddr: bytes, rport: int, now: float) -> int:
        """RFC 6528 section 3: M (4 µs ticks of ``now``) + F(4-tuple, secret), mod 2**32."""
        return isn_at(self.connection_hashes(laddr, lport, raddr, rport)[0], now)

    def ts_offset(self, laddr: bytes, lport: int, raddr: bytes, rport: int) -> int:
        """A per-connection offset added to the millisecond TSval clock (RFC 7323 7.1 privacy)."""
        return self.connection_hashes(laddr, lport, raddr, rport)[1]

    def cookie_mac(self, laddr: bytes, lport: int, raddr: bytes, rport: int, client_isn: int, t: int) -> int:
        """The 24-bit MAC of a SYN cookie made in period ``t`` (mod 32)."""
        return self.hash32(b"cookie", laddr, lport, raddr, rport, _COOKIE_EXTRA.pack(client_isn, t)) & 0xFFFFFF

    def make_cookie(self, laddr: bytes, lport: int, raddr: bytes, rport: int, client_isn: int, mss_index: int,
                    now: float) -> int:
        t = int(now // COOKIE_PERIOD) & 31
        return (t << 27) | ((mss_index & 7) << 24) | self.cookie_mac(laddr, lport, raddr, rport, client_isn, t)

    def check_cookie(self, laddr: bytes, lport: int, raddr: bytes, rport: int, client_isn: int, cookie: int,
                     now: float) -> int | None:
        """The MSS index a cookie encodes, or None when it is forged or expired."""
        t = cookie >> 27
        current = int(now // COOKIE_PERIOD) & 31
        if (current - t) & 31 > 1:
            return None
        if self.cookie_mac(laddr, lport, raddr, rport, client_isn, t) != cookie & 0xFFFFFF:
            return None
        return (cookie >> 24) & 7


def isn_at(f: int, now: float) -> int:
    """RFC 6528 section 3: ISN = M + F mod 2**32, M counting 4 µs ticks of ``now``."""
    return (int(now * 250_000) + f) & 0xFFFFFFFF


def keyed_hash32(secret: bytes, purpose: bytes, laddr: bytes, lport: int, raddr: bytes, rport: int,
                 extra: bytes = b"") -> int:
    """F(): a keyed 32-bit hash of the 4-tuple, separated by ``purpose``."""
    return KeyedHash(secret).hash32(purpose, laddr, lport, raddr, rport, extra)


def initial_sequence_number(secret: bytes, laddr: bytes, lport: int, raddr: bytes, rport: int, now: float) -> int:
    """RFC 6528 section 3: M (4 µs ticks of ``now``) + F(4-tuple, secret), mod 2**32."""
    return KeyedHash(secret).isn(laddr, lport, raddr, rport, now)


def timestamp_offset(secret: bytes, laddr: bytes, lport: int, raddr: bytes, rport: int) -> int:
    """A per-connection offset added to the millisecond TSval clock (RFC 7323 7.1 privacy)."""
    return KeyedHash(secret).ts_offset(laddr, lport, raddr, rport)


def cookie_mss_index(mss: int) -> int:
    """The largest table entry not above ``mss``."""
    idx = 0
    for i, value in enumerate(COOKIE_MSS):
        if value <= mss:
            idx = i
    return idx


def make_cookie(secret: bytes, laddr: bytes, lport: int, raddr: bytes, rport: int, client_isn: int,
                mss_index: int, now: float) -> int:
    return KeyedHash(secret).make_cookie(laddr, lport, raddr, rport, client_isn, mss_index, now)


def check_cookie(secret: bytes, laddr: bytes, lport: int, raddr: bytes, rport: int, client_isn: int,
                 cookie: int, now: float) -> int | None:
    """The MSS index a cookie encodes, or None when it is forged or expired."""
    return KeyedHash(secret).check_cookie(laddr, lport, raddr, rport, client_isn, cookie, now)
