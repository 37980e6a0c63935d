"""Initial sequence numbers (RFC 6528), timestamp offsets and SYN cookies (RFC 4987 3.6).

ISN = M + F(localip, localport, remoteip, remoteport, secretkey), where M is
a 4-microsecond clock derived from ``now`` and F a keyed hash (BLAKE2s with
the stack's secret as key). The same keyed hash gives each connection a
random-looking timestamp offset (so TSval does not leak uptime) and the
24-bit MAC of a SYN cookie.

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


def _key(secret: bytes) -> bytes:
    secret = bytes(secret)
    if len(secret) < 16:
        raise ValueError("the ISN secret must be at least 16 bytes")
    return secret if len(secret) <= 32 else hashlib.blake2s(secret).digest()


def keyed_hash32(secret: bytes, purpose: bytes, laddr: bytes, lport: int, raddr: bytes, rport: int,
                 extra: bytes = b"") -> int:
    """F(): a keyed 32-bit hash of the 4-tuple, separated by ``purpose``."""
    h = hashlib.blake2s(key=_key(secret), digest_size=4, person=purpose[:8])
    h.update(bytes(laddr) + bytes(raddr) + _PORTS.pack(lport, rport) + extra)
    return int.from_bytes(h.digest(), "big")


def initial_sequence_number(secret: bytes, laddr: bytes, lport: int, raddr: bytes, rport: int, now: float) -> int:
    """RFC 6528 section 3: M (4 µs ticks of ``now``) + F(4-tuple, secret), mod 2**32."""
    m = int(now * 250_000)
    return (m + keyed_hash32(secret, b"isn", laddr, lport, raddr, rport)) & 0xFFFFFFFF


def timestamp_offset(secret: bytes, laddr: bytes, lport: int, raddr: bytes, rport: int) -> int:
    """A per-connection offset added to the millisecond TSval clock (RFC 7323 7.1 privacy)."""
    return keyed_hash32(secret, b"tsoff", laddr, lport, raddr, rport)


def cookie_mss_index(mss: int) -> int:
    """The largest table entry not above ``mss``."""
    idx = 0
    for i, value in enumerate(COOKIE_MSS):
        if value <= mss:
            idx = i
    return idx


def make_cookie(secret: bytes, laddr: bytes, lport: int, raddr: bytes, rport: int, client_isn: int,
                mss_index: int, now: float) -> int:
    t = int(now // COOKIE_PERIOD) & 31
    mac = keyed_hash32(secret, b"cookie", laddr, lport, raddr, rport, struct.pack("!IB", client_isn, t)) & 0xFFFFFF
    return (t << 27) | ((mss_index & 7) << 24) | mac


def check_cookie(secret: bytes, laddr: bytes, lport: int, raddr: bytes, rport: int, client_isn: int,
                 cookie: int, now: float) -> int | None:
    """The MSS index a cookie encodes, or None when it is forged or expired."""
    t = cookie >> 27
    current = int(now // COOKIE_PERIOD) & 31
    if (current - t) & 31 > 1:
        return None
    mac = keyed_hash32(secret, b"cookie", laddr, lport, raddr, rport, struct.pack("!IB", client_isn, t)) & 0xFFFFFF
    if mac != cookie & 0xFFFFFF:
        return None
    return (cookie >> 24) & 7
