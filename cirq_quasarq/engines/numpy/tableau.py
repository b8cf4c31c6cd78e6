"""NumPy tableau mode: the inverse tableau (Stim's convention), one shot.

Rows 0..n-1 hold xrow[k] = T⁻¹X_kT, rows n..2n-1 hold zrow[k] = T⁻¹Z_kT:
``X[r, w]`` / ``Z[r, w]``: bit b is the X / Z part of row r at generator 64w + b; ``S[r]`` its sign.
Every gate and collapse follows docs/engine-semantics.md, so the CUDA engine matches bit for bit.
"""

from __future__ import annotations

import functools
from typing import Tuple

import numpy as np

from ...core import native, opcodes
from ...core.paulis import bit, popcount_rows, spread
from ...core.program import OP, A, B
from ...core.tableau import InverseTableau

_ONE = np.uint64(1)
_BLOCK_BYTES = 1 << 18


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


@functools.lru_cache(maxsize=None)
def _gate_plan(code: int):
    """(arity, inputs to gather, [(output g, log_i, input rows)] for the outputs that change): an
    output that is its own old row with log_i = 0 is left alone, one that is its own row with
    log_i = 2 only flips its sign."""
    arity, outputs = _recipe(code)
    changes = [(g, log_i % 4, inputs) for g, (log_i, inputs) in enumerate(outputs)
               if not (inputs == (g,) and log_i % 4 == 0)]
    gathered = sorted({i for g, log_i, inputs in changes if inputs != (g,) for i in inputs})
    return arity, tuple(gathered), tuple(changes)


@functools.lru_cache(maxsize=None)
def _output_tables():
    """`_gate_plan` of every opcode as arrays over (opcode, output g): what output g of a row of
    that opcode is (0: left alone, -1: its sign flipped, s: a product of s old rows), its log_i and
    its input slots (0 = X_q0, 1 = Z_q0, 2 = X_q1, 3 = Z_q1). Non-unitary opcodes leave all alone."""
    what = np.zeros((opcodes.NUM_OPCODES, 4), dtype=np.int8)
    logs = np.zeros((opcodes.NUM_OPCODES, 4), dtype=np.int64)
    inputs = np.zeros((opcodes.NUM_OPCODES, 4, 3), dtype=np.int64)
    for code in range(opcodes.NUM_OPCODES):
        if opcodes.KIND[code] != opcodes.Kind.UNITARY or opcodes.ARITY[code] == 0:
            continue
        for g, log_i, ins in _gate_plan(code)[2]:
            what[code, g] = -1 if ins == (g,) else len(ins)
            logs[code, g] = log_i
            inputs[code, g, : len(ins)] = ins
    return what, logs, inputs


