"""pcap files: the format written down once, a writer and a reader.

The classic libpcap format: a 24-byte global header (magic, version 2.4,
thiszone, sigfigs, snaplen, linktype), then one record per frame: a 16-byte
header (seconds, fraction, captured length, original length) and the
captured bytes. The magic says the fraction's unit (0xa1b2c3d4:
microseconds, 0xa1b23c4d: nanoseconds) and, read in the wrong byte order,
that the file was written on a machine of the other order.

- ``PcapWriter`` writes nanosecond records in little-endian order, buffered,
  flushed when ``flush_interval`` seconds of the caller's time have passed
  since the last flush (so a reader following the file sees it live), on
  ``flush()`` and on ``close()``. Frames longer than ``snaplen`` are cut in
  the file (the record keeps the original length). The file is created
  0600 (a capture holds whatever crossed the wire) with ``O_EXCL |
  O_NOFOLLOW``: an existing file is refused (``CaptureExists``) unless
  ``overwrite`` (then the name is unlinked and a new file created), and a
  symlink at ``path`` is refused (``OSError`` ELOOP, saying so) rather than
  followed, so a capture cannot be aimed at another file, nor truncate a
  hard-linked one. ``max_bytes``
  caps the file: a record that would pass it is not written, and is counted
  in ``records_dropped`` (``cap_reached`` says so) instead. The header is
  flushed at once, so a path that opens but cannot be written fails in the
  constructor; a write that fails later (disk full) stops the capture,
  keeps the error in ``error`` and counts the records lost in
  ``records_dropped``: a capture never raises into the data path.
- ``PcapReader`` turns bytes fed in pieces of any size into records: the
  pieces of a file read in chunks, or of a file still being written.
  ``read_pcap(path)`` reads a whole file; ``PcapFollower(path).poll()``
  returns what a growing file gained since the last call.

Nothing here sleeps or reads a clock: the writer is given each frame's time,
and a caller following a file decides how long to wait between polls.
Errors: ``PcapError`` for what is not a pcap file, ``PcapDamaged`` (a
subclass) for a file that ends inside a record or holds a record header that
cannot be right; ``Restarted`` when a followed file was truncated or replaced.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from typing import Iterator, NamedTuple, Optional

MAGIC_US = 0xA1B2C3D4
MAGIC_NS = 0xA1B23C4D
PCAPNG_MAGIC = 0x0A0D0D0A  # the block type of a pcapng section header: recognised, not read here
VERSION_MAJOR, VERSION_MINOR = 2, 4
LINKTYPE_ETHERNET = 1
DEFAULT_SNAPLEN = 65535
GLOBAL_HEADER = {"<": struct.Struct("<IHHiIII"), ">": struct.Struct(">IHHiIII")}
RECORD_HEADER = {"<": struct.Struct("<IIII"), ">": struct.Struct(">IIII")}
GLOBAL_HEADER_LEN = 24
RECORD_HEADER_LEN = 16
# A record longer than this is taken for a corrupt header (libpcap's largest snaplen), unless the
# file's own snaplen says more (up to 16 MiB).
MAX_RECORD = 262144
READ_CHUNK = 1 << 20


class PcapError(ValueError):
    """Not a pcap file: the message says why in plain words."""


class PcapDamaged(PcapError):
    """A pcap file that ends inside a record, or whose next record header cannot be right."""


class Restarted(Exception):
    """The followed file was truncated or replaced: the follower starts over from its beginning."""


class Record(NamedTuple):
    """One captured frame: time in nanoseconds, link type, the captured bytes, the frame's length on the wire."""

    ts_ns: int
    linktype: int
    data: bytes
    orig_len: int


class PcapHeader(NamedTuple):
    """What the global header says: byte order ("<" or ">"), fractions per second, snaplen, link type."""

    order: str
    ticks: int
    snaplen: int
    linktype: int


def is_pcapng(head: bytes) -> bool:
    """The first bytes of a file are a pcapng section header."""
    return len(head) >= 4 and struct.unpack_from("<I", head)[0] == PCAPNG_MAGIC


def parse_header(head: bytes) -> PcapHeader:
    """The pcap global header at the start of ``head``; PcapError when it is not one."""
    if len(head) < GLOBAL_HEADER_LEN:
        raise PcapError(f"not a pcap file (only {len(head)} bytes)")
    for order, layout in GLOBAL_HEADER.items():
        magic, _, _, _, _, snaplen, linktype = layout.unpack_from(head)
        if magic in (MAGIC_US, MAGIC_NS):
            return PcapHeader(order, 10**9 if magic == MAGIC_NS else 10**6, snaplen, linktype & 0x0FFFFFFF)
    if is_pcapng(head):
        raise PcapError("a pcapng file, not pcap")
    raise PcapError(f"not a pcap file (magic 0x{bytes(head[:4]).hex()})")


