"""Noise gates -> Pauli channels (opcode name, arity, outcome probabilities, outcome Paulis).

A channel is accepted only when it is exactly a Pauli channel: known Pauli channel types are read
from their parameters, anything else with a mixture (or Kraus operators proportional to Paulis)
is decomposed outcome by outcome; every other channel (amplitude damping, ...) raises
`UnsupportedNoiseError`. Paulis are numbered 0=I, 1=X, 2=Y, 3=Z as in `Program.channels`.
"""

from __future__ import annotations

import itertools
import math
from typing import Dict, NamedTuple, Optional, Tuple

import cirq
import numpy as np

from .. import errors
from . import stim_types

ATOL = 1e-9
MAX_CACHE = 1 << 14


class NoiseSpec(NamedTuple):
    """`opname` over `arity` qubits; outcome k applies paulis[k] with probability probs[k]."""

    opname: str
    arity: int
    probs: Tuple[float, ...]
    paulis: Tuple[Tuple[int, ...], ...]


_SINGLE_ERROR = {1: "X_ERROR", 2: "Y_ERROR", 3: "Z_ERROR"}
# Stim's PAULI_CHANNEL_2 / DEPOLARIZE2 order: IX, IY, IZ, XI, ..., ZZ (first letter: first qubit).
TWO_QUBIT_ORDER = tuple((a, b) for a in range(4) for b in range(4))[1:]

_PAULI_2x2 = {
    0: np.eye(2, dtype=complex),
    1: np.array([[0, 1], [1, 0]], dtype=complex),
    2: np.array([[0, -1j], [1j, 0]], dtype=complex),
    3: np.array([[1, 0], [0, -1]], dtype=complex),
}


def pauli_of_matrix(m: np.ndarray, n: int) -> Optional[Tuple[complex, Tuple[int, ...]]]:
    """(c, letters) with m = c · P (Cirq's big-endian order: letters[0] on the first qubit), or
    None when m is not proportional to a Pauli string."""
    m = np.asarray(m, dtype=complex)
    dim = 2**n
    if m.shape != (dim, dim):
        return None
    col = np.abs(m[:, 0])
    x_mask = int(np.argmax(col))
    c0 = m[x_mask, 0]
    if abs(c0) < ATOL:
        return None
    letters = []
    for q in range(n):
        bit = 1 << (n - 1 - q)  # big-endian: qubit 0 is the most significant bit
        x = (x_mask >> (n - 1 - q)) & 1
        # Z part on q: compare the entry for input |bit> with that for |0>.
        ratio = m[x_mask ^ bit, bit] / c0
        if x:  # X (z=0) or Y (z=1): Y|1> = -i|0>, Y|0> = i|1>, so the ratio is -1
            z = 1 if ratio.real < 0 else 0
            letters.append(2 if z else 1)
        else:
            z = 1 if ratio.real < 0 else 0
            letters.append(3 if z else 0)
    p = np.array([[1.0 + 0j]])
    for letter in letters:
        p = np.kron(p, _PAULI_2x2[letter])
    c = complex(np.vdot(p.reshape(-1), m.reshape(-1)) / dim)
    if not np.allclose(m, c * p, atol=1e-7):
        return None
    return c, tuple(letters)


def _spec_from_outcomes(outcomes: Dict[Tuple[int, ...], float], n: int, gate) -> Optional[NoiseSpec]:
    items = [(paulis, p) for paulis, p in outcomes.items() if any(paulis) and p > 0]
    if not items:
        return None
    total = sum(p for _, p in items)
    if total > 1 + 1e-9:
        raise errors.UnsupportedNoiseError(f"{gate!r}: error probabilities sum to {total} > 1")
    if n == 1:
        if len(items) == 1:
            (paulis, p), = items
            return NoiseSpec(_SINGLE_ERROR[paulis[0]], 1, (p,), (paulis,))
        order = [(1,), (2,), (3,)]
        return NoiseSpec("PAULI_CHANNEL_1", 1, tuple(outcomes.get(k, 0.0) for k in order), tuple(order))
    if len(items) == 1:  # one Pauli product (PauliString.with_probability): Stim's E
        (paulis, p), = items
        return NoiseSpec("E", n, (p,), (paulis,))
    if n == 2:
        return NoiseSpec("PAULI_CHANNEL_2", 2, tuple(outcomes.get(k, 0.0) for k in TWO_QUBIT_ORDER),
                         TWO_QUBIT_ORDER)
    items.sort()
    return NoiseSpec("E", n, tuple(p for _, p in items), tuple(k for k, _ in items))


def _from_mixture(gate, n: int) -> Optional[NoiseSpec]:
    outcomes: Dict[Tuple[int, ...], float] = {}
    for p, u in cirq.mixture(gate):
        found = pauli_of_matrix(u, n)
        if found is None:
            raise errors.UnsupportedNoiseError(
                f"{gate!r} is not a Pauli channel (an outcome of its mixture is not a Pauli)")
        outcomes[found[1]] = outcomes.get(found[1], 0.0) + float(p)
    return _spec_from_outcomes(outcomes, n, gate)


