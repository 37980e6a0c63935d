"""Opening an AF_XDP device fails with a clear, specific error -- and leaves nothing behind."""

from __future__ import annotations

import errno
import os

import pytest

from ustack.backends.afxdp import (
    AfXdpDevice,
    ModeUnavailableError,
    MtuTooLargeError,
    NoSuchInterfaceError,
    ProgramConflictError,
    QueueBusyError,
    QueueRangeError,
)
from ustack.backends.afxdp import bpf
from ustack.backends.afxdp.link import Link
from ustack.backends.afxdp.program import redirect_program
from tests.afxdp.helpers import collect, open_device, open_in_child, peer_udp, udp_dport, xdp_prog_id
from ustack.device import DeviceError

pytestmark = pytest.mark.privileged


def test_no_such_interface(topo):
    with topo.in_stack_ns(), pytest.raises(NoSuchInterfaceError) as info:
        AfXdpDevice("nosuchif0")
    assert info.value.errno == errno.ENODEV
    assert "nosuchif0" in str(info.value)
    assert isinstance(info.value, DeviceError)


def test_queue_busy_when_two_devices_share_a_queue(topo):
    with open_device(topo) as first:
        prog = xdp_prog_id(topo)
        with pytest.raises(QueueBusyError) as info:
            open_device(topo)
        assert info.value.errno == errno.EBUSY
        assert "queue 0" in str(info.value) and topo.stack_ifname in str(info.value)
        # the failed open touched nothing: the first device still owns and receives
        assert xdp_prog_id(topo) == prog
        with peer_udp(topo, 9100) as peer:
            peer.sendto(b"still here", (topo.stack_addr, 7100))
            assert collect(first, lambda f: udp_dport(f) == 7100, 1)
    assert xdp_prog_id(topo) == 0


def test_inactive_queue(topo):
    with pytest.raises(QueueRangeError) as info:
        open_device(topo, queue=1)  # veth: 2 RX queues allocated, 1 active
    assert "queue 1" in str(info.value) and "not an active RX queue" in str(info.value)
    with pytest.raises(QueueRangeError):
        open_device(topo, queue=7)  # not even allocated
    assert xdp_prog_id(topo) == 0


@pytest.mark.parametrize("xdp_mode", ["native", "auto"])
def test_mtu_too_large_for_a_program_without_frags(jumbo_topo, xdp_mode):
    with pytest.raises(MtuTooLargeError) as info:
        open_device(jumbo_topo, xdp_mode=xdp_mode, multi_buffer=False)
    assert info.value.errno == errno.ERANGE
    message = str(info.value)
    assert "MTU" in message and "multi_buffer" in message
    assert "Peer MTU is too large to set XDP" in message  # the kernel's own words
    assert xdp_prog_id(jumbo_topo) == 0
    # and with multi-buffer the same link opens
    with open_device(jumbo_topo, xdp_mode=xdp_mode) as dev:
        assert dev.capabilities.extra["sg"] is True


def test_zerocopy_on_is_unavailable_on_veth(topo):
    with pytest.raises(ModeUnavailableError) as info:
        open_device(topo, zerocopy="on")
    assert info.value.errno == errno.EOPNOTSUPP
    assert "zero-copy" in str(info.value)
    assert xdp_prog_id(topo) == 0


def test_foreign_program_is_not_replaced(topo):
    # a program that is not ours (same code, another name) attached by someone else
    map_fd = bpf.create_xskmap(4)
    prog_fd = bpf.prog_load_xdp(redirect_program(map_fd), "someone_else")
    with topo.in_stack_ns():
        link = Link(topo.stack_ifname)
    try:
        link.attach_xdp(prog_fd, "generic")
        with pytest.raises(ProgramConflictError) as info:
            open_device(topo)
        assert "someone_else" in str(info.value)
        assert xdp_prog_id(topo) == bpf.prog_info(prog_fd).id
    finally:
        link.detach_xdp(prog_fd, "generic")
        link.close()
        os.close(prog_fd)
        os.close(map_fd)


def test_not_root_gets_a_clear_error(topo):
    # no capabilities at all: the AF_XDP socket itself is refused
    result = open_in_child(topo, {}, ["--bounding-set=-all", "--inh-caps=-all"])
    assert result.startswith("NotPermittedError:"), result
    assert "EPERM" in result and "root" in result
    # CAP_NET_RAW only: the socket is allowed, bpf(2) is not
    result = open_in_child(topo, {"num_frames": 256}, ["--bounding-set=-all,+net_raw", "--inh-caps=-all"])
    assert result.startswith("NotPermittedError:"), result
    assert "BPF_MAP_CREATE" in result and "EPERM" in result
    assert xdp_prog_id(topo) == 0


def test_memlock_too_small_names_the_limit(topo):
    # without CAP_IPC_LOCK the UMEM counts against RLIMIT_MEMLOCK (8 MiB here),
    # and without CAP_SYS_RESOURCE it cannot be raised past the hard limit
    result = open_in_child(
        topo,
        {"num_frames": 8192},  # 32 MiB
        ["--bounding-set=-ipc_lock,-sys_resource", "--inh-caps=-all"],
    )
    assert result.startswith("MemlockTooSmallError:"), result
    assert "RLIMIT_MEMLOCK" in result and "32 MiB" in result and "ulimit -l" in result
    assert xdp_prog_id(topo) == 0


def test_bad_arguments_are_value_errors():
    for kwargs in ({"xdp_mode": "turbo"}, {"zerocopy": "maybe"}, {"frame_size": 3000}, {"num_frames": 100},
                   {"ring_size": 1000}, {"burst": 0}, {"multi_buffer": "sometimes"}, {"queue": -1}):
        with pytest.raises(ValueError):
            AfXdpDevice("lo", **kwargs)
