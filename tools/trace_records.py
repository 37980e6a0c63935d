"""Where ``ustack trace`` gets its records: a pcap file (``ustack.pcap``), a growing one, or pcapng.

``read_records(path)`` yields ``ustack.pcap.Record`` tuples ``(ts_ns,
linktype, data, orig_len)``: a pcap file through ``ustack.pcap.read_pcap``, a
pcapng file through scapy's reader. With ``follow=True`` the file is read
through ``ustack.pcap.PcapFollower`` as it grows (pcap only): the generator
calls ``sleep(interval)`` whenever there is nothing new, says once through
``note`` that it is waiting for a file that is not there yet, yields
``Restart`` when the file was truncated or replaced, and never ends on its
own.

Problems are raised as ``CaptureError``: ``damaged`` is True for a file that
ends inside a record or has a corrupt record header (after every record
before the damage), False for one that is missing, unreadable or not a
capture. For pcapng, scapy's reader takes a cut block for the end of the file.
"""

from __future__ import annotations

import time

from ustack.pcap import PcapDamaged, PcapError, PcapFollower, Restarted, is_pcapng, read_pcap


class CaptureError(Exception):
    """The file cannot be read as a capture (``damaged`` False) or is damaged (``damaged`` True)."""

    def __init__(self, message: str, damaged: bool = False):
        super().__init__(message)
        self.damaged = damaged


class Restart:
    """Yielded by the follow reader when the file was truncated or replaced."""


def read_records(path: str, follow: bool = False, interval: float = 0.1, note=None, sleep=time.sleep):
    """The records of the capture at ``path`` (see the module docstring)."""
    try:
        if follow:
            yield from _follow(path, interval, note, sleep)
            return
        with open(path, "rb") as f:
            head = f.read(4)
        yield from (_read_pcapng(path) if is_pcapng(head) else read_pcap(path))
    except PcapError as e:
        raise CaptureError(str(e), damaged=isinstance(e, PcapDamaged)) from None
    except OSError as e:
        raise CaptureError(f"{path}: {e.strerror or e}") from None


def _follow(path: str, interval: float, note, sleep):
    follower = PcapFollower(path)
    waited = False
    try:
        while True:
            try:
                records = follower.poll()
            except Restarted:
                yield Restart
                continue
            if records:
                yield from records
                continue
            if not follower.opened and not waited and note:
                note(f"waiting for {path} to appear")
                waited = True
            sleep(interval)
    finally:
        follower.close()


def _read_pcapng(path: str):
    from scapy.utils import RawPcapNgReader

    from ustack.pcap import Record

    try:
        reader = RawPcapNgReader(path)
    except Exception as e:  # scapy raises several kinds for a bad section header
        raise CaptureError(f"{path}: not a readable pcapng file ({e})") from None
    try:
        while True:
            try:
                data, meta = next(reader)
            except StopIteration:
                return
            except Exception as e:
                raise CaptureError(f"{path}: damaged pcapng block ({e})", damaged=True) from None
            ts_ns = 0
            if meta.tshigh is not None and meta.tsresol:
                ts_ns = ((meta.tshigh << 32) + meta.tslow) * 10**9 // int(meta.tsresol)
            yield Record(ts_ns, meta.linktype, data, meta.wirelen if meta.wirelen is not None else len(data))
    finally:
        reader.close()
