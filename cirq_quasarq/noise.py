"""Pauli channels whose probabilities may be sympy symbols, for noise sweeps.

Cirq's own channel constructors (`cirq.depolarize`, `cirq.bit_flip`, ...) check their probability
at construction and so reject a `sympy.Symbol`. These stand in for them until the sweep resolves the
symbols; resolved, each becomes the Cirq channel itself (so `cirq.Simulator` runs it too):

    p = sympy.Symbol("p")
    circuit = cirq.Circuit(cirq.H(q), cirq_quasarq.noise.depolarize(p).on(q), cirq.measure(q))
    sim.run_sweep(circuit, cirq.Points("p", [1e-3, 1e-2]), repetitions=10_000)

A template resolves them per sweep point without recompiling, and points that differ only in these
probabilities share the schedule and the reference sample.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

import cirq
import sympy

from .errors import InvalidProbabilityError


class SweepableChannel(cirq.Gate):
    """The Cirq channel `_FACTORIES[name](num_qubits, **values)`, its values possibly symbols until
    resolved (kept by name, so it pickles)."""

    def __init__(self, name: str, num_qubits: int, **values: Any):
        self._name, self._n, self._values = name, num_qubits, dict(values)
        if not cirq.is_parameterized(self):
            self._check(self._values)

    def _num_qubits_(self) -> int:
        return self._n

    def _is_parameterized_(self) -> bool:
        return any(isinstance(v, sympy.Basic) and v.free_symbols for v in self._values.values())

    def _parameter_names_(self):
        return {s.name for v in self._values.values() if isinstance(v, sympy.Basic) for s in v.free_symbols}

    def _resolve_parameters_(self, resolver: cirq.ParamResolver, recursive: bool) -> cirq.Gate:
        values = {k: resolver.value_of(v, recursive) for k, v in self._values.items()}
        if any(isinstance(v, sympy.Basic) and v.free_symbols for v in values.values()):
            return SweepableChannel(self._name, self._n, **values)
        return self._build({k: float(v) for k, v in values.items()})

    def _check(self, values: Dict[str, Any]) -> None:
        for k, v in values.items():
            if not 0.0 <= float(v) <= 1.0:
                raise InvalidProbabilityError(f"{self._name}: {k} = {v} is not a probability (it must lie in "
                                              f"[0, 1])")

    def _build(self, values: Dict[str, float]) -> cirq.Gate:
        self._check(values)
        try:
            return _FACTORIES[self._name](self._n, **values)
        except ValueError as error:  # Cirq's own checks (a sum of probabilities past 1, ...)
            raise InvalidProbabilityError(f"{self._name}({values}): {error}") from None

    def _has_mixture_(self) -> bool:
        return not cirq.is_parameterized(self)

    def _mixture_(self):
        if cirq.is_parameterized(self):
            return NotImplemented
        return cirq.mixture(self._build({k: float(v) for k, v in self._values.items()}))

    def _values_tuple(self) -> Tuple:
        return tuple(sorted(self._values.items(), key=lambda kv: kv[0]))

    def _value_equality_key(self):
        return self._name, self._n, self._values_tuple()

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, SweepableChannel) and self._value_equality_key() == other._value_equality_key()

    def __hash__(self) -> int:
        return hash(self._value_equality_key())

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"cirq_quasarq.noise.{self._name}({args})"

    def _circuit_diagram_info_(self, args: cirq.CircuitDiagramInfoArgs) -> Tuple[str, ...]:
        inner = ",".join(str(v) for v in self._values.values())
        return tuple(f"{self._name}({inner})" for _ in range(self._n))


_FACTORIES: Dict[str, Callable[..., cirq.Gate]] = {
    "depolarize": lambda n, p: cirq.depolarize(p, n),
    "bit_flip": lambda n, p: cirq.bit_flip(p),
    "phase_flip": lambda n, p: cirq.phase_flip(p),
    "asymmetric_depolarize": lambda n, p_x, p_y, p_z: cirq.asymmetric_depolarize(p_x, p_y, p_z),
}


def depolarize(p: cirq.TParamVal, n_qubits: int = 1) -> SweepableChannel:
    """cirq.depolarize(p, n_qubits) with p possibly a symbol."""
    return SweepableChannel("depolarize", n_qubits, p=p)


def bit_flip(p: cirq.TParamVal) -> SweepableChannel:
    """cirq.bit_flip(p) with p possibly a symbol."""
    return SweepableChannel("bit_flip", 1, p=p)


def phase_flip(p: cirq.TParamVal) -> SweepableChannel:
    """cirq.phase_flip(p) with p possibly a symbol."""
    return SweepableChannel("phase_flip", 1, p=p)


def asymmetric_depolarize(p_x: cirq.TParamVal = 0.0, p_y: cirq.TParamVal = 0.0,
                          p_z: cirq.TParamVal = 0.0) -> SweepableChannel:
    """cirq.asymmetric_depolarize(p_x, p_y, p_z) with the probabilities possibly symbols."""
    return SweepableChannel("asymmetric_depolarize", 1, p_x=p_x, p_y=p_y, p_z=p_z)


__all__ = ["SweepableChannel", "depolarize", "bit_flip", "phase_flip", "asymmetric_depolarize"]
