"""Frame mode on the CPU: repeat calls of `sample_measurements(c, shots)` on the paper's random
Clifford circuits, with frame mode's gate runs compiled (host_frames.cpp) and in NumPy, against
Stim's compiled sampler on the same circuit.

    python -m benchmarks.bench_cpu_frames [--n 2000 10000] [--shots 1024] [--repeats 5]

Each size: one first call (its reference sample is the tableau run, seconds at 10k qubits), then the
best of `--repeats` calls each way, the compiled runs first; Stim: `compile_sampler(seed=1)` once,
then the best of `--repeats` `sample(shots, bit_packed=True)`. Same machine, same process.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import cirq_quasarq
from cirq_quasarq.engines.numpy import frames

from .bench_small_calls import _best
from .random_clifford import paper_random_circuit_stim


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[2000, 10000])
    ap.add_argument("--shots", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    real = frames._compiled_frames
    for n in args.n:
        circuit = paper_random_circuit_stim(n, 100)
        sim = cirq_quasarq.QuasarqSimulator(seed=1, device="cpu")
        t = time.perf_counter()
        sim.sample_measurements(circuit, args.shots, bit_packed=True)
        first_s = time.perf_counter() - t
        compiled = _best(lambda: sim.sample_measurements(circuit, args.shots, bit_packed=True), args.repeats)
        mine = cirq_quasarq.QuasarqSimulator(seed=7, device="cpu").sample_measurements(circuit, args.shots,
                                                                                       bit_packed=True)
        frames._compiled_frames = lambda fx, fz: False
        try:
            plain = _best(lambda: sim.sample_measurements(circuit, args.shots, bit_packed=True), args.repeats)
            same = np.array_equal(mine, cirq_quasarq.QuasarqSimulator(seed=7, device="cpu").sample_measurements(
                circuit, args.shots, bit_packed=True))
        finally:
            frames._compiled_frames = real
        sampler = circuit.compile_sampler(seed=1)
        sampler.sample(args.shots, bit_packed=True)
        ref = _best(lambda: sampler.sample(args.shots, bit_packed=True), args.repeats)
        print(f"n = {n}, depth 100, {args.shots} shots: first call {first_s * 1e3:.0f} ms; repeat with compiled gate "
              f"runs {compiled * 1e3:.2f} ms, in NumPy {plain * 1e3:.2f} ms (same bits: {same}); Stim {ref * 1e3:.2f} ms "
              f"({compiled / ref:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
