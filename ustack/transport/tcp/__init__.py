"""TCP (RFC 9293 with RFC 5961, 6528, 6298, 5681, 6582, 7323, 4987, 896, 1122, 2018, 6675, 3042, 9438).

Rooms: ``seq`` (sequence arithmetic), ``tcb`` (the per-connection sequence
space, shared by the parts), ``sendbuf``/``recvbuf`` (buffers, reassembly),
``rtt`` (RFC 6298 estimator, RFC 7323 timestamp clock), ``congestion``
(the ``CongestionControl`` protocol, NewReno, CUBIC), ``scoreboard`` (SACKed
ranges at the sender), ``recovery`` (loss recovery: NewReno fast recovery,
RFC 6675 SACK recovery), ``sender`` / ``receiver`` (the two sides of a
connection, each owning its state; the sender does Nagle in Minshall's
variant and TCP_CORK), ``delack`` (when the receiver ACKs: quick-ACK and
ping-pong modes, the adaptive delay, as Linux), ``output`` (building and emitting
segments), ``connection`` (the state machine, user calls, timers, wiring),
``listener`` (SYN and accept queues, cookies), ``isn`` (RFC 6528 ISNs, SYN
cookies), ``layer`` (demux, closed ports: what the stack calls), ``config``
(knobs), ``info`` (TCP_INFO-like snapshot).
"""

from ustack.transport.tcp.config import TcpConfig
from ustack.transport.tcp.connection import Connection
from ustack.transport.tcp.info import TcpInfo
from ustack.transport.tcp.layer import TcpHost, TcpLayer
from ustack.transport.tcp.listener import Listener
from ustack.transport.tcp.tcb import State

__all__ = ["TcpConfig", "Connection", "TcpInfo", "TcpHost", "TcpLayer", "Listener", "State"]
