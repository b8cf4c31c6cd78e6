"""Noise gates -> Pauli channels (opcode name, arity, outcome probabilities, outcome Paulis).

A channel is accepted only when it is exactly a Pauli channel: the registry maps known Pauli
channel types to the readers below (`bit_flip`, `depolarize`, ...), which read their parameters;
`from_channel` decomposes any other mixture (or Kraus operators proportional to Paulis) outcome
by outcome; every other channel (amplitude damping, ...) raises `UnsupportedNoiseError`, unless
the caller opts in to `twirl`: the channel's Pauli twirl, the Pauli channel with the same
Pauli-transfer diagonal (an approximation: the channel's coherent, off-diagonal part is dropped).
Paulis are `core.paulis` letters, as in `Program.channels`.
"""

from __future__ import annotations

import itertools
import math
import warnings
from typing import TYPE_CHECKING, Dict, NamedTuple, Optional, Tuple

import numpy as np

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


# Said by every refusal of a channel that has Kraus operators (the twirl needs them).
TWIRL_HINT = ("; QuasarqSimulator(non_pauli='twirl') simulates such a channel by its Pauli twirl (an "
              "approximation that keeps its Pauli-transfer diagonal)")

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
                    f"{gate!r} is not a Pauli channel (an outcome of its mixture is not a Pauli){TWIRL_HINT}")
            outcomes[found[1]] = outcomes.get(found[1], 0.0) + float(p)
    elif cirq.has_kraus(gate):
        for k in cirq.kraus(gate):
            found = paulis.pauli_of_matrix(k, n)
            if found is None:
                raise errors.UnsupportedNoiseError(
                    f"{gate!r} is not a Pauli channel (amplitude damping and other non-Pauli "
                    f"channels have no exact stabilizer simulation){TWIRL_HINT}")
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
        f"{gate!r} is not a Pauli channel: amplitude damping has no exact stabilizer simulation{TWIRL_HINT}")


def twirl_probabilities(kraus, n: int) -> Dict[Tuple[int, ...], float]:
    """{Pauli letters: probability} of the Pauli twirl of the channel with these Kraus operators on
    n qubits: p_P = sum_j |Tr(P^dagger K_j)|^2 / 4^n (its chi matrix's diagonal in the Pauli basis),
    the identity included. Raises ValueError when the channel is not trace-preserving (the p_P
    would not be a probability distribution)."""
    dim = 2**n
    ks = np.asarray(list(kraus), dtype=complex).reshape(-1, dim, dim)
    gram = np.einsum("kji,kjl->il", ks.conj(), ks)  # sum_j K_j^dagger K_j
    if not np.allclose(gram, np.eye(dim), atol=1e-8):
        raise ValueError("it is not trace-preserving (sum of K^dagger K is not the identity), so its "
                         "twirl is not a probability distribution")
    flat = ks.reshape(len(ks), -1)
    out = {}
    for letters in itertools.product(range(4), repeat=n):
        overlaps = flat @ paulis.pauli_matrix(letters).conj().reshape(-1)  # Tr(P^dagger K_j), P Hermitian
        out[letters] = float(np.sum(np.abs(overlaps) ** 2)) / dim**2
    return out


def twirl(gate, n: int) -> Optional[NoiseSpec]:
    """The Pauli twirl of a channel with Kraus operators, as a Pauli channel (None: the identity)."""
    import cirq

    if not cirq.has_kraus(gate):
        raise errors.UnsupportedNoiseError(f"{gate!r} is not a Pauli channel and has no Kraus operators to twirl")
    try:
        outcomes = twirl_probabilities(cirq.kraus(gate), n)
    except ValueError as error:
        raise errors.UnsupportedNoiseError(f"{gate!r} has no Pauli twirl: {error}") from None
    return spec_from_outcomes(outcomes, n, gate)


def warn_twirled(gate, warned: set) -> None:
    """Name a channel simulated by its Pauli twirl, once per compilation."""
    text = repr(gate)
    if text not in warned:
        warned.add(text)
        warnings.warn(f"{text} is not a Pauli channel: it is simulated by its Pauli twirl (the Pauli channel "
                      "with its Pauli-transfer diagonal; its coherent part is dropped)", errors.TwirlWarning,
                      stacklevel=2)
