"""HTTP/1.1 keep-alive: http.server with protocol_version HTTP/1.1, http.client reusing one connection.

    http_keepalive.py server HOST PORT   GET /n/K -> blob(1000 * K, K); HEAD as GET without a body
    http_keepalive.py client HOST PORT   eight requests on one HTTPConnection, then a HEAD
"""

import http.client
import http.server
import sys

from payload import blob, digest


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _head(self):
        k = int(self.path.rsplit("/", 1)[1])
        body = blob(1000 * k, k)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Peer-Port", str(self.client_address[1]))
        self.end_headers()
        return body

    def do_GET(self):
        self.wfile.write(self._head())

    def do_HEAD(self):
        self._head()

    def log_message(self, fmt, *args):
        pass


def server(host, port):
    with http.server.ThreadingHTTPServer((host, port), Handler) as httpd:
        print("listening", host, port, flush=True)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            print("stopped")


def client(host, port):
    conn = http.client.HTTPConnection(host, port, timeout=10)
    ports, ok = set(), True
    for k in (1, 5, 64, 2, 130, 7, 3, 99):
        conn.request("GET", f"/n/{k}")
        r = conn.getresponse()
        body = r.read()
        ports.add(r.getheader("X-Peer-Port"))
        ok = ok and r.status == 200 and body == blob(1000 * k, k)
        print("get", k, r.status, len(body), digest(body))
    conn.request("HEAD", "/n/40")
    r = conn.getresponse()
    ok = ok and r.read() == b"" and r.getheader("Content-Length") == "40000"
    print("head", r.status, r.getheader("Content-Length"))
    print("connections", len(ports))  # keep-alive: every request on the same connection
    conn.close()
    sys.exit(0 if ok and len(ports) == 1 else 1)


if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
