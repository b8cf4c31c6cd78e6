"""The Cirq compile rate: microseconds per operation of the compile a first call does.

    python -m benchmarks.bench_compile_rate [--n 2000] [--depth 100] [--distance 11] [--repeats 5] [--json FILE]

Circuits (benchmarks/circuits.py): `clifford_layers(n, depth)` (one-qubit Cliffords on every qubit,
two-qubit Cliffords on random pairs, every qubit measured under its own key), the same with a new
gate object for every operation (each is planned on its own: the walk's slow path), and Stim's
rotated surface-code X memory experiment (rounds = distance, every noise knob 1e-3) converted by
stimcirq.
A cold compile clears the compile caches and does what `run` does with a new circuit:
`compile_template(circuit).resolve(None)`. Each repeat compiles with moments lowered in bulk (as
the compiler runs) and one operation at a time (`Walker.group_min = None`, the tests' oracle),
alternately; the best of `--repeats` of each is reported. "ops" counts the operations the compiler
walks (a CircuitOperation loop's body once).
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import cirq

from benchmarks.circuits import clifford_layers, surface_code_cirq


def walked_ops(circuit) -> int:
    total = 0
    for op in circuit.all_operations():
        untagged = op.untagged
        total += walked_ops(untagged.circuit) if isinstance(untagged, cirq.CircuitOperation) else 1
    return total


def cold_compiles_s(circuit, repeats: int) -> dict:
    """Best cold compile time in bulk and one operation at a time."""
    from cirq_quasarq.compiler import clear_cache, compile_template
    from cirq_quasarq.compiler.walker import Walker

    paths = {"bulk": Walker.group_min, "one_at_a_time": None}
    best = dict.fromkeys(paths, float("inf"))
    try:
        for _ in range(repeats):
            for path, group_min in paths.items():
                Walker.group_min = group_min
                clear_cache()
                t0 = time.perf_counter()
                compile_template(circuit).resolve(None)
                best[path] = min(best[path], time.perf_counter() - t0)
    finally:
        Walker.group_min = paths["bulk"]
    return best


def bench(name: str, circuit, repeats: int) -> dict:
    ops = walked_ops(circuit)
    best = cold_compiles_s(circuit, repeats)
    seconds = best["bulk"]
    return {"circuit": name, "ops": ops, "compile_s": seconds, "us_per_op": 1e6 * seconds / ops,
            "ops_per_s": ops / seconds, "one_at_a_time_s": best["one_at_a_time"]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--distance", type=int, default=11)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="append the rows to this file, one JSON object a line")
    args = parser.parse_args(argv)
    d = args.distance
    layers = f"Clifford layers n={args.n} depth={args.depth}"
    circuits = [(layers, clifford_layers(args.n, args.depth, args.seed)),
                (f"{layers}, a gate object per operation", clifford_layers(args.n, args.depth, args.seed, True)),
                (f"stimcirq surface code d={d}", surface_code_cirq(d, d, 1e-3, "x")[0])]
    rows = [bench(name, circuit, args.repeats) for name, circuit in circuits]
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"cirq {cirq.__version__}; best of {args.repeats} cold compiles")
    print("| circuit | ops | compile (ms) | µs/op | ops/s | one at a time (ms) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['circuit']} | {r['ops']:,} | {1e3 * r['compile_s']:.1f} | {r['us_per_op']:.3f} | "
              f"{r['ops_per_s']:,.0f} | {1e3 * r['one_at_a_time_s']:.1f} |")
    if args.json:
        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
