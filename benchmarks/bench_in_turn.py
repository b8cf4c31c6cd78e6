"""First calls on Stim circuits, in turn in one warm process under several settings of the package's
module constants: the way to compare two versions of one step where process-to-process spread hides
it (a process pair's first calls differ by 10-20 ms on an H200 host; the settings here share the
process, its memory and the host).

    python -m benchmarks.bench_in_turn --device gpu --reps 16 --sizes 5000 10000 \\
        --cases random-10k-1024 surface-51-10k \\
        --config before compiler.stim_circuit.WHOLE_READ=False compiler.stim_circuit.SEGMENT_WRITERS=1 \\
        --config now compiler.stim_circuit.WHOLE_READ=True compiler.stim_circuit.SEGMENT_WRITERS=4

Each `--config NAME SETTING...` sets `cirq_quasarq.<module>.<NAME>` to a Python literal. `--sizes`:
the paper's random circuits of those sizes (stim input, one shot); `--cases`: `bench_first_call`'s
Stim cases (their shots, records or detection events). Per size or case, two circuits of its shape
alternate; each repetition runs every setting once, starting with a different one each time: a
first call (a new simulator, the compile cache cleared) and then the compile alone
(`compile_new_stim`, the cache cleared again). Prints the medians and ranges in ms.
"""

from __future__ import annotations

import argparse
import ast
import gc
import importlib
import statistics
import time


def _setting(text: str):
    """(module, attribute, value) of 'module.path.ATTR=literal' (the module under cirq_quasarq)."""
    target, _, value = text.partition("=")
    module, _, attribute = target.rpartition(".")
    if not module or not attribute or not value:
        raise SystemExit(f"a setting is module.ATTR=value, got {text!r}")
    found = importlib.import_module(f"cirq_quasarq.{module}")
    if not hasattr(found, attribute):
        raise SystemExit(f"cirq_quasarq.{module} has no {attribute}: not this version's setting")
    return found, attribute, ast.literal_eval(value)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="gpu")
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--sizes", type=int, nargs="*", default=[5000, 10000])
    ap.add_argument("--cases", nargs="*", default=[], help="bench_first_call's Stim cases")
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--config", nargs="+", action="append", required=True, metavar=("NAME", "SETTING"))
    args = ap.parse_args(argv)

    import cirq_quasarq
    from cirq_quasarq.compiler import stim_circuit

    from .bench_first_call import CASES, _call, _clear_compile_cache, build, warm_process
    from .random_clifford import paper_random_circuit_stim

    configs = {config[0]: [_setting(text) for text in config[1:]] for config in args.config}
    names = list(configs)
    originals = [(module, attribute, getattr(module, attribute))
                 for settings in configs.values() for module, attribute, _ in settings]
    workloads = []  # (label, its two circuits, shots, detection events)
    for case in args.cases:
        if case not in CASES or CASES[case][0].startswith("cirq"):
            raise SystemExit(f"{case!r} is not one of bench_first_call's Stim cases")
        workloads.append((case, [build(case, tag) for tag in (1, 2)], CASES[case][3], CASES[case][4]))
    warm_process(args.device)
    for n in args.sizes:
        workloads.append((f"n={n}", [paper_random_circuit_stim(n, args.depth, seed=s) for s in range(2)], 1, False))
    for label, circuits, shots, detectors in workloads:

        def call(circuit):
            return _call(cirq_quasarq.QuasarqSimulator(seed=1, device=args.device), circuit, shots, detectors)

        for circuit in circuits:  # (each workload's own first compile: its code paths warm)
            call(circuit)
        firsts = {name: [] for name in names}
        compiles = {name: [] for name in names}
        for rep in range(args.reps):
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                for module, attribute, value in configs[name]:
                    setattr(module, attribute, value)
                circuit = circuits[rep % 2]
                _clear_compile_cache()
                gc.collect()
                start = time.perf_counter()
                call(circuit)
                firsts[name].append(1e3 * (time.perf_counter() - start))
                _clear_compile_cache()
                gc.collect()
                start = time.perf_counter()
                stim_circuit.compile_new_stim(circuit)
                compiles[name].append(1e3 * (time.perf_counter() - start))
        for module, attribute, value in originals:  # (the next workload warms as this one did)
            setattr(module, attribute, value)
        for name in names:
            first, compiled = firsts[name], compiles[name]
            print(f"{label} {name}: first call median {statistics.median(first):.1f} ms "
                  f"({min(first):.1f}-{max(first):.1f}), compile median {statistics.median(compiled):.1f} ms "
                  f"({min(compiled):.1f}-{max(compiled):.1f}), {len(first)} each", flush=True)


if __name__ == "__main__":
    main()
