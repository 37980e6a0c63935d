"""The XDP program that steers a queue's frames to its AF_XDP socket.

Six BPF instructions, assembled here (no clang, no libbpf)::

    r2 = *(u32 *)(r1 + 16)        ; ctx->rx_queue_index
    r1 = map_fd ll                ; the XSKMAP (a 16-byte ld_imm64)
    r3 = XDP_PASS                 ; what to return when the map slot is empty
    call bpf_redirect_map         ; helper 51
    exit

A frame on a queue with no socket in the map goes to the kernel untouched
(the XDP_PASS fallback in the flags argument, kernel >= 5.3). The frags
variant is the same code loaded with BPF_F_XDP_HAS_FRAGS: it tells the
driver the program copes with multi-buffer frames (jumbo frames on veth).

An attached program is recognised as ours by its name, and its XSKMAP found
through the program's map ids, so sockets on other queues of the same
interface share it. The map's name carries the pid of the process that
attached the program: a program left behind by a process that died is
adopted (and detached on close) by the next one.
"""

from __future__ import annotations

import errno
import os
import struct

from ..process import pid_alive
from . import bpf
from .errors import AfXdpError, ModeUnavailableError, MtuTooLargeError, NotPermittedError, ProgramConflictError
from .link import Link, LinkError

PROG_NAME = "ustack_xsk"
PROG_NAME_FRAGS = "ustack_xsk_frag"
MAP_NAME_PREFIX = "uxsk_"

XDP_PASS = 2
BPF_FUNC_redirect_map = 51
XDP_MD_RX_QUEUE_INDEX = 16  # offsetof(struct xdp_md, rx_queue_index)

