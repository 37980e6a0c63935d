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
