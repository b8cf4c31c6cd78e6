"""Measurement keys while compiling: scopes, the latest instance of each key, loops.

Keys are tuples of path components and a name, as Cirq's `MeasurementKey` prints them joined by
":". Inside a loop that uses repetition ids, the loop's component is a `RepVar` standing for
"this iteration's id": the body is walked once, so its keys are symbolic until the loop closes,
when they are expanded into one concrete key per iteration.

Record slots are iteration-0 numbers (see `cirq_quasarq.program`). An entry remembers the loops
that were open when it was measured (`nest`); a read from deeper inside a loop nest must add the
record shift of only the shared loops. A read of a key whose latest instance lies before a loop
that measures it again later in its body sees, from the second iteration on, the previous
iteration's instance: that is expressible only when it is exactly one loop stride later than the
instance before the loop (`PendingRead`, checked when the loop closes).

Earlier instances (`KeyCondition(index < -1)`) are read from every instance of the key in order,
a closed loop's body instances standing for one instance per iteration (`Run`, never listed).
"""

from __future__ import annotations

import itertools
import operator
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import cirq
import numpy as np

from .. import errors
from .idmap import IdMap

GATE = operator.attrgetter("gate")  # an operation's gate, through its property
_QUBITS = operator.attrgetter("qubits")


def _stored_readers():
    """Readers of the attributes in which `cirq.GateOperation` keeps the gate and qubits that its
    properties return, or None where a made operation shows otherwise (another Cirq)."""
    op = cirq.GateOperation(cirq.X, (cirq.LineQubit(0),))
    stored = getattr(op, "__dict__", {})
    if stored.get("_gate") is op.gate and stored.get("_qubits") is op.qubits:
        return operator.attrgetter("_gate"), operator.attrgetter("_qubits")
    return None


_STORED = _stored_readers()
_PROPERTIES = (vars(cirq.GateOperation).get("gate"), vars(cirq.GateOperation).get("qubits"))
_READS_STORED: Dict[type, bool] = {}  # operation type -> whether its gate and qubits are GateOperation's


def _reads_stored(kind: type) -> bool:
    """Whether `kind.gate` and `kind.qubits` are GateOperation's own properties (GateOperation and
    subclasses that leave them, such as Cirq's single-qubit Pauli operations): then they return
    the stored attributes."""
    found = _READS_STORED.get(kind)
    if found is None:
        found = _READS_STORED[kind] = (getattr(kind, "gate", None) is _PROPERTIES[0]
                                       and getattr(kind, "qubits", None) is _PROPERTIES[1])
    return found


def readers(ops):
    """(gate of, qubits of): how to read a run of operations' gates and qubits. Where every one's
    type reads them through GateOperation's properties, the attributes those return: a read in C,
    not a call of a Python property (about a tenth of a 10k-qubit Cirq compile). Any other type
    (one that overrides the properties too) is read through its properties."""
    if _STORED is not None and all(map(_reads_stored, set(map(type, ops)))):
        return _STORED
    return GATE, _QUBITS


class RepVar:
    """The repetition-id path component of a loop while its body is walked."""

    __slots__ = ("loop_id", "ids")

    def __init__(self, loop_id: int, ids: Sequence[str]):
        self.loop_id = loop_id
        self.ids = list(ids)

    def __repr__(self) -> str:
        return f"<repetition of loop {self.loop_id}>"


def render(key: Tuple) -> str:
    """A key's name: its components joined by ':' (a key of one name, stimcirq's "0", "1", ..., is
    that name, without a join)."""
    return key[0] if len(key) == 1 and key[0].__class__ is str else ":".join(map(str, key))


