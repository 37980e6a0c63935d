"""Who am I, what may I do, and does TCP work: prints uid/gid, a raw socket and a BPF attempt, an echo exchange."""
import ctypes
import hashlib
import os
import socket
import sys

host, port, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print("uid", os.getuid(), os.geteuid(), "gid", os.getgid(), os.getegid(), "groups", os.getgroups(), flush=True)
with open("/proc/self/status") as f:
    for line in f:
        if line.split(":")[0] in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs"):
            print(line.strip().replace("\t", " "), flush=True)
try:
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)).close()
    print("AF_PACKET: opened", flush=True)
except PermissionError:
    print("AF_PACKET: PermissionError", flush=True)
libc = ctypes.CDLL(None, use_errno=True)
attr = (ctypes.c_uint32 * 4)(2, 4, 4, 1)  # BPF_MAP_TYPE_ARRAY, key 4, value 4, 1 entry
if libc.syscall(321, 0, attr, ctypes.sizeof(attr)) < 0:  # bpf(BPF_MAP_CREATE)
    print("bpf:", os.strerror(ctypes.get_errno()), flush=True)
else:
    print("bpf: map created", flush=True)
payload = bytes((i * 7 + i // 251) & 0xFF for i in range(size))
with socket.create_connection((host, port), 10) as s:
    s.sendall(payload)
    s.shutdown(socket.SHUT_WR)
    got = bytearray()
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
print("echo", len(got), got == payload, hashlib.sha256(got).hexdigest()[:16], flush=True)
