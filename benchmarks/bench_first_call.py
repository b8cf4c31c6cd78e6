"""The first call on a circuit new to a warm process, beside the repeat call, and where it goes.

    python -m benchmarks.bench_first_call [--device gpu|cpu] [--cases NAME ...] [--peers] [--json FILE]
                                          [--samples N] [--baseline DIR] [--same-process] [--first-calls N]
                                          [--compiles N]

What a user meets: a process that has already run a small circuit (kernels built, caches warm),
then `sample_measurements(circuit, shots, bit_packed=True)` (or `sample_detectors`) with a new
simulator on a stim.Circuit it has never seen (`first`), then the same call on the same circuit with
another new simulator (`repeat`: the compiled Program is cached; a single shot's reference is
redone). The stages of the first call are timed on a twin circuit (an equal circuit built again,
the compile cache cleared): compile (stim.Circuit -> Program), schedule, the reference sample
(tableau mode, when the call needs one) and the rest of the call (device preparation and
sampling). The `cirq-random-*` cases give the same random circuits as a `cirq.Circuit` to
`run(circuit, repetitions=shots)`, as a Cirq user samples (the stages: the Cirq compile, and so on);
the `cirq-surface-*` cases a surface code so, its rounds written out as moments.
Peers (`--peers`, where installed): quasarq's first and repeat call the same way
(`compile_sampler` / `compile_detector_sampler` and a sample), and for the Cirq cases stimcirq's
`StimSampler().run` (it converts the circuit to Stim's on every call), each case in a process of its own
(quasarq ends its process on an illegal memory access at 100k qubits). Our cases too run each in a
process of its own (warmed as above), so that no case inherits another's result memory (a kept
page-locked buffer, or the miss count that makes one); `--same-process` runs them one after the
other in this one. `--baseline DIR` runs each case also with the cirq_quasarq of another checkout,
in turn with this one (the baseline first in every other sample: the second process of a pair had
read 0.1 s slower at 180k qubits with the same code in both), and `--samples N` repeats the whole
sequence: the code before and after a change in one run, several times (this host's Python timings
move by 30-50 % between samples).
`--first-calls N` adds N more first calls of the case's circuit in its process, the compile cache
cleared before each (`first_calls_s`; the kernels and the workspace stay warm): more first calls a
process for the price of one circuit's build (8-16 s at 100k qubits on an H100 host). Where a first
call's time goes, stage by stage on a timeline: `python -m benchmarks.first_call_timeline CASE`.
`--compiles N` times N compiles alone in the case's process, each of a new copy of its circuit
with the compile cache cleared (`compiles_s`): the compile stage, N times a process.
One JSON line a case and sample; `first_gc_s` / `repeat_gc_s` are the seconds the cyclic
garbage collector ran inside those calls (a full collection of a process with Cirq imported takes
about 100 ms, and lands in whichever call allocates when it comes due). `first_thread_cpu_s` (and
`first_calls_thread_cpu_s`) are the calling thread's CPU seconds in those first calls: its own work,
without the streamed compile's process, and less noisy than the wall clock (the driver's waits spin,
so they count too: for a call the device bounds it is near the wall).
"""

from __future__ import annotations

import argparse
import gc
import json
import pathlib
import subprocess
import sys
import time
import zlib
from typing import Optional

CASES = {
    # name: (kind, size, depth or rounds, shots, detectors)
    "random-5k-1": ("random", 5000, 100, 1, False),
    "random-10k-1": ("random", 10000, 100, 1, False),
    "random-10k-1024": ("random", 10000, 100, 1024, False),
    "random-30k-1": ("random", 30000, 100, 1, False),
    "random-100k-1": ("random", 100000, 100, 1, False),
    # the same circuits with a TICK after each layer (as stimcirq writes the Cirq twin's moments);
    # from 50k qubits a first call compiles either form in pieces while the device runs the pieces before
    "random-5k-1-ticks": ("random-ticks", 5000, 100, 1, False),
    "random-10k-1-ticks": ("random-ticks", 10000, 100, 1, False),
    "random-30k-1-ticks": ("random-ticks", 30000, 100, 1, False),
    "random-100k-1-ticks": ("random-ticks", 100000, 100, 1, False),
    "random-180k-1-ticks": ("random-ticks", 180000, 100, 1, False),
    "random-180k-1": ("random", 180000, 100, 1, False),
    "surface-11-1M": ("surface", 11, 11, 1_000_000, False),
    "surface-25-100k": ("surface", 25, 25, 100_000, False),
    "surface-25-100k-det": ("surface", 25, 25, 100_000, True),
    "surface-51-10k": ("surface", 51, 51, 10_000, False),
    "surface-51-10k-det": ("surface", 51, 51, 10_000, True),
}
# the same random circuits as a cirq.Circuit (a moment a layer: `random_clifford.paper_random_circuit`),
# called as a Cirq user calls a sampler: `run(circuit, repetitions=shots)`; the peer is stimcirq's
# `StimSampler().run` (the circuit converted to Stim's, then sampled)
CASES.update({"cirq-random-5k-1": ("cirq-random", 5000, 100, 1, False),
              "cirq-random-10k-1": ("cirq-random", 10000, 100, 1, False),
              "cirq-random-10k-1024": ("cirq-random", 10000, 100, 1024, False),
              "cirq-random-30k-1": ("cirq-random", 30000, 100, 1, False)})