def _from_kraus(gate, n: int) -> Optional[NoiseSpec]:
    outcomes: Dict[Tuple[int, ...], float] = {}
    for k in cirq.kraus(gate):
        found = pauli_of_matrix(k, n)
        if found is None:
            raise errors.UnsupportedNoiseError(
                f"{gate!r} is not a Pauli channel (amplitude damping and other non-Pauli "
                "channels have no stabilizer simulation)")
        outcomes[found[1]] = outcomes.get(found[1], 0.0) + abs(found[0]) ** 2
    return _spec_from_outcomes(outcomes, n, gate)


def _depolarize(gate: cirq.DepolarizingChannel) -> Optional[NoiseSpec]:
    n = gate.n_qubits
    p = float(gate.p)
    if p == 0:
        return None
    k = 4**n - 1
    paulis = tuple(itertools.product(range(4), repeat=n))[1:]
    name = {1: "DEPOLARIZE1", 2: "DEPOLARIZE2"}.get(n, "E")
    return NoiseSpec(name, n, (p / k,) * k, paulis)


def _single(name: str, pauli: int, p: float) -> Optional[NoiseSpec]:
    p = float(p)
    return None if p == 0 else NoiseSpec(name, 1, (p,), ((pauli,),))


def _known(gate) -> Optional[object]:
    """A NoiseSpec / None for known channel types, or NotImplemented for the generic path."""
    t = type(gate)
    if t is cirq.BitFlipChannel:
        return _single("X_ERROR", 1, gate.p)
    if t is cirq.PhaseFlipChannel:
        return _single("Z_ERROR", 3, gate.p)
    if t is cirq.DepolarizingChannel:
        return _depolarize(gate)
    if t is cirq.PhaseDampingChannel:
        # Kraus {diag(1, sqrt(1-g)), diag(0, sqrt(g))} is exactly a Z flip with this probability.
        return _single("Z_ERROR", 3, (1 - math.sqrt(1 - float(gate.gamma))) / 2)
    if t in (cirq.AmplitudeDampingChannel, cirq.GeneralizedAmplitudeDampingChannel):
        raise errors.UnsupportedNoiseError(
            f"{gate!r} is not a Pauli channel: amplitude damping has no stabilizer simulation")
    if t is cirq.ResetChannel:
        raise errors.UnsupportedNoiseError(f"{gate!r} is a reset, not a noise channel")
    if stim_types.is_stim_two_qubit_depolarize(gate):
        probs = tuple(float(p) for p in gate.probabilities)
        outcomes = dict(zip(TWO_QUBIT_ORDER, probs))
        return _spec_from_outcomes(outcomes, 2, gate)
    if stim_types.is_stim_identity_error(gate):
        return None
    return NotImplemented


_CACHE: Dict[object, object] = {}


class _Error:
    def __init__(self, error: Exception):
        self.error = error


def noise_spec(gate) -> Optional[NoiseSpec]:
    """The channel of a noise gate (None: identity-like). Raises UnsupportedNoiseError."""
    try:
        hit = _CACHE.get(gate, _CACHE)
    except TypeError:
        return _noise_spec_uncached(gate)
    if hit is _CACHE:
        try:
            hit = _noise_spec_uncached(gate)
        except errors.UnsupportedNoiseError as error:
            hit = _Error(error)
        if len(_CACHE) >= MAX_CACHE:
            _CACHE.clear()
        _CACHE[gate] = hit
    if isinstance(hit, _Error):
        raise errors.UnsupportedNoiseError(str(hit.error))
    return hit


def _noise_spec_uncached(gate) -> Optional[NoiseSpec]:
    known = _known(gate)
    if known is not NotImplemented:
        return known
    n = cirq.num_qubits(gate)
    if cirq.has_mixture(gate):
        return _from_mixture(gate, n)
    if cirq.has_kraus(gate):
        return _from_kraus(gate, n)
    raise errors.UnsupportedNoiseError(f"{gate!r} is not a Pauli channel")


def is_noise_gate(gate) -> bool:
    """True for non-unitary gates that describe a channel (the noise handlers apply)."""
    if type(gate) in NOISE_TYPES or stim_types.is_stim_noise(gate):
        return True
    return not cirq.has_unitary(gate) and (cirq.has_mixture(gate) or cirq.has_kraus(gate))


NOISE_TYPES = frozenset({
    cirq.BitFlipChannel, cirq.PhaseFlipChannel, cirq.DepolarizingChannel,
    cirq.AsymmetricDepolarizingChannel, cirq.RandomGateChannel, cirq.PhaseDampingChannel,
    cirq.AmplitudeDampingChannel, cirq.GeneralizedAmplitudeDampingChannel, cirq.KrausChannel,
    cirq.MixedUnitaryChannel,
})
