"""The Device protocol: U-Net's endpoint, the boundary between packet I/O and the stack.

A device lends memory, the stack never owns I/O buffers:

- ``rx_burst(max)`` returns up to ``max`` received frames as memoryviews into
  backend memory (ring slots, UMEM frames). They stay valid until
  ``rx_release(frames)`` hands them back (fill ring / ring block release).
  Every frame returned by ``rx_burst`` must be released exactly once, and
  before the next ``rx_burst`` call.
- ``tx_reserve(n)`` returns up to ``n`` writable memoryviews of
  ``capabilities.frame_size`` bytes each (a TX slot; fewer when the ring is
  full). The stack writes a whole Ethernet frame at offset 0 of each slot.
  ``tx_commit(lengths)`` posts the first ``len(lengths)`` reserved slots with
  those frame lengths, in order, with one kick for the burst; reserved slots
  that were not committed are returned to the device.
- ``fileno()`` is a file descriptor that becomes readable when frames are
  waiting (epoll/select on it), or -1 when the device cannot be waited on.
- ``poll_at(now)`` is the time (on the stack's clock, ``now`` being the
  present) at which the device needs a poll round without a new frame
  arriving (a simulated link's delayed frame; a transmit kick the kernel
  refused, retried then), or None: the stack folds it into its deadline.
- ``capabilities`` describes the link (MTU, MAC, burst size, offloads, mode).
- ``rx_status`` (optional): one int per frame of the last ``rx_burst``, with
  the bits of Linux's tpacket status that say a frame's UDP/TCP checksum need
  not be verified: RX_CSUM_PARTIAL (0x8, TP_STATUS_CSUMNOTREADY: written on
  this host, left partial for an offload that never ran) and RX_CSUM_VALID
  (0x80, TP_STATUS_CSUM_VALID: the kernel verified it). Classify trusts them
  as the kernel's own input does (counted as rx.csum_trusted).

Decorators (pcap capture, fault injection) wrap a device and implement the
same protocol. ustack/ never imports a concrete backend: backends/ holds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol, Sequence, runtime_checkable


class DeviceError(OSError):
    """A backend could not be opened or used; the message says why in plain words."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a device offers. ``mtu`` is the IP MTU (Ethernet payload bytes)."""

    mac: bytes
    mtu: int = 1500
    max_burst: int = 64
    frame_size: int = 1514  # bytes available in one TX slot (>= mtu + 14)
    rx_checksum_verified: bool = False  # device guarantees L3/L4 checksums were checked
    # Frames from a sender on this host may carry a partial L4 checksum (only the pseudo-header sum:
    # Linux's CHECKSUM_PARTIAL) that the device does not mark (AF_XDP on a veth): classify accepts
    # that form, counted as rx.csum_partial. Never set for a link a wire can corrupt frames on.
    rx_partial_checksum: bool = False
    tx_checksum_offload: bool = False  # device fills L4 checksums (never assumed by default)
    tx_tcp_segmentation: int = 0  # largest IP datagram of TCP segments the device merges and re-segments (0: none)
    zero_copy: bool = False  # frames are lent from memory the NIC DMA's into
    mode: str = "copy"  # human-readable description of how the backend runs
    extra: dict = field(default_factory=dict, compare=False, hash=False)


@runtime_checkable
class Device(Protocol):
    """The protocol every backend and every decorator implements."""

    capabilities: Capabilities

    def rx_burst(self, max_frames: int) -> list[memoryview]:
        """Return up to ``max_frames`` received frames as views into backend memory (no copy), valid until
        ``rx_release``; an empty list when none waits. Never blocks."""

    def rx_release(self, frames: Sequence[memoryview]) -> None:
        """Hand frames from ``rx_burst`` back to the device (each exactly once, before the next burst)."""

    def tx_reserve(self, n: int) -> list[memoryview]:
        """Lend up to ``n`` writable TX slots of ``capabilities.frame_size`` bytes (fewer when the ring is full)."""

    def tx_commit(self, lengths: Sequence[int]) -> None:
        """Post the first ``len(lengths)`` reserved slots with those frame lengths, in order, with one kick; the
        other reserved slots go back to the device."""

    def fileno(self) -> int:
        """An fd that becomes readable when frames wait (for select/epoll), or -1 when there is none."""

    def poll_at(self, now: float) -> Optional[float]:
        """The time (on the stack's clock) at which the device needs a round without a new frame, or None."""

    def close(self) -> None:
        """Release the device's sockets, rings and memory. Idempotent."""


class DeviceWrapper:
    """Base for decorators: forwards everything to the wrapped device."""

    def __init__(self, inner: Device):
        self.inner = inner
        self.capabilities = inner.capabilities

    def rx_burst(self, max_frames: int) -> list[memoryview]:
        """Forward to the wrapped device's ``rx_burst``: up to ``max_frames`` lent frames."""
        return self.inner.rx_burst(max_frames)

    def rx_release(self, frames: Sequence[memoryview]) -> None:
        """Forward to the wrapped device's ``rx_release``."""
        self.inner.rx_release(frames)

    def tx_reserve(self, n: int) -> list[memoryview]:
        """Forward to the wrapped device's ``tx_reserve``: up to ``n`` lent TX slots."""
        return self.inner.tx_reserve(n)

    def tx_commit(self, lengths: Sequence[int]) -> None:
        """Forward to the wrapped device's ``tx_commit``."""
        self.inner.tx_commit(lengths)

    @property
    def rx_status(self) -> Optional[list]:
        """The wrapped device's per-frame status of the last burst (None when it has none)."""
        return getattr(self.inner, "rx_status", None)

    def fileno(self) -> int:
        """The wrapped device's readiness fd (-1 when it has none)."""
        return self.inner.fileno()

    def poll_at(self, now: float) -> Optional[float]:
        """The wrapped device's next deadline, or None."""
        return self.inner.poll_at(now)

    def close(self) -> None:
        """Close the wrapped device."""
        self.inner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
