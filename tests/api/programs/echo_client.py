"""A plain stdlib program (it knows nothing of what carries its packets).

Talks to the RFC 862 echo service of the host after its own address on
its /24 (UDP and TCP port 7), prints what it got, exits with the status
given as its first argument.
"""

import hashlib
import socket
import sys

PEER = sys.argv[2] if len(sys.argv) > 2 else "198.18.0.3"
print("argv", sys.argv[1:])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(5)
u.sendto(b"datagram over the wire", (PEER, 7))
data, addr = u.recvfrom(2048)
print("udp", data.decode(), addr[0], addr[1])
u.close()
payload = bytes(i * 7 % 251 for i in range(100_000))
with socket.create_connection((PEER, 7), timeout=5) as c:
    c.sendall(payload)
    c.shutdown(socket.SHUT_WR)
    got = c.makefile("rb").read()
print("tcp", len(got), hashlib.sha256(got).hexdigest() == hashlib.sha256(payload).hexdigest())
sys.exit(int(sys.argv[1]))
