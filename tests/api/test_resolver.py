"""ustack.api.resolver over the pipe: DNS queries leave through ustack's UDP to a server on the peer stack."""

from __future__ import annotations

import asyncio
import http.client
import http.server
import socket
import socketserver
import struct
import threading
import urllib.request

import pytest

import ustack
from ustack.api.resolver import Resolver
from ustack.api.socket import socket as usocket

from .conftest import A, B
from .dns_server import AAAA, CNAME, PTR, DnsServer, reply
from .dns_server import A as TYPE_A

PORT = 5353  # the server's port (the resolver's ``port=``): any port works on the pipe

ZONE = {
    "www.example.test": [(TYPE_A, 300, "198.18.0.2"), (TYPE_A, 300, "198.18.0.9")],
    "alias.example.test": [(CNAME, 300, "mid.example.test")],
    "mid.example.test": [(CNAME, 300, "www.example.test")],
    "v6.example.test": [(AAAA, 300, "fd00::2"), (TYPE_A, 300, "198.18.0.2")],
    "short.example.test": [(TYPE_A, 0, "198.18.0.7")],
    "2.0.18.198.in-addr.arpa": [(PTR, 300, "peer.example.test")],
}


@pytest.fixture
def dns(net):
    """(resolver on A, the DNS server on B, tmp files): resolv.conf names B, a hosts file of our own."""
    da, db = net
    sock = usocket(db, socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((B, PORT))
    server = DnsServer(sock, ZONE)
    yield da, db, server
    server.close()


def _resolver(da, tmp_path, conf="", hosts="", **kw):
    (tmp_path / "resolv.conf").write_text(f"nameserver {B}\noptions timeout:1 attempts:1\n{conf}")
    (tmp_path / "hosts").write_text(hosts)
    return Resolver(da, hosts_path=str(tmp_path / "hosts"), resolv_conf=str(tmp_path / "resolv.conf"),
                    port=PORT, **kw)


def test_a_records_come_over_ustack_udp_from_our_address_random_id_and_port(dns, tmp_path):
    da, _, server = dns
    r = _resolver(da, tmp_path)
    infos = r.getaddrinfo("www.example.test", 80, socket.AF_INET, socket.SOCK_STREAM)
    assert [i[4] for i in infos] == [("198.18.0.2", 80), ("198.18.0.9", 80)]
    assert infos[0][:3] == (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    r2 = _resolver(da, tmp_path)
    r2.getaddrinfo("www.example.test", 80)
    (src1, port1, id1, name1, t1), (src2, port2, id2, _, _) = server.queries
    assert (src1, name1, t1) == (A, "www.example.test", TYPE_A) and src2 == A  # from ustack, A only (no IPv6)
    assert 32768 <= port1 <= 60999 and 32768 <= port2 <= 60999 and (port1, id1) != (port2, id2)
    for i in range(4):
        _resolver(da, tmp_path).gethostbyname("www.example.test")
    ports = [q[1] for q in server.queries]
    assert [b - a for a, b in zip(ports, ports[1:])] != [1] * 5  # random, not ustack's in-order ephemeral ports
    assert r.stats["dns.query_via_ustack"] == 1 and r.stats["dns.query_via_kernel"] == 0


def test_cname_chain_is_followed_and_gethostbyname_ex_names_the_canonical_host(dns, tmp_path):
    da, _, _ = dns
    r = _resolver(da, tmp_path)
    assert r.gethostbyname_ex("alias.example.test") == ("www.example.test", ["alias.example.test"],
                                                         ["198.18.0.2", "198.18.0.9"])
    infos = r.getaddrinfo("alias.example.test", None, socket.AF_INET, socket.SOCK_STREAM, 0, socket.AI_CANONNAME)
    assert infos[0][3] == "www.example.test"


def test_nxdomain_is_eai_noname_after_the_search_list(dns, tmp_path):
    da, _, server = dns
    r = _resolver(da, tmp_path, conf="search example.test other.test\n")
    with pytest.raises(socket.gaierror) as e:
        r.gethostbyname("nothere")
    assert e.value.errno == socket.EAI_NONAME
    asked = [q[3] for q in server.queries]
    assert asked == ["nothere.example.test", "nothere.other.test", "nothere"]  # ndots 1: the search list first
    assert r.gethostbyname("www") == "198.18.0.2"  # the search list makes www.example.test


def test_dotted_names_are_tried_as_written_first_and_ndots_moves_that(dns, tmp_path):
    da, _, server = dns
    r = _resolver(da, tmp_path, conf="search example.test\noptions ndots:3\n")
    r.gethostbyname("www.example.test")
    assert [q[3] for q in server.queries] == ["www.example.test.example.test", "www.example.test"]
    with pytest.raises(socket.gaierror):
        r.gethostbyname("www.")  # absolute: no search list
    assert server.queries[-1][3] == "www" and len(server.queries) == 3


def test_gethostbyaddr_asks_ptr_over_ustack_and_getfqdn_uses_it_under_patch(dns, tmp_path):
    da, _, server = dns
    r = _resolver(da, tmp_path, hosts="198.18.0.44 box.test box\n")
    assert r.gethostbyaddr("198.18.0.2") == ("peer.example.test", [], ["198.18.0.2"])
    assert server.queries[0][0] == A and server.queries[0][3:] == ("2.0.18.198.in-addr.arpa", PTR)
    assert r.gethostbyaddr("198.18.0.44") == ("box.test", ["box"], ["198.18.0.44"])  # the hosts file: no query
    with pytest.raises(socket.herror) as e:
        r.gethostbyaddr("198.18.0.3")  # NXDOMAIN
    assert e.value.errno == 1 and len(server.queries) == 2
    ustack.patch(da, resolver=r)
    try:
        assert socket.getfqdn("198.18.0.2") == "peer.example.test"
    finally:
        ustack.unpatch()
    assert socket.gethostbyaddr.__module__ == "_socket"


def test_hosts_file_and_numeric_addresses_need_no_query(dns, tmp_path):
    da, _, server = dns
    r = _resolver(da, tmp_path, hosts="# comment\n198.18.0.44  box.test box  # trailing\nfd00::44 box.test\n")
    assert r.gethostbyname("BOX") == "198.18.0.44"
    assert r.gethostbyname_ex("box") == ("box.test", ["box"], ["198.18.0.44"])
    assert [i[4] for i in r.getaddrinfo("box.test", 1, 0, socket.SOCK_DGRAM)] == [("198.18.0.44", 1)]  # no IPv6
    assert r.getaddrinfo("198.18.0.5", "80", 0, socket.SOCK_STREAM)[0][4] == ("198.18.0.5", 80)
    assert r.getaddrinfo("fd00::5", 80, 0, socket.SOCK_STREAM)[0][4][:2] == ("fd00::5", 80)
    assert {i[0] for i in r.getaddrinfo(None, 80, 0, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)} == {socket.AF_INET}
    assert r.gethostbyname("198.18.0.6") == "198.18.0.6"
    assert r.getnameinfo(("198.18.0.6", 80), 0)[0] == "198.18.0.6"
    with pytest.raises(socket.gaierror):
        r.getnameinfo(("198.18.0.6", 80), socket.NI_NAMEREQD)
    with pytest.raises(socket.gaierror) as e:
        r.getaddrinfo("box.test", 80, socket.AF_INET6)
    assert e.value.errno == socket.EAI_FAMILY  # the stack has no IPv6
    (tmp_path / "hosts").write_text("198.18.0.45 box.test\n")  # re-read: its size (and mtime) changed
    assert r.gethostbyname("box.test") == "198.18.0.45"
    assert server.queries == []


def test_answers_are_cached_for_their_ttl_and_the_cache_is_bounded(dns, tmp_path):
    da, _, server = dns
    now = [1000.0]
    r = _resolver(da, tmp_path, clock=lambda: now[0], cache_size=1)
    for _ in range(3):
        assert r.gethostbyname("www.example.test") == "198.18.0.2"
    assert len(server.queries) == 1 and r.stats["dns.cache_hit"] == 2
    now[0] += 301  # past the TTL
    r.gethostbyname("www.example.test")
    assert len(server.queries) == 2
    r.gethostbyname("short.example.test")  # TTL 0: never cached
    r.gethostbyname("short.example.test")
    assert len(server.queries) == 4
    r.gethostbyname("alias.example.test")  # evicts www.example.test (cache_size 1)
    r.gethostbyname("www.example.test")
    assert len(server.queries) == 6


def _script(server, name, make):
    server.script[name] = make


def test_truncated_reply_is_a_clear_error_without_tcp_fallback(dns, tmp_path):
    da, _, server = dns
    _script(server, "big.test", lambda d, qid, n, t: [reply(qid, d[12:], flags=0x8380)])
    r = _resolver(da, tmp_path)
    with pytest.raises(socket.gaierror) as e:
        r.gethostbyname("big.test")
    assert e.value.errno == socket.EAI_FAIL and "TCP" in str(e.value)
    assert r.stats["dns.reply_truncated"] == 1


@pytest.mark.parametrize("bad, counter", [
    (lambda d, qid: b"\x12", "dns.reply_malformed"),  # shorter than a header
    (lambda d, qid: struct.pack("!HHHHHH", qid, 0x8180, 1, 0, 0, 0) + b"\xc0\x0c", "dns.reply_malformed"),  # loop
    (lambda d, qid: reply(qid, d[12:], ancount=40), "dns.reply_malformed"),  # counts past the message
    (lambda d, qid: reply(qid, d[12:], [("x.test", TYPE_A, 5, "1.2.3.4")])[:-2], "dns.reply_malformed"),  # cut
    (lambda d, qid: reply(qid ^ 1, d[12:], [("x.test", TYPE_A, 5, "198.18.0.66")]), "dns.reply_wrong_id"),
    (lambda d, qid: reply(qid, b"\x01y\x04test\x00\x00\x01\x00\x01", [("y.test", TYPE_A, 5, "198.18.0.66")]),
     "dns.reply_wrong_question"),
    (lambda d, qid: d, "dns.reply_malformed"),  # our own query echoed (QR clear)
])
def test_hostile_replies_are_dropped_by_name_and_the_real_answer_still_counts(dns, tmp_path, bad, counter):
    da, _, server = dns
    good = lambda d, qid: reply(qid, d[12:], [("x.test", TYPE_A, 5, "198.18.0.77")])
    _script(server, "x.test", lambda d, qid, n, t: [bad(d, qid), good(d, qid)])
    r = _resolver(da, tmp_path)
    assert r.gethostbyname("x.test") == "198.18.0.77"
    assert r.stats[counter] == 1


def test_only_garbage_is_a_timeout_then_eai_again(dns, tmp_path):
    da, _, server = dns
    _script(server, "junk.test", lambda d, qid, n, t: [b"\xff" * 40])
    r = _resolver(da, tmp_path)  # timeout:1 attempts:1
    with pytest.raises(socket.gaierror) as e:
        r.gethostbyname("junk.test")
    assert e.value.errno == socket.EAI_AGAIN
    assert r.stats["dns.reply_malformed"] == 1 and r.stats["dns.timeout"] == 1


def test_servfail_is_retried_per_attempt_then_eai_again(dns, tmp_path):
    da, _, server = dns
    _script(server, "www.example.test", lambda d, qid, n, t: [reply(qid, d[12:], rcode=2)])
    r = _resolver(da, tmp_path, conf="options attempts:2\n")
    with pytest.raises(socket.gaierror) as e:
        r.gethostbyname("www.example.test")
    assert e.value.errno == socket.EAI_AGAIN and r.stats["dns.reply_rcode_2"] == 2
    assert len(server.queries) == 2 and server.queries[0][2] != server.queries[1][2]  # a new id each time


def test_an_unroutable_nameserver_is_skipped_for_the_next(dns, tmp_path):
    da, _, server = dns
    (tmp_path / "resolv.conf").write_text(f"nameserver 203.0.113.1\nnameserver {B}\noptions timeout:1\n")
    r = Resolver(da, hosts_path=str(tmp_path / "none"), resolv_conf=str(tmp_path / "resolv.conf"), port=PORT)
    assert r.gethostbyname("www.example.test") == "198.18.0.2"  # no gateway: 203.0.113.1 has no route
    assert r.stats["dns.send_error.ENETUNREACH"] == 1 and len(server.queries) == 1


def test_a_loopback_nameserver_is_asked_through_the_kernel(net, tmp_path):
    da, _ = net
    ksock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ksock.bind(("127.0.0.1", 0))
    server = DnsServer(ksock, ZONE)
    try:
        (tmp_path / "resolv.conf").write_text("nameserver 127.0.0.1\n")
        r = Resolver(da, hosts_path=str(tmp_path / "none"), resolv_conf=str(tmp_path / "resolv.conf"),
                     port=ksock.getsockname()[1])
        assert r.gethostbyname("www.example.test") == "198.18.0.2"
        assert server.queries[0][0] == "127.0.0.1" and r.stats["dns.query_via_kernel"] == 1
    finally:
        server.close()


def test_urllib_and_http_client_connect_by_name_under_patch(dns, tmp_path):
    da, db, server = dns
    server.zone["web.example.test"] = [(TYPE_A, 60, B)]

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f"hello {self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer((B, 8080), Hello, bind_and_activate=False)
    httpd.socket.close()
    httpd.socket = usocket(db, socket.AF_INET, socket.SOCK_STREAM)  # the server lives on the peer stack
    socketserver.TCPServer.server_bind(httpd)  # (HTTPServer's would ask getfqdn)
    httpd.server_activate()
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    original = socket.getaddrinfo
    r = _resolver(da, tmp_path)
    ustack.patch(da, resolver=r)
    try:
        assert socket.getaddrinfo is not original
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open("http://web.example.test:8080/by-name", timeout=5) as resp:
            assert resp.read() == b"hello /by-name"
        c = http.client.HTTPConnection("web.example.test", 8080, timeout=5)
        c.request("GET", "/again")
        assert c.getresponse().read() == b"hello /again"
        c.close()
    finally:
        ustack.unpatch()
        httpd.shutdown()
        httpd.server_close()
    assert socket.getaddrinfo is original and socket.gethostbyname.__module__ == "_socket"
    assert [q[:1] + q[3:] for q in server.queries] == [(A, "web.example.test", TYPE_A)]  # once: then the cache


def test_native_asyncio_loop_resolves_through_the_resolver_and_connects_by_name(dns, tmp_path):
    from ustack.api.aio import EventLoop

    da, db, server = dns
    server.zone["echo.example.test"] = [(TYPE_A, 60, B)]
    lst = usocket(db, socket.AF_INET, socket.SOCK_STREAM)
    lst.bind((B, 7007))
    lst.listen()

    def echo_once():
        conn, _ = lst.accept()
        with conn:
            conn.sendall(conn.recv(100).upper())

    t = threading.Thread(target=echo_once, daemon=True)
    t.start()

    async def client():
        reader, writer = await asyncio.open_connection("echo.example.test", 7007)
        writer.write(b"by name")
        data = await reader.readexactly(7)
        writer.close()
        await writer.wait_closed()
        return data

    r = _resolver(da, tmp_path)
    ustack.patch(da, resolver=r)
    loop = EventLoop(da)
    try:
        assert loop.resolver() is r
        infos = loop.run_until_complete(loop.getaddrinfo("www.example.test", 80, type=socket.SOCK_STREAM))
        assert loop.run_until_complete(client()) == b"BY NAME"
    finally:
        loop.close()
        ustack.unpatch()
        t.join(5)
        lst.close()
    assert [i[4] for i in infos] == [("198.18.0.2", 80), ("198.18.0.9", 80)]
    assert [q[0] for q in server.queries] == [A, A] and server.queries[1][3] == "echo.example.test"
    unpatched = EventLoop(da)
    try:
        own = unpatched.resolver()  # unpatched: the loop's own resolver, on its driver
        assert own is not r and isinstance(own, Resolver) and own is unpatched.resolver()
    finally:
        unpatched.close()
    asyncio.set_event_loop(None)


@pytest.fixture
def net6():
    """Two dual-stack stacks over the pipe: A at 198.18.0.1 + fd00::1, B at 198.18.0.2 + fd00::2."""
    from ustack.api.clock import MonotonicClock
    from ustack.api.driver import Driver
    from ustack.backends.pipe import PipeLink
    from ustack.stack import Stack

    clock = MonotonicClock()
    link = PipeLink(clock, delay=0.0002)
    a = Stack(link.a, [f"{A}/24", "fd00::1/64"])
    b = Stack(link.b, [f"{B}/24", "fd00::2/64"])
    da, db = Driver(a, clock), Driver(b, clock)
    da.start()
    db.start()
    for d, addr in ((da, "fd00::1"), (db, "fd00::2")):  # duplicate address detection (RFC 4862 5.4) first
        ours = socket.inet_pton(socket.AF_INET6, addr)
        assert d.wait_until(lambda: d.stack.iface6.is_ours(ours), 10)
    yield da, db
    da.close()
    db.close()
    link.close()


@pytest.mark.parametrize("nameserver", [B, "fd00::2"])
def test_an_ipv6_stack_gets_aaaa_first_then_a_and_can_ask_over_ipv6(net6, tmp_path, nameserver):
    da, db = net6
    family = socket.AF_INET6 if ":" in nameserver else socket.AF_INET
    sock = usocket(db, family, socket.SOCK_DGRAM)
    sock.bind((nameserver, PORT))
    server = DnsServer(sock, ZONE)
    try:
        (tmp_path / "resolv.conf").write_text(f"nameserver {nameserver}\noptions timeout:2 attempts:2\n")
        r = Resolver(da, hosts_path=str(tmp_path / "none"), resolv_conf=str(tmp_path / "resolv.conf"), port=PORT)
        infos = r.getaddrinfo("v6.example.test", 80, 0, socket.SOCK_STREAM)
        assert [(i[0], i[4][0]) for i in infos] == [(socket.AF_INET6, "fd00::2"), (socket.AF_INET, "198.18.0.2")]
        assert [i[4][0] for i in r.getaddrinfo("v6.example.test", 80, socket.AF_INET6, socket.SOCK_STREAM)] == \
            ["fd00::2"]
        assert [(i[0], i[4][0]) for i in r.getaddrinfo("www.example.test", 80, 0, socket.SOCK_STREAM)] == \
            [(socket.AF_INET, "198.18.0.2"), (socket.AF_INET, "198.18.0.9")]  # no AAAA: IPv4 only
        assert r.gethostbyname("v6.example.test") == "198.18.0.2"
        passive = r.getaddrinfo(None, 80, 0, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
        assert {i[0] for i in passive} == {socket.AF_INET, socket.AF_INET6}
        assert {q[4] for q in server.queries} == {TYPE_A, AAAA}
        assert server.queries[0][0] == (A if family == socket.AF_INET else "fd00::1")
    finally:
        server.close()
