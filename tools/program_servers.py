"""Plain stdlib servers for the program matrix (ustack.tools.bench_matrix): nothing here knows ustack.

    python program_servers.py KIND ADDR PORT

run as a script (by path, so the kernel rows import nothing of ustack) on the
kernel, or unchanged under ``ustack run``. Each prints ``ready`` once
listening and serves until killed, with the defaults a program gets (Nagle
on, default buffers, no socket options but SO_REUSEADDR where the stdlib's
own servers set it). KIND:

- ``echo-threads``: a thread per connection, blocking ``recv``/``sendall``
  (socketserver's shape, written out);
- ``echo-selectors``: the ``selectors`` echo server of the stdlib's
  documentation (one thread, non-blocking, ``recv(1000)`` then ``send``);
- ``echo-asyncio``: asyncio streams (``asyncio.start_server``, read then
  write and drain), on whatever event loop policy is installed (under
  ``ustack run``: its native loop, or the stock one with ``--asyncio stock``);
- ``http-aiohttp``: an aiohttp ``web.Application`` answering ``GET /`` with
  ``HTTP_BODY_BYTES`` bytes (HTTP/1.1 keep-alive).
"""

from __future__ import annotations

import selectors
import socket
import sys
import threading

HTTP_BODY_BYTES = 1024
ECHO_KINDS = ("echo-threads", "echo-selectors", "echo-asyncio")


def echo_threads(addr: str, port: int) -> None:
    def serve(conn: socket.socket) -> None:
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                conn.sendall(data)

    with socket.create_server((addr, port), backlog=128) as lst:
        print("ready", flush=True)
        while True:
            conn, _ = lst.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()


def echo_selectors(addr: str, port: int) -> None:
    sel = selectors.DefaultSelector()

    def accept(lst: socket.socket, mask: int) -> None:
        conn, _ = lst.accept()
        conn.setblocking(False)
        sel.register(conn, selectors.EVENT_READ, read)

    def read(conn: socket.socket, mask: int) -> None:
        data = conn.recv(1000)
        if data:
            conn.send(data)
        else:
            sel.unregister(conn)
            conn.close()

    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind((addr, port))
    lst.listen(100)
    lst.setblocking(False)
    sel.register(lst, selectors.EVENT_READ, accept)
    print("ready", flush=True)
    while True:
        for key, mask in sel.select():
            key.data(key.fileobj, mask)


def echo_asyncio(addr: str, port: int) -> None:
    import asyncio

    async def handle(reader, writer) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, addr, port)
        print("ready", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def http_aiohttp(addr: str, port: int) -> None:
    from aiohttp import web

    body = bytes(range(256)) * (HTTP_BODY_BYTES // 256)

    async def page(request) -> web.Response:
        return web.Response(body=body, content_type="application/octet-stream")

    app = web.Application()
    app.router.add_get("/", page)
    web.run_app(app, host=addr, port=port, print=lambda *a: print("ready", flush=True), access_log=None)


SERVERS = {"echo-threads": echo_threads, "echo-selectors": echo_selectors, "echo-asyncio": echo_asyncio,
           "http-aiohttp": http_aiohttp}


def main(argv: list) -> int:
    if len(argv) != 3 or argv[0] not in SERVERS:
        print(f"usage: program_servers.py {{{','.join(SERVERS)}}} ADDR PORT", file=sys.stderr)
        return 2
    SERVERS[argv[0]](argv[1], int(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
