"""TCP (RFC 9293 with RFC 5961, 6528, 6298, 5681, 6582, 7323, 4987, 896, 1122, 2018, 6675, 3042, 9438).

Rooms: ``seq`` (sequence arithmetic), ``tcb`` (per-connection state),
``sendbuf``/``recvbuf`` (buffers, reassembly), ``rtt`` (RFC 6298),
``congestion`` (hook interface, NewReno, CUBIC), ``sack`` (scoreboard, RFC
6675 recovery), ``isn`` (RFC 6528 ISNs, SYN cookies), ``input`` / ``output``
(segment arrival, sending), ``connection`` (user side of the state machine,
timers), ``listener`` (SYN and accept queues), ``layer`` (demux, closed
ports: what the stack calls), ``config`` (knobs), ``info`` (TCP_INFO-like
snapshot).
"""

from ustack.transport.tcp.config import TcpConfig
from ustack.transport.tcp.connection import Connection
from ustack.transport.tcp.info import TcpInfo
from ustack.transport.tcp.layer import TcpHost, TcpLayer
from ustack.transport.tcp.listener import Listener
from ustack.transport.tcp.tcb import State

__all__ = ["TcpConfig", "Connection", "TcpInfo", "TcpHost", "TcpLayer", "Listener", "State"]
