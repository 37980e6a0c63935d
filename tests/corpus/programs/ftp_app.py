"""ftplib against a small passive-mode FTP server (socketserver): a control connection plus one data
connection per transfer.

    ftp_app.py server HOST PORT   USER/PASS/TYPE/PASV/RETR/STOR/SIZE/QUIT (RFC 959, passive mode only);
                                  RETR blob-N-S sends blob(N, S), other names what was stored under them
    ftp_app.py client HOST PORT   ftplib.FTP: login, RETR a blob, STOR it reversed, SIZE, RETR it back
"""

import ftplib
import io
import socket
import socketserver
import sys
import threading

from payload import blob, digest


class FtpHandler(socketserver.StreamRequestHandler):
    files = {}
    lock = threading.Lock()

    def reply(self, line):
        self.wfile.write(line.encode() + b"\r\n")

    def content(self, name):
        if name.startswith("blob-"):
            _, size, seed = name.split("-")
            return blob(int(size), int(seed))
        with self.lock:
            return self.files.get(name)

    def handle(self):
        self.reply("220 corpus FTP ready")
        passive = None
        for raw in self.rfile:
            cmd, _, arg = raw.decode("ascii").strip().partition(" ")
            cmd = cmd.upper()
            if cmd == "USER":
                self.reply("331 Password required")
            elif cmd == "PASS":
                self.reply("230 Logged in")
            elif cmd == "TYPE":
                self.reply("200 Type set")
            elif cmd == "PASV":
                host = self.connection.getsockname()[0]
                passive = socket.create_server((host, 0))
                port = passive.getsockname()[1]
                self.reply(f"227 Entering Passive Mode ({host.replace('.', ',')},{port >> 8},{port & 255})")
            elif cmd == "SIZE":
                body = self.content(arg)
                self.reply("550 No such file" if body is None else f"213 {len(body)}")
            elif cmd in ("RETR", "STOR") and passive is None:
                self.reply("425 Use PASV first")
            elif cmd == "RETR":
                body = self.content(arg)
                if body is None:
                    self.reply("550 No such file")
                    continue
                self.reply("150 Opening data connection")
                conn, _ = passive.accept()
                with conn:
                    conn.sendall(body)
                passive.close()
                passive = None
                self.reply("226 Transfer complete")
            elif cmd == "STOR":
                self.reply("150 Ready to receive")
                conn, _ = passive.accept()
                data = bytearray()
                with conn:
                    while chunk := conn.recv(65536):
                        data += chunk
                passive.close()
                passive = None
                with self.lock:
                    self.files[arg] = bytes(data)
                self.reply(f"226 Stored {len(data)} bytes")
            elif cmd == "QUIT":
                self.reply("221 Goodbye")
                return
            else:
                self.reply("502 Command not implemented")


def server(host, port):
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    with socketserver.ThreadingTCPServer((host, port), FtpHandler) as srv:
        print("listening", host, port, flush=True)
        try:
            srv.serve_forever()
        except KeyboardInterrupt:
            print("stopped")


def client(host, port):
    ftp = ftplib.FTP()
    ftp.connect(host, port, timeout=10)
    ftp.login("anonymous", "corpus@")
    got = bytearray()
    ftp.retrbinary("RETR blob-250000-31", got.extend, blocksize=8192)
    ok = bytes(got) == blob(250000, 31)
    print("retr", len(got), digest(bytes(got)))
    print("stor", ftp.storbinary("STOR upload.bin", io.BytesIO(bytes(got[::-1]))))
    size = ftp.size("upload.bin")
    back = bytearray()
    ftp.retrbinary("RETR upload.bin", back.extend)
    ok = ok and size == len(got) and bytes(back) == bytes(got[::-1])
    print("size", size, "back", len(back), digest(bytes(back)))
    print("quit", ftp.quit())
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
