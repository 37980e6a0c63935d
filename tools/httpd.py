"""A small HTTP/1.1 server written on ustack stream sockets (for the demo and examples).

Serves GET/HEAD: ``/`` is a page about the stack serving it (address,
backend mode, counters), ``/bytes/N`` returns N bytes of the deterministic
pattern; anything else is 404, other methods 405. One request per
connection (``Connection: close``), one thread per connection.
"""

from __future__ import annotations

import html
import threading

from ustack.tools.services import pattern

MAX_REQUEST = 16 * 1024


class HttpServer:
    def __init__(self, driver, port: int = 8080):
        from ustack.api.socket import socket as usocket

        self.driver = driver
        self.stack = driver.stack
        self.sock = usocket(driver)
        self.sock.setsockopt(1, 2, 1)  # SO_REUSEADDR
        self.sock.bind(("0.0.0.0", port))
        self.sock.listen(64)
        self.port = port
        self.requests = 0
        self._stop = False
        self.thread = threading.Thread(target=self._serve, name="ustack-httpd", daemon=True)

    def start(self) -> "HttpServer":
        self.thread.start()
        return self

    def _serve(self) -> None:
        self.sock.settimeout(0.5)
        while not self._stop:
            try:
                conn, peer = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _page(self) -> bytes:
        st = self.stack
        with self.driver.lock:
            counters = st.stats.snapshot()
            mode = st.device.capabilities.mode
        rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{v}</td></tr>" for k, v in counters.items())
        return (f"<!doctype html><html><head><title>ustack</title></head><body>"
                f"<h1>Hello from ustack</h1><p>This page was served by a user-space TCP/IP stack written in "
                f"Python at {st.addr} over {html.escape(mode)}.</p><table>{rows}</table></body></html>\n").encode()

    def _handle(self, conn) -> None:
        try:
            conn.settimeout(10)
            req = bytearray()
            while b"\r\n\r\n" not in req and len(req) < MAX_REQUEST:
                d = conn.recv(4096)
                if not d:
                    break
                req += d
            line = bytes(req).split(b"\r\n", 1)[0].decode("latin-1")
            parts = line.split()
            self.requests += 1
            if len(parts) != 3 or not parts[2].startswith("HTTP/"):
                status, body = "400 Bad Request", b"bad request\n"
            elif parts[0] not in ("GET", "HEAD"):
                status, body = "405 Method Not Allowed", b"method not allowed\n"
            elif parts[1] == "/":
                status, body = "200 OK", self._page()
            elif parts[1].startswith("/bytes/") and parts[1][7:].isdigit() and int(parts[1][7:]) <= 1 << 30:
                status, body = "200 OK", pattern(int(parts[1][7:]))
            else:
                status, body = "404 Not Found", b"not found\n"
            ctype = "text/html; charset=utf-8" if body.startswith(b"<!doctype") else "application/octet-stream"
            head = (f"HTTP/1.1 {status}\r\nServer: ustack\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
            conn.sendall(head + (body if parts and parts[0] != "HEAD" else b""))
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop = True
        self.thread.join(2)
        self.sock.close()
