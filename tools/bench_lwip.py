"""The lwIP row of ``ustack bench``: a C reference stack on a TAP, serving what ``ustack serve`` serves.

``lwip_server.c`` (beside this module) is lwIP's raw API over our own small
TAP driver, with the bench's four services (UDP echo, TCP echo, discard and
a pattern source). It is compiled on first use with the system's C compiler
against Debian's ``liblwip-dev`` (``pkg-config lwip``) into a cache
directory keyed by the source's hash, so an edited source is rebuilt and an
unchanged one is not. ``lwip_problem()`` says why the row cannot run (no
compiler, no liblwip-dev, a build error); ``lwip_server()`` starts it in the
topology's stack namespace as a bench ``Server``.

    apt-get install liblwip-dev     # Debian/Ubuntu: headers + the shared library
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

from ustack.tools.bench_config import TCP_DISCARD, TCP_ECHO, TCP_SOURCE, UDP_ECHO

SOURCE = Path(__file__).with_name("lwip_server.c")


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ustack"


def _pkg_config() -> tuple[list[str], list[str]]:
    """(cflags, libs) of lwIP from pkg-config; raises LookupError with the reason."""
    if shutil.which("pkg-config") is None:
        raise LookupError("pkg-config is not installed")
    flags = []
    for what in ("--cflags", "--libs"):
        done = subprocess.run(["pkg-config", what, "lwip"], capture_output=True, text=True)
        if done.returncode:
            raise LookupError("liblwip-dev is not installed (apt-get install liblwip-dev)")
        flags.append(done.stdout.split())
    return flags[0], flags[1]


def build() -> Path:
    """The compiled server, built now if the cache has none for this source. Raises LookupError."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        raise LookupError("no C compiler (cc/gcc) found")
    cflags, libs = _pkg_config()
    text = SOURCE.read_bytes()
    key = hashlib.sha256(text + " ".join(cflags + libs).encode()).hexdigest()[:16]
    target = _cache_dir() / f"lwip_server-{key}"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / "lwip_server"
        done = subprocess.run([cc, "-O2", *cflags, str(SOURCE), "-o", str(out), *libs, "-lpthread"],
                              capture_output=True, text=True)
        if done.returncode:
            first = (done.stderr.strip().splitlines() or ["(no output)"])[0]
            raise LookupError(f"building lwip_server failed: {first}")
        os.replace(out, target)  # atomic: a concurrent bench sees the whole file or none
    return target


def lwip_problem() -> Optional[str]:
    """Why the lwIP row cannot run, or None."""
    try:
        build()
    except LookupError as exc:
        return str(exc)
    except OSError as exc:
        return f"cannot build lwip_server: {exc}"
    return None


def lwip_server(topo, source_bytes: int, busy: bool = False):
    """lwIP on the topology's TAP (stack address, ``TAP_STACK_MAC``); returns (server, mode)."""
    from ustack.tools.bench_servers import Server
    from ustack.tools.netns import TAP_STACK_MAC

    argv = [str(build()), topo.stack_ifname, topo.stack_addr, str(topo.prefixlen), TAP_STACK_MAC.hex(":"),
            str(UDP_ECHO), str(TCP_ECHO), str(TCP_DISCARD), str(TCP_SOURCE), str(source_bytes)]
    if busy:
        argv.append("busy")
    server = Server(topo, argv)
    server.wait_ready()
    topo.wait_running()
    version = "lwIP"
    for line in server.lines:
        if line.startswith("lwip:") and "(" in line:
            version = line.split("(", 1)[1].split(",", 1)[0]
    return server, f"{version} raw API on TAP, {'busy loop' if busy else 'poll() between bursts'}"
