"""The final state users see: stabilizers, destabilizers, a cirq.CliffordTableau, a state vector.

Engines return the inverse tableau (Stim's convention, `core.tableau.InverseTableau`); the forward
tableau Cirq uses is derived from it (`InverseTableau.forward`), once, when asked for, and the
Cirq objects are built from packed bits only on demand. The global phase, which the tableau does
not carry, comes from `results/phase.py` when a state vector is asked for."""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import cirq
import numpy as np

from ..core import paulis
from ..core.memory import require_host_memory
from ..core.paulis import product_phase
from ..core.tableau import InverseTableau
from ..engines.base import TableauRun
from ..errors import TooLargeError
from .phase import Amplitudes

MAX_STATE_VECTOR_QUBITS = 20
MAX_KET_QUBITS = 16  # str() shows a ket up to this many qubits, stabilizers beyond (as Cirq's)


def forward_tableau(inv: InverseTableau) -> cirq.CliffordTableau:
    """The forward tableau T (Cirq's convention) of the inverse tableau T⁻¹."""
    xs, zs, rs = inv.forward()
    table = cirq.CliffordTableau(num_qubits=inv.num_qubits)
    table.xs, table.zs, table.rs = xs, zs, rs
    return table


def canonical_vector(xs: np.ndarray, zs: np.ndarray, rs: np.ndarray) -> np.ndarray:
    """The state stabilized by the forward tableau's stabilizer rows (big-endian, Cirq's order),
    normalised so that its first nonzero amplitude is real and positive."""
    n = xs.shape[1]
    vec = np.random.default_rng(1234).normal(size=2**n) + 0j
    index = np.arange(2**n)
    weights = 1 << np.arange(n - 1, -1, -1)  # qubit k <-> bit (n-1-k) of the index
    for s in range(n):
        xm = int(np.dot(xs[n + s], weights))
        zm = int(np.dot(zs[n + s], weights))
        y_count = int(np.sum(xs[n + s] & zs[n + s]))
        # P = (-1)^r i^(#Y) X^x Z^z: (P v)[i ^ xm] = phase * (-1)^{popcount(i & zm)} v[i].
        phase = (-1) ** int(rs[n + s]) * (1j) ** y_count
        parity = np.bitwise_count(index & zm) & 1
        applied = np.empty_like(vec)
        applied[index ^ xm] = phase * np.where(parity, -1, 1) * vec
        vec = (vec + applied) / 2
    vec /= np.linalg.norm(vec)
    first = vec[np.flatnonzero(np.abs(vec) > 1e-9)[0]]
    return vec * (abs(first) / first)


