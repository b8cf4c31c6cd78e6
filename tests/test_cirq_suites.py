"""Cirq's own tests of its Clifford simulator, run against QuasarqSimulator as a drop-in.

Cirq ships its tests in the installed package; this module runs them, unedited, with
`cirq.CliffordSimulator` replaced by `QuasarqSimulator` (clifford_simulator_test.py), and runs the
simulator-parametrised tests of classically_controlled_operation_test.py and
circuit_operation_test.py, whose simulator lists include cirq.CliffordSimulator, with ours.

Left out, each for its reason (EXCLUDED): tests that read the CH form's internals, one that
pins cirq.CliffordSimulator's own random stream, and `repeat_until`, which depends on results.
"""

from __future__ import annotations

import inspect

import cirq
import pytest
from cirq.circuits import circuit_operation_test
from cirq.ops import classically_controlled_operation_test
from cirq.sim.clifford import clifford_simulator_test

from cirq_quasarq import QuasarqSimulator

EXCLUDED = {
    "test_simulation_state": "calls cirq.CliffordSimulator._create_simulation_state (CH-form internals)",
    "test_state_copy": "reads step.state.ch_form (CH-form internals)",
    "test_sample_seed": "asserts the bit string cirq.CliffordSimulator's own random stream gives for seed 1234",
    "test_repeat_until": "repeat_until loops depend on measurement results (not supported)",
    "test_repeat_until_sympy": "repeat_until loops depend on measurement results (not supported)",
    "test_repeat_until_error": "repeat_until loops depend on measurement results (not supported)",
}


def _cirq_tests(module, want_sim: bool):
    """(name, function, parameter sets) of a Cirq test module's tests, expanded over their
    pytest.mark.parametrize marks; with want_sim, only the tests taking a `sim` whose list
    includes a cirq.CliffordSimulator, with ours in its place."""
    for name, fn in sorted(vars(module).items()):
        if not name.startswith("test_") or not callable(fn):
            continue
        params = inspect.signature(fn).parameters
        if want_sim != ("sim" in params):
            continue
        combos = [{}]
        for mark in getattr(fn, "pytestmark", []):
            if mark.name != "parametrize":
                continue
            names = [n.strip() for n in mark.args[0].split(",")] if isinstance(mark.args[0], str) else list(mark.args[0])
            values = [v if len(names) > 1 else (v,) for v in mark.args[1]]
            if names == ["sim"]:
                if not any(isinstance(v[0], cirq.CliffordSimulator) for v in values):
                    combos = []
                values = [(None,)]  # ours, created per test
            combos = [{**c, **dict(zip(names, v))} for c in combos for v in values]
        for combo in combos:
            yield name, fn, combo


def _id(case):
    name, _, combo = case
    shown = {k: v for k, v in combo.items() if k != "sim"}
    return name + (str(list(shown.values())) if shown else "")


CLIFFORD = list(_cirq_tests(clifford_simulator_test, want_sim=False))
WITH_SIM = [(m.__name__.rsplit(".", 1)[-1], case) for m in (classically_controlled_operation_test, circuit_operation_test)
            for case in _cirq_tests(m, want_sim=True)]


def _run(case, monkeypatch):
    name, fn, combo = case
    if name in EXCLUDED:
        pytest.skip(EXCLUDED[name])
    monkeypatch.setattr(cirq, "CliffordSimulator", QuasarqSimulator)
    kwargs = {k: (QuasarqSimulator() if k == "sim" else v) for k, v in combo.items()}
    fn(**kwargs)


@pytest.mark.parametrize("case", CLIFFORD, ids=[_id(c) for c in CLIFFORD])
def test_clifford_simulator_suite(case, monkeypatch):
    _run(case, monkeypatch)


@pytest.mark.parametrize("module,case", WITH_SIM, ids=[f"{m}::{_id(c)}" for m, c in WITH_SIM])
def test_simulator_parametrised_suites(module, case, monkeypatch):
    _run(case, monkeypatch)


def test_the_suites_are_found():
    # Guards the harness: Cirq's files are there and their tests were collected.
    assert len(CLIFFORD) >= 40
    assert len(WITH_SIM) >= 10
    assert {"test_clifford_circuit", "test_reset", "test_simulate_moment_steps_intermediate_measurement"} <= {
        name for name, _, _ in CLIFFORD}
