"""The XDP redirect program: its exact instructions, and what the kernel makes of it."""

from __future__ import annotations

import ctypes
import os
import struct

import pytest

from ustack.backends.afxdp import bpf
from ustack.backends.afxdp.program import PROG_NAME, PROG_NAME_FRAGS, redirect_program
from tests.afxdp.helpers import open_device

XDP_PASS, XDP_REDIRECT = 2, 4
BPF_PROG_TEST_RUN = 10


def test_redirect_program_instructions():
    code = redirect_program(7)
    insns = [struct.unpack_from("<BBhi", code, i) for i in range(0, len(code), 8)]
    assert insns == [
        (0x61, (1 << 4) | 2, 16, 0),  # r2 = *(u32 *)(r1 + 16): ctx->rx_queue_index
        (0x18, (1 << 4) | 1, 0, 7),  # r1 = map fd 7 (BPF_PSEUDO_MAP_FD), ld_imm64 ...
        (0x00, 0, 0, 0),  # ... its upper half
        (0xB7, 3, 0, XDP_PASS),  # r3 = XDP_PASS: the action when the slot is empty
        (0x85, 0, 0, 51),  # call bpf_redirect_map
        (0x95, 0, 0, 0),  # exit
    ]


def _test_run(prog_fd: int, frame: bytes) -> int:
    data = ctypes.create_string_buffer(frame, len(frame))
    attr = ctypes.create_string_buffer(128)
    struct.pack_into("IIIIQ", attr, 0, prog_fd, 0, len(frame), 0, ctypes.addressof(data))
    struct.pack_into("I", attr, 32, 1)  # repeat
    bpf.bpf(BPF_PROG_TEST_RUN, attr)
    return struct.unpack_from("I", attr, 4)[0]  # retval


@pytest.mark.privileged
@pytest.mark.parametrize("frags", [False, True])
def test_empty_map_slot_passes_the_frame_to_the_kernel(frags):
    map_fd = bpf.create_xskmap(4, name="uxsk_test")
    try:
        prog_fd = bpf.prog_load_xdp(redirect_program(map_fd), PROG_NAME_FRAGS if frags else PROG_NAME, frags=frags)
        try:
            info = bpf.prog_info(prog_fd)
            assert info.name == (PROG_NAME_FRAGS if frags else PROG_NAME)
            assert info.map_ids == (bpf.map_info(map_fd).id,)
            assert bpf.map_info(map_fd).type == bpf.BPF_MAP_TYPE_XSKMAP
            assert _test_run(prog_fd, bytes(64)) == XDP_PASS
        finally:
            os.close(prog_fd)
    finally:
        os.close(map_fd)


@pytest.mark.privileged
def test_bound_queue_is_redirected(topo):
    with open_device(topo) as dev:
        prog_fd = bpf.prog_fd_by_id(dev.capabilities.extra["xdp_prog_id"])
        try:
            assert _test_run(prog_fd, bytes(64)) == XDP_REDIRECT  # queue 0 has our socket
        finally:
            os.close(prog_fd)


@pytest.mark.privileged
def test_verifier_refusal_carries_the_log():
    with pytest.raises(bpf.VerifierError) as info:
        bpf.prog_load_xdp(struct.pack("<BBhi", 0x95, 0, 0, 0), "bad")  # exit with r0 unset
    assert "R0" in info.value.log
