"""The schedule of varied Programs is exactly what it was (engines depend on its exact row order).

tests/data/schedule_digests.json holds, per case, a digest of what `schedule` reads of the Program
and a digest of the Schedule it returned, recorded before the scheduler was vectorised further. A
changed input digest means the compiler now builds another Program (regenerate after checking why:
``python -m tests.test_schedule_golden --write``); a changed schedule digest is a scheduler bug.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import sys

import cirq
import numpy as np
import pytest

from cirq_quasarq.compiler import compile_circuit, compile_stim
from cirq_quasarq.core.program import STEP
from cirq_quasarq.schedule import schedule

stim = pytest.importorskip("stim")

from benchmarks.random_clifford import paper_random_circuit, paper_random_circuit_stim  # noqa: E402

from .programs import measure_window_program, random_program, window_program  # noqa: E402
from .test_stim_circuit import random_circuit  # noqa: E402

DIGESTS = pathlib.Path(__file__).parent / "data" / "schedule_digests.json"

_CHAINS = """
H 0 1 2 3 4 5
CX 0 1 2 3
M(0.1) 0 1
E(0.1) X0 Y1
ELSE_CORRELATED_ERROR(0.2) Z0 Z2
ELSE_CORRELATED_ERROR(0.05) X4
CX rec[-1] 2
REPEAT 3 {
    H 4
    MR(0.2) 4 5
    CZ rec[-2] 3
    REPEAT 2 {
        DEPOLARIZE2(0.1) 0 1 2 3
        E(0.2) X3 X5
        ELSE_CORRELATED_ERROR(0.3) Z5
        MPP X0*Z1 Y2
    }
    DETECTOR rec[-1] rec[-2]
}
MX(0.05) 0 1 2
"""


def _generated(code, d, rounds, p=0.003):
    return stim.Circuit.generated(code, distance=d, rounds=rounds, after_clifford_depolarization=p,
                                  before_round_data_depolarization=p, before_measure_flip_probability=p,
                                  after_reset_flip_probability=p)


def _cirq_controls():
    """Classical controls, a confusion map, a repeated subcircuit, measurement flips."""
    q = cirq.LineQubit.range(6)
    body = cirq.FrozenCircuit(cirq.H(q[4]), cirq.CNOT(q[4], q[5]), cirq.measure(q[5], key="b"),
                              cirq.X(q[3]).with_classical_controls("b"), cirq.bit_flip(0.1).on(q[3]))
    return cirq.Circuit(
        cirq.H.on_each(*q), cirq.CZ(q[0], q[1]), cirq.CNOT(q[2], q[3]),
        cirq.measure(q[0], q[1], key="a", confusion_map={(0,): np.array([[0.8, 0.2], [0.1, 0.9]])}),
        cirq.Z(q[2]).with_classical_controls("a"), cirq.S(q[1]),
        cirq.CircuitOperation(body, repetitions=3, use_repetition_ids=False),
        cirq.measure(*q[:4], key="c", invert_mask=(True, False, True)))


def _steps(program, steps):
    """The Program with another STEP column: groups that may reuse a qubit (the scheduler's slow path)."""
    ins = program.instructions.copy()
    ins[:, STEP] = steps(len(ins))
    return dataclasses.replace(program, instructions=ins)


def _cases():
    cases = {}
    for n, depth in ((50, 20), (300, 50), (1500, 100)):
        cases[f"paper-stim-{n}"] = lambda n=n, depth=depth: compile_stim(paper_random_circuit_stim(n, depth, seed=3))
    for n, depth in ((40, 30), (150, 20)):
        cases[f"paper-cirq-{n}"] = lambda n=n, depth=depth: compile_circuit(paper_random_circuit(n, depth, seed=5)[0])
    for code, d, rounds in (("surface_code:rotated_memory_z", 5, 5), ("surface_code:unrotated_memory_x", 3, 4),
                            ("repetition_code:memory", 7, 10), ("color_code:memory_xyz", 5, 3)):
        cases[f"{code}-{d}"] = lambda code=code, d=d, rounds=rounds: compile_stim(_generated(code, d, rounds))
    for seed in range(12):
        cases[f"random-stim-{seed}"] = lambda seed=seed: compile_stim(
            random_circuit(seed, n=6 if seed < 6 else 12, noisy=seed % 2 == 0))
    cases["chains"] = lambda: compile_stim(stim.Circuit(_CHAINS))
    cases["cirq-controls"] = lambda: compile_circuit(_cirq_controls())
    cases["random-program"] = lambda: random_program(20, 8, 4, noise=True)[0]
    cases["window-program"] = lambda: window_program(100, 3)
    cases["measure-window-program"] = lambda: measure_window_program(60, 2, remeasure=True)
    cases["one-group"] = lambda: _steps(compile_stim(random_circuit(3, n=6, noisy=False)), lambda m: np.zeros(m))
    cases["groups-of-3"] = lambda: _steps(compile_stim(random_circuit(4, n=6, noisy=True)), lambda m: np.arange(m) // 3)
    cases["one-step-paper"] = lambda: _steps(compile_stim(paper_random_circuit_stim(30, 10, seed=1)),
                                             lambda m: np.arange(m) // 40)
    cases["empty"] = lambda: compile_stim(stim.Circuit(""))
    return cases


CASES = _cases()


def _digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.asarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def digests(program):
    """(digest of what schedule reads, digest of the Schedule)."""
    sched = schedule(program)
    return [_digest(program.num_qubits, program.instructions, program.ext_qubits, len(program.loops)),
            _digest(sched.instructions, sched.runs, sched.loop_runs)]


def compute():
    return {name: digests(make()) for name, make in CASES.items()}


@pytest.fixture(scope="module")
def recorded():
    return json.loads(DIGESTS.read_text())


@pytest.mark.parametrize("name", sorted(CASES))
def test_schedules_are_as_recorded(name, recorded):
    program_digest, schedule_digest = digests(CASES[name]())
    assert program_digest == recorded[name][0], "the Program changed (not the scheduler): regenerate after checking"
    assert schedule_digest == recorded[name][1]


if __name__ == "__main__" and "--write" in sys.argv:
    DIGESTS.write_text(json.dumps(compute(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {DIGESTS}")
