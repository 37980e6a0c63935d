"""socketserver.ThreadingTCPServer with a StreamRequestHandler: a line echo service (RFC 862 over lines).

    socketserver_tcp.py server HOST PORT   echoes every line back
    socketserver_tcp.py client HOST PORT   three threads, each on its own connection, 200 lines each
"""

import base64
import socket
import socketserver
import sys
import threading

from payload import blob, digest


class LineEcho(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(line)


def server(host, port):
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    with socketserver.ThreadingTCPServer((host, port), LineEcho) as srv:
        print("listening", host, port, flush=True)
        try:
            srv.serve_forever()
        except KeyboardInterrupt:
            print("stopped")


def client(host, port):
    results = {}

    def worker(n):
        lines = [base64.b64encode(blob(50 + i, n * 1000 + i)) + b"\n" for i in range(200)]
        with socket.create_connection((host, port), timeout=10) as s:
            f = s.makefile("rwb")
            got = []
            for line in lines:  # one line at a time: request, then its answer
                f.write(line)
                f.flush()
                got.append(f.readline())
            f.close()
        results[n] = b"".join(got) == b"".join(lines), digest(b"".join(got))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for n in sorted(results):
        print("thread", n, *results[n])
    sys.exit(0 if len(results) == 3 and all(ok for ok, _ in results.values()) else 1)


if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
