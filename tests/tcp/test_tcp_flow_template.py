"""Per-flow cached frame templates (issue 11, _fp_tmpl.pxi): the same frames as the Python emit.

Two runs of one scenario on the pipe network (same seeds, same clock): one with
every connection writing established IPv4 segments from its cached template
(``FlowEmitter``), one through ``Ipv4Layer.emit_tcp`` (no emitter offered).
Every frame both stacks put on the wire must be byte-identical, including
after a neighbour's MAC changes mid-flow (the template is rebuilt with it),
after "fragmentation needed" lowers the MSS mid-flow (RFC 1191), and across
ARP expiry (the template lapses with the entry).
"""

from __future__ import annotations


from ustack import _fastpath
from ustack.transport.tcp.ip_host import TcpOverIp
from tests.stack.netsim import Net

PORT = 5001
OTHER_MAC = b"\x02\x00\x00\x00\x00\x99"


def record_transfer(net, server_addr, on_progress=None):
    """A 300 kB transfer A -> B (listening on ``server_addr``) with every frame on the link recorded.

    ``on_progress(got, marks, frames, client, push)`` runs after each read (``got`` the bytes B has,
    ``push()`` sends A's next chunk), to change the path mid-flow and mark where. Returns (frames on the
    wire, marks, B's flow emitter or None, A's); the data must arrive exactly.
    """
    frames = []
    carry = net.link._carry

    def record(sender, frame):
        frames.append((sender.name, bytes(frame)))
        carry(sender, frame)

    net.link._carry = record
    lst = net.b.tcp.listen((server_addr, PORT), 5)
    client = net.a.tcp.connect(None, (server_addr, PORT), net.clock.now)
    assert net.run(lambda: client.tcb.state.name == "ESTABLISHED", 5)
    server = lst.accept()
    data = bytes(range(256)) * 1200
    got = bytearray()
    sent = 0
    marks = {}

    def push():
        nonlocal sent
        if sent < len(data):
            sent += client.send(data[sent:sent + 20000], net.clock.now)

    while len(got) < len(data):
        push()
        net.run(lambda: False, 0.002)
        got += server.recv(1 << 20, net.clock.now)
        if on_progress is not None:
            on_progress(len(got), marks, frames, client, push)
    assert bytes(got) == data
    return frames, marks, server.out.fast, client.out.fast


def _run(monkeypatch, templates: bool, *, change_mac=False, frag_needed=False, arp_ttl=None):
    """A 300 kB transfer A -> B; returns (frames on the wire, marks, B's flow emitter or None, A's)."""
    with monkeypatch.context() as m:
        if not templates:
            m.delattr(TcpOverIp, "tcp_emitter")
        kw = {"arp_ttl": arp_ttl} if arp_ttl else {}
        # Fixed secrets: both runs pick the same ISNs, ports and IP IDs.
        net = Net(seed=3, a_kw={"isn_secret": b"a" * 16, **kw}, b_kw={"isn_secret": b"b" * 16, **kw})
        a_ip = net.a.ipv4.iface.addr

        def on_progress(got, marks, frames, client, push):
            if change_mac and "mac" not in marks and got > 60000:
                marks["mac"] = len(frames)
                net.b.arp.learn(a_ip, OTHER_MAC, net.clock.now)  # B's ACKs go astray ...
                push()
                net.run(lambda: False, 0.5)  # (A retransmits; B ACKs to the wrong MAC)
                marks["back"] = len(frames)
                net.b.arp.learn(a_ip, net.a.link.mac, net.clock.now)  # ... until it learns A again
            if frag_needed and "pmtu" not in marks and got > 60000:
                marks["pmtu"] = len(frames)
                net.a.tcp.icmp_error(client.local_addr, client.local_port, client.remote_addr, PORT, 3, 4, 1000,
                                     net.clock.now)

        try:
            return record_transfer(net, net.b.ipv4.iface.addr, on_progress)
        finally:
            net.close()


