"""Frame mode's banded copies (GPU): a one-wave call's shot-major rows transposed and copied in bands
while the frame kernel runs, against the same engine with the bands off (everything after the kernel).

    python -m benchmarks.bench_banded_copies [--rounds 4]

Surface codes d = 51 and d = 25, 10k shots each (157 shot words: one wave of blocks), records and
detection events, bit-packed, a new simulator a call, into a kept page-locked buffer (a loop that
keeps the previous result, `r = sample(...)`; results bound for ordinary memory never take bands).
Rounds of six calls of each setting in turn: each setting's median and best call and the median
span of its frame kernels."""
import argparse
import statistics
import sys
import time

from cirq_quasarq.engines import select_engine

from .bench_repeat_calls import call
from .circuits import surface_code_stim


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    engine = select_engine("gpu")
    for d in (51, 25):
        circuit, shots = surface_code_stim(d, d, 1e-3), 10_000
        times, spans = {}, {}
        kept = None
        for banded in (True, False):  # warm-up, both settings
            engine.banded_copies = banded
            for det in (False, True):
                for _ in range(4):
                    kept = call(circuit, shots, det)
        for _ in range(args.rounds):
            for banded in (True, False):
                engine.banded_copies = banded
                for det in (False, True):
                    for _ in range(6):
                        t = time.perf_counter()
                        kept = call(circuit, shots, det)
                        times.setdefault((banded, det), []).append((time.perf_counter() - t) * 1e3)
                        spans.setdefault((banded, det), []).append(engine.last_frame_kernel_s * 1e3)
        engine.banded_copies = True
        del kept
        for (banded, det), ts in times.items():
            print(f"d = {d}, {'bands' if banded else 'after the kernel'}, "
                  f"{'detection events' if det else 'records'}: median {statistics.median(ts):.2f} ms "
                  f"(best {min(ts):.2f}), frame kernels {statistics.median(spans[banded, det]):.2f} ms", flush=True)

if __name__ == "__main__":
    sys.exit(main())
