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
