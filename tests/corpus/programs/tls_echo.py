"""TLS with ssl.SSLContext: a threaded server and a verifying client (self-signed certificate).

    tls_echo.py server HOST PORT CERT KEY   per connection: read a 4-byte length and that many bytes,
                                            answer the SHA-256 (hex) and the bytes reversed
    tls_echo.py client HOST PORT CAFILE     two requests on two connections, hostname checked
"""

import socket
import ssl
import struct
import sys
import threading

from payload import blob, digest


def recv_exactly(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(65536, n - len(buf)))
        if not chunk:
            raise ConnectionError(f"EOF after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def handle(tls):
    with tls:
        n = struct.unpack("!I", recv_exactly(tls, 4))[0]
        data = recv_exactly(tls, n)
        tls.sendall(digest(data).encode() + data[::-1])


def server(host, port, cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    with socket.create_server((host, port)) as listener:
        print("listening", host, port, flush=True)
        try:
            while True:
                conn, addr = listener.accept()
                try:
                    tls = ctx.wrap_socket(conn, server_side=True)
                except (ssl.SSLError, OSError) as e:
                    print("handshake failed", e, flush=True)
                    continue
                threading.Thread(target=handle, args=(tls,), daemon=True).start()
        except KeyboardInterrupt:
            print("stopped")


def client(host, port, cafile):
    ctx = ssl.create_default_context(cafile=cafile)
    ok = True
    for n, size in enumerate((100000, 7)):
        data = blob(size, 60 + n)
        with socket.create_connection((host, port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname=host) as tls:
                tls.sendall(struct.pack("!I", len(data)) + data)
                answer = recv_exactly(tls, 64 + len(data))
                version = tls.version()
        good = answer == digest(data).encode() + data[::-1]
        ok = ok and good
        print("request", n, version, good, len(answer), digest(answer))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    role, host, port, *files = sys.argv[1:]
    {"server": server, "client": client}[role](host, int(port), *files)
