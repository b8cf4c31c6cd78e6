"""The one small interface every engine implements (NumPy and CUDA are interchangeable).

Engines see only Program / Schedule arrays and return arrays; Cirq lives in compile and results.
Semantics, bit for bit: docs/engine-semantics.md.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Tuple

import numpy as np

from ..program import Program
from ..schedule import Schedule


def gib(nbytes: float) -> str:
    """Bytes as GiB for memory error messages."""
    return f"{nbytes / 2**30:.2f} GiB"


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

    def bits(self) -> Tuple[np.ndarray, ...]:
        """Unpacked bool matrices (xx, xz, zx, zz) of shape [n, n] (row k, generator p)."""
        n = self.num_qubits

        def unpack(a):
            return np.unpackbits(a.view(np.uint8), axis=1, bitorder="little")[:, :n].astype(bool)

        return tuple(unpack(a) for a in (self.xx, self.xz, self.zx, self.zz))

    def equals(self, other: "InverseTableau") -> bool:
        return (self.num_qubits == other.num_qubits
                and all(np.array_equal(a, b) for a, b in zip(self.bits(), other.bits()))
                and np.array_equal(self.xs, other.xs) and np.array_equal(self.zs, other.zs))


@dataclasses.dataclass
class TableauRun:
    records: np.ndarray  # uint8 [num_records]: the measured (recorded) bits
    tableau: InverseTableau


class Engine(abc.ABC):
    """An engine runs a scheduled Program. `key` is rng.make_key(seed)."""

    name: str = "abstract"

    @abc.abstractmethod
    def run_tableau(self, program: Program, schedule: Schedule, key, *, repetition: int = 0,
                    reference: bool = False) -> TableauRun:
        """Tableau mode for one shot. `reference`: every coin forced to 0, noise and confusion off
        (the reference sample of frame mode). `repetition` selects the coins' and noise's shot."""

    @abc.abstractmethod
    def sample_frames(self, program: Program, schedule: Schedule, key, reference: np.ndarray,
                      shots: int) -> np.ndarray:
        """Frame mode: uint64 [num_records, ceil(shots/64)] of measured bits (reference XOR flips);
        bit l of word w is shot 64w + l (bits past `shots` are unspecified)."""

    def sample_tableau_shots(self, program: Program, schedule: Schedule, key, shots: int) -> np.ndarray:
        """Tableau mode once per shot (circuits frames cannot express), packed as sample_frames."""
        words = (shots + 63) // 64
        out = np.zeros((program.num_records, words), dtype=np.uint64)
        for r in range(shots):
            bits = self.run_tableau(program, schedule, key, repetition=r).records
            out[:, r // 64] |= bits.astype(np.uint64) << np.uint64(r % 64)
        return out
