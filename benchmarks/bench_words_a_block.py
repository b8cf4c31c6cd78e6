"""Frame mode's shot words a block, forced (GPU): d = 51, 10k shots, this code's plan against blocks
of a given number of words.

    python -m benchmarks.bench_words_a_block [--words 1]

At d = 51 a word's frames take 86 KB of shared memory. Two blocks a multiprocessor would give each
block one word: 157 blocks on 132 multiprocessors, where 25 hold two. The plan instead gives each
block two words (171 KB, one block a multiprocessor: 79 blocks). Forcing `--words` words a block
(`FrameMode._words_a_block` and the rule after it; 1: the plan before that rule) shows what each
loses. Records and detection events, the previous result kept (a loop's calls into a kept
page-locked buffer), four rounds of six calls of each setting in turn: each setting's median and best
call and the median span of its frame kernels."""
import argparse
import statistics
import sys
import time

from cirq_quasarq.engines import select_engine
from cirq_quasarq.engines.cuda import frames as frame_mode

from .bench_repeat_calls import call
from .circuits import surface_code_stim


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--words", type=int, default=1, help="shot words a block in the forced setting")
    args = ap.parse_args(argv)
    engine = select_engine("gpu")
    plan = frame_mode.FrameMode.__dict__["_words_a_block"]  # the staticmethod itself
    forced = staticmethod(lambda words, slots, cap, alone_cap: args.words)
    circuit, shots = surface_code_stim(51, 51, 1e-3), 10_000
    kept = None
    for _ in range(10):
        kept = call(circuit, shots, False)
        kept = call(circuit, shots, True)
    times, spans = {}, {}
    for _ in range(4):
        for setting in ("plan", f"{args.words} words a block"):
            frame_mode.FrameMode._words_a_block = plan if setting == "plan" else forced
            for det in (False, True):
                for _ in range(6):
                    t = time.perf_counter()
                    kept = call(circuit, shots, det)
                    times.setdefault((setting, det), []).append((time.perf_counter() - t) * 1e3)
                spans.setdefault((setting, det), []).append(engine.last_frame_kernel_s * 1e3)
    frame_mode.FrameMode._words_a_block = plan
    del kept
    for (setting, det), ts in times.items():
        print(f"{setting}, {'detection events' if det else 'records'}: median {statistics.median(ts):.2f} ms "
              f"(best {min(ts):.2f}), frame kernels {statistics.median(spans[setting, det]):.2f} ms a call")


if __name__ == "__main__":
    sys.exit(main())
