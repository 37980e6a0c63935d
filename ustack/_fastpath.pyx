# cython: language_level=3
"""ustack's data plane in C: one extension module, narrow and batch-oriented.

Pieces (each in its own include file, one concern each):
- _fp_checksum.pxi: Internet checksum and RFC 1624 incremental update
- _fp_classify.pxi: burst classify of Ethernet/IPv4/UDP/TCP/ICMP into typed
  records (Packet; the TCP header and its options parsed once); K_* and REASONS
- _fp_classify6.pxi: the IPv6 part of classify (fixed header; UDP/TCP/ICMPv6)
- _fp_emit.pxi: header emit into a TX slot from a per-flow template
- _fp_emit6.pxi: the same for IPv6 (emit_ipv6, emit_udp6, emit_tcp6)
- _fp_ring.pxi: AF_PACKET ring walking (TPACKET_V2 and V3 RX, V3 TX)
- _fp_xsk.pxi: AF_XDP ring producer/consumer operations
- _fp_tcb.pxi: the TCP control block as C sees it (TcbLayout: the slots of tcb.Tcb)
- _fp_siphash.pxi: SipHash, the keyed hash of tables remote traffic fills (the flow table's)
- _fp_tcp.pxi: the established-TCP fast path (receive header prediction, EstablishedPath)
  and the C demux of established flows (FlowTable, IPv4 and IPv6)
- _fp_tmpl.pxi: per-flow cached frame templates (TcpTemplate, FlowEmitter, Generation):
  established IPv4 TCP segments into a TX slot with no Python frame
- _fp_ack.pxi: the receive side's ACK policy (delayed ACK) and the pure ACK, in C
- _fp_tx.pxi: the transmit side: full-sized segments of new data from the send ring (TxPath)
- _fp_rxq.pxi: the receive buffer's in-order chunks (ChunkQueue: views into held RX frames)
- _fp_sndq.pxi: the send buffer's ring (SendRing: views for the segment writer, reservations)
- _fp_echo.pxi: ICMP echo replies in C for sources the Python path answered (EchoResponder)
- _fp_clone.pxi: shallow copies of slotted objects (SlotCopier: connection setup from a prototype)
- _fp_syn.pxi: the SYN to a listener in one C call (SynPath: the record, its ISS by BLAKE2s, the SYN-ACK)
- _fp_hsk.pxi: the handshake's ACK in one C call (HandshakePath: the connection from the prototype, ESTABLISHED)
- _fp_ctl.pxi: our segments without data (a FIN, a pure ACK) as Output.emit writes them (emit_control)
- _fp_gso.pxi: TCP segmentation offload on transmit (AF_PACKET TX ring super-frames; AF_XDP runs by sendmsg)
- _fp_fin.pxi: the peer's in-order FIN on an established flow (FinPath: CLOSE-WAIT without the Python frames)

Bounds checks are off in this module: every function length-checks
untrusted bytes before reading a field.
"""

include "_fp_checksum.pxi"
include "_fp_classify.pxi"
include "_fp_classify6.pxi"
include "_fp_syn.pxi"
include "_fp_hsk.pxi"
include "_fp_emit.pxi"
include "_fp_emit6.pxi"
include "_fp_ring.pxi"
include "_fp_xsk.pxi"
include "_fp_tcb.pxi"
include "_fp_siphash.pxi"
include "_fp_rxq.pxi"
include "_fp_sndq.pxi"
include "_fp_tcp.pxi"
include "_fp_tmpl.pxi"
include "_fp_ack.pxi"
include "_fp_tx.pxi"
include "_fp_echo.pxi"
include "_fp_clone.pxi"
include "_fp_ctl.pxi"
include "_fp_gso.pxi"
include "_fp_fin.pxi"
include "_fp_wait.pxi"
