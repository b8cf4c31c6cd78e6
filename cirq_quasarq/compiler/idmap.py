"""Object ids -> numbers for whole arrays of ids at once: the compiler's bulk lookups.

A moment of 10k operations names its qubits by object (Cirq interns its qubits, and a circuit's
operations share them); the walker reads their ids with one `np.fromiter` and looks them up here.
A Python dict's lookup a qubit was half of that time (about 70 ns each, 1.1M a random Clifford
circuit of 10k qubits at depth 100); here a round of probes is a few NumPy operations over the
whole array.

The table is open-addressed with linear probing, at most a quarter full: slot = the top bits of
(id >> 4) * a 64-bit odd constant (Fibonacci hashing: CPython's objects are 16-byte aligned, so the
low four bits carry nothing). `lookup` probes every id's slot, then the next slot for those that
met another id, as many rounds as the longest probe sequence any key took when inserted.
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)
_EMPTY = np.uint64(0)  # no object has id 0


class IdMap:
    """An immutable map from object ids (int64 array) to int64 values (see the module)."""

    __slots__ = ("_keys", "_values", "_mask", "_shift", "_probes")

    def __init__(self, ids: np.ndarray, values: np.ndarray):
        ids = np.asarray(ids, dtype=np.int64).astype(np.uint64)
        values = np.asarray(values, dtype=np.int64)
        if len(np.unique(ids)) != len(ids):
            raise ValueError("IdMap: an id given twice")
        bits = max(4, (4 * len(ids)).bit_length())  # at least 4x the keys: short probe sequences
        size = 1 << bits
        self._mask = np.uint64(size - 1)
        self._shift = np.uint64(64 - bits)
        self._keys = np.full(size, _EMPTY, dtype=np.uint64)
        self._values = np.full(size, -1, dtype=np.int64)
        slot = self._slots(ids).copy()
        todo = np.arange(len(ids))
        probes = 0
        while len(todo):  # each round: the first key of each free slot it goes to takes that slot
            at = slot[todo]
            free = self._keys[at] == _EMPTY
            first = np.unique(at[free], return_index=True)[1]
            taken = todo[free][first]
            self._keys[slot[taken]] = ids[taken]
            self._values[slot[taken]] = values[taken]
            placed = np.zeros(len(ids), dtype=bool)
            placed[taken] = True
            todo = todo[~placed[todo]]
            slot[todo] = (slot[todo] + 1) & np.int64(self._mask)
            probes += bool(len(todo))
        self._probes = probes

    @classmethod
    def of(cls, mapping: Dict[int, int]) -> "IdMap":
        """The map of a dict from ids to values."""
        return cls(np.fromiter(mapping.keys(), np.int64, len(mapping)),
                   np.fromiter(mapping.values(), np.int64, len(mapping)))

    def _slots(self, ids: np.ndarray) -> np.ndarray:
        """Each id's home slot (int64: NumPy takes with it as it is)."""
        slot = ids >> np.uint64(4)
        with np.errstate(over="ignore"):
            slot *= _MULTIPLIER
        slot >>= self._shift
        return slot.view(np.int64)

    def lookup(self, ids: np.ndarray) -> Tuple[np.ndarray, bool]:
        """(the value of each id, -1 where it has none; whether every id has one)."""
        ids = np.asarray(ids, dtype=np.int64).view(np.uint64)
        slot = self._slots(ids)
        key = self._keys.take(slot)
        hit = key == ids
        out = self._values.take(slot)
        if hit.all():  # the common case: every id in its home slot
            return out, True
        out[~hit] = -1
        todo = np.flatnonzero((~hit) & (key != _EMPTY))  # met another key: the next slots may hold it
        mask = np.int64(self._mask)
        for _ in range(self._probes):
            if not len(todo):
                break
            at = (slot[todo] + 1) & mask
            slot[todo] = at
            key = self._keys.take(at)
            hit = key == ids[todo]
            out[todo[hit]] = self._values.take(at[hit])
            todo = todo[(~hit) & (key != _EMPTY)]
        return out, bool(out.min(initial=0) >= 0)
