"""Shot branching: many-shot sampling of programs with classically controlled non-Pauli gates.

Pauli frames need one fixed circuit, but a classically controlled H (or CX, S, ...) is applied in
some shots and not in others. Each such instruction is a decision; a shot's decisions follow
from its own earlier records. For a vector d of decisions, the *variant* is the scheduled
program with every decision made unconditional (applied) or an identity (not applied), kept in
place in the same schedule, so everything before decision j runs identically in every variant
that agrees on d[:j]. A variant is a fixed Clifford circuit: one tableau-mode reference and one
frame pass give every shot's records under d, and a shot whose records reproduce d is final.

Each pass groups the shots that are not final by their first disagreeing decision (the prefix
before it is verified, since it ran identically) and runs the next variants; each pass verifies at
least one more decision of every open shot, so it ends after at most (decisions + 1) passes per
distinct branch. A shot's bits depend only on the seed, its index and its own branch: they equal
those of frame mode on its branch's variant, on every engine and whatever the other shots do.
Decisions inside loops (one per iteration) and runs where the branches outnumber the open shots
fall back to one tableau run per shot.

Split calls (`first_word`, the sharding of cirq_quasarq.distributed): every draw is keyed by the
absolute shot, so where every shot runs alone in tableau mode (`splits_exactly`: decisions inside
loops) calls over adjacent word ranges equal one call. Elsewhere a shot's bits are its branch's
frame-mode bits unless the per-shot fallback takes it, and whether it does depends on the other
shots of the call: such programs are sampled in one call where bits must match.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

from ..core import opcodes
from ..core.program import COND, OP, Program
from ..schedule import Schedule
from ..schedule.windows import RUN_OP, RUN_START

_PAULIS = [opcodes.CODE[name] for name in ("I", "X", "Y", "Z")]
_I = opcodes.CODE["I"]


def decision_rows(schedule: Schedule) -> np.ndarray:
    """Scheduled rows of the classically controlled non-Pauli instructions, in execution order."""
    ins = schedule.instructions
    return np.flatnonzero((ins[:, COND] >= 0) & ~np.isin(ins[:, OP], _PAULIS))


def _inside_loops(schedule: Schedule, rows: np.ndarray) -> bool:
    ops = schedule.instructions[:, OP]
    depth = np.cumsum((ops == opcodes.CODE["REPEAT"]).astype(np.int64) - (ops == opcodes.CODE["END_REPEAT"]))
    return bool(np.any(depth[rows] > 0))


def _variant(schedule: Schedule, rows: np.ndarray, decisions: Tuple[bool, ...]) -> Schedule:
    """The schedule with decision rows unconditional or identities, in place (a controlled row is
    a barrier, alone in its run, so its run's opcode changes with it)."""
    ins = schedule.instructions.copy()
    runs = schedule.runs.copy()
    skipped = rows[~np.asarray(decisions, dtype=bool)]
    ins[rows, COND] = -1
    ins[skipped, OP] = _I
    runs[np.isin(runs[:, RUN_START], skipped), RUN_OP] = _I
    return Schedule(instructions=ins, runs=runs, loop_runs=schedule.loop_runs)


def _decisions(program: Program, schedule: Schedule, rows: np.ndarray, packed: np.ndarray, shots: int) -> np.ndarray:
    """bool [decisions, shots]: each shot's value of each decision's condition from its records."""
    bits = np.unpackbits(np.ascontiguousarray(packed).view(np.uint8), axis=1, bitorder="little")[:, :shots]
    out = np.zeros((len(rows), shots), dtype=bool)
    for j, row in enumerate(rows):
        cond = program.conditions[int(schedule.instructions[row, COND])]
        index = np.zeros(shots, dtype=np.int64)
        for i, slot in enumerate(cond.refs[:, 0]):  # outside loops every ref is an absolute slot
            index |= bits[int(slot)].astype(np.int64) << i
        out[j] = cond.table[index]
    return out


def splits_exactly(schedule: Schedule) -> bool:
    """True when `sample` runs every shot alone in tableau mode, so that calls over adjacent word
    ranges (`first_word`) give exactly the bits of one call over their union."""
    rows = decision_rows(schedule)
    return len(rows) == 0 or _inside_loops(schedule, rows)


def sample(engine, program: Program, schedule: Schedule, key, shots: int, *, first_word: int = 0) -> np.ndarray:
    """Packed records uint64 [num_records, ceil(shots/64)], as `Engine.sample_frames` returns;
    local shot s is absolute shot 64 * first_word + s (every draw keyed by the absolute shot)."""
    rows = decision_rows(schedule)
    words = (shots + 63) // 64
    base = 64 * int(first_word)
    if len(rows) == 0 or _inside_loops(schedule, rows):
        return engine.sample_tableau_shots(program, schedule, key, shots, first_word=first_word)
    out = np.zeros((program.num_records, words), dtype=np.uint64)
    # The first variant follows the decisions of the reference run of the controlled program.
    natural = engine.reference_records(program, schedule)
    first = tuple(bool(v) for v in _decisions(program, schedule, rows, natural[:, None].astype(np.uint64), 1)[:, 0])
    groups: Dict[Tuple[bool, ...], np.ndarray] = {first: np.arange(shots)}
    while groups:
        pending = sum(len(s) for s in groups.values())
        if len(groups) > pending:  # more branches than shots left: one tableau run per shot
            for members in groups.values():
                for shot in members:
                    bits = engine.run_tableau(program, schedule, key, repetition=base + int(shot)).records
                    out[:, shot // 64] |= bits.astype(np.uint64) << np.uint64(shot % 64)
            break
        next_groups: Dict[Tuple[bool, ...], List[np.ndarray]] = {}
        for d, members in groups.items():
            variant = _variant(schedule, rows, d)
            reference = engine.reference_records(program, variant)
            packed = engine.sample_frames(program, variant, key, reference, shots, first_word=first_word)
            actual = _decisions(program, schedule, rows, packed, shots)[:, members]
            wrong = actual != np.asarray(d, dtype=bool)[:, None]
            done = ~wrong.any(axis=0)
            _keep(out, packed, members[done])
            open_shots, first_wrong = members[~done], np.argmax(wrong[:, ~done], axis=0)
            for j in np.unique(first_wrong):
                sel = first_wrong == j
                # Verified prefix, the flipped decision, and this pass's majority guess for the rest.
                guess = actual[j + 1:, ~done][:, sel].mean(axis=1) >= 0.5
                new = d[:j] + (not d[j],) + tuple(bool(v) for v in guess)
                next_groups.setdefault(new, []).append(open_shots[sel])
        groups = {d: np.concatenate(parts) for d, parts in next_groups.items()}
    return out


def _keep(out: np.ndarray, packed: np.ndarray, shots: np.ndarray) -> None:
    """Copy the bits of `shots` (shot-indexed) from `packed` into `out`."""
    if len(shots) == 0:
        return
    mask = np.zeros(out.shape[1] * 64, dtype=np.uint8)
    mask[shots] = 1
    words = np.packbits(mask, bitorder="little").view(np.uint64)
    out |= packed & words[None, :]
