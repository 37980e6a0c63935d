"""SO_REUSEPORT groups: several listeners on one (address, port), each new connection handed to one of them.

The semantics are Linux's (its reuseport groups, read for the pattern):
every member is a full ``Listener`` with its own SYN and accept queues and
backlog; a segment for no connection goes to the member chosen by a keyed
hash of its 4-tuple, so a retransmitted SYN or a SYN-cookie ACK meets the
member its SYN met as long as the group does not change; a member that
closes resets the connections still in its own queues, the others keep
theirs; the group goes when its last member does. Only listens that ask
for it join (``TcpLayer.listen(..., reuseport=True)``); a plain listen on
the same (address, port) is EADDRINUSE, as a plain bind is on Linux.
"""

from __future__ import annotations

_PURPOSE = b"reuseprt"  # the keyed hash's personalization (8 bytes at most for BLAKE2s)


class ReuseportGroup:
    __slots__ = ("layer", "key", "members")

    def __init__(self, layer, key: tuple):
        self.layer = layer
        self.key = key
        self.members: list = []

    def __repr__(self) -> str:
        return f"<ReuseportGroup {self.key[1]} members={len(self.members)}>"

    def pick(self, src: bytes, sport: int, dst: bytes, dport: int):
        """The member for this 4-tuple: a keyed hash scaled onto the members (Linux's reciprocal_scale)."""
        members = self.members
        if len(members) == 1:
            return members[0]
        h = self.layer.keyed.hash32(_PURPOSE, dst, dport, src, sport)
        return members[(h * len(members)) >> 32]

    def segment_arrives(self, src: bytes, dst: bytes, seg, payload, now: float) -> None:
        self.pick(src, seg.src_port, dst, seg.dst_port).segment_arrives(src, dst, seg, payload, now)
