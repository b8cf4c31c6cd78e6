"""Walking a Schedule: runs in order, loops repeated, slot shifts tracked (every engine, and the
final-state replay, walk a schedule this way)."""

from __future__ import annotations

import dataclasses
from typing import Iterator, List

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
    depth_rec_shifts: List[int]  # [d] = record shift of the d outermost open loops (d = 0: 0)


def walk(program: Program, schedule: Schedule) -> Iterator[Step]:
    runs = schedule.runs
    loops = program.loops
    repeat, end_repeat = opcodes.CODE["REPEAT"], opcodes.CODE["END_REPEAT"]
    stack: List[List[int]] = []  # [loop id, iteration]
    depth_rec = [0]
    depth_rand = [0]
    r = 0
    while r < len(runs):
        start, end, op = int(runs[r, RUN_START]), int(runs[r, RUN_END]), int(runs[r, RUN_OP])
        if op == repeat:
            loop_id = int(schedule.instructions[start, 1])
            if loops[loop_id].count == 0:
                r = int(schedule.loop_runs[loop_id, 1]) + 1
                continue
            stack.append([loop_id, 0])
            depth_rec.append(depth_rec[-1])
            depth_rand.append(depth_rand[-1])
            r += 1
            continue
        if op == end_repeat:
            frame = stack[-1]
            loop = loops[frame[0]]
            frame[1] += 1
            if frame[1] < loop.count:
                depth_rec[-1] += loop.rec_stride
                depth_rand[-1] += loop.rand_stride
                r = int(schedule.loop_runs[frame[0], 0]) + 1
            else:
                stack.pop()
                depth_rec.pop()
                depth_rand.pop()
                r += 1
            continue
        yield Step(start, end, op, depth_rec[-1], depth_rand[-1], depth_rec)
        r += 1


def condition_refs(program: Program, cond: int, step: Step) -> np.ndarray:
    """Absolute record slots a condition reads, for the current loop iterations."""
    refs = program.conditions[cond].refs
    return refs[:, 0] + np.array([step.depth_rec_shifts[int(d)] for d in refs[:, 1]], dtype=np.int64)


def assignment_index(bits: np.ndarray) -> int:
    """Bits (ref 0 first) -> the truth-table index (bit i = ref i)."""
    return int(sum(int(b) << i for i, b in enumerate(bits)))
