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

    def forward(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The forward tableau as Cirq lays it out: bool xs, zs [2n, n] and rs [2n] (rows: the
        destabilizers, then the stabilizers; columns: qubits).

        The bits are a relabelling (D_p's X bit on qubit k is bit p of zrow[k]'s Z part, see
        docs/engine-semantics.md); each sign comes from mapping the unsigned generator back
        through T⁻¹ (a product of inverse rows), which must give ±X_p / ±Z_p."""
        n = self.num_qubits
        xx, xz, zx, zz = self.bits()
        gen_x = np.concatenate([zz.T, zx.T])  # D_p = T X_p T⁻¹, then S_p = T Z_p T⁻¹
        gen_z = np.concatenate([xz.T, xx.T])
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
