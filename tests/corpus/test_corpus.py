"""Unmodified programs under ``ustack run`` against the Linux kernel over veth (packet and AF_XDP), and over the pipe.

For every pair of tests/corpus/programs (see corpus.PAIRS) and every backend:
- ``ustack-server``: the server under ``ustack run`` in the stack namespace,
  its client on the kernel in the peer namespace;
- ``ustack-client``: the server on the kernel, the client under ``ustack run``.
Each client checks every byte against the deterministic payload and exits 0
only then; its whole stdout (the SHA-256 of everything it received) must be
the same as when both ends run on the kernel (the reference run, over the
peer namespace's loopback); the server must stop on SIGINT with status 0.

Speed: the runs of one backend go concurrently over LANES topologies (one
ustack process per veth at a time: AF_XDP binds the queue). The results are
computed once per backend by a module fixture; each parametrized test checks
its own run. The pipe variant needs no root: ``ustack run --backend pipe``
has a peer stack with RFC 862 echo on port 7, so the clients that speak echo
run against it.
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import re
import subprocess
import time

import pytest

from tests.conftest import require_or_skip, require_privileged, require_tool

from .corpus import PAIRS, PROGRAMS, make_certs, python, run_pair

LANES = 3
BACKENDS = ["packet", "afxdp"]
WHERE = ["ustack-server", "ustack-client"]
PORT_BASE = 9100
PIPE_ADDR, PIPE_PEER = "198.18.0.2", "198.18.0.3"


def ustack_run(topo, backend):
    return python("-m", "ustack", "run", "--backend", backend, "--ifname", topo.stack_ifname,
                  "--addr", f"{topo.stack_addr}/{topo.prefixlen}")


def _privileged():
    require_privileged()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    require_tool("openssl")
    return make_certs(str(tmp_path_factory.mktemp("certs")), ["127.0.0.1", "198.18.0.1", "198.18.0.2", "198.18.0.3"])


@pytest.fixture(scope="module")
def lanes():
    _privileged()
    from ustack.tools.netns import Topology

    made = []
    try:
        for _ in range(LANES):
            made.append(Topology.veth(tag="c"))
        yield made
    finally:
        for t in made:
            t.close()


def _run_all(jobs, lanes):
    """Run jobs (callables taking a topology) over the lanes, one job per lane at a time."""
    free = queue.Queue()
    for t in lanes:
        free.put(t)

    def on_lane(job):
        topo = free.get()
        try:
            return job(topo)
        finally:
            free.put(topo)

    with concurrent.futures.ThreadPoolExecutor(len(lanes)) as pool:
        return list(pool.map(on_lane, jobs))


@pytest.fixture(scope="module")
def reference(lanes, certs):
    """Each pair with both ends on the kernel (over a peer namespace's loopback): the stdout to expect."""

    def job(i, pair):
        def run(topo):
            port = PORT_BASE + 200 + i  # on the peer namespace's loopback
            return run_pair(pair, "kernel", topo.peer_popen, topo.peer_popen,
                            python(*pair.server_argv("127.0.0.1", port, certs)),
                            python(*pair.client_argv("127.0.0.1", port, certs)))
        return run

    outcomes = _run_all([job(i, p) for i, p in enumerate(PAIRS)], lanes)
    return {o.pair: o for o in outcomes}


@pytest.fixture(scope="module", params=BACKENDS)
def runs(request, lanes, certs, reference):
    """Every pair in both directions on one backend; {(pair name, where): Outcome} and the wall time."""
    backend = request.param
    if backend == "afxdp":
        from ustack.backends.registry import available_backends

        if "afxdp" not in available_backends():
            require_or_skip("AF_XDP is not available here")

    def job(i, pair, where):
        def run(topo):
            port = PORT_BASE + 50 * BACKENDS.index(backend) + i  # a port used once per lane and session
            if where == "ustack-server":
                host = topo.stack_addr
                server = [*ustack_run(topo, backend), *pair.server_argv(host, port, certs)]
                client = python(*pair.client_argv(host, port, certs))
                return run_pair(pair, where, topo.stack_popen, topo.peer_popen, server, client)
            host = topo.peer_addr
            server = python(*pair.server_argv(host, port, certs))
            client = [*ustack_run(topo, backend), *pair.client_argv(host, port, certs)]
            return run_pair(pair, where, topo.peer_popen, topo.stack_popen, server, client)
        return run

    start = time.monotonic()
    jobs = [job(i, p, w) for i, p in enumerate(PAIRS) for w in WHERE]
    outcomes = _run_all(jobs, lanes)
    elapsed = time.monotonic() - start
    slowest = sorted(outcomes, key=lambda o: -o.seconds)[:4]
    print(f"\ncorpus on {backend}: {len(jobs)} runs over {len(lanes)} lanes in {elapsed:.1f} s; slowest: "
          + ", ".join(f"{o.pair} [{o.where}] {o.seconds:.1f} s" for o in slowest))
    return {(o.pair, o.where): o for o in outcomes}


def _check(outcome, reference):
    assert not outcome.problem, outcome.describe()
    assert outcome.client_rc == 0, outcome.describe()
    assert outcome.client_out == reference.client_out, (
        f"client output differs from the kernel-only run:\n{reference.client_out}\n---\n" + outcome.describe())
    assert outcome.server_rc == 0 and "stopped" in outcome.server_out, outcome.describe()
    assert "Traceback" not in outcome.server_out + outcome.client_err, outcome.describe()


@pytest.mark.privileged
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("pair", PAIRS, ids=[p.name for p in PAIRS])
def test_program_on_ustack_against_the_kernel(runs, reference, pair, where):
    if pair.needs:
        try:
            __import__(pair.needs)
        except ImportError:
            require_or_skip(f"{pair.needs} is not installed (it is in the test extra: pip install -e '.[test]')")
    ref = reference[pair.name]
    assert ref.client_rc == 0 and not ref.problem, "the kernel-only reference run failed:\n" + ref.describe()
    _check(runs[(pair.name, where)], ref)


def test_no_corpus_program_mentions_ustack():
    names = sorted(os.listdir(PROGRAMS))
    programs = [n for n in names if n.endswith(".py")]
    assert len([n for n in programs if n != "payload.py"]) >= 15
    for name in programs:
        with open(os.path.join(PROGRAMS, name), encoding="utf-8") as f:
            assert "ustack" not in f.read().lower(), name
    used = {p.server for p in PAIRS} | {p.client for p in PAIRS}
    assert used == {n[:-3] for n in programs} - {"payload"}  # every program is in a pair, every pair exists


ECHO_PAIRS = [p for p in PAIRS if p.echo]


@pytest.mark.parametrize("pair", ECHO_PAIRS, ids=[p.name for p in ECHO_PAIRS])
def test_echo_clients_under_ustack_run_on_the_pipe_without_root(pair, tmp_path):
    """``ustack run --backend pipe``: the client against the peer stack's RFC 862 echo (UDP and TCP port 7).

    The pipe's other end lives in the same process, so no second program can
    sit there; the echo service is what it offers. No privileges needed.
    """
    argv = python("-m", "ustack", "run", "--backend", "pipe", "--addr", f"{PIPE_ADDR}/24",
                  *pair.client_argv(PIPE_PEER, 7, None))
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines and all(" True " in f"{l} " for l in lines), p.stdout
    for line in lines:  # the SHA-256 printed is of what came back, which is what was sent
        assert re.search(r" [0-9a-f]{64}$", line), line
