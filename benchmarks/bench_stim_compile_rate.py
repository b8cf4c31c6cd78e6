"""The `stim.Circuit` compile rate: rows a second of the compile a first call does, with the host's
compiled path (cuda_src/host_rows.cpp) and without, in turn.

    python -m benchmarks.bench_stim_compile_rate [--sizes 5000 10000 30000] [--depth 100] [--rounds 2] [--repeats 3]

Circuits: the paper's random Clifford circuits (`benchmarks.random_clifford.paper_random_circuit_stim`).
Each round times, with the compiled path off (``CIRQ_QUASARQ_NATIVE=0``) and then on, the best of
`--repeats` compiles of the circuit as a whole (`compile_new_stim`: printed in pieces by forked
printers from 20M qubit-instructions) and as a first call streams it (`stim_pieces` in 12 pieces,
a ramp of half pieces from 50k qubits), the compile cache cleared before each. Stim's own printing
of the circuit (`str`) is timed once for scale. One line a size, round and setting.
"""

from __future__ import annotations

import argparse
import os
import time


def _streamed(circuit, n: int):
    from cirq_quasarq.compiler import stim_circuit

    pieces = stim_circuit.stim_pieces(circuit, 12, ramp=4 if n >= 50_000 else 0)
    while True:
        try:
            next(pieces)
        except StopIteration as finished:
            return finished.value


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 10000, 30000])
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    from benchmarks.random_clifford import paper_random_circuit_stim
    from cirq_quasarq.compiler import stim_circuit
    from cirq_quasarq.core import native

    print(f"compiled path: {native.library()} {native.why_not() or ''}", flush=True)
    stim_circuit.compile_stim(paper_random_circuit_stim(50, 5, seed=1))  # warm
    before = os.environ.get("CIRQ_QUASARQ_NATIVE")
    try:
        for n in args.sizes:
            circuit = paper_random_circuit_stim(n, args.depth, seed=7)
            t0 = time.perf_counter()
            str(circuit)
            printed = time.perf_counter() - t0
            for _ in range(args.rounds):
                for flag in ("0", "1"):
                    os.environ["CIRQ_QUASARQ_NATIVE"] = flag
                    best = {"whole": float("inf"), "streamed": float("inf")}
                    for _ in range(args.repeats):
                        for how, compile_ in (("whole", stim_circuit.compile_new_stim),
                                              ("streamed", lambda c: _streamed(c, n))):
                            stim_circuit.clear_stim_cache()
                            t0 = time.perf_counter()
                            program = compile_(circuit)
                            best[how] = min(best[how], time.perf_counter() - t0)
                    rows = len(program.rows)
                    print(f"n={n} depth={args.depth} compiled_path={flag} rows={rows} str={printed * 1e3:.0f} ms | " +
                          " | ".join(f"{how} {s * 1e3:.0f} ms ({rows / s / 1e6:.1f}M rows/s)" for how, s in best.items()),
                          flush=True)
    finally:
        if before is None:
            os.environ.pop("CIRQ_QUASARQ_NATIVE", None)
        else:
            os.environ["CIRQ_QUASARQ_NATIVE"] = before


if __name__ == "__main__":
    main()
