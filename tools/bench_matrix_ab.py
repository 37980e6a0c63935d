"""An interleaved A/B of one program-matrix cell (ustack.tools.bench_matrix): A, B, A, B ... each run on a
fresh pair of namespaces, per-pair ratios of req/s and server CPU per request, and their medians.

    python -m ustack.tools.bench_matrix_ab PROGRAM CONNECTIONS STACK [--seconds 2] [--pairs 4]
        [--a-env K=V,...] [--b-env K=V,...] [--a-run "OPTIONS"] [--b-run "OPTIONS"]

PROGRAM: a word of a matrix row's name ("selectors", "thread per connection", "HTTP/1.0", "stock loop").
STACK: packet or afxdp. Each side's environment variables (for the server process) and ``ustack run``
options (``--a-run "--busy-poll 0"``) are what differs; the same tree runs both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from ustack.tools import bench_matrix as bm


def _env(text: str) -> dict:
    return dict(kv.split("=", 1) for kv in text.split(",") if kv)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench_matrix_ab", description=__doc__.splitlines()[0])
    p.add_argument("program")
    p.add_argument("connections", type=int)
    p.add_argument("stack", choices=("packet", "afxdp"))
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--a-env", default="")
    p.add_argument("--b-env", default="")
    p.add_argument("--a-run", default="")
    p.add_argument("--b-run", default="")
    args = p.parse_args(argv)
    programs = bm.select_programs(args.program)
    if not programs:
        p.error(f"no matrix row matches {args.program!r}")
    from ustack.tools.bench_runner import Placement

    program, placement = programs[0], Placement.plan()
    echo = bm.build_echo_client() if program.load == "echo" else None
    cfg = bm.MatrixConfig(seconds=args.seconds)
    body = os.urandom(bm.BODY_BYTES)
    sides = (("A", _env(args.a_env), tuple(args.a_run.split())), ("B", _env(args.b_env), tuple(args.b_run.split())))
    res: dict = {"A": [], "B": []}
    print(f"{program.name}, {args.connections} connection(s), {args.stack}; load {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, bm.FILE_NAME), "wb") as f:
            f.write(body)
        for i in range(args.pairs):
            for side, env, run in sides:
                saved = {k: os.environ.get(k) for k in env}
                os.environ.update(env)
                prog = bm.Program(program.name, program.load, program.args, program.run_options + run, program.path,
                                  program.needs)
                try:
                    res[side].append(bm.run_cell(prog, args.stack, args.connections, cfg, placement, folder, body,
                                                 echo))
                finally:
                    for k, v in saved.items():
                        if v is None:
                            os.environ.pop(k, None)
                        else:
                            os.environ[k] = v
            a, b = res["A"][-1], res["B"][-1]
            print(f"pair {i + 1}: A {a['rps']:.0f} req/s p50 {a['p50_us']:.0f} µs cpu {a['cpu_us']:.0f} µs/req | "
                  f"B {b['rps']:.0f} req/s p50 {b['p50_us']:.0f} µs cpu {b['cpu_us']:.0f} µs/req | "
                  f"A/B req/s {a['rps'] / b['rps']:.2f} cpu {a['cpu_us'] / b['cpu_us']:.2f}", flush=True)
    rps = [a["rps"] / b["rps"] for a, b in zip(res["A"], res["B"])]
    cpu = [a["cpu_us"] / b["cpu_us"] for a, b in zip(res["A"], res["B"])]
    print(f"median A/B req/s {statistics.median(rps):.2f} (pairs {' '.join(f'{x:.2f}' for x in rps)}); "
          f"CPU/request {statistics.median(cpu):.2f}; load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
