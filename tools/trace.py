"""``ustack trace FILE``: print a pcap capture one line per frame, with TCP analysis.

    ustack trace FILE [--follow] [-c N] [--port P]... [--host A]... [-S] [-N]
    python -m ustack.tools.trace FILE ...

The file is read by our own streaming record reader (pcap, microsecond or
nanosecond, either byte order; pcapng through scapy's reader, not with
--follow) and every frame is dissected by scapy. Each line starts with the
time in seconds since the first frame of the file (microsecond precision),
then, like ``tcpdump -nn`` (numbers, never names)::

    0.000000 ARP who-has 198.18.0.1 tell 198.18.0.2
    0.000000 ARP 198.18.0.1 is-at 02:00:00:00:00:01
    0.000010 ICMP 198.18.0.2 > 198.18.0.1 type 8 code 0 echo request id 1 seq 1 len 56
    0.000020 UDP 198.18.0.2:5000 > 198.18.0.1:7 len 11
    0.000030 IP 198.18.0.2:5000 > 198.18.0.1:7 frag id 9 offset 0 MF proto udp len 1480
    0.000040 TCP 198.18.0.2:40000 > 198.18.0.1:80 [S] seq 0 win 64240 len 0 options [mss 1460,nop,wscale 7]
    0.000050 TCP 198.18.0.1:80 > 198.18.0.2:40000 [P.] seq 1:101 ack 1 win 512 (x128=65536) len 100 [retransmission]

``len`` is always the payload length (UDP: the datagram's data, from the UDP
length field; TCP: IP total length minus both headers; IP fragment: the
fragment's data; ICMP: the octets after the 8-octet ICMP header). Fragment
``offset`` is in octets. TCP flags are tcpdump's letters (F S R P U E W, and
``.`` for ACK). Sequence and acknowledgment numbers are relative to each
direction's base (its ISN: the first SYN seen in that direction; when the
capture starts mid-connection, the first sequence number seen for it, or
the first acknowledgment number referring to it, whichever comes first);
``-S`` prints them raw. ``seq A:B`` spans the data (B = A + len); ``seq A``
for segments without data. The window is the raw field; once both SYNs
were seen carrying a window scale option (RFC 7323 2.2: only then does
scaling apply, and never to a SYN's own window) it is followed by
``(xF=W)``, the factor and the scaled window. SACK blocks are printed
relative to the acknowledged direction. A frame that was cut by the
snapshot length ends with ``[captured C of O bytes]``.

TCP markers, per connection (the 4-tuple; a SYN with a new ISN starts a new
connection) and direction, judged only from what this capture saw. "Next
expected" is the highest sequence number plus length (SYN and FIN count
one) seen so far in that direction.

``[retransmission]``
    The segment occupies sequence space (data, SYN or FIN) and at least one
    octet of it was already seen in an earlier segment of this direction
    (seen octets are kept as a set of ranges, so repacketized resends count).
``[out-of-order]``
    The segment occupies sequence space below the next expected sequence
    number, none of it seen before: it fills a hole. Note that at a
    receiver-side capture the resend of a segment lost before the capture
    point is exactly that, so it shows here, after a
    ``[previous segment not captured]`` on the segment beyond the hole.
``[previous segment not captured]``
    The segment starts above the next expected sequence number: the capture
    missed octets (lost before the capture point, or reordered).
``[keep-alive]``
    No SYN/FIN/RST, at most one octet of data, and a sequence number one
    below the next expected one (RFC 9293 3.8.4; Linux window probes look
    the same). Such a segment gets no other sequence or ack marker.
``[zero window]``
    The advertised window is 0 (SYN, FIN and RST segments excepted).
``[zero window probe]``
    One octet of new data sent while the other side's last advertised
    window was 0.
``[window update]``
    A pure ACK (no data, no SYN/FIN/RST) that repeats the previous
    acknowledgment number of its direction with a different, non-zero
    window.
``[dup ack #n]``
    RFC 5681 2: a pure ACK (no data, no SYN/FIN/RST) whose acknowledgment
    number equals the greatest one sent so far in its direction, with the
    same window as the previous segment of its direction, while the other
    side has data outstanding (it has sent beyond that acknowledgment
    number). A zero-window ACK (the answer to a window probe) is not
    counted. ``n`` counts these for the same acknowledgment number: the
    first duplicate is #1; a higher acknowledgment number restarts it.

Filters: ``--port P`` keeps TCP/UDP frames (and first IP fragments) with P
as source or destination port; ``--host A`` keeps IP frames from or to A
and ARP frames about A. Repeating an option means any of them; the two
kinds combine with "and". Filtered-out frames are not analysed, which is
harmless because a filter keeps or drops whole connections. ``-c N`` stops
after N printed frames.

``--follow`` reads a capture that is still being written (``ustack serve
--pcap FILE``): it waits for the file and its header to appear, prints
each complete record as it arrives (a partial record at the end is left
until the rest is written), sleeps a short interval whenever there is
nothing new, starts over if the file is truncated or replaced, and runs
until Ctrl-C (exit 0) or -c N.

Exit status: 0 when every record was read; 1 when the file ends inside a
record or a record header is corrupt (every frame before it is printed
first; for pcapng, scapy's reader takes a cut block for the end of the
file); 2 for a file that is missing, unreadable or not a capture, and for
usage errors; 130 for Ctrl-C without --follow. A frame that is malformed
is printed as far as it can be (``IP ... bad header (...)``, ``TCP ...
truncated header``, ``[bad udp length N]``, ``bad-opt``...), one that
cannot be dissected at all as ``? len N ...`` with its first octets in
hex; never a traceback. With a filter, frames that cannot be dissected
are left out.

Not done: IP reassembly (each fragment is its own line), TCP over IPv6
(IPv6 gets a one-line summary), checksum verification, SACK-aware or
RTT-based analysis, and payload printing.
"""