def global_header(snaplen: int = DEFAULT_SNAPLEN, linktype: int = LINKTYPE_ETHERNET) -> bytes:
    """The 24 bytes that start a nanosecond, little-endian pcap file."""
    return GLOBAL_HEADER["<"].pack(MAGIC_NS, VERSION_MAJOR, VERSION_MINOR, 0, 0, snaplen, linktype)


def record_header(when: float, captured: int, length: int) -> bytes:
    """The 16-byte header of one nanosecond record stamped ``when`` (seconds)."""
    sec = int(when)
    nsec = int(round((when - sec) * 1e9))
    if nsec >= 1_000_000_000:
        sec, nsec = sec + 1, nsec - 1_000_000_000
    return RECORD_HEADER["<"].pack(sec & 0xFFFFFFFF, nsec, captured, length)


class CaptureExists(FileExistsError):
    """The capture file is already there and overwriting was not asked for."""


def open_private(path: str, overwrite: bool = False):
    """``path`` created for writing, 0600, exclusively; a symlink is refused, never followed.

    An existing file is refused (``CaptureExists``) unless ``overwrite``: then
    the name is unlinked and a new file created in its place, still with
    ``O_EXCL`` (so whatever the old name pointed at, a hard link to someone
    else's file or a symlink, is never opened, truncated or chmod'ed: as root
    that would be any file on the machine).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    if overwrite:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None:
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                raise CaptureExists(errno.EEXIST, "not a regular file: refusing to replace it with a capture", path)
            os.unlink(path)  # the name only: a hard link's other names keep their bytes
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        if os.path.islink(path):  # O_EXCL|O_CREAT says EEXIST for a symlink, dangling or not
            raise OSError(errno.ELOOP, "a symbolic link: refusing to write a capture through it", path) from None
        raise CaptureExists(errno.EEXIST, "exists: refusing to overwrite it (--pcap-overwrite replaces it)",
                            path) from None
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)  # our own new file: a umask cannot widen 0600, but be explicit
        return os.fdopen(fd, "wb", buffering=1 << 16)
    except BaseException:
        os.close(fd)
        raise


class PcapWriter:
    """Frames to a nanosecond pcap file at ``path`` (see the module docstring)."""

    def __init__(self, path: str, snaplen: int = DEFAULT_SNAPLEN, flush_interval: float = 0.2,
                 linktype: int = LINKTYPE_ETHERNET, max_bytes: Optional[int] = None, overwrite: bool = False):
        if snaplen <= 0:
            raise ValueError(f"snaplen must be positive, not {snaplen}")
        if max_bytes is not None and max_bytes < GLOBAL_HEADER_LEN:
            raise ValueError(f"max_bytes must be at least {GLOBAL_HEADER_LEN} (the file header)")
        self.path = path
        self.snaplen = snaplen
        self.flush_interval = flush_interval
        self.max_bytes = max_bytes
        self.frames = 0
        self.records_dropped = 0  # records not written because of max_bytes
        self._flushed_at = None
        self.error: Optional[OSError] = None  # the write error that stopped the capture, if one did
        self.file = open_private(path, overwrite)
        try:
            self.file.write(global_header(snaplen, linktype))
            self.file.flush()  # a path that opens but cannot be written fails here, not mid-run
        except OSError as e:
            self._close_quietly()
            raise OSError(e.errno, f"cannot write a capture there ({e.strerror})", path) from None
        self.size = GLOBAL_HEADER_LEN

    @property
    def cap_reached(self) -> bool:
        return self.records_dropped > 0

    def write(self, when: float, frame) -> None:
        """One frame seen at ``when`` (seconds, the caller's clock)."""
        n = len(frame)
        cap = min(n, self.snaplen)
        size = self.size + RECORD_HEADER_LEN + cap
        if self.error is not None or (self.max_bytes is not None and size > self.max_bytes):
            self.records_dropped += 1
            return
        self.size = size
        try:
            self.file.write(record_header(when, cap, n))
            self.file.write(frame[:cap])
            self.frames += 1
            if self._flushed_at is None:
                self._flushed_at = when
            elif when - self._flushed_at >= self.flush_interval:
                self.file.flush()
                self._flushed_at = when
        except OSError as e:
            self._failed(e)

    def _failed(self, e: OSError) -> None:
        self.error = e
        self.records_dropped += 1
        self._close_quietly()

    def _close_quietly(self) -> None:
        try:
            self.file.close()
        except OSError:
            pass

    def flush(self) -> None:
        if not self.file.closed:
            try:
                self.file.flush()
            except OSError as e:
                self._failed(e)

    def close(self) -> None:
        if not self.file.closed:
            try:
                self.file.close()
            except OSError as e:
                self.error = e

    def __enter__(self) -> "PcapWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class PcapReader:
    """Records out of pcap bytes fed in pieces of any size.

    ``feed(data)`` returns the records completed by ``data`` and keeps a
    partial one for the next call; ``finish()`` says whether the stream
    ended cleanly. Damage (a record header that cannot be right) is raised
    as PcapDamaged, after the records before it: when ``feed`` found some,
    it returns them and the next ``feed``, ``check`` or ``finish`` raises.
    ``offset`` is the stream offset of the first byte not yet consumed,
    ``pending`` the bytes held back (a partial header or record), ``frames``
    the records returned so far.
    """

    def __init__(self):
        self.header: PcapHeader | None = None
        self.frames = 0
        self.offset = 0
        self._buf = b""
        self._record = RECORD_HEADER["<"]
        self._limit = MAX_RECORD
        self._scale = 1
        self._damage: PcapDamaged | None = None

    @property
    def pending(self) -> int:
        return len(self._buf)

    def check(self) -> None:
        """Raise the damage found by the last ``feed``, if any."""
        if self._damage is not None:
            raise self._damage

    def feed(self, data) -> list[Record]:
        self.check()
        buf = self._buf + bytes(data) if self._buf else bytes(data)
        pos = 0
        if self.header is None:
            if len(buf) < GLOBAL_HEADER_LEN:
                self._buf = buf
                return []
            self.header = parse_header(buf)
            self._record = RECORD_HEADER[self.header.order]
            self._limit = max(MAX_RECORD, min(self.header.snaplen, 1 << 24))
            self._scale = 10**9 // self.header.ticks
            pos = GLOBAL_HEADER_LEN
        record, limit, scale, linktype = self._record, self._limit, self._scale, self.header.linktype
        out = []
        end = len(buf)
        while end - pos >= RECORD_HEADER_LEN:
            sec, frac, caplen, orig_len = record.unpack_from(buf, pos)
            if caplen > limit:
                self._consumed(buf, pos)
                self._damage = PcapDamaged(f"corrupt record header at offset {self.offset} "
                                           f"(frame {self.frames + 1}: {caplen} captured bytes)")
                if out:
                    return out
                raise self._damage
            start = pos + RECORD_HEADER_LEN
            if end - start < caplen:
                break
            self.frames += 1
            out.append(Record(sec * 10**9 + frac * scale, linktype, buf[start:start + caplen], orig_len))
            pos = start + caplen
        self._consumed(buf, pos)
        return out

    def _consumed(self, buf: bytes, pos: int) -> None:
        self.offset += pos
        self._buf = buf[pos:]

    def finish(self) -> None:
        """The stream ended here: PcapError unless that is the end of a record."""
        self.check()
        if self.header is None:
            raise PcapError(f"not a pcap file (only {len(self._buf)} bytes)")
        if self._buf:
            raise PcapDamaged(f"truncated record at the end (frame {self.frames + 1}: {len(self._buf)} bytes of it "
                              f"in the file)")


def read_pcap(path: str, chunk: int = READ_CHUNK) -> Iterator[Record]:
    """Every record of the pcap file at ``path``, read in chunks; PcapError (path first) when it is not
    one or is damaged (after the records before the damage), OSError when it cannot be opened."""
    with open(path, "rb") as f:
        reader = PcapReader()
        try:
            while True:
                data = f.read(chunk)
                if not data:
                    break
                yield from reader.feed(data)
            reader.finish()
        except PcapError as e:
            raise type(e)(f"{path}: {e}") from None


class PcapFollower:
    """A pcap file that is still being written: ``poll()`` returns the records it gained since the last call.

    Until the file exists ``poll()`` returns nothing (``opened`` stays
    False). A partial record at the end is kept until the rest arrives. When
    the file is truncated or replaced (another inode, or shorter than what was
    read), ``poll()`` raises Restarted once and reads the file from its start
    on the next call.
    """

    def __init__(self, path: str, chunk: int = READ_CHUNK):
        self.path = path
        self.chunk = chunk
        self._file = None
        self._reader = PcapReader()

    @property
    def opened(self) -> bool:
        return self._file is not None

    def poll(self) -> list[Record]:
        if self._file is None:
            try:
                self._file = open(self.path, "rb")
            except FileNotFoundError:
                return []
        try:
            self._reader.check()
        except PcapError as e:
            raise type(e)(f"{self.path}: {e}") from None
        while True:
            data = self._file.read(self.chunk)
            if not data:
                break
            try:
                records = self._reader.feed(data)
            except PcapError as e:
                raise type(e)(f"{self.path}: {e}") from None
            if records:
                return records
        if self._replaced():
            self.close()
            self._reader = PcapReader()
            raise Restarted(f"{self.path} was truncated or replaced")
        return []

    def _replaced(self) -> bool:
        try:
            st = os.stat(self.path)
        except OSError:
            return False  # gone for now: keep what we have, look again later
        mine = os.fstat(self._file.fileno())
        read = self._reader.offset + self._reader.pending
        return (st.st_ino, st.st_dev) != (mine.st_ino, mine.st_dev) or st.st_size < read

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
