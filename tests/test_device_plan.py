"""Tableau mode's launch plan (engines/cuda/device_program.py) from the runs' arrays, against the
walk that makes it for programs with loops: equal action for action. Host code only: runs on CPU."""

import numpy as np
import pytest

stim = pytest.importorskip("stim")

from cirq_quasarq import QuasarqSimulator
from cirq_quasarq.engines.cuda.device_program import _build_plan, _walked_plan
from cirq_quasarq.schedule import schedule

from .programs import measure_window_program, random_program, window_program


def _assert_same_plan(program):
    sched = schedule(program)
    got, want = _build_plan(program, sched), _walked_plan(program, sched)
    assert got.actions == want.actions
    assert got.max_collapses == want.max_collapses
    np.testing.assert_array_equal(got.ctx, want.ctx)


@pytest.mark.parametrize("seed", range(12))
def test_plan_of_random_programs(seed):
    program, _ = random_program(5 + seed, 12, seed, collapse=0.3 + 0.05 * seed, noise=seed % 2 == 0)
    _assert_same_plan(program)


@pytest.mark.parametrize("seed", range(3))
def test_plan_of_window_programs(seed):
    _assert_same_plan(window_program(600, seed))
    _assert_same_plan(measure_window_program(300, seed))


@pytest.mark.parametrize("text", [
    "H 0\nM(0.1) 0 1\nCX 0 1\nM 1",  # confusion rows (flip probabilities)
    "H 0\nM 0\nCX rec[-1] 1\nI 2\nM 1 2",  # a classically controlled gate; an identity
    "R 0 1\nX_ERROR(0.2) 0\nM(0.05) 0\nMR 1\nDETECTOR rec[-1]\nH 0\nM 0",
    "DETECTOR",  # nothing to launch
])
def test_plan_of_feedback_confusion_and_identity(text):
    _assert_same_plan(QuasarqSimulator().compile(stim.Circuit(text)))


def test_plan_of_codes_and_paper_circuits():
    code = stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=3,
                                  before_measure_flip_probability=0.01)
    _assert_same_plan(QuasarqSimulator().compile(code.flattened()))  # the loops unrolled
    _assert_same_plan(QuasarqSimulator().compile(code))  # with loops: the walk itself


@pytest.mark.parametrize("text", [
    # loops: nested, with records, confusions, feedback and resets inside, a loop of one round
    "H 0\nREPEAT 3 {\n  CX 0 1\n  M(0.1) 1\n  REPEAT 2 {\n    H 1\n    MR 1\n    CX rec[-1] 2\n  }\n  DETECTOR rec[-1]\n}\nM 0 1 2",
    "REPEAT 4 {\n  R 0\n  X_ERROR(0.2) 0\n  I 1\n  M 0\n  TICK\n}\nREPEAT 1 {\n  H 0\n}\nM 0",
    "REPEAT 2 {\n  REPEAT 2 {\n    REPEAT 2 {\n      H 0\n      M 0\n    }\n  }\n}",
])
def test_walked_plan_equals_its_reference(text):
    """The walked plan (per step only list and dict lookups) against the walk it replaced, on
    programs with loops: stim texts and the surface, repetition and color codes' memory experiments."""
    from .plan_oracle import walked_plan_reference

    programs = [QuasarqSimulator().compile(stim.Circuit(text))]
    if text.startswith("H 0"):
        for name in ("surface_code:rotated_memory_x", "repetition_code:memory", "color_code:memory_xyz"):
            programs.append(QuasarqSimulator().compile(stim.Circuit.generated(
                name, distance=5, rounds=4, after_clifford_depolarization=0.01, before_measure_flip_probability=0.01)))
    for program in programs:
        sched = schedule(program)
        got, want = _walked_plan(program, sched), walked_plan_reference(program, sched)
        assert got.actions == want.actions and got.max_collapses == want.max_collapses
        np.testing.assert_array_equal(got.ctx, want.ctx)


