"""A threaded chat: one thread per client, every line broadcast to every client.

    threaded_chat.py server HOST PORT   socket.create_server + threads; "HELLO name" joins, lines are
                                        relayed as "name: text" to everyone (the sender too)
    threaded_chat.py client HOST PORT   three members join, wait for the full room, each says 30 lines,
                                        each must hear all 90 lines in every sender's order
"""

import socket
import sys
import threading

from payload import blob


def server(host, port):
    members, lock = {}, threading.Lock()

    def serve(conn):
        f = conn.makefile("rwb")
        name = f.readline().split()[1].decode()
        with lock:
            members[name] = f
            count = len(members)
        broadcast(f"* {name} joined ({count})\n".encode())
        for line in f:
            broadcast(f"{name}: ".encode() + line)
        with lock:
            del members[name]
        f.close()
        conn.close()

    def broadcast(line):
        with lock:
            for f in members.values():
                f.write(line)
                f.flush()

    with socket.create_server((host, port)) as listener:
        print("listening", host, port, flush=True)
        try:
            while True:
                conn, _ = listener.accept()
                threading.Thread(target=serve, args=(conn,), daemon=True).start()
        except KeyboardInterrupt:
            print("stopped")


def said(name, i):
    return blob(20 + i, len(name) * 1000 + ord(name[0]) + i).hex()


def client(host, port):
    names = ["ann", "bob", "cyd"]
    heard, ready = {}, threading.Barrier(3)

    def member(name):
        with socket.create_connection((host, port), timeout=10) as s:
            f = s.makefile("rwb")
            f.write(f"HELLO {name}\n".encode())
            f.flush()
            while not f.readline().endswith(b" joined (3)\n"):  # everyone is in once a third joined
                pass
            ready.wait()
            lines = []

            def listen():
                while len(lines) < 90:
                    line = f.readline()
                    if not line:
                        break
                    lines.append(line.decode().rstrip("\n"))

            t = threading.Thread(target=listen)
            t.start()
            for i in range(30):
                f.write(f"{said(name, i)}\n".encode())
                f.flush()
            t.join(20)
            heard[name] = lines
            s.shutdown(socket.SHUT_WR)

    threads = [threading.Thread(target=member, args=(name,)) for name in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = len(heard) == 3
    for name in names:
        lines = heard.get(name, [])
        for speaker in names:
            mine = [l.split(": ", 1)[1] for l in lines if l.startswith(speaker + ": ")]
            good = mine == [said(speaker, i) for i in range(30)]
            ok = ok and good
        print(name, "heard", len(lines), ok)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
