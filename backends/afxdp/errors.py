"""Why an AF_XDP device could not be opened, one DeviceError subclass per cause.

Each carries the errno the kernel gave (``exc.errno``) and a message that says
what to do about it, so a user sees one line, not a traceback of ctypes.
"""

from __future__ import annotations

from ustack.device import DeviceError


class AfXdpError(DeviceError):
    """Base of every AF_XDP backend error."""


class NotPermittedError(AfXdpError):
    """EPERM: BPF maps/programs and AF_XDP sockets need root (CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW)."""


class NoSuchInterfaceError(AfXdpError):
    """The interface name does not exist in this network namespace."""


class QueueBusyError(AfXdpError):
    """EBUSY: another AF_XDP socket is already bound to that queue."""


class QueueRangeError(AfXdpError):
    """The queue index is not an active RX queue of the interface."""


class MtuTooLargeError(AfXdpError):
    """ERANGE: the (peer) MTU is too large for an XDP program without frags support."""


class MemlockTooSmallError(AfXdpError):
    """ENOBUFS from XDP_UMEM_REG: RLIMIT_MEMLOCK is below the UMEM size and cannot be raised."""


class ProgramConflictError(AfXdpError):
    """Another XDP program (not ours) is attached to the interface, or in another mode."""


class ModeUnavailableError(AfXdpError):
    """A mode that was asked for explicitly (native XDP, zero-copy, multi-buffer) is not available."""
