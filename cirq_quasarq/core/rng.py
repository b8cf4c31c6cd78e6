"""Counter-based randomness: Philox4x32-10 in vectorised NumPy, mirrored by cuda_src/philox.cuh.

Every random bit the simulator uses is a pure function of (seed, stream, a, b, index), so results
never depend on launch shapes, chunk sizes or the engine:

    word(stream, a, b, i) = 64 bits: Philox(key=seed, counter=(i >> 1, a, b, stream)) gives four
                            32-bit outputs r0..r3; even i takes r0 | r1 << 32, odd i r2 | r3 << 32.

A counter's first word is 64-bit: its low 32 bits are counter word 0 and its high bits go to counter
word 3 above the stream id (stream | high << 3; streams are < 8), so no draw repeats before 2^62
shots, and every counter below 2^32 is what it always was (`philox4x32`, `word`, philox.cuh).

Streams and their (a, b, i):
- COIN            a = random slot, b = 0, i = repetition;  bit 0 is a collapse coin.
- FRAME_INIT      a = qubit,       b = 0, i = shot word;   initial frame z bits.
- FRAME_MEASURE   a = random slot, b = 0, i = shot word;   frame randomisation after M / R / MR.
- NOISE           a = random slot, b = j, i = shot word;   j-th bit plane of the lanes' uniforms.
- NOISE_CHOICE    a = random slot, b = 0, i = shot;        which Pauli an erring shot gets.
- CONFUSION       a = random slot, b = 0, i = shot;        the recorded value under a confusion map.

Where core/native.py has built it, `words` and `bernoulli_sparse` run the compiled draws of
cuda_src/host_draws.cpp (philox.cuh's per-word functions, the GPU's own): the same bits, which
the NumPy code here defines (tests/test_native_draws.py).

Bernoulli(p) for 64 lanes (see `bernoulli_words`) is exact up to float64 rounding of p: lane l's
uniform u has bit 63-j equal to bit l of NOISE word j, and the lane fires when u < floor(p*2^64);
words are drawn most significant first only until every lane is decided. For small p a first
word decides whether any lane fires at all, so most 64-shot words cost one random word.
"""

from __future__ import annotations

import enum
import functools
import math
import secrets
from typing import Optional, Tuple

import numpy as np

from . import native
from .ranges import nonzero_2d

# Constants as 0-d arrays: a ufunc takes one as an operand for under half the cost of a NumPy
# scalar (a small draw's cost is its ~84 calls' overhead)
M0 = np.array(0xD2511F53, dtype=np.uint64)
M1 = np.array(0xCD9E8D57, dtype=np.uint64)
W0 = 0x9E3779B9
W1 = 0xBB67AE85
MASK32 = np.array(0xFFFFFFFF, dtype=np.uint64)
_SHIFT32 = np.array(32, dtype=np.uint64)


_STREAM_BITS = 3  # stream ids are < 8; a counter's bits past 32 sit above them in counter word 3


class Stream(enum.IntEnum):
    COIN = 1
    FRAME_INIT = 2
    FRAME_MEASURE = 3
    NOISE = 4
    NOISE_CHOICE = 5
    CONFUSION = 6


assert max(Stream) < 1 << _STREAM_BITS


def make_key(seed: Optional[int]) -> Tuple[int, int]:
    """Philox key from a user seed (any int, or None for fresh entropy)."""
    if seed is None:
        seed = secrets.randbits(64)
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    return seed & 0xFFFFFFFF, seed >> 32


_BLOCK = 1 << 14  # elements per pass: keeps the ten rounds' temporaries in cache


_ROUND_KEYS: dict = {}


def _round_keys(key: Tuple[int, int]) -> list:
    """The ten rounds' (k0, k1) as 0-d uint64 arrays (made once per key)."""
    if key not in _ROUND_KEYS:
        if len(_ROUND_KEYS) > 64:
            _ROUND_KEYS.clear()
        k0, k1 = key
        rounds = []
        for _ in range(10):
            rounds.append((np.array(k0, dtype=np.uint64), np.array(k1, dtype=np.uint64)))
            k0, k1 = (k0 + W0) & 0xFFFFFFFF, (k1 + W1) & 0xFFFFFFFF
        _ROUND_KEYS[key] = rounds
    return _ROUND_KEYS[key]


