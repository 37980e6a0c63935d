"""A plain program that says it is ready, then blocks until interrupted."""

import socket
import sys

s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 9999))
try:
    print("ready", flush=True)
    s.recvfrom(100)
finally:
    print("finally ran", flush=True)
    sys.stdout.flush()