# a surface code as a Cirq user writes one round after another: Stim's memory experiment converted by
# stimcirq (its detectors as stimcirq.DetAnnotation) with its REPEAT blocks unrolled into moments
CASES.update({"cirq-surface-11-10k": ("cirq-surface", 11, 11, 10_000, False),
              "cirq-surface-25-10k": ("cirq-surface", 25, 25, 10_000, False)})
CPU_CASES = ["random-2k-1", "surface-5-1024-det", "surface-11-10k", "cirq-random-2k-1"]
CASES.update({"random-2k-1": ("random", 2000, 100, 1, False),
              "cirq-random-2k-1": ("cirq-random", 2000, 100, 1, False),
              "surface-5-1024-det": ("surface", 5, 5, 1024, True),
              "surface-11-10k": ("surface", 11, 11, 10_000, False)})


def build(name: str, tag: Optional[int] = None):
    """The case's circuit, made from the case's name so that no two cases share a circuit (a
    shared one would be a cache hit): random Clifford circuits seeded by it, surface codes with
    a measurement flip probability that differs from 1e-3 in its sixth digit. `tag` (0-999) in
    place of the name's: another circuit of the case's shape."""
    kind, size, depth, _, _ = CASES[name]
    if tag is None:
        tag = zlib.crc32(name.encode()) % 1000
    if kind == "cirq-random":
        from .random_clifford import paper_random_circuit

        return paper_random_circuit(size, depth, seed=tag)[0]
    if kind == "cirq-surface":
        import cirq
        import stimcirq

        surface = _surface(size, depth, tag)
        return cirq.Circuit(cirq.unroll_circuit_op(stimcirq.stim_circuit_to_cirq_circuit(surface), deep=True,
                                                   tags_to_check=None))
    if kind.startswith("random"):
        from .random_clifford import paper_random_circuit_stim

        return paper_random_circuit_stim(size, depth, seed=tag, ticks=kind == "random-ticks")
    return _surface(size, depth, tag)


def _surface(distance: int, rounds: int, tag: int):
    import stim

    return stim.Circuit.generated("surface_code:rotated_memory_z", distance=distance, rounds=rounds,
                                  after_clifford_depolarization=1e-3, before_round_data_depolarization=1e-3,
                                  before_measure_flip_probability=1e-3 * (1 + tag * 1e-6),
                                  after_reset_flip_probability=1e-3)


def _call(sim, circuit, shots: int, detectors: bool):
    import stim

    if not isinstance(circuit, stim.Circuit):  # a Cirq circuit: as a Cirq user samples
        return sim.run(circuit, repetitions=shots)
    if detectors:
        return sim.sample_detectors(circuit, shots, separate_observables=True, bit_packed=True)
    return sim.sample_measurements(circuit, shots, bit_packed=True)


def _clear_compile_cache() -> None:
    from cirq_quasarq.compiler.stim_circuit import clear_stim_cache

    clear_stim_cache()
    if "cirq" in sys.modules:  # the Cirq compile's caches too (only a Cirq case imports it here)
        from cirq_quasarq.compiler import clear_cache

        clear_cache()


def warm_process(device: str, cirq: bool = False) -> None:
    """What a warm process has done: a small circuit sampled (kernels built, caches warm), detection
    events and records."""
    import stim

    import cirq_quasarq

    warm = stim.Circuit("H 0\nCX 0 1\nX_ERROR(0.1) 1\nM 0 1\nDETECTOR rec[-1] rec[-2]")
    _call(cirq_quasarq.QuasarqSimulator(seed=0, device=device), warm, 64, True)
    _call(cirq_quasarq.QuasarqSimulator(seed=0, device=device), warm, 64, False)
    if cirq:  # and a small Cirq circuit
        from .random_clifford import paper_random_circuit

        _call(cirq_quasarq.QuasarqSimulator(seed=0, device=device), paper_random_circuit(50, 10, seed=1)[0], 64, False)


def _timed(fn):
    wall, _, out = _timed_with_thread(fn)
    return wall, out


