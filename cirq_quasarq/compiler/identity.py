"""Numbers of objects by identity, looked up for many objects at once.

The walk maps the gates and qubits of a moment's operations to numbers (plans, qubit indices). By
object identity no object's hash (a Python method for Cirq's qubits) is called, nor its memory
read; a sorted search over the ids does a whole moment in a few array operations, cheaper than a
dict lookup per object. The caller keeps the objects alive, so that an id stays theirs.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np


class IdTable:
    """id(object) -> number, for objects the caller keeps alive."""

    def __init__(self):
        self._numbers: Dict[int, int] = {}
        self._sorted: Optional[Tuple[np.ndarray, np.ndarray]] = None  # ids sorted, their numbers

    def __setitem__(self, object_id: int, number: int) -> None:
        self._numbers[object_id] = number
        self._sorted = None

    def __contains__(self, object_id: int) -> bool:
        return object_id in self._numbers

    def __getitem__(self, object_id: int) -> int:
        return self._numbers[object_id]

    def numbers(self, ids: np.ndarray) -> np.ndarray:
        """The number of each id (uint64 array), -1 for an id not in the table."""
        if self._sorted is None:
            keys = np.fromiter(self._numbers, np.uint64, len(self._numbers))
            order = np.argsort(keys)
            self._sorted = (keys[order], np.fromiter(self._numbers.values(), np.int64, len(keys))[order])
        keys, numbers = self._sorted
        if not len(keys):
            return np.full(len(ids), -1, dtype=np.int64)
        at = np.searchsorted(keys, ids)
        np.minimum(at, len(keys) - 1, out=at)
        return np.where(keys[at] == ids, numbers[at], -1)
