"""Pauli algebra: the one letter encoding and every product and conjugation rule of the package.

Letters: ``I = 0, X = 1, Y = 2, Z = 3`` (Cirq's ``pauli_mask``, Stim's NumPy encoding,
``Program.channels`` and the CUDA kernels). As bits, a letter is ``x = letter in {X, Y}`` and
``z = letter in {Y, Z}``, with ``Y = i·X·Z`` as in Stim. A signed Pauli string is ``(sign,
letters)``, sign 0 for + and 1 for -; images are written as Stim prints them, ``"+XZ"`` (qubit 0
leftmost, ``I`` or ``_`` for the identity).

Two levels of the same algebra:
- small strings (the opcode table, the compiler's Clifford synthesis): products with their power
  of i, conjugation by a Clifford given its generators' images, and its inverse, all algebraic;
- packed words (both engines' tableaux and frames): bits packed 64 to a uint64 word, bit b of word
  w is position 64w + b (LSB first), the phase of a product summed by popcounts.
"""

from __future__ import annotations

import functools
from typing import Optional, Sequence, Tuple

import numpy as np

I, X, Y, Z = 0, 1, 2, 3
LETTERS = "IXYZ"
X_BIT = np.array([0, 1, 1, 0], dtype=np.uint8)  # X_BIT[letter]
Z_BIT = np.array([0, 0, 1, 1], dtype=np.uint8)
_LETTER_OF_XZ = np.array([I, X, Z, Y], dtype=np.uint8)  # indexed by x + 2z

Letters = Tuple[int, ...]
Signed = Tuple[int, Letters]  # (sign bit, letters)

# Power of i in the product of two letters: X·Y = iZ, Y·Z = iX, Z·X = iY, the reverse order -i.
_PRODUCT_LOG_I = np.zeros((4, 4), dtype=np.int64)
for _a, _b in ((X, Y), (Y, Z), (Z, X)):
    _PRODUCT_LOG_I[_a, _b], _PRODUCT_LOG_I[_b, _a] = 1, 3


def letter_of(x, z):
    """The letter(s) with these X and Z bits (scalars or arrays)."""
    return _LETTER_OF_XZ[np.asarray(x, dtype=np.int64) + 2 * np.asarray(z, dtype=np.int64)]


def letters_of_bits(xs: np.ndarray, zs: np.ndarray) -> np.ndarray:
    """uint8 letters of bool X and Z bit arrays: `letter_of`'s values, without its int64 index
    arrays (a forward tableau's n x n bits)."""
    x, z = xs.view(np.uint8), zs.view(np.uint8)
    return (z << 1) | (x ^ z)


def parse(image: str) -> Signed:
    """'+XZ' / '-Y_' -> (sign bit, letters)."""
    return (1 if image[0] == "-" else 0), tuple(LETTERS.index("I" if c == "_" else c) for c in image[1:])


def format_signed(sign: int, letters: Sequence[int]) -> str:
    return ("-" if sign else "+") + "".join(LETTERS[int(c)] for c in letters)


def multiply(p: Tuple[int, Letters], q: Tuple[int, Letters]) -> Tuple[int, Letters]:
    """Product of (power of i, letters) pairs, the powers of i mod 4."""
    log_i = p[0] + q[0] + sum(int(_PRODUCT_LOG_I[a, b]) for a, b in zip(p[1], q[1]))
    letters = tuple(int(_LETTER_OF_XZ[(X_BIT[a] ^ X_BIT[b]) + 2 * (Z_BIT[a] ^ Z_BIT[b])])
                    for a, b in zip(p[1], q[1]))
    return log_i % 4, letters


def conjugate(images: Sequence[Signed], letters: Sequence[int]) -> Signed:
    """G·P·G† for the Pauli string P (letters over the gate's qubits), where images[2k] / [2k+1] are
    the signed images of X_k / Z_k: the product of the generators' images, Y_k = i·X_k·Z_k."""
    n = len(letters)
    acc = (0, (I,) * n)
    for k, letter in enumerate(letters):
        if X_BIT[letter]:
            acc = multiply(acc, (2 * images[2 * k][0], images[2 * k][1]))
        if Z_BIT[letter]:
            acc = multiply(acc, (2 * images[2 * k + 1][0], images[2 * k + 1][1]))
        if letter == Y:
            acc = ((acc[0] + 1) % 4, acc[1])
    if acc[0] % 2:
        raise ValueError(f"images {images} do not define a Clifford (image of {letters} is not Hermitian)")
    return acc[0] // 2, acc[1]


