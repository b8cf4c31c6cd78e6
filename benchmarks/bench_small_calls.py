"""Small calls and first calls on the CPU engine, each beside its Stim counterpart in the same run.

    python -m benchmarks.bench_small_calls [--sinter SHOTS [--sinter-pairs N] [--sinter-sweep] [--sinter-only]]
        [--first-call-pairs N] [--worker-imports N] [--worker-tasks N]

- `sample_detectors` of 1,024 shots of a d = 5 surface code (p = 1e-3), a new call on a compiled
  circuit (what sinter's batches pay), against Stim's compiled detector sampler, and compile + sample;
- compiling the paper's random Clifford circuit n = 2000 depth 100 (stim input) against Stim's
  `compile_sampler()`;
- the first `sample_measurements(c, 1)` on it, compile included, against `stim.TableauSimulator().do(c)`;
- with `--first-call-pairs N`, only that first call, its frames carried through the reference run
  (the NumPy engine's riders, where it takes them: not where the measured rows make the reference,
  as they do on this circuit) and not, N pairs in turn in one process;
- with `--sinter SHOTS` (needs the qec extra): `sinter.collect` of d = 3 and 5 surface codes with our
  plug-in against sinter's default sampler (Stim + pymatching), 2 workers, SHOTS shots a task
  (`--sinter-pairs N`: N pairs in turn, the first of a pair alternating, and the ratios' median);
  with `--sinter-sweep`, the tasks of a threshold sweep instead: d = 3, 5, 7 at p = 1, 2, 3 and 5
  x 1e-3 (twelve tasks). The package's bytecode is compiled first, as `pip install` leaves it:
  each of sinter's worker processes imports the plug-in, and a checkout run where bytecode is not
  written (PYTHONDONTWRITEBYTECODE) would compile our modules from source in every worker (about
  45 ms each on the 2-core machine), where sinter's and Stim's come compiled;
- with `--worker-imports N`, only what each of those workers adds to sinter's own start: the
  plug-in's import after sinter, numpy and stim, in N new processes (bytecode compiled first; the
  median and range);
- with `--worker-tasks N`, one worker's whole share without sinter's pool: in a new process each
  (N a sampler, in turn), the sampler's import, then for the d = 3 and d = 5 tasks in turn the
  compiled sampler (the decoder's import and build included) and 100,000 shots in the batches each
  sampler asks for, ours against sinter's default (Stim, then pymatching), medians of each part. The
  sampler object itself is made in sinter's parent process, so its making is not counted.
Times are the best of several (wall clock); ratios are ours over Stim's within this run.
"""

from __future__ import annotations

import argparse
import time

# Stim alone: sinter starts its workers by 'spawn', and each imports this module again, as a user's
# script's workers import theirs; `benchmarks.circuits` would bring Cirq into every worker of both
# samplers (1-1.5 s each), which a script of stim and sinter does not.
from .stim_circuits import surface_code_stim


def _best(fn, n: int = 7) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def small_calls() -> None:
    import stim

    import cirq_quasarq
    from cirq_quasarq.compiler.stim_circuit import clear_stim_cache, compile_stim

    from .random_clifford import paper_random_circuit_stim

    d5 = surface_code_stim(5, 5, 1e-3)
    sim = cirq_quasarq.QuasarqSimulator(seed=1, device="cpu")
    call = lambda: sim.sample_detectors(d5, 1024, separate_observables=True, bit_packed=True)
    t0 = time.perf_counter()
    call()
    first = time.perf_counter() - t0
    ours = _best(call, 50)
    sampler = d5.compile_detector_sampler(seed=1)
    theirs = _best(lambda: sampler.sample(1024, separate_observables=True, bit_packed=True), 50)
    theirs_compiled = _best(lambda: d5.compile_detector_sampler(seed=1).sample(1024, separate_observables=True,
                                                                               bit_packed=True), 50)
    print(f"sample_detectors, d = 5, 1,024 shots: ours first {first * 1e3:.2f} ms, then {ours * 1e3:.2f} ms; "
          f"Stim {theirs * 1e3:.2f} ms ({theirs_compiled * 1e3:.2f} ms with its compile): "
          f"{ours / theirs:.1f}x / {ours / theirs_compiled:.1f}x")

    circuit = paper_random_circuit_stim(2000, 100, seed=3)
    compile_stim(paper_random_circuit_stim(50, 5, seed=1))  # a warm process

    def compile_new():
        clear_stim_cache()
        compile_stim(circuit)

    ours = _best(compile_new, 5)
    theirs = _best(lambda: circuit.compile_sampler(), 3)
    print(f"compile, random Clifford n = 2000 depth 100: ours {ours * 1e3:.0f} ms; Stim compile_sampler "
          f"{theirs * 1e3:.0f} ms: {ours / theirs:.2f}x")

    def first_call():
        clear_stim_cache()
        cirq_quasarq.QuasarqSimulator(seed=1, device="cpu").sample_measurements(circuit, 1)

    ours = _best(first_call, 3)
    theirs = _best(lambda: stim.TableauSimulator().do(circuit), 3)
    print(f"first sample_measurements(c, 1), compile included: ours {ours * 1e3:.0f} ms; "
          f"stim.TableauSimulator().do(c) {theirs * 1e3:.0f} ms: {ours / theirs:.2f}x")


