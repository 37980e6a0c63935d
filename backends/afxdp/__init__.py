"""AF_XDP backend: an AF_XDP socket on one queue of an interface as a ustack Device.

``AfXdpDevice(ifname, queue=0, ...)`` opens it; see backends/afxdp/device.py
for the modes (native/generic XDP, zero-copy/copy, need_wakeup, multi-buffer)
and errors.py for the errors it explains.
"""

from .device import AfXdpDevice
from .errors import (
    AfXdpError,
    MemlockTooSmallError,
    ModeUnavailableError,
    MtuTooLargeError,
    NoSuchInterfaceError,
    NotPermittedError,
    ProgramConflictError,
    QueueBusyError,
    QueueRangeError,
)

__all__ = [
    "AfXdpDevice",
    "AfXdpError",
    "MemlockTooSmallError",
    "ModeUnavailableError",
    "MtuTooLargeError",
    "NoSuchInterfaceError",
    "NotPermittedError",
    "ProgramConflictError",
    "QueueBusyError",
    "QueueRangeError",
]
