"""Golden records: the exact bits a fixed set of circuits and seeds gave before a refactor.

The expected arrays in tests/data/golden_records.npz were written by this file (``python -m
tests.test_golden --write``) from the code as it stood before the [house] restructuring; a
restructuring must leave every one of them unchanged, on every engine. Regenerate only when the
semantics change on purpose (docs/engine-semantics.md), and say so in the commit.
"""

from __future__ import annotations

import pathlib
import sys

import cirq
import numpy as np
import pytest
import sympy

from cirq_quasarq import QuasarqSimulator
from cirq_quasarq.core import rng
from cirq_quasarq.schedule import schedule

from .programs import random_program

stim = pytest.importorskip("stim")
stimcirq = pytest.importorskip("stimcirq")

GOLDEN = pathlib.Path(__file__).parent / "data" / "golden_records.npz"
Q = cirq.LineQubit.range(6)


def _mixed_circuit() -> cirq.Circuit:
    """Measurements with invert masks and a confusion map, resets, Pauli noise, a classically
    controlled Pauli, a loop with a measurement, stimcirq's basis measurements, a Pauli-string
    measurement."""
    a, b, c, d, e, f = Q
    body = cirq.FrozenCircuit(
        cirq.H(a), cirq.CNOT(a, b), cirq.depolarize(0.05).on(b), cirq.measure(b, key="loop"),
        cirq.reset(b))
    return cirq.Circuit(
        cirq.H(a), cirq.CNOT(a, b), cirq.S(c), cirq.H(d),
        cirq.bit_flip(0.1).on(c), cirq.asymmetric_depolarize(0.02, 0.03, 0.04).on(d),
        cirq.measure(a, b, key="ab", invert_mask=(True,)),
        cirq.measure(c, d, key="cd", confusion_map={(0, 1): np.array(
            [[0.7, 0.1, 0.1, 0.1], [0.1, 0.7, 0.1, 0.1], [0.1, 0.1, 0.7, 0.1], [0.1, 0.1, 0.1, 0.7]])}),
        cirq.X(e).with_classical_controls("ab"),
        cirq.CircuitOperation(body, repetitions=4),
        stimcirq.MeasureAndOrResetGate(measure=True, reset=True, basis="X", invert_measure=False,
                                       key="mrx").on(e),
        cirq.PauliMeasurementGate(cirq.DensePauliString("XZ"), key="pm").on(e, f),
        cirq.ISWAP(e, f), cirq.measure(e, f, key="ef"),
    )


def _controlled_clifford_circuit() -> cirq.Circuit:
    a, b, c = Q[:3]
    return cirq.Circuit(cirq.H(a), cirq.measure(a, key="m"), cirq.H(b).with_classical_controls("m"),
                        cirq.CNOT(b, c), cirq.measure(b, c, key="bc"))


def _surface_code() -> cirq.Circuit:
    circuit = stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=3,
                                     after_clifford_depolarization=0.02,
                                     before_round_data_depolarization=0.02,
                                     before_measure_flip_probability=0.02,
                                     after_reset_flip_probability=0.02)
    return stimcirq.stim_circuit_to_cirq_circuit(circuit)


def compute(device: str) -> dict:
    """Every golden array, computed with the code as it is now."""
    out = {}
    sim = QuasarqSimulator(seed=11, device=device)
    for name, circuit, reps in (("mixed", _mixed_circuit(), 300),
                                ("controlled", _controlled_clifford_circuit(), 70),
                                ("surface", _surface_code(), 500)):
        result = sim.run(circuit, repetitions=reps)
        for key, value in sorted(result.records.items()):
            out[f"run/{name}/{key}"] = np.asarray(value, dtype=np.int8)
    trial = QuasarqSimulator(seed=5, device=device).simulate(_mixed_circuit())
    for key, value in sorted(trial.measurements.items()):
        out[f"simulate/mixed/{key}"] = np.asarray(value, dtype=np.int8)
    tab = trial.final_state.tableau
    out["simulate/mixed/tableau"] = np.concatenate([tab.xs, tab.zs, tab.rs[:, None]], axis=1).astype(np.int8)
    theta = sympy.Symbol("t")
    sweep_circuit = cirq.Circuit(cirq.X(Q[0]) ** theta, cirq.depolarize(0.1).on(Q[1]),
                                 cirq.CNOT(Q[0], Q[1]), cirq.measure(*Q[:2], key="m"))
    for i, result in enumerate(QuasarqSimulator(seed=3, device=device).run_sweep(
            sweep_circuit, cirq.Linspace("t", 0, 1.5, 4), repetitions=130)):
        out[f"sweep/{i}/m"] = np.asarray(result.records["m"], dtype=np.int8)
    a, b, c = Q[:3]
    stepped = cirq.Circuit(cirq.H(a), cirq.CNOT(a, b), cirq.measure(a, key="a"), cirq.reset(a),
                           cirq.H(c), cirq.measure(b, c, key="bc"))
    steps = QuasarqSimulator(seed=9, device=device).simulate_moment_steps(stepped)
    for i, step in enumerate(steps):
        for key, value in sorted(step.measurements.items()):
            out[f"steps/{i}/{key}"] = np.asarray(value, dtype=np.int8)
    # Engine level: random programs over every opcode kind the test builder makes.
    engine = QuasarqSimulator(device=device).engine
    for seed in range(3):
        program, _ = random_program(24, 25, seed, collapse=0.7, noise=True)
        sched = schedule(program)
        key = rng.make_key(100 + seed)
        run = engine.run_tableau(program, sched, key, repetition=seed)
        inv = run.tableau
        out[f"engine/{seed}/tableau_records"] = run.records.astype(np.int8)
        out[f"engine/{seed}/tableau"] = np.concatenate(
            [inv.xx, inv.xz, inv.zx, inv.zz], axis=1).view(np.int64)
        out[f"engine/{seed}/signs"] = np.concatenate([inv.xs, inv.zs]).astype(np.int8)
        reference = engine.run_tableau(program, sched, rng.make_key(0), reference=True).records
        out[f"engine/{seed}/frames"] = engine.sample_frames(program, sched, key, reference, 1000).view(np.int64)
    return out


@pytest.fixture(scope="module")
def golden():
    with np.load(GOLDEN) as data:
        return {k: data[k] for k in data.files}


@pytest.mark.usefixtures("native_path")  # the CPU's draws both ways (NumPy's passes, the compiled draws)
def test_golden_records_unchanged(device, golden):
    got = compute(device)
    assert sorted(got) == sorted(golden)
    for name in sorted(golden):
        np.testing.assert_array_equal(got[name], golden[name], err_msg=name)


if __name__ == "__main__" and "--write" in sys.argv:
    GOLDEN.parent.mkdir(exist_ok=True)
    np.savez_compressed(GOLDEN, **compute("cpu"))
    print(f"wrote {GOLDEN}")