def philox4x32(c0, c1, c2, c3, key: Tuple[int, int]):
    """Philox4x32-10 on broadcastable arrays; returns four uint64 arrays < 2^32. c1, c2 and the
    stream id c3 (< 8) are 32-bit words; c0 may hold up to 61 bits, its bits past 32 going to c3.

    A round is eight array operations on preallocated buffers (`_philox_pass`): a small draw costs
    their count, so the wrapper around them is kept to C-level calls too."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) for c in (c0, c1, c2, c3))
    shape = np.broadcast(c0, c1, c2, c3).shape
    total = math.prod(shape)
    rounds = _ROUND_KEYS.get(key) if isinstance(key, tuple) else None
    if rounds is None:
        rounds = _round_keys(tuple(int(k) for k in key))
    if total <= _BLOCK:  # one pass, the counters as they are
        ac, bd = _philox_pass(c0, c1, c2, c3, shape, rounds)
        return ac[0].reshape(shape), bd[0].reshape(shape), ac[1].reshape(shape), bd[1].reshape(shape)
    # Passes of at most _BLOCK counters, each writing its outputs in place: rows (r0, r2) and
    # (r1, r3) of `ac` and `bd`, whose column ranges the passes share out, with one scratch for all
    # (four new arrays a pass, and its outputs copied over, had spread a large draw's time with
    # their page faults).
    ac, bd = np.empty((2, total), dtype=np.uint64), np.empty((2, total), dtype=np.uint64)
    scratch = np.empty((2, 2, _BLOCK), dtype=np.uint64)
    if total // shape[0] > _BLOCK:  # rows longer than a pass: passes over the counters flattened
        flat = [np.broadcast_to(c, shape).reshape(-1) for c in (c0, c1, c2, c3)]
        for lo in range(0, total, _BLOCK):
            hi = min(total, lo + _BLOCK)
            _philox_pass(*(f[lo:hi] for f in flat), (hi - lo,), rounds, ac[:, lo:hi], bd[:, lo:hi], scratch)
    else:
        # Passes over blocks of the first axis, each counter array sliced where it varies along it
        # and broadcast as it is otherwise (no full-size copies of broadcast counters)
        counters = [c.reshape((1,) * (len(shape) - c.ndim) + c.shape) for c in (c0, c1, c2, c3)]
        inner = total // shape[0]
        step = _BLOCK // inner
        for lo in range(0, shape[0], step):
            hi = min(shape[0], lo + step)
            part = (hi - lo,) + shape[1:]
            cols = slice(lo * inner, hi * inner)
            _philox_pass(*(c[lo:hi] if c.shape[0] > 1 else c for c in counters), part, rounds, ac[:, cols],
                         bd[:, cols], scratch)
    return ac[0].reshape(shape), bd[0].reshape(shape), ac[1].reshape(shape), bd[1].reshape(shape)


def _philox_pass(c0, c1, c2, c3, shape, rounds, ac=None, bd=None, scratch=None):
    """The ten rounds on counters broadcast to `shape` (the ufuncs broadcast them as they read them,
    no copies): (ac, bd), uint64 [2, prod(shape)] each, rows (r0, r2) and (r1, r3) of the output;
    into `ac` and `bd` where given (rows of prod(shape) contiguous words), with `scratch` [2, 2, at
    least prod(shape)] for the temporaries.

    A round is (a, c) <- (hi(c M1) ^ b ^ k0, hi(a M0) ^ d ^ k1), (b, d) <- (lo(c M1), lo(a M0)). The
    rows swap places every round (ac holds (a, c) after an even number of rounds, (c, a) after an
    odd one, bd likewise), so that both halves of the products go out in their own order: a
    reversed view or a [2, 1] operand costs an operation twice a plain one. The buffers of ac and
    the new (a, c) swap every round too, so after the ten the result is in `ac` again."""
    m = math.prod(shape)
    if ac is None:
        ac, bd = np.empty((2, m), dtype=np.uint64), np.empty((2, m), dtype=np.uint64)
    other, product = (np.empty((2, m), dtype=np.uint64), np.empty((2, m), dtype=np.uint64)) if scratch is None \
        else (scratch[0, :, :m], scratch[1, :, :m])
    result = ac
    np.bitwise_and(c0, MASK32, out=ac[0].reshape(shape))
    np.bitwise_and(c2, MASK32, out=ac[1].reshape(shape))
    np.bitwise_and(c1, MASK32, out=bd[0].reshape(shape))
    np.bitwise_and(c3 | ((c0 >> _SHIFT32) << np.uint64(_STREAM_BITS)), MASK32, out=bd[1].reshape(shape))
    # (buffer, its row 0, its row 1), made once: indexing a row makes a new array object each time
    ac, other = (ac, ac[0], ac[1]), (other, other[0], other[1])
    b0, b1, p0, p1 = bd[0], bd[1], product[0], product[1]
    multiply, xor = np.multiply, np.bitwise_xor
    swapped = False
    for k0, k1 in rounds:
        m_first, m_second, k_first, k_second = (M1, M0, k0, k1) if swapped else (M0, M1, k1, k0)
        multiply(ac[1], m_first, out=p0)  # (a M0, c M1), or (c M1, a M0) swapped
        multiply(ac[2], m_second, out=p1)
        np.right_shift(product, _SHIFT32, out=other[0])  # the new (c, a), or (a, c) swapped
        xor(other[1], b1, out=other[1])
        xor(other[2], b0, out=other[2])
        xor(other[1], k_first, out=other[1])
        xor(other[2], k_second, out=other[2])
        np.bitwise_and(product, MASK32, out=bd)  # the new (d, b), or (b, d) swapped
        ac, other = other, ac
        swapped = not swapped
    assert not swapped and ac[0] is result, "Philox4x32-10: an even number of rounds"
    return result, bd


def word(key, stream: int, a: int, b: int, index: int) -> int:
    """One word(stream, a, b, index) on Python ints: what `words` gives for scalars, without the
    dozens of array operations that dominate a single draw (a tableau collapse's coin)."""
    counter = index >> 1
    a0, b0, c0 = counter & 0xFFFFFFFF, a & 0xFFFFFFFF, b & 0xFFFFFFFF
    d0 = (stream | (counter >> 32) << _STREAM_BITS) & 0xFFFFFFFF
    k0, k1 = key
    m0, m1 = int(M0), int(M1)
    for _ in range(10):
        p0, p1 = a0 * m0, c0 * m1
        a0, b0, c0, d0 = (p1 >> 32) ^ b0 ^ k0, p1 & 0xFFFFFFFF, (p0 >> 32) ^ d0 ^ k1, p0 & 0xFFFFFFFF
        k0, k1 = (k0 + W0) & 0xFFFFFFFF, (k1 + W1) & 0xFFFFFFFF
    return (c0 | (d0 << 32)) if index & 1 else (a0 | (b0 << 32))


def words(key, stream: int, a, b, index) -> np.ndarray:
    """64-bit random words word(stream, a, b, index) for broadcastable a, b, index."""
    index = np.asarray(index, dtype=np.uint64)
    lib = native.compiled()
    if lib is not None:  # the compiled draw: a Philox call per word, no array passes
        shape = np.broadcast_shapes(np.shape(a), np.shape(b), index.shape)
        a, b, index = (np.ascontiguousarray(np.broadcast_to(np.asarray(x, dtype=np.uint64), shape)).reshape(-1)
                       for x in (a, b, index))
        out = np.empty(shape, dtype=np.uint64)
        k0, k1 = (int(k) for k in key)
        at = native.address
        lib.qq_host_words(k0, k1, int(stream), at(a), at(b), at(index), index.size, at(out))
        return out
    outs = philox4x32(index >> np.uint64(1), a, b, np.uint64(stream), key)
    return _halves(outs, (index & np.uint64(1)).astype(bool))


def _halves(outs, odd) -> np.ndarray:
    """The 64-bit words of Philox outputs (r0, r1, r2, r3): r2 | r3 << 32 where `odd`, else
    r0 | r1 << 32 (in place: the outputs are the call's own arrays)."""
    r0, r1, r2, r3 = outs
    np.copyto(r0, r2, where=odd)
    np.copyto(r1, r3, where=odd)
    r1 <<= np.uint64(32)
    r0 |= r1
    return r0


def words_range(key, stream: int, a, b, start: int, count: int) -> np.ndarray:
    """word(stream, a, b, i) for i in [start, start + count), a / b of shape [k] or scalars:
    returns [k, count] (or [count]). One Philox call serves two consecutive words."""
    a = np.asarray(a, dtype=np.uint64)
    b = np.asarray(b, dtype=np.uint64)
    first, last = start >> 1, (start + count + 1) >> 1
    calls = np.arange(first, last, dtype=np.uint64)
    shape_ab = np.broadcast_shapes(a.shape, b.shape)
    a2 = a.reshape(a.shape + (1,)) if a.ndim else a
    b2 = b.reshape(b.shape + (1,)) if b.ndim else b
    if len(shape_ab):
        a2 = np.broadcast_to(a2, shape_ab + (1,))
        b2 = np.broadcast_to(b2, shape_ab + (1,))
    r0, r1, r2, r3 = philox4x32(calls, a2, b2, np.uint64(stream), key)
    even = r0 | (r1 << np.uint64(32))
    odd = r2 | (r3 << np.uint64(32))
    both = np.stack([even, odd], axis=-1).reshape(shape_ab + (2 * len(calls),))  # (-1) fails on empty
    off = start - 2 * first
    return both[..., off : off + count]


def words32_range(key, stream: int, a, b, start: int, count: int) -> np.ndarray:
    """32-bit draws: value i is output r[i & 3] of Philox(counter=(i >> 2, a, b, stream)), for
    i in [start, start + count); a of shape [k] or scalar: returns [k, count] (as uint64)."""
    return _range32(key, stream, a, b, start, count, np.uint64, np.copyto)


def below32_range(key, stream: int, a, b, start: int, count: int, threshold: np.ndarray) -> np.ndarray:
    """bool [k, count]: whether `words32_range`'s values (a of shape [k]) are below threshold [k]
    (each Philox output compared into its places of the result: no 64-bit values interleaved)."""
    limit = threshold[:, None]
    return _range32(key, stream, a, b, start, count, bool, lambda place, out: np.less(out, limit, out=place))


def _range32(key, stream: int, a, b, start: int, count: int, dtype, put) -> np.ndarray:
    """`words32_range`'s values, or what `put(place, output)` makes of them: each of the four Philox
    outputs goes into its places (value i: output i & 3 of call i >> 2) of one [..., calls, 4]
    array of `dtype`, then the values [start, start + count) are a view of it."""
    a = np.asarray(a, dtype=np.uint64)
    first, last = start >> 2, (start + count + 3) >> 2
    calls = np.arange(first, last, dtype=np.uint64)
    outs = philox4x32(calls, a.reshape(a.shape + (1,)) if a.ndim else a, np.uint64(b), np.uint64(stream), key)
    values = np.empty(a.shape + (len(calls), 4), dtype=dtype)
    for j, out in enumerate(outs):
        put(values[..., j], out)
    off = start - 4 * first
    return values.reshape(a.shape + (4 * len(calls),))[..., off : off + count]


@functools.lru_cache(maxsize=4096)
def fixed_point(p: float) -> int:
    """floor(p * 2^64) clamped to [0, 2^64 - 1]: the threshold a lane's uniform is compared to."""
    if p <= 0:
        return 0
    if p >= 1:
        return (1 << 64) - 1
    return min(int(np.ldexp(np.float64(p), 64)), (1 << 64) - 1)


ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


SPARSE_BELOW = 1.0 / 128  # Bernoulli(p) with p below this uses the sparse (first-lane) draw


class BernoulliMode(enum.IntEnum):
    """How `bernoulli_words` draws a probability's lanes; the values of philox.cuh's QQ_BERN_*."""

    NEVER = 0  # p <= 0
    ALWAYS = 1  # p >= 1
    BITS = 2  # bit-sliced: SPARSE_BELOW <= p < 1
    SPARSE = 3  # the first lane, then bit-sliced above it: 0 < p < SPARSE_BELOW


def bernoulli_mode(p: float) -> BernoulliMode:
    """The mode of one probability (`_Tables` sorts a draw's slots into the same ones)."""
    if p <= 0:
        return BernoulliMode.NEVER
    if p >= 1:
        return BernoulliMode.ALWAYS
    return BernoulliMode.BITS if p >= SPARSE_BELOW else BernoulliMode.SPARSE


def bernoulli_words(key, slots, p, start: int, count: int) -> np.ndarray:
    """uint64 [len(slots), count]: bit l of word w is 1 with probability p (one for all slots, or
    one per slot), independently, for shot 64*(start + w) + l and each random slot (stream NOISE).
    Exact to float64 rounding of p.

    p >= SPARSE_BELOW: bit-sliced comparison of each lane's uniform with p (planes b = j).
    p <  SPARSE_BELOW: a 32-bit uniform (`words32_range`, b = 0) decides whether any of the 64
    lanes fires (probability 1 - (1-p)^64, to 2^-32); a 64-bit one (b = 1) picks the first firing
    lane from its truncated geometric law; lanes above it are bit-sliced Bernoulli(p) on planes
    b = 2 + j. For small p that is one random word per 64 shots."""
    slots = np.asarray(slots, dtype=np.uint64).reshape(-1)
    out = np.zeros((len(slots), count), dtype=np.uint64)
    rows, cols, masks = bernoulli_sparse(key, slots, p, start, count)
    out[rows, cols] = masks
    return out


def bernoulli_sparse(key, slots, p, start: int, count: int, tables: Optional["_Tables"] = None):
    """`bernoulli_words` as its nonzero entries: (slot index, word offset, mask), row-major order.
    Slots of every probability are drawn together: a sampler's channels cost one draw, not one each.
    `tables`: `probability_tables(p)`, where the caller keeps it (uint64 slots, one p a slot)."""
    if tables is None:
        slots = np.asarray(slots, dtype=np.uint64).reshape(-1)
        p = np.broadcast_to(np.asarray(p, dtype=np.float64), slots.shape)
    parts = []
    if len(slots) and count:
        t = tables if tables is not None else probability_tables(p)
        lib = native.compiled()
        if lib is not None:
            return _native_sparse(lib, key, slots, t, start, count)
        if len(t.certain):
            r, c = _grid(t.certain, count)
            parts.append((r, c, np.full(len(r), ALL)))
        if len(t.dense):
            r, c = _grid(t.dense, count)
            masks = _bit_sliced_at(key, slots[r], t.fixed[r], np.uint64(start) + c.astype(np.uint64), 0)
            keep = masks != 0
            parts.append((r[keep], c[keep], masks[keep]))
        if len(t.sparse):
            parts.append(_sparse_lanes(key, slots, t, start, count))
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64)
    if len(parts) == 1:
        return parts[0]
    r, c, masks = (np.concatenate(x) for x in zip(*parts))
    order = np.argsort(r * count + c, kind="stable")
    return r[order], c[order], masks[order]


