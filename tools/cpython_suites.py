"""Run CPython's own network test suites on the kernel and under ``ustack run --loopback``, and compare.

    python -m ustack.tools.cpython_suites [--modules M ...] [--timeout S] [--test-timeout S] [--out DIR] [--json FILE]

Each test module runs twice in a subprocess of its own, ``python -m test
-u network --junit-xml ...``: once as is (the kernel's loopback), once as
``python -m ustack run --backend pipe --addr 198.18.0.2/24 --loopback
-m test ...`` (127/8 and ::1 on ustack's in-process loopback interface;
the suites' wildcard servers are on both stacks, ``ustack.api.wildcard``).
Each test has a deadline (``--test-timeout``, regrtest's ``--timeout``:
faulthandler dumps the stacks and ends the process); the test that ran
past it is read from the verbose log, reported as hung, and the run is
repeated without it (``-i``), up to ``MAX_RERUNS`` times. A whole run
past ``--timeout`` seconds is killed and reported as hung (its partial
results are lost: regrtest writes the XML at the end).
test_socket runs one class at a time (``-m Class``), only the classes that
concern AF_INET/AF_INET6 TCP and UDP (``SOCKET_CLASSES``), so a hang costs
one class, not the module.
The tests come with the interpreter (Debian: libpython3.X-testsuite); none
is copied here.

The report: per module, the tests that pass on the kernel and how many of
them pass on ustack, then a table of every test that passes on the kernel
and not on ustack with the first line of its failure. ``--json`` writes
all of it (per test: kernel status, ustack status, message).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

# The list: the judged modules first, then test_socket (AF_INET TCP/UDP is what concerns ustack).
JUDGED = ("test_socketserver", "test_httplib", "test_xmlrpc", "test_urllib2_localnet", "test_ftplib",
          "test_poplib", "test_smtplib", "test_selectors", "test_asyncio.test_streams",
          "test_asyncio.test_sock_lowlevel", "test_asyncio.test_server", "test_asyncio.test_sslproto",
          "test_asyncio.test_events", "test_asyncio.test_ssl", "test_ssl")
MODULES = JUDGED + ("test_socket",)
# test_socket's classes about IPv4/IPv6 TCP and UDP sockets and the module functions around them (not
# AF_UNIX, socketpair, CAN, RDS, TIPC, VSOCK, ALG, SCTP, UDPLITE, SCM_RIGHTS, RFC 3542 ancillary data).
SOCKET_CLASSES = (
    "GeneralModuleTests", "TestExceptions", "BasicTCPTest", "BasicTCPTest2", "BasicUDPTest",
    "TCPCloserTest", "NonBlockingTCPTests", "TCPTimeoutTest", "UDPTimeoutTest",
    "FileObjectClassTestCase", "UnbufferedFileObjectClassTestCase", "LineBufferedFileObjectClassTestCase",
    "SmallBufferedFileObjectClassTestCase", "UnicodeReadFileObjectClassTestCase",
    "UnicodeWriteFileObjectClassTestCase", "UnicodeReadWriteFileObjectClassTestCase",
    "NetworkConnectionNoServer", "NetworkConnectionAttributesTest", "NetworkConnectionBehaviourTest",
    "SendmsgTCPTest", "RecvmsgTCPTest", "RecvmsgIntoTCPTest",
    "SendmsgUDPTest", "RecvmsgUDPTest", "RecvmsgIntoUDPTest",
    "SendmsgUDP6Test", "RecvmsgUDP6Test", "RecvmsgIntoUDP6Test",
    "InterruptedRecvTimeoutTest", "InterruptedSendTimeoutTest",
    "BufferIOTest", "ContextManagersTest", "InheritanceTest", "NonblockConstantTest",
    "SendfileUsingSendTest", "SendfileUsingSendfileTest", "CreateServerTest", "CreateServerFunctionalTest")
# modules run one regrtest process per class
SPLIT = {"test_socket": SOCKET_CLASSES}
USTACK_ARGS = ("--backend", "pipe", "--addr", "198.18.0.2/24", "--loopback")
DEFAULT_TIMEOUT = 900.0
DEFAULT_TEST_TIMEOUT = 120.0
MAX_RERUNS = 4
HUNG = "hung"
PASS, FAIL, ERROR, SKIP, MISSING = "pass", "fail", "error", "skip", "missing"


def command(module: str, xml_path: str, ustack: bool, extra=(), test_timeout: float = 0) -> list[str]:
    """The command line that runs ``module`` with regrtest, on the kernel or under ``ustack run``."""
    test = ["-m", "test", "-u", "network", "-v", "--timeout", str(test_timeout), "--junit-xml", xml_path,
            *extra, module]
    if not ustack:
        return [sys.executable, *test]
    return [sys.executable, "-m", "ustack", "run", *USTACK_ARGS, *test]


def parse_junit(path: str) -> dict[str, tuple[str, str]]:
    """test id ("module.Class.test") -> (status, first line of the message) from regrtest's JUnit XML."""
    out: dict[str, tuple[str, str]] = {}
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        name = case.get("name", "")
        status, message = PASS, ""
        for child in case:
            tag = child.tag
            if tag in ("failure", "error", "skipped"):
                status = {"failure": FAIL, "error": ERROR, "skipped": SKIP}[tag]
                text = child.get("message") or (child.text or "")
                lines = [ln for ln in text.strip().splitlines() if ln.strip()]
                if tag != "skipped" and child.text:
                    # the traceback's last line says what went wrong
                    tb = [ln for ln in child.text.strip().splitlines() if ln.strip()]
                    lines = tb[-1:] or lines
                message = lines[0][:200] if lines else ""
                break
        out[name] = (status, message)
    return out


