"""Ragged gathers and index lists (core/ranges.py) against the ranges written out one by one and
against np.nonzero."""

import math

import numpy as np
import pytest

from cirq_quasarq.core.ranges import expand_ranges, nonzero_2d, ragged_rows, shift_rows


def test_expand_ranges_is_the_ranges_one_after_the_other():
    rng = np.random.default_rng(3)
    starts, counts = rng.integers(0, 50, size=40), rng.integers(0, 6, size=40)
    owner, index = expand_ranges(starts, counts)
    assert owner.tolist() == [i for i, c in enumerate(counts) for _ in range(c)]
    assert index.tolist() == [s + j for s, c in zip(starts, counts) for j in range(c)]
    assert [a.size for a in expand_ranges(np.zeros(0, int), np.zeros(0, int))] == [0, 0]


@pytest.mark.parametrize("shape", [(0, 0), (0, 5), (5, 0), (1, 1), (7, 1), (1, 9), (13, 16), (959, 16), (40, 65)])
@pytest.mark.parametrize("dtype", [bool, np.uint8, np.uint64])
def test_nonzero_2d_is_np_nonzero(shape, dtype):
    rng = np.random.default_rng(shape[0] * 100 + shape[1])
    a = (rng.random(shape) < 0.3).astype(dtype)
    for view in (a, a[:, ::2], a[::-1], a.T[: shape[1], : shape[0]]):  # contiguous, strided, reversed, transposed
        rows, cols = nonzero_2d(view)
        want_rows, want_cols = np.nonzero(view)
        assert rows.dtype == want_rows.dtype and cols.dtype == want_cols.dtype
        assert np.array_equal(rows, want_rows) and np.array_equal(cols, want_cols)


@pytest.mark.parametrize("offset", [(), (1.5,), (1.5, -2.0, 0.25), (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)])
def test_shift_rows_adds_the_offset_a_detector_has_and_keeps_the_padding_zero(offset):
    rows_of = [(), (-0.0,), (1.0, -0.0), (2.0, 3.0, 4.0, 5.0), (0.5, 0.5, 0.5)]
    widths = np.array([len(r) for r in rows_of])
    rows = ragged_rows(np.array([c for r in rows_of for c in r]), widths)
    got = shift_rows(rows, widths, offset)
    want = [tuple(float(c) + (offset[i] if i < len(offset) else 0.0) for i, c in enumerate(r)) for r in rows_of]
    for row, w, expected in zip(got, widths, want):
        assert tuple(row[:w]) == expected
        assert [math.copysign(1.0, c) for c in row[:w]] == [math.copysign(1.0, c) for c in expected]
        assert not row[w:].any()
    same = np.array([[1.0, 2.0], [3.0, -0.0]])
    assert shift_rows(same.copy(), np.array([2, 2]), offset).tolist() == \
        [[c + (offset[i] if i < len(offset) else 0.0) for i, c in enumerate(r)] for r in same.tolist()]
