"""A plain asyncio program (it knows nothing of what carries its packets).

``asyncio.run()`` talks to the RFC 862 echo service of PEER (UDP and TCP
port 7): a datagram endpoint, then streams with 1 MB each way; prints what
it got and the module of the event loop it ran on.
"""

import asyncio
import hashlib
import sys

PEER = sys.argv[1] if len(sys.argv) > 1 else "198.18.0.3"


class Once(asyncio.DatagramProtocol):
    def __init__(self):
        self.got = asyncio.get_running_loop().create_future()

    def datagram_received(self, data, addr):
        if not self.got.done():
            self.got.set_result((data, addr))


async def main():
    loop = asyncio.get_running_loop()
    tr, proto = await loop.create_datagram_endpoint(Once, remote_addr=(PEER, 7))
    tr.sendto(b"datagram from asyncio")
    data, addr = await asyncio.wait_for(proto.got, 5)
    tr.close()
    print("udp", data.decode(), addr[0], addr[1])
    payload = bytes(i * 13 % 251 for i in range(1 << 20))
    reader, writer = await asyncio.open_connection(PEER, 7)

    async def send():
        writer.write(payload)
        await writer.drain()
        writer.write_eof()

    sending = asyncio.ensure_future(send())
    got = await reader.read(-1)
    await sending
    writer.close()
    await writer.wait_closed()
    print("tcp", len(got), hashlib.sha256(got).digest() == hashlib.sha256(payload).digest())
    print("loop", type(loop).__module__)


asyncio.run(main())