def hung_test(log_path: str) -> str | None:
    """The test id regrtest's per-test timeout fired in: the last "name (id) ... " line of the verbose log
    before its "Timeout (" line."""
    try:
        with open(log_path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    last = None
    for line in text.splitlines():
        if " ... " in line:
            head = line.split(" ... ", 1)[0]
            if head.endswith(")") and "(" in head:
                last = head[head.rindex("(") + 1:-1]
        if "Timeout (" in line:
            return last
    return None


def run_once(module: str, ustack: bool, timeout: float, path: str, extra, test_timeout: float) -> dict:
    """One regrtest process: {"status": ok|failed|hung|crashed, "returncode", "seconds", "tests", "log"}."""
    xml_path, log_path = path + ".xml", path + ".log"
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command(module, xml_path, ustack, extra, test_timeout), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout)
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # the module's own threads and children too
            proc.wait()
            rc, status = None, HUNG
    tests = {}
    if os.path.exists(xml_path):
        try:
            tests = parse_junit(xml_path)
        except ET.ParseError:
            status = "crashed"
    elif status != HUNG:
        status = HUNG if hung_test(log_path) else "crashed"
    return {"status": status, "returncode": rc, "seconds": round(time.monotonic() - start, 1), "tests": tests,
            "log": log_path}


def run_unit(module: str, ustack: bool, timeout: float, path: str, extra, test_timeout: float) -> dict:
    """Run until no test hangs: each hung test is recorded and left out (``-i``) of the next run."""
    hung: dict[str, tuple[str, str]] = {}
    seconds = 0.0
    for attempt in range(MAX_RERUNS + 1):
        ignore = [x for t in hung for x in ("-i", t)]
        r = run_once(module, ustack, timeout, f"{path}.{attempt}" if attempt else path, [*extra, *ignore],
                     test_timeout)
        seconds += r["seconds"]
        test = hung_test(r["log"]) if r["status"] == HUNG else None
        if test is None or test in hung:
            break
        hung[test] = (HUNG, f"no result within {test_timeout:g} s (regrtest --timeout)")
    r["tests"] = {**r["tests"], **hung}
    r["seconds"] = round(seconds, 1)
    if hung and r["status"] in ("ok", "failed"):
        r["status"] = "failed"
    return r


def run_module(module: str, ustack: bool, timeout: float, workdir: str, extra=(),
               test_timeout: float = DEFAULT_TEST_TIMEOUT) -> dict:
    """Run one module one way (class by class for ``SPLIT`` modules); the results merged."""
    base = os.path.join(workdir, f"{module}.{'ustack' if ustack else 'kernel'}")
    units = SPLIT.get(module)
    if not units or extra:  # an explicit --match selects by itself
        return run_unit(module, ustack, timeout, base, list(extra), test_timeout)
    merged = {"status": "ok", "returncode": 0, "seconds": 0.0, "tests": {}, "log": base + ".*.log"}
    for cls in units:
        r = run_unit(module, ustack, timeout, f"{base}.{cls}", ["-m", cls], test_timeout)
        merged["tests"].update(r["tests"])
        merged["seconds"] = round(merged["seconds"] + r["seconds"], 1)
        if r["status"] != "ok" and merged["status"] in ("ok", "failed"):
            merged["status"], merged["returncode"] = r["status"], r["returncode"]
    return merged


