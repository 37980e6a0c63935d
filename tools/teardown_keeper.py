"""The root half of ``--user``: wait for the stack's process to let go, then undo what needed privilege.

``python -m ustack.tools.teardown_keeper ACTIONS_JSON`` is started by
``ustack.tools.privileges.TeardownKeeper`` before the stack's process drops
root. It reads its stdin until end of file (the other process closed its
device and said so, or died: its end of the pipe closes either way), then
runs each action, reporting failures in one line on stderr:

- ``{"do": "xdp_detach", "ifname": IF, "fd": FD, "mode": M}``: detach the
  XDP program whose fd this process inherited, only if it is still the one
  attached (IFLA_XDP_EXPECTED_FD);
- ``{"do": "nft_delete", "table": T}``: delete the nftables netdev table of
  a packet backend's address claim.

It reads nothing else from the other process: a dropped process can only
make the teardown come early.
"""

from __future__ import annotations

import json
import os
import sys


def run(action: dict) -> None:
    what = action.get("do")
    if what == "xdp_detach":
        from ustack.backends.afxdp.link import Link

        link = Link(action["ifname"])
        try:
            link.detach_xdp(int(action["fd"]), action["mode"])
        finally:
            link.close()
        os.close(int(action["fd"]))
    elif what == "nft_delete":
        from ustack.backends.claim import _run_nft

        _run_nft(["delete", "table", "netdev", action["table"]])
    else:
        raise ValueError(f"unknown teardown action {what!r}")


def main(argv: list[str]) -> int:
    actions = json.loads(argv[0])
    while os.read(0, 4096):
        pass  # nothing is read but the end of the file
    status = 0
    for action in actions:
        try:
            run(action)
        except Exception as e:  # noqa: BLE001 - each action on its own, every failure one line
            print(f"ustack teardown: {action.get('do')}: {e}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
