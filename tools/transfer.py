"""``ustack send`` and ``ustack recv``: one TCP transfer from the user-space stack, timed and hashed.

``send`` connects, pushes ``--bytes`` of the deterministic pattern
(ustack.tools.services), half-closes and reads the peer's answer to EOF;
``recv`` accepts one connection (``--listen``) or makes one (``--connect``)
and reads to EOF. Both print one line: bytes, seconds, MB/s, the sha256 of
the data and the peer.
"""

from __future__ import annotations

import hashlib
import socket as std_socket
import sys

from ustack.tools.cli_stack import add_stack_arguments, byte_count, port, start_stack, stop_stack, wait_ipv6_ready


def add_parsers(subparsers) -> None:
    """Add the ``send`` and ``recv`` subcommands to the ``ustack`` command line."""
    send = subparsers.add_parser("send", help="push N bytes of the pattern to HOST:PORT over TCP; print rate and sha256")
    add_stack_arguments(send)
    send.add_argument("--connect", required=True, metavar="HOST:PORT")
    send.add_argument("--bytes", type=byte_count, default=100_000_000, metavar="N")
    send.set_defaults(func=cmd_send)
    recv = subparsers.add_parser("recv", help="accept (or make) one TCP connection, read to EOF; print rate and sha256")
    add_stack_arguments(recv)
    where = recv.add_mutually_exclusive_group(required=True)
    where.add_argument("--listen", type=port, metavar="PORT", help="accept one connection on PORT")
    where.add_argument("--connect", metavar="HOST:PORT", help="connect out and read what the server sends")
    recv.set_defaults(func=cmd_recv)


def _report(nbytes: int, seconds: float, digest: str, peer) -> None:
    rate = nbytes / seconds / 1e6 if seconds > 0 else 0.0
    host = f"[{peer[0]}]" if ":" in peer[0] else peer[0]
    print(f"bytes {nbytes} seconds {seconds:.3f} MB/s {rate:.2f} sha256 {digest} peer {host}:{peer[1]}",
          flush=True)


def _host_port(text: str, name: str):
    """"HOST:PORT" or "[V6]:PORT" -> (host, port), or None after saying what is wrong."""
    host, _, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        host = ""  # an IPv6 address needs its brackets: [fd00::1]:5001
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        print(f"ustack {name}: --connect wants HOST:PORT, not {text!r}", file=sys.stderr)
        return None
    return host, int(port)


def _family(host: str) -> int:
    return std_socket.AF_INET6 if ":" in host else std_socket.AF_INET


def cmd_send(args) -> int:
    """Run ``ustack send``: connect to ``--connect HOST:PORT`` and send ``--bytes`` bytes.

    Args:
        args: the parsed arguments.

    Returns:
        0 when all was sent and closed, 1 when the transfer failed, 2 for a bad target or a stack
        that could not start, 130 after Ctrl-C.
    """
    from ustack.tools.services import PATTERN_BLOCK
    from ustack.api.socket import socket as usocket

    target = _host_port(args.connect, "send")
    if target is None:
        return 2
    host, port = target
    started = start_stack(args, "send")
    if started is None:
        return 2
    stack, driver, _ = started
    clock = driver.clock
    left = args.bytes
    try:
        with usocket(driver, _family(host)) as s:
            s.settimeout(30)
            wait_ipv6_ready(stack, driver)
            print(f"ustack send: connecting to {host}:{port}", file=sys.stderr, flush=True)
            try:
                s.connect((host, port))
            except OSError as e:
                print(f"ustack send: connect {args.connect}: {e.strerror or e}", file=sys.stderr)
                return 1
            h = hashlib.sha256()
            t0 = clock()
            while left:
                chunk = memoryview(PATTERN_BLOCK)[:min(left, len(PATTERN_BLOCK))]
                s.sendall(chunk)
                h.update(chunk)
                left -= len(chunk)
            s.shutdown(1)  # half-close: the peer may still answer
            s.settimeout(60)
            reply = bytearray()
            while True:  # read until the peer's FIN: every byte was taken
                d = s.recv(65536)
                if not d:
                    break
                if len(reply) < 4096:
                    reply += d[:4096 - len(reply)]
            _report(args.bytes, clock() - t0, h.hexdigest(), s.getpeername())
            if reply:
                print(f"reply {bytes(reply).decode(errors='replace').strip()}", flush=True)
            info = s.tcp_info()
            print(f"retransmits {info.retransmits} srtt_ms {info.srtt * 1000:.3f} cwnd {info.cwnd}", flush=True)
        return 0
    except (OSError, TimeoutError) as e:
        print(f"ustack send: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"ustack send: interrupted after {args.bytes - left} of {args.bytes} bytes", file=sys.stderr)
        return 130
    finally:
        stop_stack(stack)


def cmd_recv(args) -> int:
    """Run ``ustack recv``: accept on ``--listen PORT`` (or connect) and count what arrives.

    Args:
        args: the parsed arguments.

    Returns:
        0 after a whole transfer, 1 when it failed, 2 for a bad target or a stack that could not
        start, 130 after Ctrl-C.
    """
    from ustack.api.socket import socket as usocket

    target = _host_port(args.connect, "recv") if args.connect else None
    if args.connect and target is None:
        return 2
    started = start_stack(args, "recv")
    if started is None:
        return 2
    stack, driver, _ = started
    clock = driver.clock
    try:
        v6 = stack.ipv6 is not None
        with usocket(driver, std_socket.AF_INET6 if v6 and target is None else std_socket.AF_INET) as srv:
            wait_ipv6_ready(stack, driver)
            if target is not None:
                conn = usocket(driver, _family(target[0]))
                conn.settimeout(30)
                try:
                    conn.connect(target)
                except OSError as e:
                    print(f"ustack recv: connect {args.connect}: {e.strerror or e}", file=sys.stderr)
                    return 1
                peer = conn.getpeername()
            else:
                srv.bind(("::" if v6 else "0.0.0.0", args.listen))  # :: is dual-stack
                srv.listen(1)
                print("listening", flush=True)
                conn, peer = srv.accept()
            h = hashlib.sha256()
            n = 0
            buf = bytearray(1 << 18)
            t0 = clock()
            with conn:
                conn.settimeout(60)
                while True:
                    k = conn.recv_into(buf)
                    if not k:
                        break
                    h.update(memoryview(buf)[:k])
                    n += k
            _report(n, clock() - t0, h.hexdigest(), peer)
        return 0
    except (OSError, TimeoutError) as e:
        print(f"ustack recv: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("ustack recv: interrupted", file=sys.stderr)
        return 130
    finally:
        stop_stack(stack)