def compare(kernel: dict, ustack: dict) -> dict:
    """Per module: the tests passing on the kernel, how many pass on ustack, and each difference."""
    k_tests, u_tests = kernel["tests"], ustack["tests"]
    passing = sorted(t for t, (s, _) in k_tests.items() if s == PASS)
    diffs = []
    for t in passing:
        status, message = u_tests.get(t, (MISSING, f"not run on ustack (module {ustack['status']})"))
        if status != PASS:
            diffs.append({"test": t, "ustack": status, "message": message})
    return {"kernel_pass": len(passing), "ustack_pass": len(passing) - len(diffs), "differences": diffs,
            "kernel_status": kernel["status"], "ustack_status": ustack["status"],
            "kernel_seconds": kernel["seconds"], "ustack_seconds": ustack["seconds"],
            "ustack_only_pass": sorted(t for t, (s, _) in u_tests.items()
                                       if s == PASS and k_tests.get(t, (MISSING,))[0] != PASS)}


def render(results: dict) -> str:
    lines = [f"{'module':34} {'kernel':>7} {'ustack':>7} {'share':>7}  kernel/ustack run (s)"]
    totals = {"judged": [0, 0], "all": [0, 0]}
    for module, r in results.items():
        k, u = r["kernel_pass"], r["ustack_pass"]
        share = f"{100.0 * u / k:6.1f}%" if k else "     -"
        lines.append(f"{module:34} {k:7d} {u:7d} {share:>7}  {r['kernel_seconds']}/{r['ustack_seconds']}"
                     f"{'' if r['ustack_status'] in ('ok', 'failed') else '  (' + r['ustack_status'] + ')'}")
        for key in ("all",) + (("judged",) if module in JUDGED else ()):
            totals[key][0] += k
            totals[key][1] += u
    for key, (k, u) in totals.items():
        if k:
            lines.append(f"{'total ' + key:34} {k:7d} {u:7d} {100.0 * u / k:6.1f}%")
    lines.append("")
    lines.append("passes on the kernel, not on ustack:")
    for module, r in results.items():
        for d in r["differences"]:
            lines.append(f"  {d['test']}: {d['ustack']}: {d['message']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ustack.tools.cpython_suites", description=__doc__.split("\n")[0])
    p.add_argument("--modules", nargs="+", default=list(MODULES), metavar="MODULE")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help="seconds per regrtest run (a module, or a class of a split module) and way")
    p.add_argument("--test-timeout", type=float, default=DEFAULT_TEST_TIMEOUT,
                   help="seconds per test (regrtest --timeout); a hung test is recorded and left out")
    p.add_argument("--match", action="append", default=[], metavar="PAT", help="regrtest -m PAT (repeatable)")
    p.add_argument("--out", help="folder for the XML and logs (default: a temporary one, kept)")
    p.add_argument("--json", help="write the comparison here")
    p.add_argument("--kernel-json", help="reuse the kernel side of an earlier --json instead of running it")
    p.add_argument("--kernel-only", action="store_true", help="run the kernel side only (for --kernel-json)")
    args = p.parse_args(argv)
    workdir = args.out or tempfile.mkdtemp(prefix="cpython_suites.")
    os.makedirs(workdir, exist_ok=True)
    extra = [x for pat in args.match for x in ("-m", pat)]
    earlier = {}
    if args.kernel_json:
        with open(args.kernel_json) as f:
            earlier = json.load(f).get("raw", {})
    results, raw = {}, {}
    for module in args.modules:
        if module in earlier:
            kernel = earlier[module]["kernel"]
            kernel["tests"] = {t: tuple(v) for t, v in kernel["tests"].items()}
        else:
            kernel = run_module(module, False, args.timeout, workdir, extra, args.test_timeout)
        if args.kernel_only:
            ustack = {"status": "not run", "returncode": None, "seconds": 0, "tests": {}, "log": ""}
        else:
            ustack = run_module(module, True, args.timeout, workdir, extra, args.test_timeout)
        results[module] = compare(kernel, ustack)
        raw[module] = {"kernel": kernel, "ustack": ustack}
        r = results[module]
        print(f"{module}: kernel {r['kernel_pass']} pass ({kernel['status']}, {kernel['seconds']} s), "
              f"ustack {r['ustack_pass']} of them ({ustack['status']}, {ustack['seconds']} s)", flush=True)
        if args.json:  # after each module, so a long run can be read (and its kernel side reused) meanwhile
            with open(args.json, "w") as f:
                json.dump({"results": results, "raw": raw}, f, indent=1)
    print(render(results))
    print(f"(XML and logs in {workdir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