def _compile_our_bytecode() -> None:
    """The package's bytecode written, as an install leaves it (sinter's workers import the plug-in)."""
    import compileall
    import os

    import cirq_quasarq

    compileall.compile_dir(os.path.dirname(cirq_quasarq.__file__), quiet=1)


def sinter_collect(shots: int, pairs: int = 1, sweep: bool = False) -> None:
    import statistics

    import sinter

    from cirq_quasarq.sinter import QuasarqSampler

    _compile_our_bytecode()
    codes = [(d, p) for d in (3, 5, 7) for p in (1e-3, 2e-3, 3e-3, 5e-3)] if sweep else [(3, 1e-3), (5, 1e-3)]
    tasks = [sinter.Task(circuit=surface_code_stim(d, d, p), json_metadata={"d": d, "p": p}) for d, p in codes]
    what = "d = 3, 5 and 7 at p = 1e-3 to 5e-3 (12 tasks)" if sweep else "d = 3 and 5"
    samplers = (("our plug-in", dict(decoders=["q"], custom_decoders={"q": QuasarqSampler(device="cpu", seed=1)})),
                ("sinter's default sampler", dict(decoders=["pymatching"])))
    ratios = []
    for i in range(pairs):
        walls = {}
        for name, kwargs in samplers if i % 2 == 0 else samplers[::-1]:  # the first of a pair alternates
            t0 = time.perf_counter()
            stats = sinter.collect(num_workers=2, tasks=tasks, max_shots=shots, **kwargs)
            walls[name] = time.perf_counter() - t0
            print(f"sinter.collect, {what}, {shots:,} shots a task, {name}: {walls[name]:.2f} s",
                  sorted((s.json_metadata["d"], s.json_metadata["p"], s.shots, s.errors) for s in stats)
                  if not sweep else f"({sum(s.errors for s in stats)} errors in all)")
        ratios.append(walls[samplers[0][0]] / walls[samplers[1][0]])
    if pairs > 1:
        print(f"sinter.collect, {what}, ours / sinter's default, {pairs} pairs: median {statistics.median(ratios):.2f}, "
              f"range {min(ratios):.2f}-{max(ratios):.2f}")


def first_call_pairs(pairs: int) -> None:
    """The first one-shot call on the paper's circuit (n = 2000, depth 100), its frames carried
    through the reference run and not (`NumpyEngine(ride_frames=False)`: the reference run, then
    frame mode), in turn in one process, the first of a pair alternating, Stim's
    `TableauSimulator().do(c)` after each pair: medians, quartiles, and the ratios pair by pair."""
    import statistics

    import numpy as np
    import stim

    import cirq_quasarq
    from cirq_quasarq.compiler.stim_circuit import clear_stim_cache

    from .random_clifford import paper_random_circuit_stim

    circuit = paper_random_circuit_stim(2000, 100, seed=3)
    cirq_quasarq.QuasarqSimulator(seed=1, device="cpu").sample_measurements(paper_random_circuit_stim(50, 5, seed=1), 1)
    times = {"riders": [], "frame mode": [], "stim": []}
    for i in range(pairs):
        for name in ("riders", "frame mode") if i % 2 == 0 else ("frame mode", "riders"):
            sim = cirq_quasarq.QuasarqSimulator(seed=1, device="cpu")
            sim.engine.ride_frames = name == "riders"
            clear_stim_cache()
            t0 = time.perf_counter()
            sim.sample_measurements(circuit, 1)
            times[name].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        stim.TableauSimulator().do(circuit)
        times["stim"].append(time.perf_counter() - t0)
    for name, got in times.items():
        q1, median, q3 = np.percentile(got, [25, 50, 75]) * 1e3
        print(f"first sample_measurements(c, 1), {name}: median {median:.1f} ms, quartiles {q1:.1f}-{q3:.1f}, "
              f"best {min(got) * 1e3:.1f}")
    for name in ("riders", "frame mode"):
        ratios = [a / b for a, b in zip(times[name], times["stim"])]
        print(f"  {name} / TableauSimulator, pair by pair: median {statistics.median(ratios):.3f} "
              f"({min(ratios):.2f}-{max(ratios):.2f})")


def worker_imports(processes: int) -> None:
    import statistics
    import subprocess
    import sys

    _compile_our_bytecode()
    probe = ("import time, sinter, numpy, stim; t = time.perf_counter(); import cirq_quasarq.sinter; "
             "print(time.perf_counter() - t)")
    got = [float(subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout)
           for _ in range(processes)]
    print(f"import cirq_quasarq.sinter after sinter, numpy and stim (a sinter worker's share), {processes} "
          f"processes: median {statistics.median(got) * 1e3:.1f} ms, range {min(got) * 1e3:.1f}-{max(got) * 1e3:.1f}")


