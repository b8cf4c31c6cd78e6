"""Compile time: cirq_quasarq's compiler vs stimcirq.cirq_circuit_to_stim_circuit.

    python -m benchmarks.bench_compile [--distance 25] [--rounds 25] [--ops 1000000] [--quick]

Circuits (benchmarks/circuits.py): (a) Stim's rotated surface-code memory experiment converted to
Cirq by stimcirq (a CircuitOperation loop over rounds); (b) a random Clifford circuit of about
`--ops` operations. Cold compiles (our caches cleared; ours, then stimcirq) are repeated
`--repeats` times (the surface code) or once (the large random circuit) and the best time is
reported; then ours again on the same unmodified circuit (the cache hit, best of 5).
"""

from __future__ import annotations

import argparse
import platform
import time

import cirq

from benchmarks.circuits import random_clifford_circuit_ops, surface_code_cirq


def _count_ops(circuit) -> int:
    total = 0
    for moment in circuit:
        for op in moment.operations:
            untagged = op.untagged
            if isinstance(untagged, cirq.CircuitOperation):
                total += _count_ops(untagged.circuit) * abs(int(untagged.repetitions))
            else:
                total += 1
    return total


def _time(f):
    t0 = time.perf_counter()
    out = f()
    return time.perf_counter() - t0, out


def bench(name: str, circuit, repeats: int = 1) -> dict:
    import stimcirq

    from cirq_quasarq.compiler import clear_cache, compile_circuit

    first = reference = float("inf")
    for _ in range(repeats):
        clear_cache()
        t, program = _time(lambda: compile_circuit(circuit))
        first = min(first, t)
        t, stim_circuit = _time(lambda: stimcirq.cirq_circuit_to_stim_circuit(circuit))
        reference = min(reference, t)
    repeat = min(_time(lambda: compile_circuit(circuit))[0] for _ in range(5))
    return {
        "circuit": name,
        "ops": _count_ops(circuit),
        "instructions": program.num_instructions,
        "records": program.num_records,
        "stim_measurements": stim_circuit.num_measurements,
        "stimcirq_s": reference,
        "ours_s": first,
        "cached_s": repeat,
        "speedup": reference / first,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--distance", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=None, help="default: the distance")
    parser.add_argument("--p", type=float, default=1e-3)
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="cold runs of the surface code")
    parser.add_argument("--quick", action="store_true", help="d=7 and 100k operations")
    args = parser.parse_args(argv)
    if args.quick:
        args.distance, args.ops = 7, 100_000
    rounds = args.rounds or args.distance

    rows = []
    t0 = time.perf_counter()
    sc, _ = surface_code_cirq(args.distance, rounds, args.p)
    print(f"# built surface code d={args.distance} rounds={rounds} in {time.perf_counter() - t0:.1f} s")
    rows.append(bench(f"surface code d={args.distance}, {rounds} rounds", sc, args.repeats))
    t0 = time.perf_counter()
    rc = random_clifford_circuit_ops(args.ops, seed=args.seed)
    print(f"# built random Clifford circuit ({len(rc)} moments) in {time.perf_counter() - t0:.1f} s")
    rows.append(bench(f"random Clifford, {args.ops:,} ops target", rc))

    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"cirq {cirq.__version__}")
    header = ("circuit", "ops", "instructions", "records", "stimcirq (s)", "ours cold (s)",
              "ours cached (ms)", "speedup")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        assert r["records"] == r["stim_measurements"], r
        print(f"| {r['circuit']} | {r['ops']:,} | {r['instructions']:,} | {r['records']:,} | "
              f"{r['stimcirq_s']:.3f} | {r['ours_s']:.3f} | {1e3 * r['cached_s']:.3f} | "
              f"{r['speedup']:.1f}x |")


if __name__ == "__main__":
    main()
