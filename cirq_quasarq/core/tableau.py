"""The inverse tableau every engine returns (Stim's convention) and its forward form (Cirq's).

An engine's state T is kept as T⁻¹: rows xrow[k] = T⁻¹X_kT and zrow[k] = T⁻¹Z_kT, each a signed
Pauli string over the generators. The forward tableau Cirq prints (rows = the destabilizers
D_p = T X_p T⁻¹, then the stabilizers S_p = T Z_p T⁻¹, each a signed Pauli string over the
qubits) is a relabelling of the same bits plus signs that `forward()` derives.
"""

from __future__ import annotations

import dataclasses
from typing import Tuple

import numpy as np

from .packed import column_bytes
from .paulis import product_phase


@dataclasses.dataclass
class InverseTableau:
    """Stim-convention inverse tableau. Rows k: xrow = T⁻¹X_kT, zrow = T⁻¹Z_kT.

    ``xx[k, w]`` / ``xz[k, w]``: bit b is the X / Z part of xrow[k] at generator 64w+b;
    ``zx``, ``zz`` likewise for zrow[k]; ``xs[k]``, ``zs[k]``: their signs (1 = minus)."""

    num_qubits: int
    xx: np.ndarray
    xz: np.ndarray
    zx: np.ndarray
    zz: np.ndarray
    xs: np.ndarray  # uint8 [n]
    zs: np.ndarray  # uint8 [n]

    @classmethod
    def identity(cls, n: int) -> "InverseTableau":
        words = max(1, (n + 63) // 64)
        eye = np.zeros((n, words), dtype=np.uint64)
        k = np.arange(n)
        eye[k, k // 64] = np.uint64(1) << (k % 64).astype(np.uint64)
        zero = np.zeros((n, words), dtype=np.uint64)
        return cls(n, eye.copy(), zero.copy(), zero.copy(), eye.copy(),
                   np.zeros(n, dtype=np.uint8), np.zeros(n, dtype=np.uint8))

    @classmethod
    def from_forward(cls, xs: np.ndarray, zs: np.ndarray, rs: np.ndarray) -> "InverseTableau":
        """The inverse tableau of a forward one (Cirq's layout: bool xs, zs [2n, n], rs [2n]). The
        rows of F are the inverse tableau of F⁻¹, so F⁻¹'s forward form is F's inverse tableau."""
        n = xs.shape[1]

        def pack(bits):
            words = max(1, (n + 63) // 64)
            out = np.zeros((bits.shape[0], words * 64), dtype=np.uint8)
            out[:, :n] = bits
            return np.packbits(out, axis=1, bitorder="little").view(np.uint64)

        xs, zs = np.asarray(xs, dtype=bool), np.asarray(zs, dtype=bool)
        signs = np.asarray(rs, dtype=np.uint8)
        of_inverse = cls(n, pack(xs[:n]), pack(zs[:n]), pack(xs[n:]), pack(zs[n:]), signs[:n].copy(), signs[n:].copy())
        fx, fz, fr = of_inverse.forward()
        fr = fr.astype(np.uint8)
        return cls(n, pack(fx[:n]), pack(fz[:n]), pack(fx[n:]), pack(fz[n:]), fr[:n], fr[n:])

    def padded(self, num_qubits: int) -> "InverseTableau":
        """This state with qubits up to `num_qubits` added in |0> (identity rows)."""
        n, words = self.num_qubits, self.xx.shape[1]
        big = InverseTableau.identity(num_qubits)
        for mine, theirs in zip(self.restricted(n).rows(), big.rows()):
            theirs[:n] = 0
            theirs[:n, :words] = mine
        big.xs[:n], big.zs[:n] = self.xs, self.zs
        return big

    def restricted(self, n: int) -> "InverseTableau":
        """The first n qubits of a state whose others are in |0> and never enter the first n's rows
        (a compiler's scratch qubits): `padded` undone."""
        words = max(1, (n + 63) // 64)
        cut = [a[:n, :words].copy() for a in self.rows()]
        if n % 64:
            for a in cut:
                a[:, -1] &= np.uint64((1 << (n % 64)) - 1)
        return InverseTableau(n, *cut, self.xs[:n].copy(), self.zs[:n].copy())

    def rows(self) -> Tuple[np.ndarray, ...]:
        """The packed (xx, xz, zx, zz)."""
        return self.xx, self.xz, self.zx, self.zz

    def bits(self) -> Tuple[np.ndarray, ...]:
        """Unpacked bool matrices (xx, xz, zx, zz) of shape [n, n] (row k, generator p)."""
        n = self.num_qubits

        def unpack(a):
            return np.unpackbits(a.view(np.uint8), axis=1, bitorder="little")[:, :n].astype(bool)

        return tuple(unpack(a) for a in (self.xx, self.xz, self.zx, self.zz))

    def equals(self, other: "InverseTableau") -> bool:
        """Exact equality of the bits and signs, compared as packed words a block of rows at a time
        (unpacking a 100k-qubit tableau would take 40 GB); bits past n in the last word are ignored."""
        n = self.num_qubits
        if n != other.num_qubits or not (np.array_equal(self.xs, other.xs) and np.array_equal(self.zs, other.zs)):
            return False
        words = max(1, (n + 63) // 64)
        tail = np.uint64((1 << (n - 64 * (words - 1))) - 1) if n % 64 else np.uint64(0xFFFFFFFFFFFFFFFF)
        for a, b in zip((self.xx, self.xz, self.zx, self.zz), (other.xx, other.xz, other.zx, other.zz)):
            if a.shape != b.shape:
                return False
            for lo in range(0, n, 4096):
                x, y = a[lo : lo + 4096], b[lo : lo + 4096]
                if not np.array_equal(x[:, : words - 1], y[:, : words - 1]) or not np.array_equal(
                        x[:, words - 1] & tail, y[:, words - 1] & tail):
                    return False
        return True

    def forward(self, rows: str = "all") -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The forward tableau as Cirq lays it out: bool xs, zs [2n, n] and rs [2n] (rows: the
        destabilizers, then the stabilizers; columns: qubits). `rows` = "destabilizers" or
        "stabilizers" gives that half alone ([n, n] and [n]), for half the work.

        The bits are a relabelling (D_p's X bit on qubit k is bit p of zrow[k]'s Z part, see
        docs/engine-semantics.md); each sign is the phase of mapping the unsigned generator back
        through T⁻¹, a product of inverse rows that must give ±X_p / ±Z_p. All 2n signs come from
        `_product_signs` at once, by blocks of eight rows (O(n³/512) word operations);
        `forward_by_products` multiplies the rows out one at a time and is its oracle."""
        halves = _HALVES[rows]
        gen_x, gen_z = self._generators(halves)
        return gen_x, gen_z, _product_signs(self, halves, gen_x & gen_z)

    def _generators(self, halves=(0, 1)) -> Tuple[np.ndarray, np.ndarray]:
        """The bits of D_p (half 0) and S_p (half 1), as rows [len(halves) * n, n]."""
        n = self.num_qubits
        xx, xz, zx, zz = self.xx, self.xz, self.zx, self.zz
        parts = {0: (zz, xz), 1: (zx, xx)}  # D_p: X bits from zrow's Z part, Z bits from xrow's Z part

        def transposed(a):
            return np.unpackbits(a.view(np.uint8), axis=1, bitorder="little")[:, :n].astype(bool).T

        return (np.concatenate([transposed(parts[h][0]) for h in halves]),
                np.concatenate([transposed(parts[h][1]) for h in halves]))

    def forward_by_products(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`forward()` by multiplying each generator's inverse rows out in order (O(n³/64))."""
        n = self.num_qubits
        gen_x, gen_z = self._generators()
        words = self.xx.shape[1]
        acc_x = np.zeros((2 * n, words), dtype=np.uint64)
        acc_z = np.zeros_like(acc_x)
        log_i = np.zeros(2 * n, dtype=np.int64)
        for k in range(n):
            use_x, use_z = gen_x[:, k], gen_z[:, k]
            log_i += (use_x & use_z).astype(np.int64)  # Y = i·X·Z
            for use, rx, rz, rs in ((use_x, self.xx[k], self.xz[k], self.xs[k]),
                                    (use_z, self.zx[k], self.zz[k], self.zs[k])):
                if not use.any():
                    continue
                sel = np.flatnonzero(use)
                ax, az = acc_x[sel], acc_z[sel]
                log_i[sel] += product_phase(ax, az, rx[None, :], rz[None, :]) + 2 * int(rs)
                acc_x[sel] = ax ^ rx
                acc_z[sel] = az ^ rz
        assert np.all(log_i % 2 == 0), "inverse tableau is not a valid Clifford"
        return gen_x, gen_z, ((log_i & 3) >> 1).astype(bool)


# -- the forward signs by blocks -------------------------------------------------------------------
# Generator g of the forward tableau maps back through T⁻¹ to the ordered product of the inverse
# rows it selects (s_g: the x rows, then the z rows; x row k before z row k is all the order that
# matters, as only those two anticommute). Writing each row as (-1)^r i^{|x∧z|} X^x Z^z, moving
# every X left past the Z's gives
#     log_i(g) = Σ_k [g has Y on k] + Σ_i s_i (|x_i ∧ z_i| + 2 r_i) + 2 Σ_{i<j} s_i s_j (z_i·x_j).
# The quadratic term is the one that costs: with A = Σ_{i<j} s_i z_i kept as a running XOR, it is
# Σ_j s_j (x_j · A). Rows go eight at a time (Four Russians): a table of the XOR of every subset of
# the eight x parts (and z parts) turns a generator's eight selection bits into one row lookup.
_CHUNK = 8
_HALVES = {"all": (0, 1), "destabilizers": (0,), "stabilizers": (1,)}
_SUBSETS = ((np.arange(1 << _CHUNK)[:, None] >> np.arange(_CHUNK)) & 1).astype(np.int64)  # [v, a]
_TABLE_CHUNKS = 64  # chunks whose subset tables are built at once (2 x 64 x 256 rows)
_WORKING_BYTES = 1 << 20  # each of a block's three working arrays: cache-sized at large n
_PAIR_CHUNKS = 256  # chunks whose in-chunk pair parities are found at once (64 words a row each)


def _subset_tables(rows: np.ndarray) -> np.ndarray:
    """rows [C, 8, W] -> the XOR of every subset of each chunk's eight rows, [C, 256, W] (subset v
    holds row a where bit a of v is set): the subsets of the low four rows XOR those of the high
    four, one broadcast."""
    def of_four(four):
        table = np.zeros((four.shape[0], 1, four.shape[2]), dtype=np.uint64)
        for a in range(4):
            table = np.concatenate([table, table ^ four[:, a : a + 1]], axis=1)
        return table

    low, high = of_four(rows[:, :4]), of_four(rows[:, 4:])
    return (high[:, :, None, :] ^ low[:, None, :, :]).reshape(rows.shape[0], 256, rows.shape[2])


def _product_signs(inv: InverseTableau, halves: Tuple[int, ...], ys: np.ndarray) -> np.ndarray:
    """The signs of the forward generators of `halves` (0: destabilizers, 1: stabilizers); `ys`:
    where each has a Y."""
    n = inv.num_qubits
    if not n:
        return np.zeros(0, dtype=bool)
    words = inv.xx.shape[1]
    pad = -2 * n % _CHUNK

    def rows(*parts):
        return np.concatenate(parts + (np.zeros((pad, words), dtype=np.uint64),))

    x_parts, z_parts = rows(inv.xx, inv.zx), rows(inv.xz, inv.zz)
    if n % 64:  # bits past n in the last word are not the tableau's
        x_parts[:, -1] &= np.uint64((1 << (n % 64)) - 1)
        z_parts[:, -1] &= np.uint64((1 << (n % 64)) - 1)
    signs = np.concatenate([inv.xs, inv.zs, np.zeros(pad, dtype=np.uint8)]).astype(np.int64)
    # s_g[i]: for a destabilizer D_p, bit p of the z part of x row i and of the x part of z row i
    # (the relabelling of `_generators`); for a stabilizer S_p, the other part.
    selectors = {0: (inv.zz, inv.xz), 1: (inv.zx, inv.xx)}
    select = np.concatenate([column_bytes(rows(*selectors[h]), n) for h in halves], axis=1)
    chunks = select.shape[0]
    cx, cz = x_parts.reshape(chunks, _CHUNK, words), z_parts.reshape(chunks, _CHUNK, words)

    # The terms inside a chunk, as tables over the 256 selections: the linear one (mod 4) and
    # the pairs a < b of the quadratic one.
    linear = np.bitwise_count(cx & cz).sum(-1, dtype=np.int64) + 2 * signs.reshape(chunks, _CHUNK)
    def pair_parities(c):  # m_ab = z_a · x_b (mod 2) of the chunks from c on
        z, x = cz[c : c + _PAIR_CHUNKS, :, None, :], cx[c : c + _PAIR_CHUNKS, None, :, :]
        return np.bitwise_count(z & x).sum(-1, dtype=np.int64) & 1

    pairs = np.concatenate([pair_parities(c) for c in range(0, chunks, _PAIR_CHUNKS)])
    pairs *= np.triu(np.ones((_CHUNK, _CHUNK), dtype=np.int64), 1)
    at = np.arange(chunks)[:, None]
    log_i = (linear @ _SUBSETS.T)[at, select].sum(0)
    quadratic = (((_SUBSETS @ pairs) * _SUBSETS).sum(-1) & 1)[at, select]  # Σ_{a<b} v_a v_b m_ab
    log_i += 2 * np.bitwise_xor.reduce(quadratic, axis=0)

    # The pairs across chunks: acc ^= x-subset & A, then A ^= z-subset, one chunk at a time, a
    # block of generators at a time so that their working rows stay in cache.
    lanes = select.shape[1]
    running_z = np.zeros((lanes, words), dtype=np.uint64)
    acc = np.zeros_like(running_z)
    block = max(1, _WORKING_BYTES // (8 * words))
    looked_up = np.empty((min(block, lanes), words), dtype=np.uint64)
    for c0 in range(0, chunks, _TABLE_CHUNKS):
        x_tables = _subset_tables(cx[c0 : c0 + _TABLE_CHUNKS])
        z_tables = _subset_tables(cz[c0 : c0 + _TABLE_CHUNKS])
        for g0 in range(0, lanes, block):
            g1 = min(lanes, g0 + block)
            a, z, out = acc[g0:g1], running_z[g0:g1], looked_up[: g1 - g0]
            for j in range(x_tables.shape[0]):
                np.take(x_tables[j], select[c0 + j, g0:g1], axis=0, out=out)
                out &= z
                a ^= out
                np.take(z_tables[j], select[c0 + j, g0:g1], axis=0, out=out)
                z ^= out
    log_i += 2 * (np.bitwise_count(acc).sum(1, dtype=np.int64) & 1)
    log_i += np.count_nonzero(ys, axis=1)  # Y = i·X·Z
    assert np.all(log_i % 2 == 0), "inverse tableau is not a valid Clifford"
    return ((log_i & 3) >> 1).astype(bool)
