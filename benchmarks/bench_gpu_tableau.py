"""GPU tableau mode (single shot) on the paper's random Clifford circuits.

    python -m benchmarks.bench_gpu_tableau [--sizes 5000 10000 100000] [--depth 100] [--repeat 3]
                                           [--stages] [--compare] [--unfused] [--kernels]
                                           [--measured K] [--chunk-apart C] [--fused-chunks C ...]

Per layer 70% of the qubits get a gate from {X, Y, Z, H, S, S†, CX, CY, CZ, SWAP, ISWAP}, then
max(1, n // 1400) random Z measurements (benchmarks/random_clifford.py, built straight into a
Program: no Cirq objects for 100k qubits). Times `CudaEngine.run_tableau` end to end (the records
back in host memory; the final inverse tableau stays on the device until it is read), best of
--repeat, after a warm-up that compiles the kernels. Targets (DESIGN.md, H100): n=5k 0.028 s, n=10k 0.060 s, n=100k 0.45 s at depth 100.
Each line ends with fingerprints of the records and (up to 100k qubits) of the final tableau, so
that runs of two versions of the code (one from another checkout) can be seen to agree.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from cirq_quasarq.core import opcodes, rng
from cirq_quasarq.schedule import schedule

from .random_clifford import random_clifford_program

TARGETS = {5000: 0.028, 10000: 0.060, 100000: 0.45}


def copy_bandwidth(engine, nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s (read + write counted), best of 5."""
    cuda = engine.cuda
    src, dst = cuda.mem_alloc(nbytes), cuda.mem_alloc(nbytes)
    best = float("inf")
    for _ in range(5):
        start, end = cuda.Event(), cuda.Event()
        start.record()
        cuda.memcpy_dtod(dst, src, nbytes)
        end.record()
        end.synchronize()
        best = min(best, end.time_since(start) / 1e3)
    src.free()
    dst.free()
    return 2 * nbytes / best


def digest(data) -> str:
    """A short fingerprint of the records or the final tableau, to tell across processes and
    versions (the code before a change, run from another checkout) that two runs agree."""
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest()[:12]


def tableau_bytes(tableau) -> np.ndarray:
    """The final inverse tableau's bits and signs as one byte string (read from the device)."""
    parts = [tableau.xx, tableau.xz, tableau.zx, tableau.zz, tableau.xs, tableau.zs]
    return np.concatenate([np.ascontiguousarray(p).view(np.uint8).reshape(-1) for p in parts])


def best_of(engine, program, sched, repeat: int):
    best, run = float("inf"), None
    for _ in range(repeat):
        run = None  # a live earlier result would be downloaded inside the next timed call
        t0 = time.perf_counter()
        run = engine.run_tableau(program, sched, rng.make_key(1))
        best = min(best, time.perf_counter() - t0)
    return best, run


