"""Word-parallel Pauli arithmetic shared by the NumPy engine's tableau and frame modes.

Bits are packed 64 to a uint64 word; bit b of word w is position 64w + b (LSB first)."""

from __future__ import annotations

import numpy as np

_SHIFTS = [np.uint64(s) for s in (1, 2, 4, 8, 16, 32)]


def popcount_rows(a: np.ndarray) -> np.ndarray:
    """Number of set bits per row of a uint64 [k, W] array, as int64 [k]."""
    return np.bitwise_count(a).sum(axis=-1, dtype=np.int64)


def product_phase(x1, z1, x2, z2) -> np.ndarray:
    """log_i (mod 4, int64 per row) of the phase that P1·P2 picks up, P = i^(x&z) X^x Z^z letters.

    Per position: +1 for (X,Y), (Y,Z), (Z,X); -1 for the reverse order; 0 otherwise."""
    y1 = x1 & z1
    y2 = x2 & z2
    only_x1, only_z1 = x1 & ~z1, z1 & ~x1
    only_x2, only_z2 = x2 & ~z2, z2 & ~x2
    plus = (only_x1 & y2) | (y1 & only_z2) | (only_z1 & only_x2)
    minus = (y1 & only_x2) | (only_z1 & y2) | (only_x1 & only_z2)
    return (popcount_rows(plus) - popcount_rows(minus)) & 3


def inclusive_prefix_xor(words: np.ndarray) -> np.ndarray:
    """Bit i of the result is the XOR of bits 0..i of the same word."""
    out = words.copy()
    for s in _SHIFTS:
        out ^= out << s
    return out


def bit(words: np.ndarray, index: int) -> np.ndarray:
    """Bit `index` of each row of a uint64 [k, W] array, as uint64 0/1 [k]."""
    return (words[:, index >> 6] >> np.uint64(index & 63)) & np.uint64(1)


def spread(bits: np.ndarray) -> np.ndarray:
    """0/1 values -> all-zero / all-one words."""
    return np.uint64(0) - bits.astype(np.uint64)
