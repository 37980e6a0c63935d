"""RX frames kept past their poll round: the one-copy receive path and the lending bound.

The device lends each burst's frames for one round (``rx_burst`` ...
``rx_release``). In-order TCP payload that the fast path appends to a
receive buffer is kept there as a view into its frame instead of being
copied, so ``recv``/``recv_into`` copy each byte once (frame -> the
application's buffer), and ``recv_views`` lends the frame itself (zero
copies). A frame with such a view is *held*: it goes back to the device
only when every view of it has been read, released or copied out.

Holding is bounded, so the device's RX ring keeps flowing whatever the
application does: at most ``limit`` frames are held at once. When a frame
would pass the bound, every receive buffer first copies its held (not yet
lent) bytes out into memory of its own (``reclaim``: a second copy, only
for bytes that wait), and the new payload is copied when the bound is
still reached (``rx_hold.copied``): frames the application holds through
``recv_views`` are the only ones the stack cannot take back. On an
ordered ring (AF_PACKET, ``rx_ordered`` in the device's capabilities: the
kernel fills slots or blocks in turn and stops at one still held) the bound
is also an age, and lending copies first (see ``_fp_rxq.pxi``).
"""

from __future__ import annotations

from ustack._fastpath import FrameHold as RxHold  # in C (_fp_rxq.pxi): per-segment work

__all__ = ["RxHold"]