def _timed_with_thread(fn):
    """(wall seconds, this thread's CPU seconds, result) of fn(): the CPU seconds are the calling
    thread's own work (a streamed call's schedule, device programs and launches, without the
    compile's process), and its waits in the driver, which spins."""
    t0, c0 = time.perf_counter(), time.thread_time()
    out = fn()
    return time.perf_counter() - t0, time.thread_time() - c0, out


class _CollectorTime:
    """Seconds the cyclic garbage collector runs while this is entered (gc.callbacks)."""

    def __enter__(self):
        self.seconds, self._start = 0.0, None
        gc.callbacks.append(self._callback)
        return self

    def _callback(self, phase, info):
        if phase == "start":
            self._start = time.perf_counter()
        elif self._start is not None:
            self.seconds += time.perf_counter() - self._start

    def __exit__(self, *exc):
        gc.callbacks.remove(self._callback)


def _count_streamed() -> list:
    """A list that gets an entry each time a first call compiles in pieces while the engine runs
    them (shots.compiled_with_reference); code without that path leaves it empty."""
    from cirq_quasarq import shots

    done, real = [], getattr(shots, "_streamed", None)
    if real is not None:
        def counted(*args):  # (engine, circuit[, num_qubits]): this code's and earlier checkouts'
            program = real(*args)
            done.append(1)
            return program

        shots._streamed = counted
    return done


def _new_to_the_cache(name: str, device: str):
    """(an equal circuit built again, a new simulator), the compile cache cleared."""
    import cirq_quasarq

    twin = build(name)
    _clear_compile_cache()
    return twin, cirq_quasarq.QuasarqSimulator(seed=1, device=device)


def ours(name: str, device: str, first_calls: int = 0, compiles: int = 0) -> dict:
    import cirq_quasarq
    from cirq_quasarq.simulator import prepared

    kind, _, _, shots, detectors = CASES[name]
    warm_process(device, cirq=kind.startswith("cirq"))
    t_build, circuit = _timed(lambda: build(name))
    streamed = _count_streamed()
    with _CollectorTime() as first_gc:
        first, first_cpu, _ = _timed_with_thread(
            lambda: _call(cirq_quasarq.QuasarqSimulator(seed=1, device=device), circuit, shots, detectors))
    with _CollectorTime() as repeat_gc:
        repeat, _ = _timed(lambda: _call(cirq_quasarq.QuasarqSimulator(seed=1, device=device), circuit, shots, detectors))
    more, more_cpu = [], []
    for _ in range(first_calls):
        _clear_compile_cache()
        wall, cpu, _ = _timed_with_thread(
            lambda: _call(cirq_quasarq.QuasarqSimulator(seed=1, device=device), circuit, shots, detectors))
        more.append(wall)
        more_cpu.append(cpu)
    # the stages, on an equal circuit new to the compile cache
    twin, sim = _new_to_the_cache(name, device)
    t_compile, program = _timed(lambda: sim.compile(twin))
    t_schedule, _ = _timed(lambda: prepared(program))
    needs_reference = not detectors or bool(program.conditions or program.confusions)
    t_reference = _timed(lambda: sim.reference(program))[0] if needs_reference else 0.0
    t_rest, _ = _timed(lambda: _call(sim, twin, shots, detectors))
    compiled = []
    for _ in range(compiles):
        twin, sim = _new_to_the_cache(name, device)
        compiled.append(_timed(lambda: sim.compile(twin))[0])
    return {"case": name, "peer": "cirq-quasarq", "device": device, "first_s": first, "repeat_s": repeat,
            "first_gc_s": first_gc.seconds, "repeat_gc_s": repeat_gc.seconds, "first_streamed": bool(streamed),
            "first_thread_cpu_s": first_cpu,
            "package": str(pathlib.Path(cirq_quasarq.__file__).parent),
            "compile_s": t_compile, "schedule_s": t_schedule, "reference_s": t_reference,
            "prepare_and_sample_s": t_rest, "instructions": int(program.num_instructions),
            "records": int(program.num_records), "build_circuit_s": t_build,
            **({"first_calls_s": more, "first_calls_thread_cpu_s": more_cpu} if first_calls else {}),
            **({"compiles_s": compiled} if compiles else {})}


def peer_of(name: str) -> str:
    return "stimcirq" if CASES[name][0].startswith("cirq") else "quasarq"


