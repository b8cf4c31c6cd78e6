"""Small Cliffords: recognising them from unitaries and gate families, and naming them as opcodes.

The registry (`registry.py`) calls the family lowerings below; each returns the gate as a sequence
of `(opcode_name, local_targets)` over the gate's own qubits 0..n-1 (unitary opcodes of
`core.opcodes` only, equal to the gate up to global phase), `()` for identity-like gates, `None`
when the gate is out of reach here (the registry then goes on), and raises `NotClifford` for a
unitary that is not Clifford.

Internally a Clifford is a forward tableau: rows 2k / 2k+1 hold the images of X_k / Z_k as a sign
bit and one `core.paulis` letter per qubit; it is synthesised back into named opcodes. Unitaries
are in Cirq's big-endian order (qubit 0 most significant), as `cirq.unitary` returns them.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import cirq
import numpy as np

from ..core import opcodes, paulis
from ..core.paulis import I, X, Y, Z
from ..errors import NonCliffordError

Op = Tuple[str, Tuple[int, ...]]
OpSeq = Tuple[Op, ...]

MATRIX_ATOL = 1e-7  # entries of U·P·U† must match a signed Pauli to this
EXPONENT_ATOL = 1e-8  # looser than MATRIX_ATOL would let a family pass and its unitary fail
MAX_UNITARY_QUBITS = 3  # arbitrary unitary gates are examined up to this size
MAX_MATRIX_GATE_QUBITS = 6  # a MatrixGate's matrix is already at hand, so allow a bit more
MAX_PHASE_QUBITS = 8  # gates up to this size get their exact global phase (their unitary is built)

_UNITARY_OPS = [op for op in opcodes.OPCODES if op.kind == opcodes.Kind.UNITARY]
_CONJUGATION = {op.name: opcodes.CONJUGATION[op.code] for op in _UNITARY_OPS}


class NotClifford(Exception):
    """A gate has a unitary that is not Clifford; `detail` completes "... is not a Clifford gate".
    Equal gates can print differently (cirq.CZ**0.5 == cirq.CZ**-1.5), so the message naming the
    gate is made where the gate is at hand."""

    def __init__(self, detail: str = ""):
        super().__init__(detail)
        self.detail = detail

    def error(self, gate) -> NonCliffordError:
        return NonCliffordError(f"{gate!r} is not a Clifford gate{self.detail}")


# ---------------------------------------------------------------------------------------------
# Forward tableaux


class _Tableau:
    """Images of X_k (row 2k) and Z_k (row 2k+1): a sign bit and a letter per qubit."""

    def __init__(self, signs: np.ndarray, letters: np.ndarray):
        self.signs = signs
        self.letters = letters
        self.n = letters.shape[1]

    @classmethod
    def identity(cls, n: int) -> "_Tableau":
        letters = np.zeros((2 * n, n), dtype=np.uint8)
        for k in range(n):
            letters[2 * k, k], letters[2 * k + 1, k] = X, Z
        return cls(np.zeros(2 * n, dtype=np.uint8), letters)

    @classmethod
    def from_images(cls, images) -> "_Tableau":
        parsed = [paulis.parse(s) for s in images]
        signs = np.array([sign for sign, _ in parsed], dtype=np.uint8)
        letters = np.array([letters for _, letters in parsed], dtype=np.uint8).reshape(len(parsed), -1)
        return cls(signs, letters)

    def copy(self) -> "_Tableau":
        return _Tableau(self.signs.copy(), self.letters.copy())

    def apply(self, name: str, targets) -> None:
        """self <- G∘self: conjugate every row by the opcode G on `targets`."""
        table_signs, table_letters = _CONJUGATION[name]
        index = np.zeros(len(self.signs), dtype=np.int64)
        for j, t in enumerate(targets):
            index |= self.letters[:, t].astype(np.int64) << (2 * j)
        self.signs ^= table_signs[index]
        for j, t in enumerate(targets):
            self.letters[:, t] = table_letters[index, j]

    def permuted(self, order) -> "_Tableau":
        """The same Clifford seen with qubit `order[j]` renamed j."""
        rows = [2 * q + g for q in order for g in (0, 1)]
        return _Tableau(self.signs[rows].copy(), self.letters[rows][:, list(order)].copy())

    def key(self) -> bytes:
        return bytes([self.n]) + self.signs.tobytes() + self.letters.tobytes()

    def is_identity(self) -> bool:
        return self.key() == _Tableau.identity(self.n).key()


_NAMED_BY_KEY = {_Tableau.from_images(op.images).key(): op.name for op in _UNITARY_OPS}

# Inverses of the gates the synthesis below uses.
_INVERSE = {"H": "H", "S_DAG": "S", "SQRT_X": "SQRT_X_DAG", "H_YZ": "H_YZ", "SWAP": "SWAP",
            "CX": "CX", "X": "X", "Y": "Y", "Z": "Z"}


def _synthesize(tableau: _Tableau) -> List[Op]:
    """Ops (time order) equal to the tableau: reduce a copy to the identity by gates on the left,
    qubit by qubit, then return the inverses of those gates in reverse order."""
    work = tableau.copy()
    n = work.n
    applied: List[Op] = []

    def apply(name, targets):
        work.apply(name, targets)
        applied.append((name, targets))

    for k in range(n):
        x_row, z_row = 2 * k, 2 * k + 1
        # Image of X_k -> X letters only (qubits < k are already identity here) ...
        for q in range(k, n):
            letter = work.letters[x_row, q]
            if letter == Z:
                apply("H", (q,))
            elif letter == Y:
                apply("S_DAG", (q,))
        support = [q for q in range(k, n) if work.letters[x_row, q]]
        if k not in support:
            apply("SWAP", (k, support[0]))
        # ... then CX fans the X string in onto qubit k.
        for q in range(k + 1, n):
            if work.letters[x_row, q]:
                apply("CX", (k, q))
        # Image of Z_k anticommutes with X_k, so it has Z or Y on k; these gates all fix X_k.
        if work.letters[z_row, k] == Y:
            apply("SQRT_X", (k,))
        for q in range(k + 1, n):
            letter = work.letters[z_row, q]
            if letter == X:
                apply("H", (q,))
            elif letter == Y:
                apply("H_YZ", (q,))
            if letter:
                apply("CX", (q, k))
    for k in range(n):  # only signs are left: a Pauli per qubit fixes them
        flips = (int(work.signs[2 * k]), int(work.signs[2 * k + 1]))
        pauli = {(1, 1): "Y", (1, 0): "Z", (0, 1): "X"}.get(flips)
        if pauli:
            apply(pauli, (k,))
    assert work.is_identity()
    return [(_INVERSE[name], targets) for name, targets in reversed(applied)]


def merge_single_qubit_runs(ops: List[Op]) -> OpSeq:
    """Fuse each run of single-qubit ops on a qubit into one of the 24 opcodes (or nothing)."""
    pending: Dict[int, _Tableau] = {}
    out: List[Op] = []

    def flush(q):
        tableau = pending.pop(q, None)
        if tableau is not None and not tableau.is_identity():
            out.append((_NAMED_BY_KEY[tableau.key()], (q,)))

    for name, targets in ops:
        if len(targets) == 1:
            pending.setdefault(targets[0], _Tableau.identity(1)).apply(name, (0,))
        else:
            for q in targets:
                flush(q)
            out.append((name, tuple(targets)))
    for q in sorted(pending):
        flush(q)
    return tuple(out)


def _tableau_opcodes(tableau: _Tableau) -> OpSeq:
    """Named opcode(s) for a tableau: a single named opcode whenever one matches."""
    n = tableau.n
    if n in (1, 2):
        if tableau.is_identity():
            return ()
        name = _NAMED_BY_KEY.get(tableau.key())
        if name is not None:
            return ((name, tuple(range(n))),)
        if n == 2:
            name = _NAMED_BY_KEY.get(tableau.permuted((1, 0)).key())
            if name is not None:
                return ((name, (1, 0)),)
    return merge_single_qubit_runs(_synthesize(tableau))


# ---------------------------------------------------------------------------------------------
# Unitaries -> tableaux


def _reverse_qubits(u: np.ndarray, n: int) -> np.ndarray:
    """Reverse the qubit order of a 2^n x 2^n matrix (big-endian <-> little-endian)."""
    if n <= 1:
        return u
    order = list(range(n - 1, -1, -1))
    tensor = u.reshape((2,) * (2 * n)).transpose(order + [n + i for i in order])
    return tensor.reshape(u.shape)


def _tableau_of_unitary(u: np.ndarray, n: int) -> Optional[_Tableau]:
    """The Clifford tableau of a big-endian unitary, or None when it is not Clifford."""
    dim = 2**n
    if u.shape != (dim, dim) or not np.allclose(u @ u.conj().T, np.eye(dim), atol=MATRIX_ATOL):
        return None
    signs = np.zeros(2 * n, dtype=np.uint8)
    letters = np.zeros((2 * n, n), dtype=np.uint8)
    for k in range(n):
        for g, generator in enumerate((X, Z)):
            p = paulis.pauli_matrix([generator if q == k else I for q in range(n)])
            image = paulis.pauli_of_matrix(u @ p @ u.conj().T, n, MATRIX_ATOL)
            if image is None or abs(abs(image[0]) - 1) > MATRIX_ATOL or abs(image[0].imag) > MATRIX_ATOL:
                return None  # not ±(a Pauli string)
            signs[2 * k + g], letters[2 * k + g] = int(image[0].real < 0), image[1]
    return _Tableau(signs, letters)


def single_qubit_opcode(unitary: np.ndarray) -> str:
    """The one of the 24 single-qubit opcodes ("I" included) equal to a 2x2 unitary up to phase."""
    tableau = _tableau_of_unitary(np.asarray(unitary, dtype=complex), 1)
    if tableau is None:
        raise NonCliffordError(f"the single-qubit unitary {np.asarray(unitary)!r} is not Clifford")
    return _NAMED_BY_KEY[tableau.key()]


def clifford_opcodes(unitary: np.ndarray, num_qubits: int, endian: str = "big") -> Optional[OpSeq]:
    """Named opcodes equal to a Clifford unitary up to global phase; None if it is not Clifford.

    `endian="big"` (the default) is Cirq's order (first qubit most significant), as returned by
    `cirq.unitary`; `"little"` is the order of `opcodes.unitary_of`. Targets are local indices."""
    u = np.asarray(unitary, dtype=complex)
    if endian == "little":
        u = _reverse_qubits(u, num_qubits)
    elif endian != "big":
        raise ValueError(f"endian must be 'big' or 'little', not {endian!r}")
    tableau = _tableau_of_unitary(u, num_qubits)
    return None if tableau is None else _tableau_opcodes(tableau)


# ---------------------------------------------------------------------------------------------
# Gate families (the registry's entries for unitary gate types)


def lower_unitary(gate: cirq.Gate, n: int, max_qubits: int = MAX_UNITARY_QUBITS) -> Optional[OpSeq]:
    """Lower through the gate's unitary; raise NotClifford if it has one that is not Clifford."""
    if n > max_qubits or any(d != 2 for d in cirq.qid_shape(gate)):
        return None
    if not cirq.has_unitary(gate):
        return None
    ops = clifford_opcodes(cirq.unitary(gate), n)
    if ops is None:
        raise NotClifford()
    return ops


