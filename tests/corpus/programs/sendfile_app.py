"""socket.sendfile() of a temporary file, received with recv_into(MSG_WAITALL) and a half-close.

    sendfile_app.py server HOST PORT   per connection: reads "SIZE SEED\n", writes blob(SIZE, SEED) to a
                                       temporary file and sends it with socket.sendfile(), then closes
    sendfile_app.py client HOST PORT   asks for 400000 bytes, reads them with recv_into(MSG_WAITALL), sees EOF
"""

import socket
import sys
import tempfile

from payload import blob, digest


def server(host, port):
    with socket.create_server((host, port)) as listener:
        print("listening", host, port, flush=True)
        try:
            while True:
                conn, _ = listener.accept()
                with conn, conn.makefile("rb") as f, tempfile.TemporaryFile() as tmp:
                    size, seed = map(int, f.readline().split())
                    tmp.write(blob(size, seed))
                    tmp.seek(0)
                    sent = conn.sendfile(tmp)
                    print("sent", sent, flush=True)
        except KeyboardInterrupt:
            print("stopped")


def client(host, port):
    size = 400000
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(f"{size} 21\n".encode())
        s.settimeout(None)  # MSG_WAITALL waits on a blocking socket (a timeout makes the fd non-blocking)
        buf = bytearray(size)
        n = s.recv_into(buf, size, socket.MSG_WAITALL)
        tail = s.recv(1)
    ok = n == size and bytes(buf) == blob(size, 21) and tail == b""
    print("received", n, digest(bytes(buf)), "eof" if tail == b"" else "more")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
