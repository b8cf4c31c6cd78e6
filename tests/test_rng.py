"""Philox4x32-10 known answers (Random123) and the exactness / chunk-independence of draws."""

import numpy as np
import pytest

from cirq_quasarq.core import rng

# every test here draws both ways: NumPy's passes and the compiled draws (tests/test_native_draws.py)
pytestmark = pytest.mark.usefixtures("native_path")

KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("ctr,key,expected", KAT)
def test_known_answers(ctr, key, expected):
    out = rng.philox4x32(*[np.uint64(c) for c in ctr], key)
    assert tuple(int(x) for x in out) == expected


def test_word_ranges_equal_single_words():
    key = rng.make_key(123)
    a = rng.words_range(key, 4, np.array([3, 4]), 2, 5, 7)
    b = rng.words(key, 4, np.array([3, 4])[:, None], 2, np.arange(5, 12)[None, :])
    assert np.array_equal(a, b)


@pytest.mark.parametrize("p", [1e-4, 1e-3, 0.004, 0.05, 0.5, 0.97])
def test_bernoulli_rate_lanes_and_chunking(p):
    key = rng.make_key(8)
    slots = np.arange(200)
    full = rng.bernoulli_words(key, slots, p, 0, 400)
    part = rng.bernoulli_words(key, slots[50:60], p, 123, 31)
    assert np.array_equal(part, full[50:60, 123:154])
    bits = np.unpackbits(full.view(np.uint8), bitorder="little").reshape(200 * 400, 64)
    n = bits.shape[0]
    sd = np.sqrt(p * (1 - p) / n)
    for lane_rate in bits.mean(axis=0):  # every lane has the right rate
        assert abs(lane_rate - p) < 6 * sd
    # Lanes are independent: pairs fire together at rate p^2.
    both = (bits[:, 0] & bits[:, 1]).mean()
    assert abs(both - p * p) < 6 * np.sqrt(p * p / n) + 1e-6


def test_fixed_point_is_exact():
    assert rng.fixed_point(0.5) == 1 << 63
    assert rng.fixed_point(2.0**-40) == 1 << 24
    assert rng.fixed_point(0) == 0
    assert rng.fixed_point(1) == (1 << 64) - 1


def test_scalar_word_equals_the_vectorised_words():
    r = np.random.default_rng(7)
    for _ in range(500):
        key = (int(r.integers(0, 2**32)), int(r.integers(0, 2**32)))
        stream, a, b = int(r.integers(0, 7)), int(r.integers(0, 2**32)), int(r.integers(0, 2**32))
        index = int(r.integers(0, 2**40))
        assert rng.word(key, stream, a, b, index) == int(rng.words(key, stream, a, b, index))


def test_counters_past_32_bits_neither_repeat_nor_change_below():
    """A counter's bits past 32 go above the stream id: draws at i and i + 2^33 differ (they
    repeated before), ranges across the boundary equal their single words, and counters below
    2^32 are what the known answers give (counter word 3 = the stream id)."""
    key = rng.make_key(99)
    for stream in rng.Stream:
        low = rng.words_range(key, int(stream), 7, 0, 5, 8)
        high = rng.words_range(key, int(stream), 7, 0, 5 + (1 << 33), 8)
        assert not np.array_equal(low, high)
        assert np.array_equal(rng.words32_range(key, int(stream), 7, 0, 5, 8),
                              rng.words32_range(key, int(stream), 7, 0, 5, 8))
        assert not np.array_equal(rng.words32_range(key, int(stream), 7, 0, 5, 8),
                                  rng.words32_range(key, int(stream), 7, 0, 5 + (1 << 34), 8))
    start = (1 << 33) - 3  # pair counters 2^32 - 2 ... 2^32 + 1
    across = rng.words_range(key, 4, 3, 2, start, 6)
    single = [rng.word(key, 4, 3, 2, start + i) for i in range(6)]
    assert [int(v) for v in across] == single
    r = rng.philox4x32(np.uint64(1 << 32), np.uint64(3), np.uint64(2), np.uint64(4), key)
    s = rng.philox4x32(np.uint64(0), np.uint64(3), np.uint64(2), np.uint64(4 | 1 << 3), key)
    assert tuple(int(x) for x in r) == tuple(int(x) for x in s)


