"""Ragged gathers (core/ranges.py) against the ranges written out one by one."""

import numpy as np

from cirq_quasarq.core.ranges import expand_ranges


def test_expand_ranges_is_the_ranges_one_after_the_other():
    rng = np.random.default_rng(3)
    starts, counts = rng.integers(0, 50, size=40), rng.integers(0, 6, size=40)
    owner, index = expand_ranges(starts, counts)
    assert owner.tolist() == [i for i, c in enumerate(counts) for _ in range(c)]
    assert index.tolist() == [s + j for s, c in zip(starts, counts) for j in range(c)]
    assert [a.size for a in expand_ranges(np.zeros(0, int), np.zeros(0, int))] == [0, 0]