class GateTable:
    """Every unitary row's changed outputs (`_gate_plan`: a sign alone flipped, or a product of one,
    two or three old rows), in the order of the rows they come from, for TableauState.apply_layer:
    the plan of a layer of gate runs is a slice of each part where the runs are consecutive rows
    (`plan`), and their slices joined otherwise (`plan_of`). Made once a program from per-opcode
    tables (`_output_tables`): a few array operations over all rows, which come out in row order
    (a part per opcode, joined and sorted by row, had cost a 2000-qubit first call 9-15 ms)."""

    def __init__(self, n: int, instructions: np.ndarray):
        self.instructions = instructions
        what, logs, inputs = _output_tables()
        ops = instructions[:, OP].astype(np.int64)
        # Entry 4r + g: output g of row r, and the tableau row of slot g of row r (flat, so every
        # index below is a 1-D gather). A row that is no gate has no entry, so its slots (its B
        # may be anything) are never read.
        outputs = what.view(np.int32).reshape(-1)[ops].view(np.int8)
        slot_rows = np.empty((len(ops), 4), dtype=np.int64)
        slot_rows[:, 0] = instructions[:, A]
        slot_rows[:, 2] = instructions[:, B]
        np.add(slot_rows[:, 0::2], n, out=slot_rows[:, 1::2])
        slot_rows = slot_rows.reshape(-1)
        entry = np.flatnonzero(outputs == -1)
        self.flips = (entry >> 2, slot_rows[entry])
        self.groups = []
        for size in (1, 2, 3):
            entry = np.flatnonzero(outputs == size)  # by row, then by output
            if len(entry):
                cell = 4 * ops[entry >> 2] + (entry & 3)  # (opcode, output) in the tables
                first, ins = entry & ~3, np.empty((size, len(entry)), dtype=np.int64)
                for k in range(size):
                    np.take(slot_rows, first + inputs[..., k].reshape(-1)[cell], out=ins[k])
                self.groups.append((entry >> 2, slot_rows[entry], ins, logs.reshape(-1)[cell]))

    def plan(self, lo: int, hi: int) -> tuple:
        """The plan of the gates of rows [lo, hi) (as `apply_layer` takes it: views)."""
        at, rows = self.flips
        flips = rows[np.searchsorted(at, lo) : np.searchsorted(at, hi)]
        groups = []
        for at, out, ins, logs in self.groups:
            a, b = np.searchsorted(at, lo), np.searchsorted(at, hi)
            if b > a:
                groups.append((out[a:b], ins[:, a:b], logs[a:b]))
        return flips, tuple(groups)

    def plan_of(self, ranges) -> tuple:
        """The plan of the gates of several ranges of rows (a layer across loop iterations)."""
        plans = [self.plan(lo, hi) for lo, hi in ranges]
        flips = np.concatenate([p[0] for p in plans])
        by_arity = {}
        for _, groups in plans:
            for out, ins, logs in groups:
                by_arity.setdefault(len(ins), []).append((out, ins, logs))
        return flips, tuple((np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got], axis=1),
                             np.concatenate([g[2] for g in got])) for _, got in sorted(by_arity.items()))


def _product_log(a: np.ndarray, b: np.ndarray, counts: np.ndarray, out: np.ndarray = None):
    """(a·b, log_i of the phase the product picks up) for [2, G, W] rows (X planes, then Z); the
    product in `out` if given (it may be `a`).

    Per position the phase is ±i where the factors anticommute: +i, or -i where
    x_ab ⊕ z_ab ⊕ (x_a ∧ z_b) is set; so log_i = |anti| + 2·|anti ∧ that| (mod 4)."""
    (ax, az), (bx, bz) = a, b
    xz = ax & bz
    anti = np.bitwise_and(bx, az, out=counts[0])
    anti ^= xz
    product = np.bitwise_xor(a, b, out=out)  # a is read for the last time
    that = np.bitwise_xor(product[0], product[1], out=counts[1])
    that ^= xz
    that &= anti
    tallies = popcount_rows(counts)
    return product, tallies[0] + 2 * tallies[1]


