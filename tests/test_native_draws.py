"""The compiled draws (cuda_src/host_draws.cpp, core/native.py) against the NumPy draws, their
definition: the same words, entries and Paulis, bit for bit, at the edges of what each accepts;
and the fallback to NumPy where the library cannot be built or is turned off."""

import numpy as np
import pytest

from cirq_quasarq.core import draws, native, rng
from cirq_quasarq.core.program import Channel

needs_native = pytest.mark.skipif(native.compiler() is None, reason="no C++ compiler on this machine")

# probabilities at the edges of the draw's modes: never, sparse (first lane), the sparse/dense border,
# dense (bit-sliced), and certain
EDGES = [0.0, 1e-9, 1e-4, 1e-3, 3e-3, rng.SPARSE_BELOW * (1 - 1e-12), rng.SPARSE_BELOW, 0.01, 0.3, 0.5,
         1 - 1e-12, 1.0]


def both(monkeypatch, draw):
    """draw() with the compiled draws, then with NumPy's."""
    if native.library() is None:
        pytest.fail(f"the compiled draws did not build: {native.why_not()}")
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "1")
    compiled = draw()
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "0")
    return compiled, draw()


def assert_same(compiled, numpy_made):
    assert len(compiled) == len(numpy_made)
    for x, y in zip(compiled, numpy_made):
        if isinstance(y, (list, tuple)):
            assert_same(x, y)
            continue
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y)


@needs_native
def test_the_library_builds_where_there_is_a_compiler():
    assert native.library() is not None, native.why_not()


@needs_native
@pytest.mark.parametrize("start", [0, 1, 2, 3, 5, 2**32 - 3, 2**40 + 1])
@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 63, 64, 65, 200])
def test_bernoulli_entries_equal_numpys_at_every_mode(monkeypatch, start, count):
    """Slots of every mode side by side; starts and counts cutting the any-lane draw's groups of four
    words anywhere; counters past 32 bits; slot numbers past 32 bits (their counter word is the low 32)."""
    r = np.random.default_rng(start * 1000 + count)
    slots = np.concatenate([r.integers(0, 2**32, 2 * len(EDGES)),
                            r.integers(2**32, 2**40, len(EDGES))]).astype(np.uint64)
    p = np.array(EDGES * 3)
    key = rng.make_key(start + 7 * count)
    compiled, numpy_made = both(monkeypatch, lambda: rng.bernoulli_sparse(key, slots, p, start, count))
    assert_same(compiled, numpy_made)
    assert len(numpy_made[0])  # the certain slots at least fire


@needs_native
@pytest.mark.parametrize("p", [1e-3, 3e-3, 5e-3, 0.007])
def test_sparse_draws_of_many_words_equal_numpys(monkeypatch, p):
    """A noisy batch's shape: thousands of slots of one probability over hundreds of words, and words
    whose lanes need planes past the compiled draw's first group."""
    slots = np.arange(3000, dtype=np.uint64) * np.uint64(7) + np.uint64(11)
    key = rng.make_key(int(p * 1e6))
    compiled, numpy_made = both(monkeypatch, lambda: rng.bernoulli_sparse(key, slots, np.full(3000, p), 999, 130))
    assert_same(compiled, numpy_made)
    assert len(compiled[0]) > 1000


@needs_native
def test_more_firing_words_than_room_made_draws_again(monkeypatch):
    """The compiled draw writes into room for the expected words; a draw with more comes back whole."""
    slots = np.arange(50, dtype=np.uint64)
    p = np.full(50, 0.004)
    numpy_made = rng.bernoulli_sparse(rng.make_key(3), slots, p, 0, 64)
    tables = rng.probability_tables(p)
    monkeypatch.setattr(tables, "expected_words", 0.0)  # room for 64 words, where about 1,000 fire
    compiled, _ = both(monkeypatch, lambda: rng.bernoulli_sparse(rng.make_key(3), slots, None, 0, 64, tables=tables))
    assert len(compiled[0]) > 64
    assert_same(compiled, numpy_made)


@needs_native
def test_words_equal_numpys_for_every_broadcast(monkeypatch):
    r = np.random.default_rng(5)
    key = rng.make_key(77)
    n = 257
    a = r.integers(0, 2**40, n).astype(np.uint64)
    index = r.integers(0, 2**45, n).astype(np.uint64)
    cases = [(a, 3, index), (5, np.arange(n, dtype=np.uint64), index), (a[:, None], 0, index[None, :9]),
             (1, 2, 3), (a[:0], 0, index[:0]), (a, 2**32 + 5, np.uint64(2**62))]
    for args in cases:
        compiled, numpy_made = both(monkeypatch, lambda: rng.words(key, rng.Stream.NOISE_CHOICE, *args))
        assert compiled.shape == numpy_made.shape and compiled.dtype == numpy_made.dtype
        assert np.array_equal(compiled, numpy_made)


