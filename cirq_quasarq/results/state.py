"""The final state users see: stabilizers, destabilizers, a cirq.CliffordTableau, a state vector.

Engines return the inverse tableau (Stim's convention, `core.tableau.InverseTableau`); the forward
tableau Cirq uses is derived from it (`InverseTableau.forward`), once, when asked for."""

from __future__ import annotations

import functools
from typing import Dict, List

import cirq
import numpy as np

from ..core.tableau import InverseTableau
from ..errors import TooLargeError

MAX_STATE_VECTOR_QUBITS = 20


def forward_tableau(inv: InverseTableau) -> cirq.CliffordTableau:
    """The forward tableau T (Cirq's convention) of the inverse tableau T⁻¹."""
    xs, zs, rs = inv.forward()
    table = cirq.CliffordTableau(num_qubits=inv.num_qubits)
    table.xs, table.zs, table.rs = xs, zs, rs
    return table


class QuasarqState:
    """Final state of a simulation: `stabilizers()`, `destabilizers()`, `tableau`,
    `state_vector()` / `to_numpy()` (≤ 20 qubits), and `qubit_map` as Cirq's states have."""

    def __init__(self, inverse: InverseTableau, qubits):
        self.inverse_tableau = inverse
        self.qubits = tuple(qubits)
        self.qubit_map: Dict[cirq.Qid, int] = {q: i for i, q in enumerate(self.qubits)}
        self.n = len(self.qubits)

    @functools.cached_property
    def tableau(self) -> cirq.CliffordTableau:
        return forward_tableau(self.inverse_tableau)

    def stabilizers(self) -> List[cirq.DensePauliString]:
        return self.tableau.stabilizers()

    def destabilizers(self) -> List[cirq.DensePauliString]:
        return self.tableau.destabilizers()

    def state_vector(self) -> np.ndarray:
        """The state vector (big-endian as Cirq: qubit 0 is the most significant bit), with the
        global phase fixed so the first nonzero amplitude is real and positive."""
        n = self.n
        if n > MAX_STATE_VECTOR_QUBITS:
            raise TooLargeError(
                f"state_vector() of {n} qubits needs {16 * 2**n / 2**30:.3g} GiB; it is limited to "
                f"{MAX_STATE_VECTOR_QUBITS} qubits. Use stabilizers() or the tableau instead.")
        vec = np.random.default_rng(1234).normal(size=2**n) + 0j
        index = np.arange(2**n)
        weights = 1 << np.arange(n - 1, -1, -1)  # qubit k <-> bit (n-1-k) of the index
        tab = self.tableau
        for s in range(n):
            xm = int(np.dot(tab.xs[n + s], weights))
            zm = int(np.dot(tab.zs[n + s], weights))
            y_count = int(np.sum(tab.xs[n + s] & tab.zs[n + s]))
            # P = (-1)^r i^(#Y) X^x Z^z: (P v)[i ^ xm] = phase * (-1)^{popcount(i & zm)} v[i].
            phase = (-1) ** int(tab.rs[n + s]) * (1j) ** y_count
            parity = np.bitwise_count(index & zm) & 1
            applied = np.empty_like(vec)
            applied[index ^ xm] = phase * np.where(parity, -1, 1) * vec
            vec = (vec + applied) / 2
        vec /= np.linalg.norm(vec)
        first = vec[np.flatnonzero(np.abs(vec) > 1e-9)[0]]
        return vec * (abs(first) / first)

    def to_numpy(self) -> np.ndarray:
        return self.state_vector()

    def copy(self) -> "QuasarqState":
        return QuasarqState(self.inverse_tableau, self.qubits)

    def __str__(self) -> str:
        return "\n".join(str(s) for s in self.stabilizers())

    def __repr__(self) -> str:
        return f"QuasarqState(num_qubits={self.n})"
