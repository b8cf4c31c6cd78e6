"""The reference sample from the measured rows alone (records only, no final tableau).

A tableau-mode run keeps all 2n rows of the inverse tableau, but its records read only one row a
collapse: the zrow T⁻¹Z_qT of the measured qubit q at that moment. Gates act on the output side
(T -> G T) and a collapse's CX fan, H or H_YZ and X injection on the input side (T -> T C), so
after the program's gates U_1..U_t and collapses C_1..C_m, in program order,

    T = U_t ⋯ U_1 · C_1 ⋯ C_m   and   T⁻¹ Z_q T = C_m⁻¹ ⋯ C_1⁻¹ · (U_1⁻¹ ⋯ U_t⁻¹ Z_q U_t ⋯ U_1) · C_1 ⋯ C_m.

So the zrow a collapse reads is Z_q pulled back through the gates before it (a Pauli string, as
a Pauli frame is pushed through gates, here backwards: G† P G, signs kept), then taken through the
earlier collapses in order, each of which updates a row by that row alone (engine-semantics.md).
A reset's |0> (X_q when its outcome is 1) is an output-side Pauli: it flips the sign of each later
measurement's pulled-back row that has Z or Y at q, which the backward sweep reads off there; its
xrow's sign, which the full run clears too, is a gauge no record reads.

Both engines run it as one backward sweep over the schedule's rows with every measurement's string
bit-sliced 64 to a word, then a forward sweep over the measurements in the schedule's order in
windows, each window's decisions made on its own rows and applied to the rows of every later
measurement (engines/numpy/measured_rows.py, engines/cuda/measured_rows.py). This module holds
what both read: the collapses in order, where the path applies and where it pays. Its work is
proportional to the measurements, not to 2n rows: the paper's random circuits measure n/1400 qubits
a layer, so at depth 100 the rows are 7 % of n. The records are those of the full run (the
random outcomes are the same coins and every deterministic one is fixed by the state, whichever
gauge a tableau carries); the tests hold it to the full run on every opcode and at window edges.
"""

from __future__ import annotations

import numpy as np

from ..core import opcodes
from ..core.opcodes import Kind
from ..core.program import A, Program
from ..schedule import Schedule

COLLAPSE_KINDS = (int(Kind.MEASURE), int(Kind.RESET), int(Kind.MEASURE_RESET))
COLLAPSE_CODES = (opcodes.CODE["M"], opcodes.CODE["R"], opcodes.CODE["MR"])
RESET_CODES = (opcodes.CODE["R"], opcodes.CODE["MR"])
RECORDED_CODES = (opcodes.CODE["M"], opcodes.CODE["MR"])
# Skipped by a reference run: noise and record noise are off there, a frame parity is no gate.
SKIPPED_IN_REFERENCE = (int(Kind.NOISE), int(Kind.RECORD_NOISE), int(Kind.FRAME))


def supports(program: Program) -> bool:
    """Whether the reference run may take this path: no loops and no classical control (the rows
    of a loop or a condition are not one sequence fixed before the run)."""
    return not (program.loops or program.conditions)


def collapses(schedule: Schedule) -> int:
    """How many collapses the schedule runs (its runs of M, R and MR)."""
    runs = schedule.runs
    return int((runs[:, 1] - runs[:, 0])[np.isin(runs[:, 2], COLLAPSE_CODES)].sum())


def pays(program: Program, schedule: Schedule, share: float) -> bool:
    """Whether the reference run takes the measured rows: supported, and at most `share` * n
    collapses (an engine's `measured_rows_share`). A later row goes through each earlier collapse
    once, E^2 / 2 row-collapses for E collapses, where the full run takes all 2n rows through each:
    2nE. So the rows pay below E = 4n times the ratio of the two paths' costs a row-collapse. The
    paper's random circuits measure n / 1400 qubits a layer (E = 0.07 n at depth 100, 0.7 n at
    depth 1000); a QEC circuit measures every qubit each round, and its collapses are mostly
    deterministic, which the full run reads off the signs."""
    return supports(program) and collapses(schedule) <= share * program.num_qubits


class Measurements:
    """The schedule's collapses in its order (the order every engine collapses them in, which a
    reference sample depends on: of two entangled qubits the first measured takes the 0): their
    rows, qubits, opcodes and which are resets. Read off the schedule's runs (a few thousand), not
    its rows (millions)."""

    def __init__(self, schedule: Schedule):
        runs = schedule.runs
        runs = runs[np.isin(runs[:, 2], COLLAPSE_CODES)]
        lengths = (runs[:, 1] - runs[:, 0]).astype(np.int64)
        starts = np.repeat(runs[:, 0].astype(np.int64) - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        self.rows = starts + np.arange(int(lengths.sum()), dtype=np.int64)
        self.ops = np.repeat(runs[:, 2], lengths)
        self.qubits = schedule.instructions[self.rows, A].astype(np.int64)
        self.resets = np.isin(self.ops, RESET_CODES)
