"""asyncio's low-level socket calls: loop.sock_accept / sock_connect / sock_sendall / sock_recv.

    asyncio_sock.py server HOST PORT   a non-blocking listener; per client: read until EOF, answer the
                                       SHA-256 of what came and the byte count, close
    asyncio_sock.py client HOST PORT   four concurrent clients of different sizes
"""

import asyncio
import socket
import sys

from payload import blob, digest


async def handle(loop, conn):
    with conn:
        data = bytearray()
        while chunk := await loop.sock_recv(conn, 65536):
            data += chunk
        await loop.sock_sendall(conn, f"{len(data)} {digest(bytes(data))}\n".encode())


async def serve(host, port):
    loop = asyncio.get_running_loop()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(16)
    listener.setblocking(False)
    print("listening", host, port, flush=True)
    tasks = set()
    with listener:
        while True:
            conn, _ = await loop.sock_accept(listener)
            task = asyncio.create_task(handle(loop, conn))
            tasks.add(task)
            task.add_done_callback(tasks.discard)


def server(host, port):
    try:
        asyncio.run(serve(host, port))
    except KeyboardInterrupt:
        print("stopped")


async def one(loop, host, port, n):
    data = blob(1000 + 70000 * n, 80 + n)
    s = socket.socket()
    s.setblocking(False)
    with s:
        await loop.sock_connect(s, (host, port))
        await loop.sock_sendall(s, data)
        s.shutdown(socket.SHUT_WR)
        answer = bytearray()
        while chunk := await loop.sock_recv(s, 1024):
            answer += chunk
    return answer.decode() == f"{len(data)} {digest(data)}\n", answer.decode().strip()


async def run(host, port):
    loop = asyncio.get_running_loop()
    return await asyncio.gather(*(one(loop, host, port, n) for n in range(4)))


def client(host, port):
    results = asyncio.run(run(host, port))
    for n, (ok, answer) in enumerate(results):
        print("client", n, ok, answer)
    sys.exit(0 if all(ok for ok, _ in results) else 1)


if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
