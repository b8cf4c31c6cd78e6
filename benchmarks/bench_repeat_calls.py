"""Repeat calls on a compiled circuit, records against detection events (GPU).

    python -m benchmarks.bench_repeat_calls [--in-turn | --pairs N]

Surface codes d = 51 (10k shots) and d = 25 (100k shots), `sample_measurements` and
`sample_detectors(separate_observables=True)`, bit-packed, a new simulator a call: five calls whose
result is dropped at once and six in a loop that keeps the previous result (`r = sample(...)`), the
wall time of each; the device time per kernel over the five (pieces on several streams overlap, so
these sums exceed the wall time); the host profile of one call; then what a result in ordinary
memory costs against a kept page-locked buffer (169 MB: fresh pages, pageable and page-locked copies,
locking).

`--pairs N` instead times records against detection events at d = 51 (10k shots) and d = 25 (100k),
one call of each in turn N times (strictly alternating), the previous result kept as in a loop
`r = sample(...)`, no profiling events: each mode's median, quartiles and best, and in how many
pairs the detection events were no slower.

`--in-turn` instead times, in one process, records, detection events and detection events with
record_parities' pass first (`fused_parities=False`, the code before the parities were XORed as
they are transposed), one call of each in turn nine times, for d = 51 (10k shots), d = 25 (100k)
and d = 11 (1M): each mode's median and best call and its kernels' device time a call.
"""
import argparse
import cProfile
import io
import pstats
import statistics
import time

import numpy as np
import stim

import cirq_quasarq as cq
from cirq_quasarq.engines import select_engine

from .circuits import surface_code_stim


def call(c, shots, det):
    sim = cq.QuasarqSimulator(seed=1, device="gpu")
    if det:
        return sim.sample_detectors(c, shots, separate_observables=True, bit_packed=True)
    return sim.sample_measurements(c, shots, bit_packed=True)


def in_turn(eng) -> None:
    L = eng.launcher
    modes = {"records": (False, True), "detection events": (True, True),
             "detection events, record_parities pass first": (True, False)}
    for d, shots in ((51, 10_000), (25, 100_000), (11, 1_000_000)):
        c = surface_code_stim(d, d, 1e-3)
        for det, fused in modes.values():
            eng.fused_parities = fused
            call(c, shots, det); call(c, shots, det)
        times = {m: [] for m in modes}
        device = {m: {} for m in modes}
        for _ in range(9):
            for m, (det, fused) in modes.items():
                eng.fused_parities = fused
                L.kernel_totals.clear()
                t = time.perf_counter(); call(c, shots, det); times[m].append((time.perf_counter() - t) * 1e3)
                for k, (_, seconds) in L.kernel_totals.items():
                    device[m][k] = device[m].get(k, 0.0) + 1e3 * seconds / 9
        print(f"d={d} shots={shots} records={c.num_measurements} detectors={c.num_detectors}", flush=True)
        for m in modes:
            print(f"  {m}: median {statistics.median(times[m]):.2f} ms, best {min(times[m]):.2f}; all "
                  + " ".join(f"{x:.1f}" for x in times[m]) + "; kernels a call (ms, pieces summed): "
                  + ", ".join(f"{k} {v:.3f}" for k, v in device[m].items()), flush=True)
    eng.fused_parities = True