def exponent_family(step: float) -> Callable[[cirq.Gate, int], Optional[OpSeq]]:
    """An EigenGate family that is Clifford exactly at multiples of `step` (global shift aside)."""

    def lower(gate, n):
        exponent = float(gate.exponent)
        turns = exponent / step
        if abs(turns - round(turns)) > EXPONENT_ATOL:
            raise NotClifford(f": its exponent is not a multiple of {step}")
        return lower_unitary(gate, n)

    return lower


def lower_identity(gate, n) -> OpSeq:
    return ()


def lower_clifford_gate(gate: cirq.CliffordGate, n) -> OpSeq:
    # cirq's tableau: rows 0..n-1 are the images of X_k, rows n..2n-1 those of Z_k.
    table = gate.clifford_tableau
    order = [r for k in range(n) for r in (k, n + k)]
    letters = paulis.letter_of(table.xs[order], table.zs[order]).astype(np.uint8)
    return _tableau_opcodes(_Tableau(table.rs[order].astype(np.uint8), letters))


def lower_dense_pauli_string(gate: cirq.BaseDensePauliString, n) -> Optional[OpSeq]:
    if abs(abs(complex(gate.coefficient)) - 1) > MATRIX_ATOL:
        return None  # not unitary
    return tuple((paulis.LETTERS[int(m)], (q,)) for q, m in enumerate(gate.pauli_mask) if m)


