"""The compile caches: LRU keyed by circuit identity (see `_Cache`)."""

from __future__ import annotations

import collections
import threading
from typing import Tuple


class _Cache:
    """LRU of compiled results keyed by circuit identity: id of the circuit and of each of its
    (immutable) moments, plus the options. Entries keep the circuit and moments alive so ids stay
    unique. Bounded by entry count and by total instruction rows held."""

    def __init__(self, size: int, max_rows: int):
        self.size = size
        self.max_rows = max_rows
        self.rows = 0
        self.data: "collections.OrderedDict[Tuple, Tuple]" = collections.OrderedDict()
        self.lock = threading.Lock()

    def get(self, key):
        with self.lock:
            hit = self.data.get(key)
            if hit is not None:
                self.data.move_to_end(key)
            return hit

    def put(self, key, value, rows: int) -> None:
        with self.lock:
            old = self.data.pop(key, None)
            if old is not None:
                self.rows -= old[-1]
            self.data[key] = value + (rows,)
            self.rows += rows
            while len(self.data) > 1 and (len(self.data) > self.size or self.rows > self.max_rows):
                _, evicted = self.data.popitem(last=False)
                self.rows -= evicted[-1]

    def clear(self) -> None:
        with self.lock:
            self.data.clear()
            self.rows = 0


TEMPLATES = _Cache(16, 1 << 24)
PROGRAMS = _Cache(64, 1 << 24)
QUBITS = _Cache(16, 1 << 24)  # a circuit's qubit set (`compile.circuit_qubits`)


def option_key(value):
    """Hashable identity of an option; objects are keyed by id (the entry keeps them alive)."""
    import cirq  # here, not at the top: the Stim path uses this module's cache without Cirq

    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(option_key(v) for v in value))
    if isinstance(value, (str, int, float, cirq.Qid)):
        return ("val", value)
    return ("id", id(value))


def circuit_key(circuit) -> Tuple:
    return (id(circuit), type(circuit), tuple(map(id, circuit.moments)))


def resolver_key(resolver):
    if resolver is None:
        return None
    import cirq

    items = cirq.ParamResolver(resolver).param_dict.items()
    try:
        return tuple(sorted((str(k), repr(v)) for k, v in items))
    except Exception:  # pragma: no cover - exotic resolvers: by identity
        return ("id", id(resolver))
