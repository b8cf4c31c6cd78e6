"""NumPy tableau mode: the inverse tableau (Stim's convention), one shot.

Rows 0..n-1 hold xrow[k] = T⁻¹X_kT, rows n..2n-1 hold zrow[k] = T⁻¹Z_kT:
``X[r, w]`` / ``Z[r, w]``: bit b is the X / Z part of row r at generator 64w + b; ``S[r]`` its sign.
Every gate and collapse follows docs/engine-semantics.md, so the CUDA engine matches bit for bit.
"""

from __future__ import annotations

import numpy as np

from ...core import opcodes
from ...core.paulis import bit, inclusive_prefix_xor, popcount_rows, product_phase, spread
from ...core.tableau import InverseTableau

_ONE = np.uint64(1)


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
        arity = opcodes.OPCODES[code].arity
        table = opcodes.INVERSE_TABLE[code]
        qs = [q0] if arity == 1 else [q0, q1]
        # Old rows per generator position: X_j is row q_j, Z_j is row n + q_j.
        old = []
        for q in qs:
            for row in (q, q + self.n):
                old.append((self.X[row], self.Z[row], self.S[row].astype(np.int64)))
        new = []
        for g in range(2 * arity):
            k = len(q0)
            ax = np.zeros((k, self.words), dtype=np.uint64)
            az = np.zeros_like(ax)
            log_i = 2 * int(table[g, 0]) * np.ones(k, dtype=np.int64)
            for j in range(arity):
                xbit, zbit = table[g, 1 + 2 * j], table[g, 2 + 2 * j]
                if xbit and zbit:
                    log_i += 1  # Y = i·X·Z
                for use, (rx, rz, rs) in ((xbit, old[2 * j]), (zbit, old[2 * j + 1])):
                    if use:
                        log_i += product_phase(ax, az, rx, rz) + 2 * rs
                        ax ^= rx
                        az ^= rz
            new.append((ax, az, ((log_i & 3) >> 1).astype(np.uint8)))
        for (ax, az, s), (q, is_z) in zip(new, [(q, z) for q in qs for z in (0, 1)]):
            row = q + self.n * is_z
            self.X[row], self.Z[row], self.S[row] = ax, az, s

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

    def snapshot(self) -> InverseTableau:
        n = self.n
        return InverseTableau(n, self.X[:n].copy(), self.Z[:n].copy(), self.X[n:].copy(),
                              self.Z[n:].copy(), self.S[:n].copy(), self.S[n:].copy())