def lower_pauli_string_phasor(gate: cirq.PauliStringPhasorGate, n) -> OpSeq:
    """exp-phasor of a Pauli string P: basis change to Z, CX parity onto one qubit, a Z power."""
    # Cirq normalises the string's coefficient to +1 (folding a -1 into the exponents).
    support = [(q, int(m)) for q, m in enumerate(gate.dense_pauli_string.pauli_mask) if m]
    quarters = 2 * float(gate.exponent_neg - gate.exponent_pos)  # of the -1 eigenspace's phase
    if not support:
        return ()  # the identity string: a global phase
    if abs(quarters - round(quarters)) > EXPONENT_ATOL:
        raise NotClifford(": its angle is not a multiple of a quarter turn")
    middle = ("I", "S", "Z", "S_DAG")[int(round(quarters)) % 4]
    if middle == "I":
        return ()
    basis = {X: "H", Y: "H_YZ"}  # both self-inverse, taking X resp. Y to Z
    before: List[Op] = [(basis[m], (q,)) for q, m in support if m in basis]
    last = support[-1][0]
    before += [("CX", (q, last)) for q, _ in support[:-1]]
    return merge_single_qubit_runs(before + [(middle, (last,))] + before[::-1])


def lower_qubit_permutation(gate: cirq.QubitPermutationGate, n) -> OpSeq:
    # Qubit i's state moves to qubit permutation[i], so X_i -> X_permutation[i].
    tableau = _Tableau.identity(n)
    for i, j in enumerate(gate.permutation):
        tableau.letters[2 * i : 2 * i + 2] = 0
        tableau.letters[2 * i, j], tableau.letters[2 * i + 1, j] = X, Z
    return _tableau_opcodes(tableau)


