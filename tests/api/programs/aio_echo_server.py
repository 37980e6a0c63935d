"""A plain asyncio echo server (it knows nothing of what carries its packets).

``python aio_echo_server.py HOST PORT``: prints "ready LOOP-MODULE" once
listening, echoes every connection until its EOF, and exits after the
first connection has closed.
"""

import asyncio
import sys


async def main(host, port):
    done = asyncio.get_running_loop().create_future()

    async def echo(reader, writer):
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        writer.close()
        await writer.wait_closed()
        if not done.done():
            done.set_result(None)

    server = await asyncio.start_server(echo, host, port)
    print("ready", type(asyncio.get_running_loop()).__module__, flush=True)
    await done
    server.close()
    await server.wait_closed()


asyncio.run(main(sys.argv[1], int(sys.argv[2])))
