"""The echo server of the ``selectors`` documentation, and a non-blocking selectors client.

    selectors_echo.py server HOST PORT   accept/read/echo with selectors.DefaultSelector (as in the docs)
    selectors_echo.py client HOST PORT   connect_ex + EVENT_WRITE, 2 connections, 100 messages each
"""

import errno
import selectors
import socket
import sys

from payload import blob, digest


def server(host, port):
    sel = selectors.DefaultSelector()

    def accept(sock, mask):
        conn, addr = sock.accept()  # Should be ready
        conn.setblocking(False)
        sel.register(conn, selectors.EVENT_READ, read)

    def read(conn, mask):
        data = conn.recv(1000)  # Should be ready
        if data:
            conn.send(data)  # Hope it won't block
        else:
            sel.unregister(conn)
            conn.close()

    sock = socket.socket()
    sock.bind((host, port))
    sock.listen(100)
    sock.setblocking(False)
    sel.register(sock, selectors.EVENT_READ, accept)
    print("listening", host, port, flush=True)
    try:
        while True:
            events = sel.select()
            for key, mask in events:
                callback = key.data
                callback(key.fileobj, mask)
    except KeyboardInterrupt:
        print("stopped")


def client(host, port):
    """Two connections at once, each sending a message and waiting for its echo before the next."""
    sel = selectors.DefaultSelector()
    state = {}
    for n in range(2):
        s = socket.socket()
        s.setblocking(False)
        err = s.connect_ex((host, port))
        assert err in (0, errno.EINPROGRESS), err
        msgs = [blob(1 + (n * 100 + i) * 37 % 1000, n * 1000 + i) for i in range(100)]
        state[s] = {"n": n, "msgs": msgs, "i": 0, "out": b"", "got": bytearray(), "want": 0, "all": bytearray()}
        sel.register(s, selectors.EVENT_WRITE)
    done = {}
    while len(done) < 2:
        for key, mask in sel.select(timeout=10) or [(None, 0)]:
            if key is None:
                sys.exit("timed out")
            s, st = key.fileobj, state[key.fileobj]
            if mask & selectors.EVENT_WRITE:
                if st["want"] == 0:  # connected (or the previous echo is complete): next message
                    e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    assert e == 0, e
                    st["out"] = st["msgs"][st["i"]]
                    st["want"] = len(st["out"])
                sent = s.send(st["out"])
                st["out"] = st["out"][sent:]
                if not st["out"]:
                    sel.modify(s, selectors.EVENT_READ)
            if mask & selectors.EVENT_READ:
                data = s.recv(4096)
                st["got"] += data
                if not data:  # the server closed early
                    done[st["n"]] = False, "eof"
                    sel.unregister(s)
                    s.close()
                elif len(st["got"]) >= st["want"]:
                    st["all"] += st["got"]
                    ok = bytes(st["got"]) == st["msgs"][st["i"]]
                    st["got"], st["want"] = bytearray(), 0
                    st["i"] += 1
                    if not ok or st["i"] == len(st["msgs"]):
                        done[st["n"]] = ok and st["i"] == len(st["msgs"]), digest(bytes(st["all"]))
                        sel.unregister(s)
                        s.close()
                    else:
                        sel.modify(s, selectors.EVENT_WRITE)
    for n in sorted(done):
        print("connection", n, *done[n])
    sys.exit(0 if all(ok for ok, _ in done.values()) else 1)


if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
