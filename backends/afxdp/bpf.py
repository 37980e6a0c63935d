"""bpf(2) from Python, no libbpf: XSKMAP maps, XDP program load and lookup.

Only what the AF_XDP backend needs: create an XSKMAP, put a socket in it,
load a small XDP program (optionally with BPF_F_XDP_HAS_FRAGS), and find an
attached program's id, name and maps again (to share one program between
sockets on different queues of the same interface). Attribute layouts follow
``union bpf_attr`` and ``struct bpf_prog_info`` / ``struct bpf_map_info`` in
include/uapi/linux/bpf.h. Failures raise OSError with the errno and the
command in the message.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import struct
from dataclasses import dataclass

# bpf(2) syscall number per architecture.
_NR_BPF = {"x86_64": 321, "aarch64": 280, "armv7l": 386, "ppc64le": 361, "s390x": 351, "riscv64": 280}

# enum bpf_cmd
BPF_MAP_CREATE = 0
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_DELETE_ELEM = 3
BPF_PROG_LOAD = 5
BPF_PROG_GET_FD_BY_ID = 13
BPF_MAP_GET_FD_BY_ID = 14
BPF_OBJ_GET_INFO_BY_FD = 15

BPF_MAP_TYPE_XSKMAP = 17
BPF_PROG_TYPE_XDP = 6
BPF_F_XDP_HAS_FRAGS = 1 << 5
BPF_ANY = 0
BPF_OBJ_NAME_LEN = 16

_ATTR_SIZE = 128  # bytes of union bpf_attr we pass (the rest is zero)
_LOG_SIZE = 1 << 16

_CMD_NAMES = {
    BPF_MAP_CREATE: "BPF_MAP_CREATE",
    BPF_MAP_UPDATE_ELEM: "BPF_MAP_UPDATE_ELEM",
    BPF_MAP_DELETE_ELEM: "BPF_MAP_DELETE_ELEM",
    BPF_PROG_LOAD: "BPF_PROG_LOAD",
    BPF_PROG_GET_FD_BY_ID: "BPF_PROG_GET_FD_BY_ID",
    BPF_MAP_GET_FD_BY_ID: "BPF_MAP_GET_FD_BY_ID",
    BPF_OBJ_GET_INFO_BY_FD: "BPF_OBJ_GET_INFO_BY_FD",
}


def _libc() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    lib.syscall.restype = ctypes.c_long
    return lib


_LIBC = _libc()  # a loaded library handle: constant after import


def bpf(cmd: int, attr: bytes | ctypes.Array) -> int:
    """Run one bpf(2) command; ``attr`` is the packed union bpf_attr prefix."""
    nr = _NR_BPF.get(platform.machine())
    if nr is None:
        raise OSError(38, f"bpf(2): unknown syscall number on {platform.machine()}")
    if isinstance(attr, (bytes, bytearray)):
        buf = ctypes.create_string_buffer(bytes(attr), _ATTR_SIZE)
    else:
        buf = attr
    ret = _LIBC.syscall(nr, cmd, buf, _ATTR_SIZE)
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bpf({_CMD_NAMES.get(cmd, cmd)}): {os.strerror(err)}")
    return ret


def create_xskmap(max_entries: int, name: str = "") -> int:
    """A new XSKMAP (u32 queue index -> AF_XDP socket) with ``max_entries`` slots."""
    attr = struct.pack(
        "IIIIIII16s",
        BPF_MAP_TYPE_XSKMAP, 4, 4, max_entries, 0,  # type, key/value size, entries, flags
        0, 0,  # inner_map_fd, numa_node
        name.encode()[: BPF_OBJ_NAME_LEN - 1],
    )
    return bpf(BPF_MAP_CREATE, attr)


def map_update(map_fd: int, key: int, value: int) -> None:
    """map[key] = value (u32 key, u32 value: an AF_XDP socket fd for an XSKMAP)."""
    k = ctypes.c_uint32(key)
    v = ctypes.c_uint32(value)
    attr = struct.pack("IIQQQ", map_fd, 0, ctypes.addressof(k), ctypes.addressof(v), BPF_ANY)
    bpf(BPF_MAP_UPDATE_ELEM, attr)


def map_delete(map_fd: int, key: int) -> None:
    k = ctypes.c_uint32(key)
    attr = struct.pack("IIQ", map_fd, 0, ctypes.addressof(k))
    bpf(BPF_MAP_DELETE_ELEM, attr)


class VerifierError(OSError):
    """BPF_PROG_LOAD refused the program; ``log`` holds the verifier's explanation."""

    def __init__(self, err: int, message: str, log: str):
        super().__init__(err, message)
        self.log = log


