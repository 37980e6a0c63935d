"""The readiness scenario of test_readiness.py with the other end on a real Linux kernel over veth (root).

test_readiness.py compares kernel<->kernel (loopback) with ustack<->ustack
(pipe). Here each side talks to the kernel across a veth pair (packet
backend), both ways round: ustack servers with kernel clients, then kernel
servers with ustack clients. The selector must report the same table at
every step (connect, data, half-close, RST, listen backlog, refused connect,
UDP) as in the kernel-only run.
"""

from __future__ import annotations

import socket as std

import pytest

from ustack.api.socket import socket as usocket

from .test_readiness import Kernel, scenario

pytestmark = pytest.mark.privileged


@pytest.fixture
def veth_stack():
    from ustack.api.clock import MonotonicClock
    from ustack.api.driver import Driver
    from ustack.stack import Stack
    from ustack.tools.netns import Topology

    with Topology.veth(tag="rk") as topo:
        device = topo.open_device("packet")
        stack = Stack(device, f"{topo.stack_addr}/{topo.prefixlen}")
        driver = Driver(stack, MonotonicClock())
        driver.start()
        try:
            yield topo, driver
        finally:
            driver.close()
            stack.close()
            device.close()


class UstackServesKernel:
    """Listeners and UDP receivers on ustack; clients and UDP senders on the kernel peer."""

    def __init__(self, topo, driver):
        self.topo, self.driver, self.host = topo, driver, topo.stack_addr

    def server_tcp(self):
        return usocket(self.driver)

    def server_udp(self):
        return usocket(self.driver, std.AF_INET, std.SOCK_DGRAM)

    def client_tcp(self):
        from ustack.tools.netns import peer_socket

        return peer_socket(self.topo, std.AF_INET, std.SOCK_STREAM)

    def client_udp(self):
        from ustack.tools.netns import peer_socket

        return peer_socket(self.topo, std.AF_INET, std.SOCK_DGRAM)


class KernelServesUstack:
    """Listeners and UDP receivers on the kernel peer; clients and UDP senders on ustack."""

    def __init__(self, topo, driver):
        self.topo, self.driver, self.host = topo, driver, topo.peer_addr

    def server_tcp(self):
        from ustack.tools.netns import peer_socket

        return peer_socket(self.topo, std.AF_INET, std.SOCK_STREAM)

    def server_udp(self):
        from ustack.tools.netns import peer_socket

        return peer_socket(self.topo, std.AF_INET, std.SOCK_DGRAM)

    def client_tcp(self):
        return usocket(self.driver)

    def client_udp(self):
        return usocket(self.driver, std.AF_INET, std.SOCK_DGRAM)


@pytest.mark.parametrize("side", [UstackServesKernel, KernelServesUstack])
def test_scenario_against_the_kernel_over_veth_gives_the_kernels_events(veth_stack, side):
    topo, driver = veth_stack
    assert scenario(side(topo, driver)) == scenario(Kernel())