def _native_sparse(lib, key, slots: np.ndarray, t: "_Tables", start: int, count: int):
    """`bernoulli_sparse` by the compiled draw (core/native.py): the same entries, from philox.cuh's
    per-word functions."""
    modes, any_thresholds, cut_table, kinds = t.native_arrays()
    slots = np.ascontiguousarray(slots, dtype=np.uint64)
    k0, k1 = (int(k) for k in key)
    at = native.address
    room = t.expected_words * count
    room = int(room + 6 * math.sqrt(room) + 64)
    while True:
        r, c = np.empty(room, dtype=np.int64), np.empty(room, dtype=np.int64)
        masks = np.empty(room, dtype=np.uint64)
        found = lib.qq_host_bernoulli_sparse(k0, k1, int(Stream.NOISE), at(slots), at(modes), at(t.fixed),
                                             at(any_thresholds), at(cut_table), at(kinds), len(slots), int(start),
                                             int(count), at(r), at(c), at(masks), room)
        if found <= room:
            return r[:found], c[:found], masks[:found]
        room = found  # more words fired than room was made for (rare): again, with room for all


class _Tables:
    """What a draw needs of its slots' probabilities p, made once per distinct array p (a sampler
    draws the same slots at the same probabilities every call): which slots are certain, dense
    (bit-sliced) and sparse (first lane), each slot's fixed-point threshold, and for the sparse
    ones their any-lane threshold and which distinct probability they have (its first-lane cuts)."""

    def __init__(self, p: np.ndarray):
        self.certain = np.flatnonzero(p >= 1)
        self.dense = np.flatnonzero((p >= SPARSE_BELOW) & (p < 1))
        self.sparse = np.flatnonzero((p > 0) & (p < SPARSE_BELOW))
        distinct, inverse = np.unique(p, return_inverse=True)
        self.kind = inverse.reshape(-1)  # the slot's distinct probability
        self.fixed = np.array([fixed_point(float(v)) for v in distinct], dtype=np.uint64)[self.kind]
        self.cuts = [_first_lane_cuts(float(v)) if 0 < v < SPARSE_BELOW else None for v in distinct]
        anyt = np.array([_any_threshold(float(v)) if 0 < v < SPARSE_BELOW else 0 for v in distinct], dtype=np.uint64)
        self.any_sparse = anyt[self.kind[self.sparse]]
        self._any_by_kind = anyt
        # the words a draw is expected to find nonzero, per shot word (sizes the compiled draw's output)
        self.expected_words = len(self.certain) + len(self.dense) + float(np.sum(self.any_sparse)) / 2**32
        self._native = None

    def native_arrays(self):
        """What the compiled draw reads besides `fixed`: each slot's `BernoulliMode`, its any-lane
        threshold, every distinct probability's 63 first-lane cuts (zeros where none), and each
        slot's row of them (`kind`, as int64)."""
        if self._native is None:
            modes = np.full(len(self.kind), BernoulliMode.NEVER, dtype=np.int32)
            modes[self.certain], modes[self.dense] = BernoulliMode.ALWAYS, BernoulliMode.BITS
            modes[self.sparse] = BernoulliMode.SPARSE
            table = np.zeros((len(self.cuts), 63), dtype=np.uint64)
            for row, cuts in enumerate(self.cuts):
                if cuts is not None:
                    table[row] = cuts
            self._native = (modes, self._any_by_kind[self.kind], table, np.ascontiguousarray(self.kind, dtype=np.int64))
        return self._native


