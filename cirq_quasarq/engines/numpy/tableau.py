"""NumPy tableau mode: the inverse tableau (Stim's convention), one shot.

Rows 0..n-1 hold xrow[k] = T⁻¹X_kT, rows n..2n-1 hold zrow[k] = T⁻¹Z_kT:
``X[r, w]`` / ``Z[r, w]``: bit b is the X / Z part of row r at generator 64w + b; ``S[r]`` its sign.
Every gate and collapse follows docs/engine-semantics.md, so the CUDA engine matches bit for bit.
"""

from __future__ import annotations

import functools

import numpy as np

from ...core import opcodes
from ...core.paulis import bit, inclusive_prefix_xor, popcount_rows, spread
from ...core.tableau import InverseTableau

_ONE = np.uint64(1)


@functools.lru_cache(maxsize=None)
def _recipe(code: int):
    """(arity, [(log_i, input rows) per output row]) of an opcode from `INVERSE_TABLE`: output g is
    i^log_i times the product of the old rows `inputs` (0 = X_q0, 1 = Z_q0, 2 = X_q1, 3 = Z_q1),
    multiplied in this order."""
    arity = opcodes.ARITY[code]
    table = opcodes.INVERSE_TABLE[code]
    outputs = []
    for g in range(2 * arity):
        log_i, inputs = 2 * int(table[g, 0]), []
        for j in range(arity):
            xbit, zbit = table[g, 1 + 2 * j], table[g, 2 + 2 * j]
            if xbit and zbit:
                log_i += 1  # Y = i·X·Z
            if xbit:
                inputs.append(2 * j)
            if zbit:
                inputs.append(2 * j + 1)
        outputs.append((log_i, tuple(inputs)))
    return arity, tuple(outputs)


