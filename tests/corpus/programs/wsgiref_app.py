"""wsgiref.simple_server running a WSGI application; the client is http.client.

    wsgiref_app.py server HOST PORT   GET /bytes/N -> blob(N, N); POST /upper -> the body, upper-cased
    wsgiref_app.py client HOST PORT   one GET and one POST, each on a new connection (HTTP/1.0 server)
"""

import http.client
import sys
from wsgiref.simple_server import WSGIRequestHandler, make_server

from payload import blob, digest


def app(environ, start_response):
    if environ["REQUEST_METHOD"] == "POST":
        body = environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"])).upper()
    else:
        n = int(environ["PATH_INFO"].rsplit("/", 1)[1])
        body = blob(n, n)
    start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(body)))])
    return [body]


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def server(host, port):
    with make_server(host, port, app, handler_class=QuietHandler) as httpd:
        print("listening", host, port, flush=True)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            print("stopped")


def client(host, port):
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("GET", "/bytes/180000")
    r = conn.getresponse()
    body = r.read()
    ok = r.status == 200 and body == blob(180000, 180000)
    print("get", r.status, len(body), digest(body))
    conn.close()
    text = blob(30000, 11).hex().encode()
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("POST", "/upper", body=text)
    r = conn.getresponse()
    body = r.read()
    ok = ok and body == text.upper()
    print("post", r.status, len(body), digest(body))
    conn.close()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