class QuasarqState:
    """The state of a simulation: `stabilizers()`, `destabilizers()`, `tableau` (a
    `cirq.CliffordTableau`), `state_vector()` / `to_numpy()` (≤ 20 qubits, global phase as
    `cirq.CliffordSimulator` has it), `expectation(pauli)` and `qubit_map` as Cirq's states have.

    `phase`, when given, is a callable returning the state's exact amplitudes (`phase.Amplitudes`,
    replayed only when a state vector is asked for); without it the vector is known up to phase and
    is normalised so that its first nonzero amplitude is real and positive. `inverse` may also be a
    callable returning the inverse tableau: it is called when the state is first read (the GPU
    engine's final tableau then stays on the device until then: 5 GB at 100k qubits). `run`, the
    engine's TableauRun the state came from, derives `stabilizers()` / `destabilizers()` (on the
    device for a GPU run)."""

    def __init__(self, inverse: Union[InverseTableau, Callable[[], InverseTableau]], qubits,
                 phase: Optional[Callable[[], Amplitudes]] = None, dtype=np.complex128,
                 run: Optional[TableauRun] = None):
        self._inverse = inverse
        self._run = run  # the engine run the state came from: it derives the forward rows
        self.qubits = tuple(qubits)
        self.qubit_map: Dict[cirq.Qid, int] = {q: i for i, q in enumerate(self.qubits)}
        self.n = len(self.qubits)
        self._phase = phase
        self.dtype = dtype

    @classmethod
    def from_tableau(cls, tableau: cirq.CliffordTableau, qubits: Sequence[cirq.Qid]) -> "QuasarqState":
        """The state of a forward `cirq.CliffordTableau` on `qubits` (its repr round-trips)."""
        return cls(InverseTableau.from_forward(tableau.xs, tableau.zs, tableau.rs), qubits)

    # -- the tableau --------------------------------------------------------------------------------
    @property
    def inverse_tableau(self) -> InverseTableau:
        if not isinstance(self._inverse, InverseTableau):
            self._inverse = self._inverse()
        return self._inverse

    @functools.cached_property
    def _forward(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = self.n
        need = 4 * (2 * n) * n + 16 * 2 * n * max(1, (n + 63) // 64)
        require_host_memory(f"the forward tableau of {n} qubits", need)
        if self._run is None:
            return self.inverse_tableau.forward()
        halves = [self._run.forward_rows(half) for half in ("destabilizers", "stabilizers")]
        letters = np.concatenate([h[0] for h in halves])
        z = letters >> 1
        return (((letters & 1) ^ z).astype(bool), z.astype(bool),
                np.concatenate([h[1] for h in halves]))

    @property
    def tableau(self) -> cirq.CliffordTableau:
        xs, zs, rs = self._forward
        table = cirq.CliffordTableau(num_qubits=self.n)
        table.xs, table.zs, table.rs = xs.copy(), zs.copy(), rs.copy()
        return table

    def _rows(self, half: str) -> List[cirq.DensePauliString]:
        """The destabilizers or the stabilizers as Pauli strings: from the forward tableau where it
        was derived already, else that half alone (half the work), by the engine's run where the
        state came from one (a GPU run derives it on the device)."""
        n = self.n
        if "_forward" in self.__dict__:
            lo = 0 if half == "destabilizers" else n
            xs, zs, rs = (a[lo : lo + n] for a in self._forward)
            letters = paulis.letters_of_bits(xs, zs)
        else:
            require_host_memory(f"{half}() of {n} qubits", 2 * n * n + 8 * n * max(1, (n + 63) // 64))
            if self._run is not None:
                letters, rs = self._run.forward_rows(half)
            else:
                xs, zs, rs = self.inverse_tableau.forward(half)
                letters = paulis.letters_of_bits(xs, zs)
        signs = np.where(rs, -1, 1)
        return [cirq.DensePauliString(letters[i], coefficient=int(signs[i])) for i in range(n)]

    def stabilizers(self) -> List[cirq.DensePauliString]:
        """The stabilizer generators S_p = T Z_p T⁻¹, as `cirq.CliffordTableau.stabilizers()`."""
        require_host_memory(f"stabilizers() of {self.n} qubits", 2 * self.n * self.n + 64 * self.n)
        return self._rows("stabilizers")

    def destabilizers(self) -> List[cirq.DensePauliString]:
        require_host_memory(f"destabilizers() of {self.n} qubits", 2 * self.n * self.n + 64 * self.n)
        return self._rows("destabilizers")

    # -- expectation values -------------------------------------------------------------------------
    def expectation(self, pauli: cirq.PauliString) -> complex:
        """⟨ψ|P|ψ⟩ of a Pauli string: its coefficient times ±1 when ±P stabilizes the state, else 0.
        T⁻¹PT is the product of the inverse tableau's rows of P's letters (O(weight · n/64))."""
        inv = self.inverse_tableau
        words = inv.xx.shape[1]
        acc_x = np.zeros((1, words), dtype=np.uint64)
        acc_z = np.zeros_like(acc_x)
        log_i = 0
        for q, p in pauli.items():
            k = self.qubit_map[q]
            letter = {cirq.X: paulis.X, cirq.Y: paulis.Y, cirq.Z: paulis.Z}[p]
            if letter == paulis.Y:
                log_i += 1  # Y = i·X·Z
            for use, rx, rz, rs in ((letter != paulis.Z, inv.xx[k], inv.xz[k], inv.xs[k]),
                                    (letter != paulis.X, inv.zx[k], inv.zz[k], inv.zs[k])):
                if use:
                    log_i += int(product_phase(acc_x, acc_z, rx[None, :], rz[None, :])[0]) + 2 * int(rs)
                    acc_x ^= rx
                    acc_z ^= rz
        if acc_x.any():
            return 0j
        return complex(pauli.coefficient) * 1j ** (log_i % 4)  # ±Z^z on |0…0> is ±1

    # -- the state vector ------------------------------------------------------------------------------
    def amplitudes(self) -> Optional[Amplitudes]:
        return None if self._phase is None else self._phase()

    def state_vector(self, copy: bool = True) -> np.ndarray:
        """The state vector (big-endian as Cirq: qubit 0 is the most significant bit), its global
        phase exactly as `cirq.CliffordSimulator` gives it."""
        n = self.n
        if n > MAX_STATE_VECTOR_QUBITS:
            raise TooLargeError(
                f"state_vector() of {n} qubits needs {16 * 2**n / 2**30:.3g} GiB; it is limited to "
                f"{MAX_STATE_VECTOR_QUBITS} qubits. Use stabilizers() or the tableau instead.")
        xs, zs, rs = self._forward
        vec = canonical_vector(xs, zs, rs)
        amps = self.amplitudes()
        if amps is not None:
            vec = amps.state_vector(vec)
        return vec.astype(self.dtype)

    def to_numpy(self) -> np.ndarray:
        return self.state_vector()

    def dirac_notation(self, decimals: int = 2) -> str:
        return cirq.dirac_notation(self.state_vector(), decimals=decimals, qid_shape=(2,) * self.n)

    # -- comparisons and printing ---------------------------------------------------------------
    def copy(self) -> "QuasarqState":
        inv = self.inverse_tableau
        copied = InverseTableau(inv.num_qubits, inv.xx.copy(), inv.xz.copy(), inv.zx.copy(), inv.zz.copy(),
                                inv.xs.copy(), inv.zs.copy())
        return QuasarqState(copied, self.qubits, self._phase, self.dtype)

    def __eq__(self, other: Any) -> bool:
        """The same qubits in the same quantum state: the same stabilizer group, and the same global
        phase where both states know theirs."""
        if not isinstance(other, QuasarqState):
            return NotImplemented
        if self.qubits != other.qubits:
            return False
        for p in self.stabilizers():
            if abs(other.expectation(p.on(*self.qubits)) - 1) > 1e-9:
                return False
        if self._phase is not None and other._phase is not None and self.n <= MAX_STATE_VECTOR_QUBITS:
            return bool(np.allclose(self.state_vector(), other.state_vector(), atol=1e-8))
        return True

    __hash__ = None  # mutable value semantics, as cirq's states

    def __str__(self) -> str:
        if self.n <= MAX_KET_QUBITS:
            return self.dirac_notation()
        return "stabilizers: " + ", ".join(str(s) for s in self.stabilizers())

    def __repr__(self) -> str:
        return f"cirq_quasarq.QuasarqState.from_tableau({self.tableau!r}, qubits={self.qubits!r})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text("cirq_quasarq.QuasarqState(...)" if cycle else str(self))

    def __getstate__(self) -> Dict[str, Any]:
        """A pickle carries the tableau and the amplitudes a state vector needs, not the engine's run
        nor the replay that would recompute them."""
        state = dict(self.__dict__)
        state["_inverse"] = self.inverse_tableau
        state["_run"] = None  # a GPU run holds its engine; the host derives the rows of a copy
        if self._phase is not None:
            state["_phase"] = _Known(self._phase()) if self.n <= MAX_STATE_VECTOR_QUBITS else None
        return state

    def _json_dict_(self) -> Dict[str, Any]:
        return {"tableau": self.tableau, "qubits": list(self.qubits)}

    @classmethod
    def _from_json_dict_(cls, tableau, qubits, **kwargs) -> "QuasarqState":
        return cls.from_tableau(tableau, qubits)

    @classmethod
    def _json_namespace_(cls) -> str:
        return "cirq_quasarq"


class _Known:
    """A state's amplitudes once computed (what a pickled state keeps of its phase replay)."""

    def __init__(self, amplitudes: Amplitudes):
        self.amplitudes = amplitudes

    def __call__(self) -> Amplitudes:
        return self.amplitudes
