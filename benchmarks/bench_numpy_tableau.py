"""NumPy engine, tableau mode: the paper's random Clifford circuits single shot, against
stim.TableauSimulator on the same CPU, and optionally against an earlier revision of this package.

    PYTHONPATH=. python -m benchmarks.bench_numpy_tableau [--n 1000 2000 5000] [--depth 100]
        [--baseline REV] [--out DIR]

Per (n, depth), each timed in its own process, best of --repeat after one warm-up call:
- ours: `QuasarqSimulator(device="cpu").simulate(circuit)` on a new simulator each call, with the
  compile cache warm (the repeat a user sees), and the engine's `run_tableau` alone;
- stim: `stim.TableauSimulator().do(circuit)` on the same circuit as a stim.Circuit;
- baseline (with --baseline REV): the same two timings of `git worktree` checkout REV of this
  repository, so "before / after" numbers come from one run on one machine.
Writes bench_numpy_tableau.jsonl and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

_CASE = r"""
import json, sys, time
sys.path.insert(0, {bench!r})
from random_clifford import paper_random_circuit
n, depth, repeat, tool = {n}, {depth}, {repeat}, {tool!r}
circuit, stim_circuit = paper_random_circuit(n, depth, seed=3)
def best(fn):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter(); fn(); times.append(time.perf_counter() - t0)
    return min(times)
out = {{}}
if tool == "stim":
    import stim
    out["seconds"] = best(lambda: stim.TableauSimulator(seed=1).do(stim_circuit))
else:
    import cirq_quasarq
    from cirq_quasarq.core import rng
    from cirq_quasarq.schedule import schedule
    out["seconds"] = best(lambda: cirq_quasarq.QuasarqSimulator(seed=1, device="cpu").simulate(circuit))
    sim = cirq_quasarq.QuasarqSimulator(seed=1, device="cpu")
    program = sim.compile(circuit)
    sched = schedule(program)
    out["engine_seconds"] = best(lambda: sim.engine.run_tableau(program, sched, rng.make_key(1)))
    out["package"] = cirq_quasarq.__file__
print("RESULT " + json.dumps(out))
"""


def _run_case(n: int, depth: int, repeat: int, tool: str, package_root: pathlib.Path) -> dict:
    code = _CASE.format(bench=str(ROOT / "benchmarks"), n=n, depth=depth, repeat=repeat, tool=tool)
    env = dict(os.environ, PYTHONPATH=str(package_root))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=package_root)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 2000, 5000])
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", help="a git revision of this repository to time as 'before'")
    ap.add_argument("--out", default=os.environ.get("OUT") or "bench-numpy-tableau")
    args = ap.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    revision = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=ROOT).stdout.strip()
    env = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
           "python": platform.python_version(), "revision": revision, "baseline": args.baseline}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base_root = None
        if args.baseline:
            base_root = pathlib.Path(tmp) / "baseline"
            subprocess.run(["git", "worktree", "add", "--detach", str(base_root), args.baseline], cwd=ROOT,
                           check=True, capture_output=True)
        try:
            for n in args.n:
                row = {"n": n, "depth": args.depth, **env}
                row["ours"] = _run_case(n, args.depth, args.repeat, "ours", ROOT)
                row["stim"] = _run_case(n, args.depth, args.repeat, "stim", ROOT)
                if base_root is not None:
                    row["baseline_ours"] = _run_case(n, args.depth, args.repeat, "ours", base_root)
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            if base_root is not None:
                subprocess.run(["git", "worktree", "remove", "--force", str(base_root)], cwd=ROOT, capture_output=True)
    with open(out / "bench_numpy_tableau.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(f"\nrandom Clifford, single shot, depth {args.depth}; {env['machine']}, {env['cpus']} cpus; "
          f"revision {revision}" + (f" vs baseline {args.baseline}" if args.baseline else ""))
    print("| n | ours simulate() | ours engine | stim TableauSimulator | ours / stim |"
          + (" baseline simulate() | baseline engine | speed-up |" if args.baseline else ""))
    print("|---|---|---|---|---|" + ("---|---|---|" if args.baseline else ""))
    for r in rows:
        o, s = r["ours"], r["stim"]
        if "error" in o or "error" in s:
            print(f"| {r['n']} | {o.get('error', '')} | | {s.get('error', '')} | |")
            continue
        line = (f"| {r['n']} | {o['seconds']:.3f} s | {o['engine_seconds']:.3f} s | {s['seconds']:.3f} s | "
                f"{o['seconds'] / s['seconds']:.2f} |")
        b = r.get("baseline_ours")
        if b and "error" not in b:
            line += f" {b['seconds']:.3f} s | {b['engine_seconds']:.3f} s | {b['seconds'] / o['seconds']:.2f}× |"
        print(line)


if __name__ == "__main__":
    main()
