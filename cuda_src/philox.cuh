// philox.cuh: Philox4x32-10 counter-based random words, bit-identical to cirq_quasarq/core/rng.py.
//
//   qq_word(key, stream, a, b, i) = 64 bits: Philox(key, counter = (i >> 1, a, b, stream)) gives
//   r0..r3; even i takes r0 | r1 << 32, odd i takes r2 | r3 << 32.
//
// Every random bit of both engines is such a word, so results never depend on launch shapes or
// chunk sizes. All functions are __host__ __device__ so the host tests can check them too.
#pragma once

#ifndef QQ_HD
#define QQ_HD __host__ __device__ __forceinline__
#endif

typedef unsigned long long qq_u64;
typedef unsigned int qq_u32;

#define QQ_ALL_ONES 0xFFFFFFFFFFFFFFFFull

struct qq_key {
    qq_u32 k0, k1;
};

QQ_HD qq_u32 qq_mulhi32(qq_u32 a, qq_u32 b) {
#ifdef __CUDA_ARCH__
    return __umulhi(a, b);
#else
    return (qq_u32)(((qq_u64)a * (qq_u64)b) >> 32);
#endif
}

// Ten Philox rounds on counter c (in place), key (k0, k1) bumped by the Weyl constants per round.
QQ_HD void qq_philox4x32_10(qq_u32 c[4], qq_u32 k0, qq_u32 k1) {
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        const qq_u32 hi0 = qq_mulhi32(0xD2511F53u, c[0]);
        const qq_u32 lo0 = 0xD2511F53u * c[0];
        const qq_u32 hi1 = qq_mulhi32(0xCD9E8D57u, c[2]);
        const qq_u32 lo1 = 0xCD9E8D57u * c[2];
        const qq_u32 n0 = hi1 ^ c[1] ^ k0;
        const qq_u32 n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

// Both words of one Philox call: indices 2*pair (even) and 2*pair + 1 (odd).
// A counter's bits past 32 go to counter word 3 above the stream id (< 8): no draw repeats before
// 2^62 shots, and counters below 2^32 are unchanged (rng.py, philox4x32).
#define QQ_STREAM_BITS 3

QQ_HD void qq_word_pair(qq_key key, qq_u32 stream, qq_u32 a, qq_u32 b, qq_u64 pair, qq_u64* even,
                        qq_u64* odd) {
    qq_u32 c[4] = {(qq_u32)pair, a, b, stream | ((qq_u32)(pair >> 32) << QQ_STREAM_BITS)};
    qq_philox4x32_10(c, key.k0, key.k1);
    *even = (qq_u64)c[0] | ((qq_u64)c[1] << 32);
    *odd = (qq_u64)c[2] | ((qq_u64)c[3] << 32);
}

QQ_HD qq_u64 qq_word(qq_key key, qq_u32 stream, qq_u32 a, qq_u32 b, qq_u64 index) {
    qq_u64 even, odd;
    qq_word_pair(key, stream, a, b, index >> 1, &even, &odd);
    return (index & 1) ? odd : even;
}

// 32-bit draws (rng.words32_range): value i is output r[i & 3] of Philox(counter = (i >> 2, a, b, stream)).
// qq_word32_quad gives values 4*quad .. 4*quad + 3 from one call.
QQ_HD void qq_word32_quad(qq_key key, qq_u32 stream, qq_u32 a, qq_u32 b, qq_u64 quad, qq_u32 out[4]) {
    out[0] = (qq_u32)quad;
    out[1] = a;
    out[2] = b;
    out[3] = stream | ((qq_u32)(quad >> 32) << QQ_STREAM_BITS);
    qq_philox4x32_10(out, key.k0, key.k1);
}

QQ_HD qq_u32 qq_word32(qq_key key, qq_u32 stream, qq_u32 a, qq_u32 b, qq_u64 index) {
    qq_u32 c[4];
    qq_word32_quad(key, stream, a, b, index >> 2, c);
    const int k = (int)(index & 3);
    return k == 0 ? c[0] : k == 1 ? c[1] : k == 2 ? c[2] : c[3];
}

// Bernoulli mode of a channel (rng.bernoulli_words): never fires, always fires, bit-sliced
// (p >= rng.SPARSE_BELOW) or sparse (smaller p).
#define QQ_BERN_NEVER 0
#define QQ_BERN_ALWAYS 1
#define QQ_BERN_BITS 2
#define QQ_BERN_SPARSE 3

// Bit-sliced Bernoulli for 64 lanes of shot word w (rng._bit_sliced_at): lane l's uniform u has
// bit 63-j equal to bit l of NOISE word (slot, plane0 + j, w); the lane fires when u < threshold.
// Planes are drawn most significant first, only while some lane is undecided.
QQ_HD qq_u64 qq_bit_sliced(qq_key key, qq_u32 noise_stream, qq_u64 threshold, qq_u32 slot, qq_u64 w,
                           int plane0) {
    qq_u64 out = 0, undecided = QQ_ALL_ONES;
    for (int j = 0; j < 64 && undecided; ++j) {
        const qq_u64 u = qq_word(key, noise_stream, slot, (qq_u32)(plane0 + j), w);
        if ((threshold >> (63 - j)) & 1) {
            out |= undecided & ~u;  // threshold bit 1, lane bit 0: below the threshold, fires
            undecided &= u;
        } else {
            undecided &= ~u;  // threshold bit 0, lane bit 1: above, never fires
        }
    }
    return out;
}

QQ_HD int qq_choose(const qq_u64* cut, int num_cut, qq_u64 u);

// The 64 lanes of a sparse-mode word once plane 0 said that some lane fires: plane 1 (64-bit)
// picks the first firing lane from the 63 cumulative `first_cuts`, lanes above it are
// bit-sliced on planes 2+j. Frame mode calls it on its own for the few words that fire.
QQ_HD qq_u64 qq_sparse_lanes(qq_key key, qq_u32 noise_stream, qq_u64 threshold, const qq_u64* first_cuts,
                             qq_u32 slot, qq_u64 w) {
    const int first = qq_choose(first_cuts, 63, qq_word(key, noise_stream, slot, 1, w));
    const qq_u64 above = first == 63 ? 0ull : ~((2ull << first) - 1);  // lanes strictly above first
    const qq_u64 rest = above ? qq_bit_sliced(key, noise_stream, threshold, slot, w, 2) & above : 0ull;
    return (1ull << first) | rest;
}

// 64 lanes of Bernoulli(p) for shot word w of random slot `slot`, exactly as rng.bernoulli_words:
//   sparse: a 32-bit draw of plane 0 decides whether any lane fires (u32 < any_threshold, a 32-bit
//   fixed-point probability), then qq_sparse_lanes.
QQ_HD qq_u64 qq_bernoulli_word(qq_key key, qq_u32 noise_stream, int mode, qq_u64 threshold,
                               qq_u64 any_threshold, const qq_u64* first_cuts, qq_u32 slot, qq_u64 w) {
    if (mode == QQ_BERN_NEVER) return 0;
    if (mode == QQ_BERN_ALWAYS) return QQ_ALL_ONES;
    if (mode == QQ_BERN_BITS) return qq_bit_sliced(key, noise_stream, threshold, slot, w, 0);
    if ((qq_u64)qq_word32(key, noise_stream, slot, 0, w) >= any_threshold) return 0;
    return qq_sparse_lanes(key, noise_stream, threshold, first_cuts, slot, w);
}

// Outcome index for uniform u: the number of (sorted) cumulative thresholds <= u
// (numpy.searchsorted(cut, u, side="right")), by bisection.
QQ_HD int qq_choose(const qq_u64* cut, int num_cut, qq_u64 u) {
    int lo = 0, hi = num_cut;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (cut[mid] <= u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}
