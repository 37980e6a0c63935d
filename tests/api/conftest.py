"""Two stacks over the pipe backend, each with its own Driver on a real clock (tests/api)."""

from __future__ import annotations

import gc
import subprocess
import warnings

import pytest

from ustack.api.clock import MonotonicClock
from ustack.api.driver import Driver
from ustack.backends.pipe import PipeLink
from ustack.stack import Stack

from ..conftest import require_tool

A, B = "198.18.0.1", "198.18.0.2"


@pytest.fixture
def net():
    """(driver A, driver B): A at 198.18.0.1, B at 198.18.0.2, both drivers polling in the background."""
    clock = MonotonicClock()
    link = PipeLink(clock, delay=0.0002)
    a = Stack(link.a, f"{A}/24")
    b = Stack(link.b, f"{B}/24")
    da, db = Driver(a, clock), Driver(b, clock)
    da.start()
    db.start()
    yield da, db
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # a failed test may leave sockets behind
        gc.collect()
    da.close()
    db.close()
    link.close()



@pytest.fixture
def certificate(tmp_path):
    """A throwaway self-signed certificate for 198.18.0.1 (openssl CLI; tools/run installs it)."""
    require_tool("openssl")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=ustack-test",
                    "-addext", f"subjectAltName=IP:{A}"], check=True, capture_output=True)
    return str(cert), str(key)
