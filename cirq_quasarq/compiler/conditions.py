"""Classical conditions -> truth tables over record bits, evaluated by Cirq itself.

A condition (or an AND of several) reads an instance of each of its keys (the latest, or an
earlier one by index); with the keys' bits laid out one after another (bit i of an assignment =
the i-th bit overall, each key's qubits in measurement order), `condition_table` asks Cirq's own
`Condition.resolve` for every assignment.
"""

from __future__ import annotations

from typing import Dict, Sequence, Tuple

import cirq
import numpy as np

from .. import errors

MAX_CONDITION_BITS = 12
MAX_CACHE = 4096

_CACHE: Dict[Tuple, np.ndarray] = {}


def condition_table(conditions: Sequence[cirq.Condition],
                    widths: Sequence[Tuple[cirq.MeasurementKey, int, int]]) -> np.ndarray:
    """bool [2**k]: table[a] = AND of the conditions when the keys' bits are those of `a`.

    `widths` lists each (key, number of bits, instance index) the conditions read (the key as
    they name it, index -1 for the latest instance, -2 the one before, ...), in the order their
    bits appear in `a` (bit 0 of `a` is the first key's first bit)."""
    k = sum(w for _, w, _ in widths)
    if k > MAX_CONDITION_BITS:
        raise errors.UnsupportedOperationError(
            f"a classical condition reading {k} measured bits (more than {MAX_CONDITION_BITS})")
    cache_key = (tuple(conditions), tuple(widths))
    try:
        hit = _CACHE.get(cache_key)
    except TypeError:
        hit, cache_key = None, None
    if hit is not None:
        return hit
    table = np.zeros(1 << k, dtype=bool)
    for a in range(1 << k):
        records = {}
        bit = 0
        for key, width, index in widths:
            instances = records.setdefault(key, [])
            while len(instances) < -index:
                instances.insert(0, (0,) * width)
            instances[index] = tuple((a >> (bit + j)) & 1 for j in range(width))
            bit += width
        store = cirq.ClassicalDataDictionaryStore(_records=records)
        table[a] = all(bool(c.resolve(store)) for c in conditions)
    if cache_key is not None:
        if len(_CACHE) >= MAX_CACHE:
            _CACHE.clear()
        _CACHE[cache_key] = table
    return table