class TableauState:
    """X and Z are the two planes of one [2, 2n, W] array, so a gate gathers, multiplies and
    scatters a row's X and Z parts with one operation each, and every operation on a plane (a
    gate's products, a collapse's pass over all rows) runs over contiguous words: on a [2n, 2W]
    array of rows the half-row views made NumPy loop row by row, at twice to three times the cost.

    `riders`: rows 2n, 2n + 1, ... past the tableau's, zero at first (a first call's frames:
    engine._Riders): no gate writes them, and every collapse updates them as it does every row."""

    def __init__(self, n: int, riders: int = 0):
        ident = InverseTableau.identity(n)
        pad = np.zeros((riders, max(1, (n + 63) // 64)), dtype=np.uint64)
        self._store(n, np.concatenate([ident.xx, ident.zx, pad]), np.concatenate([ident.xz, ident.zz, pad]),
                    np.zeros(2 * n + riders, dtype=np.uint8))

    def _store(self, n: int, X: np.ndarray, Z: np.ndarray, S: np.ndarray) -> None:
        self.n, self.words = n, X.shape[1]
        self.T = np.stack([X, Z])
        self.X, self.Z = self.T
        self.S = S

    @classmethod
    def from_inverse(cls, inv: InverseTableau) -> "TableauState":
        """A state holding a copy of `inv` (to continue simulating from it)."""
        state = cls.__new__(cls)
        state._store(inv.num_qubits, np.concatenate([inv.xx, inv.zx]), np.concatenate([inv.xz, inv.zz]),
                     np.concatenate([inv.xs, inv.zs]).astype(np.uint8))
        return state

    # -- gates ---------------------------------------------------------------------------
    def apply_unitary(self, code: int, q0: np.ndarray, q1: np.ndarray) -> None:
        """Apply opcode `code` to each (q0[i], q1[i]) pair (disjoint), vectorised over i."""
        if len(q0) == 1:
            arity, outputs = _recipe(code)
            return self._apply_one(arity, outputs, int(q0[0]), int(q1[0]))
        arity, gathered, changes = _gate_plan(code)
        n, T, S, W = self.n, self.T, self.S, self.words
        rows = (q0, q0 + n) if arity == 1 else (q0, q0 + n, q1, q1 + n)
        old = {i: (np.take(T, rows[i], axis=1), S[rows[i]].astype(np.int64)) for i in gathered}
        counts = np.empty((2, len(q0), W), dtype=np.uint64) if changes else None
        new = []
        for g, log_i, inputs in changes:
            if inputs == (g,):  # its own row, sign flipped
                new.append((g, None, S[rows[g]] ^ np.uint8(1)))
                continue
            acc, log = old[inputs[0]][0], log_i + 2 * old[inputs[0]][1]
            for i in inputs[1:]:
                acc, phase = _product_log(acc, old[i][0], counts)
                log = log + phase + 2 * old[i][1]
            new.append((g, acc, ((log & 3) >> 1).astype(np.uint8)))
        for g, data, sign in new:
            if data is not None:
                self.X[rows[g]], self.Z[rows[g]] = data
            S[rows[g]] = sign

    def apply_layer(self, plan) -> None:
        """Apply a layer of gates on disjoint qubits, any opcodes, as `GateTable` lays it out: the
        outputs that are a product of one, two or three old rows each go as one group, so a layer
        costs a few dozen array operations whatever its opcodes (where a run of one opcode at a
        time costs that many per opcode). Every output is made from the old rows before any is
        written."""
        flips, groups = plan
        T, S, W = self.T, self.S, self.words
        made = []
        lib = native.compiled() if T.flags.c_contiguous and S.flags.c_contiguous else None
        step = max(64, _BLOCK_BYTES // (16 * W))  # outputs a block: its rows and temporaries stay in cache
        for out, inputs, logs in groups:
            if lib is not None:  # the compiled products (cuda_src/host_tableau.cpp): the same rows and signs
                inputs, logs = np.ascontiguousarray(inputs, dtype=np.int64), np.ascontiguousarray(logs, dtype=np.int64)
                result, signs = np.empty((2, len(out), W), dtype=np.uint64), np.empty(len(out), dtype=np.uint8)
                a = native.address
                lib.qq_host_products(a(T), a(T[1]), W, W, a(S), len(out), len(inputs), a(inputs), a(logs), a(result),
                                     a(signs))
                made.append((out, result, signs))
                continue
            log = logs + 2 * S[inputs].astype(np.int64).sum(axis=0)
            if len(inputs) == 1:
                made.append((out, np.take(T, inputs[0], axis=1), ((log & 3) >> 1).astype(np.uint8)))
                continue
            result = np.empty((2, len(out), W), dtype=np.uint64)
            counts = np.empty((2, min(step, len(out)), W), dtype=np.uint64)
            for lo in range(0, len(out), step):
                hi = min(len(out), lo + step)
                acc = np.take(T, inputs[0, lo:hi], axis=1, out=result[:, lo:hi], mode="wrap")  # "raise" copies out
                for rows in inputs[1:]:
                    acc, phase = _product_log(acc, np.take(T, rows[lo:hi], axis=1), counts[:, : hi - lo], out=acc)
                    log[lo:hi] += phase
            made.append((out, result, ((log & 3) >> 1).astype(np.uint8)))
        X, Z = T
        for out, acc, sign in made:
            X[out], Z[out] = acc  # a plane at a time: a fancy index on rows alone is NumPy's fast path
            S[out] = sign
        if len(flips):
            S[flips] ^= np.uint8(1)

    def _apply_one(self, arity: int, outputs, q0: int, q1: int) -> None:
        """`apply_unitary` for a single gate (a run of one, as in a chain of dependent gates):
        rows as Python integers, so a gate costs a few dozen integer operations, not numpy calls."""
        n, S = self.n, self.S
        rows = (q0, q0 + n) if arity == 1 else (q0, q0 + n, q1, q1 + n)
        old = [(*self.row_ints(r), int(S[r])) for r in rows]
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
        for row, (ax, az, s) in zip(rows, new):
            self.set_row_ints(row, ax, az)
            S[row] = s

    def row_ints(self, r: int) -> Tuple[int, int]:
        """Row r's X and Z parts as Python integers (bit j: column j): for work on a few rows,
        where each NumPy call would cost more than the integer operations."""
        return int.from_bytes(self.X[r].tobytes(), "little"), int.from_bytes(self.Z[r].tobytes(), "little")

    def set_row_ints(self, r: int, x: int, z: int) -> None:
        """Row r's X and Z parts from Python integers (`row_ints`)."""
        size = 8 * self.words
        self.X[r] = np.frombuffer(x.to_bytes(size, "little"), dtype=np.uint64)
        self.Z[r] = np.frombuffer(z.to_bytes(size, "little"), dtype=np.uint64)

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
        pivot = _pivot(self.X[n + q])
        if pivot is None:
            return int(self.S[n + q])
        p, victims = pivot
        _cx_fan(self.X, self.Z, self.S, p, victims)
        yz = int(bit(self.Z[n + q : n + q + 1], p)[0])
        _swap(self.X, self.Z, self.S, p, yz)
        if int(self.S[n + q]) != coin:
            _inject(self.Z, self.S, p)
        return coin

    def collapse_window(self, qs, coins, resets, always: bool = False) -> list:
        """Z-measure the distinct qubits `qs` in order (coin `coins[i]` for a random one; `resets[i]`:
        then force q to |0>), with the result of `collapse` / `force_zero` one after the other;
        returns the outcomes. Two passes over the tableau however many collapses are random: the
        decisions (pivot, victims, H or H_YZ, the coin's X) are made on the measured qubits'
        zrows alone (`_plan`), then every row takes all of them at once (`_window_update`) where
        `_window_pays` (or `always`, with two or more random collapses), else one after the other."""
        outcomes, steps = self._plan(qs, coins, resets)
        n = self.n
        random = [step for step in steps if step is not None]
        if not (always and len(random) > 1 or _window_pays(random, self.words)):
            _replay(self.X, self.Z, self.S, np.arange(2 * n), n, qs, steps, resets)
            return outcomes
        special = np.array(sorted({r for q, reset in zip(qs, resets) if reset for r in (int(q), n + int(q))}),
                           dtype=np.int64)
        saved = (self.X[special], self.Z[special], self.S[special])  # fancy indexing: copies
        self._window_update(random)
        if len(special):  # rows whose sign a reset clears mid-window: one collapse after the other
            X, Z, S = saved
            _replay(X, Z, S, special, n, qs, steps, resets)
            self.X[special], self.Z[special], self.S[special] = X, Z, S
        return outcomes

    def _plan(self, qs, coins, resets):
        """(outcomes, per collapse (pivot, victims, H_YZ?, inject?) or None when deterministic),
        decided by running the window on the measured qubits' zrows only: a collapse's decisions
        read nothing but the zrow of its own qubit, and each of its updates is row-local."""
        rows = self.n + np.asarray(qs, dtype=np.int64)
        X, Z, S = self.X[rows], self.Z[rows], self.S[rows]
        outcomes, steps = [], []
        for i in range(len(rows)):
            pivot = _pivot(X[i])
            if pivot is None:
                outcomes.append(int(S[i]))
                steps.append(None)
            else:  # rows before i are decided: only i and the rows after it are updated
                p, victims = pivot
                _cx_fan(X[i:], Z[i:], S[i:], p, victims)
                yz = int(bit(Z[i : i + 1], p)[0])
                _swap(X[i:], Z[i:], S[i:], p, yz)
                inject = int(S[i]) != int(coins[i])
                if inject:
                    _inject(Z[i:], S[i:], p)
                outcomes.append(int(coins[i]))
                steps.append((p, victims, yz, inject))
            if resets[i]:
                S[i] = 0
        return outcomes, steps

    def _window_update(self, steps) -> None:
        """Every row through the window's random collapses `steps` as one low-rank update.

        Split the columns into the pivots P and the rest N. On N, z never changes and x changes
        only by the CX fans: x_N ^= Σ_i α_i v_i, α_i being the row's x at p_i when collapse i
        runs; the bits on P are few and followed exactly. So a row needs, from before the window,
        its bits on P and per collapse a_i = |z ∧ v_i^N| mod 4 and b_i = |x ∧ z ∧ v_i^N| mod 2
        (pass 1); a sequential phase on those bits gives the α_i, the final bits on P and every
        sign term but one: the part of |x∧z∧v_i| that the x_N changes of earlier collapses j < i
        add, which sums over the pairs to Σ_{t∈N} z_t·C(c_t, 2) with c_t = Σ_i α_i v_i[t]. Pass 2
        forms c mod 4 from tables of the 2^8 combinations of eight victim masks (Method of Four
        Russians) and applies x_N ^= bit0(c), s ^= |z ∧ bit1(c)|."""
        window_of(steps, self.words, always=True)(self.X, self.Z, self.S)  # the riders too

    def force_zero(self, q: int) -> None:
        """After a collapse of q: reset it to |0> (both of its rows' signs to +)."""
        self.S[q] = 0
        self.S[self.n + q] = 0

    def copy(self) -> "TableauState":
        other = TableauState.__new__(TableauState)
        other.n, other.words = self.n, self.words
        other.T, other.S = self.T.copy(), self.S.copy()
        other.X, other.Z = other.T
        return other

    def equals(self, other: "TableauState") -> bool:
        """Exact equality, in blocks of rows so that states which differ are told apart early."""
        if not np.array_equal(self.S, other.S):
            return False
        for lo in range(0, len(self.S), 256):
            if not np.array_equal(self.T[:, lo : lo + 256], other.T[:, lo : lo + 256]):
                return False
        return True

    def snapshot(self) -> InverseTableau:
        n = self.n
        return InverseTableau(n, self.X[:n].copy(), self.Z[:n].copy(), self.X[n : 2 * n].copy(),
                              self.Z[n : 2 * n].copy(), self.S[:n].copy(), self.S[n : 2 * n].copy())


# -- A collapse's row operations (docs/engine-semantics.md) on any rows: each update of a collapse
# -- is row-local, so the same code serves the whole tableau, a window's zrows and a few rows.
def _pivot(zx: np.ndarray):
    """(pivot p, victim mask) of a zrow's X part: its lowest set bit, and the others; None if zero."""
    nonzero = np.flatnonzero(zx)
    if len(nonzero) == 0:
        return None
    w0 = int(nonzero[0])
    word = int(zx[w0])
    low = word & -word
    victims = zx.copy()
    victims[w0] ^= np.uint64(low)
    return 64 * w0 + low.bit_length() - 1, victims


def _cx_fan(X: np.ndarray, Z: np.ndarray, S: np.ndarray, p: int, victims: np.ndarray) -> None:
    """CX(p, t) for every victim t in increasing order, on rows X / Z / S (eq. CXSign/zc).

    With m = |z ∧ v| and the running parity c_t of z∧v below t, the sign term
    Σ_t z_t v_t (1 ⊕ x_t ⊕ z_p ⊕ c_t) sums to |x∧z∧v| ⊕ m(1 ⊕ z_p) ⊕ C(m, 2): the c_t part
    counts the pairs of victims with z set, so no prefix scan is needed, only m mod 4."""
    nonzero = np.flatnonzero(victims)
    if len(nonzero) == 0:
        return
    w0 = int(nonzero[0])
    v = victims[w0:]
    lib = native.compiled()
    if lib is not None and _rows_as_c_takes_them(X, Z, S):  # compiled (cuda_src/host_tableau.cpp)
        v = np.ascontiguousarray(v)
        a = native.address
        lib.qq_host_cx_fan(a(X), a(Z), a(S), len(S), X.strides[0] // 8, p, w0, len(v), a(v))
        return
    zv = Z[:, w0:] & v
    m = popcount_rows(zv)
    controls = np.flatnonzero(bit(X, p))  # only rows with x_p set change X or their sign
    if len(controls):
        xs = X[controls, w0:]
        mc, zp = m[controls], ((Z[controls, p >> 6] >> np.uint64(p & 63)) & _ONE).astype(np.int64)  # one word a row
        term = (popcount_rows(zv[controls] & xs) ^ (mc & (1 ^ zp)) ^ (mc >> 1)) & 1
        S[controls] ^= term.astype(np.uint8)
        X[controls, w0:] = np.bitwise_xor(xs, v, out=xs)
    Z[:, p >> 6] ^= (m & 1).astype(np.uint64) << np.uint64(p & 63)


def _rows_as_c_takes_them(X: np.ndarray, Z: np.ndarray, S: np.ndarray) -> bool:
    """Whether rows X / Z / S are laid out as the compiled row operations read them: uint64 rows of
    contiguous words the same distance apart in X and Z, one uint8 sign a row, contiguous."""
    return (X.dtype == Z.dtype == np.uint64 and S.dtype == np.uint8 and X.shape == Z.shape and X.ndim == 2
            and X.shape[0] == len(S) and X.strides == Z.strides and X.strides[1] == 8 and X.strides[0] % 8 == 0
            and S.strides[0] == 1)


def _swap(X: np.ndarray, Z: np.ndarray, S: np.ndarray, p: int, yz: int) -> None:
    """H_YZ (a Y-type pivot) or H (X-type) at column p, with their sign rules."""
    wp, bp = p >> 6, np.uint64(p & 63)
    xp = (X[:, wp] >> bp) & _ONE
    zp = (Z[:, wp] >> bp) & _ONE
    if yz:
        S ^= (xp & (zp ^ _ONE)).astype(np.uint8)
        xp = xp ^ zp
    else:
        S ^= (xp & zp).astype(np.uint8)
        xp, zp = zp, xp
    X[:, wp] = (X[:, wp] & ~(_ONE << bp)) | (xp << bp)
    Z[:, wp] = (Z[:, wp] & ~(_ONE << bp)) | (zp << bp)


def _inject(Z: np.ndarray, S: np.ndarray, p: int) -> None:
    """The coin's X at p: flips the sign of every row with a Z part there."""
    S ^= ((Z[:, p >> 6] >> np.uint64(p & 63)) & _ONE).astype(np.uint8)


def _replay(X, Z, S, rows: np.ndarray, n: int, qs, steps, resets) -> None:
    """A window's decisions (`TableauState._plan`) applied one collapse after the other to the
    tableau rows `rows` (sorted, held in X / Z / S), each reset clearing its qubit's rows' signs
    in turn."""
    for q, step, reset in zip(qs, steps, resets):
        if step is not None:
            p, victims, yz, inject = step
            _cx_fan(X, Z, S, p, victims)
            _swap(X, Z, S, p, yz)
            if inject:
                _inject(Z, S, p)
        if reset:
            for r in (int(q), n + int(q)):
                i = int(np.searchsorted(rows, r))
                if i < len(rows) and rows[i] == r:
                    S[i] = 0


def window_of(steps, words: int, always: bool = False):
    """A window's random collapses `steps` (TableauState._plan's) as one callable on any rows
    (X, Z, S views of the same rows): the low-rank update (`_Window`) where `_window_pays` or
    `always`, else one collapse after the other; None when there is none."""
    if not steps:
        return None
    if not (always or _window_pays(steps, words)):
        def one_by_one(X, Z, S):
            for p, victims, yz, inject in steps:
                _cx_fan(X, Z, S, p, victims)
                _swap(X, Z, S, p, yz)
                if inject:
                    _inject(Z, S, p)
        return one_by_one
    pivots = sorted({p for p, *_ in steps})
    on_pivots = np.zeros(words, dtype=np.uint64)
    for p in pivots:
        on_pivots[p >> 6] |= _ONE << np.uint64(p & 63)
    victims_n = [v & ~on_pivots for _, v, _, _ in steps]
    used = np.flatnonzero(np.bitwise_or.reduce(victims_n))  # the passes skip words no victim has
    span = slice(int(used[0]), int(used[-1]) + 1) if len(used) else slice(0, 0)
    victims_n = [v[span] for v in victims_n]
    window = _Window(steps, pivots, victims_n, [_pack_bits(_bits_at(v[None, :], pivots))[0] for _, v, _, _ in steps],
                     [_combinations(victims_n[g : g + 8]) for g in range(0, len(steps), 8)] if len(used) else [])
    block = max(64, (1 << 20) // (16 * words))  # blocks of rows of about 1 MiB: temporaries stay in cache

    def low_rank(X, Z, S):
        for lo in range(0, len(S), block):
            x, z = X[lo : lo + block], Z[lo : lo + block]
            window.apply(x, z, x[:, span], z[:, span], S[lo : lo + block])
    return low_rank


def _bits_at(A: np.ndarray, columns) -> np.ndarray:
    """uint64 0/1 [rows, len(columns)]: each row's bit at each column."""
    cols = np.asarray(columns, dtype=np.int64)
    return (A[:, cols >> 6] >> (cols & 63).astype(np.uint64)) & _ONE


def _pack_bits(bits: np.ndarray) -> np.ndarray:
    """uint64 0/1 [rows, k] -> uint64 [rows, ceil(k / 64)] (bit j in word j // 64)."""
    rows, k = bits.shape
    padded = np.zeros((rows, -(-k // 64) * 64), dtype=np.uint64)
    padded[:, :k] = bits
    return np.bitwise_or.reduce(padded.reshape(rows, -1, 64) << np.arange(64, dtype=np.uint64), axis=2)


def _window_pays(steps, words: int) -> bool:
    """Whether the window update costs less a row than one collapse after the other. A CX fan makes
    about 8 passes over the words from its first victim on (none without victims); the window
    about 6 per collapse (pass 1) plus 6 per table lookup over the words any victim holds, plus
    about 40 operations a row per collapse for its sequential phase, which runs per block of rows.
    Measured on a 2-core CPU (2026-11-23): the window update costs 0.9-1.2x the one-by-one path
    on the paper's circuits (3-7 collapses a window, n = 5k-10k) and 2.5-4x on windows of tens to
    thousands of collapses, so this model rarely picks it; it is the GPU algorithm's reference."""
    k = len(steps)
    if k < 2:
        return False
    firsts = [np.flatnonzero(v) for _, v, _, _ in steps]
    one_by_one = sum(8 * (words - int(f[0])) for f in firsts if len(f))
    held = np.flatnonzero(np.bitwise_or.reduce([v for _, v, _, _ in steps]))
    span = int(held[-1] - held[0] + 1) if len(held) else 0
    return (6 * k + 6 * -(-k // 8)) * span + 40 * k < one_by_one


def _combinations(victims):
    """Tables of the 2^len combinations of up to eight victim masks: bit 0 and bit 1 of how many of
    the chosen masks hold each column (combination index bit j chooses victims[j])."""
    low = np.zeros((1 << len(victims), victims[0].shape[0]), dtype=np.uint64)
    high = np.zeros_like(low)
    for j, v in enumerate(victims):  # the combinations with v_j: those without it, plus v_j
        size = 1 << j
        high[size : 2 * size] = high[:size] ^ (low[:size] & v)
        low[size : 2 * size] = low[:size] ^ v
    return low, high


class _Window:
    """A window's random collapses as TableauState._window_update applies them to a block of rows."""

    def __init__(self, steps, pivots, victims_n, victims_p, tables):
        self.steps, self.pivots, self.tables = steps, pivots, tables
        self.victims_n, self.victims_p = victims_n, victims_p
        self.column = {p: j for j, p in enumerate(pivots)}

    def apply(self, X: np.ndarray, Z: np.ndarray, XN: np.ndarray, ZN: np.ndarray, S: np.ndarray) -> None:
        """Rows X / Z / S (views), XN / ZN their words that victims hold (views of them)."""
        column, pivots = self.column, self.pivots
        xp_all, zp_all = _pack_bits(_bits_at(X, pivots)), _pack_bits(_bits_at(Z, pivots))
        # Pass 1: the counts over N, before anything changes.
        a, b = [], []
        for v in self.victims_n:
            zv = ZN & v
            a.append(popcount_rows(zv) & 3)
            b.append(popcount_rows(zv & XN) & 1)
        # The sequential phase, on the bits at the pivots.
        s = S.astype(np.int64)
        alphas = []
        for i, (p, _, yz, inject) in enumerate(self.steps):
            jw, jb = column[p] >> 6, np.uint64(column[p] & 63)
            xp = ((xp_all[:, jw] >> jb) & _ONE).astype(np.int64)
            zp = ((zp_all[:, jw] >> jb) & _ONE).astype(np.int64)
            vp = self.victims_p[i]
            m = a[i] + popcount_rows(zp_all & vp)
            y = b[i] ^ (popcount_rows(xp_all & zp_all & vp) & 1)
            s ^= xp & (y ^ ((m & 1) & (1 ^ zp)) ^ ((m >> 1) & 1))
            xp_all ^= spread(xp)[:, None] & vp
            bx, bz = xp, zp ^ (m & 1)
            if yz:
                s ^= bx & (1 ^ bz)
                bx = bx ^ bz
            else:
                s ^= bx & bz
                bx, bz = bz, bx
            if inject:
                s ^= bz
            keep = ~(_ONE << jb)
            xp_all[:, jw] = (xp_all[:, jw] & keep) | (bx.astype(np.uint64) << jb)
            zp_all[:, jw] = (zp_all[:, jw] & keep) | (bz.astype(np.uint64) << jb)
            alphas.append(xp)
        # Pass 2: c = Σ_i α_i v_i^N mod 4 as two bit planes, eight collapses per table lookup.
        low = high = None
        for g, (t_low, t_high) in enumerate(self.tables):
            index = sum(alpha << j for j, alpha in enumerate(alphas[8 * g : 8 * g + 8]))
            e_low, e_high = t_low[index], t_high[index]
            if low is None:
                low, high = e_low, e_high
            else:
                high ^= e_high ^ (low & e_low)
                low ^= e_low
        if low is not None:
            XN ^= low
            s ^= popcount_rows(ZN & high) & 1
        for p in pivots:  # the pivot columns as the sequential phase left them
            wp, bp = p >> 6, np.uint64(p & 63)
            jw, jb = column[p] >> 6, np.uint64(column[p] & 63)
            keep = ~(_ONE << bp)
            X[:, wp] = (X[:, wp] & keep) | (((xp_all[:, jw] >> jb) & _ONE) << bp)
            Z[:, wp] = (Z[:, wp] & keep) | (((zp_all[:, jw] >> jb) & _ONE) << bp)
        S[:] = s.astype(np.uint8)
