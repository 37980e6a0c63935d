"""smtplib against a small SMTP server (socketserver, RFC 5321's minimum): EHLO, MAIL, RCPT, DATA, QUIT.

    smtp_app.py server HOST PORT   accepts any mail; answers DATA with the SHA-256 of the message it got
                                   (dot-unstuffed, RFC 5321 4.5.2)
    smtp_app.py client HOST PORT   two messages on one session, one with lines that start with a dot
"""

import smtplib
import socketserver
import sys

from payload import blob, digest


class SmtpHandler(socketserver.StreamRequestHandler):
    def reply(self, line):
        self.wfile.write(line.encode() + b"\r\n")

    def handle(self):
        self.reply("220 corpus ESMTP")
        for raw in self.rfile:
            verb = raw[:4].upper()
            if verb in (b"EHLO", b"HELO"):
                self.reply("250-corpus greets you")
                self.reply("250 8BITMIME")
            elif verb in (b"MAIL", b"RCPT", b"RSET", b"NOOP"):
                self.reply("250 OK")
            elif verb == b"DATA":
                self.reply("354 End data with <CR><LF>.<CR><LF>")
                lines = []
                for line in self.rfile:
                    if line == b".\r\n":
                        break
                    lines.append(line[1:] if line.startswith(b".") else line)
                self.reply(f"250 OK {digest(b''.join(lines))}")
            elif verb == b"QUIT":
                self.reply("221 Bye")
                return
            else:
                self.reply("502 Command not implemented")


def server(host, port):
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    with socketserver.ThreadingTCPServer((host, port), SmtpHandler) as srv:
        print("listening", host, port, flush=True)
        try:
            srv.serve_forever()
        except KeyboardInterrupt:
            print("stopped")


def message(n):
    body = b"".join(b"." * (i % 3 == 0) + blob(30, 100 * n + i).hex().encode() + b"\r\n" for i in range(400))
    return b"From: a@example.org\r\nTo: b@example.org\r\nSubject: corpus %d\r\n\r\n" % n + body


def client(host, port):
    ok = True
    with smtplib.SMTP(host, port, timeout=10) as smtp:
        code, _ = smtp.ehlo("client.example.org")
        ok = code == 250 and smtp.has_extn("8bitmime")
        for n in range(2):
            msg = message(n)
            smtp.mail("a@example.org")
            smtp.rcpt("b@example.org")
            code, answer = smtp.data(msg)
            good = code == 250 and answer.decode() == f"OK {digest(msg)}"
            ok = ok and good
            print("message", n, code, good, answer.decode())
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
