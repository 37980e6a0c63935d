"""xmlrpc.server.SimpleXMLRPCServer and xmlrpc.client.ServerProxy.

    xmlrpc_app.py server HOST PORT   add, digest and reverse (of Binary), introspection
    xmlrpc_app.py client HOST PORT   calls each, a multicall, and a fault
"""

import sys
import xmlrpc.client
import xmlrpc.server

from payload import blob, digest


def server(host, port):
    with xmlrpc.server.SimpleXMLRPCServer((host, port), logRequests=False) as srv:
        srv.register_introspection_functions()
        srv.register_multicall_functions()
        srv.register_function(lambda a, b: a + b, "add")
        srv.register_function(lambda b: digest(b.data), "digest")
        srv.register_function(lambda b: xmlrpc.client.Binary(b.data[::-1]), "reverse")
        print("listening", host, port, flush=True)
        try:
            srv.serve_forever()
        except KeyboardInterrupt:
            print("stopped")


def client(host, port):
    data = blob(60000, 7)
    with xmlrpc.client.ServerProxy(f"http://{host}:{port}") as proxy:
        ok = proxy.add(2, 40) == 42
        print("add", proxy.add(2, 40))
        d = proxy.digest(xmlrpc.client.Binary(data))
        ok = ok and d == digest(data)
        print("digest", d)
        rev = proxy.reverse(xmlrpc.client.Binary(data)).data
        ok = ok and rev == data[::-1]
        print("reverse", len(rev), digest(rev))
        multi = xmlrpc.client.MultiCall(proxy)
        for i in range(5):
            multi.add(i, i)
        sums = list(multi())
        ok = ok and sums == [0, 2, 4, 6, 8]
        print("multicall", sums)
        print("methods", sorted(m for m in proxy.system.listMethods() if not m.startswith("system.")))
        try:
            proxy.nosuch()
            ok = False
        except xmlrpc.client.Fault as e:
            print("fault", e.faultCode)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    {"server": server, "client": client}[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
