"""The registry from Cirq operations to lowerings: its lookup order and the ways to add a gate."""

import subprocess
import sys

import cirq
import numpy as np
import pytest
import sympy

from cirq_quasarq import QuasarqSimulator, errors
from cirq_quasarq.compiler import compile_circuit, registry
from cirq_quasarq.compiler.registry import Lowering, lower


class _SelfDescribed(cirq.Gate):
    """H on qubit 0 then CX(0, 1): a gate that describes itself (no unitary, no decomposition)."""

    def _num_qubits_(self):
        return 2

    def _quasarq_lowering_(self):
        return [("H", (0,)), ("CX", (0, 1))]


class _Bell(cirq.Gate):
    """The same operation, found only through a BY_TYPE entry."""

    def _num_qubits_(self):
        return 2


def _bell_state(sim, gate):
    a, b = cirq.LineQubit.range(2)
    return sim.simulate(cirq.Circuit(gate.on(a, b))).final_state.state_vector()


def test_a_gate_that_describes_itself_compiles():
    vec = _bell_state(QuasarqSimulator(seed=1), _SelfDescribed())
    np.testing.assert_allclose(np.abs(vec), [2**-0.5, 0, 0, 2**-0.5], atol=1e-9)
    assert lower(_SelfDescribed(), 2).kind == Lowering.OPS


def test_a_bad_self_description_is_a_named_error():
    class Bad(_SelfDescribed):
        def _quasarq_lowering_(self):
            return [("CX", (0,))]

    with pytest.raises(errors.UnsupportedOperationError, match="_quasarq_lowering_"):
        lower(Bad(), 2)


def test_one_type_entry_adds_a_gate(monkeypatch):
    with pytest.raises(errors.UnsupportedOperationError, match="decompose"):
        compile_circuit(cirq.Circuit(_Bell().on(*cirq.LineQubit.range(2))))
    monkeypatch.setitem(registry.BY_TYPE, _Bell, registry.unitary(lambda gate, n: (("H", (0,)), ("CX", (0, 1)))))
    monkeypatch.setattr(registry, "_CACHE", {})
    vec = _bell_state(QuasarqSimulator(seed=1), _Bell())
    np.testing.assert_allclose(np.abs(vec), [2**-0.5, 0, 0, 2**-0.5], atol=1e-9)


def test_protocol_comes_before_the_type_and_exact_values_first():
    class LoudX(cirq.XPowGate):
        def _quasarq_lowering_(self):
            return [("Y", (0,))]

    # Its own description beats the XPowGate family, even where it equals cirq.X by value.
    assert lower(cirq.X, 1) is registry.EXACT[cirq.X]
    assert LoudX() == cirq.X and lower(LoudX(), 1).ops == (("Y", (0,)),)
    assert lower(cirq.X, 1).ops == (("X", (0,)),)


def test_lookup_order_for_each_kind():
    q = cirq.LineQubit(0)
    assert lower(cirq.H**0.5, 1).kind == Lowering.ERROR  # family: not Clifford
    assert lower(cirq.MatrixGate(cirq.unitary(cirq.S)), 1).ops == (("S", (0,)),)  # family: matrix
    assert lower(cirq.depolarize(0.1), 1).kind == Lowering.NOISE
    assert lower(cirq.amplitude_damp(0.1), 1).kind == Lowering.ERROR
    assert lower(cirq.MeasurementGate(1, "m"), 1).kind == Lowering.EMIT
    assert lower(cirq.XPowGate(exponent=sympy.Symbol("t")), 1).kind == Lowering.PARAMETRIZED
    assert lower(cirq.CCZ.controlled(1), 4).kind == Lowering.DECOMPOSE
    assert lower(cirq.MatrixGate(cirq.unitary(cirq.H)).on(q).gate, 1).ops == (("H", (0,)),)


def test_importing_the_package_does_not_import_stimcirq():
    code = "import sys, cirq_quasarq; print('stimcirq' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "False"