def pairs(count: int) -> None:
    for d, shots in ((51, 10_000), (25, 100_000)):
        c = surface_code_stim(d, d, 1e-3)
        modes = (lambda: call(c, shots, False), lambda: call(c, shots, True))
        kept = None
        for f in modes * 5:  # warm, and past the misses that make each mode's page-locked buffer
            kept = f()  # (the previous result only is kept)
        times = ([], [])
        # Strictly in turn, so that each call follows one of the other mode: the kept result then holds
        # the other mode's page-locked buffer and each mode finds its own free (a pair run the other
        # way round had a mode follow itself, take the other's larger buffer, and leave the next call
        # of the other mode none: its result went to ordinary memory, a slow call in every other pair).
        for i in range(count):
            for m in (0, 1):
                t = time.perf_counter()
                result = modes[m]()
                times[m].append((time.perf_counter() - t) * 1e3)
                kept = result  # the one before goes only now, as in a loop
        del kept
        wins = sum(1 for rec, det in zip(*times) if det <= rec)

        def summary(ts):
            q = statistics.quantiles(ts, n=4)
            return f"median {statistics.median(ts):.2f} ms (quartiles {q[0]:.2f}-{q[2]:.2f}, best {min(ts):.2f})"

        print(f"d={d} shots={shots} records={c.num_measurements} detectors={c.num_detectors} pairs={count}: "
              f"records {summary(times[0])}; detection events {summary(times[1])}; "
              f"detection events no slower in {wins} of {count} pairs", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--in-turn", action="store_true", help="records and detection events (two ways) in turn")
    ap.add_argument("--pairs", type=int, default=0, metavar="N", help="records against detection events, N pairs")
    args = ap.parse_args()
    eng = select_engine("gpu")
    L = eng.launcher
    warm = stim.Circuit("H 0\nCX 0 1\nX_ERROR(0.1) 1\nM 0 1\nDETECTOR rec[-1] rec[-2]")
    cq.QuasarqSimulator(seed=0, device="gpu").sample_detectors(warm, 64, bit_packed=True)

    if args.pairs:
        return pairs(args.pairs)
    eng.profile = True  # every launch bracketed by events, summed per kernel in L.kernel_totals
    if args.in_turn:
        return in_turn(eng)

    def kernels():
        """Device ms per kernel of the calls since the last `kernels()`."""
        per = {k: round(1e3 * seconds, 3) for k, (_, seconds) in L.kernel_totals.items()}
        L.kernel_totals.clear()
        return per

    for d, shots in ((51, 10_000), (25, 100_000)):
        c = surface_code_stim(d, d, 1e-3)
        print(f"d={d} shots={shots} qubits={c.num_qubits} records={c.num_measurements} dets={c.num_detectors}", flush=True)
        for det in (False, True):
            call(c, shots, det); call(c, shots, det); kernels()
            tag = "det" if det else "rec"
            drop = []
            for _ in range(5):
                t = time.perf_counter(); call(c, shots, det); drop.append((time.perf_counter() - t) * 1e3)
            print(f"  {tag} result dropped: " + " ".join(f"{x:.1f}" for x in drop) + " ms; kernels (ms, 5 calls):", kernels(), flush=True)
            keep = None; kp = []
            for _ in range(6):
                t = time.perf_counter(); keep = call(c, shots, det); kp.append((time.perf_counter() - t) * 1e3)
            print(f"  {tag} previous kept: " + " ".join(f"{x:.1f}" for x in kp) + " ms", flush=True)
            keep = None; kernels()
            pr = cProfile.Profile(); pr.enable(); call(c, shots, det); pr.disable()
            s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(12); print(s.getvalue()[-3500:])
        kernels()

    # the host memory behind a miss
    import pycuda.driver as cuda
    nbytes = 169_000_000
    dev = cuda.mem_alloc(nbytes)
    for _ in range(2):
        t = time.perf_counter(); a = np.empty(nbytes // 8, np.uint64); a[::512] = 0; t1 = time.perf_counter() - t
        t = time.perf_counter(); cuda.memcpy_dtoh(a, dev); t2 = time.perf_counter() - t
        t = time.perf_counter(); b = np.empty(nbytes // 8, np.uint64); cuda.memcpy_dtoh(b, dev); t3 = time.perf_counter() - t
        t = time.perf_counter(); p = cuda.pagelocked_empty(nbytes // 8, np.uint64); t4 = time.perf_counter() - t
        t = time.perf_counter(); cuda.memcpy_dtoh(p, dev); t5 = time.perf_counter() - t
        t = time.perf_counter(); q = np.empty_like(a); np.copyto(q, p); t6 = time.perf_counter() - t
        print(f"169 MB: fresh+touch {t1*1e3:.1f}, pageable copy into touched {t2*1e3:.1f}, into fresh {t3*1e3:.1f}, "
              f"pinned alloc {t4*1e3:.1f}, pinned copy {t5*1e3:.1f}, host copy pinned->fresh {t6*1e3:.1f} ms", flush=True)
        del a, b, p, q


if __name__ == "__main__":
    main()
