"""Large results in ordinary memory: through the staging slots or copied straight, and into a kept
page-locked buffer.

    python -m benchmarks.bench_result_memory

GPU only. `sample_measurements(..., bit_packed=True)` of surface codes (d = 51 10k shots, d = 25
100k, d = 11 1M: 169, 203 and 180 MB of records) on the shared engine, results kept so that every
call takes fresh ordinary memory (page-locked result buffers switched off), with the staging slots
(`frames._Staging`) and without, alternating in one process, four calls each, three rounds; then
one profiled call of each; then d = 51 with page-locked result buffers made at the first miss.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time

from .circuits import surface_code_stim


def main() -> None:
    import stim

    import cirq_quasarq
    from cirq_quasarq.engines.cuda import frames

    pinned_after, staging_min = frames._PINNED_AFTER, frames._STAGING_MIN_BYTES
    frames._PINNED_AFTER = 10 ** 9  # results in ordinary memory only
    sim = cirq_quasarq.QuasarqSimulator(seed=1, device="gpu")
    sim.sample_measurements(stim.Circuit("H 0\nM 0"), 64, bit_packed=True)  # the slots start locking
    staging = sim.engine._frames._staging
    while not staging.ready():
        time.sleep(0.01)
    try:
        for d, shots in ((51, 10_000), (25, 100_000), (11, 1_000_000)):
            circuit = surface_code_stim(d, d, 1e-3)
            sim.sample_measurements(circuit, shots, bit_packed=True)  # compile, reference
            for variant in ("staged", "direct") * 3:
                frames._STAGING_MIN_BYTES = staging_min if variant == "staged" else 1 << 62
                kept, times = [], []
                for _ in range(4):
                    t0 = time.perf_counter()
                    kept.append(sim.sample_measurements(circuit, shots, bit_packed=True))
                    times.append(time.perf_counter() - t0)
                print(f"d={d} {shots} shots {variant}: calls ms", ["%.1f" % (1e3 * t) for t in times], flush=True)
            for variant in ("staged", "direct"):
                frames._STAGING_MIN_BYTES = staging_min if variant == "staged" else 1 << 62
                profile = cProfile.Profile()
                profile.enable()
                sim.sample_measurements(circuit, shots, bit_packed=True)
                profile.disable()
                out = io.StringIO()
                pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(6)
                print(variant, "\n".join(out.getvalue().splitlines()[6:16]))
            frames._STAGING_MIN_BYTES = staging_min
        frames._PINNED_AFTER = 0  # a page-locked buffer at the first miss
        circuit, times, result = surface_code_stim(51, 51, 1e-3), [], None
        for _ in range(6):
            t0 = time.perf_counter()
            result = sim.sample_measurements(circuit, 10_000, bit_packed=True)
            times.append(time.perf_counter() - t0)
        print("d=51 10000 shots, page-locked results (the previous one kept): calls ms",
              ["%.1f" % (1e3 * t) for t in times], flush=True)
        del result
    finally:
        frames._PINNED_AFTER, frames._STAGING_MIN_BYTES = pinned_after, staging_min


if __name__ == "__main__":
    main()