from __future__ import annotations

import argparse
import bisect
import ipaddress
import logging
import os
import signal
import struct
import sys
import threading
import time

PCAP_MAGIC_US = 0xA1B2C3D4
PCAP_MAGIC_NS = 0xA1B23C4D
PCAPNG_MAGIC = 0x0A0D0D0A
GLOBAL_HEADER_LEN = 24
RECORD_HEADER_LEN = 16
# Records longer than this are taken for a corrupt header (libpcap's largest snaplen).
MAX_RECORD = 262144
READ_CHUNK = 1 << 20
SEQ_MOD = 1 << 32
HALF = 1 << 31
LINKTYPE_ETHERNET = 1

EXIT_OK = 0
EXIT_DAMAGED = 1
EXIT_USAGE = 2

_SHORT_RECORD = {"<": struct.Struct("<IIII"), ">": struct.Struct(">IIII")}
_U16 = struct.Struct("!H")
_TS = struct.Struct("!II")

# tcpdump's flag letters, in its order (F S R P . U E W in the output).
_TCP_FLAGS = ((0x01, "F"), (0x02, "S"), (0x04, "R"), (0x08, "P"), (0x10, "."), (0x20, "U"), (0x40, "E"),
              (0x80, "W"))
FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10
_PROTO_NAMES = {1: "icmp", 6: "tcp", 17: "udp"}

# ICMP names (RFC 792, RFC 1812 for the newer unreachable codes).
_ICMP_TYPES = {0: "echo reply", 3: "unreachable", 4: "source quench", 5: "redirect", 8: "echo request",
               11: "time exceeded", 12: "parameter problem", 13: "timestamp request", 14: "timestamp reply"}
_ICMP_UNREACH = {0: "net unreachable", 1: "host unreachable", 2: "protocol unreachable", 3: "port unreachable",
                 4: "fragmentation needed", 5: "source route failed", 9: "net prohibited",
                 10: "host prohibited", 13: "administratively prohibited"}
_ICMP_TIMXCEED = {0: "ttl exceeded in transit", 1: "fragment reassembly time exceeded"}
_ICMP_ERRORS = (3, 4, 5, 11, 12)