@pytest.mark.parametrize("p", [1e-3, 0.004, 0.02, 0.3])
def test_large_draws_equal_small_ones(p):
    """A draw of many undecided pairs goes a plane at a time, a small one in wide passes: the same
    bits either way (20 slots at a time against all 3000 at once; from p = 0.004 on, more than
    rng._LARGE_DRAW pairs are undecided after the first pass of the whole draw)."""
    key = rng.make_key(77)
    slots = np.arange(3000, dtype=np.uint64) * 7 + 5
    whole = rng.bernoulli_words(key, slots, p, 11, 200)
    alone = np.concatenate([rng.bernoulli_words(key, slots[i : i + 20], p, 11, 200) for i in range(0, 3000, 20)])
    np.testing.assert_array_equal(whole, alone)


def test_tables_of_the_slots_probabilities():
    """rng.probability_tables: per slot its fixed-point threshold, which draw takes it (certain,
    dense, sparse), the sparse slots' any-lane thresholds and first-lane cuts, as the scalar
    functions give them; made once per array of probabilities (a sampler's every call)."""
    for values in ([1e-3] * 5, [1e-3, 0.2, 1e-3, 0.5, 0.2, 0.0, 1.0, 1e-4], [0.3], []):
        p = np.array(values, dtype=np.float64)
        t = rng.probability_tables(p)
        assert t.fixed.dtype == np.uint64 and t.fixed.tolist() == [rng.fixed_point(float(v)) for v in p]
        assert t.certain.tolist() == [i for i, v in enumerate(p) if v >= 1]
        assert t.dense.tolist() == [i for i, v in enumerate(p) if rng.SPARSE_BELOW <= v < 1]
        assert t.sparse.tolist() == [i for i, v in enumerate(p) if 0 < v < rng.SPARSE_BELOW]
        assert t.any_sparse.tolist() == [rng._any_threshold(float(p[i])) for i in t.sparse]
        for i in t.sparse:
            assert np.array_equal(t.cuts[t.kind[i]], rng._first_lane_cuts(float(p[i])))
        assert rng.probability_tables(p.copy()) is t


def _lanes_below(key, slot: int, plane0: int, col: int, threshold: int) -> int:
    """The lanes whose 64-bit uniform (bit 63 - j = bit l of plane plane0 + j) is below
    `threshold`, from all 64 planes: the definition the bit-sliced draws must give."""
    planes = [rng.word(key, rng.Stream.NOISE, slot, plane0 + j, col) for j in range(64)]
    mask = 0
    for lane in range(64):
        u = sum(((planes[j] >> lane) & 1) << (63 - j) for j in range(64))
        mask |= (u < threshold) << lane
    return mask


def _bernoulli_word(key, slot: int, p: float, col: int) -> int:
    """bernoulli_words' word (slot, col) from its definition (module docstring), one lane at a time."""
    threshold = rng.fixed_point(p)
    if p >= rng.SPARSE_BELOW:
        return _lanes_below(key, slot, 0, col, threshold)
    any_fire = int(rng.words32_range(key, rng.Stream.NOISE, np.uint64(slot), 0, col, 1)[0])
    if any_fire >= rng._any_threshold(p):
        return 0
    u = rng.word(key, rng.Stream.NOISE, slot, 1, col)
    first = int(np.searchsorted(rng._first_lane_cuts(p), np.uint64(u), side="right"))
    above = ((1 << 64) - 1) ^ ((2 << first) - 1) if first < 63 else 0
    return (1 << first) | (_lanes_below(key, slot, 2, col, threshold) & above)