class TableauState:
    def __init__(self, n: int):
        ident = InverseTableau.identity(n)
        self.n = n
        self.words = ident.xx.shape[1]
        self.X = np.concatenate([ident.xx, ident.zx])
        self.Z = np.concatenate([ident.xz, ident.zz])
        self.S = np.zeros(2 * n, dtype=np.uint8)

    @classmethod
    def from_inverse(cls, inv: InverseTableau) -> "TableauState":
        """A state holding a copy of `inv` (to continue simulating from it)."""
        state = cls.__new__(cls)
        state.n, state.words = inv.num_qubits, inv.xx.shape[1]
        state.X = np.concatenate([inv.xx, inv.zx])
        state.Z = np.concatenate([inv.xz, inv.zz])
        state.S = np.concatenate([inv.xs, inv.zs]).astype(np.uint8)
        return state

    # -- gates ---------------------------------------------------------------------------
    def apply_unitary(self, code: int, q0: np.ndarray, q1: np.ndarray) -> None:
        """Apply opcode `code` to each (q0[i], q1[i]) pair (disjoint), vectorised over i."""
        arity, outputs = _recipe(code)
        n, X, Z, S = self.n, self.X, self.Z, self.S
        if len(q0) == 1:
            return self._apply_one(arity, outputs, int(q0[0]), int(q1[0]))
        rows = (q0, q0 + n) if arity == 1 else (q0, q0 + n, q1, q1 + n)
        old = [(X[r], Z[r], S[r].astype(np.int64)) for r in rows]
        new = []
        for log_i, inputs in outputs:
            ax, az, s = old[inputs[0]]
            log_i = log_i + 2 * s
            for i in inputs[1:]:
                bx, bz, bs = old[i]
                cx, cz = ax ^ bx, az ^ bz
                # With P = i^(x.z) X^x Z^z per position: P1 P2 = i^(x1.z1 + x2.z2 - x3.z3 + 2 z1.x2) P3.
                log_i = (log_i + 2 * bs + popcount_rows(ax & az) + popcount_rows(bx & bz)
                         - popcount_rows(cx & cz) + 2 * popcount_rows(az & bx))
                ax, az = cx, cz
            new.append((ax, az, ((log_i & 3) >> 1).astype(np.uint8)))
        for row, (ax, az, s) in zip(rows, new):
            X[row], Z[row], S[row] = ax, az, s

    def _apply_one(self, arity: int, outputs, q0: int, q1: int) -> None:
        """`apply_unitary` for a single gate (a run of one, as in a chain of dependent gates):
        rows as Python integers, so a gate costs a few dozen integer operations, not numpy calls."""
        n, X, Z, S = self.n, self.X, self.Z, self.S
        rows = (q0, q0 + n) if arity == 1 else (q0, q0 + n, q1, q1 + n)
        old = [(int.from_bytes(X[r].tobytes(), "little"), int.from_bytes(Z[r].tobytes(), "little"), int(S[r]))
               for r in rows]
        new = []
        for log_i, inputs in outputs:
            ax, az, s = old[inputs[0]]
            log_i += 2 * s
            for i in inputs[1:]:
                bx, bz, bs = old[i]
                cx, cz = ax ^ bx, az ^ bz
                log_i += (2 * bs + (ax & az).bit_count() + (bx & bz).bit_count() - (cx & cz).bit_count()
                          + 2 * (az & bx).bit_count())
                ax, az = cx, cz
            new.append((ax, az, (log_i & 3) >> 1))
        size = 8 * self.words
        for row, (ax, az, s) in zip(rows, new):
            X[row] = np.frombuffer(ax.to_bytes(size, "little"), dtype=np.uint64)
            Z[row] = np.frombuffer(az.to_bytes(size, "little"), dtype=np.uint64)
            S[row] = s

    def apply_pauli(self, q: int, pauli: int) -> None:
        """Apply Pauli 1=X, 2=Y, 3=Z to the state: X flips zrow's sign, Z flips xrow's."""
        if pauli in (1, 2):
            self.S[self.n + q] ^= 1
        if pauli in (2, 3):
            self.S[q] ^= 1

    # -- measurement -----------------------------------------------------------------------
    def is_deterministic(self, qs: np.ndarray) -> np.ndarray:
        return ~np.any(self.X[self.n + qs] != 0, axis=1)

    def collapse(self, q: int, coin: int) -> int:
        """Z-measure qubit q (docs/engine-semantics.md, steps 1-4); returns the outcome."""
        n = self.n
        zx_q = self.X[n + q]
        nonzero = np.flatnonzero(zx_q)
        if len(nonzero) == 0:
            return int(self.S[n + q])
        w0 = int(nonzero[0])
        word = int(zx_q[w0])
        low = word & -word  # the minimum pivot: lowest set bit
        p = 64 * w0 + low.bit_length() - 1
        victims = zx_q.copy()
        victims[w0] ^= np.uint64(low)
        self._inject_cx(p, victims)
        wp, bp = p >> 6, np.uint64(p & 63)
        xp = (self.X[:, wp] >> bp) & _ONE
        zp = (self.Z[:, wp] >> bp) & _ONE
        if zp[n + q]:  # Y-type pivot: H_YZ at p
            self.S ^= (xp & (zp ^ _ONE)).astype(np.uint8)
            xp = xp ^ zp
        else:  # X-type pivot: H at p
            self.S ^= (xp & zp).astype(np.uint8)
            xp, zp = zp, xp
        self.X[:, wp] = (self.X[:, wp] & ~(_ONE << bp)) | (xp << bp)
        self.Z[:, wp] = (self.Z[:, wp] & ~(_ONE << bp)) | (zp << bp)
        if int(self.S[n + q]) != coin:  # X at p flips every row with a Z part there
            self.S ^= zp.astype(np.uint8)
        return coin

    def _inject_cx(self, p: int, victims: np.ndarray) -> None:
        """CX(p, t) for every victim t in increasing order, on every row (eq. CXSign/zc)."""
        cols = np.flatnonzero(victims)
        if len(cols) == 0:
            return
        v = victims[cols]
        xs = self.X[:, cols]
        zv = self.Z[:, cols] & v
        xp = bit(self.X, p)
        zp = bit(self.Z, p)
        # c_t: parity of zv strictly below t (within the word, then the words before it).
        within = inclusive_prefix_xor(zv) ^ zv
        word_parity = (np.bitwise_count(zv) & np.uint8(1)).astype(np.uint64)
        before = np.cumsum(word_parity, axis=1, dtype=np.uint64) - word_parity
        c = within ^ spread(before & _ONE)
        term = zv & ~(xs ^ spread(zp)[:, None] ^ c)
        flip = xp & (popcount_rows(term).astype(np.uint64) & _ONE)
        self.S ^= flip.astype(np.uint8)
        self.X[:, cols] = xs ^ (spread(xp)[:, None] & v)
        total = popcount_rows(zv).astype(np.uint64) & _ONE
        self.Z[:, p >> 6] ^= total << np.uint64(p & 63)

    def force_zero(self, q: int) -> None:
        """After a collapse of q: reset it to |0> (both of its rows' signs to +)."""
        self.S[q] = 0
        self.S[self.n + q] = 0

    def copy(self) -> "TableauState":
        other = TableauState.__new__(TableauState)
        other.n, other.words = self.n, self.words
        other.X, other.Z, other.S = self.X.copy(), self.Z.copy(), self.S.copy()
        return other

    def equals(self, other: "TableauState") -> bool:
        """Exact equality, in blocks of rows so that states which differ are told apart early."""
        if not np.array_equal(self.S, other.S):
            return False
        for lo in range(0, 2 * self.n, 256):
            if not (np.array_equal(self.X[lo : lo + 256], other.X[lo : lo + 256])
                    and np.array_equal(self.Z[lo : lo + 256], other.Z[lo : lo + 256])):
                return False
        return True

    def snapshot(self) -> InverseTableau:
        n = self.n
        return InverseTableau(n, self.X[:n].copy(), self.Z[:n].copy(), self.X[n:].copy(),
                              self.Z[n:].copy(), self.S[:n].copy(), self.S[n:].copy())