def _channel(r, arity, outcomes, total):
    probs = r.random(outcomes)
    return Channel(arity=arity, probs=probs / probs.sum() * total,
                   paulis=r.integers(0, 4, (outcomes, arity)).astype(np.uint8))


@needs_native
@pytest.mark.parametrize("seed", range(12))
def test_channel_paulis_equal_numpys(monkeypatch, seed):
    """Channels of one and of several Paulis, on one and two qubits, at every mode, side by side (and
    some with no slots): each lane's Pauli (`lanes`) and each word's masks (`draw`)."""
    r = np.random.default_rng(seed)
    channels, slot_lists = [], []
    for _ in range(int(r.integers(1, 6))):
        arity = int(r.integers(1, 3))
        outcomes = int(r.choice([1, 3, 15 if arity == 2 else 3]))
        channels.append(_channel(r, arity, outcomes, float(r.choice([1e-4, 2e-3, 0.01, 0.2, 0.75, 1.0]))))
        slot_lists.append(r.choice(10**6, int(r.integers(0, 40)), replace=False))
    start, count = int(r.integers(0, 500)), int(r.integers(1, 50))
    key = rng.make_key(seed)
    made = lambda: (draws.ChannelDraw(channels, slot_lists).lanes(key, start, count),  # noqa: E731
                    draws.ChannelDraw(channels, slot_lists).draw(key, start, count))
    compiled, numpy_made = both(monkeypatch, made)
    assert_same(compiled, numpy_made)


def test_turned_off_the_draws_are_numpys(monkeypatch):
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "0")
    assert native.compiled() is None


def test_without_a_compiler_the_draws_fall_back_to_numpy(monkeypatch, tmp_path):
    """A compiler that fails (or none): no library, a reason, and the NumPy draws' bits."""
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "0")
    expected = rng.bernoulli_sparse(rng.make_key(1), np.arange(40, dtype=np.uint64), 0.003, 0, 64)
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setenv("CIRQ_QUASARQ_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "false")  # exits 1: a compiler that rejects the source
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "1")
    assert native.compiled() is None
    assert "host_draws.cpp" in native.why_not()
    assert_same(rng.bernoulli_sparse(rng.make_key(1), np.arange(40, dtype=np.uint64), 0.003, 0, 64), expected)
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    assert native.library() is None and native.why_not()


def test_a_compiler_past_its_time_leaves_no_library_and_says_why(monkeypatch, tmp_path):
    """A compiler that runs past the build's time limit: no library, its reason named."""
    import subprocess

    def hung(args, **kwargs):
        raise subprocess.TimeoutExpired(args, kwargs.get("timeout"))

    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setenv("CIRQ_QUASARQ_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(subprocess, "run", hung)
    if native.compiler() is None:
        pytest.skip("no C++ compiler here")
    assert native.library() is None and "timed out" in native.why_not()


@needs_native
def test_loading_a_built_library_imports_no_build_tools():
    """A process that finds the library built (a first call on the CPU engine) imports neither
    subprocess nor tempfile for it (10 ms beside NumPy and Stim on the 2-core machine, where nothing
    else had)."""
    import subprocess
    import sys

    assert native.library() is not None  # built in the cache, as the other process will find it
    code = ("import sys; from cirq_quasarq.core import native; assert native.library() is not None, native.why_not(); "
            "print(sorted(m for m in ('subprocess', 'tempfile') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@needs_native
def test_a_build_is_kept_and_found_again(monkeypatch, tmp_path):
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setenv("CIRQ_QUASARQ_KERNEL_CACHE", str(tmp_path))
    assert native.library() is not None, native.why_not()
    built = sorted(tmp_path.glob("host-*.so"))
    assert len(built) == 1 and not list(tmp_path.glob("*.part"))
    assert native._built() == (built[0], False)  # found, not built again
    real = native._compile
    for no_cache in ("0", str(built[0] / "under-a-file")):  # no disk cache, or one that cannot be made
        monkeypatch.setenv("CIRQ_QUASARQ_KERNEL_CACHE", no_cache)
        monkeypatch.setattr(native, "_LOADED", {})
        made = []
        monkeypatch.setattr(native, "_compile", lambda *args: made.append(real(*args)) or made[-1])
        assert native.library() is not None, native.why_not()  # built in a folder of its own,
        assert len(made) == 1 and made[0].parent != tmp_path and not made[0].parent.exists()  # removed once loaded


def test_each_slots_mode_is_its_probabilitys():
    """The draw's tables sort the slots into the modes `rng.bernoulli_mode` gives one probability
    (the device program's channels take theirs from it)."""
    p = np.array(EDGES + [-0.5, 2.0])
    modes = rng.probability_tables(p).native_arrays()[0]
    assert modes.tolist() == [int(rng.bernoulli_mode(float(x))) for x in p]
    assert set(modes.tolist()) == {int(m) for m in rng.BernoulliMode}
