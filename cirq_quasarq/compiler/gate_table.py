"""The one table from Cirq gates to engine opcodes.

`lower_gate(gate, n)` returns the gate as a sequence of `(opcode_name, local_targets)` over the
gate's own qubits 0..n-1 (unitary opcodes of `cirq_quasarq.opcodes` only, equal to the gate up to
global phase), `()` for identity-like gates, `None` when the gate is out of reach (the caller then
decomposes it), and raises `NonCliffordError` for a unitary that is not Clifford.

Recognition, after a per-gate cache: a fast table of exact common gates; then the gate's type
(walking its MRO) for known families; finally the unitary of any small gate, turned into a
tableau by conjugating Paulis and synthesised back into named opcodes.

Internally a Clifford is a forward tableau: rows 2k / 2k+1 hold the images of X_k / Z_k as a sign
bit and one Pauli letter per qubit. Unitaries given to this module's internals are little-endian
(qubit 0 least significant); `cirq.unitary` is big-endian and is converted on entry.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import cirq
import numpy as np

from cirq_quasarq import opcodes
from cirq_quasarq.errors import NonCliffordError

Op = Tuple[str, Tuple[int, ...]]
OpSeq = Tuple[Op, ...]

MATRIX_ATOL = 1e-7  # entries of U·P·U† must match a signed Pauli to this
EXPONENT_ATOL = 1e-8  # looser than MATRIX_ATOL would let a family pass and its unitary fail
MAX_UNITARY_QUBITS = 3  # arbitrary unitary gates are examined up to this size
MAX_MATRIX_GATE_QUBITS = 6  # a MatrixGate's matrix is already at hand, so allow a bit more
MAX_CACHE_ENTRIES = 1 << 16  # bounds memory when a circuit has many distinct float gates

# ---------------------------------------------------------------------------------------------
# Pauli letters and the opcodes' conjugation tables

# Letter codes: bit 0 is the X part, bit 1 the Z part; Y = i·X·Z as in Stim.
_I, _X, _Z, _Y = 0, 1, 2, 3
_LETTER_CODE = {"I": _I, "X": _X, "Z": _Z, "Y": _Y}
_LETTER_MATRIX = {
    _I: np.eye(2, dtype=complex),
    _X: np.array([[0, 1], [1, 0]], dtype=complex),
    _Z: np.array([[1, 0], [0, -1]], dtype=complex),
    _Y: np.array([[0, -1j], [1j, 0]], dtype=complex),
}
# Power of i picked up by a product of two letters, e.g. X·Y = iZ.
_PRODUCT_PHASE = np.zeros((4, 4), dtype=np.int64)
for _a, _b in ((_X, _Y), (_Y, _Z), (_Z, _X)):
    _PRODUCT_PHASE[_a, _b], _PRODUCT_PHASE[_b, _a] = 1, 3


def _multiply(p, q):
    """Product of two local Paulis given as (power of i, letters)."""
    phase = p[0] + q[0] + sum(int(_PRODUCT_PHASE[a, b]) for a, b in zip(p[1], q[1]))
    return phase % 4, tuple(a ^ b for a, b in zip(p[1], q[1]))


def _parse_image(image: str):
    return (2 if image[0] == "-" else 0), tuple(_LETTER_CODE[c] for c in image[1:])


def _conjugation_table(op: opcodes.Opcode):
    """For every local Pauli (index = sum letter_j << 2j): the sign bit and letters of G·P·G†."""
    n = op.arity
    images = [_parse_image(s) for s in op.images]
    signs = np.zeros(4**n, dtype=np.uint8)
    letters = np.zeros((4**n, n), dtype=np.uint8)
    for index in range(4**n):
        acc = (0, (_I,) * n)
        for q in range(n):
            letter = (index >> (2 * q)) & 3
            if letter & _X:
                acc = _multiply(acc, images[2 * q])
            if letter & _Z:
                acc = _multiply(acc, images[2 * q + 1])
            if letter == _Y:  # Y = i·X·Z, so its image is i·G(X)·G(Z)
                acc = ((acc[0] + 1) % 4, acc[1])
        assert acc[0] in (0, 2), op.name  # images of Hermitian Paulis are Hermitian
        signs[index] = acc[0] // 2
        letters[index] = acc[1]
    return signs, letters


_UNITARY_OPS = [op for op in opcodes.OPCODES if op.kind == opcodes.Kind.UNITARY]
_CONJUGATION = {op.name: _conjugation_table(op) for op in _UNITARY_OPS}


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
            letters[2 * k, k], letters[2 * k + 1, k] = _X, _Z
        return cls(np.zeros(2 * n, dtype=np.uint8), letters)

    @classmethod
    def from_images(cls, images) -> "_Tableau":
        parsed = [_parse_image(s) for s in images]
        signs = np.array([p[0] // 2 for p in parsed], dtype=np.uint8)
        letters = np.array([p[1] for p in parsed], dtype=np.uint8).reshape(len(parsed), -1)
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
_ONE_QUBIT_NAMES = frozenset(op.name for op in _UNITARY_OPS if op.arity == 1)

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
            if letter == _Z:
                apply("H", (q,))
            elif letter == _Y:
                apply("S_DAG", (q,))
        support = [q for q in range(k, n) if work.letters[x_row, q]]
        if k not in support:
            apply("SWAP", (k, support[0]))
        # ... then CX fans the X string in onto qubit k.
        for q in range(k + 1, n):
            if work.letters[x_row, q]:
                apply("CX", (k, q))
        # Image of Z_k anticommutes with X_k, so it has Z or Y on k; these gates all fix X_k.
        if work.letters[z_row, k] == _Y:
            apply("SQRT_X", (k,))
        for q in range(k + 1, n):
            letter = work.letters[z_row, q]
            if letter == _X:
                apply("H", (q,))
            elif letter == _Y:
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


def _merge_single_qubit_runs(ops: List[Op]) -> OpSeq:
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
    return _merge_single_qubit_runs(_synthesize(tableau))


# ---------------------------------------------------------------------------------------------
# Unitaries -> tableaux


def _pauli_matrix(letters) -> np.ndarray:
    m = np.eye(1, dtype=complex)
    for letter in letters:  # little-endian: later qubits are more significant
        m = np.kron(_LETTER_MATRIX[letter], m)
    return m


def _as_signed_pauli(m: np.ndarray, n: int):
    """(sign bit, letters) if m = ±(Pauli string), else None."""
    x_mask = int(np.argmax(np.abs(m[:, 0])))  # a Pauli maps |0…0> to a multiple of |x>
    phase = m[x_mask, 0]
    if abs(abs(phase) - 1) > MATRIX_ATOL:
        return None
    letters = []
    for q in range(n):  # Z part: the sign Z^z puts on |1 at q>
        z_bit = int((m[x_mask ^ (1 << q), 1 << q] / phase).real < 0)
        letters.append(((x_mask >> q) & 1) | (z_bit << 1))
    value = phase * (-1j) ** sum(1 for letter in letters if letter == _Y)  # X·Z = -i·Y
    if abs(value.imag) > MATRIX_ATOL:
        return None
    sign = int(value.real < 0)
    if not np.allclose(m, (-1) ** sign * _pauli_matrix(letters), atol=MATRIX_ATOL):
        return None
    return sign, letters


def _to_little_endian(u: np.ndarray, n: int) -> np.ndarray:
    """Reverse the qubit order of a 2^n x 2^n matrix (Cirq's big-endian <-> little-endian)."""
    if n <= 1:
        return u
    order = list(range(n - 1, -1, -1))
    tensor = u.reshape((2,) * (2 * n)).transpose(order + [n + i for i in order])
    return tensor.reshape(u.shape)


def _tableau_of_unitary(u: np.ndarray, n: int) -> Optional[_Tableau]:
    """The Clifford tableau of a little-endian unitary, or None when it is not Clifford."""
    dim = 2**n
    if u.shape != (dim, dim) or not np.allclose(u @ u.conj().T, np.eye(dim), atol=MATRIX_ATOL):
        return None
    signs = np.zeros(2 * n, dtype=np.uint8)
    letters = np.zeros((2 * n, n), dtype=np.uint8)
    for k in range(n):
        for g, generator in enumerate((_X, _Z)):
            p = _pauli_matrix([generator if q == k else _I for q in range(n)])
            image = _as_signed_pauli(u @ p @ u.conj().T, n)
            if image is None:
                return None
            signs[2 * k + g], letters[2 * k + g] = image
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
    if endian == "big":
        u = _to_little_endian(u, num_qubits)
    elif endian != "little":
        raise ValueError(f"endian must be 'big' or 'little', not {endian!r}")
    tableau = _tableau_of_unitary(u, num_qubits)
    return None if tableau is None else _tableau_opcodes(tableau)


# ---------------------------------------------------------------------------------------------
# Gate families


class _NotClifford(Exception):
    """A verdict the handlers raise and the cache keeps; lower_gate turns it into the error. Equal gates can print differently
    (cirq.CZ**0.5 == cirq.CZ**-1.5), so the message naming the gate is made per lookup."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail

    def error(self, gate: cirq.Gate) -> NonCliffordError:
        return NonCliffordError(f"{gate!r} is not a Clifford gate{self.detail}")


def _lower_unitary(gate: cirq.Gate, n: int, max_qubits: int = MAX_UNITARY_QUBITS) -> Optional[OpSeq]:
    """Lower through the gate's unitary; raise if it has one that is not Clifford."""
    if n > max_qubits or any(d != 2 for d in cirq.qid_shape(gate)):
        return None
    if not cirq.has_unitary(gate):
        return None
    ops = clifford_opcodes(cirq.unitary(gate), n)
    if ops is None:
        raise _NotClifford("")
    return ops


def _exponent_family(step: float) -> Callable[[cirq.Gate, int], Optional[OpSeq]]:
    """An EigenGate family that is Clifford exactly at multiples of `step` (global shift aside)."""

    def lower(gate, n):
        exponent = float(gate.exponent)
        turns = exponent / step
        if abs(turns - round(turns)) > EXPONENT_ATOL:
            raise _NotClifford(f": its exponent is not a multiple of {step}")
        return _lower_unitary(gate, n)

    return lower


def _lower_identity(gate, n) -> OpSeq:
    return ()


def _lower_clifford_gate(gate: cirq.CliffordGate, n) -> OpSeq:
    # cirq's tableau: rows 0..n-1 are the images of X_k, rows n..2n-1 those of Z_k.
    table = gate.clifford_tableau
    order = [r for k in range(n) for r in (k, n + k)]
    letters = (table.xs[order].astype(np.uint8) | (table.zs[order].astype(np.uint8) << 1))
    return _tableau_opcodes(_Tableau(table.rs[order].astype(np.uint8), letters))


_PAULI_MASK_NAMES = {1: "X", 2: "Y", 3: "Z"}  # cirq's DensePauliString.pauli_mask codes


def _lower_dense_pauli_string(gate: cirq.BaseDensePauliString, n) -> Optional[OpSeq]:
    if abs(abs(complex(gate.coefficient)) - 1) > MATRIX_ATOL:
        return None  # not unitary
    return tuple((_PAULI_MASK_NAMES[int(m)], (q,)) for q, m in enumerate(gate.pauli_mask) if m)


def _lower_pauli_string_phasor(gate: cirq.PauliStringPhasorGate, n) -> OpSeq:
    """exp-phasor of a Pauli string P: basis change to Z, CX parity onto one qubit, a Z power."""
    # Cirq normalises the string's coefficient to +1 (folding a -1 into the exponents).
    support = [(q, int(m)) for q, m in enumerate(gate.dense_pauli_string.pauli_mask) if m]
    quarters = 2 * float(gate.exponent_neg - gate.exponent_pos)  # of the -1 eigenspace's phase
    if not support:
        return ()  # the identity string: a global phase
    if abs(quarters - round(quarters)) > EXPONENT_ATOL:
        raise _NotClifford(": its angle is not a multiple of a quarter turn")
    middle = ("I", "S", "Z", "S_DAG")[int(round(quarters)) % 4]
    if middle == "I":
        return ()
    basis = {1: "H", 2: "H_YZ"}  # both self-inverse, taking X resp. Y to Z
    before: List[Op] = [(basis[m], (q,)) for q, m in support if m in basis]
    last = support[-1][0]
    before += [("CX", (q, last)) for q, _ in support[:-1]]
    return _merge_single_qubit_runs(before + [(middle, (last,))] + before[::-1])


def _lower_qubit_permutation(gate: cirq.QubitPermutationGate, n) -> OpSeq:
    # Qubit i's state moves to qubit permutation[i], so X_i -> X_permutation[i].
    tableau = _Tableau.identity(n)
    for i, j in enumerate(gate.permutation):
        tableau.letters[2 * i : 2 * i + 2] = 0
        tableau.letters[2 * i, j], tableau.letters[2 * i + 1, j] = _X, _Z
    return _tableau_opcodes(tableau)


def _lower_matrix_gate(gate, n) -> Optional[OpSeq]:
    return _lower_unitary(gate, n, MAX_MATRIX_GATE_QUBITS)


# Families by type; a gate's type is matched through its MRO (so cirq.Rx finds XPowGate).
_FAMILIES: Dict[type, Callable[[cirq.Gate, int], Optional[OpSeq]]] = {
    cirq.IdentityGate: _lower_identity,
    cirq.GlobalPhaseGate: _lower_identity,
    cirq.WaitGate: _lower_identity,
    cirq.XPowGate: _exponent_family(0.5),
    cirq.YPowGate: _exponent_family(0.5),
    cirq.ZPowGate: _exponent_family(0.5),
    cirq.HPowGate: _exponent_family(1),
    cirq.CXPowGate: _exponent_family(1),
    cirq.CZPowGate: _exponent_family(1),
    cirq.SwapPowGate: _exponent_family(1),
    cirq.ISwapPowGate: _exponent_family(1),
    cirq.XXPowGate: _exponent_family(0.5),
    cirq.YYPowGate: _exponent_family(0.5),
    cirq.ZZPowGate: _exponent_family(0.5),
    cirq.CCZPowGate: _exponent_family(2),  # only the identity powers are Clifford
    cirq.CCXPowGate: _exponent_family(2),
    cirq.CSwapGate: _lower_unitary,  # raises: never Clifford
    # Families whose Clifford points depend on several angles: the unitary decides.
    cirq.PhasedXPowGate: _lower_unitary,
    cirq.PhasedXZGate: _lower_unitary,
    cirq.FSimGate: _lower_unitary,
    cirq.PhasedFSimGate: _lower_unitary,
    cirq.PhasedISwapPowGate: _lower_unitary,
    cirq.ControlledGate: _lower_unitary,
    cirq.MatrixGate: _lower_matrix_gate,
    cirq.CliffordGate: _lower_clifford_gate,  # SingleQubitCliffordGate included
    cirq.BaseDensePauliString: _lower_dense_pauli_string,
    cirq.PauliStringPhasorGate: _lower_pauli_string_phasor,
    cirq.QubitPermutationGate: _lower_qubit_permutation,
}

try:  # stimcirq's extra gates, when it is installed
    import stimcirq

    _FAMILIES[stimcirq.CXSwapGate] = lambda gate, n: (
        (("SWAPCX" if gate.inverted else "CXSWAP", (0, 1)),))
    _FAMILIES[stimcirq.CZSwapGate] = lambda gate, n: (("CZSWAP", (0, 1)),)
    _FAMILIES[stimcirq.IIGate] = _lower_identity
except ImportError:  # pragma: no cover
    pass


def _fast_table() -> Dict[cirq.Gate, OpSeq]:
    one = {cirq.I: (), cirq.X: "X", cirq.Y: "Y", cirq.Z: "Z", cirq.H: "H", cirq.S: "S",
           cirq.S**-1: "S_DAG", cirq.X**0.5: "SQRT_X", cirq.X**-0.5: "SQRT_X_DAG",
           cirq.Y**0.5: "SQRT_Y", cirq.Y**-0.5: "SQRT_Y_DAG"}
    two = {cirq.CNOT: "CX", cirq.CZ: "CZ", cirq.SWAP: "SWAP", cirq.ISWAP: "ISWAP",
           cirq.ISWAP**-1: "ISWAP_DAG", cirq.XX**0.5: "SQRT_XX", cirq.XX**-0.5: "SQRT_XX_DAG",
           cirq.YY**0.5: "SQRT_YY", cirq.YY**-0.5: "SQRT_YY_DAG", cirq.ZZ**0.5: "SQRT_ZZ",
           cirq.ZZ**-0.5: "SQRT_ZZ_DAG"}
    table: Dict[cirq.Gate, OpSeq] = {g: (((name, (0,)),) if name else ()) for g, name in one.items()}
    table.update({g: ((name, (0, 1)),) for g, name in two.items()})
    return table


FAST_TABLE: Dict[cirq.Gate, OpSeq] = _fast_table()


_CACHE: Dict[cirq.Gate, object] = dict(FAST_TABLE)


def _lower_uncached(gate: cirq.Gate, num_qubits: int) -> Optional[OpSeq]:
    for cls in type(gate).__mro__:
        handler = _FAMILIES.get(cls)
        if handler is not None:
            return handler(gate, num_qubits)
    return _lower_unitary(gate, num_qubits)


def lower_gate(gate: cirq.Gate, num_qubits: int) -> Optional[OpSeq]:
    """The gate as `((opcode_name, local_targets), ...)`; () if identity; None if unreachable.

    Raises NonCliffordError for a unitary gate that is not Clifford. Results are cached by gate
    value, so repeated lookups of a gate cost one dict access."""
    try:
        hit = _CACHE.get(gate, _CACHE)
    except TypeError:  # unhashable gate: no caching
        try:
            return _lower_uncached(gate, num_qubits)
        except _NotClifford as verdict:
            raise verdict.error(gate) from None
    if hit is _CACHE:
        try:
            hit = _lower_uncached(gate, num_qubits)
        except _NotClifford as verdict:
            hit = verdict
        if len(_CACHE) >= MAX_CACHE_ENTRIES:
            _CACHE.clear()
            _CACHE.update(FAST_TABLE)
        _CACHE[gate] = hit
    if type(hit) is _NotClifford:
        raise hit.error(gate)
    return hit
