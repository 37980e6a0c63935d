"""The send buffer: bytes the user wrote, from SND.UNA onward (sent-unacknowledged, then unsent).

A ring of ``capacity`` bytes that never moves once allocated (it is made
at the first write and dropped when emptied by ``clear``), so views into
it stay valid:

- offset 0 is the first unacknowledged data byte; the connection maps
  sequence numbers to offsets (``seq - snd_una``); ``acknowledge(n)``
  moves the head past the first ``n`` bytes;
- ``peek(offset, n)`` lends a view of queued bytes to the segment writer,
  which copies it into a TX slot (the one copy on the way out); only a
  range that wraps the ring's end is joined into new bytes;
- ``reserve(n)`` lends a writable view of free space after the queued
  bytes (the zero-copy send: the application writes its data there) and
  ``commit(k)`` queues the first ``k`` bytes written, without a copy.
  ``write`` (``send``) copies the caller's bytes in: the other copy.

Changing ``capacity`` while bytes are queued moves them to a new ring
(views lent earlier keep the old one alive and unchanged). The ring is in
C (``_fastpath.SendRing``, _fp_sndq.pxi): the sender asks for a segment's
bytes once per segment.
"""

from __future__ import annotations

from ustack._fastpath import SendRing as SendBuffer

__all__ = ["SendBuffer"]