class Scope:
    """Where a (sub)circuit is walked: its qubit indices, key path, key maps and resolvers."""

    __slots__ = ("qidx", "path", "kmaps", "resolvers", "starts", "_known", "_by_id", "_held")

    def __init__(self, qidx: Dict, path: Tuple = (), kmaps: Tuple = (), resolvers: Tuple = (),
                 starts: Tuple[int, ...] = ()):
        self.qidx = qidx
        self.path = path
        self.kmaps = kmaps  # innermost first
        self.resolvers = resolvers  # innermost first
        self.starts = starts  # starts[i]: serial from which keys with an (i+1)-long path bind
        self._known: Optional[Dict[int, int]] = None  # id(qubit object) -> index, see `indices`
        self._by_id: Optional[IdMap] = None  # the same, for arrays of ids
        self._held: List = []  # qubit objects met that are not keys of qidx (their ids stay valid)

    def indices(self, ops, qubits_of=None) -> np.ndarray:
        """The indices of the operations' qubits, one operation after another (int64; KeyError for
        a qubit outside the scope). Looked up by object identity, the whole array at once (`IdMap`):
        no qubit's hash (a Python method) is called, nor its memory read; a qubit object met first
        is looked up by value once. `qubits_of`: the reader `readers(ops)` gives, where known."""
        if qubits_of is None:
            qubits_of = readers(ops)[1]
        ids = np.fromiter(map(id, itertools.chain.from_iterable(map(qubits_of, ops))), np.int64)
        if self._known is None:
            self._known = {id(q): i for q, i in self.qidx.items()}
        if self._by_id is None:
            self._by_id = IdMap.of(self._known)
        found, every = self._by_id.lookup(ids)
        if every:
            return found
        self._by_id = None
        for q in itertools.chain.from_iterable(map(qubits_of, ops)):  # objects not met before
            if id(q) not in self._known:
                self._known[id(q)] = self.qidx[q]  # (KeyError: a qubit outside the scope)
                self._held.append(q)
        return self.indices(ops, qubits_of)

    def key_of(self, mkey: cirq.MeasurementKey, mapped: bool = True) -> Tuple:
        name = mkey.name
        if mapped:
            for kmap in self.kmaps:
                name = kmap.get(name, name)
        return self.path + tuple(mkey.path) + (name,)

    @staticmethod
    def key_as_written(mkey: cirq.MeasurementKey) -> Tuple:
        """The key of a measurement that Cirq's protocols do not see: no scope applies to it."""
        return tuple(mkey.path) + (mkey.name,)


class Entry:
    __slots__ = ("slots", "nest", "serial")

    def __init__(self, slots: np.ndarray, nest: Tuple[int, ...], serial: int):
        self.slots = slots
        self.nest = nest
        self.serial = serial


class PendingRead:
    """A read (condition or annotation) of a key whose latest instance precedes open loops."""

    def __init__(self, key: Tuple, slots: np.ndarray, depth: int, levels: int, where: str,
                 finish: Callable[[int], None], all_levels: bool):
        self.key = key
        self.slots = slots.copy()
        self.depth = depth  # loops shared with the instance read
        self.levels = levels  # loops opened since
        self.where = where
        self.finish = finish  # called with the final depth
        self.all_levels = all_levels  # annotations: every loop must re-measure the key
        self.included: List[int] = []


class LoopFrame:
    __slots__ = ("loop_id", "count", "var", "measured", "pending")

    def __init__(self, loop_id: int, count: int, var: Optional[RepVar]):
        self.loop_id = loop_id
        self.count = count
        self.var = var
        self.measured: List[Tuple] = []
        self.pending: List[PendingRead] = []