def stimcirq_peer(name: str) -> dict:
    """stimcirq's sampler as a Cirq user calls it: `StimSampler().run(circuit, repetitions)`, which
    converts the circuit on every call (so its first and repeat calls do the same work)."""
    import stimcirq

    from .random_clifford import paper_random_circuit

    _, _, _, shots, _ = CASES[name]
    stimcirq.StimSampler().run(paper_random_circuit(50, 10, seed=1)[0], repetitions=64)
    circuit = build(name)
    first, _ = _timed(lambda: stimcirq.StimSampler().run(circuit, repetitions=shots))
    repeat, _ = _timed(lambda: stimcirq.StimSampler().run(circuit, repetitions=shots))
    return {"case": name, "peer": "stimcirq", "first_s": first, "repeat_s": repeat}


def quasarq_peer(name: str) -> dict:
    import stim
    import quasarq

    _, _, _, shots, detectors = CASES[name]
    warm = stim.Circuit("H 0\nCX 0 1\nM 0 1")
    quasarq.compile_sampler(warm, seed=0).sample(64, bit_packed=True)
    circuit = build(name)

    def call():
        compile_ = quasarq.compile_detector_sampler if detectors else quasarq.compile_sampler
        return compile_(circuit, seed=1).sample(shots, bit_packed=True)

    first, _ = _timed(call)
    repeat, _ = _timed(call)
    return {"case": name, "peer": "quasarq", "first_s": first, "repeat_s": repeat}


def _in_own_process(args, name: str, peer: str, baseline: Optional[str] = None) -> dict:
    """One case in a fresh process of this module (`--ours-only` / `--peer-only`), with `baseline`
    the cirq_quasarq of that checkout: its JSON line, or the exit status and the end of its errors."""
    if baseline is None:
        command = [sys.executable, "-m", "benchmarks.bench_first_call", *args]
    else:
        # the other version's package under this module as it is here (benchmarks.baseline)
        command = [sys.executable, "-m", "benchmarks.baseline", baseline, "benchmarks.bench_first_call", *args]
    done = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode == 0 and lines:
        row = json.loads(lines[-1])
    else:
        row = {"case": name, "peer": peer, "error": f"exit {done.returncode}: " + " ".join(done.stderr.split())[-200:]}
    if baseline is not None:
        row["baseline"] = baseline
    return row


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--cases", nargs="+", default=None)
    ap.add_argument("--peers", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--same-process", action="store_true",
                    help="run our cases one after the other in this process (their result memory carries over)")
    ap.add_argument("--samples", type=int, default=1, help="run every case this many times (each in turn)")
    ap.add_argument("--baseline", default=None, metavar="DIR",
                    help="also run each case with the cirq_quasarq (and cuda_src) of the checkout DIR, in turn "
                         "with this one (e.g. `git worktree add DIR REV`): the code before, in the same run")
    ap.add_argument("--first-calls", type=int, default=0, metavar="N",
                    help="N more first calls a case's process, the compile cache cleared before each")
    ap.add_argument("--compiles", type=int, default=0, metavar="N",
                    help="N compiles alone a case's process, each of a new copy of its circuit")
    ap.add_argument("--peer-only", default=None, help=argparse.SUPPRESS)  # one peer case, in its own process
    ap.add_argument("--ours-only", default=None, help=argparse.SUPPRESS)  # one of our cases, in its own process
    args = ap.parse_args(argv)
    if args.peer_only:
        run_peer = stimcirq_peer if peer_of(args.peer_only) == "stimcirq" else quasarq_peer
        print(json.dumps(run_peer(args.peer_only)), flush=True)
        return
    if args.ours_only:
        print(json.dumps(ours(args.ours_only, args.device, args.first_calls, args.compiles)), flush=True)
        return
    names = args.cases or (CPU_CASES if args.device == "cpu" else
                           [n for n in CASES if n not in CPU_CASES])
    if args.baseline and args.same_process:
        ap.error("--baseline runs every case in a process of its own")
    out = open(args.json, "a") if args.json else None
    for sample in range(args.samples):
        for name in names:
            ours_args = ["--ours-only", name, "--device", args.device, "--first-calls", str(args.first_calls),
                         "--compiles", str(args.compiles)]
            if args.same_process:
                rows = [ours(name, args.device, args.first_calls, args.compiles)]
            elif args.baseline and sample % 2:  # the two versions in turn, the baseline first every other sample
                rows = [_in_own_process(ours_args, name, "cirq-quasarq", baseline=args.baseline),
                        _in_own_process(ours_args, name, "cirq-quasarq")]
            else:
                rows = [_in_own_process(ours_args, name, "cirq-quasarq")]
                if args.baseline:
                    rows.append(_in_own_process(ours_args, name, "cirq-quasarq", baseline=args.baseline))
            if args.peers:
                rows.append(_in_own_process(["--peer-only", name], name, peer_of(name)))
            for row in rows:
                row["sample"] = sample
                line = json.dumps(row)
                print(line, flush=True)
                if out:
                    out.write(line + "\n")
                    out.flush()


if __name__ == "__main__":
    main()
