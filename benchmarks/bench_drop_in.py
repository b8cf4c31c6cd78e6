"""Drop-in workloads of cirq.CliffordSimulator users, timed as they call them.

    python -m benchmarks.bench_drop_in [--device cpu|gpu] [--shots 50000 1000000] [--sizes 2000 10000 30000]
                                       [--cirq-shots 50000] [--json FILE]

1. Feed-forward with classically controlled Cliffords (controlled H, S and CX, two levels deep:
   tests/test_drop_in.py's "magic" circuit): `QuasarqSimulator(seed).run(circuit, shots)` with a
   new simulator per call (shot branching), against `cirq.CliffordSimulator().run` at --cirq-shots.
2. Final states of random Clifford circuits (benchmarks/random_clifford.py, depth 10, built as
   Cirq circuits): `simulate()`, then `final_state.stabilizers()` and `final_state.tableau`, each
   timed on its own; and `state_vector()` of a 20-qubit state.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import cirq
import numpy as np

from cirq_quasarq import QuasarqSimulator


def feed_forward() -> cirq.Circuit:
    a, b, c = cirq.LineQubit.range(3)
    return cirq.Circuit(cirq.H(a), cirq.measure(a, key="x"), cirq.H(b).with_classical_controls("x"),
                        cirq.measure(b, key="y"), cirq.S(c).with_classical_controls("y"), cirq.H(c),
                        cirq.CNOT(c, a).with_classical_controls("x"), cirq.measure(a, c, key="z"))


def _time(f, repeat: int = 1):
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t0)
    return best, out


def random_circuit(n: int, depth: int, seed: int = 0) -> cirq.Circuit:
    from .random_clifford import CIRQ_GATES, layers

    qubits = cirq.LineQubit.range(n)
    moments = []
    for ops, _ in layers(n, depth, seed):
        moments.append(cirq.Moment(CIRQ_GATES[g](*(qubits[q] for q in qs)) for g, qs in ops))
    return cirq.Circuit(moments)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shots", type=int, nargs="+", default=[50_000, 1_000_000])
    parser.add_argument("--cirq-shots", type=int, default=50_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 10000, 30000])
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rows = []
    circuit = feed_forward()
    QuasarqSimulator(seed=0, device=args.device).run(circuit, repetitions=64)  # kernels, compile cache
    for shots in args.shots:
        t, _ = _time(lambda: QuasarqSimulator(seed=1, device=args.device).run(circuit, repetitions=shots), 3)
        rows.append({"case": "feed-forward controlled Cliffords", "shots": shots, "device": args.device,
                     "quasarq_s": t})
        print(f"feed-forward, {shots} shots, new simulator per call ({args.device}): {t * 1e3:.1f} ms", flush=True)
    if args.cirq_shots:
        t, _ = _time(lambda: cirq.CliffordSimulator(seed=1).run(circuit, repetitions=args.cirq_shots))
        rows.append({"case": "feed-forward controlled Cliffords", "shots": args.cirq_shots,
                     "cirq.CliffordSimulator_s": t})
        ours = next(r["quasarq_s"] for r in rows if r.get("shots") == args.cirq_shots and "quasarq_s" in r)
        print(f"cirq.CliffordSimulator, {args.cirq_shots} shots: {t:.2f} s  ({t / ours:.0f}x ours)", flush=True)
    for n in args.sizes:
        circuit = random_circuit(n, args.depth)
        sim = QuasarqSimulator(seed=1, device=args.device)
        t_sim, trial = _time(lambda: sim.simulate(circuit))
        state = trial.final_state
        t_stab, stabs = _time(state.stabilizers)
        t_tab, _ = _time(lambda: state.tableau)
        rows.append({"case": "final state", "n": n, "depth": args.depth, "device": args.device,
                     "simulate_s": t_sim, "stabilizers_s": t_stab, "tableau_s": t_tab})
        print(f"n={n} depth {args.depth}: simulate {t_sim:.2f} s, stabilizers() {t_stab:.2f} s "
              f"(first call: forward signs + {len(stabs)} DensePauliStrings), tableau {t_tab:.2f} s", flush=True)
    circuit = random_circuit(20, 50)
    state = QuasarqSimulator(seed=1, device=args.device).simulate(circuit).final_state
    t_vec, _ = _time(state.state_vector)
    rows.append({"case": "state_vector", "n": 20, "device": args.device, "state_vector_s": t_vec})
    print(f"state_vector() of 20 qubits (exact phase, depth 50): {t_vec:.2f} s")
    meta = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
            "cirq": cirq.__version__, "numpy": np.__version__}
    if args.json:
        with open(args.json, "a") as f:
            for row in rows:
                f.write(json.dumps({**row, **meta}) + "\n")


if __name__ == "__main__":
    main()
