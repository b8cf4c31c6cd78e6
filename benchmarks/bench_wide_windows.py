"""Tableau mode's reference run of surface codes, wide windows per collapse or low rank.

    python -m benchmarks.bench_wide_windows [--distances 25 51] [--repeat 4]

A distance-d rotated memory-Z surface code (d rounds, Stim's generator, every noise knob at 1e-3)
has windows of about d^2 / 2 collapses, wider than the batched paths take from the start
(`measure.batched_width`: 83 at d = 51). Their scan sends those with many random collapses (the
first round, the final data measurement) to the low-rank path in pieces (`engine.wide_lowrank`),
the rest per collapse. Times `CudaEngine.run_tableau(..., reference=True)` with the switch on and
off, alternating in one process (wall ms each run), counts the launches per kernel, checks that
both give the same records, and prints one profiled run's device time per stage and the host's
profile of another."""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import pstats
import time

import numpy as np


def surface_code(d: int):
    import stim

    return stim.Circuit.generated("surface_code:rotated_memory_z", distance=d, rounds=d,
                                  after_clifford_depolarization=1e-3, before_round_data_depolarization=1e-3,
                                  before_measure_flip_probability=1e-3, after_reset_flip_probability=1e-3)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--distances", type=int, nargs="+", default=[25, 51])
    ap.add_argument("--repeat", type=int, default=4)
    args = ap.parse_args(argv)
    from cirq_quasarq.compiler.stim_circuit import compile_stim
    from cirq_quasarq.engines.cuda import CudaEngine
    from cirq_quasarq.shots import REFERENCE_KEY
    from cirq_quasarq.simulator import prepared

    engine = CudaEngine()
    counts = collections.Counter()
    launch = engine.launcher.launch

    def counted(stage, name, *a, **k):
        counts[name] += 1
        return launch(stage, name, *a, **k)

    engine.launcher.launch = counted
    for d in args.distances:
        program = compile_stim(surface_code(d))
        sched = prepared(program)
        runs = {}
        for wide in (True, False) * args.repeat:
            engine.wide_lowrank = wide
            counts.clear()
            t0 = time.perf_counter()
            records = engine.run_tableau(program, sched, REFERENCE_KEY, reference=True).records
            runs.setdefault(wide, []).append((time.perf_counter() - t0, dict(counts), records))
        for wide, got in runs.items():
            top = dict(sorted(got[-1][1].items(), key=lambda kv: -kv[1])[:8])
            print(f"d={d} n={program.num_qubits} wide_lowrank={wide}: wall ms",
                  ["%.1f" % (1e3 * r[0]) for r in got], "launches", sum(got[-1][1].values()), top)
        same = all(np.array_equal(r[2], runs[False][0][2]) for got in runs.values() for r in got)
        print(f"d={d} records equal across settings: {same}")
        for wide in (True, False):
            engine.wide_lowrank = wide
            engine.profile = True
            engine.run_tableau(program, sched, REFERENCE_KEY, reference=True)
            engine.profile = False
            stages = sorted(engine.stage_seconds.items(), key=lambda kv: -kv[1])
            print(f"d={d} wide_lowrank={wide} stages (device ms):", {k: round(1e3 * v, 2) for k, v in stages})
            profile = cProfile.Profile()
            profile.enable()
            engine.run_tableau(program, sched, REFERENCE_KEY, reference=True)
            profile.disable()
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(8)
            print("\n".join(out.getvalue().splitlines()[:22]))


if __name__ == "__main__":
    main()
