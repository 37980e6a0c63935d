"""asyncio streams: start_server echo (RFC 862) and open_connection clients.

    asyncio_streams.py server HOST PORT   echoes whatever each client sends, until it half-closes
    asyncio_streams.py client HOST PORT   three concurrent connections: write, write_eof, read to EOF
"""

import asyncio
import sys

from payload import blob, digest


async def echo(reader, writer):
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()
    await writer.wait_closed()


async def serve(host, port):
    srv = await asyncio.start_server(echo, host, port)
    print("listening", host, port, flush=True)
    async with srv:
        await srv.serve_forever()


def server(host, port):
    try:
        asyncio.run(serve(host, port))
    except KeyboardInterrupt:
        print("stopped")


async def one(host, port, n):
    data = blob(150000 + n * 1111, 40 + n)
    reader, writer = await asyncio.open_connection(host, port)
    got = bytearray()

    async def read_all():
        while chunk := await reader.read(65536):
            got.extend(chunk)

    reading = asyncio.create_task(read_all())
    for i in range(0, len(data), 10000):
        writer.write(data[i:i + 10000])
        await writer.drain()
    writer.write_eof()
    await asyncio.wait_for(reading, 20)
    writer.close()
    await writer.wait_closed()
    return bytes(got) == data, len(got), digest(bytes(got))


async def clients(host, port):
    return await asyncio.gather(*(one(host, port, n) for n in range(3)))


def client(host, port):
    results = asyncio.run(clients(host, port))
    for n, r in enumerate(results):
        print("connection", n, *r)
    sys.exit(0 if all(r[0] for r in results) else 1)


if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
