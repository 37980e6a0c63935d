"""aiohttp: a web.Application server and a ClientSession client.

    aiohttp_app.py server HOST PORT   GET /bytes/{n}?seed=S -> blob(n, S); POST /sha -> sha256 + reversed body;
                                      GET /json -> a JSON document
    aiohttp_app.py client HOST PORT   concurrent GETs, a streamed read, a POST and JSON on one session
"""

import asyncio
import sys

import aiohttp
from aiohttp import web

from payload import blob, digest


async def get_bytes(request):
    n = int(request.match_info["n"])
    return web.Response(body=blob(n, int(request.query.get("seed", "0"))))


async def post_sha(request):
    data = await request.read()
    return web.Response(status=201, body=digest(data).encode() + b"\n" + data[::-1])


async def get_json(request):
    return web.json_response({"hello": "world", "numbers": list(range(10))})


async def serve(host, port):
    app = web.Application(client_max_size=4 * 1024 * 1024)
    app.add_routes([web.get("/bytes/{n}", get_bytes), web.post("/sha", post_sha), web.get("/json", get_json)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    print("listening", host, port, flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def server(host, port):
    try:
        asyncio.run(serve(host, port))
    except KeyboardInterrupt:
        print("stopped")


async def run(host, port):
    base = f"http://{host}:{port}"
    ok = True
    timeout = aiohttp.ClientTimeout(total=20)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async def fetch(n, seed):
            async with session.get(f"{base}/bytes/{n}", params={"seed": seed}) as r:
                return r.status, await r.read()

        got = await asyncio.gather(*(fetch(10000 * (k + 1), k) for k in range(4)))
        for k, (status, body) in enumerate(got):
            good = status == 200 and body == blob(10000 * (k + 1), k)
            ok = ok and good
            print("get", k, status, len(body), digest(body))
        async with session.get(f"{base}/bytes/250000", params={"seed": 9}) as r:
            streamed = bytearray()
            async for chunk in r.content.iter_chunked(4096):
                streamed += chunk
        ok = ok and bytes(streamed) == blob(250000, 9)
        print("stream", r.status, len(streamed), digest(bytes(streamed)))
        sent = blob(120000, 10)
        async with session.post(f"{base}/sha", data=sent) as r:
            answer = await r.read()
        ok = ok and r.status == 201 and answer == digest(sent).encode() + b"\n" + sent[::-1]
        print("post", r.status, len(answer), digest(answer))
        async with session.get(f"{base}/json") as r:
            doc = await r.json()
        ok = ok and doc == {"hello": "world", "numbers": list(range(10))}
        print("json", doc)
    return ok


def client(host, port):
    sys.exit(0 if asyncio.run(run(host, port)) else 1)


if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
