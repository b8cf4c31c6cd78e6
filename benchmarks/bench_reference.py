"""The reference sample of the paper's random Clifford circuits: the measured rows against the full
tableau run, on one engine (engines/measured_rows.py).

    python -m benchmarks.bench_reference [--device gpu|cpu] [--sizes 10000 100000 180000]
                                         [--depth 100] [--repeat 3] [--stages] [--full] [--window K]
                                         [--per-collapse]

Times `engine.reference_records(program, schedule)` end to end (the records back in host memory),
best of --repeat after a warm-up, with the measured rows (the engine's default where they pay) and,
with --full, the full tableau run (`measured_rows=False`, the oracle) in the same process; each
line says whether both gave the same records and their fingerprint (`bench_gpu_tableau.digest`, so
that runs of other versions of the code can be seen to agree). --stages adds the device time per
stage of the measured rows' last run (backward sweep, rows, plan, apply); --window sets the GPU's
forward windows (engines/cuda/measured_rows.py, WINDOW); --per-collapse makes the oracle the GPU's
per-collapse path (`batch_windows=False`: a pivot and an elimination launch a collapse on the
transposed tableau) instead of the batched full run.
"""

from __future__ import annotations

import argparse
import time

from cirq_quasarq.schedule import schedule

from .bench_gpu_tableau import digest
from .random_clifford import random_clifford_program


def _engine(device: str, measured_rows):
    if device == "gpu":
        from cirq_quasarq.engines.cuda import CudaEngine

        engine = CudaEngine()
    else:
        from cirq_quasarq.engines import NumpyEngine

        engine = NumpyEngine()
    engine.measured_rows = measured_rows
    return engine


def _best(engine, program, sched, repeat: int):
    best, records = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        records = engine.reference_records(program, sched)
        best = min(best, time.perf_counter() - start)
    return best, records


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stages", action="store_true")
    parser.add_argument("--full", action="store_true", help="the full tableau run too (the oracle)")
    parser.add_argument("--window", type=int, default=None, help="collapses a forward window (GPU)")
    parser.add_argument("--per-collapse", action="store_true", help="the oracle: the per-collapse path (GPU)")
    args = parser.parse_args(argv)
    if args.window is not None:
        from cirq_quasarq.engines.cuda import measured_rows

        measured_rows.WINDOW = args.window
    rows = _engine(args.device, True)
    full = _engine(args.device, False) if args.full or args.per_collapse else None
    if args.per_collapse:
        full.batch_windows = False
    warm = random_clifford_program(200, 5, seed=1)
    for engine in filter(None, (rows, full)):
        engine.reference_records(warm, schedule(warm))
    for n in args.sizes:
        program = random_clifford_program(n, args.depth, seed=0)
        sched = schedule(program)
        seconds, records = _best(rows, program, sched, args.repeat)
        line = (f"n={n} depth={args.depth} collapses={len(records)} measured rows {seconds:.4f} s "
                f"records {digest(records)}")
        if full is not None:
            full_s, want = _best(full, program, sched, min(args.repeat, 2))
            oracle = "per-collapse" if args.per_collapse else "full"
            same = bool((want == records).all())
            line += f" | {oracle} run {full_s:.4f} s same={same} ({full_s / seconds:.1f}x)"
        print(line, flush=True)
        if args.stages and args.device == "gpu":
            rows.profile = True
            rows.reference_records(program, sched)
            rows.profile = False
            print("    stages: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in sorted(rows.stage_seconds.items())),
                  flush=True)


if __name__ == "__main__":
    main()
