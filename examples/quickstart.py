"""Quickstart: a noisy repetition-code memory experiment and a GHZ state, through Cirq.

Runs on the GPU engine when PyCUDA and an NVIDIA GPU are present, else on the NumPy engine."""

import time

import cirq
import numpy as np

import cirq_quasarq


def repetition_code(distance: int, rounds: int, p: float) -> cirq.Circuit:
    """Bit-flip repetition code: data qubits d0.., ancillas a0..; ancilla i checks d_i ⊕ d_{i+1}."""
    data = [cirq.LineQubit(2 * i) for i in range(distance)]
    anc = [cirq.LineQubit(2 * i + 1) for i in range(distance - 1)]
    round_ops = cirq.Circuit(
        cirq.Moment(cirq.bit_flip(p).on_each(data)),
        cirq.Moment(cirq.CNOT(d, a) for d, a in zip(data, anc)),
        cirq.Moment(cirq.CNOT(d, a) for d, a in zip(data[1:], anc)),
        cirq.Moment(cirq.measure(*anc, key="syndrome")),
        cirq.Moment(cirq.reset_each(*anc)),
    )
    loop = cirq.CircuitOperation(round_ops.freeze(), repetitions=rounds, use_repetition_ids=False)
    return cirq.Circuit(loop, cirq.measure(*data, key="data"))


def main():
    sim = cirq_quasarq.QuasarqSimulator(seed=5)
    print(f"engine: {sim.engine.name}")

    circuit = repetition_code(distance=9, rounds=9, p=0.02)
    shots = 100_000
    start = time.perf_counter()
    result = sim.run(circuit, repetitions=shots)
    elapsed = time.perf_counter() - start
    data = result.records["data"][:, -1, :]
    majority_wrong = data.sum(axis=1) > data.shape[1] // 2
    syndromes = result.records["syndrome"]
    print(f"repetition code d=9, 9 rounds, p=0.02: {shots} shots in {elapsed:.3f} s")
    print(f"  syndrome records {syndromes.shape}, logical error rate (no decoding) "
          f"{majority_wrong.mean():.4f}")

    q = cirq.LineQubit.range(4)
    ghz = cirq.Circuit(cirq.H(q[0]), [cirq.CNOT(q[i], q[i + 1]) for i in range(3)])
    final = sim.simulate(ghz).final_state
    print("GHZ stabilizers:", ", ".join(str(s) for s in final.stabilizers()))
    print("GHZ state vector:", np.round(final.state_vector(), 3) + 0j)  # + 0j: no "-0j"
    counts = sim.run(ghz + cirq.measure(*q, key="m"), repetitions=1000).histogram(key="m")
    print("GHZ outcomes (0000 and 1111 only):", dict(counts))


if __name__ == "__main__":
    main()
