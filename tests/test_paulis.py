"""The one Pauli module (core/paulis.py) against Stim and Cirq."""

import itertools

import cirq
import numpy as np
import pytest

from cirq_quasarq.core import opcodes, paulis

stim = pytest.importorskip("stim")

UNITARY = [op for op in opcodes.OPCODES if op.kind == opcodes.Kind.UNITARY]


def _stim(letters) -> stim.PauliString:
    return stim.PauliString("".join(paulis.LETTERS[c] for c in letters))


def test_letter_encoding_is_cirqs_and_stims():
    for letter, name in enumerate("IXYZ"):
        assert paulis.LETTERS[letter] == name
        if letter:
            assert cirq.DensePauliString(name).pauli_mask[0] == letter
        assert (paulis.X_BIT[letter], paulis.Z_BIT[letter]) == tuple(
            int(v[0]) for v in stim.PauliString(name if letter else "_").to_numpy())
        assert paulis.letter_of(paulis.X_BIT[letter], paulis.Z_BIT[letter]) == letter


def test_products_match_stim():
    for n in (1, 2, 3):
        for a in itertools.product(range(4), repeat=n):
            for b in itertools.product(range(4), repeat=n):
                log_i, letters = paulis.multiply((0, a), (0, b))
                expected = _stim(a) * _stim(b)
                assert _stim(letters) * (1j**log_i) == expected, (a, b)


@pytest.mark.parametrize("op", UNITARY, ids=lambda op: op.name)
def test_conjugation_tables_match_stim(op):
    gate = stim.Tableau.from_named_gate(op.name)
    signs, letters = opcodes.CONJUGATION[op.code]
    for index in range(4**op.arity):
        p = [(index >> (2 * j)) & 3 for j in range(op.arity)]
        got = _stim(letters[index]) * (-1 if signs[index] else 1)
        assert gate(_stim(p)) == got, (op.name, p)


@pytest.mark.parametrize("op", UNITARY, ids=lambda op: op.name)
def test_inverse_images_match_stim(op):
    inverse = stim.Tableau.from_named_gate(op.name).inverse()
    images = [paulis.parse(s) for s in opcodes.INVERSE_IMAGES[op.code]]
    for k in range(op.arity):
        for g, out in enumerate((inverse.x_output(k), inverse.z_output(k))):
            sign, letters = images[2 * k + g]
            assert _stim(letters) * (-1 if sign else 1) == out


def test_packed_product_phase_matches_small_products():
    rng = np.random.default_rng(3)
    n = 192  # three words
    a, b = rng.integers(0, 4, (2, 20, n))
    pack = lambda bits: np.packbits(bits.astype(np.uint8), axis=1, bitorder="little").view(np.uint64)  # noqa: E731
    got = paulis.product_phase(pack(paulis.X_BIT[a]), pack(paulis.Z_BIT[a]), pack(paulis.X_BIT[b]), pack(paulis.Z_BIT[b]))
    for row in range(20):
        assert got[row] == paulis.multiply((0, tuple(a[row])), (0, tuple(b[row])))[0]


def test_pauli_matrix_and_its_inverse_in_cirqs_order():
    rng = np.random.default_rng(5)
    for n in (1, 2, 3):
        for _ in range(10):
            letters = tuple(int(c) for c in rng.integers(0, 4, n))
            c = np.exp(2j * np.pi * rng.random()) * rng.random()
            m = paulis.pauli_matrix(letters)
            np.testing.assert_allclose(m, cirq.unitary(cirq.DensePauliString(letters)), atol=1e-12)
            found = paulis.pauli_of_matrix(c * m, n)
            assert found is not None and found[1] == letters and abs(found[0] - c) < 1e-9
            little = paulis.pauli_matrix(letters, endian="little")
            np.testing.assert_allclose(little, paulis.pauli_matrix(letters[::-1]), atol=1e-12)
    assert paulis.pauli_of_matrix(cirq.unitary(cirq.H), 1) is None
