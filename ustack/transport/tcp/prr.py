"""Proportional Rate Reduction (RFC 6937): how much may be sent on each ACK during fast recovery.

At the start of recovery ``start(recover_fs, ssthresh)`` records RecoverFS
(the flight size) and clears prr_delivered and prr_out. On every ACK in
recovery ``sndcnt(delivered, pipe, ssthresh, mss)`` adds DeliveredData
(bytes newly cumulatively acknowledged or SACKed) to prr_delivered and
returns what may be sent now, rounded up to whole segments (RFC 6937 section 3.1):

- pipe > ssthresh (proportional part): ceil(prr_delivered * ssthresh /
  RecoverFS) - prr_out, so that the window comes down to ssthresh over one
  round trip, in step with the ACK clock;
- otherwise (slow start reduction bound, PRR-SSRB): min(ssthresh - pipe,
  max(prr_delivered - prr_out, DeliveredData) + MSS).

The sender reports each byte sent or retransmitted in recovery with
``sent(n)`` (prr_out). As in Linux and the RFC 6937 update
(draft-ietf-tcpm-prr-rfc6937bis section 4), the first ACK of recovery may
always send one segment, so the fast retransmit never waits.
"""

from __future__ import annotations


class Prr:
    __slots__ = ("recover_fs", "delivered", "out")

    def __init__(self):
        self.recover_fs = 1
        self.delivered = 0  # prr_delivered
        self.out = 0  # prr_out

    def start(self, recover_fs: int) -> None:
        """Recovery starts with ``recover_fs`` bytes in flight (RecoverFS)."""
        self.recover_fs = max(recover_fs, 1)
        self.delivered = 0
        self.out = 0

    def sndcnt(self, delivered: int, pipe: int, ssthresh: int, mss: int) -> int:
        """Bytes that may be sent on an ACK that delivered ``delivered`` bytes, with ``pipe`` in flight."""
        self.delivered += delivered
        if pipe > ssthresh:
            # RFC 6937 3.1: CEIL(prr_delivered * ssthresh / RecoverFS) - prr_out
            n = -(-self.delivered * ssthresh // self.recover_fs) - self.out
        else:
            # PRR-SSRB
            n = min(ssthresh - pipe, max(self.delivered - self.out, delivered) + mss)
        if n <= 0:
            return mss if self.out == 0 else 0  # the fast retransmit goes on the first ACK of recovery
        return -(-n // mss) * mss  # whole segments (Linux counts packets)

    def sent(self, n: int) -> None:
        self.out += n