class CaptureError(Exception):
    """The file cannot be read as a capture (exit 2) or is damaged (exit 1)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class Restart:
    """Yielded by the follow reader when the file was truncated or replaced."""


# ---------------------------------------------------------------- reading


def parse_global_header(head: bytes):
    """The pcap global header -> (byte order, ticks per second, snaplen, linktype)."""
    if len(head) < GLOBAL_HEADER_LEN:
        raise CaptureError(f"not a pcap file (only {len(head)} bytes)", EXIT_USAGE)
    for order in "<>":
        magic = struct.unpack(order + "I", head[:4])[0]
        if magic in (PCAP_MAGIC_US, PCAP_MAGIC_NS):
            _, _, _, _, snaplen, linktype = struct.unpack(order + "HHiIII", head[4:24])
            return order, (10**9 if magic == PCAP_MAGIC_NS else 10**6), snaplen, linktype & 0x0FFFFFFF
    if struct.unpack("<I", head[:4])[0] == PCAPNG_MAGIC:
        raise CaptureError("a pcapng file cannot be followed: only pcap (as `ustack serve --pcap` writes)",
                           EXIT_USAGE)
    raise CaptureError(f"not a pcap file (magic 0x{head[:4].hex()})", EXIT_USAGE)


def _record_limit(snaplen: int) -> int:
    return max(MAX_RECORD, min(snaplen, 1 << 24))


def _sleep(interval: float) -> None:
    time.sleep(interval)


def read_records(path: str, follow: bool = False, interval: float = 0.1, note=None, sleep=_sleep):
    """Yield ``(ts_ns, linktype, frame, orig_len)`` for each complete record of the pcap at ``path``.

    Without ``follow``, ends at the end of the file and raises CaptureError
    (exit 1) if it ends inside a record. With ``follow``, waits for more
    (``sleep(interval)`` between reads) and yields ``Restart`` if the file is
    truncated or replaced; it never returns on its own.
    """
    if not follow:
        try:
            with open(path, "rb") as f:
                head = f.read(GLOBAL_HEADER_LEN)
        except OSError as e:
            raise CaptureError(f"{path}: {e.strerror or e}", EXIT_USAGE) from None
        if len(head) >= 4 and struct.unpack("<I", head[:4])[0] == PCAPNG_MAGIC:
            yield from _read_pcapng(path)
            return
    while True:
        restart = yield from _read_pcap(path, follow, interval, note, sleep)
        if not restart:
            return
        yield Restart


def _open_when_there(path, follow, interval, note, sleep):
    waited = False
    while True:
        try:
            return open(path, "rb")
        except FileNotFoundError:
            if not follow:
                raise CaptureError(f"{path}: No such file or directory", EXIT_USAGE) from None
        except OSError as e:
            raise CaptureError(f"{path}: {e.strerror or e}", EXIT_USAGE) from None
        if not waited and note:
            note(f"waiting for {path} to appear")
        waited = True
        sleep(interval)


def _replaced(f, path, offset: int) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False  # gone for now: keep what we have, look again later
    mine = os.fstat(f.fileno())
    return (st.st_ino, st.st_dev) != (mine.st_ino, mine.st_dev) or st.st_size < offset


def _read_pcap(path, follow, interval, note, sleep):
    """One pass over a pcap file; returns True if following must start over."""
    f = _open_when_there(path, follow, interval, note, sleep)
    with f:
        head = b""
        while len(head) < GLOBAL_HEADER_LEN:
            more = f.read(GLOBAL_HEADER_LEN - len(head))
            if more:
                head += more
                continue
            if not follow:
                break
            if _replaced(f, path, len(head)):
                return True
            sleep(interval)
        order, ticks, snaplen, linktype = parse_global_header(head)
        record = _SHORT_RECORD[order]
        limit = _record_limit(snaplen)
        offset = GLOBAL_HEADER_LEN  # file offset of buf[0]
        buf = b""
        pos = 0
        nframes = 0
        while True:
            chunk = f.read(READ_CHUNK)
            if not chunk:
                if not follow:
                    break
                if _replaced(f, path, offset + len(buf)):
                    return True
                sleep(interval)
                continue
            if pos:
                offset += pos
                buf = buf[pos:] + chunk
                pos = 0
            else:
                buf += chunk
            end = len(buf)
            while end - pos >= RECORD_HEADER_LEN:
                sec, frac, caplen, orig_len = record.unpack_from(buf, pos)
                if caplen > limit:
                    raise CaptureError(f"{path}: corrupt record header at offset {offset + pos} "
                                       f"(frame {nframes + 1}: {caplen} captured bytes)", EXIT_DAMAGED)
                start = pos + RECORD_HEADER_LEN
                if end - start < caplen:
                    break
                nframes += 1
                ts_ns = sec * 10**9 + (frac if ticks == 10**9 else frac * 1000)
                yield ts_ns, linktype, buf[start:start + caplen], orig_len
                pos = start + caplen
        left = len(buf) - pos
        if left:
            raise CaptureError(f"{path}: truncated record at the end (frame {nframes + 1}: {left} bytes of it "
                               f"in the file)", EXIT_DAMAGED)
    return False


def _read_pcapng(path):
    from scapy.utils import RawPcapNgReader

    try:
        reader = RawPcapNgReader(path)
    except Exception as e:  # scapy raises several kinds for a bad section header
        raise CaptureError(f"{path}: not a readable pcapng file ({e})", EXIT_USAGE) from None
    try:
        while True:
            try:
                data, meta = next(reader)
            except StopIteration:
                return
            except Exception as e:
                raise CaptureError(f"{path}: damaged pcapng block ({e})", EXIT_DAMAGED) from None
            ts_ns = 0
            if meta.tshigh is not None and meta.tsresol:
                ts_ns = ((meta.tshigh << 32) + meta.tslow) * 10**9 // int(meta.tsresol)
            yield ts_ns, meta.linktype, data, meta.wirelen if meta.wirelen is not None else len(data)
    finally:
        reader.close()


# ---------------------------------------------------------------- TCP analysis


class _Direction:
    """What one direction of a connection has shown so far, in unwrapped relative sequence space."""

    __slots__ = ("base", "syn_seen", "wscale", "nxt", "starts", "ends", "last_ack", "last_win", "dups", "rev")

    def __init__(self):
        self.base = None      # raw 32-bit number that prints as 0
        self.syn_seen = False
        self.wscale = None    # shift from this direction's SYN; -1: SYN without the option
        self.nxt = None       # next expected (highest seq + len seen), unwrapped, relative
        self.starts = []      # octets seen: merged, sorted [start, end) ranges
        self.ends = []
        self.last_ack = None  # greatest acknowledgment number sent in this direction (unwrapped)
        self.last_win = None  # raw window of the previous segment in this direction
        self.dups = 0
        self.rev = None

    def unwrap(self, number: int) -> int:
        rel = (number - self.base) % SEQ_MOD
        ref = self.nxt if self.nxt is not None else 0
        d = (rel - ref) % SEQ_MOD
        return ref + (d - SEQ_MOD if d >= HALF else d)

    def seen(self, start: int, end: int) -> bool:
        """Was any octet of [start, end) seen before?"""
        i = bisect.bisect_right(self.starts, start) - 1
        if i >= 0 and self.ends[i] > start:
            return True
        return i + 1 < len(self.starts) and self.starts[i + 1] < end

    def add(self, start: int, end: int) -> None:
        starts, ends = self.starts, self.ends
        if starts and start >= starts[-1]:  # the common case: at or after the last range
            if start <= ends[-1]:
                if end > ends[-1]:
                    ends[-1] = end
                return
            starts.append(start)
            ends.append(end)
            return
        lo = bisect.bisect_left(ends, start)    # first range ending at or after start
        hi = bisect.bisect_right(starts, end)   # ranges from lo to hi-1 touch [start, end)
        if lo < hi:
            start = min(start, starts[lo])
            end = max(end, ends[hi - 1])
        starts[lo:hi] = [start]
        ends[lo:hi] = [end]


def _pair():
    a, b = _Direction(), _Direction()
    a.rev, b.rev = b, a
    return a, b


class TcpAnalysis:
    """Per-connection, per-direction TCP state; ``segment`` returns the bases, the scale and the markers."""

    def __init__(self):
        self.dirs: dict[tuple, _Direction] = {}

    def _direction(self, key, rkey) -> _Direction:
        d = self.dirs.get(key)
        if d is None:
            d, r = _pair()
            self.dirs[key] = d
            self.dirs[rkey] = r
        return d

    def _renew(self, key, rkey, both: bool) -> _Direction:
        """A SYN with a new ISN: a new connection on the same 4-tuple."""
        if both:
            d, r = _pair()
            self.dirs[key] = d
            self.dirs[rkey] = r
            return d
        old = self.dirs[key]
        d = _Direction()
        d.rev, old.rev.rev = old.rev, d
        self.dirs[key] = d
        return d

    def segment(self, src, sport, dst, dport, seq, ack, flags, win, plen, wscale):
        key, rkey = (src, sport, dst, dport), (dst, dport, src, sport)
        d = self._direction(key, rkey)
        syn, fin, rst, ackf = flags & SYN, flags & FIN, flags & RST, flags & ACK
        if syn and (d.base is not None or d.nxt is not None) and (not d.syn_seen or seq != d.base):
            d = self._renew(key, rkey, both=not ackf)
        if syn and not d.syn_seen:
            d.base = seq
            d.syn_seen = True
            d.wscale = wscale if wscale is not None else -1
            d.nxt = 0
        if d.base is None:
            d.base = seq
        rev = d.rev
        s = d.unwrap(seq)
        if d.nxt is None:
            d.nxt = s
        ack_ext = None
        if ackf:
            if rev.base is None:
                rev.base = ack
            ack_ext = rev.unwrap(ack)
        ctl = flags & (SYN | FIN | RST)
        occupy = plen + (1 if syn else 0) + (1 if fin else 0)
        end = s + occupy
        markers = []
        keepalive = not ctl and plen <= 1 and s == d.nxt - 1
        if keepalive:
            markers.append("keep-alive")
        elif not rst:
            if occupy and d.seen(s, end):
                markers.append("retransmission")
            elif occupy and s < d.nxt:
                markers.append("out-of-order")
            elif s > d.nxt and not syn:
                markers.append("previous segment not captured")
            if plen == 1 and s == d.nxt and rev.last_win == 0 and not ctl:
                markers.append("zero window probe")
        if win == 0 and not ctl:
            markers.append("zero window")
        if ackf and not plen and not ctl and not keepalive and ack_ext == d.last_ack:
            if win != d.last_win:
                if win != 0 and d.last_win is not None:
                    markers.append("window update")
            elif win and rev.nxt is not None and rev.nxt > ack_ext:  # RFC 5681 2: data outstanding
                d.dups += 1
                markers.append(f"dup ack #{d.dups}")
        if not rst:
            if occupy:
                d.add(s, end)
            if end > d.nxt:
                d.nxt = end
            d.last_win = win
        if ackf and (d.last_ack is None or ack_ext > d.last_ack):
            d.last_ack = ack_ext
            d.dups = 0
        scale = None
        if not syn and d.wscale is not None and rev.wscale is not None and d.wscale > 0 and rev.wscale >= 0:
            scale = min(d.wscale, 14)
        return d.base, (rev.base if ackf else None), rev.base, scale, markers


# ---------------------------------------------------------------- dissection


def _tcp_options(opts: bytes, sack_base) -> tuple[list, int | None]:
    """tcpdump-style option words and the window scale shift (None if absent)."""
    out = []
    wscale = None
    i, n = 0, len(opts)
    while i < n:
        kind = opts[i]
        if kind == 0:
            out.append("eol")
            break
        if kind == 1:
            out.append("nop")
            i += 1
            continue
        if i + 1 >= n or opts[i + 1] < 2 or i + opts[i + 1] > n:
            out.append("bad-opt")
            break
        length = opts[i + 1]
        body = opts[i + 2:i + length]
        if kind == 2 and length == 4:
            out.append(f"mss {_U16.unpack(body)[0]}")
        elif kind == 3 and length == 3:
            wscale = body[0]
            out.append(f"wscale {wscale}")
        elif kind == 4 and length == 2:
            out.append("sackOK")
        elif kind == 5 and length > 2 and (length - 2) % 8 == 0:
            blocks = []
            for j in range(0, length - 2, 8):
                left, right = _TS.unpack_from(body, j)
                if sack_base is not None:
                    left, right = (left - sack_base) % SEQ_MOD, (right - sack_base) % SEQ_MOD
                blocks.append(f"{{{left}:{right}}}")
            out.append(f"sack {len(blocks)} " + "".join(blocks))
        elif kind == 8 and length == 10:
            val, ecr = _TS.unpack(body)
            out.append(f"TS val {val} ecr {ecr}")
        elif kind in (2, 3, 4, 5, 8):
            out.append(f"bad-opt {kind} len {length}")
        else:
            out.append(f"opt-{kind} 0x{body.hex()}" if body else f"opt-{kind}")
        i += length
    return out, wscale


def _flags_str(flags: int) -> str:
    return "".join(letter for bit, letter in _TCP_FLAGS if flags & bit) or "none"


class Tracer:
    """Turns records into lines: dissection, filters and TCP analysis."""

    def __init__(self, hosts=(), ports=(), absolute=False, number=False):
        _quiet_scapy()
        import scapy.layers.l2 as l2
        from scapy.config import conf
        from scapy.layers.inet import ICMP, IP, TCP, UDP

        self._conf = conf
        self._IP, self._TCP, self._UDP, self._ICMP, self._ARP = IP, TCP, UDP, ICMP, l2.ARP
        self._Ether = l2.Ether
        # Link layers to step over on the way to IP or ARP.
        self._l2 = tuple(getattr(l2, name) for name in ("Ether", "Dot1Q", "CookedLinux", "CookedLinuxV2")
                         if hasattr(l2, name))
        self.hosts = frozenset(hosts)
        self.ports = frozenset(ports)
        self.absolute = absolute
        self.number = number
        self.reset()

    def reset(self) -> None:
        self.tcp = TcpAnalysis()
        self.first_ns = None
        self.frames = 0
        self._snapped = False

    # -- filters
    def _want_hosts(self, *addrs) -> bool:
        return not self.hosts or any(a in self.hosts for a in addrs)

    def _want_ports(self, *ports) -> bool:
        return not self.ports or any(p in self.ports for p in ports)

    def _want_nonport(self, *addrs) -> bool:
        return not self.ports and self._want_hosts(*addrs)

    def frame(self, ts_ns: int, linktype: int, data: bytes, orig_len: int):
        """The line for one record, or None if the filters drop it."""
        self.frames += 1
        self._snapped = len(data) < orig_len
        if self.first_ns is None:
            self.first_ns = ts_ns
        try:
            body = self._describe(linktype, data)
        except Exception as e:  # whatever scapy or a mangled frame does: one line, never a traceback
            why = " ".join(str(e).split())
            body = f"? len {len(data)} undecodable ({type(e).__name__}: {why}) {bytes(data[:32]).hex()}"
            if self.hosts or self.ports:
                return None
        if body is None:
            return None
        if len(data) < orig_len:
            body += f" [captured {len(data)} of {orig_len} bytes]"
        rel = ts_ns - self.first_ns
        sign = "-" if rel < 0 else ""
        rel = abs(rel)
        stamp = f"{sign}{rel // 1_000_000_000}.{rel % 1_000_000_000 // 1000:06d}"
        if self.number:
            return f"{self.frames} {stamp} {body}"
        return f"{stamp} {body}"

    def _excluded(self, data) -> bool:
        """A cheap look at a plain Ethernet/IPv4 frame: True if the filters surely drop it (saves scapy)."""
        n = len(data)
        off = 12
        while off + 4 <= n and data[off] == 0x81 and data[off + 1] == 0x00:  # 802.1Q tags
            off += 4
        if off + 2 + 20 > n or data[off] != 0x08 or data[off + 1] != 0x00:
            return False
        ip = off + 2
        ihl = (data[ip] & 15) * 4
        if data[ip] >> 4 != 4 or ihl < 20 or ip + ihl > n:
            return False
        if self.hosts:
            src = ".".join(map(str, data[ip + 12:ip + 16]))
            dst = ".".join(map(str, data[ip + 16:ip + 20]))
            if src not in self.hosts and dst not in self.hosts:
                return True
        if self.ports:
            if data[ip + 9] not in (6, 17):
                return True
            if _U16.unpack_from(data, ip + 6)[0] & 0x3FFF or ip + ihl + 4 > n:
                return False  # a fragment, or ports not captured: let the full path decide
            sport, dport = struct.unpack_from("!HH", data, ip + ihl)
            if sport not in self.ports and dport not in self.ports:
                return True
        return False

    def _describe(self, linktype: int, data: bytes):
        if linktype == LINKTYPE_ETHERNET:
            if (self.hosts or self.ports) and self._excluded(data):
                return None
            if len(data) < 14:
                return None if self.hosts or self.ports else f"? len {len(data)} short frame {bytes(data).hex()}"
            cls = self._Ether
        else:
            cls = self._conf.l2types.num2layer.get(linktype)
            if cls is None:
                if self.hosts or self.ports:
                    return None
                return f"? linktype {linktype} len {len(data)}"
        pkt = cls(bytes(data))
        layer = pkt
        while isinstance(layer, self._l2):
            nxt = layer.payload
            if not nxt:
                break
            layer = nxt
        if isinstance(layer, self._IP):
            return self._ipv4(layer)
        if isinstance(layer, self._ARP):
            return self._arp(layer)
        if self.hosts or self.ports:
            return None
        return self._other(pkt, layer, data)

    def _other(self, pkt, layer, data) -> str:
        under = layer.underlayer if layer is not pkt else None
        etype = getattr(under, "type", None) if under is not None else None
        raw = bytes(layer.original or b"") if hasattr(layer, "original") else b""
        if etype == 0x86DD and len(raw) >= 40:
            src = ipaddress.IPv6Address(raw[8:24])
            dst = ipaddress.IPv6Address(raw[24:40])
            return f"IP6 {src} > {dst} nh {raw[6]} len {_U16.unpack_from(raw, 4)[0]}"
        if isinstance(pkt, self._Ether):
            kind = f"type 0x{etype:04x}" if isinstance(etype, int) else "?"
            return f"ETH {pkt.src} > {pkt.dst} {kind} len {len(data)}"
        return f"? {type(layer).__name__} len {len(data)}"

    def _arp(self, arp) -> str | None:
        psrc, pdst = arp.psrc, arp.pdst
        if not self._want_nonport(psrc, pdst):
            return None
        op = arp.op
        if op == 1:
            text = f"ARP who-has {pdst} tell {psrc}"
            return text + " (gratuitous)" if psrc == pdst else text
        if op == 2:
            return f"ARP {psrc} is-at {arp.hwsrc}"
        return f"ARP op {op} {psrc} > {pdst}"

    def _ipv4(self, ip) -> str | None:
        raw = ip.original or b""
        src, dst = ip.src, ip.dst
        if len(raw) < 20:
            return None if self.hosts or self.ports else f"IP? len {len(raw)} truncated header"
        ihl = (raw[0] & 15) * 4
        total = _U16.unpack_from(raw, 2)[0]
        if raw[0] >> 4 != 4 or ihl < 20 or total < ihl:
            if not self._want_nonport(src, dst):
                return None
            return f"IP {src} > {dst} bad header (version {raw[0] >> 4}, ihl {ihl}, total length {total})"
        plen = total - ihl
        if total > len(raw) and not self._snapped:
            text = self._ipv4_body(ip, raw, src, dst, len(raw) - ihl)
            return text and f"{text} [ip length {total} > {len(raw)} in frame]"
        return self._ipv4_body(ip, raw, src, dst, plen)

    def _ipv4_body(self, ip, raw, src, dst, plen) -> str | None:
        proto = raw[9]
        mf = raw[6] & 0x20
        offset = (_U16.unpack_from(raw, 6)[0] & 0x1FFF) * 8
        if mf or offset:
            return self._fragment(ip, src, dst, proto, plen, offset, mf, _U16.unpack_from(raw, 4)[0])
        if not self._want_hosts(src, dst):
            return None
        payload = ip.payload
        if proto == 6:
            if isinstance(payload, self._TCP):
                return self._tcp(payload, src, dst, plen)
            if not self.ports:
                return f"TCP {src} > {dst} truncated header ({len(payload.original or b'')} bytes) len {plen}"
            return None
        if proto == 17:
            if isinstance(payload, self._UDP):
                return self._udp(payload, src, dst, plen)
            if not self.ports:
                return f"UDP {src} > {dst} truncated header len {plen}"
            return None
        if self.ports:
            return None
        if proto == 1:
            if isinstance(payload, self._ICMP):
                return self._icmp(payload, src, dst, plen)
            return f"ICMP {src} > {dst} truncated header ({len(payload.original or b'') if payload else 0} bytes)"
        return f"IP {src} > {dst} proto {_PROTO_NAMES.get(proto, proto)} len {plen}"

    def _fragment(self, ip, src, dst, proto, plen, offset, mf, ident) -> str | None:
        if not self._want_hosts(src, dst):
            return None
        payload = ip.payload
        if offset == 0 and isinstance(payload, (self._TCP, self._UDP)):
            sport, dport = payload.sport, payload.dport
            if not self._want_ports(sport, dport):
                return None
            where = f"{src}:{sport} > {dst}:{dport}"
        elif self.ports:
            return None
        else:
            where = f"{src} > {dst}"
        more = " MF" if mf else ""
        return f"IP {where} frag id {ident} offset {offset}{more} proto {_PROTO_NAMES.get(proto, proto)} len {plen}"

    def _udp(self, udp, src, dst, plen) -> str | None:
        sport, dport = udp.sport, udp.dport
        if not self._want_ports(sport, dport):
            return None
        ulen = udp.len
        text = f"UDP {src}:{sport} > {dst}:{dport} len {max(ulen - 8, 0)}"
        if ulen < 8 or ulen > plen:
            text += f" [bad udp length {ulen}]"
        return text

    def _icmp(self, icmp, src, dst, plen) -> str:
        raw = icmp.original or b""
        if len(raw) < 8:
            return f"ICMP {src} > {dst} truncated header ({len(raw)} bytes)"
        itype, code = raw[0], raw[1]
        text = f"ICMP {src} > {dst} type {itype} code {code}"
        name = _ICMP_TYPES.get(itype)
        if itype in (0, 8):
            return f"{text} {name} id {icmp.id} seq {icmp.seq} len {max(plen - 8, 0)}"
        if itype == 3:
            name = _ICMP_UNREACH.get(code, name)
            if code == 4:
                name += f" (mtu {icmp.nexthopmtu})"
        elif itype == 11:
            name = _ICMP_TIMXCEED.get(code, name)
        if name:
            text += " " + name
        if itype in _ICMP_ERRORS:
            quoted = icmp.payload
            qraw = bytes(quoted.original or b"") if quoted else b""
            if len(qraw) >= 20 and qraw[0] >> 4 == 4:
                qihl = (qraw[0] & 15) * 4
                qsrc = ".".join(str(b) for b in qraw[12:16])
                qdst = ".".join(str(b) for b in qraw[16:20])
                qproto = qraw[9]
                ports = qraw[qihl:qihl + 4] if qihl >= 20 else b""
                if qproto in (6, 17) and len(ports) == 4:
                    sp, dp = struct.unpack("!HH", ports)
                    return f"{text} for {_PROTO_NAMES[qproto].upper()} {qsrc}:{sp} > {qdst}:{dp}"
                return f"{text} for {_PROTO_NAMES.get(qproto, 'proto %d' % qproto).upper()} {qsrc} > {qdst}"
        return f"{text} len {max(plen - 8, 0)}"

    def _tcp(self, tcp, src, dst, plen) -> str | None:
        sport, dport = tcp.sport, tcp.dport
        if not self._want_ports(sport, dport):
            return None
        raw = tcp.original or b""
        hlen = (raw[12] >> 4) * 4 if len(raw) >= 13 else 0
        if hlen < 20 or hlen > plen:
            return f"TCP {src}:{sport} > {dst}:{dport} bad data offset {hlen} (segment {plen} bytes)"
        seq, ack, flags, win = tcp.seq, tcp.ack, int(tcp.flags), tcp.window
        dlen = plen - hlen
        opts = raw[20:hlen]
        words, wscale = _tcp_options(opts, None)
        seq_base, ack_base, rev_base, scale, markers = self.tcp.segment(src, sport, dst, dport, seq, ack, flags,
                                                                         win, dlen, wscale)
        if not self.absolute:
            seq = (seq - seq_base) % SEQ_MOD
            if ack_base is not None:
                ack = (ack - ack_base) % SEQ_MOD
            if opts and rev_base is not None and 5 in opts:
                words, _ = _tcp_options(opts, rev_base)
        parts = [f"TCP {src}:{sport} > {dst}:{dport} [{_flags_str(flags)}]"]
        parts.append(f"seq {seq}:{(seq + dlen) % SEQ_MOD}" if dlen else f"seq {seq}")
        if flags & ACK:
            parts.append(f"ack {ack}")
        if scale:
            parts.append(f"win {win} (x{1 << scale}={win << scale})")
        else:
            parts.append(f"win {win}")
        parts.append(f"len {dlen}")
        if words:
            parts.append(f"options [{','.join(words)}]")
        for m in markers:
            parts.append(f"[{m}]")
        if len(raw) < hlen:
            parts.append(f"[header cut at {len(raw)} bytes]")
        return " ".join(parts)


def _quiet_scapy() -> None:
    logging.getLogger("scapy").setLevel(logging.ERROR)


# ---------------------------------------------------------------- command line


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="pcap (or pcapng) capture file")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep reading as the file grows (a running `ustack serve --pcap FILE`), until Ctrl-C")
    p.add_argument("-c", "--count", type=int, metavar="N", help="stop after N printed frames")
    p.add_argument("--port", type=int, action="append", default=[], metavar="P",
                   help="only TCP/UDP frames from or to port P (repeatable: any of them)")
    p.add_argument("--host", action="append", default=[], metavar="A",
                   help="only frames from or to IPv4 address A (repeatable: any of them)")
    p.add_argument("-S", "--absolute", action="store_true", help="raw TCP sequence and ack numbers")
    p.add_argument("-N", "--number", action="store_true", help="start each line with the frame number")
    p.add_argument("--interval", type=float, default=0.1, metavar="S",
                   help="--follow: seconds to sleep when there is nothing new (default: %(default)s)")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``trace`` subcommand to the ``ustack`` command line."""
    p = subparsers.add_parser("trace", help="print a pcap capture one line per frame, with TCP analysis",
                              description="Print a pcap capture one line per frame, with TCP analysis.")
    add_arguments(p)
    p.set_defaults(func=cmd_trace)
    return p


