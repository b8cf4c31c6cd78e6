"""Where a first call's host time goes: its stages on a timeline (GPU).

    python -m benchmarks.first_call_timeline CASE [CASE ...] [--device gpu|cpu]

CASE: a name of `bench_first_call.CASES` (random-10k-1, random-100k-1, ...). In a warm process (as
bench_first_call warms it), one first call of each case's circuit, `sample_measurements(c, shots,
bit_packed=True)` with a new simulator, with the stages of the compile, the schedule and the
engine's preparation wrapped so that each records its thread, start and end: per stage its count,
total and first start / last end, then the streamed call's pieces in order (the compile's thread
and the calling thread side by side). Then the repeat call. The wrappers cost a few microseconds a
call (a streamed 100k-qubit call makes about 500 of them).
"""

from __future__ import annotations

import argparse
import collections
import functools
import threading
import time

EVENTS = []  # (stage, thread, start s, end s), from the call's start
_T0 = [0.0]
_ORDERED = ("piece.next", "piece.return", "Scheduler.add", "TableauMode._actions", "StreamedCompile.whole",
            "ProgramBuilder.build")


def _record(label: str, start: float) -> None:
    EVENTS.append((label, threading.current_thread().name, start - _T0[0], time.perf_counter() - _T0[0]))


def _wrap(owner, name: str, label: str) -> None:
    real = getattr(owner, name)

    @functools.wraps(real)
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            _record(label, start)

    setattr(owner, name, timed)


def instrument() -> None:
    """Wrap the stages (once a process)."""
    from cirq_quasarq import shots
    from cirq_quasarq.compiler import stim_circuit
    from cirq_quasarq.core.program import ProgramBuilder
    from cirq_quasarq.engines.cuda import device_program, tableau
    from cirq_quasarq.schedule.windows import Scheduler

    for owner, name, label in [
            (stim_circuit._StimCompiler, "_walk_text", "compile: walk over the text"),
            (stim_circuit, "circuit_runs", "compile: read in place"),
            (stim_circuit, "circuit_bytes", "compile: text printed"),
            (stim_circuit, "compiled_runs", "compile: text read in one pass"),
            (stim_circuit._StimCompiler, "_walk_compiled", "compile: read runs placed"),
            (stim_circuit._StimCompiler, "_flush_segment", "compile: segments"),
            (stim_circuit, "_line_layout", "compile: line layout"),
            (ProgramBuilder, "rows_since", "ProgramBuilder.rows_since"),
            (ProgramBuilder, "build", "ProgramBuilder.build"),
            (Scheduler, "add", "Scheduler.add"),
            (shots.StreamedCompile, "whole", "StreamedCompile.whole"),
            (device_program.DeviceProgram, "__init__", "DeviceProgram"),
            (device_program.DeviceProgram, "tableau_plan", "DeviceProgram.tableau_plan"),
            (tableau.TableauMode, "_actions", "TableauMode._actions")]:
        _wrap(owner, name, label)
    pieces = stim_circuit.stim_pieces

    def timed_pieces(*args, **kwargs):  # each piece from the resumption of the compile to its yield
        compiling = pieces(*args, **kwargs)
        while True:
            start = time.perf_counter()
            try:
                item = next(compiling)
            except StopIteration as done:
                _record("piece.return", start)
                return done.value
            _record("piece.next", start)
            yield item

    stim_circuit.stim_pieces = timed_pieces


def report(name: str, total: float) -> None:
    print(f"== {name}: first call {total:.3f} s")
    stages = collections.defaultdict(lambda: [0, 0.0, float("inf"), 0.0])
    for label, thread, start, end in EVENTS:
        stage = stages[label, thread]
        stage[0] += 1
        stage[1] += end - start
        stage[2] = min(stage[2], start)
        stage[3] = max(stage[3], end)
    for (label, thread), (count, seconds, first, last) in sorted(stages.items(), key=lambda kv: kv[1][2]):
        print(f"  {label:30s} {thread:16s} x{count:4d} total {seconds:7.3f} s  first {first:7.3f}  last end {last:7.3f}")
    ordered = sorted((e for e in EVENTS if e[0] in _ORDERED), key=lambda e: e[2])
    if ordered:
        print("  timeline:")
        for label, thread, start, end in ordered:
            print(f"    {start:7.3f}-{end:7.3f} {label} [{thread}]")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--device", default="gpu")
    args = ap.parse_args(argv)
    import cirq_quasarq

    from .bench_first_call import CASES, _call, build, warm_process

    warm_process(args.device)
    instrument()
    for name in args.cases:
        _, _, _, shots, detectors = CASES[name]
        circuit = build(name)
        EVENTS.clear()
        _T0[0] = time.perf_counter()
        _call(cirq_quasarq.QuasarqSimulator(seed=1, device=args.device), circuit, shots, detectors)
        report(name, time.perf_counter() - _T0[0])
        start = time.perf_counter()
        _call(cirq_quasarq.QuasarqSimulator(seed=1, device=args.device), circuit, shots, detectors)
        print(f"  repeat {time.perf_counter() - start:.3f} s")


if __name__ == "__main__":
    main()
