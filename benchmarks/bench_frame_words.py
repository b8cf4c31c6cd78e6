"""GPU frame mode at few shot words: the block kernels (a block per few words) against the spread
kernel (every block on the same words), and which one `FrameMode.spread_pays` picks.

    python -m benchmarks.bench_frame_words [--cases random5000 random100000 d51 ...] [--words 1 4 16 64]

`randomN`: the paper's random Clifford circuit on N qubits, depth 100 (stim input); `dD`: Stim's
rotated surface-code memory experiment, distance and rounds D, noise 1e-3. Per case and word count,
`sample_frames(..., shot_major=True)` with a zero reference (the bits do not matter here), the
kernel time (CUDA events) and the call's wall time, best of three after a warm-up, with
`spread_frames` False and True; `auto` is what the engine picks by itself.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from cirq_quasarq.compiler import compile_stim
from cirq_quasarq.core import rng
from cirq_quasarq.schedule import schedule

from .circuits import surface_code_stim
from .random_clifford import paper_random_circuit_stim


def _circuit(case: str):
    if case.startswith("random"):
        return paper_random_circuit_stim(int(case[len("random"):]), 100, seed=1)
    d = int(case[1:])
    return surface_code_stim(d, d, 1e-3)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", nargs="+", default=["random5000", "random10000", "random30000", "d25", "d51"])
    ap.add_argument("--words", nargs="+", type=int, default=[1, 4, 16, 64])
    args = ap.parse_args(argv)
    from cirq_quasarq.engines.cuda import CudaEngine

    engine = CudaEngine()
    for case in args.cases:
        t0 = time.perf_counter()
        program = compile_stim(_circuit(case))
        sched = schedule(program)
        ref = np.zeros(program.num_records, dtype=np.uint8)
        dp = engine.device_program(program, sched)
        rows, runs = dp.window_rows()
        shared = engine._frames.fits_shared(program.num_qubits)
        print(f"{case}: {len(program.instructions)} rows, {len(rows)} windows, {runs} runs "
              f"(setup {time.perf_counter() - t0:.1f} s)", flush=True)
        for words in args.words:
            got = {}
            for spread in (False, True):
                engine.spread_frames = spread
                kernel, wall = [], []
                for i in range(4):
                    t = time.perf_counter()
                    engine.sample_frames(program, sched, rng.make_key(i), ref, 64 * words, shot_major=True)
                    wall.append(time.perf_counter() - t)
                    kernel.append(engine.last_frame_kernel_s)
                got[spread] = (1e3 * min(kernel[1:]), 1e3 * min(wall[1:]))
            engine.spread_frames = None
            auto = engine._frames.spread_pays(dp, words, shared)
            print(f"  words {words:3d}: block kernels {got[False][0]:8.3f} ms (call {got[False][1]:8.3f}), "
                  f"spread {got[True][0]:8.3f} ms (call {got[True][1]:8.3f}); auto: {'spread' if auto else 'block'}",
                  flush=True)


if __name__ == "__main__":
    main()
