"""AfXdpDevice: the AF_XDP backend of the Device protocol (ustack.device).

Opening a device:
  1. look the interface up over netlink (MAC, MTU, queues, XDP attached);
  2. create the AF_XDP socket and its UMEM (raising RLIMIT_MEMLOCK when
     permitted), size and map the four rings;
  3. bind to (interface, queue), trying zero-copy then copy mode and
     multi-buffer (XDP_USE_SG) then single-buffer, as the arguments allow;
  4. attach the redirect program (native XDP, then generic) or reuse ours if
     it is already there, and put the socket in its XSKMAP at ``queue``;
  5. hand the rings and the UMEM to the Cython data path (XskDataPath).

The UMEM is split in two halves: receive frames cycling through the fill
ring, and TX slots. Without multi-buffer a TX slot is one frame; with it, a
slot is as many consecutive frames as an MTU-sized frame needs, and a frame
longer than ``frame_size`` leaves as several descriptors. A received frame
that arrives in several descriptors (jumbo frames) is copied into one buffer
so the stack always sees one frame; that is the only copy on this path.

TCP segmentation offload on transmit (``gso``): AF_XDP descriptors carry
no offload metadata, so in copy mode every frame is its own skb, and a local
peer (a veth's other end) takes a softirq and a TCP receive per frame, on our
CPU, inside our TX kick. With gso the device also opens an AF_PACKET socket
on the interface with PACKET_VNET_HDR (it receives nothing: protocol 0), and
``tx_commit`` sends each run of consecutive full-sized segments of one TCP
flow (the rules of ustack/_fp_gso.pxi, as the packet backend merges them)
as one super-frame through it, which the kernel segments back into exactly
those frames; every other frame takes the AF_XDP ring. Both sockets transmit
synchronously in the caller when the interface has no queueing discipline
(``noqueue``, a veth's default), and a run is sent only once the AF_XDP ring
holds nothing earlier, so frames leave in commit order. ``gso="auto"`` (the
default) turns it on in copy mode on a noqueue interface; ``True`` asks for
it (copy mode and noqueue still required); ``False`` is frame by frame.
Counted as ``tx_gso_frames`` / ``tx_gso_segments`` (and ``tx_gso_unordered``:
runs sent frame by frame because the ring was not empty; ``tx_gso_error``:
a refused sendmsg, the run then frame by frame).

close() (idempotent; also at exit and, when the handlers are ours, on
SIGTERM/SIGHUP) tears down in the order the kernel needs: rings unmapped,
socket closed, program detached if we attached it.
"""

from __future__ import annotations

import atexit
import errno
import resource
import signal
import socket
import threading
import time
import weakref
from typing import Optional, Sequence

from ustack._fastpath import RxWatch, XskDataPath
from ustack.device import Capabilities, DeviceError

from .errors import (
    AfXdpError,
    MemlockTooSmallError,
    ModeUnavailableError,
    NoSuchInterfaceError,
    NotPermittedError,
    QueueBusyError,
    QueueRangeError,
)
from .link import Link, LinkError
from .program import XdpProgram
from .xsk import XDP_COPY, XDP_OPTIONS_ZEROCOPY, XDP_USE_NEED_WAKEUP, XDP_USE_SG, XDP_ZEROCOPY, XskSocket

TX_RETRY_INTERVAL = 0.001  # descriptors a refused kick left in the TX ring are kicked again this soon

XDP_PACKET_HEADROOM = 256  # the kernel receives at frame + 256 (FACTS.md)
ETH_HLEN = 14
MAX_REASSEMBLED_FRAME = 65535 + 18  # sanity bound on a multi-buffer frame
BUSY_QUEUE_WAIT = 1.0  # seconds a bind waits for a just-closed socket's queue
SOL_PACKET = 263
PACKET_VNET_HDR = 15
GSO_MAX_SEGS = 64  # segments per super-frame, as the packet backend's

