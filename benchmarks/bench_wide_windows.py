"""Tableau mode's reference run of surface codes: wide windows and folded rounds as the engine
takes them, and as before.

    python -m benchmarks.bench_wide_windows [--distances 11 25 51] [--repeat 4]

A distance-d rotated memory-Z surface code (d rounds, Stim's generator, every noise knob at 1e-3)
has windows of about d^2 / 2 collapses, wider than the batched paths take from the start
(`measure.batched_width`: 83 at d = 51). On rows of more than 64 words (d = 51; d = 25 takes the
one-block path) each such window is scanned, and those with many random collapses (the first
round, the final data measurement) take the low-rank path in pieces (`engine.wide_lowrank`), the
rest per collapse. The rounds are one loop, which a reference run folds once the tableau repeats
(`fold_loops`). Times `CudaEngine.run_tableau(..., reference=True)` by default and with each
switch off (`wide_lowrank=False`; `window_sync=False`: no scan, every collapse through
measure_pivot; `fold_loops=False`: every round run), alternating in one process (wall ms each
run; the iterations folded), counts the launches per kernel,
checks that all give the same records, and prints one profiled run's device time per stage and
the host's profile of another."""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import pstats
import time

import numpy as np

from .circuits import surface_code_stim


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--distances", type=int, nargs="+", default=[11, 25, 51])
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
    variants = {"default": {}, "wide_lowrank=False": {"wide_lowrank": False}, "window_sync=False": {"window_sync": False},
                "fold_loops=False": {"fold_loops": False}}
    defaults = {name: getattr(engine, name) for name in ("wide_lowrank", "window_sync", "fold_loops")}

    def use(variant):
        for name, value in dict(defaults, **variants[variant]).items():
            setattr(engine, name, value)

    for d in args.distances:
        program = compile_stim(surface_code_stim(d, d, 1e-3))
        sched = prepared(program)
        runs = {}
        for _ in range(args.repeat):
            for variant in variants:
                use(variant)
                counts.clear()
                t0 = time.perf_counter()
                records = engine.run_tableau(program, sched, REFERENCE_KEY, reference=True).records
                runs.setdefault(variant, []).append((time.perf_counter() - t0, dict(counts), records,
                                                     engine._tableau.folded_iterations))
        for variant, got in runs.items():
            top = dict(sorted(got[-1][1].items(), key=lambda kv: -kv[1])[:8])
            print(f"d={d} n={program.num_qubits} {variant}: wall ms", ["%.1f" % (1e3 * r[0]) for r in got],
                  "launches", sum(got[-1][1].values()), "rounds folded", got[-1][3], top)
        same = all(np.array_equal(r[2], runs["default"][0][2]) for got in runs.values() for r in got)
        print(f"d={d} records equal across settings: {same}")
        for variant in variants:
            use(variant)
            engine.profile = True
            engine.run_tableau(program, sched, REFERENCE_KEY, reference=True)
            engine.profile = False
            stages = sorted(engine.stage_seconds.items(), key=lambda kv: -kv[1])
            print(f"d={d} {variant} stages (device ms):", {k: round(1e3 * v, 2) for k, v in stages})
            if variant == "default":
                profile = cProfile.Profile()
                profile.enable()
                engine.run_tableau(program, sched, REFERENCE_KEY, reference=True)
                profile.disable()
                out = io.StringIO()
                pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(8)
                print("\n".join(out.getvalue().splitlines()[:22]))
        use("default")


if __name__ == "__main__":
    main()
