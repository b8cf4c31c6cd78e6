"""Tableau mode's compiled row operations (cuda_src/host_tableau.cpp) against their NumPy form,
the definition (engines/numpy/tableau.py): a layer's products of old rows and a collapse's CX fan,
bit for bit, on random rows at the words' edges. tests/test_tableau_mode.py runs every tableau test
both ways against Stim too."""

import numpy as np
import pytest

from cirq_quasarq.core import native
from cirq_quasarq.engines.numpy import tableau
from cirq_quasarq.engines.numpy.tableau import TableauState

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C++ compiler on this machine")

SIZES = [1, 2, 63, 64, 65, 127, 128, 129, 700]


def random_state(r, n, riders=0) -> TableauState:
    state = TableauState(n, riders)
    state.T[...] = r.integers(0, 2**64, state.T.shape, dtype=np.uint64)
    if n % 64:  # columns past n stay zero, as in a real tableau
        state.T[..., -1] &= np.uint64((1 << (n % 64)) - 1)
    state.S[...] = r.integers(0, 2, state.S.shape, dtype=np.uint8)
    return state


def both(monkeypatch, state, operate):
    """`operate` on a copy of `state` with the compiled path and on a copy without: both states."""
    if native.library() is None:
        pytest.fail(f"the compiled path did not build: {native.why_not()}")
    out = []
    for flag in ("1", "0"):
        monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", flag)
        copy = state.copy()
        operate(copy)
        out.append(copy)
    return out


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("riders", [0, 3])
def test_a_layers_products_equal_numpys(monkeypatch, n, riders):
    """Groups of one, two and three inputs (any rows, repeats among a product's inputs), every log,
    outputs that are inputs of other outputs (each made from the old rows), and sign flips."""
    r = np.random.default_rng(n * 10 + riders)
    state = random_state(r, n, riders)
    rows = 2 * n  # gates never write the riders
    order = r.permutation(rows)
    sizes = [k for k in (1, 2, 3) if r.random() < 0.9] or [2]
    groups, at = [], 0
    for size in sizes:
        m = int(r.integers(0, max(1, rows // len(sizes) - at % 7) + 1))
        out = np.sort(order[at : at + m])
        at += len(out)
        groups.append((out, r.integers(0, rows + riders, (size, len(out))), r.integers(0, 4, len(out))))
    flips = order[at : at + int(r.integers(0, 3))]
    compiled, numpy_made = both(monkeypatch, state, lambda s: s.apply_layer((flips, tuple(groups))))
    assert compiled.equals(numpy_made)
    assert not compiled.equals(state) or not any(len(g[0]) for g in groups)


@pytest.mark.parametrize("n", SIZES)
def test_a_collapses_cx_fan_equals_numpys(monkeypatch, n):
    """Pivots in every word, victims up to the last column, on the whole tableau (with riders), on
    a window's zrows (copies, from a row on) and on rows laid out otherwise (NumPy then runs it)."""
    r = np.random.default_rng(n)
    for trial in range(6):
        state = random_state(r, n, riders=trial % 3)
        q = int(r.integers(0, n))
        zx = state.X[n + q].copy()
        zx[int(r.integers(0, len(zx)))] |= np.uint64(1)  # some bit set
        pivot = tableau._pivot(zx)
        p, victims = pivot
        compiled, numpy_made = both(monkeypatch, state, lambda s: tableau._cx_fan(s.X, s.Z, s.S, p, victims))
        assert compiled.equals(numpy_made)
        rows = n + r.permutation(n)[: int(r.integers(1, n + 1))]
        X, Z, S = state.X[rows], state.Z[rows], state.S[rows]
        made = []
        for flag in ("1", "0"):
            monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", flag)
            x, z, s = X.copy(), Z.copy(), S.copy()
            tableau._cx_fan(x[1:], z[1:], s[1:], p, victims)
            made.append((x, z, s))
        assert all(np.array_equal(a, b) for a, b in zip(*made))
        # columns of a larger array (a row stride the rows do not fill), and Fortran order: NumPy's path
        wide_x = np.zeros((len(rows), 2 * X.shape[1] + 1), np.uint64)
        wide_z = np.zeros_like(wide_x)
        wide_x[:, : X.shape[1]], wide_z[:, : X.shape[1]] = X, Z
        fortran = (np.array(X, order="F"), np.array(Z, order="F"))  # copies (X is F-ordered already where W = 1)
        for x, z in ((wide_x[:, : X.shape[1]], wide_z[:, : X.shape[1]]), fortran):
            s = S.copy()
            monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "1")
            tableau._cx_fan(x, z, s, p, victims)
            expect_x, expect_z, expect_s = X.copy(), Z.copy(), S.copy()
            monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "0")
            tableau._cx_fan(expect_x, expect_z, expect_s, p, victims)
            assert np.array_equal(x, expect_x) and np.array_equal(z, expect_z) and np.array_equal(s, expect_s)


def test_rows_laid_out_otherwise_are_not_given_to_the_compiled_path():
    x = np.zeros((4, 3), np.uint64)
    s = np.zeros(4, np.uint8)
    assert tableau._rows_as_c_takes_them(x, x.copy(), s)
    assert tableau._rows_as_c_takes_them(np.zeros((4, 8), np.uint64)[:, :3], np.zeros((4, 8), np.uint64)[:, :3], s)
    assert not tableau._rows_as_c_takes_them(np.asfortranarray(x), np.asfortranarray(x), s)
    assert not tableau._rows_as_c_takes_them(x, x.copy(), np.zeros(8, np.uint8)[::2])
    assert not tableau._rows_as_c_takes_them(x, np.zeros((4, 8), np.uint64)[:, :3], s)
    assert not tableau._rows_as_c_takes_them(x, x.copy(), np.zeros(4, np.int64))