_XDP_MODES = ("auto", "native", "generic")
_ZEROCOPY = {"auto": "auto", "on": "on", "off": "off", True: "on", False: "off"}
_MULTI_BUFFER = {"auto": "auto", True: True, False: False, "on": True, "off": False}
_GSO = {"auto": "auto", True: True, False: False, "on": True, "off": False, None: "auto"}
_HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p


def _exit_on_signal(signum, frame):
    """SIGTERM/SIGHUP become SystemExit, so with-blocks and atexit close devices."""
    raise SystemExit(128 + signum)


def _close_at_exit(ref: "weakref.ref[AfXdpDevice]") -> None:
    device = ref()
    if device is not None:
        device.close()


def _parse_mac(mac) -> bytes:
    if isinstance(mac, str):
        mac = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    mac = bytes(mac)
    if len(mac) != 6:
        raise ValueError(f"a MAC address is 6 bytes, got {len(mac)}")
    return mac


class AfXdpDevice:
    """An AF_XDP socket on one queue of one interface, as a ustack Device.

    ``xdp_mode``: "auto" (native, falling back to generic), "native", "generic".
    ``zerocopy``: "auto" (zero-copy, falling back to copy), "on", "off".
    ``multi_buffer``: "auto" (use it when the kernel offers it), True, False.
    ``frame_size``: UMEM frame (chunk) size, 4096 or 2048.
    ``mac``: the MAC the stack uses (default: the interface's).
    ``handle_signals``: turn SIGTERM/SIGHUP into SystemExit when they still
    have their default action (main thread only), so teardown runs.
    ``gso``: "auto", True, False: TCP segmentation offload on transmit
    through an AF_PACKET socket (module docstring).
    """

    def __init__(
        self,
        ifname: str,
        *,
        queue: int = 0,
        xdp_mode: str = "auto",
        zerocopy="auto",
        frame_size: int = 4096,
        num_frames: int = 4096,
        ring_size: int = 2048,
        burst: int = 256,
        need_wakeup: bool = True,
        multi_buffer="auto",
        mac=None,
        handle_signals: bool = True,
        gso="auto",
    ):
        if xdp_mode not in _XDP_MODES:
            raise ValueError(f"xdp_mode must be one of {_XDP_MODES}, not {xdp_mode!r}")
        if zerocopy not in _ZEROCOPY:
            raise ValueError(f"zerocopy must be 'auto', 'on' or 'off', not {zerocopy!r}")
        if multi_buffer not in _MULTI_BUFFER:
            raise ValueError(f"multi_buffer must be 'auto', True or False, not {multi_buffer!r}")
        if gso not in _GSO:
            raise ValueError(f"gso must be 'auto', True or False, not {gso!r}")
        if frame_size not in (2048, 4096):
            raise ValueError("frame_size must be 2048 or 4096")
        if num_frames < 16 or num_frames & (num_frames - 1):
            raise ValueError("num_frames must be a power of two >= 16")
        if ring_size < 8 or ring_size & (ring_size - 1):
            raise ValueError("ring_size must be a power of two >= 8")
        if burst < 1:
            raise ValueError("burst must be >= 1")
        if queue < 0:
            raise ValueError("queue must be >= 0")
        self.ifname = ifname
        self.queue = queue
        self._closed = False
        self._lock = threading.Lock()
        self._link: Link | None = None
        self._xsk: XskSocket | None = None
        self._program: XdpProgram | None = None
        self._path: XskDataPath | None = None
        self._gso_sock: socket.socket | None = None
        self.gso = False
        self._atexit = None
        try:
            self._open(
                xdp_mode=xdp_mode,
                zerocopy=_ZEROCOPY[zerocopy],
                frame_size=frame_size,
                num_frames=num_frames,
                ring_size=ring_size,
                burst=burst,
                need_wakeup=bool(need_wakeup),
                multi_buffer=_MULTI_BUFFER[multi_buffer],
                mac=mac,
                gso=_GSO[gso],
            )
        except BaseException:
            self.close()
            raise
        self._atexit = lambda ref=weakref.ref(self): _close_at_exit(ref)
        atexit.register(self._atexit)
        if handle_signals and threading.current_thread() is threading.main_thread():
            for signum in _HANDLED_SIGNALS:
                if signal.getsignal(signum) == signal.SIG_DFL:
                    signal.signal(signum, _exit_on_signal)

    # -- opening ---------------------------------------------------------------

    def _open(self, *, xdp_mode, zerocopy, frame_size, num_frames, ring_size, burst, need_wakeup,
              multi_buffer, mac, gso) -> None:
        try:
            self._link = Link(self.ifname)
        except LinkError as exc:
            if exc.errno == errno.ENODEV:
                raise NoSuchInterfaceError(errno.ENODEV, f"no interface named {self.ifname!r} in this network namespace") from None
            raise AfXdpError(exc.errno, f"looking up {self.ifname}: {exc.strerror}") from None
        info = self._link.info()
        if self.queue >= info.num_rx_queues:
            raise QueueRangeError(
                errno.EINVAL, f"{self.ifname} has {info.num_rx_queues} RX queue(s); queue {self.queue} does not exist"
            )
        rx_frames = num_frames // 2
        tx_frames = num_frames - rx_frames
        self._xsk = self._create_socket(frame_size, num_frames, ring_size, rx_frames, tx_frames)
        needs_sg = info.mtu + ETH_HLEN > frame_size - XDP_PACKET_HEADROOM
        sg_bound, zc = self._bind(info.ifindex, zerocopy, multi_buffer, need_wakeup, sg_first=needs_sg)
        self._program = XdpProgram.attach(
            self._link, queue=self.queue, mode=xdp_mode, frags=multi_buffer if sg_bound else False
        )
        if xdp_mode != "auto" and self._program.mode != xdp_mode:
            raise ModeUnavailableError(errno.EOPNOTSUPP, f"XDP {xdp_mode} mode asked for, got {self._program.mode}")
        self._program.add_socket(self.queue, self._xsk.fileno())
        # RX multi-buffer needs both the socket (XDP_USE_SG) and a frags program.
        sg = sg_bound and self._program.frags
        if multi_buffer is True and not sg:
            raise ModeUnavailableError(
                errno.EOPNOTSUPP, f"multi-buffer asked for, but the XDP program on {self.ifname} has no frags support"
            )
        link_mtu = info.mtu
        if sg:
            slot_frames = max(1, -(-(link_mtu + ETH_HLEN) // frame_size))
            mtu = link_mtu
        else:
            slot_frames = 1
            mtu = min(link_mtu, frame_size - XDP_PACKET_HEADROOM - ETH_HLEN)
        tx_slots = tx_frames // slot_frames
        x = self._xsk
        self._path = XskDataPath(
            x.umem, frame_size, x.rx, x.tx, x.fill, x.comp, x.fileno(),
            rx_frames=rx_frames, tx_slots=tx_slots, slot_frames=slot_frames,
            need_wakeup=need_wakeup, sg=sg_bound, max_frame=MAX_REASSEMBLED_FRAME,
        )
        gso_bytes = self._open_gso(gso, info, zc)
        # The hot calls go straight to the Cython data path (no Python frame in
        # between); close() removes these and the methods below take over.
        self.rx_burst = self._path.rx_burst
        self.rx_release = self._path.rx_release
        self.tx_reserve = self._path.tx_reserve
        self.tx_commit = self._path.tx_commit
        mode = " ".join(
            w for w in ("afxdp", self._program.mode, "zerocopy" if zc else "copy",
                        "need_wakeup" if need_wakeup else "", "sg" if sg else "", "gso" if self.gso else "") if w
        )
        self.capabilities = Capabilities(
            mac=_parse_mac(mac) if mac is not None else info.mac,
            mtu=mtu,
            max_burst=burst,
            frame_size=slot_frames * frame_size,
            rx_checksum_verified=False,
            # a veth's peer is a sender on this host: with its checksum offload on (the kernel's
            # default) it leaves L4 sums partial, and AF_XDP carries no mark saying so
            rx_partial_checksum=info.kind == "veth",
            tx_checksum_offload=False,
            zero_copy=zc,
            mode=mode,
            tx_tcp_segmentation=gso_bytes,
            extra={
                "xdp_mode": self._program.mode,
                "zerocopy": zc,
                "need_wakeup": need_wakeup,
                "sg": sg,
                "queue": self.queue,
                "rx_frames": rx_frames,
                "ifname": self.ifname,
                "ifindex": info.ifindex,
                "link_mtu": link_mtu,
                "umem_frame_size": frame_size,
                "num_frames": num_frames,
                "ring_size": ring_size,
                "tx_slot_frames": slot_frames,
                "tx_budget": x.tx_budget,
                "xdp_prog_id": self._program.prog_id,
                "xdp_prog_owned": self._program.owned,
                "qdisc": info.qdisc,
                "gso": (gso_bytes, self._gso_segs) if self.gso else None,
            },
        )

    def _open_gso(self, gso, info, zc: bool) -> int:
        """Open the AF_PACKET socket for super-frames when ``gso`` asks for it and the interface allows
        the ordering it relies on (copy mode, noqueue); returns the largest IP datagram of one (0: off)."""
        if gso is False:
            return 0
        why = ""
        if zc:
            why = "zero-copy mode (the driver transmits from the ring asynchronously)"
        elif info.qdisc != "noqueue":
            why = f"qdisc {info.qdisc or 'unknown'} (a queued super-frame could leave after later AF_XDP frames)"
        if why:
            if gso is True:
                raise ModeUnavailableError(errno.EOPNOTSUPP, f"gso on {self.ifname} needs copy mode and noqueue: {why}")
            return 0
        try:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: it receives nothing
        except OSError as exc:
            if gso is True:
                raise AfXdpError(exc.errno, f"gso: opening the AF_PACKET socket: {exc.strerror}") from None
            return 0
        try:
            sock.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
            sock.bind((self.ifname, 0))
        except OSError as exc:
            sock.close()
            if gso is True:
                raise AfXdpError(exc.errno, f"gso: PACKET_VNET_HDR socket on {self.ifname}: {exc.strerror}") from None
            return 0
        self._gso_sock = sock
        max_bytes = min(0xFFFF, info.gso_max_size)
        self._gso_segs = min(GSO_MAX_SEGS, info.gso_max_segs)
        self._path.set_gso(sock.fileno(), max_bytes, self._gso_segs)
        self.gso = True
        return max_bytes

    def _create_socket(self, frame_size, num_frames, ring_size, rx_frames, tx_frames) -> XskSocket:
        size = frame_size * num_frames
        try:
            return XskSocket(
                frame_size=frame_size, num_frames=num_frames, rx_size=ring_size, tx_size=ring_size,
                # twice the RX frames: the fill ring never looks full, so refilling
                # rarely has to re-read the kernel's consumer index
                fill_size=_pow2_at_least(max(ring_size, 2 * rx_frames)),
                comp_size=_pow2_at_least(max(ring_size, tx_frames)),
            )
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.EACCES):
                raise NotPermittedError(
                    errno.EPERM, "creating an AF_XDP socket refused (EPERM): needs root or CAP_NET_RAW"
                ) from None
            if exc.errno == errno.EAFNOSUPPORT:
                raise AfXdpError(errno.EAFNOSUPPORT, "this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS)") from None
            if exc.errno == errno.ENOBUFS:
                soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)

                def mib(v):
                    return "unlimited" if v == resource.RLIM_INFINITY else f"{v / 2**20:g} MiB"

                raise MemlockTooSmallError(
                    errno.ENOBUFS,
                    f"registering the {mib(size)} UMEM needs RLIMIT_MEMLOCK >= {mib(size)} (locked memory "
                    f"is counted per user, across all UMEMs); the limit is {mib(soft)} (hard {mib(hard)}) and "
                    f"could not be raised: run with `ulimit -l {-(-size // 1024)}` or more, or CAP_IPC_LOCK / "
                    "CAP_SYS_RESOURCE, or use fewer/smaller frames",
                ) from None
            raise AfXdpError(exc.errno, f"setting up the AF_XDP socket: {exc.strerror or exc}") from None

    def _bind(self, ifindex: int, zerocopy: str, multi_buffer, need_wakeup: bool, *,
              sg_first: bool) -> tuple[bool, bool]:
        """Bind, trying the richest mode first; returns (sg bound, zero-copy obtained).

        Zero-copy is preferred to multi-buffer unless the MTU needs multi-buffer
        (``sg_first``): a NIC may offer zero-copy only for single-buffer frames.
        """
        copy_modes = {"on": (XDP_ZEROCOPY,), "off": (XDP_COPY,), "auto": (XDP_ZEROCOPY, XDP_COPY)}[zerocopy]
        sg_modes = {True: (XDP_USE_SG,), False: (0,), "auto": (XDP_USE_SG, 0)}[multi_buffer]
        if sg_first:
            attempts = [(c, sg) for sg in sg_modes for c in copy_modes]
        else:
            attempts = [(c, sg) for c in copy_modes for sg in sg_modes]
        extra = XDP_USE_NEED_WAKEUP if need_wakeup else 0
        failure: OSError | None = None
        for copy_mode, sg in attempts:
            try:
                self._bind_once(ifindex, copy_mode | sg | extra)
            except OSError as exc:
                if exc.errno == errno.EBUSY:
                    raise QueueBusyError(
                        errno.EBUSY,
                        f"queue {self.queue} of {self.ifname} is already bound by another AF_XDP socket (EBUSY)",
                    ) from None
                if exc.errno == errno.EPERM:
                    raise NotPermittedError(errno.EPERM, "binding the AF_XDP socket refused (EPERM): needs root") from None
                if exc.errno == errno.ENODEV:
                    raise NoSuchInterfaceError(errno.ENODEV, f"{self.ifname} went away while opening") from None
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.EPROTONOSUPPORT):
                    raise AfXdpError(exc.errno, f"binding to {self.ifname} queue {self.queue}: {exc.strerror}") from None
                failure = exc
                continue
            zc = bool(self._xsk.options() & XDP_OPTIONS_ZEROCOPY)
            return bool(sg), zc
        assert failure is not None
        wanted = []
        if zerocopy == "on":
            wanted.append("zero-copy")
        if multi_buffer is True:
            wanted.append("multi-buffer")
        if failure.errno == errno.EINVAL and not wanted:
            raise QueueRangeError(
                errno.EINVAL,
                f"cannot bind to queue {self.queue} of {self.ifname} (EINVAL): not an active RX queue "
                "(see `ethtool -l`)",
            )
        raise ModeUnavailableError(
            failure.errno,
            f"{self.ifname} queue {self.queue} refuses {' + '.join(wanted) or 'AF_XDP'} "
            f"({errno.errorcode.get(failure.errno, failure.errno)}): {failure.strerror}",
        )

    def _bind_once(self, ifindex: int, flags: int) -> None:
        """bind(); EBUSY is retried for a moment: a socket closed just before
        releases its queue from a kernel work item (xp_release_deferred), so a
        quick reopen can find the queue still taken."""
        deadline = time.monotonic() + BUSY_QUEUE_WAIT
        pause = 0.001
        while True:
            try:
                self._xsk.bind(ifindex, self.queue, flags)
                return
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    # -- the Device protocol ---------------------------------------------------
    # While open, these four are shadowed by the data path's own methods
    # (instance attributes set in _open); these versions serve a closed device.

    def rx_burst(self, max_frames: int) -> list[memoryview]:
        path = self._path
        if path is None:
            raise DeviceError(errno.EBADF, f"AF_XDP device on {self.ifname} is closed")
        return path.rx_burst(max_frames)

    def rx_release(self, frames: Sequence[memoryview]) -> None:
        path = self._path
        if path is None:
            return  # frames of a closed device: nothing left to give them back to
        path.rx_release(frames)

    def tx_reserve(self, n: int) -> list[memoryview]:
        path = self._path
        if path is None:
            raise DeviceError(errno.EBADF, f"AF_XDP device on {self.ifname} is closed")
        return path.tx_reserve(n)

    def tx_commit(self, lengths: Sequence[int]) -> None:
        path = self._path
        if path is None:
            raise DeviceError(errno.EBADF, f"AF_XDP device on {self.ifname} is closed")
        path.tx_commit(lengths)

    def poll_at(self, now: float) -> Optional[float]:
        """Frames arrive only from the kernel; but descriptors a refused kick left in the TX ring
        are kicked again here, at the end of each poll round, and while the kernel still has not
        taken them the stack polls again after ``TX_RETRY_INTERVAL`` (an idle stack would
        otherwise strand its last reply until the next frame arrives)."""
        path = self._path
        if path is None or not path.tx_pending():
            return None
        path.flush()
        return now + TX_RETRY_INTERVAL if path.tx_pending() else None

    def fileno(self) -> int:
        return self._xsk.fileno() if self._xsk is not None and not self._closed else -1

    def rx_watch(self):
        """The RX ring's producer index as an ``ustack._fastpath.RxWatch``, for the driver's busy-poll
        without the GIL; None when closed."""
        xsk = self._xsk
        if xsk is None or self._closed:
            return None
        watch = self.__dict__.get("_watch")
        if watch is None:
            watch = self._watch = RxWatch.xsk(xsk.rx)
        return watch

    def flush(self) -> None:
        """Reap completions and kick the TX ring again if frames are still queued."""
        if self._path is not None:
            self._path.flush()

    def stats(self) -> dict[str, int]:
        """Data path counters plus the kernel's XDP_STATISTICS (prefixed ``kernel.``)."""
        out: dict[str, int] = {}
        if self._path is not None:
            out.update(self._path.counters())
            out["tx_in_flight"] = self._path.tx_in_flight()
        if self._xsk is not None and self._xsk.sock is not None:
            out.update({"kernel." + k: v for k, v in self._xsk.statistics().items()})
        return out

    @property
    def closed(self) -> bool:
        return self._closed

    def hand_over_teardown(self) -> tuple[list[dict], list[int]]:
        """Our program's detach (netlink, CAP_NET_ADMIN), for a keeper that outlives a privilege drop.

        Returns the keeper's action and the fd it needs (ustack.tools.privileges); close() then leaves the
        program attached for the keeper to detach once the socket is gone.
        """
        with self._lock:
            program, link = self._program, self._link
            if program is None or link is None or not program.owned or program.prog_fd < 0:
                return [], []
            program.owned = False
        return [{"do": "xdp_detach", "ifname": link.ifname, "fd": program.prog_fd, "mode": program.mode}], \
            [program.prog_fd]

    def close(self) -> None:
        """Unmap rings, close the socket, detach our program. Idempotent, never raises."""
        with self._lock:
            if self._closed and self._xsk is None and self._program is None and self._link is None:
                return
            self._closed = True
            path, self._path = self._path, None
            xsk, self._xsk = self._xsk, None
            self._watch = None
            program, self._program = self._program, None
            link, self._link = self._link, None
            gso_sock, self._gso_sock = self._gso_sock, None
            for name in ("rx_burst", "rx_release", "tx_reserve", "tx_commit"):
                self.__dict__.pop(name, None)
        if path is not None:
            path.close()
        if gso_sock is not None:
            gso_sock.close()
        if xsk is not None:
            xsk.close()
        if program is not None:
            program.close(link)
        if link is not None:
            link.close()
        if self._atexit is not None:
            atexit.unregister(self._atexit)
            self._atexit = None

    def __enter__(self) -> "AfXdpDevice":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self._closed else getattr(getattr(self, "capabilities", None), "mode", "opening")
        return f"AfXdpDevice({self.ifname!r}, queue={self.queue}, {state})"
