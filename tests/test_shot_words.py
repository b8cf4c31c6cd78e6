"""Sampling a range of shot words (`first_word`): calls over adjacent word ranges, concatenated,
equal one call over their union, bit for bit (records, parities, Stim's shot-major layout, per-shot
tableau runs, shot branching where it splits exactly, rows reduced by the engine), on every engine
and whatever the engine's chunking. This is the contract cirq_quasarq.distributed shards on."""

from __future__ import annotations

import numpy as np
import pytest

from cirq_quasarq.compiler import compile_stim
from cirq_quasarq.core import rng
from cirq_quasarq.core.packed import reduce_rows
from cirq_quasarq.core.parities import Parities
from cirq_quasarq.engines import NumpyEngine, branching, cuda_available
from cirq_quasarq.schedule import schedule

from .test_cuda_engine import rich_program


def _engines(name):
    """The engine under test and variants of it that chunk the shot words differently."""
    if name == "numpy":
        return [NumpyEngine(), NumpyEngine(max_shot_words=3), NumpyEngine(fast_paths=False, max_shot_words=2)]
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    piecewise = [CudaEngine(max_shot_words=7), CudaEngine(frame_memory="global", max_shot_words=9)]
    for engine in piecewise:  # every chunk as pieces on their own streams, however small
        engine.pipeline_min_bytes = 0
    spread = [CudaEngine(), CudaEngine(max_shot_words=5)]
    for engine in spread:  # every call on the spread kernel (all blocks on the same words)
        engine.spread_frames = True
    return ([CudaEngine(), CudaEngine(max_shot_words=3), CudaEngine(frame_memory="global", max_shot_words=2)]
            + piecewise + spread)


@pytest.fixture(scope="module", params=["numpy", pytest.param("cuda", marks=pytest.mark.gpu)])
def engines(request):
    return _engines(request.param)


def _cuts(words, seed):
    """Word boundaries 0 = c0 < c1 < ... < ck = words (some ranges of one word)."""
    r = np.random.default_rng(seed)
    inner = sorted(set(r.integers(1, words, size=min(words - 1, 4)).tolist())) if words > 1 else []
    return [0] + inner + [words]


def _masked(packed, shots):
    """Record-major packed bits with the bits past `shots` cleared (they are unspecified)."""
    out = packed.copy()
    if shots % 64 and out.shape[1]:
        out[:, -1] &= np.uint64((1 << (shots % 64)) - 1)
    return out


def _split(call, shots, cuts, shot_major):
    """Concatenation of `call(first_word, local shots)` over the ranges between `cuts`."""
    parts = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        local = min(64 * hi, shots) - 64 * lo
        parts.append(call(lo, local))
    return np.concatenate(parts, axis=0 if shot_major else 1)


def _check(engines, program, key, reference, shots, seed, parities=None):
    sched = schedule(program)
    want = NumpyEngine().sample_frames(program, sched, key, reference, shots, parities)
    want_sm = NumpyEngine().sample_frames(program, sched, key, reference, shots, parities, True)
    words = (shots + 63) // 64
    for i, engine in enumerate(engines):
        cuts = _cuts(words, seed + i)
        for shot_major in (False, True):
            got = _split(lambda w, s: engine.sample_frames(program, sched, key, reference, s, parities, shot_major,
                                                           first_word=w), shots, cuts, shot_major)
            if shot_major:
                assert got.shape == want_sm.shape and np.array_equal(got, want_sm), (engine.name, cuts)
            else:
                assert np.array_equal(_masked(got, shots), _masked(want, shots)), (engine.name, cuts)
        # Rows reduced by the engine over each range (on the device for CUDA) combine to the same
        # reduction of the whole call: counts add, XORs fold; bits past `shots` never count.
        for op, combine in (("popcount", np.add), ("xor", np.bitwise_xor)):
            parts = [engine.reduce_frames(program, sched, key, reference, min(64 * hi, shots) - 64 * lo, parities,
                                          op=op, first_word=lo) for lo, hi in zip(cuts[:-1], cuts[1:])]
            assert all(p.dtype == np.uint64 for p in parts)
            assert np.array_equal(combine.reduce(parts), reduce_rows(want, shots, op)), (engine.name, op, cuts)


@pytest.mark.parametrize("seed", range(6))
def test_word_ranges_equal_one_call(engines, seed):
    n = [3, 12, 40][seed % 3]
    program = rich_program(n, 14, 900 + seed, frames=True)  # noise, confusion, controlled Paulis, loops
    sched = schedule(program)
    reference = NumpyEngine().run_tableau(program, sched, rng.make_key(0), reference=True).records
    shots = [64 * 9 + 5, 64 * 7, 130][seed % 3]
    _check(engines, program, rng.make_key(seed + 1), reference, shots, seed)