@pytest.mark.parametrize("text,folded", [
    ("R 0 1\nREPEAT 5 {\n  H 0\n  CX 0 1\n  M 1\n}\nM 0", [5]),
    # nested: only the top-level loop; a loop that reads records, one of two iterations, one without
    # records: none of them
    ("REPEAT 3 {\n  H 0\n  REPEAT 4 {\n    CX 0 1\n    MR 1\n  }\n  M 0\n}\nREPEAT 6 {\n  M 0\n  CX rec[-1] 1\n}\n"
     "REPEAT 2 {\n  M 1\n}\nREPEAT 4 {\n  H 0\n}\nM 0", [3]),
    ("M 0\nREPEAT 4 {\n  M 0\n}\nREPEAT 3 {\n  X 1\n  M 1 0\n}", [4, 3]),  # consecutive loops, one-launch bodies
])
def test_walked_plan_marks_the_iterations_of_foldable_loops(text, folded):
    """`_Plan.loops`: per top-level loop of more than two iterations that writes records and reads
    none (device_program.foldable_loop), the first action of each iteration, the first after the
    loop, and its records: each iteration's actions carry its own loop context and write its own
    records, and no action outside them belongs to the loop."""
    from cirq_quasarq.core.program import REC

    from .plan_oracle import walked_plan_reference

    program = QuasarqSimulator().compile(stim.Circuit(text))
    sched = schedule(program)
    plan = _walked_plan(program, sched)
    assert [loop.count for loop in plan.loops] == folded
    ins = sched.instructions
    for loop in plan.loops:
        bounds = loop.starts + [loop.end]
        for k in range(loop.count):
            for kind, start, end, ctx in plan.actions[bounds[k]:bounds[k + 1]]:
                assert plan.ctx[ctx, 3] == k * loop.stride  # the loop's record shift: iteration k
                recs = ins[start:end, REC]
                recs = recs[recs >= 0] + plan.ctx[ctx, 0]
                lo = loop.first_record + k * loop.stride
                assert np.all((lo <= recs) & (recs < lo + loop.stride))
        for kind, start, end, ctx in plan.actions[:loop.starts[0]] + plan.actions[loop.end:]:
            recs = ins[start:end, REC]
            recs = recs[recs >= 0] + plan.ctx[ctx, 0]
            assert not np.any((loop.first_record <= recs) & (recs < loop.first_record + loop.count * loop.stride))
    assert plan.actions == walked_plan_reference(program, sched).actions


def test_fused_windows_take_the_widest_chunk_whose_buffers_fit():
    """The choice that cost n = 370k a fifth of its time when it was missing (`_Workspace.fusion`):
    chunks of 160 where two planes of partial counts fit, of 128 where one does (a plane is the
    difference, and only where the widest window holds more than 128 collapses), none where neither
    does; and the chunk of the first run stays with the workspace. Host code: byte counts and a
    stand-in allocator."""
    from types import SimpleNamespace

    from cirq_quasarq.engines.cuda import measure, tableau

    n, W = 370000, (370000 + 63) // 64
    plane = 8 * measure.fused_count_words(n, W, measure.LOWRANK_NARROW)
    for k in (1, 100, 128):
        assert (tableau._FusedBuffers.bytes_needed(n, W, k, measure.LOWRANK_CHUNK)
                == tableau._FusedBuffers.bytes_needed(n, W, k, measure.LOWRANK_NARROW))
    for k in (129, 160, 264):
        assert (tableau._FusedBuffers.bytes_needed(n, W, k, measure.LOWRANK_CHUNK)
                - tableau._FusedBuffers.bytes_needed(n, W, k, measure.LOWRANK_NARROW)) == plane
    wide = tableau._FusedBuffers.bytes_needed(n, W, 264, measure.LOWRANK_CHUNK)
    narrow = tableau._FusedBuffers.bytes_needed(n, W, 264, measure.LOWRANK_NARROW)
    spare = 64 << 20  # what `_room` keeps back
    for free, chunk in ((wide + spare, measure.LOWRANK_CHUNK), (wide + spare - 1, measure.LOWRANK_NARROW),
                        (narrow + spare, measure.LOWRANK_NARROW), (narrow + spare - 1, None)):
        made = []
        ws = SimpleNamespace(fused=None, n=n, W=W, max_collapses=264, _alloc=lambda nbytes: made.append(nbytes) or 0)
        engine = SimpleNamespace(fused_chunks=(measure.LOWRANK_CHUNK, measure.LOWRANK_NARROW), free_bytes=lambda: free)
        fused = tableau._Workspace.fusion(ws, engine)
        assert (fused.chunk if fused is not None else None) == chunk, free
        assert sum(made) == (0 if chunk is None else tableau._FusedBuffers.bytes_needed(n, W, 264, chunk)), free
        if fused is not None:  # made once: a later run with room for more keeps the chunk
            engine.free_bytes = lambda: 10 * wide
            assert tableau._Workspace.fusion(ws, engine) is fused
