"""A ``requests`` client (urllib3 underneath) against the HTTP server of http_server.py.

    requests_client.py client HOST PORT   a Session: two GETs (one streamed) and a POST
"""

import sys

import requests

from payload import blob, digest


def client(host, port):
    base = f"http://{host}:{port}"
    with requests.Session() as s:
        r = s.get(f"{base}/bytes/200000?seed=3", timeout=10)
        ok = r.status_code == 200 and r.content == blob(200000, 3)
        print("get", r.status_code, len(r.content), digest(r.content))
        with s.get(f"{base}/bytes/150000?seed=4", timeout=10, stream=True) as r:
            got = b"".join(r.iter_content(8192))
        ok = ok and got == blob(150000, 4)
        print("stream", r.status_code, len(got), digest(got))
        sent = blob(50000, 5)
        r = s.post(f"{base}/sha", data=sent, timeout=10)
        ok = ok and r.status_code == 201 and r.content == digest(sent).encode() + b"\n" + sent[::-1]
        print("post", r.status_code, len(r.content), digest(r.content))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    {"client": client}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