def _check_args(args) -> str | None:
    for host in args.host:
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return f"--host {host}: not an IPv4 address"
    for port in args.port:
        if not 0 <= port <= 65535:
            return f"--port {port}: not a port number"
    if args.count is not None and args.count < 1:
        return f"-c {args.count}: must be 1 or more"
    if args.interval <= 0:
        return f"--interval {args.interval}: must be positive"
    return None


def cmd_trace(args, out=None, err=None) -> int:
    """Run ``ustack trace``; returns the exit status."""
    try:
        return _trace(args, out or sys.stdout, err or sys.stderr)
    except BrokenPipeError:
        # The reader went away (| head): stop quietly, as tcpdump does.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


class _Interrupted(Exception):
    """Ctrl-C while following: raised at a clean point (between records, or around a sleep)."""


def _trace(args, out, err) -> int:
    problem = _check_args(args)
    if problem:
        print(f"ustack trace: {problem}", file=err)
        return EXIT_USAGE
    hosts = [str(ipaddress.IPv4Address(h)) for h in args.host]
    tracer = Tracer(hosts=hosts, ports=args.port, absolute=args.absolute, number=args.number)

    def note(text):
        print(f"ustack trace: {text}", file=err, flush=True)

    pending: list = []
    stop: list = []  # SIGINT seen (follow mode)

    def sleep(interval: float) -> None:
        _flush(out, pending)  # show what we have before waiting for more
        if not stop:
            time.sleep(interval)
        if stop:
            raise _Interrupted

    follow = args.follow
    old_handler = None
    if follow and threading.current_thread() is threading.main_thread():
        old_handler = signal.signal(signal.SIGINT, lambda signum, frame: stop.append(signum))
    printed = 0
    limit = args.count
    code = EXIT_OK
    try:
        records = read_records(args.file, follow=follow, interval=args.interval, note=note, sleep=sleep)
        try:
            for rec in records:
                if rec is Restart:
                    _flush(out, pending)
                    note(f"{args.file} was truncated or replaced: starting over")
                    tracer.reset()
                    continue
                line = tracer.frame(*rec)
                if line is not None:
                    pending.append(line)
                    printed += 1
                    if limit is not None and printed >= limit:
                        break
                    if len(pending) >= 512:
                        _flush(out, pending)
                if stop:
                    break
        finally:
            records.close()
    except CaptureError as e:
        _flush(out, pending)
        note(str(e))
        code = e.exit_code
    except _Interrupted:
        pass
    except KeyboardInterrupt:  # batch mode: as any command interrupted
        code = 130
    finally:
        if old_handler is not None:
            signal.signal(signal.SIGINT, old_handler)
    _flush(out, pending)
    return code


def _flush(out, pending: list) -> None:
    if pending:
        out.write("\n".join(pending))
        out.write("\n")
        pending.clear()
    out.flush()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ustack trace",
                                     description="Print a pcap capture one line per frame, with TCP analysis.")
    add_arguments(parser)
    return cmd_trace(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
