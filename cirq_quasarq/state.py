"""The final state users see: stabilizers, destabilizers, a cirq.CliffordTableau, a state vector.

Engines keep the inverse tableau (Stim's convention); the forward tableau Cirq uses (rows = the
destabilizers then the stabilizers, each a signed Pauli string over the qubits) is derived here,
once, when asked for."""

from __future__ import annotations

import functools
from typing import Dict, List

import cirq
import numpy as np

from .engines.base import InverseTableau
from .engines.numpy.paulis import product_phase
from .errors import TooLargeError

MAX_STATE_VECTOR_QUBITS = 20


def forward_tableau(inv: InverseTableau) -> cirq.CliffordTableau:
    """The forward tableau T (Cirq's convention) of the inverse tableau T⁻¹.

    Bits are a relabelling: D_p's X bit on qubit k is bit p of xrow[k].z... (see
    docs/engine-semantics.md); each sign comes from mapping the unsigned generator back through T⁻¹
    (a product of inverse rows), which must give ±X_p / ±Z_p."""
    n = inv.num_qubits
    xx, xz, zx, zz = inv.bits()
    # Forward bits, rows = generators p, columns = qubits k.
    d_x, d_z = zz.T, xz.T  # destabilizer D_p = T X_p T⁻¹
    s_x, s_z = zx.T, xx.T  # stabilizer S_p = T Z_p T⁻¹
    gen_x = np.concatenate([d_x, s_x])
    gen_z = np.concatenate([d_z, s_z])
    words = inv.xx.shape[1]
    acc_x = np.zeros((2 * n, words), dtype=np.uint64)
    acc_z = np.zeros_like(acc_x)
    log_i = np.zeros(2 * n, dtype=np.int64)
    for k in range(n):
        use_x, use_z = gen_x[:, k], gen_z[:, k]
        log_i += (use_x & use_z).astype(np.int64)  # Y = i·X·Z
        for use, rx, rz, rs in ((use_x, inv.xx[k], inv.xz[k], inv.xs[k]),
                                (use_z, inv.zx[k], inv.zz[k], inv.zs[k])):
            if not use.any():
                continue
            sel = np.flatnonzero(use)
            ax, az = acc_x[sel], acc_z[sel]
            log_i[sel] += product_phase(ax, az, rx[None, :], rz[None, :]) + 2 * int(rs)
            acc_x[sel] = ax ^ rx
            acc_z[sel] = az ^ rz
    assert np.all(log_i % 2 == 0), "inverse tableau is not a valid Clifford"
    table = cirq.CliffordTableau(num_qubits=n)
    table.xs = gen_x.astype(bool)
    table.zs = gen_z.astype(bool)
    table.rs = ((log_i & 3) >> 1).astype(bool)
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

    def tableau_state(self):
        """A fresh NumPy TableauState holding this state (to continue simulating from it)."""
        from .engines.numpy.tableau import TableauState

        inv = self.inverse_tableau
        state = TableauState(self.n)
        state.X = np.concatenate([inv.xx, inv.zx]).copy()
        state.Z = np.concatenate([inv.xz, inv.zz]).copy()
        state.S = np.concatenate([inv.xs, inv.zs]).copy()
        return state

    def copy(self) -> "QuasarqState":
        return QuasarqState(self.inverse_tableau, self.qubits)

    def __str__(self) -> str:
        return "\n".join(str(s) for s in self.stabilizers())

    def __repr__(self) -> str:
        return f"QuasarqState(num_qubits={self.n})"