def lower_matrix_gate(gate, n) -> Optional[OpSeq]:
    return lower_unitary(gate, n, MAX_MATRIX_GATE_QUBITS)


# ---------------------------------------------------------------------------------------------
# Global phase: the gate's unitary against its opcodes' canonical unitaries


def _apply_local(m: np.ndarray, u: np.ndarray, targets, n: int) -> np.ndarray:
    """u (little-endian over `targets`) applied to every column of m (little-endian over n)."""
    k = len(targets)
    tensor = m.reshape((2,) * n + (-1,))
    axes = [n - 1 - t for t in reversed(targets)]  # little-endian: qubit t is axis n-1-t
    moved = np.moveaxis(tensor, axes, list(range(k)))
    shape = moved.shape
    out = (u @ moved.reshape(2**k, -1)).reshape(shape)
    return np.moveaxis(out, list(range(k)), axes).reshape(m.shape)


def global_phase(gate: cirq.Gate, ops: OpSeq, n: int) -> complex:
    """c with unitary(gate) = c · (product of the opcodes' canonical unitaries): 1 for a gate with
    no unitary (its opcodes define it), NaN when the gate is too large to tell (more than
    MAX_PHASE_QUBITS qubits without a known structure)."""
    if isinstance(gate, cirq.BaseDensePauliString):  # X, Y, Z opcodes are the Pauli matrices
        return complex(gate.coefficient)
    if isinstance(gate, cirq.QubitPermutationGate):  # SWAP opcodes: permutation matrices
        return 1.0 + 0j
    if not cirq.has_unitary(gate):  # described only by its opcodes: their product, by definition
        return 1.0 + 0j
    if n > MAX_PHASE_QUBITS:
        return complex("nan")
    u = _reverse_qubits(np.asarray(cirq.unitary(gate), dtype=complex), n)
    m = np.eye(2**n, dtype=complex)
    for name, targets in ops:
        m = _apply_local(m, opcodes.canonical_unitary(opcodes.CODE[name]), targets, n)
    index = np.unravel_index(np.argmax(np.abs(m)), m.shape)
    c = u[index] / m[index]
    if not np.allclose(u, c * m, atol=MATRIX_ATOL):
        return complex("nan")
    return complex(c)
