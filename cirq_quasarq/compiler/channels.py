"""Noise gates -> Pauli channels (opcode name, arity, outcome probabilities, outcome Paulis).

A channel is accepted only when it is exactly a Pauli channel: the registry maps known Pauli
channel types to the readers below (`bit_flip`, `depolarize`, ...), which read their parameters;
`from_channel` decomposes any other mixture (or Kraus operators proportional to Paulis) outcome
by outcome; every other channel (amplitude damping, ...) raises `UnsupportedNoiseError`. Paulis
are `core.paulis` letters, as in `Program.channels`.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Dict, NamedTuple, Optional, Tuple

from .. import errors
from ..core import paulis

if TYPE_CHECKING:
    import cirq


class NoiseSpec(NamedTuple):
    """`opname` over `arity` qubits; outcome k applies paulis[k] with probability probs[k]."""

    opname: str
    arity: int
    probs: Tuple[float, ...]
    paulis: Tuple[Tuple[int, ...], ...]


_SINGLE_ERROR = {paulis.X: "X_ERROR", paulis.Y: "Y_ERROR", paulis.Z: "Z_ERROR"}
# Stim's PAULI_CHANNEL_2 / DEPOLARIZE2 order: IX, IY, IZ, XI, ..., ZZ (first letter: first qubit).
TWO_QUBIT_ORDER = tuple((a, b) for a in range(4) for b in range(4))[1:]


def spec_from_outcomes(outcomes: Dict[Tuple[int, ...], float], n: int, gate) -> Optional[NoiseSpec]:
    items = [(letters, p) for letters, p in outcomes.items() if any(letters) and p > 0]
    if not items:
        return None
    total = sum(p for _, p in items)
    if total > 1 + 1e-9:
        raise errors.UnsupportedNoiseError(f"{gate!r}: error probabilities sum to {total} > 1")
    if n == 1:
        if len(items) == 1:
            (letters, p), = items
            return NoiseSpec(_SINGLE_ERROR[letters[0]], 1, (p,), (letters,))
        order = [(paulis.X,), (paulis.Y,), (paulis.Z,)]
        return NoiseSpec("PAULI_CHANNEL_1", 1, tuple(outcomes.get(k, 0.0) for k in order), tuple(order))
    if len(items) == 1:  # one Pauli product (PauliString.with_probability): Stim's E
        (letters, p), = items
        return NoiseSpec("E", n, (p,), (letters,))
    if n == 2:
        return NoiseSpec("PAULI_CHANNEL_2", 2, tuple(outcomes.get(k, 0.0) for k in TWO_QUBIT_ORDER),
                         TWO_QUBIT_ORDER)
    items.sort()
    return NoiseSpec("E", n, tuple(p for _, p in items), tuple(k for k, _ in items))


def from_channel(gate, n: int) -> Optional[NoiseSpec]:
    """Any gate with a mixture, or Kraus operators proportional to Paulis, as a Pauli channel."""
    import cirq  # here, not at the top: the Stim path reads this module's tables without Cirq

    outcomes: Dict[Tuple[int, ...], float] = {}
    if cirq.has_mixture(gate):
        for p, u in cirq.mixture(gate):
            found = paulis.pauli_of_matrix(u, n)
            if found is None:
                raise errors.UnsupportedNoiseError(
                    f"{gate!r} is not a Pauli channel (an outcome of its mixture is not a Pauli)")
            outcomes[found[1]] = outcomes.get(found[1], 0.0) + float(p)
    elif cirq.has_kraus(gate):
        for k in cirq.kraus(gate):
            found = paulis.pauli_of_matrix(k, n)
            if found is None:
                raise errors.UnsupportedNoiseError(
                    f"{gate!r} is not a Pauli channel (amplitude damping and other non-Pauli "
                    "channels have no stabilizer simulation)")
            outcomes[found[1]] = outcomes.get(found[1], 0.0) + abs(found[0]) ** 2
    else:
        raise errors.UnsupportedNoiseError(f"{gate!r} is not a Pauli channel")
    return spec_from_outcomes(outcomes, n, gate)


# -- readers of known channel types (the registry's entries) --------------------------------------


def _single(name: str, pauli: int, p: float) -> Optional[NoiseSpec]:
    p = float(p)
    return None if p == 0 else NoiseSpec(name, 1, (p,), ((pauli,),))


def bit_flip(gate: cirq.BitFlipChannel, n: int) -> Optional[NoiseSpec]:
    return _single("X_ERROR", paulis.X, gate.p)


def phase_flip(gate: cirq.PhaseFlipChannel, n: int) -> Optional[NoiseSpec]:
    return _single("Z_ERROR", paulis.Z, gate.p)


def phase_damp(gate: cirq.PhaseDampingChannel, n: int) -> Optional[NoiseSpec]:
    # Kraus {diag(1, sqrt(1-g)), diag(0, sqrt(g))} is exactly a Z flip with this probability.
    return _single("Z_ERROR", paulis.Z, (1 - math.sqrt(1 - float(gate.gamma))) / 2)


def depolarize(gate: cirq.DepolarizingChannel, n: int) -> Optional[NoiseSpec]:
    p = float(gate.p)
    if p == 0:
        return None
    k = 4**n - 1
    letters = tuple(itertools.product(range(4), repeat=n))[1:]
    name = {1: "DEPOLARIZE1", 2: "DEPOLARIZE2"}.get(n, "E")
    return NoiseSpec(name, n, (p / k,) * k, letters)


def two_qubit_asymmetric_depolarize(gate, n: int) -> Optional[NoiseSpec]:
    """stimcirq.TwoQubitAsymmetricDepolarizingChannel: Stim's PAULI_CHANNEL_2 order."""
    return spec_from_outcomes(dict(zip(TWO_QUBIT_ORDER, (float(p) for p in gate.probabilities))), 2, gate)


def identity_error(gate, n: int) -> None:
    """stimcirq's I_ERROR / II_ERROR: no effect."""
    return None


def amplitude_damping(gate, n: int):
    raise errors.UnsupportedNoiseError(
        f"{gate!r} is not a Pauli channel: amplitude damping has no stabilizer simulation")
