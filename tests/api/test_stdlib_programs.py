"""Unmodified stdlib programs on ustack sockets: http.client against http.server, socketserver, selectors.

``ustack.patch()`` does not exist yet, so each program is handed ustack
sockets: a server class built with ``bind_and_activate=False`` gets a
ustack listening socket in place of the kernel one (then its own
``server_bind``/``server_activate`` run), and an ``HTTPConnection`` gets a
connected ustack socket as its ``sock``. Everything else is the stdlib's
code: its selectors loop on our readiness fds, its makefile() on our
sockets, its shutdown/close sequence.
"""

from __future__ import annotations

import hashlib
import http.client
import http.server
import os
import selectors
import socket as std
import socketserver
import threading

from ustack.api.socket import socket as usocket

from .conftest import A


def on_ustack(server_cls, driver, handler, port):
    """Build a socketserver class on a ustack listening socket instead of a kernel one."""
    server = server_cls((A, port), handler, bind_and_activate=False)
    server.socket.close()  # the kernel socket the constructor made; ours replaces it
    server.socket = usocket(driver, server.address_family, server.socket_type)
    try:
        server.server_bind()
        server.server_activate()
    except BaseException:
        server.server_close()
        raise
    return server


def serving(server):
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    return t


def stop(server, thread):
    server.shutdown()
    thread.join(5)
    server.server_close()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: several requests on one connection

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = f"hello {self.path} from {self.client_address[0]}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        data = self.rfile.read(int(self.headers["Content-Length"]))
        body = hashlib.sha256(data).hexdigest().encode() + b"\n" + data[::-1]
        self.send_response(201)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def http_connection(driver, port):
    conn = http.client.HTTPConnection(A, port, timeout=5)
    s = usocket(driver)
    s.settimeout(5)
    s.connect((A, port))
    conn.sock = s  # http.client uses a socket it is given (the hook ustack.patch() will make unnecessary)
    return conn


def test_http_client_against_http_server(net):
    da, db = net
    server = on_ustack(http.server.ThreadingHTTPServer, da, Handler, 8080)
    thread = serving(server)
    try:
        conn = http_connection(db, 8080)
        conn.request("GET", "/index.txt")
        r = conn.getresponse()
        assert (r.status, r.read()) == (200, b"hello /index.txt from 198.18.0.2")
        assert r.getheader("Content-Type") == "text/plain"
        payload = os.urandom(300_000)
        conn.request("POST", "/upload", body=payload)  # the same connection (HTTP/1.1 keep-alive)
        r = conn.getresponse()
        body = r.read()
        assert r.status == 201 and body == hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload[::-1]
        conn.request("GET", "/again")
        assert conn.getresponse().read() == b"hello /again from 198.18.0.2"
        conn.close()
    finally:
        stop(server, thread)


class Upper(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(line.upper())


def test_threading_tcp_server_with_a_stream_request_handler(net):
    da, db = net
    server = on_ustack(socketserver.ThreadingTCPServer, da, Upper, 9000)
    thread = serving(server)
    results = {}

    def client(i):
        with usocket(db) as s:
            s.settimeout(5)
            s.connect((A, 9000))
            with s.makefile("rwb") as f:
                got = []
                for k in range(50):
                    f.write(f"client {i} line {k}\n".encode())
                    f.flush()
                    got.append(f.readline())
                results[i] = got

    try:
        clients = [threading.Thread(target=client, args=(i,)) for i in range(4)]
        for c in clients:
            c.start()
        for c in clients:
            c.join(20)
        assert sorted(results) == [0, 1, 2, 3]
        for i, got in results.items():
            assert got == [f"CLIENT {i} LINE {k}\n".encode() for k in range(50)]
    finally:
        stop(server, thread)


def test_selectors_echo_server(net):
    da, db = net
    lst = usocket(da)
    lst.bind((A, 9100))
    lst.listen(8)
    lst.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(lst, selectors.EVENT_READ, None)
    stop_r, stop_w = std.socketpair()
    sel.register(stop_r, selectors.EVENT_READ, "stop")
    pending: dict = {}
    done: set = set()

    def loop():
        while True:
            for key, events in sel.select(5):
                if key.data == "stop":
                    return
                if key.data is None:  # the listener: a connection waits
                    conn, _ = lst.accept()
                    conn.setblocking(False)
                    pending[conn] = bytearray()
                    sel.register(conn, selectors.EVENT_READ, "conn")
                    continue
                conn = key.fileobj
                if events & selectors.EVENT_READ and conn not in done:
                    data = conn.recv(65536)
                    if data:
                        pending[conn] += data
                    else:
                        done.add(conn)  # EOF: echo what is left, then close
                if pending[conn]:
                    try:
                        n = conn.send(pending[conn])
                        del pending[conn][:n]
                    except BlockingIOError:
                        pass
                if conn in done and not pending[conn]:
                    sel.unregister(conn)
                    conn.close()
                    continue
                want = (0 if conn in done else selectors.EVENT_READ) | (
                    selectors.EVENT_WRITE if pending[conn] else 0)
                if key.events != want:
                    sel.modify(conn, want, "conn")

    server = threading.Thread(target=loop, daemon=True)
    server.start()
    try:
        blobs = [os.urandom(200_000 + i) for i in range(3)]
        echoed = {}

        def client(i):
            with usocket(db) as s:
                s.settimeout(10)
                s.connect((A, 9100))
                sender = threading.Thread(target=lambda: (s.sendall(blobs[i]), s.shutdown(std.SHUT_WR)))
                sender.start()
                got = bytearray()
                while True:
                    d = s.recv(65536)
                    if not d:
                        break
                    got += d
                sender.join()
                echoed[i] = bytes(got)

        clients = [threading.Thread(target=client, args=(i,)) for i in range(3)]
        for c in clients:
            c.start()
        for c in clients:
            c.join(30)
        assert [echoed.get(i) == blobs[i] for i in range(3)] == [True] * 3
    finally:
        stop_w.send(b"x")
        server.join(5)
        sel.close()
        for conn in list(pending):
            conn.close()
        lst.close()
        stop_r.close()
        stop_w.close()