def test_word_ranges_of_detectors_equal_one_call(engines):
    stim = pytest.importorskip("stim")
    circuit = stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=3,
                                     after_clifford_depolarization=0.02, before_measure_flip_probability=0.02,
                                     after_reset_flip_probability=0.02, before_round_data_depolarization=0.02)
    program = compile_stim(circuit)
    reference = np.zeros(program.num_records, dtype=np.uint8)
    parities = Parities.of(program.detectors + program.observables, reference)
    shots = 64 * 13 + 31
    _check(engines, program, rng.make_key(77), reference, shots, 3, parities)
    _check(engines, program, rng.make_key(78), reference, shots, 4)


def test_a_late_word_range_alone(engines):
    """A range far from word 0 (a shard of a huge run) equals the same columns of a call from 0."""
    program = rich_program(10, 12, 31, frames=True)
    sched = schedule(program)
    reference = NumpyEngine().run_tableau(program, sched, rng.make_key(0), reference=True).records
    key = rng.make_key(5)
    whole = NumpyEngine().sample_frames(program, sched, key, reference, 64 * 40)
    for engine in engines:
        got = engine.sample_frames(program, sched, key, reference, 64 * 3, first_word=37)
        assert np.array_equal(got, whole[:, 37:40]), engine.name


def test_word_ranges_past_two_to_the_33_do_not_repeat(engines):
    """Shards of a run of more than 2^33 shots (words around 2^27, where per-shot counters pass 32
    bits, and past 2^33, where per-word ones do): every engine gives the NumPy engine's bits, and
    they are not the bits of the same shots 2^33 words earlier."""
    program = rich_program(8, 12, 41, frames=True)  # noise with several outcomes, confusion
    sched = schedule(program)
    reference = NumpyEngine().run_tableau(program, sched, rng.make_key(0), reference=True).records
    key = rng.make_key(6)
    for first in ((1 << 27) - 1, (1 << 33) - 2, (1 << 33) + 5):
        want = NumpyEngine().sample_frames(program, sched, key, reference, 64 * 3, first_word=first)
        wrapped = NumpyEngine().sample_frames(program, sched, key, reference, 64 * 3,
                                              first_word=first % (1 << 33) if first >= 1 << 33 else first + 7)
        assert not np.array_equal(want, wrapped), first
        for engine in engines:
            got = engine.sample_frames(program, sched, key, reference, 64 * 3, first_word=first)
            assert np.array_equal(got, want), (engine.name, first)


def test_tableau_shots_and_exact_branching_split(engines):
    program = rich_program(7, 10, 5, frames=False)
    sched = schedule(program)
    key = rng.make_key(11)
    shots = 64 * 2 + 9
    want = NumpyEngine().sample_tableau_shots(program, sched, key, shots)
    for engine in engines[:1]:
        got = _split(lambda w, s: engine.sample_tableau_shots(program, sched, key, s, first_word=w), shots,
                     [0, 1, 3], False)
        assert np.array_equal(_masked(got, shots), _masked(want, shots)), engine.name
    # Shot branching splits exactly where every shot runs alone (decisions inside loops).
    for seed in range(40):
        program = rich_program(6, 12, 300 + seed, frames=False)
        sched = schedule(program)
        if program.needs_branching() and branching.splits_exactly(sched):
            break
    else:
        pytest.skip("no generated program with decisions inside loops")
    want = NumpyEngine().sample_controlled(program, sched, key, shots)
    for engine in engines[:1]:
        got = _split(lambda w, s: engine.sample_controlled(program, sched, key, s, first_word=w), shots,
                     [0, 2, 3], False)
        assert np.array_equal(_masked(got, shots), _masked(want, shots)), engine.name


def test_negative_first_word_is_refused():
    program = rich_program(3, 4, 1, frames=True)
    sched = schedule(program)
    reference = NumpyEngine().run_tableau(program, sched, rng.make_key(0), reference=True).records
    with pytest.raises(ValueError):
        NumpyEngine().sample_frames(program, sched, rng.make_key(1), reference, 10, first_word=-1)


@pytest.mark.parametrize("rows", [0, 1, 7, 8, 9, 63, 64, 65, 130])
@pytest.mark.parametrize("shots", [1, 8, 63, 64, 65, 200])
def test_shot_major_layout_equals_the_bits_written_out(rows, shots):
    """parities_shot_major (8 x 8 bit blocks transposed in words) against the bits unpacked,
    transposed and packed one by one, including bits past `shots` in the last word (ignored)."""
    from cirq_quasarq.core.parities import parities_shot_major

    r = np.random.default_rng(rows * 1000 + shots)
    words = (shots + 63) // 64
    packed = r.integers(0, 2**63, size=(rows, words), dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    bits = np.unpackbits(packed.view(np.uint8), axis=1, bitorder="little")[:, :shots].T  # [shots, rows]
    got = parities_shot_major(packed, shots)
    want = np.zeros((shots, (rows + 7) // 8), dtype=np.uint8)
    for s in range(shots):
        for c in range(rows):
            want[s, c // 8] |= np.uint8(bits[s, c] << (c % 8))
    assert np.array_equal(got, want)
    assert np.array_equal(parities_shot_major(packed, shots, bit_packed=False), bits.astype(bool))
