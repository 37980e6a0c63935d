"""The interface an AF_XDP socket binds to, through rtnetlink (pyroute2).

Looks the interface up (index, MAC, MTU, queue count, the XDP program
attached and in which mode) and attaches/detaches an XDP program. The
netlink socket is opened once, in the namespace of the thread that opens the
device, and kept: a later detach (close() from another thread, atexit) still
talks to the right namespace.

pyroute2 0.9.7 ignores the flags given with ``xdp_fd=``; the nested
IFLA_XDP attributes are passed explicitly instead (FACTS.md).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

# XDP attach flags (include/uapi/linux/if_link.h).
XDP_FLAGS_UPDATE_IF_NOEXIST = 1 << 0
XDP_FLAGS_SKB_MODE = 1 << 1  # generic XDP, in the core networking stack
XDP_FLAGS_DRV_MODE = 1 << 2  # native XDP, in the driver
XDP_FLAGS_REPLACE = 1 << 4

# IFLA_XDP_ATTACHED values.
XDP_ATTACHED_NONE = 0
XDP_ATTACHED_DRV = 1
XDP_ATTACHED_SKB = 2
XDP_ATTACHED_HW = 3
XDP_ATTACHED_MULTI = 4

MODE_FLAGS = {"native": XDP_FLAGS_DRV_MODE, "generic": XDP_FLAGS_SKB_MODE}
ATTACHED_MODE = {XDP_ATTACHED_DRV: "native", XDP_ATTACHED_SKB: "generic", XDP_ATTACHED_HW: "offload"}


@dataclass(frozen=True, slots=True)
class LinkInfo:
    ifindex: int
    ifname: str
    mac: bytes
    mtu: int
    num_rx_queues: int
    kind: str  # "veth", "" when unknown
    xdp_prog_id: int  # 0: none attached
    xdp_mode: str  # "native", "generic", "offload", "multi", "" when none
    qdisc: str = ""  # the transmit queueing discipline ("noqueue": none), "" when unknown
    gso_max_size: int = 65536  # the largest GSO packet the interface takes
    gso_max_segs: int = 65535  # and its most segments


class LinkError(OSError):
    """A netlink request failed; ``extack`` is the kernel's explanation, if any."""

    def __init__(self, err: int, message: str, extack: str = ""):
        super().__init__(err, message)
        self.extack = extack


def _extack(exc: NetlinkError) -> str:
    # pyroute2 puts the kernel's extended ack message (NLMSGERR_ATTR_MSG) in
    # the exception text when there is one; otherwise it is strerror(code).
    text = str(exc.args[1]) if len(exc.args) > 1 else ""
    return "" if text == os.strerror(exc.code) else text


class Link:
    """One interface, looked up by name in the current thread's namespace."""

    def __init__(self, ifname: str):
        self.ifname = ifname
        self._ipr: IPRoute | None = IPRoute(ext_ack=True)  # the kernel explains refusals
        try:
            found = self._ipr.link_lookup(ifname=ifname)
        except BaseException:
            self.close()
            raise
        if not found:
            self.close()
            raise LinkError(errno.ENODEV, f"no interface named {ifname!r} in this network namespace")
        self.ifindex = found[0]

    def info(self) -> LinkInfo:
        msg = self._request("get", index=self.ifindex)[0]
        mac_text = msg.get_attr("IFLA_ADDRESS") or "00:00:00:00:00:00"
        xdp = msg.get_attr("IFLA_XDP")
        prog_id, attached = 0, 0
        if xdp is not None:
            prog_id = xdp.get_attr("IFLA_XDP_PROG_ID") or 0
            attached_name = xdp.get_attr("IFLA_XDP_ATTACHED")
            attached = {None: 0, "xdp": 1, "xdpgeneric": 2, "xdpoffload": 3, "xdpmulti": 4}.get(
                attached_name, attached_name if isinstance(attached_name, int) else 0
            )
            if attached == XDP_ATTACHED_MULTI:
                prog_id = xdp.get_attr("IFLA_XDP_DRV_PROG_ID") or xdp.get_attr("IFLA_XDP_SKB_PROG_ID") or 0
        kind = ""
        linkinfo = msg.get_attr("IFLA_LINKINFO")
        if linkinfo is not None:
            kind = linkinfo.get_attr("IFLA_INFO_KIND") or ""
        return LinkInfo(
            ifindex=self.ifindex,
            ifname=msg.get_attr("IFLA_IFNAME") or self.ifname,
            mac=bytes.fromhex(mac_text.replace(":", "")),
            mtu=msg.get_attr("IFLA_MTU") or 1500,
            num_rx_queues=msg.get_attr("IFLA_NUM_RX_QUEUES") or 1,
            kind=kind,
            xdp_prog_id=prog_id,
            xdp_mode="multi" if attached == XDP_ATTACHED_MULTI else ATTACHED_MODE.get(attached, ""),
            qdisc=msg.get_attr("IFLA_QDISC") or "",
            gso_max_size=msg.get_attr("IFLA_GSO_MAX_SIZE") or 65536,
            gso_max_segs=msg.get_attr("IFLA_GSO_MAX_SEGS") or 65535,
        )

    def attach_xdp(self, prog_fd: int, mode: str) -> None:
        """Attach a program in ``mode`` ("native"/"generic"), never replacing another one."""
        flags = MODE_FLAGS[mode] | XDP_FLAGS_UPDATE_IF_NOEXIST
        self._request(
            "set", index=self.ifindex, xdp={"attrs": [("IFLA_XDP_FD", prog_fd), ("IFLA_XDP_FLAGS", flags)]}
        )

    def detach_xdp(self, prog_fd: int, mode: str) -> None:
        """Detach our program (``prog_fd``) only if it is still the one attached."""
        flags = MODE_FLAGS[mode] | XDP_FLAGS_REPLACE
        self._request(
            "set",
            index=self.ifindex,
            xdp={"attrs": [("IFLA_XDP_FD", -1), ("IFLA_XDP_EXPECTED_FD", prog_fd), ("IFLA_XDP_FLAGS", flags)]},
        )

    def _request(self, command: str, **kw):
        if self._ipr is None:
            raise LinkError(errno.EBADF, f"netlink handle for {self.ifname} is closed")
        try:
            return self._ipr.link(command, **kw)
        except NetlinkError as exc:
            extack = _extack(exc)
            detail = f": {extack}" if extack else ""
            raise LinkError(exc.code, f"netlink {command} {self.ifname}: {errno.errorcode.get(exc.code, exc.code)}{detail}", extack) from None

    def close(self) -> None:
        if self._ipr is not None:
            ipr, self._ipr = self._ipr, None
            ipr.close()