def kernel_times(engine, program, sched, repeat: int):
    """[(kernel, (launches a run, device ms a run))], largest first: `repeat` profiled runs (every
    launch bracketed by CUDA events, summed per kernel in the launcher's `kernel_totals`)."""
    totals = engine.launcher.kernel_totals
    totals.clear()
    engine.profile = True
    try:
        for _ in range(repeat):
            run = engine.run_tableau(program, sched, rng.make_key(1))
            run = None  # noqa: F841 (dropped: the next run would download it)
    finally:
        engine.profile = False
    per = [(k, (count // repeat, 1e3 * seconds / repeat)) for k, (count, seconds) in totals.items()]
    totals.clear()
    return sorted(per, key=lambda kv: -kv[1][1])


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 10000, 100000])
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--stages", action="store_true", help="one more, profiled run per size: device time per stage")
    ap.add_argument("--compare", action="store_true",
                    help="also time the rows path (each row through every collapse: the low-rank update's oracle) "
                         "and check that both give the same records (and tableau up to n = 30k)")
    ap.add_argument("--unfused", action="store_true",
                    help="also time each window making its own pass 1 (fuse_windows=False: the fused passes' oracle) "
                         "and check that both give the same records and, up to n = 100k, the same final tableau")
    ap.add_argument("--kernels", action="store_true",
                    help="--repeat more runs per size (and per engine with --unfused) with every launch bracketed by "
                         "CUDA events: device ms per kernel a run, and its launches")
    ap.add_argument("--measured", type=int, default=None,
                    help="measurements a layer (default the paper's max(1, n // 1400)): the windows' width")
    ap.add_argument("--chunk-apart", type=int, default=None,
                    help="collapses a low-rank chunk in a run whose windows do not fuse (--unfused, or no room for "
                         "the fused buffers): the engines' lowrank_chunk_apart")
    ap.add_argument("--fused-chunks", type=int, nargs="+", default=None, metavar="C",
                    help="collapses a low-rank chunk in a run whose windows fuse, the first whose buffers fit: the "
                         "engine's fused_chunks (128 reproduces the largest n's chunks at smaller n)")
    ap.add_argument("--lowrank-min", type=int, default=None,
                    help="windows of at least this many collapses take the low-rank update (default: the engine's)")
    args = ap.parse_args(argv)
    from cirq_quasarq.engines.cuda import CudaEngine

    engine = CudaEngine()
    if args.lowrank_min is not None:
        engine.lowrank_min = args.lowrank_min
    rows_engine = CudaEngine(lowrank_windows=False) if args.compare else None
    unfused_engine = CudaEngine() if args.unfused else None
    if unfused_engine is not None:
        unfused_engine.fuse_windows = False
    if args.chunk_apart is not None:
        for e in (engine, unfused_engine):
            if e is not None:
                e.lowrank_chunk_apart = args.chunk_apart
    if args.fused_chunks is not None:
        engine.fused_chunks = tuple(args.fused_chunks)
    warm = random_clifford_program(200, 5)
    for e in (engine, rows_engine, unfused_engine):
        if e is not None:
            e.run_tableau(warm, schedule(warm), rng.make_key(0))
    bandwidth = copy_bandwidth(engine)
    print(f"device copy bandwidth {bandwidth / 1e9:.0f} GB/s (read + write)")
    print(f"{'n':>7} {'depth':>5} {'gates':>9} {'meas':>6} {'GPU s':>8} {'target':>7} {'floor s':>8}"
          + (f" {'rows s':>8} {'same':>5}" if args.compare else "")
          + (f" {'unfused s':>9} {'same':>5}" if args.unfused else "") + f" {'records':>12} {'tableau':>12}")
    for n in args.sizes:
        program = random_clifford_program(n, args.depth, measured=args.measured)
        sched = schedule(program)
        best, run = best_of(engine, program, sched, args.repeat)
        gates = int(np.sum(opcodes.KIND[program.instructions[:, 0]] == opcodes.Kind.UNITARY))
        target = TARGETS.get(n)
        scaled = f"{target * args.depth / 100:.3f}" if target else "-"
        # The floor: one read and one write of the tableau a pass, the passes the engine makes (a
        # window each, none for a gate window folded into the collapse window before it); the
        # tableau is 2n rows of n bits of x and of z.
        passes = engine.tableau_passes(program, sched)
        floor = passes * 2 * (2 * n * ((n + 63) // 64) * 8 * 2) / bandwidth
        line = f"{n:>7} {args.depth:>5} {gates:>9} {program.num_records:>6} {best:>8.4f} {scaled:>7} {floor:>8.4f}"
        if rows_engine is not None:
            rows_best, rows_run = best_of(rows_engine, program, sched, min(args.repeat, 2 if n <= 30000 else 1))
            same = np.array_equal(run.records, rows_run.records)
            if n <= 30000:
                same = same and run.tableau.equals(rows_run.tableau)
            line += f" {rows_best:>8.4f} {str(same):>5}"
        if unfused_engine is not None:
            unfused_best, unfused_run = best_of(unfused_engine, program, sched, args.repeat)
            same = np.array_equal(run.records, unfused_run.records)
            if n <= 100000:
                same = same and run.tableau.equals(unfused_run.tableau)
            unfused_run = None
            line += f" {unfused_best:>9.4f} {str(same):>5}"
        # the final tableau's fingerprint up to 100k qubits (5 GB to read back there)
        print(line + f" {digest(run.records)} {digest(tableau_bytes(run.tableau)) if n <= 100000 else '-':>12}",
              flush=True)
        run = None
        if args.kernels:
            for name, e in (("fused", engine), ("unfused", unfused_engine)):
                if e is not None:
                    print(f"        kernels, {name} (device ms a run / launches): " + ", ".join(
                        f"{k} {ms:.1f}/{count}" for k, (count, ms) in kernel_times(e, program, sched, args.repeat)),
                        flush=True)
        if args.stages:  # launches bracketed by events: slower end to end, exact per stage
            engine.profile = True
            engine.run_tableau(program, sched, rng.make_key(1))
            engine.profile = False
            print("        stages (device s): " + ", ".join(f"{k} {v:.4f}" for k, v in engine.stage_seconds.items()),
                  flush=True)


if __name__ == "__main__":
    main()
