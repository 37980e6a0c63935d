"""The link: one device's transmit queue and Ethernet framing.

``Link`` owns the TX side of the Device protocol for the layers above it:

- ``slot()`` lends one writable TX slot (a whole Ethernet frame is written at
  offset 0), ``sent(length)`` says it now holds a frame of that length;
- inside a round (``begin_round()`` .. ``end_round()``, as ``Stack.poll``
  runs one, or the ``batch()`` context for a burst of application sends)
  slots are reserved a burst at a time and posted with ONE ``tx_commit``;
  outside a round a lone frame is committed at once, so an application's
  send does not wait for the next poll;
- ``send_frame(dst_mac, ethertype, body)`` writes the Ethernet header
  (IEEE 802.3, padded to the 60-byte minimum) for layers that build a small
  body in Python (ARP, NDP later); IP writes whole frames from templates.

A full ring is the counted drop ``tx.ring_full``; the frame is lost like any
other and the protocols above recover (or report ENOBUFS).
"""

from __future__ import annotations

import contextlib
from typing import Optional

from ustack.device import Device
from ustack.stats import Stats

ETH_HEADER_LEN = 14
ETH_MIN_FRAME = 60  # without the FCS
BROADCAST_MAC = b"\xff" * 6


class Link:
    """TX slots, batching and Ethernet framing over one device."""

    __slots__ = ("device", "mac", "mtu", "burst", "stats", "_slots", "_lens", "_in_round")

    def __init__(self, device: Device, mac: bytes, mtu: int, burst: int, stats: Stats):
        self.device = device
        self.mac = bytes(mac)
        self.mtu = mtu
        self.burst = burst
        self.stats = stats
        self._slots: list = []
        self._lens: list[int] = []
        self._in_round = False

    # -- slots ------------------------------------------------------------------
    def slot(self) -> Optional[memoryview]:
        """A writable TX slot for one frame, or None (``tx.ring_full``) when the ring is full."""
        used = len(self._lens)
        slots = self._slots
        if used >= len(slots):
            if slots:
                self.commit()
            # In a round, reserve a burst; a lone send outside one reserves one slot.
            slots = self._slots = self.device.tx_reserve(self.burst if self._in_round else 1)
            used = 0
            if not slots:
                self.stats.drop("tx.ring_full")
                return None
        return slots[used]

    def sent(self, length: int) -> None:
        """The slot lent by ``slot()`` now holds a frame of ``length`` bytes."""
        self._lens.append(length)
        self.stats.inc("eth.frames_sent")
        if not self._in_round:
            self.commit()

    def commit(self) -> None:
        """Post what was written (one kick) and give back the slots that were not used."""
        lens = self._lens
        if self._slots or lens:
            self._slots = []
            self._lens = []
            self.device.tx_commit(lens)

    # -- rounds -----------------------------------------------------------------
    def begin_round(self) -> bool:
        """Start batching; False when a round is already open (the caller must not end it)."""
        if self._in_round:
            return False
        self._in_round = True
        return True

    def end_round(self) -> None:
        self._in_round = False
        self.commit()

    @contextlib.contextmanager
    def batch(self):
        """Frames emitted inside the block leave with one tx_commit (as a poll round's do)."""
        opened = self.begin_round()
        try:
            yield
        finally:
            if opened:
                self.end_round()

    # -- Ethernet framing ---------------------------------------------------------
    def send_frame(self, dst_mac: bytes, ethertype: int, body) -> bool:
        """One Ethernet frame carrying ``body``; False (counted) when no slot was free."""
        n = ETH_HEADER_LEN + len(body)
        if n > ETH_HEADER_LEN + self.mtu:
            raise ValueError(f"a {len(body)}-byte body does not fit the {self.mtu}-byte MTU")
        slot = self.slot()
        if slot is None:
            return False
        slot[0:6] = dst_mac
        slot[6:12] = self.mac
        slot[12:14] = ethertype.to_bytes(2, "big")
        slot[ETH_HEADER_LEN:n] = body
        if n < ETH_MIN_FRAME:  # pad to the Ethernet minimum (IEEE 802.3)
            slot[n:ETH_MIN_FRAME] = bytes(ETH_MIN_FRAME - n)
            n = ETH_MIN_FRAME
        self.sent(n)
        return True
