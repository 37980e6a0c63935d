"""asyncio datagram endpoints: a UDP echo server (RFC 862) and a client protocol.

    asyncio_datagram.py server HOST PORT   create_datagram_endpoint(local_addr=...), echoes each datagram
    asyncio_datagram.py client HOST PORT   create_datagram_endpoint(remote_addr=...), 60 datagrams, resent on loss
"""

import asyncio
import sys

from payload import blob, digest


class Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.transport.sendto(data, addr)


async def serve(host, port):
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(Echo, local_addr=(host, port))
    print("listening", host, port, flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        transport.close()


def server(host, port):
    try:
        asyncio.run(serve(host, port))
    except KeyboardInterrupt:
        print("stopped")


class Client(asyncio.DatagramProtocol):
    def __init__(self):
        self.queue = asyncio.Queue()

    def datagram_received(self, data, addr):
        self.queue.put_nowait(data)


async def run(host, port):
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_datagram_endpoint(Client, remote_addr=(host, port))
    got = []
    for i in range(60):
        data = blob(1 + i * 23 % 1400, 500 + i)
        answer = b""
        for attempt in range(5):  # UDP: a lost datagram is sent again
            transport.sendto(data)
            try:
                while answer != data:  # a late echo of an earlier resend is skipped
                    answer = await asyncio.wait_for(proto.queue.get(), 1.0)
                break
            except asyncio.TimeoutError:
                continue
        got.append(answer)
    transport.close()
    expected = [blob(1 + i * 23 % 1400, 500 + i) for i in range(60)]
    return got == expected, len(got), digest(b"".join(got))


def client(host, port):
    ok, n, d = asyncio.run(run(host, port))
    print("datagrams", ok, n, d)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
