"""GPU frame mode on Stim's rotated surface-code memory experiment (rounds = d, noise 1e-3).

    python -m benchmarks.bench_gpu_frames [--cases 11:1000000 25:100000 51:10000] [--repeat 3] [--compare]

The circuit comes from stim, through stimcirq and our compiler (the REPEAT block stays a loop).
Times `CudaEngine.sample_frames` (records bit-packed in host memory) best of --repeat, and the
kernels alone (CUDA events), after a warm-up; the reference sample is taken once, outside.
--compare: the same with `frame_noise="direct"` (each noise word finished in place: the deferred
queue's oracle) in the same process, records compared bit for bit.
Targets (DESIGN.md, H100): d=11 1M shots 0.012 s, d=25 100k 0.045 s, d=51 10k 0.15 s.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from cirq_quasarq.core import rng
from cirq_quasarq.compiler import compile_circuit
from cirq_quasarq.schedule import schedule

from .circuits import surface_code_cirq

TARGETS = {11: 0.012, 25: 0.045, 51: 0.15}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["11:1000000", "25:100000", "51:10000"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--compare", action="store_true", help="also time frame_noise='direct', records compared")
    args = ap.parse_args(argv)
    from cirq_quasarq.engines.cuda import CudaEngine

    engines = {"deferred": CudaEngine()}
    if args.compare:
        engines["direct"] = CudaEngine(frame_noise="direct")
    print(f"{'noise':>8} {'d':>3} {'qubits':>6} {'records':>7} {'shots':>8} {'total s':>8} {'kernel s':>8} "
          f"{'target':>7}")
    for case in args.cases:
        d, shots = (int(v) for v in case.split(":"))
        circuit, _ = surface_code_cirq(d, d, 1e-3)
        program = compile_circuit(circuit)
        sched = schedule(program)
        ref = engines["deferred"].run_tableau(program, sched, rng.make_key(0), reference=True).records
        records = {}
        for name, engine in engines.items():
            engine.sample_frames(program, sched, rng.make_key(1), ref, 64)  # warm-up
            best, kernel, got = float("inf"), float("inf"), None
            for i in range(args.repeat):
                got = None  # a live result would make the engine allocate new page-locked memory
                t0 = time.perf_counter()
                got = engine.sample_frames(program, sched, rng.make_key(2 + i), ref, shots)
                best = min(best, time.perf_counter() - t0)
                kernel = min(kernel, engine.last_frame_kernel_s)
            records[name] = got.copy()
            print(f"{name:>8} {d:>3} {program.num_qubits:>6} {program.num_records:>7} {shots:>8} {best:>8.4f} "
                  f"{kernel:>8.4f} {TARGETS.get(d, float('nan')):>7.3f}", flush=True)
        if len(records) > 1:
            same = all(np.array_equal(r, records["deferred"]) for r in records.values())
            print(f"records equal across noise paths: {same}", flush=True)


if __name__ == "__main__":
    main()