_TABLES: dict = {}


def probability_tables(p: np.ndarray) -> _Tables:
    """`_Tables` of the probabilities p (kept by their bytes; read-only)."""
    key = p.tobytes()
    found = _TABLES.get(key)
    if found is None:
        if len(_TABLES) > 64:
            _TABLES.clear()
        found = _TABLES[key] = _Tables(np.ascontiguousarray(p))
    return found


def _grid(rows: np.ndarray, count: int):
    """Every (row, word) pair of `rows`, row-major."""
    return np.repeat(rows, count), np.tile(np.arange(count, dtype=np.int64), len(rows))


def _sparse_lanes(key, slots, t: _Tables, start: int, count: int):
    """The small-p draw of `bernoulli_words` for the sparse slots of tables `t` (see there)."""
    rows = t.sparse
    any_fire = below32_range(key, Stream.NOISE, slots[rows], 0, start, count, t.any_sparse)
    i, c = nonzero_2d(any_fire)
    r = rows[i]
    cols = np.uint64(start) + c.astype(np.uint64)
    masks = np.empty(len(r), dtype=np.uint64)
    for lo in range(0, len(r), _PAIRS_A_CHUNK):
        hi = min(len(r), lo + _PAIRS_A_CHUNK)
        masks[lo:hi] = _firing_lanes(key, slots, t, r[lo:hi], cols[lo:hi])
    return r, c, masks


