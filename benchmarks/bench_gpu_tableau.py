"""GPU tableau mode (single shot) on the paper's random Clifford circuits.

    python -m benchmarks.bench_gpu_tableau [--sizes 5000 10000 100000] [--depth 100] [--repeat 3]

Per layer 70% of the qubits get a gate from {X, Y, Z, H, S, S†, CX, CY, CZ, SWAP, ISWAP}, then
max(1, n // 1400) random Z measurements (benchmarks/random_clifford.py, built straight into a
Program: no Cirq objects for 100k qubits). Times `CudaEngine.run_tableau` end to end (records and
the final inverse tableau back in host memory), best of --repeat, after a warm-up that compiles
the kernels. Targets (DESIGN.md, H100): n=5k 0.028 s, n=10k 0.060 s, n=100k 0.45 s at depth 100.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from cirq_quasarq.core import opcodes, rng
from cirq_quasarq.core.program import ProgramBuilder
from cirq_quasarq.schedule import schedule

from .random_clifford import layers

TARGETS = {5000: 0.028, 10000: 0.060, 100000: 0.45}


def random_clifford_program(n: int, depth: int, seed: int = 0):
    b = ProgramBuilder(n)
    for ops, measured in layers(n, depth, seed):
        b.gate_layer(np.array([opcodes.CODE[g] for g, _ in ops]), np.array([qs[0] for _, qs in ops]),
                     np.array([qs[1] if len(qs) == 2 else -1 for _, qs in ops]))
        b.next_step()
        for q in measured:
            b.measure(q)
    return b.build()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 10000, 100000])
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    from cirq_quasarq.engines.cuda import CudaEngine

    engine = CudaEngine()
    warm = random_clifford_program(200, 5)
    engine.run_tableau(warm, schedule(warm), rng.make_key(0))
    print(f"{'n':>7} {'depth':>5} {'gates':>9} {'meas':>6} {'GPU s':>8} {'target':>7}")
    for n in args.sizes:
        program = random_clifford_program(n, args.depth)
        sched = schedule(program)
        best = float("inf")
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            engine.run_tableau(program, sched, rng.make_key(1))
            best = min(best, time.perf_counter() - t0)
        gates = int(np.sum(opcodes.KIND[program.instructions[:, 0]] == opcodes.Kind.UNITARY))
        target = TARGETS.get(n)
        scaled = f"{target * args.depth / 100:.3f}" if target else "-"
        print(f"{n:>7} {args.depth:>5} {gates:>9} {program.num_records:>6} {best:>8.4f} {scaled:>7}", flush=True)


if __name__ == "__main__":
    main()
