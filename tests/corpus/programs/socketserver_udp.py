"""socketserver.ThreadingUDPServer echoing datagrams (RFC 862); the client sends from four threads.

    socketserver_udp.py server HOST PORT   echoes each datagram to its sender
    socketserver_udp.py client HOST PORT   4 threads x 25 datagrams of up to 1400 bytes, each answered
"""

import socket
import socketserver
import sys
import threading

from payload import blob, digest


class Echo(socketserver.DatagramRequestHandler):
    def handle(self):
        self.wfile.write(self.rfile.read())


def server(host, port):
    with socketserver.ThreadingUDPServer((host, port), Echo) as srv:
        print("listening", host, port, flush=True)
        try:
            srv.serve_forever()
        except KeyboardInterrupt:
            print("stopped")


def client(host, port):
    results = {}

    def worker(n):
        got, ok = [], True
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(1.0)
            for i in range(25):
                data = blob(1 + (n * 25 + i) * 13 % 1400, n * 100 + i)
                answer = b""
                for attempt in range(5):  # UDP: a lost datagram is sent again
                    s.sendto(data, (host, port))
                    try:
                        while answer != data:  # a late echo of an earlier resend is skipped
                            answer, addr = s.recvfrom(2048)
                        break
                    except TimeoutError:
                        continue
                got.append(answer)
                ok = ok and answer == data
        results[n] = ok, digest(b"".join(got))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for n in sorted(results):
        print("thread", n, *results[n])
    sys.exit(0 if len(results) == 4 and all(ok for ok, _ in results.values()) else 1)


if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
