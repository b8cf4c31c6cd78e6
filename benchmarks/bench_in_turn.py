"""First calls on the paper's random circuits (stim input, one shot), in turn in one warm process under
several settings of the package's module constants: the way to compare two versions of one step
where process-to-process spread hides it (a process pair's first calls differ by 10-20 ms on an
H200 host; the settings here share the process, its memory and the host).

    python -m benchmarks.bench_in_turn --device gpu --reps 16 --sizes 5000 10000 \\
        --config before compiler.stim_circuit.WHOLE_READ=False compiler.stim_circuit.SEGMENT_WRITERS=1 \\
        --config now compiler.stim_circuit.WHOLE_READ=True compiler.stim_circuit.SEGMENT_WRITERS=4

Each `--config NAME SETTING...` sets `cirq_quasarq.<module>.<NAME>` to a Python literal. Per size,
two circuits of that size alternate; each repetition runs every setting once, starting with a
different one each time: a first call (a new simulator, the compile cache cleared) and then the
compile alone (`compile_new_stim`, the cache cleared again). Prints the medians and ranges in ms.
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
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 10000])
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--config", nargs="+", action="append", required=True, metavar=("NAME", "SETTING"))
    args = ap.parse_args(argv)

    import cirq_quasarq
    from cirq_quasarq.compiler import stim_circuit

    from .bench_first_call import _clear_compile_cache, warm_process
    from .random_clifford import paper_random_circuit_stim

    configs = {config[0]: [_setting(text) for text in config[1:]] for config in args.config}
    names = list(configs)
    warm_process(args.device)
    for n in args.sizes:
        circuits = [paper_random_circuit_stim(n, args.depth, seed=s) for s in range(2)]

        def call(circuit):
            return cirq_quasarq.QuasarqSimulator(seed=1, device=args.device).sample_measurements(
                circuit, 1, bit_packed=True)

        for circuit in circuits:  # (each size's own first compile: its code paths warm)
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
        for name in names:
            first, compiled = firsts[name], compiles[name]
            print(f"n={n} {name}: first call median {statistics.median(first):.1f} ms "
                  f"({min(first):.1f}-{max(first):.1f}), compile median {statistics.median(compiled):.1f} ms "
                  f"({min(compiled):.1f}-{max(compiled):.1f}), {len(first)} each", flush=True)


if __name__ == "__main__":
    main()
