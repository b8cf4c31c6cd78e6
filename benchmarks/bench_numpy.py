"""CPU benchmark of the NumPy engine against stim (one thread) and cirq.CliffordSimulator.

    python -m benchmarks.bench_numpy [--quick]

Workloads (issue: NumPy engine):
- sampling stim's surface_code:rotated_memory_z, rounds = d, all four noise knobs 1e-3, d = 5 and
  d = 11, converted to Cirq by stimcirq: our engine time (compiled, bit-packed records), our
  `run()` end to end (ResultDict included), stim's `compile_sampler().sample(bit_packed=True)`,
  and cirq.CliffordSimulator (few shots, per-shot time extrapolated);
- single-shot random Clifford circuits, n = 1000, depth 100 (per layer 70% of the qubits get a
  random gate, then max(1, n // 1400) random Z measurements): ours vs stim's TableauSimulator vs
  cirq.CliffordSimulator (timed on a prefix of the layers and extrapolated).
"""

from __future__ import annotations

import argparse
import platform
import time

import cirq
import numpy as np

from cirq_quasarq import QuasarqSimulator
from cirq_quasarq.compiler import compile_circuit

from .circuits import surface_code_cirq
from .random_clifford import paper_random_circuit


def best_of(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench_surface(d: int, shots: int, cirq_shots: int):
    circuit, stim_circuit = surface_code_cirq(d, d, 1e-3)
    sim = QuasarqSimulator(seed=1, device="cpu")
    program = compile_circuit(circuit)
    sim.sample_packed(program, 64)  # warm: schedule + reference sample, cached per program
    engine = best_of(lambda: sim.sample_packed(program, shots))
    end_to_end = best_of(lambda: sim.run(circuit, repetitions=shots))
    sampler = stim_circuit.compile_sampler(seed=1)
    stim_t = best_of(lambda: sampler.sample(shots, bit_packed=True))
    # cirq.CliffordSimulator runs neither Pauli channels nor stimcirq's annotations: time it on
    # the noiseless circuit without annotations, against ours on that same circuit.
    clean = strip_annotations(surface_code_cirq(d, d, 0.0)[0])
    cs = cirq.CliffordSimulator(seed=1)
    t0 = time.perf_counter()
    cs.run(clean, repetitions=cirq_shots)
    cirq_t = (time.perf_counter() - t0) / cirq_shots * shots
    cirq_note = f"{cirq_t:.1f} s (noiseless, extrapolated from {cirq_shots} shots)"
    ours_clean = best_of(lambda: sim.run(clean, repetitions=shots))
    return {
        "workload": f"surface d={d}, {shots} shots",
        "ours engine": engine,
        "ours run()": end_to_end,
        "stim 1 thread": stim_t,
        "cirq.CliffordSimulator": cirq_note,
        "engine / stim": engine / stim_t,
        "cirq / run()": cirq_t / ours_clean,
    }


def strip_annotations(circuit: cirq.AbstractCircuit) -> cirq.Circuit:
    """The circuit without stimcirq's detector / observable / coordinate annotations."""
    import stimcirq

    annotations = (stimcirq.DetAnnotation, stimcirq.CumulativeObservableAnnotation,
                   stimcirq.ShiftCoordsAnnotation)

    def keep(op):
        if isinstance(op, cirq.CircuitOperation):
            return [op.replace(circuit=strip_annotations(op.circuit).freeze())]
        return [] if isinstance(op, annotations) or isinstance(op.gate, annotations) else [op]

    return cirq.Circuit(cirq.Moment(o for op in m for o in keep(op)) for m in circuit)


def bench_random(n: int, depth: int, cirq_layers: int):
    circuit, stim_circuit = paper_random_circuit(n, depth, seed=3)
    sim = QuasarqSimulator(seed=1, device="cpu")
    sim.simulate(circuit)  # compile + schedule once
    ours = best_of(lambda: sim.simulate(circuit), repeat=2)

    def stim_run():
        import stim

        s = stim.TableauSimulator(seed=1)
        s.do(stim_circuit)

    stim_t = best_of(stim_run, repeat=2)
    prefix = cirq.Circuit(circuit[: 2 * cirq_layers])
    t0 = time.perf_counter()
    cirq.CliffordSimulator(seed=1).simulate(prefix)
    cirq_t = (time.perf_counter() - t0) * len(circuit) / max(1, len(prefix))
    return {
        "workload": f"random Clifford n={n} depth {depth}, single shot",
        "ours engine": ours,
        "ours run()": ours,
        "stim 1 thread": stim_t,
        "cirq.CliffordSimulator": f"{cirq_t:.1f} s (extrapolated from {cirq_layers} layers)",
        "engine / stim": ours / stim_t,
        "cirq / run()": cirq_t / ours,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows = [
        bench_surface(5, 10_000 if args.quick else 100_000, 20),
        bench_surface(11, 10_000 if args.quick else 100_000, 3),
        bench_random(1000, 20 if args.quick else 100, 2),
    ]
    print(f"# NumPy engine benchmark ({platform.processor() or platform.machine()}, "
          f"{platform.python_version()}, numpy {np.__version__})")
    print("| workload | ours engine (s) | ours run() (s) | stim 1 thread (s) | cirq.CliffordSimulator | "
          "engine / stim | cirq / ours |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['ours engine']:.3f} | {r['ours run()']:.3f} | "
              f"{r['stim 1 thread']:.3f} | {r['cirq.CliffordSimulator']} | "
              f"{r['engine / stim']:.2f}x | {r['cirq / run()']:.0f}x |")


if __name__ == "__main__":
    main()
