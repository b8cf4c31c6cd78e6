"""The Program: what the compiler hands to the scheduler and engines (no Cirq objects inside).

A Program is a struct of NumPy arrays. `instructions` is int32 [N, NUM_FIELDS]; one row per
instruction, with these columns:

- ``OP``: opcode (`core.opcodes`).
- ``A``, ``B``: targets. Arity-1/2 opcodes: qubit indices (``B`` = -1 for one qubit). Arity-0
  opcodes (``E``, ``CONFUSION``): ``A`` = start, ``B`` = count into ``ext_qubits``; for
  ``CONFUSION`` the targets are records: ``A`` is the first record slot (shifted like ``REC``).
  ``REPEAT`` / ``END_REPEAT``: ``A`` = loop id.
- ``REC``: record slot written by M / MR, as it is on every enclosing loop's iteration 0; at run
  time add ``sum(i_l * loops.rec_stride[l])`` over the enclosing loops. -1 when none.
- ``RAND``: random slot (coins, frame randomisation, noise draws), shifted the same way with
  ``loops.rand_stride``. -1 when none.
- ``AUX``: channel id (NOISE), confusion id (CONFUSION); -1 otherwise (a template's placeholder
  rows carry -2 - slot until `Program.patched` fills them).
- ``COND``: condition id (classical control) or -1.
- ``FLAGS``: bit 0: invert the recorded bit (Cirq's invert_mask, -P in Pauli measurements).
- ``STEP``: compile-time layer; instructions with the same STEP act on disjoint qubits (the
  scheduler relies on this to layer whole groups at once).

Record and random slots are "slot counters": a loop body of ``rec_stride`` records advances the
record base by ``rec_stride`` per iteration, so nothing is ever unrolled.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import itertools
import operator
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import UnsupportedOperationError
from . import opcodes
from .ranges import expand_ranges, ragged_rows

OP, A, B, REC, RAND, AUX, COND, FLAGS, STEP = range(9)
NUM_FIELDS = 9
_ROW = np.dtype((np.void, 4 * NUM_FIELDS))  # an int32 row as one element (to sort rows)
FLAG_INVERT = 1
# `Program.derived` key that a compiler sets when each row's STEP is its as-soon-as-possible layer
# already: every row placed at the next free position of its qubits (after the last row on any of
# them), all in one open step, and no barrier. Its value is (that step's STEP, the rows it speaks
# of: `Program.rows`): a row's layer is STEP - STEP of the step + 1, what the scheduler would find
# (tests/test_schedule.py holds the two equal), so `schedule` takes the layers from STEP, but only
# while the Program's rows are that very object (rows set anew on the same Program keep its
# `derived` dict; a copy starts with an empty one).
LAYERED_FROM = "layered_from_step"


class RowBlocks:
    """A table of rows given as consecutive blocks (int32 [k, NUM_FIELDS] each), joined into one
    table only when something reads it as one (`joined`): a builder's rows come as many blocks,
    and a first call's schedule and device read them block by block, so the join (a copy of every
    row into fresh memory: 25 MB at 10k qubits, 252 MB at 100k) is often never needed."""

    __slots__ = ("_blocks", "_joined", "_rows")

    def __init__(self, blocks: Sequence[np.ndarray]):
        self._blocks: Optional[List[np.ndarray]] = [b for b in blocks if len(b)]
        self._joined: Optional[np.ndarray] = None
        self._rows = sum(len(b) for b in self._blocks)

    def __len__(self) -> int:
        return self._rows

    @property
    def is_joined(self) -> bool:
        return self._blocks is None

    @property
    def blocks(self) -> List[np.ndarray]:
        """The blocks in order (the joined table alone once joined)."""
        blocks = self._blocks
        return [self._joined] if blocks is None else blocks

    def joined(self) -> np.ndarray:
        """The rows as one table (joined once; a join in another thread at the same time is harmless:
        the table is set before the blocks go)."""
        table = self._joined
        if table is None:
            blocks = self._blocks
            if blocks is None:
                return self._joined
            table = (np.concatenate(blocks) if len(blocks) > 1 else np.ascontiguousarray(blocks[0]) if blocks
                     else np.zeros((0, NUM_FIELDS), dtype=np.int32))
            self._joined = table
            self._blocks = None
        return table

    def __array__(self, dtype=None, copy=None):
        table = self.joined() if dtype is None else self.joined().astype(dtype, copy=False)
        return table.copy() if copy else table

    def __repr__(self) -> str:
        return f"RowBlocks({self._rows} rows, {'joined' if self._blocks is None else f'{len(self._blocks)} blocks'})"


def joined_rows(rows) -> np.ndarray:
    """`rows` (an int32 table or a RowBlocks) as one table."""
    return rows.joined() if isinstance(rows, RowBlocks) else rows


def row_blocks(rows) -> List[np.ndarray]:
    """`rows` (an int32 table or a RowBlocks) as its blocks, without joining them."""
    return rows.blocks if isinstance(rows, RowBlocks) else [rows]


def take_rows(rows: np.ndarray, order: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """int32 [k, NUM_FIELDS] rows in `order` (into `out` when given, a contiguous [k, NUM_FIELDS]):
    gathered as one element a row (a faster gather than of [k, NUM_FIELDS] ints)."""
    whole = np.ascontiguousarray(rows, dtype=np.int32).view(_ROW).ravel()
    if out is None:
        return np.take(whole, order).view(np.int32).reshape(-1, NUM_FIELDS)
    np.take(whole, order, out=out.view(_ROW).ravel())
    return out


def _by_position(rows: np.ndarray, pos: np.ndarray, top: int, out: Optional[np.ndarray] = None):
    """(rows, pos) ordered by position, each position's rows in the order given (a stable sort;
    int16 keys where the positions fit); the rows into `out` when given."""
    order = np.argsort(pos.astype(np.int16) if top < 1 << 15 else pos, kind="stable")
    return take_rows(rows, order, out), pos[order]


# The builder's sorted rows are views of blocks of rows that grow from _POOL_FIRST rows to _POOL_MOST
# (`ProgramBuilder._kept`): NumPy asks the kernel for huge pages for an array of 4 MiB or more, so the
# rows of a large compile fault in one 2 MiB page at a time, not 512 small ones; a small compile's
# few rows stay on small pages.
_POOL_FIRST = 1 << 16  # rows (2.25 MiB)
_POOL_MOST = 1 << 20  # rows (36 MiB)


@dataclasses.dataclass
class Channel:
    """A Pauli channel on `arity` qubits: outcome k applies paulis[k] with probability probs[k].

    Paulis are `core.paulis` letters (0=I, 1=X, 2=Y, 3=Z) per target position. The identity
    outcome is implicit."""

    arity: int
    probs: np.ndarray  # float64 [m]
    paulis: np.ndarray  # uint8 [m, arity]

    @property
    def total(self) -> float:
        return float(np.sum(self.probs))


@dataclasses.dataclass
class Confusion:
    """A classical channel on k consecutive records: matrix[true, recorded] (big-endian values,
    the first record is the most significant bit, as Cirq's confusion_map)."""

    num_bits: int
    matrix: np.ndarray  # float64 [2**k, 2**k], rows sum to 1


@dataclasses.dataclass
class Condition:
    """A classical condition on record bits: true for assignment `a` when table[a] is set, where
    bit i of `a` is the value of record refs[i]. A ref is (record slot at iteration 0, depth):
    at run time add the record shift of the `depth` outermost enclosing loops."""

    refs: np.ndarray  # int64 [k, 2]
    table: np.ndarray  # bool [2**k]


@dataclasses.dataclass
class Loop:
    count: int
    rec_stride: int  # records written by one iteration of the body
    rand_stride: int  # random slots used by one iteration of the body
    depth: int  # 1 for a loop at top level


@dataclasses.dataclass
class MeasurementKey:
    """Where a Cirq measurement key's bits live: records[instance, qubit] = absolute record slot."""

    key: str
    records: np.ndarray  # int64 [instances, qubits]


class RecordKeys(collections.abc.Sequence):
    """The keys of a program whose every record is its own key (a Stim circuit's: key str(r) for
    record slot r, its instances over the loops around it), as `MeasurementKey`s made on first use.

    A distance-51 surface code has 7,801 of them. Made with the program, they were 3-6 ms of its
    compile, and as objects the cyclic garbage collector tracks they were most of what a compile
    left alive: every few such compiles set off a full collection of the process (about 100 ms with
    Cirq imported), in whichever call then ran. Sampling reads no key; Cirq's results do."""

    def __init__(self, slots: np.ndarray, nests: List[Tuple[int, np.ndarray]]):
        self._slots = slots  # int64 [keys]: each key's record slot in its first iteration
        self._nests = nests  # per run of keys in one loop nest: (how many, record shift per iteration)
        self._made: Optional[List[MeasurementKey]] = None

    def _keys(self) -> List[MeasurementKey]:
        if self._made is None:
            made: List[MeasurementKey] = []
            names = map(str, self._slots.tolist())
            at = 0
            for count, shifts in self._nests:
                block = self._slots[at:at + count, None] + shifts[None, :]  # [keys, iterations]
                made.extend(map(MeasurementKey, itertools.islice(names, count), block[:, :, None]))
                at += count
            self._made = made
        return self._made

    def __len__(self) -> int:
        return len(self._slots)

    def __getitem__(self, index):
        return self._keys()[index]

    def __iter__(self):
        return iter(self._keys())

    def __repr__(self) -> str:
        return f"RecordKeys({len(self)} keys)"


@dataclasses.dataclass
class Annotation:
    """A stimcirq detector / observable: which absolute records it XORs, with its coordinates."""

    kind: str  # "detector" | "observable"
    records: np.ndarray  # int64 [k]
    coords: Tuple[float, ...] = ()
    index: int = 0  # observable index


class Annotations(collections.abc.Sequence):
    """Detectors or observables held as arrays, read as a sequence of `Annotation`: annotation i
    XORs records[offsets[i]:offsets[i + 1]], its coordinates are coords[i, :widths[i]] and its
    index indexes[i]. `+` concatenates (with lists of Annotation too)."""

    def __init__(self, kind: str, offsets, records, coords=None, widths=None, indexes=None):
        self.kind = kind
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.records = np.asarray(records, dtype=np.int64)
        m = len(self.offsets) - 1
        self.coords = np.zeros((m, 0)) if coords is None else np.asarray(coords, dtype=np.float64)
        self.widths = np.zeros(m, dtype=np.int64) if widths is None else np.asarray(widths, dtype=np.int64)
        self.indexes = np.zeros(m, dtype=np.int64) if indexes is None else np.asarray(indexes, dtype=np.int64)

    @classmethod
    def of(cls, items) -> "Annotations":
        """The table of a sequence of Annotation (an Annotations is returned as it is)."""
        if isinstance(items, Annotations):
            return items
        items = list(items)
        lengths = [len(a.records) for a in items]
        width = max((len(a.coords) for a in items), default=0)
        coords = np.zeros((len(items), width))
        for i, a in enumerate(items):
            coords[i, : len(a.coords)] = a.coords
        records = (np.concatenate([np.asarray(a.records, dtype=np.int64) for a in items]) if items
                   else np.zeros(0, dtype=np.int64))
        kinds = {a.kind for a in items}
        return cls(kinds.pop() if len(kinds) == 1 else "mixed", np.concatenate([[0], np.cumsum(lengths)]), records,
                   coords, [len(a.coords) for a in items], [a.index for a in items])

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            picked = np.arange(len(self))[i]
            return self._take(picked)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        lo, hi = self.offsets[i], self.offsets[i + 1]
        return Annotation(self.kind, self.records[lo:hi], tuple(self.coords[i, : self.widths[i]].tolist()),
                          int(self.indexes[i]))

    def _take(self, picked: np.ndarray) -> "Annotations":
        """The annotations `picked` (indices), in that order."""
        lengths = np.diff(self.offsets)[picked]
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        _, at = expand_ranges(self.offsets[picked], lengths)
        return Annotations(self.kind, offsets, self.records[at], self.coords[picked], self.widths[picked],
                           self.indexes[picked])

    def __add__(self, other) -> "Annotations":
        other = Annotations.of(other)
        width = max(self.coords.shape[1], other.coords.shape[1])
        coords = np.zeros((len(self) + len(other), width))
        coords[: len(self), : self.coords.shape[1]] = self.coords
        coords[len(self):, : other.coords.shape[1]] = other.coords
        return Annotations(self.kind if self.kind == other.kind else "mixed",
                           np.concatenate([self.offsets, other.offsets[1:] + self.offsets[-1]]),
                           np.concatenate([self.records, other.records]), coords,
                           np.concatenate([self.widths, other.widths]), np.concatenate([self.indexes, other.indexes]))

    def __radd__(self, other) -> "Annotations":
        return Annotations.of(other) + self

    def __eq__(self, other) -> bool:
        if isinstance(other, Annotations) or isinstance(other, (list, tuple)):
            mine, theirs = list(self), list(other)
            return len(mine) == len(theirs) and all(
                a.kind == b.kind and np.array_equal(a.records, b.records) and a.coords == b.coords and a.index == b.index
                for a, b in zip(mine, theirs))
        return NotImplemented

    def coordinates(self):
        """{i: [coordinates of annotation i]} (Stim's get_detector_coordinates)."""
        rows = self.coords.tolist()
        return {i: row[:w] for i, (row, w) in enumerate(zip(rows, self.widths.tolist()))}

    def __repr__(self) -> str:
        return f"Annotations({self.kind!r}, {len(self)} of them, {len(self.records)} records)"


def channel_entry(arity: int, probs: Sequence[float], paulis: Sequence[Sequence[int]]) -> Tuple[tuple, Channel]:
    """A Pauli channel's key (equal channels share one id: `ProgramBuilder.channel_id`) and the
    Channel, its outcomes of probability 0 dropped; paulis as core.paulis letters."""
    probs_arr = np.asarray(probs, dtype=np.float64)
    paulis_arr = np.asarray(paulis, dtype=np.uint8).reshape(len(probs_arr), arity)
    keep = probs_arr > 0
    probs_arr, paulis_arr = probs_arr[keep], paulis_arr[keep]
    return (arity, probs_arr.tobytes(), paulis_arr.tobytes()), Channel(arity, probs_arr, paulis_arr)


@dataclasses.dataclass(eq=False)  # identity semantics: simulators cache per Program object
class Program:
    num_qubits: int
    instructions: np.ndarray  # int32 [N, NUM_FIELDS]; given as a RowBlocks, joined when first read (`rows`)
    num_records: int  # after every loop has run
    num_rand_slots: int
    ext_qubits: np.ndarray  # int32: targets of arity-0 opcodes
    ext_paulis: np.ndarray  # uint8: Pauli per ext target where meaningful
    channels: List[Channel]
    confusions: List[Confusion]
    conditions: List[Condition]
    loops: List[Loop]
    keys: Sequence[MeasurementKey]  # a list, or RecordKeys
    detectors: Sequence[Annotation] = dataclasses.field(default_factory=list)  # an Annotations when built
    observables: Sequence[Annotation] = dataclasses.field(default_factory=list)
    qubits: Tuple = ()  # the Cirq qubits, index i is qubit i (kept for results only)
    # Global phases (complex128 [P]; NaN: unknown): a unitary row with AUX = p >= 0 multiplies the
    # state by phases[p] besides its opcode's canonical unitary; base_phase is the phase of
    # gates on no qubit in a program of no qubits. Only the final-state replay reads them.
    phases: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.complex128))
    base_phase: complex = 1.0 + 0j
    # moment_rows[m] is the first row of the user's moment m (program order), moment_rows[-1] the
    # number of rows: moment steps run one moment's rows at a time.
    moment_rows: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    moment_records: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    # Observables with Pauli terms (Stim's OBSERVABLE_INCLUDE of Pauli targets) as (index, qubit):
    # FRAME_PARITY rows XOR each term's frame parity into the X frame of its index's qubit, which
    # `with_pauli_readout()` measures after everything. Here the observables hold their records
    # alone: the terms change no record (Stim's measurement sampler and m2d ignore them too).
    pauli_observables: Tuple[Tuple[int, int], ...] = ()
    # What is derived from the program alone (its schedule, its reference sample, its frame plan)
    # is kept here, so every simulator and seed shares it and it is freed with the program. It may
    # depend on the instructions, keys, conditions and confusions but never on the channels'
    # probabilities: a template's resolutions that differ only in those share one dict (assigned
    # after construction); what carries channels is kept by the channels it was made with
    # (`with_pauli_readout`). Not an argument: every new Program, a dataclasses.replace copy too,
    # starts with an empty one, so a copy with other rows never inherits a schedule or a reference.
    derived: Dict[str, object] = dataclasses.field(default_factory=dict, repr=False, init=False)

    def moment(self, m: int) -> "Program":
        """The rows of the user's moment m alone, with every table of the whole program (slots,
        records, loops and conditions keep their numbers)."""
        lo, hi = int(self.moment_rows[m]), int(self.moment_rows[m + 1])
        return dataclasses.replace(self, instructions=self.instructions[lo:hi])

    @property
    def num_instructions(self) -> int:
        return len(self._rows)

    @property
    def rows(self):
        """The instructions as given: the table, or the RowBlocks it is joined from when first read
        as `instructions` (what `schedule` reads without joining)."""
        return self._rows

    def patched(self, rows: np.ndarray, ops: np.ndarray, a: np.ndarray, b: np.ndarray, aux: np.ndarray,
                channels: List[Channel], phases: Sequence[complex] = ()) -> "Program":
        """A copy whose rows `rows` get new OP / A / B / AUX (a template's parametrized operations,
        resolved; AUX = len(self.phases) + i names `phases[i]`) and whose channels are `channels`."""
        ins = self.instructions.copy()
        ins[rows, OP], ins[rows, A], ins[rows, B], ins[rows, AUX] = ops, a, b, aux
        all_phases = np.concatenate([self.phases, np.asarray(phases, dtype=np.complex128)])
        return dataclasses.replace(self, instructions=ins, channels=channels, phases=all_phases)

    def with_pauli_readout(self) -> "Program":
        """What sampling detection events and observable flips runs: this program, then an M of
        each `pauli_observables` qubit (records after every other, no key) included in its
        observable. The program itself when it has no Pauli terms; made once and kept with it.

        The readout program carries this program's channels, which `derived` must not hold: sweep
        points that differ only in the channels' probabilities share `derived` (a template's
        resolutions), so each point's readout is kept beside the channels it was made with, and a
        point without one gets a copy of another's with its own channels (the copy shares the
        other's `derived`: the same rows). Kept as one readout had been, a noise sweep's detection
        events would all have had the first point's noise."""
        if not self.pauli_observables:
            return self
        kept = self.derived.setdefault("pauli_readouts", [])  # (channels, readout), the latest last
        for channels, readout in kept:
            if channels is self.channels:
                return readout
        if kept:  # another point's: the same rows; its channels (and a template's phases) this point's
            other = kept[-1][1]
            readout = dataclasses.replace(other, channels=self.channels, phases=self.phases, base_phase=self.base_phase)
            readout.derived = other.derived
        else:
            k = len(self.pauli_observables)
            readout = {index: self.num_records + i for i, (index, _) in enumerate(self.pauli_observables)}
            rows = np.full((k, NUM_FIELDS), -1, dtype=np.int32)
            rows[:, OP] = opcodes.CODE["M"]
            rows[:, A] = [q for _, q in self.pauli_observables]
            rows[:, REC] = self.num_records + np.arange(k)
            rows[:, RAND] = self.num_rand_slots + np.arange(k)
            rows[:, FLAGS] = 0
            rows[:, STEP] = int(self.instructions[:, STEP].max()) + 1 if len(self.instructions) else 0
            observables = Annotations.of([
                Annotation("observable", np.append(o.records, readout[o.index]) if o.index in readout else o.records,
                           o.coords, o.index) for o in self.observables])
            moment_rows, moment_records = self.moment_rows.copy(), self.moment_records.copy()
            moment_rows[-1], moment_records[-1] = len(self.instructions) + k, self.num_records + k
            readout = dataclasses.replace(
                self, instructions=np.concatenate([self.instructions, rows]), num_records=self.num_records + k,
                num_rand_slots=self.num_rand_slots + k, observables=observables, pauli_observables=(),
                moment_rows=moment_rows, moment_records=moment_records)
        kept.append((self.channels, readout))
        del kept[:-_READOUTS_KEPT]
        return readout

    @classmethod
    def of_rows(cls, num_qubits: int, instructions: np.ndarray, num_records: int) -> "Program":
        """A Program of bare rows of unitaries and collapses: no channels, conditions, loops,
        external targets, keys or annotations (a piece of a program streamed to an engine)."""
        return cls(num_qubits=num_qubits, instructions=instructions, num_records=num_records, num_rand_slots=0,
                   ext_qubits=np.zeros(0, dtype=np.int32), ext_paulis=np.zeros(0, dtype=np.uint8), channels=[],
                   confusions=[], conditions=[], loops=[], keys=[])

    def differs_only_in_probabilities(self, other: "Program") -> bool:
        """Whether `other` is this program but for its channels' probabilities (the same rows,
        tables, keys and annotations; channels of the same Paulis): then it may share this one's
        `derived`, which never depends on them (a noise sweep's circuits, compiled one by one)."""
        if (self.num_qubits, self.num_records, self.num_rand_slots, len(self.rows), len(self.channels)) != \
                (other.num_qubits, other.num_records, other.num_rand_slots, len(other.rows), len(other.channels)):
            return False
        if not all(a.arity == b.arity and len(a.probs) == len(b.probs) and _same(a.paulis, b.paulis)
                   for a, b in zip(self.channels, other.channels)):
            return False
        return all(_same(getattr(self, f.name), getattr(other, f.name)) for f in dataclasses.fields(self)
                   if f.name not in ("channels", "derived"))

    def needs_branching(self) -> bool:
        """True when one Pauli-frame pass cannot express the program: a classically controlled
        instruction that is not a Pauli (or identity) gate (engines/branching.py). Found once a
        program (a sampling call asks up to three times)."""
        found = self.derived.get("needs_branching")
        if found is None and not self.conditions:  # a row's COND is a condition's id
            found = self.derived["needs_branching"] = False
        if found is None:
            controlled = self.instructions[self.instructions[:, COND] >= 0, OP]
            pauli = [opcodes.CODE[n] for n in ("I", "X", "Y", "Z")]
            found = self.derived["needs_branching"] = bool((~np.isin(controlled, pauli)).any())
        return found


