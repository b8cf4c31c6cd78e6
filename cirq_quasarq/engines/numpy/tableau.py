"""NumPy tableau mode: the inverse tableau (Stim's convention), one shot.

Rows 0..n-1 hold xrow[k] = T⁻¹X_kT, rows n..2n-1 hold zrow[k] = T⁻¹Z_kT:
``X[r, w]`` / ``Z[r, w]``: bit b is the X / Z part of row r at generator 64w + b; ``S[r]`` its sign.
Every gate and collapse follows docs/engine-semantics.md, so the CUDA engine matches bit for bit.
"""

from __future__ import annotations

import dataclasses
from typing import Tuple

import numpy as np

from ... import opcodes, rng
from ..base import InverseTableau
from .paulis import ONES, bit, inclusive_prefix_xor, popcount_rows, product_phase, spread

_ONE = np.uint64(1)


class TableauState:
    def __init__(self, n: int):
        ident = InverseTableau.identity(n)
        self.n = n
        self.words = ident.xx.shape[1]
        self.X = np.concatenate([ident.xx, ident.zx])
        self.Z = np.concatenate([ident.xz, ident.zz])
        self.S = np.zeros(2 * n, dtype=np.uint8)

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
        row = self.n + q
        pivot = find_pivot(self.X[row])
        if pivot is None:
            return int(self.S[row])
        p, victims = pivot
        collapse_rows(self.X, self.Z, self.S, row, p, victims, coin)
        return coin

    def force_zero(self, q: int) -> None:
        """After a collapse of q: reset it to |0> (both of its rows' signs to +)."""
        self.S[q] = 0
        self.S[self.n + q] = 0

    def snapshot(self) -> InverseTableau:
        n = self.n
        return InverseTableau(n, self.X[:n].copy(), self.Z[:n].copy(), self.X[n:].copy(),
                              self.Z[n:].copy(), self.S[:n].copy(), self.S[n:].copy())


def find_pivot(zx_row: np.ndarray):
    """(p, victim mask) of a zrow's X part: p its lowest set bit, the victims the others; None
    when the part is zero (the measurement is deterministic)."""
    nonzero = np.flatnonzero(zx_row)
    if len(nonzero) == 0:
        return None
    w0 = int(nonzero[0])
    word = int(zx_row[w0])
    low = word & -word  # the minimum pivot: lowest set bit
    victims = zx_row.copy()
    victims[w0] ^= np.uint64(low)
    return 64 * w0 + low.bit_length() - 1, victims


def inject_cx(X, Z, S, p: int, victims: np.ndarray) -> None:
    """CX(p, t) for every victim t in increasing order, on every row (eq. CXSign/zc)."""
    cols = np.flatnonzero(victims)
    if len(cols) == 0:
        return
    v = victims[cols]
    xs = X[:, cols]
    zv = Z[:, cols] & v
    xp = bit(X, p)
    zp = bit(Z, p)
    # c_t: parity of zv strictly below t (within the word, then the words before it).
    within = inclusive_prefix_xor(zv) ^ zv
    word_parity = (np.bitwise_count(zv) & np.uint8(1)).astype(np.uint64)
    before = np.cumsum(word_parity, axis=1, dtype=np.uint64) - word_parity
    c = within ^ spread(before & _ONE)
    term = zv & ~(xs ^ spread(zp)[:, None] ^ c)
    flip = xp & (popcount_rows(term).astype(np.uint64) & _ONE)
    S ^= flip.astype(np.uint8)
    X[:, cols] = xs ^ (spread(xp)[:, None] & v)
    total = popcount_rows(zv).astype(np.uint64) & _ONE
    Z[:, p >> 6] ^= total << np.uint64(p & 63)


def swap_at(X, Z, S, p: int, y_type: bool) -> None:
    """Alg. 8's swap on every row: H_YZ (Y-type pivot) or H at generator p."""
    wp, bp = p >> 6, np.uint64(p & 63)
    xp = (X[:, wp] >> bp) & _ONE
    zp = (Z[:, wp] >> bp) & _ONE
    if y_type:
        S ^= (xp & (zp ^ _ONE)).astype(np.uint8)
        xp = xp ^ zp
    else:
        S ^= (xp & zp).astype(np.uint8)
        xp, zp = zp, xp
    X[:, wp] = (X[:, wp] & ~(_ONE << bp)) | (xp << bp)
    Z[:, wp] = (Z[:, wp] & ~(_ONE << bp)) | (zp << bp)


def inject_x(Z, S, p: int) -> None:
    """X at generator p: flips the sign of every row with a Z part there."""
    S ^= ((Z[:, p >> 6] >> np.uint64(p & 63)) & _ONE).astype(np.uint8)


def collapse_rows(X, Z, S, row: int, p: int, victims: np.ndarray, coin: int):
    """The collapse of measured row `row` onto pivot p, applied to all given rows; returns the
    decisions (Y-type pivot?, X injected?) that, with p and the victims, describe it fully."""
    inject_cx(X, Z, S, p, victims)
    y_type = bool((Z[row, p >> 6] >> np.uint64(p & 63)) & _ONE)
    swap_at(X, Z, S, p, y_type)
    flip = int(S[row]) != coin
    if flip:
        inject_x(Z, S, p)
    return y_type, flip


def apply_collapse(X, Z, S, p: int, victims: np.ndarray, y_type: bool, flip: bool) -> None:
    """A collapse whose decisions are known, applied to all given rows."""
    inject_cx(X, Z, S, p, victims)
    swap_at(X, Z, S, p, y_type)
    if flip:
        inject_x(Z, S, p)


@dataclasses.dataclass
class WindowEvent:
    """One step of a measurement window, the same for every row: a collapse (p, victims,
    y_type, flip), or a reset (`q` >= 0, p < 0) forcing the signs of rows q and n + q to +."""

    q: int = -1
    p: int = -1
    victims: np.ndarray = None
    y_type: bool = False
    flip: bool = False


def plan_window(zx, zz, zs, resets: np.ndarray, coins: np.ndarray):
    """Settle a window's collapses on the measured rows alone (zrow[q_i], program order).

    zx / zz / zs: X, Z words and signs of those k rows (modified in place); resets[i]: whether
    instruction i resets; coins[i]: its coin. A collapse updates each row from that row's own
    bits, so the decisions taken here are those the whole tableau would take, and applying the
    returned events in order to every row reproduces the one-by-one semantics exactly.
    Returns (outcomes [k], events); a reset event's q is the instruction's index i."""
    k = len(zs)
    outcomes = np.zeros(k, dtype=np.uint8)
    events = []
    for i in range(k):
        pivot = find_pivot(zx[i])
        if pivot is None:
            outcomes[i] = zs[i]
        else:
            p, victims = pivot
            rows = slice(i, k)  # earlier rows are settled already
            y_type, flip = collapse_rows(zx[rows], zz[rows], zs[rows], 0, p, victims, int(coins[i]))
            events.append(WindowEvent(p=p, victims=victims, y_type=y_type, flip=flip))
            outcomes[i] = coins[i]
        if resets[i]:
            zs[i] = 0
            events.append(WindowEvent(q=i))
    return outcomes, events


def coin(key: Tuple[int, int], slot: int, repetition: int) -> int:
    return int(rng.words(key, rng.Stream.COIN, slot, 0, repetition)) & 1
