"""tools/cpython_suites.py: regrtest's JUnit XML read right, the comparison, and a short run both ways."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from ustack.tools.cpython_suites import ERROR, FAIL, MISSING, PASS, SKIP, command, compare, parse_junit

XML = """<testsuites><testsuite name="x">
<testcase name="test.m.A.test_ok" status="run" result="completed" />
<testcase name="test.m.A.test_bad" status="run"><failure message="boom">Traceback (most recent call last):
  File "x.py", line 1
AssertionError: 1 != 2</failure></testcase>
<testcase name="test.m.A.test_err" status="run"><error message="oops">Traceback:
OSError: [Errno 98] Address already in use</error></testcase>
<testcase name="test.m.A.test_skip" status="run"><skipped message="needs IPv6">needs IPv6</skipped></testcase>
</testsuite></testsuites>"""


def test_parse_junit_statuses_and_the_line_that_says_why(tmp_path):
    path = tmp_path / "r.xml"
    path.write_text(XML)
    assert parse_junit(str(path)) == {
        "test.m.A.test_ok": (PASS, ""), "test.m.A.test_bad": (FAIL, "AssertionError: 1 != 2"),
        "test.m.A.test_err": (ERROR, "OSError: [Errno 98] Address already in use"),
        "test.m.A.test_skip": (SKIP, "needs IPv6")}


def test_compare_counts_only_what_passes_on_the_kernel():
    kernel = {"status": "ok", "seconds": 1, "tests": {"a": (PASS, ""), "b": (PASS, ""), "c": (SKIP, "x"),
                                                     "d": (PASS, "")}}
    ustack = {"status": "hung", "seconds": 2, "tests": {"a": (PASS, ""), "b": (FAIL, "why"), "c": (PASS, "")}}
    r = compare(kernel, ustack)
    assert (r["kernel_pass"], r["ustack_pass"]) == (3, 1)
    assert r["differences"] == [{"test": "b", "ustack": FAIL, "message": "why"},
                                {"test": "d", "ustack": MISSING, "message": "not run on ustack (module hung)"}]
    assert r["ustack_only_pass"] == ["c"]
    assert command("test_x", "o.xml", True)[1:5] == ["-m", "ustack", "run", "--backend"]
    assert "--loopback" in command("test_x", "o.xml", True)


@pytest.mark.skipif(importlib.util.find_spec("test.test_socketserver") is None,
                    reason="the interpreter's test package is not installed")
def test_a_few_socketserver_cases_pass_both_ways(tmp_path):
    out = tmp_path / "r.json"
    subprocess.run([sys.executable, "-m", "ustack.tools.cpython_suites", "--modules", "test_socketserver",
                    "--match", "test_TCPServer", "--match", "test_UDPServer", "--timeout", "60",
                    "--out", str(tmp_path), "--json", str(out)], check=True, timeout=150, capture_output=True)
    r = json.loads(out.read_text())["results"]["test_socketserver"]
    assert (r["kernel_pass"], r["ustack_pass"], r["differences"]) == (2, 2, [])
    log = json.loads(out.read_text())["raw"]["test_socketserver"]["ustack"]["log"]
    assert "Traceback" not in open(log).read()


def test_a_hung_test_is_recorded_and_the_run_repeated_without_it(tmp_path, monkeypatch):
    from ustack.tools import cpython_suites as cs
    log = tmp_path / "u.log"
    log.write_text("test_a (test.m.A.test_a) ... ok\n"
                   "test_b (test.m.A.test_b) ... Timeout (0:02:00)!\nThread 0x1 (most recent call first):\n")
    assert cs.hung_test(str(log)) == "test.m.A.test_b"
    other = tmp_path / "v.log"
    other.write_text("test_c (test.m.A.test_c) ... ERROR\nTimeout (0:01:00)!\n")
    assert cs.hung_test(str(other)) == "test.m.A.test_c"
    calls = []

    def run_once(module, ustack, timeout, path, extra, test_timeout):
        calls.append(list(extra))
        if len(calls) == 1:
            return {"status": cs.HUNG, "returncode": 1, "seconds": 3.0, "tests": {}, "log": str(log)}
        return {"status": "ok", "returncode": 0, "seconds": 2.0, "tests": {"test.m.A.test_a": (PASS, "")},
                "log": ""}
    monkeypatch.setattr(cs, "run_once", run_once)
    r = cs.run_unit("test_m", True, 60, str(tmp_path / "u"), ["-m", "A"], 120)
    assert calls == [["-m", "A"], ["-m", "A", "-i", "test.m.A.test_b"]]
    assert r["tests"] == {"test.m.A.test_a": (PASS, ""),
                          "test.m.A.test_b": (cs.HUNG, "no result within 120 s (regrtest --timeout)")}
    assert (r["status"], r["seconds"]) == ("failed", 5.0)


def test_test_socket_runs_class_by_class(tmp_path, monkeypatch):
    from ustack.tools import cpython_suites as cs
    seen = []

    def run_unit(module, ustack, timeout, path, extra, test_timeout):
        seen.append(extra[1])
        return {"status": "ok", "returncode": 0, "seconds": 1.0, "tests": {f"t.{extra[1]}.x": (PASS, "")},
                "log": ""}
    monkeypatch.setattr(cs, "run_unit", run_unit)
    r = cs.run_module("test_socket", False, 60, str(tmp_path))
    assert seen == list(cs.SOCKET_CLASSES) and "BasicTCPTest" in seen and "BasicUDPTest" in seen
    assert len(r["tests"]) == len(cs.SOCKET_CLASSES) and r["status"] == "ok"
