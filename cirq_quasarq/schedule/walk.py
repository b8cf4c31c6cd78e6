"""Walking a Schedule: runs in order, loops repeated, slot shifts tracked (every engine, and the
final-state replay, walk a schedule this way)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, Optional, Tuple, Union

import numpy as np

from ..core import opcodes
from ..core.program import Program
from .windows import RUN_END, RUN_OP, RUN_START, Schedule


@dataclasses.dataclass
class Step:
    """One run of one opcode, with the slot shifts of the loop iterations it runs in."""

    start: int
    end: int
    op: int
    rec_shift: int
    rand_shift: int
    depth_rec_shifts: Tuple[int, ...]  # [d] = record shift of the d outermost open loops (d = 0: 0)


@dataclasses.dataclass
class LoopBlock:
    """A loop handed to the caller whole (`walk`'s `fold`): its runs, and the shifts of its first
    iteration. `iteration(k)` walks iteration k like `walk` would."""

    program: Program
    schedule: Schedule
    loop_id: int
    first_run: int  # the body's first run (after REPEAT)
    end_run: int  # the END_REPEAT run
    depth_rec_shifts: Tuple[int, ...]  # of the enclosing loops
    rand_shift: int
    fold: Optional[Callable[["LoopBlock"], bool]] = None

    @property
    def loop(self):
        return self.program.loops[self.loop_id]

    @property
    def rec_shift(self) -> int:
        return self.depth_rec_shifts[-1]

    def iteration(self, k: int) -> Iterator[Union[Step, "LoopBlock"]]:
        loop = self.loop
        return _walk(self.program, self.schedule, self.first_run, self.end_run,
                     self.depth_rec_shifts + (self.rec_shift + k * loop.rec_stride,),
                     self.rand_shift + k * loop.rand_stride, self.fold)

    def instructions(self) -> np.ndarray:
        """Every instruction row of the body (nested loops' bodies included), as scheduled."""
        runs = self.schedule.runs
        if self.end_run <= self.first_run:
            return self.schedule.instructions[:0]
        return self.schedule.instructions[int(runs[self.first_run, RUN_START]) : int(runs[self.end_run - 1, RUN_END])]


def walk(program: Program, schedule: Schedule,
         fold: Optional[Callable[[LoopBlock], bool]] = None) -> Iterator[Union[Step, LoopBlock]]:
    """The schedule's runs in execution order, loops repeated. A loop for which `fold(block)` is
    true is yielded once as a `LoopBlock` instead (its caller runs the iterations)."""
    return _walk(program, schedule, 0, len(schedule.runs), (0,), 0, fold)


def _walk(program, schedule, r, r_end, depth_rec, rand_shift, fold):
    runs = schedule.runs
    repeat = opcodes.CODE["REPEAT"]
    while r < r_end:
        start, end, op = int(runs[r, RUN_START]), int(runs[r, RUN_END]), int(runs[r, RUN_OP])
        if op != repeat:
            yield Step(start, end, op, depth_rec[-1], rand_shift, depth_rec)
            r += 1
            continue
        loop_id = int(schedule.instructions[start, 1])
        close = int(schedule.loop_runs[loop_id, 1])
        loop = program.loops[loop_id]
        if loop.count:
            block = LoopBlock(program, schedule, loop_id, r + 1, close, depth_rec, rand_shift, fold)
            if fold is not None and fold(block):
                yield block
            else:
                for k in range(loop.count):
                    yield from block.iteration(k)
        r = close + 1


def condition_refs(program: Program, cond: int, step: Step) -> np.ndarray:
    """Absolute record slots a condition reads, for the current loop iterations."""
    refs = program.conditions[cond].refs
    return refs[:, 0] + np.array([step.depth_rec_shifts[int(d)] for d in refs[:, 1]], dtype=np.int64)


def assignment_index(bits: np.ndarray) -> int:
    """Bits (ref 0 first) -> the truth-table index (bit i = ref i)."""
    return int(sum(int(b) << i for i, b in enumerate(bits)))
