"""Shots beyond the memory an engine may use are chunked automatically, and the bits do not depend
on the chunks: the NumPy engine under a tiny `memory_limit`, the CUDA engine on a device capped
with `memory_limit` / $CIRQ_QUASARQ_GPU_MEMORY_LIMIT (so that frame mode must take several chunks
and tableau mode's check refuses what the cap cannot hold)."""

from __future__ import annotations

import numpy as np
import pytest

from cirq_quasarq.compiler import compile_stim
from cirq_quasarq.core import rng
from cirq_quasarq.core.parities import Parities
from cirq_quasarq.core.sizes import parse_bytes
from cirq_quasarq.engines import NumpyEngine, cuda_available
from cirq_quasarq.errors import InvalidInputError, OutOfMemoryError
from cirq_quasarq.results import unpack_records
from cirq_quasarq.schedule import schedule

stim = pytest.importorskip("stim")


def _surface(d, rounds, p=0.01):
    circuit = stim.Circuit.generated("surface_code:rotated_memory_z", distance=d, rounds=rounds,
                                     after_clifford_depolarization=p, before_measure_flip_probability=p,
                                     after_reset_flip_probability=p, before_round_data_depolarization=p)
    program = compile_stim(circuit)
    sched = schedule(program)
    ref = NumpyEngine().run_tableau(program, sched, rng.make_key(0), reference=True).records
    return program, sched, ref


def _counting(engine, attr):
    """Count the calls of engine.<attr> (an instance attribute shadowing the method)."""
    calls = []
    real = getattr(engine, attr)

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    setattr(engine, attr, spy)
    return calls


@pytest.mark.parametrize("text,size", [("1000", 1000), ("512M", 512 << 20), ("2G", 2 << 30), ("1.5GiB", 3 << 29),
                                       ("64kb", 64 << 10), (" 3 T ", 3 << 40), (12345, 12345)])
def test_sizes_parse(text, size):
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["", "lots", "-1", "2X", "G", "1.5.5G", True, -5])
def test_bad_sizes_are_refused(text):
    with pytest.raises(ValueError):
        parse_bytes(text)


def test_gpu_memory_limit_from_the_environment(monkeypatch):
    from cirq_quasarq.engines.cuda.engine import MEMORY_LIMIT_ENV, resolve_memory_limit

    monkeypatch.delenv(MEMORY_LIMIT_ENV, raising=False)
    assert resolve_memory_limit() is None
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "512M")
    assert resolve_memory_limit() == 512 << 20
    assert resolve_memory_limit("2G") == 2 << 30  # the argument wins
    monkeypatch.setenv(MEMORY_LIMIT_ENV, " ")
    assert resolve_memory_limit() is None
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "half of it")
    with pytest.raises(InvalidInputError, match=MEMORY_LIMIT_ENV):
        resolve_memory_limit()


@pytest.mark.parametrize("parities", [False, True])
def test_numpy_engine_chunks_under_a_tiny_cap(parities):
    program, sched, ref = _surface(3, 6, 0.02)
    par = Parities.of(program.detectors, ref) if parities else None
    rows = par.count if parities else program.num_records
    shots = 64 * 60 + 7
    key = rng.make_key(9)
    want = NumpyEngine().sample_frames(program, sched, key, ref, shots, par)
    result_bytes = 8 * rows * ((shots + 63) // 64)
    capped = NumpyEngine(memory_limit=result_bytes + (64 << 10), memory_fraction=1.0, linear_frames=False)
    chunks = _counting(capped, "_frames_chunk")
    got = capped.sample_frames(program, sched, key, ref, shots, par)
    assert len(chunks) >= 3
    assert np.array_equal(unpack_records(got, shots), unpack_records(want, shots))
    mapped = NumpyEngine(memory_limit=result_bytes + (64 << 10), memory_fraction=1.0, linear_frames="always")
    assert np.array_equal(unpack_records(mapped.sample_frames(program, sched, key, ref, shots, par), shots),
                          unpack_records(want, shots))
    with pytest.raises(OutOfMemoryError, match="host memory"):
        NumpyEngine(memory_limit=result_bytes, memory_fraction=1.0).sample_frames(program, sched, key, ref, shots)


@pytest.mark.gpu
def test_capped_device_chunks_shots_with_identical_bits():
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    from cirq_quasarq.engines.cuda import CudaEngine

    program, sched, ref = _surface(5, 10)
    par = Parities.of(program.detectors + program.observables, ref)
    uncapped, capped = CudaEngine(), CudaEngine(memory_limit="32M")
    assert capped.free_bytes() <= 32 << 20
    key = rng.make_key(4)
    shots = 3 * 64 * max(1, capped.free_bytes() // (8 * program.num_records)) + 17
    launches = []
    real = capped.launcher.launch

    def counting(stage, *args, **kwargs):
        launches.append(stage)
        return real(stage, *args, **kwargs)

    capped.launcher.launch = counting
    for kwargs in ({}, {"parities": par}, {"parities": par, "shot_major": True}):
        launches.clear()
        got = capped.sample_frames(program, sched, key, ref, shots, **kwargs)
        want = uncapped.sample_frames(program, sched, key, ref, shots, **kwargs)
        assert launches.count("frames") >= 3, kwargs
        if kwargs.get("shot_major"):
            assert np.array_equal(got, want)
        else:
            assert np.array_equal(unpack_records(got, shots), unpack_records(want, shots)), kwargs

    # Tableau mode: what fits under the cap runs (same bits), what does not is refused up front.
    from .test_cuda_engine import rich_program

    small = rich_program(300, 6, 2)
    s_sched = schedule(small)
    assert np.array_equal(capped.run_tableau(small, s_sched, key).records,
                          uncapped.run_tableau(small, s_sched, key).records)
    big = rich_program(12000, 1, 3)
    with pytest.raises(OutOfMemoryError, match="tableau mode"):
        capped.run_tableau(big, schedule(big), key)