# Firing pairs drawn at a time: a noisy batch's draw (d = 7 at p = 0.003, 16,384 shots: 119k pairs, a
# first pass of 1.07M words) made arrays of tens of MB a step; chunks of 16k pairs keep them to a few
# MB (2-core machine: that batch 109-113 -> 95-101 ms; 4k pairs a chunk 100-102, 1k 108-114). The
# pairs are independent, so the bits do not depend on it.
_PAIRS_A_CHUNK = 1 << 14


def _firing_lanes(key, slots, t: _Tables, r: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The lanes that fire in the words (slot r, word cols) each of which has one (the any-lane
    draw said so): the first from its truncated geometric law, the rest bit-sliced above it."""
    # The pairs of even words first (stably): a word's Philox call is its pair's, and which half of
    # the call's outputs it takes is then a slice, not a selection element by element (`_pair_words`).
    odd = (cols & np.uint64(1)).astype(bool)
    order = np.argsort(odd, kind="stable")
    evens = len(odd) - int(np.count_nonzero(odd))
    r_by, cols_by = r[order], cols[order]
    # plane 1 (the first lane) and the bit-sliced draw's first pass (planes 2, 3, ...) in one draw
    drawn = _pair_words(key, slots[r_by], np.arange(1, 2 + _FIRST_PASS, dtype=np.uint64), cols_by, evens)
    u = drawn[:, 0]
    kinds = t.kind[r_by]
    present = np.flatnonzero(np.bincount(kinds))
    if len(present) == 1:  # one probability (a code's noise often is): no selection
        first = np.searchsorted(t.cuts[present[0]], u, side="right").astype(np.uint64)
    else:
        first = np.empty(len(r), dtype=np.uint64)
        for kind in present.tolist():
            sel = kinds == kind
            first[sel] = np.searchsorted(t.cuts[kind], u[sel], side="right")
    above = ~((np.uint64(2) << first) - np.uint64(1))  # lanes strictly above `first`
    above[first == 63] = 0
    rest = _bit_sliced_at(key, slots[r_by], t.fixed[r_by], cols_by, 2, drawn[:, 1:], lanes=above, evens=evens)
    masks = np.empty(len(r), dtype=np.uint64)
    masks[order] = (np.uint64(1) << first) | rest
    return masks


def _pair_words(key, slots: np.ndarray, planes: np.ndarray, cols: np.ndarray, evens: int) -> np.ndarray:
    """uint64 [pairs, planes]: `words(key, NOISE, slots[:, None], planes[None, :], cols[:, None])`
    for pairs whose first `evens` words are even and the rest odd: one Philox call per (pair,
    plane), its outputs r0 | r1 << 32 for an even word and r2 | r3 << 32 for an odd one, each taken
    as a slice of the call's rows."""
    r0, r1, r2, r3 = philox4x32((cols >> np.uint64(1))[:, None], slots[:, None], planes[None, :],
                                np.uint64(Stream.NOISE), key)
    out = np.empty(r0.shape, dtype=np.uint64)
    for lo, hi, (low, high) in ((0, evens, (r0, r1)), (evens, len(cols), (r2, r3))):
        np.left_shift(high[lo:hi], np.uint64(32), out=out[lo:hi])
        out[lo:hi] |= low[lo:hi]
    return out


_SPARSE_LANES = 8  # words with at most this many firing lanes list them a lane at a time


def set_bits(fire: np.ndarray):
    """(entry, lane) of every set bit of the words `fire` (their firing lanes), entry-major and
    lanes ascending (what np.nonzero of the unpacked bits gives). Noise words hold a lane or two:
    their lowest set bits are taken off a round at a time (a few operations on the words), where
    unpacking made 64 bytes a word to scan."""
    counts = np.bitwise_count(fire)
    rounds = int(counts.max()) if len(fire) else 0
    if rounds > _SPARSE_LANES:
        return np.nonzero(np.unpackbits(fire.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little"))
    starts = np.zeros(len(fire) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    entry = np.repeat(np.arange(len(fire)), counts)
    lane = np.empty(int(starts[-1]), dtype=np.int64)
    live = np.flatnonzero(counts)
    rest, at = fire[live], starts[live]
    for _ in range(rounds):
        low = rest & (np.uint64(0) - rest)
        lane[at] = np.bitwise_count(low - np.uint64(1))  # the lowest set bit's index: the ones below it
        rest ^= low
        keep = rest != 0
        rest, at = rest[keep], at[keep] + 1
    return entry, lane


def _any_threshold(p: float) -> int:
    """floor(P(some lane of 64 fires) * 2^32): compared with a 32-bit uniform."""
    return fixed_point(-np.expm1(64 * np.log1p(-p))) >> 32


_CUTS_CACHE: dict = {}


def _first_lane_cuts(p: float) -> np.ndarray:
    """Thresholds t_l = P(first lane <= l | some lane fires), l = 0..62, as 64-bit fixed point."""
    if p not in _CUTS_CACHE:
        lanes = np.arange(1, 64, dtype=np.float64)
        cdf = np.expm1(lanes * np.log1p(-p)) / np.expm1(64 * np.log1p(-p))
        _CUTS_CACHE[p] = np.array([fixed_point(v) for v in cdf], dtype=np.uint64)
    return _CUTS_CACHE[p]


# Planes per pass: a lane stays undecided through a plane with probability 1/2, so the first pass
# decides most of a word's 64 lanes. Small draws then take few wide passes (each pass is a few
# dozen array operations whatever its size); large ones go a plane at a time, so that no plane is
# drawn for a pair already decided (there the draws' volume is the cost).
_FIRST_PASS = 8
_WIDE_PASSES = (16, 40)
_LARGE_DRAW = 1 << 14  # pairs still undecided from which passes are one plane


def _bit_sliced_at(key, slots, threshold: np.ndarray, cols, plane0, first_pass=None, lanes=None,
                   evens: Optional[int] = None):
    """Bit-sliced Bernoulli for scattered (slot, word) pairs against per-pair fixed-point thresholds:
    lane l fires when its uniform (bit 63 - j = bit l of plane plane0 + j) is below the threshold.
    Planes are drawn a pass at a time for the pairs still undecided; a plane drawn after a pair is
    decided changes nothing, so the bits are those of a plane-by-plane draw. `first_pass`: the
    first pass's planes, when the caller drew them already. `lanes`: per pair, the lanes the caller
    keeps (the others come out 0 and are never waited for). `evens`: the pairs' first `evens` words
    are even and the rest odd (`_pair_words`); None: any order."""
    out = np.zeros(len(slots), dtype=np.uint64)
    if lanes is None:
        undecided = np.full(len(slots), ALL)
        live = np.arange(len(slots))
    else:
        undecided = lanes.copy()
        live = np.flatnonzero(undecided)
    # The planes on which every threshold has the same bit (often all but the last few: channels
    # whose probabilities differ by float rounding) are compared a run of equal bits at a time.
    if len(threshold):
        differ = int(np.bitwise_or.reduce(threshold) ^ np.bitwise_and.reduce(threshold))
        common, common_threshold = 64 - differ.bit_length(), int(threshold[0])
    else:
        common, common_threshold = 64, 0
    j0, wide = 0, iter(_WIDE_PASSES)
    while len(live) and j0 < 64:
        width = _FIRST_PASS if j0 == 0 else (1 if len(live) > _LARGE_DRAW else next(wide, 64 - j0))
        width = min(width, 64 - j0)
        planes = np.arange(j0, j0 + width, dtype=np.uint64)
        if j0 == 0 and first_pass is not None:
            u = first_pass if len(live) == len(slots) else first_pass[live]
        elif evens is not None:  # live is ascending, so its pairs of even words still come first
            u = _pair_words(key, slots[live], np.uint64(plane0) + planes, cols[live], int(np.searchsorted(live, evens)))
        else:
            u = words(key, Stream.NOISE, slots[live, None], np.uint64(plane0) + planes[None, :], cols[live, None])
        und, got = undecided[live], out[live]
        shared = min(width, max(0, common - j0))
        if shared:
            _compare_runs(u, common_threshold, j0, shared, und, got)
        if shared < width:
            # all ones where the threshold's bit is 1 (a lane with bit 0 there is below it)
            t = np.uint64(0) - ((threshold[live, None] >> (np.uint64(63) - planes[None, shared:]))
                                & np.uint64(1))
            for k in range(shared, width):
                got |= und & ~u[:, k] & t[:, k - shared]
                und &= ~(u[:, k] ^ t[:, k - shared])
                if k % 8 == 7 and not und.any():
                    break
        out[live], undecided[live] = got, und
        live = live[und != 0]
        j0 += width
    return out


def _compare_runs(u: np.ndarray, threshold: int, j0: int, width: int, und: np.ndarray, got: np.ndarray) -> None:
    """`_bit_sliced_at`'s comparison on planes j0 .. j0 + width (columns of u) against one
    threshold, a run of equal threshold bits at a time (in place on und, got). Through a run of
    0 bits a lane stays undecided while its bits are 0; through a run of 1 bits it fires at its
    first 0 bit and stays undecided while they are 1: one reduction a run, not two operations a plane."""
    k = 0
    while k < width:
        bit = (threshold >> (63 - j0 - k)) & 1
        end = k + 1
        while end < width and (threshold >> (63 - j0 - end)) & 1 == bit:
            end += 1
        if bit:
            ones = np.bitwise_and.reduce(u[:, k:end], axis=1)
            got |= und & ~ones
            und &= ones
        else:
            und &= ~np.bitwise_or.reduce(u[:, k:end], axis=1)
        k = end


_THRESHOLDS: dict = {}


def thresholds(probs: np.ndarray) -> np.ndarray:
    """Cumulative thresholds (uint64) that split a 64-bit uniform among outcomes ∝ probs (made once
    per distinct probs: a sampling call asks for each channel's; read-only)."""
    probs = np.asarray(probs, dtype=np.float64)
    found = _THRESHOLDS.get(probs.tobytes())
    if found is None:
        if len(_THRESHOLDS) > 4096:
            _THRESHOLDS.clear()
        cum = np.cumsum(probs / probs.sum())[:-1]
        found = np.array([fixed_point(c) for c in cum], dtype=np.uint64)
        found.flags.writeable = False
        _THRESHOLDS[probs.tobytes()] = found
    return found
