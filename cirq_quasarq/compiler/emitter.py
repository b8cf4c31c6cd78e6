"""What a lowering sees of a compilation: the `Emitter`.

A lowering that writes instructions itself (a measurement records bits under a key, a feedback
reads an earlier record, ...) is called as ``lowering(em, op, gate, scope, at)``: `em` is this
class (the walk in `walker.py` extends it), `scope` says where the operation sits (`keys.Scope`),
and `at` is the operation's `Cursor`, which places each of its instructions as soon as possible
per qubit. Everything a lowering may use is defined here; rows go through `em.b`, the
`core.program.ProgramBuilder`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import cirq
import numpy as np
import sympy

from .. import errors
from ..core import opcodes
from ..core.program import ProgramBuilder
from .keys import KeyTable, Scope, render
from .params import resolve_chain


@dataclasses.dataclass
class Slot:
    """A parametrized operation of a template: its placeholder rows (ids into the template's row
    index) or, for noise, the channel id to fill in."""

    kind: str  # "unitary" | "noise" | "sweep"
    op: Any  # the operation as written (parametrized)
    resolvers: Tuple  # its CircuitOperations' resolvers, innermost first
    qubits: Sequence[int]  # program qubit index per op qubit
    rows: Tuple[int, ...]
    where: str
    channel: int


class Cursor:
    """Positions of one operation's instructions within the open moment: each goes after
    `base` and after the operation's earlier instructions on the same qubits."""

    __slots__ = ("free", "base")

    def __init__(self, base: int = 0):
        self.free = {}  # qubit -> first free position
        self.base = base

    def place(self, qs) -> int:
        p = self.base
        free = self.free
        for q in qs:
            v = free.get(q)
            if v is not None and v > p:
                p = v
        for q in qs:
            free[q] = p + 1
        return p

    def after(self, base: int) -> "Cursor":
        """A cursor sharing this one's qubits that starts no earlier than `base`."""
        child = Cursor(max(self.base, base))
        child.free = self.free
        return child