_READOUTS_KEPT = 8  # sweep points whose readout programs a shared `derived` keeps
_SAME_ROWS_AT_ONCE = 1 << 16  # rows compared at a time by `_same`: unequal programs differ early


def _same(a, b) -> bool:
    """Equality of two parts of programs: arrays by dtype, shape and value (NaN equal to NaN),
    dataclasses field by field, sequences item by item, our tables by their arrays."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, RowBlocks):
        a, b = a.joined(), b.joined()
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        nan = a.dtype.kind in "fc"
        if not a.ndim:
            return bool(np.array_equal(a, b, equal_nan=nan))
        return all(np.array_equal(a[i : i + _SAME_ROWS_AT_ONCE], b[i : i + _SAME_ROWS_AT_ONCE], equal_nan=nan)
                   for i in range(0, max(1, len(a)), _SAME_ROWS_AT_ONCE))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(_same, a, b))
    if dataclasses.is_dataclass(a):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, Annotations):
        return a.kind == b.kind and all(_same(getattr(a, name), getattr(b, name))
                                        for name in ("offsets", "records", "coords", "widths", "indexes"))
    if isinstance(a, RecordKeys):
        return _same(a._slots, b._slots) and _same(a._nests, b._nests)
    return a == b


def _instructions(self) -> np.ndarray:
    rows = self._rows
    return rows.joined() if type(rows) is RowBlocks else rows


def _set_instructions(self, rows) -> None:
    self._rows = rows


# `instructions` is read through `rows`, which may be a RowBlocks (the builder's), joined on first read
Program.instructions = property(_instructions, _set_instructions,
                                doc="int32 [N, NUM_FIELDS]: the rows in program order (joined on first read).")


def _coord_add(a: Tuple[float, ...], b: Tuple[float, ...]) -> Tuple[float, ...]:
    n = max(len(a), len(b))
    return tuple((a[i] if i < len(a) else 0.0) + (b[i] if i < len(b) else 0.0) for i in range(n))


class ProgramBuilder:
    """The only writer of instruction rows: appends instructions while tracking record / random
    slots, loop nesting and steps.

    Rows are written in moments: `next_step()` (alias `begin_moment()`) opens a moment at a new
    STEP; a row at position p of the open moment gets STEP = moment step + p, and rows are kept
    grouped by position (all position-0 rows of the moment, then position 1, ...), so that rows
    sharing a STEP are contiguous and act on disjoint qubits (the scheduler layers them at once).
    Positions come from the caller (the compiler places each operation's instructions as soon as
    possible per qubit); tests and benchmarks simply write at position 0 of a fresh step.

    `cond` is the classical condition rows get unless a call names one (-1: unconditional).
    Slots inside a loop body are numbered for iteration 0; the loop's strides are computed when
    it ends."""

    def __init__(self, num_qubits: int):
        self.num_qubits = num_qubits
        self._flat: List[int] = []  # rows, NUM_FIELDS ints each, up to the open moment's position 0
        self._flat_final = 0  # the first so many ints of _flat: rows of ended moments
        self._buckets: List[List[int]] = []  # rows at positions 1, 2, ... of the open moment
        # Once `emit_rows` writes a block into the open moment, the moment keeps its rows as blocks
        # in the order written (`_pieces`; `emit` then collects rows in `_pending`), each sorted by
        # position (a stable sort) when written, as (rows, lowest position, rows per position from
        # it); its end takes their rows position by position: the same order as the buckets give.
        self._pieces: Optional[List[Tuple[np.ndarray, int, np.ndarray]]] = None
        self._pending: List[int] = []
        self._top = 0  # the highest position written in the open moment, while it keeps blocks
        self._blocks: List[np.ndarray] = []  # finished [k, NUM_FIELDS] blocks, in order
        self._block_rows = 0  # rows in `_blocks`
        self._pool: Optional[np.ndarray] = None  # the block `_kept` hands out rows of, and its rows handed out
        self._pool_used = 0
        self._unwritten: Optional[Callable[[], None]] = None  # rows handed over unwritten: `add_sorted`
        self.step = 0  # STEP of the open moment's position 0
        self.cond = -1
        self.phases: List[complex] = []
        self._phase_ids: Dict[complex, int] = {}
        self.base_phase = 1.0 + 0j
        self.num_records = 0
        self.num_rand = 0
        self.ext_qubits: List[int] = []
        self.ext_paulis: List[int] = []
        self.channels: List[Channel] = []
        self._channel_ids: Dict[Tuple, int] = {}
        self.confusions: List[Confusion] = []
        self.conditions: List[Condition] = []
        self.loops: List[Loop] = []
        self._open_loops: List[Tuple[int, int, int]] = []  # (loop id, records at start, rand at start)
        # Deferred until the enclosing loops close (their strides are known only then):
        # (key, iteration-0 records [k], open loop ids)
        self._key_entries: List[Tuple[str, np.ndarray, Tuple[int, ...]]] = []
        # (kind, iteration-0 records [k], open loop ids, coords, observable index, event): `event` is
        # the annotation's place in execution order (iteration-0 numbering inside loops, as records)
        self._annotation_entries: List[Tuple[str, np.ndarray, Tuple[int, ...], Tuple[float, ...], int, int]] = []
        # Detectors and observable includes given in bulk, deferred as well: (open loop ids, record
        # offsets [m + 1], iteration-0 records, coords [m, w], widths [m], events [m]) and (open
        # loop ids, observable index per record, iteration-0 records, index per include).
        self._detector_blocks: List[Tuple[Tuple[int, ...], np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                          np.ndarray]] = []
        self._observable_blocks: List[Tuple[Tuple[int, ...], np.ndarray, np.ndarray, np.ndarray]] = []
        self._named_keys = False  # add_key / add_keys used: keys may merge by name when expanded
        self.num_events = 0  # annotations declared so far, in execution order (loops expanded)
        self._event_start: Dict[int, int] = {}  # per open loop: num_events at its start
        self._event_strides: Dict[int, int] = {}  # per closed loop: annotations of one iteration
        # Per-iteration names of key entries (Cirq's repetition ids): entry index -> names.
        self._key_names: Dict[int, List[str]] = {}
        # Detector coordinate offset (stimcirq ShiftCoordsAnnotation) and, per loop, its offset
        # at the loop's start and its growth per iteration.
        self.coord_offset: Tuple[float, ...] = ()
        self._coord_start: Dict[int, Tuple[float, ...]] = {}
        self._coord_strides: Dict[int, Tuple[float, ...]] = {}
        self._coord_shift_cache: Dict[Tuple[int, ...], np.ndarray] = {}

    # -- moments and the one row writer ----------------------------------------------------
    def end_moment(self) -> None:
        """Move the open moment's later positions after its position-0 rows (each a new STEP)."""
        if self._pieces is not None:
            self._close_blocks()
            return
        for bucket in self._buckets:
            self._flat.extend(bucket)
            self.step += 1
        self._buckets = []
        self._flat_final = len(self._flat)  # rows of ended moments, final (`settle`)

    def _pending_block(self) -> None:
        if self._pending:
            rows = np.fromiter(self._pending, dtype=np.int32).reshape(-1, NUM_FIELDS)
            self._pending = []
            self._add_piece(rows, rows[:, STEP] - self.step)

    def _kept(self, k: int) -> np.ndarray:
        """Room for k rows that the builder keeps: a view of its current block of rows (see _POOL_FIRST)."""
        pool = self._pool
        if pool is None or len(pool) - self._pool_used < k:
            grown = min(_POOL_MOST, 2 * len(pool)) if pool is not None else _POOL_FIRST
            pool = self._pool = np.empty((max(k, grown), NUM_FIELDS), dtype=np.int32)
            self._pool_used = 0
        self._pool_used += k
        return pool[self._pool_used - k:self._pool_used]

    def _add_piece(self, rows: np.ndarray, pos: np.ndarray, shared: bool = False) -> None:
        """Keep rows of the open moment, sorted by position `pos` while they are in the processor's
        caches (sorting a moment's rows at its end took longer than building them): STEP set, or
        with `shared` (rows not to be written into) set here on the sorted copy the builder keeps."""
        if len(pos) > 1 and not (pos[1:] >= pos[:-1]).all():
            rows, pos = _by_position(rows, pos, self._top, self._kept(len(rows)))
        elif shared:
            kept = self._kept(len(rows))
            kept[...] = rows
            rows = kept
        if shared:
            rows[:, STEP] = self.step + pos
        lo = int(pos[0])
        self._pieces.append((rows, lo, np.bincount(pos - lo) if pos[-1] > lo else np.array([len(rows)])))

    def _open_blocks(self) -> None:
        """The open moment keeps its rows as blocks from now on (see __init__)."""
        self._flush()  # earlier moments and this one's position-0 rows come first whatever follows
        self._pieces = [(np.fromiter(bucket, dtype=np.int32).reshape(-1, NUM_FIELDS), p + 1,
                         np.array([len(bucket) // NUM_FIELDS])) for p, bucket in enumerate(self._buckets) if bucket]
        self._top = len(self._buckets)
        self._buckets = []

    def _close_blocks(self) -> None:
        """End the open moment: its rows by position, each position's in the order written. Its
        pieces' rows go to `_blocks` position by position, as views (`build` copies them once); a
        moment of many pieces on many positions (a few rows a view) is sorted as one block instead."""
        self._pending_block()
        pieces = self._pieces
        top, step = self._top, self.step
        self.step += top
        self._pieces, self._top = None, 0
        rows = sum(len(p) for p, _, _ in pieces)
        if not rows:
            return
        cuts = sum(int(np.count_nonzero(counts)) for _, _, counts in pieces)
        if cuts > max(64, rows // 32):
            self._rows_written()
            whole = np.concatenate([p for p, _, _ in pieces])
            pos = whole[:, STEP] - step
            if not (pos[1:] >= pos[:-1]).all():
                whole = _by_position(whole, pos, top, self._kept(len(whole)))[0]
            self._append_block(whole)
            return
        by_pos: List[List[np.ndarray]] = [[] for _ in range(top + 1)]
        for piece, lo, counts in pieces:
            start = 0
            for p, end in enumerate(np.cumsum(counts).tolist()):
                if end > start:
                    by_pos[lo + p].append(piece[start:end])
                    start = end
        self._blocks.extend(block for blocks in by_pos for block in blocks)
        self._block_rows += rows

    def next_step(self) -> int:
        """Close the open moment and open a new one; returns its STEP."""
        self.end_moment()
        self.step += 1
        return self.step

    begin_moment = next_step

    def max_pos(self) -> int:
        """The highest position written in the open moment."""
        return len(self._buckets) if self._pieces is None else self._top

    def _bucket(self, pos: int) -> List[int]:
        """The list that rows written at position `pos` of the open moment extend."""
        if self._pieces is not None:
            if pos > self._top:
                self._top = pos
            return self._pending
        if pos == 0:
            return self._flat
        buckets = self._buckets
        while len(buckets) < pos:
            buckets.append([])
        return buckets[pos - 1]

    def emit(self, op: int, a: int = -1, b: int = -1, rec: int = -1, rand: int = -1, aux: int = -1,
             flags: int = 0, cond: Optional[int] = None, pos: int = 0) -> None:
        """Write one row at position `pos` of the open moment."""
        self._bucket(pos).extend((op, a, b, rec, rand, aux, self.cond if cond is None else cond, flags,
                                  self.step + pos))

    def lowered(self, rows: Sequence[Tuple[int, int, int, int, int, int]], qubits: Sequence, index: Dict) -> None:
        """The compiler's fast path: rows (opcode, local a, local b, position, aux, random) of a
        lowered gate on `qubits` (program indices `index[qubit]`); random = 1 takes a random slot
        (a Pauli channel, aux its channel); a unitary's aux is its phase id or -1."""
        cond, step = self.cond, self.step
        flat = self._flat if self._pieces is None else self._pending
        for code, la, lb, pos, aux, random in rows:
            a = index[qubits[la]]
            b = index[qubits[lb]] if lb >= 0 else -1
            if random:
                rand = self.num_rand
                self.num_rand = rand + 1
                row = (code, a, b, -1, rand, aux, cond, 0, step + pos)
            else:
                row = (code, a, b, -1, -1, aux, cond, 0, step + pos)
            if pos:
                self._bucket(pos).extend(row)
            else:
                flat.extend(row)

    def emit_rows(self, rows: np.ndarray, pos: np.ndarray) -> None:
        """Write a block of rows (int32 [k, NUM_FIELDS]; its STEP column is set here) at positions
        `pos` of the open moment: the same rows, in the same order, as k calls of `emit`."""
        if not len(rows):
            return
        self._open_rows()
        rows[:, STEP] = self.step + pos
        self._top = max(self._top, int(pos.max()))
        self._add_piece(rows, pos)

    def emit_shared_rows(self, rows: np.ndarray, pos: np.ndarray, chunk: int) -> None:
        """`emit_rows` of rows the builder must not write into (a mapped file's): it keeps sorted copies
        of `chunk` rows at a time (each sort in the processor's caches), STEP set on the copies. The
        same rows in the same order as `emit_rows` of each chunk in turn."""
        if not len(rows):
            return
        self._open_rows()
        self._top = max(self._top, int(pos.max()))
        for r0 in range(0, len(rows), chunk):
            self._add_piece(rows[r0:r0 + chunk], pos[r0:r0 + chunk], shared=True)

    def kept_rows(self, k: int) -> np.ndarray:
        """Room for k rows of the open moment that the caller writes sorted by position, STEP set,
        then hands over with `add_sorted` (the compiled path's `emit_rows`)."""
        self._open_rows()
        return self._kept(k)

    def add_sorted(self, rows: np.ndarray, low: int, counts: np.ndarray,
                   written: Optional[Callable[[], None]] = None) -> None:
        """Keep rows written into `kept_rows`' room: `counts[p]` of them at position low + p, in
        order. What `emit_rows` keeps of the same rows given unsorted. `written`: where the rows are
        still being written (by another thread), what returns once they and every row handed over
        before them are; the builder calls it before it reads rows (`_rows_written`)."""
        self._top = max(self._top, low + len(counts) - 1)
        self._pieces.append((rows, low, counts))
        if written is not None:
            self._unwritten = written

    def _rows_written(self) -> None:
        """Wait for the rows `add_sorted` took before they were written (see there)."""
        if self._unwritten is not None:
            written, self._unwritten = self._unwritten, None
            written()

    def _open_rows(self) -> None:
        if self._pieces is None:
            self._open_blocks()
        self._pending_block()

    def gate_layer(self, codes: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
        """A whole layer of unitary opcodes on disjoint qubits at position 0 of a new step, in one
        block (benchmarks building large circuits)."""
        step = self.next_step()
        block = np.full((len(codes), NUM_FIELDS), -1, dtype=np.int32)
        block[:, OP], block[:, A], block[:, B] = codes, a, b
        block[:, FLAGS], block[:, STEP] = 0, step
        self._flush()
        self._append_block(block)

    def block(self, op, a, b=-1, rec=-1, rand=-1, aux=-1, flags=0) -> np.ndarray:
        """Rows (int32 [k, NUM_FIELDS], k = len(a)) for `emit_rows`, each field a value for all rows
        or an array of k; their condition is the builder's `cond`."""
        rows = np.empty((len(a), NUM_FIELDS), dtype=np.int32)
        rows[:, COND] = self.cond
        for field, value in ((OP, op), (A, a), (B, b), (REC, rec), (RAND, rand), (AUX, aux), (FLAGS, flags)):
            rows[:, field] = value
        return rows

    def _append_block(self, rows: np.ndarray) -> None:
        self._blocks.append(rows)
        self._block_rows += len(rows)

    def _flush(self) -> None:
        if self._flat:
            flat = self._flat
            self._append_block(np.fromiter(flat, dtype=np.int32, count=len(flat)).reshape(-1, NUM_FIELDS))
            self._flat = []
        self._flat_final = 0

    def settle(self, below: Optional[int] = None) -> None:
        """Make the open moment's rows at positions below `below` final (the caller knows no later
        row goes there: every qubit's next free position is at least `below`), or with None end
        the moment: they join the finished rows (`rows_since`) in the order the moment's end would
        give them, and the Program is the same (a compile that hands its rows on as it goes)."""
        if below is None:
            self.end_moment()
            self._flush()
            return
        if self._pieces is None:
            if below < 1:  # only the rows of moments already ended
                done, self._flat = self._flat[:self._flat_final], self._flat[self._flat_final:]
                self._flat_final = 0
                if done:
                    self._append_block(np.fromiter(done, dtype=np.int32, count=len(done)).reshape(-1, NUM_FIELDS))
                return
            for i in range(min(below - 1, len(self._buckets))):  # bucket i: position i + 1
                self._flat.extend(self._buckets[i])
                self._buckets[i] = []  # kept: the moment's end counts one step a bucket
            self._flush()
            return
        self._pending_block()
        by_pos: List[List[np.ndarray]] = [[] for _ in range(max(0, below))]
        kept = []
        for piece, lo, counts in self._pieces:
            if lo >= below:
                kept.append((piece, lo, counts))
                continue
            start = 0
            for p, end in enumerate(np.cumsum(counts[: below - lo]).tolist()):
                if end > start:
                    by_pos[lo + p].append(piece[start:end])
                    start = end
            if start < len(piece):
                kept.append((piece[start:], below, counts[below - lo:]))
        self._pieces = kept
        for blocks in by_pos:
            for block in blocks:
                self._append_block(block)

    def rows_since(self, mark: int) -> Tuple[RowBlocks, int]:
        """(the finished rows written since `mark`, in their final order, as blocks (joined when
        read as one table); the mark to give next time: 0 the first time). `settle` says what is
        finished."""
        self._rows_written()
        return RowBlocks(self._blocks[mark:]), len(self._blocks)

    def num_rows(self) -> int:
        """Rows written so far (the open moment's later positions not counted)."""
        done = self._block_rows + len(self._flat) // NUM_FIELDS
        if self._pieces is not None:
            self._pending_block()
            done += sum(int(counts[0]) for _, lo, counts in self._pieces if lo == 0)
        return done

    def add_qubit(self) -> int:
        """One more qubit, past the others (a compiler's scratch qubit); returns its index."""
        self.num_qubits += 1
        return self.num_qubits - 1

    def take_records(self, k: int) -> int:
        start = self.num_records
        self.num_records += k
        return start

    def take_rand(self, k: int = 1) -> int:
        start = self.num_rand
        self.num_rand += k
        return start

    # -- typed helpers ----------------------------------------------------------------------
    def gate(self, name: str, q0: int, q1: int = -1, cond: Optional[int] = None, pos: int = 0) -> None:
        self.emit(opcodes.CODE[name], q0, q1, cond=cond, pos=pos)

    def measure(self, q: int, invert: bool = False, reset: bool = False, cond: Optional[int] = None,
                pos: int = 0) -> int:
        """Z measurement (MR when reset); returns its record slot (iteration-0 numbering)."""
        rec = self.take_records(1)
        self.emit(opcodes.CODE["MR" if reset else "M"], q, -1, rec, self.take_rand(), -1,
                  FLAG_INVERT if invert else 0, cond, pos)
        return rec

    def reset(self, q: int, cond: Optional[int] = None, pos: int = 0) -> None:
        self.emit(opcodes.CODE["R"], q, -1, -1, self.take_rand(), cond=cond, pos=pos)

    def phase_id(self, c: complex) -> int:
        """The id of global phase c in this program's phase table (-1 for c = 1)."""
        c = complex(c)
        if abs(c - 1) < 1e-12:
            return -1
        key = complex(round(c.real, 12), round(c.imag, 12)) if c == c else "nan"
        if key not in self._phase_ids:
            self._phase_ids[key] = len(self.phases)
            self.phases.append(c)
        return self._phase_ids[key]

    def phase_row(self, phase: int, pos: int = 0) -> None:
        """A global phase of a gate on no qubit: an `I` row on qubit 0 carrying it, or, in a program
        of no qubits (no measurement, no control), a factor of base_phase per loop iteration."""
        if phase < 0:
            return
        if self.num_qubits:
            self.emit(opcodes.CODE["I"], 0, -1, aux=phase, pos=pos)
            return
        times = 1
        for loop_id, _, _ in self._open_loops:
            times *= self.loops[loop_id].count
        self.base_phase *= self.phases[phase] ** times

    def placeholder(self, q: int, slot: int, pos: int = 0) -> None:
        """An `I` row on q marked (AUX = -2 - slot) for a parametrized operation's later patch."""
        self.emit(opcodes.CODE["I"], q, -1, aux=-2 - slot, pos=pos)

    def channel_id(self, arity: int, probs: Sequence[float], paulis: Sequence[Sequence[int]]) -> int:
        """The id of a Pauli channel (equal channels share one); paulis as core.paulis letters."""
        key, channel = channel_entry(arity, probs, paulis)
        if key not in self._channel_ids:
            self._channel_ids[key] = len(self.channels)
            self.channels.append(channel)
        return self._channel_ids[key]

    def channel_slot(self, arity: int) -> int:
        """A new, empty channel whose probabilities a parametrized operation fills in later."""
        self.channels.append(Channel(arity, np.zeros(0, dtype=np.float64), np.zeros((0, arity), dtype=np.uint8)))
        return len(self.channels) - 1

    def noise(self, name: str, qubits: Sequence[int], channel: int, cond: Optional[int] = None,
              pos: int = 0, ext_paulis: Optional[Sequence[int]] = None) -> None:
        """A Pauli channel instruction. Arity-0 opcodes (E) list their targets (and, for a single
        Pauli product, that product) in ext_qubits / ext_paulis."""
        op = opcodes.BY_NAME[name]
        if op.arity == 0:
            start = len(self.ext_qubits)
            self.ext_qubits.extend(int(q) for q in qubits)
            self.ext_paulis.extend(ext_paulis if ext_paulis is not None else [0] * len(qubits))
            self.emit(op.code, start, len(qubits), -1, self.take_rand(), channel, cond=cond, pos=pos)
        else:
            q1 = int(qubits[1]) if op.arity == 2 else -1
            self.emit(op.code, int(qubits[0]), q1, -1, self.take_rand(), channel, cond=cond, pos=pos)

    def confusion(self, first_record: int, matrix: np.ndarray, pos: int = 0) -> None:
        """A classical channel on the k = log2(len(matrix)) records from `first_record` on."""
        k = int(round(np.log2(matrix.shape[0])))
        self.confusions.append(Confusion(k, np.asarray(matrix, dtype=np.float64)))
        self.emit(opcodes.CODE["CONFUSION"], first_record, k, first_record, self.take_rand(),
                  len(self.confusions) - 1, pos=pos)

    def flip_confusions(self, probabilities: Sequence[float]) -> int:
        """Confusions of one record each, flipping it with each probability in turn (their
        CONFUSION rows written by the caller); returns the first one's id."""
        first = len(self.confusions)
        self.confusions.extend(Confusion(1, np.array([[1 - p, p], [p, 1 - p]])) for p in probabilities)
        return first

    def condition(self, refs: Sequence[Tuple[int, int]], table: Sequence[bool]) -> int:
        self.conditions.append(Condition(np.asarray(refs, dtype=np.int64).reshape(-1, 2),
                                         np.asarray(table, dtype=bool)))
        return len(self.conditions) - 1

    @property
    def depth(self) -> int:
        return len(self._open_loops)

    def begin_loop(self, count: int) -> int:
        loop_id = len(self.loops)
        self.loops.append(Loop(count=count, rec_stride=0, rand_stride=0, depth=self.depth + 1))
        self.next_step()
        self.emit(opcodes.CODE["REPEAT"], loop_id, -1, cond=-1)
        self._open_loops.append((loop_id, self.num_records, self.num_rand))
        self._coord_start[loop_id] = self.coord_offset
        self._event_start[loop_id] = self.num_events
        self.next_step()
        return loop_id

    def end_loop(self) -> None:
        loop_id, rec0, rand0 = self._open_loops.pop()
        loop = self.loops[loop_id]
        loop.rec_stride = self.num_records - rec0
        loop.rand_stride = self.num_rand - rand0
        # Slots of later iterations follow iteration 0's.
        self.num_records = rec0 + loop.rec_stride * loop.count
        self.num_rand = rand0 + loop.rand_stride * loop.count
        events0 = self._event_start.pop(loop_id)
        self._event_strides[loop_id] = self.num_events - events0
        self.num_events = events0 + self._event_strides[loop_id] * loop.count
        start = self._coord_start.pop(loop_id, ())
        if self.coord_offset != start:
            stride = _coord_add(self.coord_offset, tuple(-c for c in start))
            self._coord_strides[loop_id] = stride
            self.coord_offset = _coord_add(start, tuple(c * loop.count for c in stride))
        self.next_step()
        self.emit(opcodes.CODE["END_REPEAT"], loop_id, -1, cond=-1)
        self.next_step()

    def _open_ids(self) -> Tuple[int, ...]:
        return tuple(loop_id for loop_id, _, _ in self._open_loops) if self._open_loops else ()

    def add_key(self, key: str, records: Sequence[int], names: Optional[Sequence[str]] = None) -> None:
        """One measurement of a Cirq key on len(records) qubits (iteration-0 record slots).

        `names`, when given, names the key per iteration of the open loops (execution order, as
        `_shifts`), for keys that Cirq prefixes with repetition ids; `key` is then only a label."""
        self._named_keys = True
        self._key_entries.append((key, np.asarray(records, dtype=np.int64), self._open_ids()))
        if names is not None:
            self._key_names[len(self._key_entries) - 1] = list(names)

    def add_keys(self, keys: Sequence[str], records: Sequence[np.ndarray]) -> None:
        """`add_key` of each key in turn, with its int64 records (no per-iteration names)."""
        opened = self._open_ids()
        self._named_keys = True
        self._key_entries.extend((key, r, opened) for key, r in zip(keys, records))

    def add_record_keys(self, first: int, count: int) -> None:
        """Keys str(r) for the single records r in [first, first + count) (iteration-0 slots): what
        `add_key(str(r), (r,))` for each r in order does."""
        if count:
            self._key_entries.append((None, np.arange(first, first + count, dtype=np.int64), self._open_ids()))

    def shift_coords(self, shift: Sequence[float]) -> None:
        """Add to the coordinate offset of later detectors (Stim's SHIFT_COORDS); inside a loop
        the offset keeps growing per iteration."""
        self.coord_offset = _coord_add(self.coord_offset, tuple(float(c) for c in shift))

    def add_annotation(self, kind: str, records: Sequence[int], coords: Tuple[float, ...] = (),
                       index: int = 0) -> None:
        """A detector, or an include into logical observable `index` (Stim's OBSERVABLE_INCLUDE,
        stimcirq's CumulativeObservableAnnotation), over iteration-0 record slots; one instance per
        iteration of the open loops."""
        if kind == "observable" and index < 0:
            raise ValueError(f"observable index {index} < 0")
        self._annotation_entries.append(
            (kind, np.asarray(records, dtype=np.int64), self._open_ids(), tuple(coords), int(index),
             self.num_events))
        self.num_events += 1

    def add_detectors(self, offsets: np.ndarray, records: np.ndarray, coords: np.ndarray, widths: np.ndarray) -> None:
        """Detectors in bulk, what `add_annotation("detector", ...)` of each in turn does: detector i
        XORs iteration-0 records[offsets[i]:offsets[i + 1]] (int64), its coordinates are
        coords[i, :widths[i]] (float64 [m, max(widths)], zeros past a row's width)."""
        m = len(offsets) - 1
        if m > 0:
            events = np.arange(self.num_events, self.num_events + m, dtype=np.int64)
            self._detector_blocks.append((self._open_ids(), offsets, records, coords, widths, events))
            self.num_events += m

    def add_observable_includes(self, indexes: np.ndarray, offsets: np.ndarray, records: np.ndarray) -> None:
        """Includes in bulk, what `add_annotation("observable", ...)` of each does: include i adds
        iteration-0 records[offsets[i]:offsets[i + 1]] (int64) to observable indexes[i]."""
        if len(indexes):
            if indexes.min() < 0:
                raise ValueError(f"observable index {int(indexes.min())} < 0")
            self._observable_blocks.append((self._open_ids(), np.repeat(indexes, np.diff(offsets)), records, indexes))

    def _shifts(self, loop_ids: Tuple[int, ...], strides: Optional[Dict[int, int]] = None) -> np.ndarray:
        """Record shifts (or, with `strides`, those per loop) of every iteration of the given nest,
        in execution order."""
        shifts = np.zeros(1, dtype=np.int64)
        for loop_id in loop_ids:
            loop = self.loops[loop_id]
            stride = loop.rec_stride if strides is None else strides[loop_id]
            steps = stride * np.arange(loop.count, dtype=np.int64)
            shifts = (shifts[:, None] + steps[None, :]).reshape(-1)
        return shifts

    def _coord_offsets(self, loop_ids: Tuple[int, ...]) -> Optional[np.ndarray]:
        """Per iteration of the nest (execution order) the coordinate offset the loops' SHIFT_COORDS
        add, float64 [iterations, width]; None when no loop of the nest shifts coordinates."""
        if not any(self._coord_strides.get(i) for i in loop_ids):
            return None
        cache = self._coord_shift_cache
        offsets = cache.get(loop_ids)
        if offsets is None:
            width = max(len(self._coord_strides.get(i, ())) for i in loop_ids)
            offsets = np.zeros((1, width))
            for loop_id in loop_ids:
                stride = np.zeros(width)
                got = self._coord_strides.get(loop_id, ())
                stride[: len(got)] = got
                steps = np.arange(self.loops[loop_id].count)[:, None] * stride[None, :]
                offsets = (offsets[:, None, :] + steps[None, :, :]).reshape(-1, width)
            cache[loop_ids] = offsets
        return offsets

    def _expand_keys(self) -> Sequence[MeasurementKey]:
        if not self._named_keys:
            found = self._record_keys()
            if found is not None:
                return found
        else:
            found = self._keys_outside_loops()
            if found is not None:
                return found
        grouped: Dict[str, List[np.ndarray]] = {}
        nests: Dict[Tuple[int, ...], np.ndarray] = {}  # loop ids -> their record shifts, as a column
        for index, (key, records, loop_ids) in enumerate(self._key_entries):
            shifts = nests.get(loop_ids)
            if shifts is None:
                shifts = nests[loop_ids] = self._shifts(loop_ids)[:, None]
            if key is None:  # add_record_keys: a key of its own per record
                for r in records.tolist():
                    grouped.setdefault(str(r), []).append(shifts + r)
                continue
            block = shifts + records[None, :] if loop_ids else records[None, :]
            names = self._key_names.get(index)
            if names is None:
                grouped.setdefault(key, []).append(block)
            else:
                for name, row in zip(names, block):
                    grouped.setdefault(name, []).append(row[None, :])
        keys = []
        for key, blocks in grouped.items():
            if len(blocks) == 1:  # one entry: its instances already in time order
                keys.append(MeasurementKey(key, blocks[0]))
                continue
            widths = {b.shape[1] for b in blocks}
            if len(widths) > 1:
                raise UnsupportedOperationError(
                    f"measurement key {key!r} is measured on different numbers of qubits {sorted(widths)}")
            recs = np.concatenate(blocks)
            # Record slots grow with time, so sorting restores Cirq's instance order.
            keys.append(MeasurementKey(key, recs[np.argsort(recs[:, 0], kind="stable")]))
        return keys

    def _keys_outside_loops(self) -> Optional[List[MeasurementKey]]:
        """`_expand_keys` when every entry is a named key outside loops (`add_key` without names,
        `add_keys`) and every key has the same width: the entries' records stacked, ordered by key
        (in order of first use) and by first slot at once. None otherwise (the general path, its
        oracle: tests/test_builder_annotations.py). A d = 25 surface code written out in Cirq
        moments has 16,225 entries of 1,873 keys, merged one key at a time in 12 ms."""
        entries = self._key_entries
        names = list(map(operator.itemgetter(0), entries))
        if not entries or self._key_names or any(map(operator.itemgetter(2), entries)) or None in names:
            return None
        records = list(map(operator.itemgetter(1), entries))
        widths = set(map(len, records))
        if len(widths) != 1 or 0 in widths:
            return None
        stacked = np.concatenate(records).reshape(len(records), widths.pop())
        first_use: Dict[str, int] = {}  # key -> the index of its first entry
        which = np.fromiter(map(first_use.setdefault, names, itertools.count()), np.int64, len(names))
        order = np.lexsort((stacked[:, 0], which))  # by key, then in time (record slots grow with it)
        which = which[order]
        blocks = np.split(stacked[order], (np.flatnonzero(which[1:] != which[:-1]) + 1).tolist())
        return list(map(MeasurementKey, first_use, blocks))

    def _record_keys(self) -> Optional[RecordKeys]:
        """`_expand_keys` when every entry is `add_record_keys`': key str(r) per record slot r, its
        instances [iterations, 1], made on first use (`RecordKeys`). None when a slot has two
        entries (the general path merges them)."""
        entries = self._key_entries
        if not entries:
            return RecordKeys(np.zeros(0, dtype=np.int64), [])
        slots = np.concatenate([records for _, records, _ in entries])
        if not (slots[1:] > slots[:-1]).all() and len(np.unique(slots)) != len(slots):
            return None
        nests = [(sum(len(records) for _, records, _ in run), self._shifts(loop_ids))
                 for loop_ids, run in itertools.groupby(entries, key=lambda entry: entry[2])]
        return RecordKeys(slots.astype(np.int64, copy=False), nests)

    def _expand_annotations(self) -> Tuple[Annotations, Annotations]:
        """Detectors one per instance, in execution order; observables as Stim defines them:
        observable k is the XOR of every record any include of k ever named (a record named twice
        cancels), max(k) + 1 of them, an index never included a parity of nothing. Each block of
        detectors (one `add_detectors`, or the `add_annotation` ones of one loop nest) and of includes
        is expanded over its loops' iterations as arrays."""
        detector_blocks = list(self._detector_blocks)
        observable_blocks = list(self._observable_blocks)
        singles: Dict[Tuple[int, ...], List[Tuple[np.ndarray, Tuple[float, ...], int]]] = {}
        for kind, records, loop_ids, coords, index, event in self._annotation_entries:
            if kind == "observable":
                observable_blocks.append((loop_ids, np.full(len(records), index, dtype=np.int64), records,
                                          np.array([index], dtype=np.int64)))
            else:
                singles.setdefault(loop_ids, []).append((records, coords, event))
        for loop_ids, entries in singles.items():
            lengths = [len(records) for records, _, _ in entries]
            widths = np.array([len(coords) for _, coords, _ in entries], dtype=np.int64)
            coords = ragged_rows(np.fromiter(itertools.chain.from_iterable(c for _, c, _ in entries), np.float64,
                                             count=int(widths.sum())), widths)
            detector_blocks.append((loop_ids, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                                    np.concatenate([records for records, _, _ in entries]).astype(np.int64),
                                    coords, widths, np.array([e for _, _, e in entries], dtype=np.int64)))
        return self._expand_detectors(detector_blocks), self._expand_observables(observable_blocks)

    def _expand_detectors(self, blocks) -> Annotations:
        """Detectors one per instance, in execution order. Every block's instances are written
        straight into the result's arrays (sized first), not made apart and concatenated: at
        d = 51 (132,600 detectors) the copies were half of this expansion."""
        if not blocks:
            return Annotations("detector", [0], [])
        width = max(coords.shape[1] for _, _, _, coords, _, _ in blocks)
        shifts_of = [self._shifts(loop_ids) for loop_ids, *_ in blocks]  # [I] per block
        counts = [len(shifts) * len(ev) for shifts, (*_, ev) in zip(shifts_of, blocks)]
        total = sum(counts)
        total_records = sum(len(shifts) * len(recs) for shifts, (_, _, recs, *_) in zip(shifts_of, blocks))
        events = np.empty(total, dtype=np.int64)
        lengths = np.empty(total, dtype=np.int64)
        widths = np.empty(total, dtype=np.int64)
        records = np.empty(total_records, dtype=np.int64)
        coords_out = np.zeros((total, width))
        at = rec_at = 0
        for shifts, count, (loop_ids, offsets, recs, coords, w, ev) in zip(shifts_of, counts, blocks):
            iters = len(shifts)
            event_shifts = self._shifts(loop_ids, self._event_strides)
            np.add(event_shifts[:, None], ev[None, :], out=events[at:at + count].reshape(iters, len(ev)))
            np.add(shifts[:, None], recs[None, :],
                   out=records[rec_at:rec_at + iters * len(recs)].reshape(iters, len(recs)))
            lengths[at:at + count].reshape(iters, len(ev))[:] = np.diff(offsets)[None, :]
            widths[at:at + count].reshape(iters, len(ev))[:] = w[None, :]
            k = coords.shape[1]
            block = coords_out[at:at + count].reshape(iters, len(ev), width)
            block[:, :, :k] = coords[None, :, :]
            loop_offsets = self._coord_offsets(loop_ids) if k else None
            if loop_offsets is not None:  # to each coordinate a detector has, none to the padding
                v = min(k, loop_offsets.shape[1])
                shifted = block[:, :, :v]
                if (w >= v).all():
                    shifted += loop_offsets[:, None, :v]
                else:
                    has = np.arange(v)[None, :] < w[:, None]
                    block[:, :, :v] = np.where(has[None, :, :], shifted + loop_offsets[:, None, :v], shifted)
            at += count
            rec_at += iters * len(recs)
        offsets = np.empty(total + 1, dtype=np.int64)
        offsets[0] = 0
        np.cumsum(lengths, out=offsets[1:])
        detectors = Annotations("detector", offsets, records, coords_out, widths)
        if (events[1:] > events[:-1]).all():  # already in execution order
            return detectors
        return detectors._take(np.argsort(events, kind="stable"))

    def _expand_observables(self, blocks) -> Annotations:
        count = max((int(indexes.max()) + 1 for _, _, _, indexes in blocks), default=0)
        if not count:
            return Annotations("observable", [0], [])
        which, records = [], []
        for loop_ids, index, recs, _ in blocks:
            shifts = self._shifts(loop_ids)
            records.append((shifts[:, None] + recs[None, :]).reshape(-1))
            which.append(np.tile(index, len(shifts)))
        which, records = np.concatenate(which), np.concatenate(records)
        order = np.lexsort((records, which))
        which, records = which[order], records[order]
        # a (observable, record) pair named an odd number of times stays
        first = np.ones(len(order), dtype=bool)
        first[1:] = (which[1:] != which[:-1]) | (records[1:] != records[:-1])
        starts = np.flatnonzero(first)
        odd = starts[np.diff(np.append(starts, len(order))) % 2 == 1]
        which, records = which[odd], records[odd]
        offsets = np.searchsorted(which, np.arange(count + 1))
        return Annotations("observable", offsets, records, np.zeros((count, 0)), np.zeros(count, dtype=np.int64),
                           np.arange(count))

    def build(self, qubits: Tuple = (), moment_rows: Sequence[int] = (), moment_records: Sequence[int] = ()) -> Program:
        assert not self._open_loops, "unbalanced loops"
        self.end_moment()
        self._flush()
        self._rows_written()
        blocks = self._blocks
        ins = (RowBlocks(blocks) if len(blocks) > 1 else np.ascontiguousarray(blocks[0]) if blocks
               else np.zeros((0, NUM_FIELDS), dtype=np.int32))  # many blocks: joined when first read
        keys = self._expand_keys()
        detectors, observables = self._expand_annotations()
        return Program(
            num_qubits=self.num_qubits,
            instructions=ins,
            num_records=self.num_records,
            num_rand_slots=self.num_rand,
            ext_qubits=np.asarray(self.ext_qubits, dtype=np.int32),
            ext_paulis=np.asarray(self.ext_paulis, dtype=np.uint8),
            channels=self.channels,
            confusions=self.confusions,
            conditions=self.conditions,
            loops=self.loops,
            keys=keys,
            detectors=detectors,
            observables=observables,
            qubits=qubits if isinstance(qubits, collections.abc.Sequence) and not isinstance(qubits, list) else tuple(qubits),
            phases=np.asarray(self.phases, dtype=np.complex128),
            base_phase=complex(self.base_phase),
            moment_rows=np.asarray(list(moment_rows) + [len(ins)], dtype=np.int64),
            moment_records=np.asarray(list(moment_records) + [self.num_records], dtype=np.int64),
        )