def conjugation_table(images: Sequence[Signed]) -> Tuple[np.ndarray, np.ndarray]:
    """For every local Pauli of the gate's n qubits (index = sum letter_j << 2j): the sign bit
    uint8 [4^n] and the letters uint8 [4^n, n] of G·P·G†."""
    n = len(images) // 2
    signs = np.zeros(4**n, dtype=np.uint8)
    letters = np.zeros((4**n, n), dtype=np.uint8)
    for index in range(4**n):
        signs[index], letters[index] = conjugate(images, [(index >> (2 * j)) & 3 for j in range(n)])
    return signs, letters


def inverse_images(images: Sequence[Signed],
                   table: Optional[Tuple[np.ndarray, np.ndarray]] = None) -> Tuple[Signed, ...]:
    """Images G†·P·G of X_k, Z_k: conjugation is a signed permutation of the Pauli strings, so the
    preimage of each generator is read off the inverted conjugation table (`table`: the gate's
    `conjugation_table`, when it is at hand)."""
    signs, letters = conjugation_table(images) if table is None else table
    n = len(images) // 2
    preimage = {tuple(int(c) for c in row): index for index, row in enumerate(letters)}
    out = []
    for k in range(n):
        for generator in (X, Z):
            target = tuple(generator if j == k else I for j in range(n))
            index = preimage[target]
            out.append((int(signs[index]), tuple((index >> (2 * j)) & 3 for j in range(n))))
    return tuple(out)


_MATRIX = {
    I: np.eye(2, dtype=complex),
    X: np.array([[0, 1], [1, 0]], dtype=complex),
    Y: np.array([[0, -1j], [1j, 0]], dtype=complex),
    Z: np.array([[1, 0], [0, -1]], dtype=complex),
}


def pauli_matrix(letters: Sequence[int], endian: str = "big") -> np.ndarray:
    """The matrix of a Pauli string. "big": letters[0] acts on the most significant bit (Cirq's
    order); "little": letters[0] is the least significant."""
    ordered = letters if endian == "big" else list(letters)[::-1]
    m = np.eye(1, dtype=complex)
    for letter in ordered:
        m = np.kron(m, _MATRIX[int(letter)])
    return m


def pauli_of_matrix(m: np.ndarray, n: int, atol: float = 1e-7):
    """(c, letters) with m = c·P for a Pauli string P (Cirq's big-endian order), or None when m
    is not proportional to a Pauli string."""
    m = np.asarray(m, dtype=complex)
    dim = 2**n
    if m.shape != (dim, dim):
        return None
    x_mask = int(np.argmax(np.abs(m[:, 0])))  # a Pauli maps |0…0> to a multiple of |x>
    c0 = m[x_mask, 0]
    if abs(c0) < 1e-9:  # the zero matrix (a Kraus operator of a vanishing outcome)
        return None
    letters = []
    for q in range(n):
        bit = 1 << (n - 1 - q)
        z = int((m[x_mask ^ bit, bit] / c0).real < 0)  # the sign Z^z puts on |1 at q>
        letters.append(int(letter_of((x_mask >> (n - 1 - q)) & 1, z)))
    p = pauli_matrix(letters)
    c = complex(np.vdot(p.reshape(-1), m.reshape(-1)) / dim)
    if not np.allclose(m, c * p, atol=atol):
        return None
    return c, tuple(letters)


# ---------------------------------------------------------------------------------------------
# Packed words

_SHIFTS = [np.uint64(s) for s in (1, 2, 4, 8, 16, 32)]


_EXACT_F32_WORDS = (1 << 24) // 64  # rows up to this many words count below 2^24: exact in float32


@functools.lru_cache(maxsize=64)
def _ones32(words: int) -> np.ndarray:
    return np.ones(words, dtype=np.float32)


def popcount_rows(a: np.ndarray) -> np.ndarray:
    """Number of set bits per row (the last axis) of a uint64 array [..., W], as int64 [...].

    The per-word counts are summed as a float32 product with a vector of ones, exact below 2^24:
    a BLAS matrix-vector product, where NumPy's integer sum over a short last axis is a strided
    reduction four times slower (a tableau row of 32 words, 4,000 rows: 23 against 94 us).
    OpenBLAS now and then raises the invalid flag on such a product whose values are exact: a
    caller in a loop sets np.errstate(invalid="ignore") around it (NumpyEngine.run_tableau)."""
    counts = np.bitwise_count(a)
    words = counts.shape[-1]
    if words > _EXACT_F32_WORDS:
        return counts.sum(axis=-1, dtype=np.int64)
    return (counts.astype(np.float32) @ _ones32(words)).astype(np.int64)


def product_phase(x1, z1, x2, z2) -> np.ndarray:
    """log_i (mod 4, int64 per row) of the phase that P1·P2 picks up, with packed X / Z bits.

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