class Emitter:
    """One compilation's state. mode "template": parametrized ops become slots; "resolve": they
    are resolved with `resolver` on the way."""

    def __init__(self, qubits: Tuple, mode: str = "template", resolver=None):
        self.qubits = tuple(qubits)
        self.b = ProgramBuilder(len(self.qubits))
        self.mode = mode
        self.resolver = cirq.ParamResolver(resolver) if mode == "resolve" else None
        self.keys = KeyTable()
        self.controls: Tuple = ()  # (condition, scope) pairs of the enclosing classical controls
        self.loc: list = []  # moment indices of the walk, outermost first
        self.slots: List[Slot] = []  # template mode: the parametrized operations
        self._slot_count = 0
        self.top_circuit = None  # for cirq_samples_terminally
        self.noisy = False
        self._terminal: Optional[bool] = None
        self.accumulators: Dict[int, int] = {}  # observable index -> the qubit its Pauli terms go to
        self._pauli_terms: List[Tuple[int, int, int, int]] = []  # the open moment's (code, qubit, index, cond)

    # -- where, and errors naming it --------------------------------------------------------------
    def where(self) -> str:
        if not self.loc:
            return "the circuit"
        text = f"moment {self.loc[0]}"
        for m in self.loc[1:]:
            text += f" (subcircuit moment {m})"
        return text

    def fail(self, cls, op, what: str):
        raise cls(f"cannot compile {op!r} at {self.where()}: {what}")

    # -- classical control ------------------------------------------------------------------------
    @property
    def controlled(self) -> bool:
        """True inside a classical control (rows get its condition)."""
        return self.b.cond >= 0

    @property
    def loop_depth(self) -> int:
        return len(self.keys.frames)

    @contextlib.contextmanager
    def under(self, cond: int, controls: Tuple):
        """Rows written inside get condition `cond`; `controls` are the conditions it combines."""
        saved = self.b.cond, self.controls
        self.b.cond, self.controls = cond, controls
        try:
            yield
        finally:
            self.b.cond, self.controls = saved

    def cirq_samples_terminally(self) -> bool:
        """Whether Cirq's simulators would sample this circuit's measurements at the end (a
        unitary prefix, then only MeasurementGates: SimulatorBase._run) instead of acting on
        them one by one; the two paths order confusion and inversion differently."""
        if self._terminal is None:
            self._terminal = (not self.noisy and self.top_circuit is not None
                              and samples_terminally(self.top_circuit))
        return self._terminal

    # -- Pauli terms of observables ---------------------------------------------------------------
    def pauli_term(self, q: int, letter: str, index: int) -> None:
        """A Pauli target of observable `index` on qubit `q`: as Stim's samplers, the observable
        flips where the frame anticommutes with it, nothing collapses. A FRAME_PARITY row XORs that
        parity into the X frame of the observable's own qubit (past the circuit's; measured where
        detection events are sampled, `Program.with_pauli_readout`), after the moment's other rows
        (`end_moment`), as stimcirq writes the annotation after its moment's operations."""
        self._pauli_terms.append((opcodes.CODE["FRAME_PARITY_" + letter], q, index, self.b.cond))

    def end_moment(self) -> None:
        """Close the open moment, its Pauli terms last."""
        if self._pauli_terms:
            at = Cursor(self.b.max_pos() + 1)
            for code, q, index, cond in self._pauli_terms:
                acc = self.accumulators.get(index)
                if acc is None:
                    acc = self.accumulators[index] = self.b.add_qubit()
                self.b.emit(code, q, acc, cond=cond, pos=at.place((q, acc)))
            self._pauli_terms = []
        self.b.end_moment()

    # -- parameters -------------------------------------------------------------------------------
    def resolve_symbol(self, symbol, scope: Scope, op):
        """The value of a sweep symbol in resolve mode (a named error if it stays free)."""
        value = resolve_chain(sympy.Symbol(str(symbol)), scope.resolvers, self.resolver)
        if isinstance(value, sympy.Basic) and value.free_symbols:
            self.fail(errors.UnsupportedOperationError, op, f"unresolved sweep symbol {symbol}")
        return value

    def template_slot(self, kind: str, op, scope: Scope, qs, size: int, at: Cursor, channel: int = -1) -> None:
        """Template mode: `size` placeholder rows that `Template.resolve` fills in later."""
        rows = []
        for _ in range(size):
            rows.append(self._slot_count)
            self.b.placeholder(qs[0], self._slot_count, at.place(qs))
            self._slot_count += 1
        self.slots.append(Slot(kind, op, scope.resolvers, qs, tuple(rows), self.where(), channel))

    # -- keys -------------------------------------------------------------------------------------
    def register_key(self, key: Tuple, slots) -> None:
        arr = np.asarray(slots, dtype=np.int64)
        names = self.keys.names(key)
        self.b.add_key(render(key), arr, names=names)
        self.keys.measured(key, arr)

    def register_keys(self, keys: Sequence[Tuple], slots: Sequence[np.ndarray]) -> None:
        """`register_key` of each key in turn, with its int64 array of slots."""
        if self.keys.frames:  # in a loop a key may name each iteration: one by one
            for key, arr in zip(keys, slots):
                self.register_key(key, arr)
            return
        self.b.add_keys(list(map(render, keys)), slots)
        self.keys.measured_many(keys, slots)

    def read_key(self, scope: Scope, mkey: cirq.MeasurementKey, op, mapped: bool, finish, all_levels: bool,
                 index: int = -1):
        """(slots, depth) of an instance of a key (the latest for index -1) as seen from `scope`."""
        name = mkey.name
        if mapped:
            for kmap in scope.kmaps:
                name = kmap.get(name, name)
        tail = tuple(mkey.path) + (name,)
        key = self.keys.bind(scope, tail)
        if key is None:
            raise errors.MeasurementKeyError(
                f"{op!r} at {self.where()} reads measurement key {render(tail)!r}, which is not "
                "measured before it")
        return self.keys.read(key, f"{op!r} at {self.where()}", finish, all_levels, index)


def _has_unitary(op) -> bool:
    """cirq.has_unitary, False where Cirq cannot tell: it decomposes operations, and some raise on
    the way (stimcirq's noisy measurements: NotImplementedError). Such an operation is no unitary
    prefix, so the circuit is sampled gate by gate, as its measurement would have to be."""
    try:
        return cirq.has_unitary(op)
    except (NotImplementedError, TypeError, ValueError):
        return False


def samples_terminally(circuit) -> bool:
    blocked: set = set()
    for moment in circuit:
        for op in moment.operations:
            if not blocked.intersection(op.qubits) and _has_unitary(op):
                continue
            if not isinstance(op.gate, cirq.MeasurementGate):
                return False
            blocked.update(op.qubits)
    return True