def _differ(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"frame {i} differs: {x[0]} {x[1][:80].hex()} vs {y[0]} {y[1][:80].hex()}"
    return f"{len(a)} frames vs {len(b)}"


def test_templates_write_the_python_paths_frames(monkeypatch):
    fast, _, server_emit, client_emit = _run(monkeypatch, True)
    slow, _, server_slow, _ = _run(monkeypatch, False)
    assert type(server_emit) is _fastpath.FlowEmitter and type(server_slow) is not _fastpath.FlowEmitter
    assert fast == slow, _differ(fast, slow)
    assert server_emit.builds == 1 and client_emit.builds == 1  # built once, then every segment from it
    assert len(fast) > 213 + 20  # the 213 data segments of 307,200 bytes, the handshake and (one per round) ACKs


def test_a_neighbours_new_mac_rebuilds_the_template(monkeypatch):
    fast, marks, server_emit, _ = _run(monkeypatch, True, change_mac=True)
    slow, slow_marks, _, _ = _run(monkeypatch, False, change_mac=True)
    assert marks == slow_marks and fast == slow, _differ(fast, slow)
    assert server_emit.builds == 3  # first use, the wrong MAC, the right one again
    # Between the two learns B's frames went to the new MAC (A dropped them), and after it back to A's.
    astray = [f for who, f in fast[marks["mac"]:marks["back"]] if who == "b"]
    assert astray and all(f[:6] == OTHER_MAC for f in astray)
    assert all(f[:6] == fast[0][1][6:12] or who == "a" for who, f in fast[marks["back"]:])


def test_fragmentation_needed_mid_flow_gives_the_same_frames(monkeypatch):
    fast, marks, _, client_emit = _run(monkeypatch, True, frag_needed=True)
    slow, _, _, _ = _run(monkeypatch, False, frag_needed=True)
    assert fast == slow, _differ(fast, slow)
    after = [len(f) for who, f in fast[marks["pmtu"]:] if who == "a"]
    assert max(after) <= 14 + 1000  # A's segments now fit the reported MTU (RFC 1191)
    assert client_emit.builds == 1


def test_the_template_lapses_with_the_arp_entry(monkeypatch):
    fast, _, server_emit, _ = _run(monkeypatch, True, arp_ttl=0.004)
    slow, _, _, _ = _run(monkeypatch, False, arp_ttl=0.004)
    assert fast == slow, _differ(fast, slow)
    assert server_emit.builds > 2  # rebuilt after each refresh of the entry (stale: the Python lookup polls)


def test_ident_follows_the_per_destination_counter(monkeypatch):
    """The IPv4 ID of a template's frame is the next value of the flow's IpIdents counter (RFC 7739 5.4)."""
    fast, _, _, _ = _run(monkeypatch, True)
    ids = [int.from_bytes(f[18:20], "big") for who, f in fast if who == "b" and f[23] == 6]
    assert all((y - x) & 0xFFFF == 1 for x, y in zip(ids, ids[1:]))


def test_invalidate_rebuilds_with_the_new_ttl():
    """``Ipv4Layer.invalidate`` (a TTL, route or interface change): the next segment is built anew."""
    with Net(seed=3) as net:
        b_ip = net.b.ipv4.iface.addr
        lst = net.b.tcp.listen((b_ip, PORT), 5)
        client = net.a.tcp.connect(None, (b_ip, PORT), net.clock.now)
        assert net.run(lambda: client.tcb.state.name == "ESTABLISHED", 5)
        server = lst.accept()
        frames = []
        carry = net.link._carry
        net.link._carry = lambda sender, frame: (frames.append(bytes(frame)), carry(sender, frame))
        client.send(b"x" * 1000, net.clock.now)
        net.run(lambda: server.recv(1 << 16, net.clock.now) != b"", 1)
        assert frames and frames[0][22] == 64 and client.out.fast.builds == 1
        net.a.ipv4.ttl = 9
        net.a.ipv4.invalidate()
        frames.clear()
        client.send(b"y" * 1000, net.clock.now)
        net.run(lambda: server.recv(1 << 16, net.clock.now) != b"", 1)
        assert frames[0][22] == 9 and client.out.fast.builds == 2
