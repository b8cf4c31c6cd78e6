"""Initial states as Cirq users give them, turned into what the engines start from.

`simulate(initial_state=...)` accepts what cirq.CliffordSimulator accepts and more: an int (a
computational basis state, big-endian over the ordered qubits), a `cirq.ProductState` of Pauli
eigenstates, a state vector that is a stabilizer state, a `cirq.StabilizerChFormSimulationState`,
a `cirq.CliffordTableauSimulationState`, or a `cirq.CliffordTableau`. Each becomes either a
preparation circuit from |0…0> whose gates carry the exact global phase (`Initial.circuit`), or a
tableau (`Initial.tableau`, known up to global phase, as a tableau is).
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional, Sequence

import cirq
import numpy as np

from .core.tableau import InverseTableau
from .errors import InvalidInputError

ATOL = 1e-6  # float32 state vectors (cirq.final_state_vector's default) must pass


@dataclasses.dataclass
class Initial:
    circuit: Optional[cirq.Circuit] = None  # prepares the state from |0…0>, global phase included
    tableau: Optional[InverseTableau] = None


def initial_state(value: Any, qubits: Sequence[cirq.Qid]) -> Optional[Initial]:
    """What to start from, or None for |0…0>."""
    qubits = tuple(qubits)
    n = len(qubits)
    if value is None:
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if not 0 <= int(value) < 2**n:
            raise InvalidInputError(f"initial_state {value} is out of range for {n} qubits")
        flips = [cirq.X(q) for i, q in enumerate(qubits) if (int(value) >> (n - 1 - i)) & 1]
        return Initial(circuit=cirq.Circuit(flips)) if flips else None
    if isinstance(value, cirq.ProductState):
        return Initial(circuit=_product_state(value, qubits))
    if isinstance(value, cirq.StabilizerChFormSimulationState):
        vector = value.state.state_vector()
        return Initial(circuit=stabilizer_state_circuit(_reorder(vector, tuple(value.qubits), qubits), qubits))
    if isinstance(value, cirq.CliffordTableauSimulationState):
        _same_qubits(tuple(value.qubits), qubits)
        return _tableau(value.tableau, tuple(value.qubits), qubits)
    if isinstance(value, cirq.CliffordTableau):
        return _tableau(value, qubits, qubits)
    if isinstance(value, (np.ndarray, list, tuple)):
        vector = np.asarray(value, dtype=np.complex128).reshape(-1)
        if vector.shape != (2**n,):
            raise InvalidInputError(f"an initial state vector of {n} qubits has {2**n} entries, not {vector.size}")
        return Initial(circuit=stabilizer_state_circuit(vector, qubits))
    raise InvalidInputError(
        f"initial_state {value!r} of type {type(value).__name__} is not supported: give an int, a "
        "cirq.ProductState of Pauli eigenstates, a stabilizer state vector, a "
        "cirq.StabilizerChFormSimulationState, a cirq.CliffordTableauSimulationState or a cirq.CliffordTableau")


def _same_qubits(given, qubits) -> None:
    if set(given) != set(qubits):
        raise InvalidInputError(f"the initial state is on qubits {list(given)}, the circuit on {list(qubits)}")


def _reorder(vector: np.ndarray, given: tuple, qubits: tuple) -> np.ndarray:
    """A big-endian state vector over `given` as one over `qubits` (the same set)."""
    _same_qubits(given, qubits)
    n = len(qubits)
    tensor = np.asarray(vector).reshape((2,) * n) if n else np.asarray(vector).reshape(())
    return np.transpose(tensor, [given.index(q) for q in qubits]).reshape(-1) if n else tensor.reshape(1)


def _tableau(tableau: cirq.CliffordTableau, given: tuple, qubits: tuple) -> Initial:
    if tableau.n != len(qubits):
        raise InvalidInputError(f"the initial tableau has {tableau.n} qubits, the circuit {len(qubits)}")
    order = [given.index(q) for q in qubits]
    rows = order + [tableau.n + i for i in order]
    return Initial(tableau=InverseTableau.from_forward(tableau.xs[rows][:, order], tableau.zs[rows][:, order],
                                                       tableau.rs[rows]))


def _product_state(state: cirq.ProductState, qubits: tuple) -> cirq.Circuit:
    ops = []
    for q, single in state.states.items():
        if q not in qubits:
            raise InvalidInputError(f"the initial ProductState names {q!r}, which is not in the circuit")
        a, b = np.asarray(single.state_vector(), dtype=np.complex128)
        # A unitary whose first column is the qubit's state; a stabilizer state iff it is Clifford.
        ops.append(cirq.MatrixGate(np.array([[a, -np.conj(b)], [b, np.conj(a)]])).on(q))
    return cirq.Circuit(ops)


def stabilizer_state_circuit(vector: np.ndarray, qubits: Sequence[cirq.Qid]) -> cirq.Circuit:
    """A Clifford circuit preparing `vector` (big-endian) from |0…0>, its global phase included.

    A stabilizer state is a_0 Σ_c i^(ρ·c) (-1)^(Σ_{i<j} σ_ij c_i c_j) |x_0 ⊕ Σ c_i b_i> over an affine
    subspace x_0 ⊕ span(b_i) (Dehaene and De Moor): H on the pivot of each b_i (in reduced form),
    CX from each pivot onto b_i's other qubits, S / Z / S† and CZ between pivots for the phases, X
    onto x_0, and the global phase a_0·√(2^k). Anything else is refused with InvalidInputError."""
    qubits = tuple(qubits)
    n = len(qubits)
    v = np.asarray(vector, dtype=np.complex128)
    if abs(np.linalg.norm(v) - 1) > 1e-5:
        raise InvalidInputError(f"the initial state vector is not normalised (norm {np.linalg.norm(v):.6g})")
    support = np.flatnonzero(np.abs(v) > ATOL)
    k = int(round(np.log2(len(support))))
    bad = InvalidInputError("the initial state vector is not a stabilizer state; the simulator can only "
                            "start from stabilizer states")
    if 2**k != len(support) or not np.allclose(np.abs(v[support]), 2 ** (-k / 2), atol=1e-5):
        raise bad
    x0 = int(support[0])
    basis: List[int] = []  # reduced row echelon over bit positions (bit j <-> qubit n-1-j)
    for y in (int(s) ^ x0 for s in support):
        for b in basis:
            if y & (1 << (b.bit_length() - 1)):
                y ^= b
        if y:
            pivot = 1 << (y.bit_length() - 1)
            basis = [b ^ y if b & pivot else b for b in basis] + [y]
    if len(basis) != k:
        raise bad
    basis.sort(reverse=True)
    pivots = [b.bit_length() - 1 for b in basis]
    a0 = v[x0]
    rho = [v[x0 ^ b] / a0 for b in basis]
    sigma = {(i, j): v[x0 ^ basis[i] ^ basis[j]] / (a0 * rho[i] * rho[j])
             for i in range(k) for j in range(i + 1, k)}
    quarter = {}
    for i, r in enumerate(rho):
        turns = np.angle(r) / (np.pi / 2)
        if abs(turns - round(turns)) > 1e-4:
            raise bad
        quarter[i] = int(round(turns)) % 4
    for key, s in sigma.items():
        if abs(s - 1) > 1e-4 and abs(s + 1) > 1e-4:
            raise bad
    # The vector this circuit prepares, compared with the input over the whole support.
    c = (np.arange(2**k)[:, None] >> np.arange(k)[None, :]) & 1 if k else np.zeros((1, 0), dtype=np.int64)
    index = np.full(len(c), x0)
    for i, b in enumerate(basis):
        index ^= c[:, i] * b
    phase = np.ones(len(c), dtype=np.complex128) * a0
    for i in range(k):
        phase *= rho[i] ** c[:, i]
    for (i, j), s in sigma.items():
        phase *= np.where(c[:, i] & c[:, j], np.real(s), 1)
    predicted = np.zeros_like(v)
    predicted[index] = phase
    if not np.allclose(predicted, v, atol=1e-5):
        raise bad
    qubit = lambda bit: qubits[n - 1 - bit]  # noqa: E731
    ops: List[cirq.Operation] = [cirq.H(qubit(p)) for p in pivots]
    for b, p in zip(basis, pivots):
        ops += [cirq.CNOT(qubit(p), qubit(t)) for t in range(n) if t != p and (b >> t) & 1]
    ops += [(cirq.I, cirq.S, cirq.Z, cirq.S**-1)[quarter[i]](qubit(p)) for i, p in enumerate(pivots) if quarter[i]]
    ops += [cirq.CZ(qubit(pivots[i]), qubit(pivots[j])) for (i, j), s in sigma.items() if np.real(s) < 0]
    ops += [cirq.X(qubit(t)) for t in range(n) if (x0 >> t) & 1]
    phase = a0 * 2 ** (k / 2)
    ops.append(cirq.global_phase_operation(phase / abs(phase)))
    return cirq.Circuit(ops)