@pytest.mark.parametrize("probs", [
    [1e-3] * 40,  # one probability (runs of threshold bits reduced at once) ...
    [0.3] * 40, [0.5] * 40, [2.0**-7] * 40, [0.75] * 40, [1 - 2.0**-40] * 40, [2.0**-30] * 40,
    [1e-3, 0.004, 0.3, 1e-3, 0.5, 0.02] * 7,  # ... and several (plane by plane) ...
    [1e-3, 0.0010000000000000002] * 20,  # ... that agree but for their last planes (DEPOLARIZE2 summed) ...
    [0.5, 0.5 + 2.0**-10] * 20, [0.3, 0.3 + 2.0**-20] * 20,  # ... past the first pass, in the second ...
    [2.0**-9, 2.0**-9 + 2.0**-14] * 20,  # ... and sparse ones apart inside the second pass
])
def test_bit_sliced_draws_equal_their_definition(probs):
    """Every path of the bit-sliced comparison (the planes on which every pair's threshold has the
    same bit go a run of equal bits at once, the others plane by plane) against the lanes' uniforms
    built plane by plane, at thresholds whose runs of equal bits cross the passes' edges (p = 1/2,
    3/4: one 1 bit then zeros; 1 - 2^-40: forty ones; 2^-30: thirty zeros first), and at
    thresholds that part at the first, second and last planes. Words are chosen where lanes fire."""
    key = rng.make_key(2024)
    slots = np.arange(len(probs), dtype=np.uint64) * 5 + 1
    probs = np.array(probs)
    got = rng.bernoulli_words(key, slots, probs, 40, 24)
    rows, cols = np.nonzero(got)
    picked = list(zip(rows.tolist(), cols.tolist()))[:: max(1, len(rows) // 12)][:12] + [(0, 0), (3, 7)]
    for r, c in picked:
        assert int(got[r, c]) == _bernoulli_word(key, int(slots[r]), float(probs[r]), 40 + c), (probs[r], r, c)


@pytest.mark.parametrize("p", [0.0, 1e-3, 0.05, 0.2, 0.9])
def test_firing_lanes_equal_the_unpacked_bits(p):
    """rng.set_bits (a lane a round, up to _SPARSE_LANES lanes a word; unpacked past that)
    lists the set bits entry-major, lanes ascending, as np.nonzero of the unpacked bits does: words
    with none, one, eight, nine and 64 lanes (bit 63 among them)."""
    r = np.random.default_rng(int(p * 1000))
    bits = r.random((300, 64)) < p
    bits[0], bits[1, :8], bits[2, 55:], bits[3], bits[4, 63] = False, True, True, True, True
    for rows in (bits, bits[:1], bits[:2], bits[:0], bits[[0, 1, 4]]):
        fire = np.packbits(rows, axis=1, bitorder="little").view(np.uint64).reshape(-1)
        want = np.nonzero(rows)
        got = rng.set_bits(fire)
        assert all(np.array_equal(a, b) for a, b in zip(got, want)), (p, len(rows))


@pytest.mark.parametrize("shape", [(3, 7), (5000, 9), (9, 5000), (2, 20000), (40000,)])
def test_philox_passes_give_the_counters_as_one_pass(monkeypatch, shape):
    """philox4x32 above one pass: blocks of the first axis (broadcast counters left as they are), or
    the counters flattened where a row is longer than a pass; each against one pass of everything."""
    key = rng.make_key(31)
    r = np.random.default_rng(len(shape))
    c0 = r.integers(0, 2**40, size=shape[:1] + (1,) * (len(shape) - 1), dtype=np.uint64)
    c1 = r.integers(0, 2**32, size=shape, dtype=np.uint64)
    c2 = r.integers(0, 2**32, size=shape[-1:], dtype=np.uint64)
    monkeypatch.setattr(rng, "_BLOCK", 1 << 40)
    want = rng.philox4x32(c0, c1, c2, np.uint64(3), key)  # one pass
    monkeypatch.setattr(rng, "_BLOCK", 1000)
    got = rng.philox4x32(c0, c1, c2, np.uint64(3), key)
    for g, w in zip(got, want):
        assert g.shape == shape and np.array_equal(g, w)


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_sparse_draws_do_not_depend_on_how_many_pairs_go_at_a_time(monkeypatch, chunk):
    """rng._sparse_lanes draws its firing (slot, word) pairs `_PAIRS_A_CHUNK` at a time: the same
    words for chunks of one pair, of a few and of a thousand as for all pairs at once, at two
    probabilities (their first-lane cuts chosen per pair) over thousands of firing pairs."""
    key = rng.make_key(99)
    slots = np.arange(300, dtype=np.uint64) * 3 + 2
    probs = np.where(np.arange(300) % 2 == 0, 3e-3, 1e-3)
    monkeypatch.setattr(rng, "_PAIRS_A_CHUNK", 1 << 30)
    whole = rng.bernoulli_words(key, slots, probs, 17, 129)
    assert np.count_nonzero(whole) > 2 * chunk
    monkeypatch.setattr(rng, "_PAIRS_A_CHUNK", chunk)
    assert np.array_equal(rng.bernoulli_words(key, slots, probs, 17, 129), whole)
