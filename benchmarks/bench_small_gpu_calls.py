"""Small GPU sampling calls: a d = 3 surface code's records and detection events, a new simulator a
call, as the qec suite's repeat calls make them (GPU).

    python -m benchmarks.bench_small_gpu_calls

d = 3, rounds 3, p = 1e-3, at 100k, 1M and 3M shots: `sample_measurements(c, shots,
bit_packed=True)` and `sample_detectors(c, shots, append_observables=True, bit_packed=True)`, with
the host's memory limits read on every call that is checked (`memory.REUSE_S = 0`, the code before)
and with a recent reading standing for it, in turn, ten rounds of three calls; each variant's median
and best call and the frame kernels' device time; then the host profile of fifty calls of 1M
records.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time

from .circuits import surface_code_stim


def main() -> None:
    import stim

    import cirq_quasarq as cq
    from cirq_quasarq.core import memory

    def call(circuit, shots, det):
        sim = cq.QuasarqSimulator(seed=1, device="gpu")
        if det:
            return sim.sample_detectors(circuit, shots, append_observables=True, bit_packed=True)
        return sim.sample_measurements(circuit, shots, bit_packed=True)

    warm = stim.Circuit("H 0\nCX 0 1\nM 0 1\nDETECTOR rec[-1] rec[-2]")
    call(warm, 64, False)
    call(warm, 64, True)
    engine = cq.QuasarqSimulator(seed=1, device="gpu").engine
    reuse = memory.REUSE_S
    variants = {"limits read every call": 0.0, "a recent reading stands": reuse}
    circuit = surface_code_stim(3, 3, 1e-3)
    try:
        for shots in (100_000, 1_000_000, 3_000_000):
            for det in (False, True):
                for _ in range(3):
                    call(circuit, shots, det)
                times = {k: [] for k in variants}
                kernels = {k: [] for k in variants}
                for _ in range(10):
                    for name, seconds in variants.items():
                        memory.REUSE_S = seconds
                        memory.forget_reading()
                        for _ in range(3):
                            t0 = time.perf_counter()
                            call(circuit, shots, det)
                            times[name].append(1e3 * (time.perf_counter() - t0))
                            kernels[name].append(1e3 * (engine.last_frame_kernel_s or 0.0))
                print(f"d=3 {shots} shots, {'detection events' if det else 'records'}: " + "; ".join(
                    f"{k} median {statistics.median(v):.3f} ms, best {min(v):.3f} (frame kernels "
                    f"{statistics.median(kernels[k]):.3f})" for k, v in times.items()), flush=True)
    finally:
        memory.REUSE_S = reuse
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(50):
        call(circuit, 1_000_000, False)
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(12)
    print("50 calls of 1M records:", "\n".join(out.getvalue().splitlines()[:24]))


if __name__ == "__main__":
    main()