class Run:
    """A closed loop's body instances of a key, one per iteration, without listing them: `parts`
    (slot arrays or inner Runs, in body order) repeated `count` times, `stride` records apart,
    the first at record shift `offset`."""

    __slots__ = ("parts", "sizes", "count", "stride", "offset", "size")

    def __init__(self, parts: List, count: int, stride: int, offset: int = 0):
        self.parts = parts
        self.sizes = [_size(part) for part in parts]
        self.count, self.stride, self.offset = count, stride, offset
        self.size = count * sum(self.sizes)

    def at(self, p: int) -> np.ndarray:
        """The slots of the p-th instance (execution order)."""
        i, r = divmod(p, self.size // self.count)
        for part, n in zip(self.parts, self.sizes):
            if r < n:
                return _at(part, r) + (self.offset + i * self.stride)
            r -= n
        raise IndexError(p)


def _size(item) -> int:
    return item.size if type(item) is Run else 1


def _at(item, p: int) -> np.ndarray:
    return item.at(p) if type(item) is Run else item


class KeyTable:
    def __init__(self):
        self.entries: Dict[Tuple, Entry] = {}
        # Every instance of a key, oldest first (for index < -1 reads): (iteration-0 slots or a
        # Run of them, loops open at it). A closing loop folds its body's instances into a Run.
        self.instances: Dict[Tuple, List[Tuple[object, Tuple[int, ...]]]] = {}
        self.frames: List[LoopFrame] = []
        self.serial = 0
        # Measurements not yet made entries: (keys, their slots, loops open, serial before them).
        # They become entries when a key is first read or a loop closes (`_settle`): a QEC circuit
        # measures tens of thousands of keys and reads none of them (a d = 25 surface code: 9 ms).
        self._unsettled: List[Tuple[Sequence[Tuple], Sequence[np.ndarray], Tuple[int, ...], int]] = []

    # -- measurements -------------------------------------------------------------------------
    def nest(self) -> Tuple[int, ...]:
        return tuple(f.loop_id for f in self.frames) if self.frames else ()

    def measured(self, key: Tuple, slots: np.ndarray) -> None:
        self.measured_many((key,), (slots,))

    def measured_many(self, keys: Sequence[Tuple], slots: Sequence[np.ndarray]) -> None:
        """Each key measured in turn, with its slots (an entry of each when one is next read)."""
        self._unsettled.append((keys, slots, self.nest(), self.serial))
        self.serial += len(keys)
        if self.frames:
            self.frames[-1].measured.extend(keys)

    def _settle(self) -> None:
        """The entries and instances of the measurements `measured_many` deferred, in their order."""
        entries, instances = self.entries, self.instances
        for keys, slots, nest, serial in self._unsettled:
            for key, arr in zip(keys, slots):
                serial += 1
                entries[key] = Entry(arr, nest, serial)
                instances.setdefault(key, []).append((arr, nest))
        self._unsettled.clear()

    def names(self, key: Tuple) -> Optional[List[str]]:
        """Per-iteration names of a key with repetition components (None if it has none)."""
        if RepVar not in map(type, key):
            return None
        position = {f.var: i for i, f in enumerate(self.frames) if f.var is not None}
        out = []
        for combo in itertools.product(*[range(f.count) for f in self.frames]):
            out.append(":".join(c.ids[combo[position[c]]] if type(c) is RepVar else str(c)
                                for c in key))
        return out

    # -- reads --------------------------------------------------------------------------------
    def bind(self, scope: Scope, tail: Tuple) -> Optional[Tuple]:
        """Cirq's scoping: the longest scope-path prefix under which the key was measured in
        reach (keys of sibling subcircuits do not bind), else the key as written."""
        if self._unsettled:
            self._settle()
        path = scope.path
        for i in range(len(path), 0, -1):
            cand = path[:i] + tail
            e = self.entries.get(cand)
            if e is not None and e.serial > scope.starts[i - 1]:
                return cand
        return tail if tail in self.entries else None

    def read(self, key: Tuple, where: str, finish: Callable[[int], None],
             all_levels: bool, index: int = -1) -> Tuple[np.ndarray, int]:
        """(iteration-0 slots, depth) of the key's latest instance (`index` -1; -2 the one before,
        ...). When the instance precedes open loops, `finish(depth)` is called once they close
        with the final depth."""
        if self._unsettled:
            self._settle()
        if index != -1:
            return self._read_older(key, where, index)
        e = self.entries[key]
        d = len(e.nest)
        c = len(self.frames)
        if d < c:
            pending = PendingRead(key, e.slots, d, c - d, where, finish, all_levels)
            for f in self.frames[d:]:
                f.pending.append(pending)
        return e.slots, d

    def _read_older(self, key: Tuple, where: str, index: int) -> Tuple[np.ndarray, int]:
        items = self.instances.get(key, [])
        back = -index  # instances from the end, the one read included
        for item, _ in reversed(items if index < 0 else ()):
            n = _size(item)
            if back <= n:
                if self.frames:
                    raise errors.UnsupportedOperationError(
                        f"{where} reads instance {index} of key {render(key)!r} across a loop; "
                        "earlier instances (index < -1) are read only outside loops")
                return _at(item, n - back), 0
            back -= n
        raise errors.MeasurementKeyError(
            f"{where} reads instance {index} of key {render(key)!r}, which has been measured "
            f"{sum(_size(item) for item, _ in items)} times before it")

    # -- loops --------------------------------------------------------------------------------
    def open_loop(self, loop_id: int, count: int, ids: Optional[Sequence[str]]) -> Optional[RepVar]:
        var = RepVar(loop_id, ids) if ids is not None else None
        self.frames.append(LoopFrame(loop_id, count, var))
        return var

    def close_loop(self, stride: int) -> None:
        if self._unsettled:
            self._settle()
        frame = self.frames.pop()
        level = len(self.frames)
        for pending in frame.pending:
            e = self.entries.get(pending.key)
            inside = e is not None and len(e.nest) > level and e.nest[level] == frame.loop_id
            if inside:
                if e.slots.shape != pending.slots.shape or not np.array_equal(
                        e.slots - stride, pending.slots):
                    raise errors.UnsupportedOperationError(
                        f"{pending.where} reads key {render(pending.key)!r} inside a loop that "
                        "measures it again later in its body; from the second iteration on it "
                        "would read the previous iteration's instance, which is not a fixed "
                        "record shift from the first one")
                pending.included.append(level)
            if level == pending.depth:  # outermost loop of the read: decide its depth
                t = len(pending.included)
                if sorted(pending.included) != list(range(pending.depth, pending.depth + t)):
                    raise errors.UnsupportedOperationError(
                        f"{pending.where} reads key {render(pending.key)!r} across loops that "
                        "re-measure it in a way no fixed record shift expresses")
                if pending.all_levels and t != pending.levels:
                    raise errors.UnsupportedOperationError(
                        f"{pending.where} (inside a loop) reads key {render(pending.key)!r} "
                        "measured before the loop and not again inside it; annotations in a "
                        "loop can only read records that shift with the loop")
                pending.finish(pending.depth + t)
        parent = self.frames[-1] if self.frames else None
        count = frame.count
        for key in dict.fromkeys(frame.measured):
            e = self.entries.get(key)
            if e is None or len(e.nest) <= level or e.nest[level] != frame.loop_id:
                continue
            self._fold_instances(key, frame, level, stride)
            nest = e.nest[:level] + e.nest[level + 1:]
            if frame.var is not None and frame.var in key:
                del self.entries[key]
                for i, rep_id in enumerate(frame.var.ids):
                    new_key = tuple(rep_id if c is frame.var else c for c in key)
                    self.entries[new_key] = Entry(e.slots + i * stride, nest, e.serial)
                    if parent is not None:
                        parent.measured.append(new_key)
            else:
                e.slots = e.slots + (count - 1) * stride
                e.nest = nest
                if parent is not None:
                    parent.measured.append(key)

    def _fold_instances(self, key: Tuple, frame: LoopFrame, level: int, stride: int) -> None:
        """Fold the body's instances of `key` (the tail of its list) into one Run per key name:
        one for a plain key, one per iteration's name where the key has repetition ids."""
        items = self.instances.get(key, [])
        start = len(items)
        while start > 0 and len(items[start - 1][1]) > level and items[start - 1][1][level] == frame.loop_id:
            start -= 1
        if start == len(items):
            return
        nest = items[start][1][:level] + items[start][1][level + 1:]
        parts = [item for item, _ in items[start:]]
        del items[start:]
        if frame.var is None or frame.var not in key:
            items.append((Run(parts, frame.count, stride), nest))
            return
        for i, rep_id in enumerate(frame.var.ids):
            name = tuple(rep_id if c is frame.var else c for c in key)
            self.instances.setdefault(name, []).append((Run(parts, 1, stride, i * stride), nest))
        if not items:
            self.instances.pop(key, None)