def _worker_share(which: str) -> None:
    # one sinter worker's work on the d = 3 and 5 tasks, in this (new) process; the circuits from Stim
    # alone, as a worker has them
    import sinter

    tasks = []
    for d in (3, 5):
        circuit = surface_code_stim(d, d, 1e-3)
        dem = circuit.detector_error_model(decompose_errors=True, approximate_disjoint_errors=True)
        tasks.append(sinter.Task(circuit=circuit, decoder="pymatching", detector_error_model=dem))
    # the sampler is made in sinter's parent process and reaches a worker pickled; here it is made
    # after the import and left out of the worker's share (ours starts a multiprocessing counter)
    t0 = time.perf_counter()
    if which == "ours":
        from cirq_quasarq.sinter import QuasarqSampler
    parts = [time.perf_counter() - t0]
    if which == "ours":
        sampler = QuasarqSampler(device="cpu", seed=1)
    else:  # what sinter.collect makes of decoders=["pymatching"]
        from sinter._decoding._stim_then_decode_sampler import StimThenDecodeSampler

        sampler = StimThenDecodeSampler(decoder=sinter.BUILT_IN_DECODERS["pymatching"], count_detection_events=False,
                                        count_observable_error_combos=False, tmp_dir=None)
    for task in tasks:
        t0 = time.perf_counter()
        compiled = sampler.compiled_sampler_for_task(task)
        parts.append(time.perf_counter() - t0)
        t0, shots = time.perf_counter(), 0
        while shots < 100_000:
            shots += compiled.sample(100_000 - shots if compiled.handles_throttling() else 1024).shots
        parts.append(time.perf_counter() - t0)
    print(" ".join(f"{x:.6f}" for x in parts))


def worker_tasks(processes: int) -> None:
    import statistics
    import subprocess
    import sys

    import numpy as np

    _compile_our_bytecode()
    got = {"ours": [], "sinter's default": []}
    for i in range(processes):
        for name in got if i % 2 == 0 else list(got)[::-1]:
            out = subprocess.run([sys.executable, "-m", "benchmarks.bench_small_calls", "--worker-share",
                                  "ours" if name == "ours" else "default"], check=True, capture_output=True, text=True)
            got[name].append([float(x) for x in out.stdout.split()])
    labels = ("import", "d = 3 compiled sampler", "d = 3 shots", "d = 5 compiled sampler", "d = 5 shots")
    for name, runs in got.items():
        med = np.median(np.array(runs), axis=0) * 1e3
        print(f"one worker's share, {name} ({processes} processes, medians): "
              + ", ".join(f"{label} {m:.1f} ms" for label, m in zip(labels, med)) + f"; in all {med.sum():.1f} ms")
    totals = {name: [sum(r) for r in runs] for name, runs in got.items()}
    ratios = [a / b for a, b in zip(totals["ours"], totals["sinter's default"])]
    print(f"  ours / sinter's default, process by process: median {statistics.median(ratios):.3f} "
          f"({min(ratios):.2f}-{max(ratios):.2f})")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sinter", type=int, default=0, metavar="SHOTS", help="also time sinter.collect (qec extra)")
    ap.add_argument("--sinter-pairs", type=int, default=1, metavar="N",
                    help="sinter.collect with each sampler N times in turn, and the ratios' median")
    ap.add_argument("--sinter-sweep", action="store_true", help="the tasks of a threshold sweep (d = 3, 5, 7; 4 p each)")
    ap.add_argument("--sinter-only", action="store_true", help="only the sinter.collect pairs")
    ap.add_argument("--first-call-pairs", type=int, default=0, metavar="N",
                    help="only the first call, its frames in the reference run and not, N pairs in turn")
    ap.add_argument("--worker-imports", type=int, default=0, metavar="N",
                    help="only the sinter plug-in's import after sinter, numpy and stim, in N new processes")
    ap.add_argument("--worker-tasks", type=int, default=0, metavar="N",
                    help="only one sinter worker's share (import, compiled samplers, shots), ours and sinter's "
                         "default, in N new processes a sampler")
    ap.add_argument("--worker-share", choices=("ours", "default"), help=argparse.SUPPRESS)  # --worker-tasks' child
    args = ap.parse_args(argv)
    alone = ((args.worker_share, _worker_share), (args.worker_tasks, worker_tasks),
             (args.worker_imports, worker_imports), (args.first_call_pairs, first_call_pairs))
    for value, run in alone:  # each of these options runs on its own
        if value:
            run(value)
            return
    if not args.sinter_only:
        small_calls()
    if args.sinter:
        sinter_collect(args.sinter, args.sinter_pairs, args.sinter_sweep)


if __name__ == "__main__":
    main()