def prog_load_xdp(insns: bytes, name: str, *, frags: bool = False) -> int:
    """Load an XDP program (``insns``: 8-byte instructions); returns its fd."""
    if len(insns) % 8:
        raise ValueError("BPF instructions are 8 bytes each")
    code = ctypes.create_string_buffer(insns, len(insns))
    license_ = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(_LOG_SIZE)
    attr = struct.pack(
        "IIQQIIQII16s",
        BPF_PROG_TYPE_XDP, len(insns) // 8, ctypes.addressof(code), ctypes.addressof(license_),
        1, _LOG_SIZE, ctypes.addressof(log),  # log_level 1: explain a refusal
        0, BPF_F_XDP_HAS_FRAGS if frags else 0,  # kern_version, prog_flags
        name.encode()[: BPF_OBJ_NAME_LEN - 1],
    )
    try:
        return bpf(BPF_PROG_LOAD, attr)
    except OSError as exc:
        text = log.value.decode(errors="replace").strip()
        raise VerifierError(exc.errno, f"{exc.strerror}; verifier: {text or '(no log)'}", text) from None


def prog_fd_by_id(prog_id: int) -> int:
    return bpf(BPF_PROG_GET_FD_BY_ID, struct.pack("I", prog_id))


def map_fd_by_id(map_id: int) -> int:
    return bpf(BPF_MAP_GET_FD_BY_ID, struct.pack("I", map_id))


@dataclass(frozen=True, slots=True)
class ProgInfo:
    id: int
    type: int
    name: str
    map_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MapInfo:
    id: int
    type: int
    key_size: int
    value_size: int
    max_entries: int
    name: str


def _obj_info(fd: int, info: ctypes.Array) -> None:
    attr = struct.pack("IIQ", fd, len(info), ctypes.addressof(info))
    bpf(BPF_OBJ_GET_INFO_BY_FD, attr)


def prog_info(prog_fd: int, max_maps: int = 8) -> ProgInfo:
    """Id, type, name and map ids of a loaded program (struct bpf_prog_info)."""
    map_ids = (ctypes.c_uint32 * max_maps)()
    info = ctypes.create_string_buffer(88)
    struct.pack_into("I", info, 52, max_maps)  # nr_map_ids
    struct.pack_into("Q", info, 56, ctypes.addressof(map_ids))  # map_ids
    _obj_info(prog_fd, info)
    ptype, pid = struct.unpack_from("II", info, 0)
    nr_maps = struct.unpack_from("I", info, 52)[0]
    name = info.raw[64:80].split(b"\0", 1)[0].decode(errors="replace")
    return ProgInfo(pid, ptype, name, tuple(map_ids[i] for i in range(min(nr_maps, max_maps))))


def map_info(map_fd: int) -> MapInfo:
    """Id, type, sizes and name of a map (struct bpf_map_info)."""
    info = ctypes.create_string_buffer(40)
    _obj_info(map_fd, info)
    mtype, mid, ksz, vsz, entries, _flags = struct.unpack_from("IIIIII", info, 0)
    name = info.raw[24:40].split(b"\0", 1)[0].decode(errors="replace")
    return MapInfo(mid, mtype, ksz, vsz, entries, name)
