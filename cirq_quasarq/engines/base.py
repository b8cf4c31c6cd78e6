"""The one small interface every engine implements (NumPy and CUDA are interchangeable).

Engines see only Program / Schedule arrays and return arrays (records, `core.tableau.InverseTableau`);
Cirq lives in compile and results. Semantics, bit for bit: docs/engine-semantics.md.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Optional, Tuple

import numpy as np

from ..core import rng
from ..core.packed import REDUCTIONS, reduce_rows
from ..core.parities import Parities
from ..core.paulis import letters_of_bits
from ..core.program import Program
from ..core.tableau import InverseTableau
from ..schedule import Schedule
from . import branching


# The reference run's key: every coin is forced to 0 there, so its value does not matter.
REFERENCE_KEY = rng.make_key(0)


def gib(nbytes: float) -> str:
    """Bytes as GiB for memory error messages."""
    return f"{nbytes / 2**30:.2f} GiB"


@dataclasses.dataclass
class TableauRun:
    records: np.ndarray  # uint8 [num_records]: the measured (recorded) bits
    tableau: InverseTableau

    def forward_rows(self, half: str) -> Tuple[np.ndarray, np.ndarray]:
        """One half ("destabilizers" / "stabilizers") of the final state's forward tableau as
        core.paulis letters uint8 [n, n] (row p: generator p over the qubits) and signs bool [n]
        (True: -1). Here from the host tableau; an engine whose tableau stays on its device derives
        them there."""
        xs, zs, rs = self.tableau.forward(half)
        return letters_of_bits(xs, zs), rs


class Engine(abc.ABC):
    """An engine runs a scheduled Program. `key` is rng.make_key(seed)."""

    name: str = "abstract"
    # The most collapses a qubit for which `reference_records` makes the records from the measured
    # rows alone (engines/measured_rows.py; 0: never).
    measured_rows_share: float = 0.0
    # Whether `run_reference_pieces` overlaps the run of a program's pieces with the making of the
    # next (a device that runs while the host compiles); the caller then compiles in pieces.
    streams_pieces: bool = False
    # Whether the host's processors are mostly idle while the engine runs (a device does the work), so
    # that what a later call will need is made ahead on a thread (the Stim layout's check: `shots`).
    works_ahead: bool = False

    @abc.abstractmethod
    def run_tableau(self, program: Program, schedule: Schedule, key, *, repetition: int = 0,
                    reference: bool = False, initial: Optional[InverseTableau] = None,
                    records: Optional[np.ndarray] = None) -> TableauRun:
        """Tableau mode for one shot. `reference`: every coin forced to 0, noise and confusion off
        (the reference sample of frame mode). `repetition` selects the coins' and noise's shot.
        `initial`: the state to start from (default |0…0>), and `records` the record bits already
        written (default all 0): together they continue an earlier run (moment steps)."""

    def reference_records(self, program: Program, schedule: Schedule) -> np.ndarray:
        """The records of `run_tableau(program, schedule, key, reference=True)` (the reference
        sample: every random outcome 0; the key does not matter). An engine may make them without
        the final tableau, which a reference's callers never read (engines/measured_rows.py)."""
        return self.run_tableau(program, schedule, REFERENCE_KEY, reference=True).records

    def run_reference_pieces(self, num_qubits: int, num_records: int, pieces, key, whole=None) -> TableauRun:
        """`run_tableau(..., reference=True)` of a program that comes in pieces: an iterable of
        (Program, Schedule) of consecutive runs of its rows in window order, each of unitaries and
        collapses only, `num_records` records in all. The same records as the whole program's run.
        `whole`: a callable, called once the pieces are all out, that returns the whole (Program,
        Schedule), which the engine may prepare for its next calls while the last pieces run.
        Raises errors.NotStreamable where the engine cannot take a piece (the caller then runs the
        whole)."""
        raise NotImplementedError(f"the {self.name} engine does not run programs in pieces")

    @abc.abstractmethod
    def sample_frames(self, program: Program, schedule: Schedule, key, reference: np.ndarray,
                      shots: int, parities: Optional[Parities] = None, shot_major: bool = False, *,
                      first_word: int = 0) -> np.ndarray:
        """Frame mode: uint64 [num_records, ceil(shots/64)] of measured bits (reference XOR flips);
        bit l of word w is shot 64w + l (bits past `shots` are unspecified). With `parities`
        (detectors, observables), uint64 [parities.count, words] of those parities instead. With
        `shot_major`, Stim's bit-packed samples: uint8 [shots, ceil(rows / 8)].

        `first_word`: the call samples the absolute shot words [first_word, first_word +
        ceil(shots/64)), each with exactly the bits it has in one call from word 0 (random
        streams are keyed by the absolute word); the output is local (column / shot row 0 is
        word first_word's first shot). Calls over adjacent word ranges, concatenated, equal one
        call over their union: the sharding contract of cirq_quasarq.distributed."""

    def expect_samples(self, num_records: int, shots: int, shot_major: bool = False) -> None:
        """Say ahead that a `sample_frames` call of `shots` shots of `num_records` records (no
        parities) comes next, so that an engine may make its result memory ready while the caller
        makes the schedule and the reference (a first call); the call's bits do not depend on it."""

    def sample_with_reference(self, program: Program, schedule: Schedule, key, shots: int, *,
                              first_word: int = 0) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        """(the reference sample, `sample_frames(program, schedule, key, reference, shots,
        first_word=first_word)`) from one run, where the engine can make both at once (a program's
        first call of a few shots); None where it cannot, or would gain nothing."""
        return None

    def reduce_frames(self, program: Program, schedule: Schedule, key, reference: np.ndarray,
                      shots: int, parities: Optional[Parities] = None, *, op: str = "popcount",
                      first_word: int = 0) -> np.ndarray:
        """uint64 [rows]: `op` (core.packed.REDUCTIONS: "popcount" or "xor") of each row that
        sample_frames would return record-major, over the call's `shots` shots. The same bits as
        reducing sample_frames' result; an engine that can reduce where it samples keeps the
        rows there (CUDA: only the reduced words cross to the host)."""
        if op not in REDUCTIONS:
            raise ValueError(f"unknown reduction {op!r}; known: {', '.join(REDUCTIONS)}")
        packed = self.sample_frames(program, schedule, key, reference, shots, parities, first_word=first_word)
        return reduce_rows(packed, shots, op)

    def sample_controlled(self, program: Program, schedule: Schedule, key, shots: int, *,
                          first_word: int = 0) -> np.ndarray:
        """Programs with classically controlled non-Pauli gates, packed as sample_frames: shot
        branching (engines/branching.py), one frame pass per branch. `first_word` as in
        sample_frames: every random draw is keyed by the absolute shot; split calls equal one call
        where `branching.splits_exactly(schedule)` (see there for the other programs)."""

        return branching.sample(self, program, schedule, key, shots, first_word=first_word)

    def sample_tableau_shots(self, program: Program, schedule: Schedule, key, shots: int, *,
                             first_word: int = 0) -> np.ndarray:
        """Tableau mode once per shot (circuits frames cannot express), packed as sample_frames;
        shot r of the call is absolute repetition 64 * first_word + r."""
        words = (shots + 63) // 64
        out = np.zeros((program.num_records, words), dtype=np.uint64)
        base = 64 * int(first_word)
        for r in range(shots):
            bits = self.run_tableau(program, schedule, key, repetition=base + r).records
            out[:, r // 64] |= bits.astype(np.uint64) << np.uint64(r % 64)
        return out