# Opcodes (include/uapi/linux/bpf_common.h, bpf.h).
BPF_LDX_MEM_W = 0x61  # BPF_LDX | BPF_MEM | BPF_W
BPF_LD_IMM64 = 0x18  # BPF_LD | BPF_IMM | BPF_DW
BPF_ALU64_MOV_K = 0xB7  # BPF_ALU64 | BPF_MOV | BPF_K
BPF_JMP_CALL = 0x85
BPF_JMP_EXIT = 0x95
BPF_PSEUDO_MAP_FD = 1


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One struct bpf_insn: opcode, dst/src registers, 16-bit offset, 32-bit immediate."""
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def redirect_program(map_fd: int) -> bytes:
    """The XSKMAP redirect by rx_queue_index, XDP_PASS when the slot is empty."""
    return b"".join(
        (
            insn(BPF_LDX_MEM_W, dst=2, src=1, off=XDP_MD_RX_QUEUE_INDEX),
            insn(BPF_LD_IMM64, dst=1, src=BPF_PSEUDO_MAP_FD, imm=map_fd),
            insn(0),  # second half of the 64-bit immediate
            insn(BPF_ALU64_MOV_K, dst=3, imm=XDP_PASS),
            insn(BPF_JMP_CALL, imm=BPF_FUNC_redirect_map),
            insn(BPF_JMP_EXIT),
        )
    )


def _close_fd(fd: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


def _bpf_error(exc: OSError, what: str) -> AfXdpError:
    if exc.errno == errno.EPERM:
        return NotPermittedError(
            errno.EPERM,
            f"{what} refused (EPERM): AF_XDP needs root, or CAP_BPF + CAP_NET_ADMIN + CAP_NET_RAW "
            "(unprivileged BPF is disabled on this host)",
        )
    return AfXdpError(exc.errno, f"{what} failed: {exc.strerror}")


class XdpProgram:
    """Our redirect program and its XSKMAP, attached to one interface."""

    def __init__(self, map_fd: int, prog_fd: int, *, frags: bool, mode: str, owned: bool, prog_id: int,
                 max_entries: int):
        self.map_fd = map_fd
        self.prog_fd = prog_fd
        self.frags = frags
        self.mode = mode  # "native" or "generic"
        self.owned = owned  # we attached it (or adopted it): we detach it on close
        self.prog_id = prog_id
        self.max_entries = max_entries

    @classmethod
    def attach(cls, link: Link, *, queue: int, mode: str, frags: str) -> "XdpProgram":
        """Reuse our program on ``link`` or load and attach a new one.

        ``mode``: "auto" (native, then generic), "native" or "generic".
        ``frags``: "auto" (frags variant if the kernel takes it), True or False.
        """
        info = link.info()
        if info.xdp_prog_id:
            return cls._reuse(link, info, queue=queue, mode=mode)
        max_entries = max(64, info.num_rx_queues, queue + 1)
        try:
            map_fd = bpf.create_xskmap(max_entries, name=f"{MAP_NAME_PREFIX}{os.getpid()}")
        except OSError as exc:
            raise _bpf_error(exc, "creating the XSKMAP (bpf BPF_MAP_CREATE)") from None
        prog_fd = -1
        try:
            prog_fd, has_frags = cls._load(map_fd, frags)
            attached_mode = cls._attach_fd(link, prog_fd, mode, has_frags, info.mtu)
            prog_id = bpf.prog_info(prog_fd).id
        except BaseException:
            _close_fd(prog_fd)
            _close_fd(map_fd)
            raise
        return cls(map_fd, prog_fd, frags=has_frags, mode=attached_mode, owned=True, prog_id=prog_id,
                   max_entries=max_entries)

    @staticmethod
    def _load(map_fd: int, frags) -> tuple[int, bool]:
        code = redirect_program(map_fd)
        if frags in ("auto", True):
            try:
                return bpf.prog_load_xdp(code, PROG_NAME_FRAGS, frags=True), True
            except OSError as exc:
                if frags is True or exc.errno == errno.EPERM:
                    raise _bpf_error(exc, "loading the XDP program with frags (BPF_F_XDP_HAS_FRAGS)") from None
        try:
            return bpf.prog_load_xdp(code, PROG_NAME, frags=False), False
        except OSError as exc:
            raise _bpf_error(exc, "loading the XDP program (bpf BPF_PROG_LOAD)") from None

    @staticmethod
    def _attach_fd(link: Link, prog_fd: int, mode: str, has_frags: bool, mtu: int) -> str:
        modes = ("native", "generic") if mode == "auto" else (mode,)
        failure: LinkError | None = None
        for candidate in modes:
            try:
                link.attach_xdp(prog_fd, candidate)
                return candidate
            except LinkError as exc:
                if exc.errno == errno.ERANGE:
                    raise MtuTooLargeError(
                        errno.ERANGE,
                        f"cannot attach XDP to {link.ifname} in {candidate} mode: "
                        f"{exc.extack or 'MTU too large'} (ERANGE); the program "
                        f"{'has' if has_frags else 'has no'} frags support -- use multi_buffer=True "
                        "(or 'auto') for jumbo frames, or lower the MTU on both ends",
                    ) from None
                if exc.errno == errno.EPERM:
                    raise NotPermittedError(errno.EPERM, f"attaching XDP to {link.ifname} refused (EPERM): needs root / CAP_NET_ADMIN") from None
                if exc.errno in (errno.EBUSY, errno.EEXIST):
                    raise ProgramConflictError(
                        exc.errno, f"another XDP program was attached to {link.ifname} meanwhile ({exc.strerror})"
                    ) from None
                failure = exc
        assert failure is not None
        raise ModeUnavailableError(
            failure.errno, f"cannot attach XDP to {link.ifname} in {'/'.join(modes)} mode: {failure.strerror}"
        )

    @classmethod
    def _reuse(cls, link: Link, info, *, queue: int, mode: str) -> "XdpProgram":
        try:
            prog_fd = bpf.prog_fd_by_id(info.xdp_prog_id)
        except OSError as exc:
            raise _bpf_error(exc, f"opening the XDP program attached to {link.ifname}") from None
        map_fd = -1
        try:
            pinfo = bpf.prog_info(prog_fd)
            if pinfo.name not in (PROG_NAME, PROG_NAME_FRAGS):
                raise ProgramConflictError(
                    errno.EBUSY,
                    f"{link.ifname} already has an XDP program attached (id {pinfo.id}, name {pinfo.name!r}) "
                    "that is not ustack's; detach it first (ip link set dev IF xdp off)",
                )
            if info.xdp_mode not in ("native", "generic"):
                raise ProgramConflictError(errno.EBUSY, f"{link.ifname} has XDP attached in {info.xdp_mode} mode")
            if mode != "auto" and mode != info.xdp_mode:
                raise ProgramConflictError(
                    errno.EBUSY,
                    f"ustack's XDP program is already attached to {link.ifname} in {info.xdp_mode} mode, "
                    f"{mode} mode was asked for",
                )
            minfo = None
            for map_id in pinfo.map_ids:
                fd = bpf.map_fd_by_id(map_id)
                candidate = bpf.map_info(fd)
                if candidate.type == bpf.BPF_MAP_TYPE_XSKMAP:
                    map_fd, minfo = fd, candidate
                    break
                _close_fd(fd)
            if minfo is None:
                raise ProgramConflictError(errno.EBUSY, f"the XDP program on {link.ifname} has no XSKMAP")
            if queue >= minfo.max_entries:
                raise ProgramConflictError(
                    errno.ERANGE, f"queue {queue} is beyond the {minfo.max_entries} slots of the attached XSKMAP"
                )
            owner = minfo.name[len(MAP_NAME_PREFIX):] if minfo.name.startswith(MAP_NAME_PREFIX) else ""
            adopt = owner.isdigit() and int(owner) != os.getpid() and not pid_alive(int(owner))
        except OSError as exc:
            _close_fd(map_fd)
            _close_fd(prog_fd)
            if isinstance(exc, AfXdpError):
                raise
            raise _bpf_error(exc, f"inspecting the XDP program on {link.ifname}") from None
        return cls(map_fd, prog_fd, frags=pinfo.name == PROG_NAME_FRAGS, mode=info.xdp_mode, owned=adopt,
                   prog_id=pinfo.id, max_entries=minfo.max_entries)

    def add_socket(self, queue: int, sock_fd: int) -> None:
        """Steer ``queue`` to the socket (the kernel removes it when the socket closes)."""
        try:
            bpf.map_update(self.map_fd, queue, sock_fd)
        except OSError as exc:
            raise _bpf_error(exc, f"adding the socket to the XSKMAP at queue {queue}") from None

    def close(self, link: Link | None) -> None:
        """Detach the program if we own it, then drop our fds. Idempotent."""
        if self.owned and link is not None and self.prog_fd >= 0:
            try:
                link.detach_xdp(self.prog_fd, self.mode)
            except LinkError:
                pass  # already detached or replaced: not ours to touch any more
            self.owned = False
        _close_fd(self.prog_fd)
        _close_fd(self.map_fd)
        self.prog_fd = self.map_fd = -1
