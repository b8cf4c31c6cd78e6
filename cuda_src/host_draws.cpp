// host_draws.cpp: philox.cuh's noise draws built for the CPU, the NumPy engine's compiled path for
// its hottest loops (core/native.py builds it on first use with the machine's C++ compiler; where
// there is none, the NumPy draws of core/rng.py and core/draws.py, which stay the oracle, run).
//
// - qq_host_bernoulli_sparse is rng.bernoulli_sparse: the nonzero 64-lane Bernoulli words of every
//   (slot, shot word) pair, row-major, each word qq_bernoulli_word's (the CUDA kernels' own
//   function), so the bits are the GPU's and the NumPy draws' by construction;
// - qq_host_words is rng.words; qq_host_paulis is ChannelDraw's choice of each firing lane's Pauli;
// - qq_host_noise_outputs sends each firing lane through a linear map (engines/numpy/linear.py).
// One call does what the NumPy draw takes some hundred array passes for: its Philox rounds were
// half of a noisy sinter batch on the CPU.
#define QQ_HD static inline
#include "philox.cuh"

// Philox calls in flight at once: each call is a chain of ten dependent multiplications, so one at a
// time leaves the processor waiting on their latency; independent calls side by side overlap.
#define QQ_HOST_CALLS 2

// Counters (pair, a, b0 + i, stream) for i < QQ_HOST_CALLS, side by side: out[i] = qq_word's word
// of index 2 * pair + odd, plane b0 + i. philox.cuh's rounds written out here, interleaved round by
// round: two plain qq_word calls drew a d = 7 batch's words 10 % slower (14.5 against 13.2 ms).
static inline void host_planes(qq_key key, qq_u32 stream, qq_u32 a, qq_u32 b0, qq_u64 index, qq_u64* out) {
    const qq_u64 pair = index >> 1;
    qq_u32 c0[QQ_HOST_CALLS], c1[QQ_HOST_CALLS], c2[QQ_HOST_CALLS], c3[QQ_HOST_CALLS];
    for (int i = 0; i < QQ_HOST_CALLS; ++i) {
        c0[i] = (qq_u32)pair;
        c1[i] = a;
        c2[i] = b0 + (qq_u32)i;
        c3[i] = stream | ((qq_u32)(pair >> 32) << QQ_STREAM_BITS);
    }
    qq_u32 k0 = key.k0, k1 = key.k1;
    for (int round = 0; round < 10; ++round) {  // qq_philox4x32_10's rounds, on every counter
        for (int i = 0; i < QQ_HOST_CALLS; ++i) {
            const qq_u64 p0 = (qq_u64)0xD2511F53u * c0[i], p1 = (qq_u64)0xCD9E8D57u * c2[i];
            const qq_u32 n0 = (qq_u32)(p1 >> 32) ^ c1[i] ^ k0, n2 = (qq_u32)(p0 >> 32) ^ c3[i] ^ k1;
            c0[i] = n0;
            c1[i] = (qq_u32)p1;
            c2[i] = n2;
            c3[i] = (qq_u32)p0;
        }
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    for (int i = 0; i < QQ_HOST_CALLS; ++i)
        out[i] = (index & 1) ? ((qq_u64)c2[i] | ((qq_u64)c3[i] << 32)) : ((qq_u64)c0[i] | ((qq_u64)c1[i] << 32));
}

// qq_choose over a sparse draw's 63 first-lane cuts (the number of them at or below u) in six
// selecting steps: u is random, so a bisection's branches were mispredicted at about every step.
// After the steps of 32, 16, ... taken so far, pos + step - 1 <= 62: every read is inside the cuts.
static inline int host_first_lane(const qq_u64* cut, qq_u64 u) {
    int pos = 0;
    for (int step = 32; step; step >>= 1) pos += cut[pos + step - 1] <= u ? step : 0;
    return pos;
}

// qq_sparse_lanes with its planes drawn QQ_HOST_CALLS at a time: planes 1 .. QQ_HOST_CALLS first
// (the first lane and the bit-sliced planes 2, 3, ...), more only while a lane is undecided. A plane
// drawn after every lane is decided changes nothing, so the word is qq_sparse_lanes'.
static inline qq_u64 host_sparse_lanes(qq_key key, qq_u32 stream, qq_u64 threshold, const qq_u64* first_cuts,
                                       qq_u32 slot, qq_u64 w) {
    qq_u64 u[QQ_HOST_CALLS];
    host_planes(key, stream, slot, 1, w, u);
    const int first = host_first_lane(first_cuts, u[0]);
    qq_u64 undecided = first == 63 ? 0ull : ~((2ull << first) - 1);  // lanes strictly above first
    qq_u64 out = 1ull << first;
    int k = 1;  // the next plane of u: bit-sliced plane j = plane 2 + j
    for (int j = 0; j < 64 && undecided; ++j, ++k) {
        if (k == QQ_HOST_CALLS) {
            host_planes(key, stream, slot, (qq_u32)(2 + j), w, u);
            k = 0;
        }
        if ((threshold >> (63 - j)) & 1) {
            out |= undecided & ~u[k];
            undecided &= u[k];
        } else {
            undecided &= ~u[k];
        }
    }
    return out;
}

// Writes the first `capacity` nonzero words (slot index, word offset, mask) and returns how many
// there are: a caller whose arrays were too small calls again with room for all of them.
//   modes[s]: QQ_BERN_*; thresholds[s]: floor(p 2^64); any_thresholds[s]: the sparse mode's
//   32-bit any-lane threshold; cuts + 63 * cut_rows[s]: its first-lane cuts.
extern "C" long long qq_host_bernoulli_sparse(unsigned k0, unsigned k1, unsigned noise_stream,
                                              const qq_u64* slots, const int* modes,
                                              const qq_u64* thresholds, const qq_u64* any_thresholds,
                                              const qq_u64* cuts, const long long* cut_rows,
                                              long long num_slots, long long start, long long count,
                                              long long* out_slot, long long* out_word, qq_u64* out_mask,
                                              long long capacity) {
    const qq_key key = {k0, k1};
    long long found = 0;
    for (long long s = 0; s < num_slots; ++s) {
        const qq_u32 slot = (qq_u32)slots[s];
        const int mode = modes[s];
        if (mode == QQ_BERN_NEVER) continue;
        const qq_u64* first_cuts = cuts + 63 * cut_rows[s];
        qq_u32 quad[4];
        qq_u64 quad_at = QQ_ALL_ONES;
        for (long long c = 0; c < count; ++c) {
            const qq_u64 w = (qq_u64)(start + c);
            qq_u64 mask;
            if (mode == QQ_BERN_SPARSE) {
                // plane 0's 32-bit values: one Philox call serves four consecutive words
                if ((w >> 2) != quad_at) {
                    quad_at = w >> 2;
                    qq_word32_quad(key, noise_stream, slot, 0, quad_at, quad);
                }
                if ((qq_u64)quad[w & 3] >= any_thresholds[s]) continue;
                mask = host_sparse_lanes(key, noise_stream, thresholds[s], first_cuts, slot, w);
            } else {
                mask = qq_bernoulli_word(key, noise_stream, mode, thresholds[s], 0, first_cuts, slot, w);
                if (!mask) continue;
            }
            if (found < capacity) {
                out_slot[found] = s;
                out_word[found] = c;
                out_mask[found] = mask;
            }
            ++found;
        }
    }
    return found;
}

// rng.words on n counters given element by element: out[i] = qq_word(key, stream, a[i], b[i], index[i])
// (a channel's Pauli choice for each firing lane, and other draws of scattered shots).
extern "C" void qq_host_words(unsigned k0, unsigned k1, unsigned stream, const qq_u64* a, const qq_u64* b,
                              const qq_u64* index, long long n, qq_u64* out) {
    const qq_key key = {k0, k1};
    for (long long i = 0; i < n; ++i) out[i] = qq_word(key, stream, (qq_u32)a[i], (qq_u32)b[i], index[i]);
}

// The row of the letters table of lane `lane` of a firing word of slot index s (shot word w): the
// slot's channel's first row, plus, for a channel of several Paulis, the number of its cumulative
// thresholds (cuts[cut_at[s] .. + cut_count[s]]) at or below its NOISE_CHOICE word (slot, 0, shot).
static inline long long host_lane_row(qq_key key, unsigned choice_stream, long long s, qq_u64 shot,
                                      const qq_u64* slots, const long long* slot_row, const long long* cut_at,
                                      const long long* cut_count, const qq_u64* cuts) {
    long long row = slot_row[s];
    if (cut_count[s])
        row += qq_choose(cuts + cut_at[s], (int)cut_count[s], qq_word(key, choice_stream, (qq_u32)slots[s], 0, shot));
    return row;
}

// The Paulis of the firing lanes of n nonzero Bernoulli words (word e: slot index r[e], word offset
// c[e], lanes fire[e]), as core/draws.py's ChannelDraw defines them (host_lane_row). Where given:
// per lane (word-major, lanes ascending) its word, lane and row; per word, `width` masks: bit l of
// masks[e * width + k] is letters[row of lane l][k].
extern "C" void qq_host_paulis(unsigned k0, unsigned k1, unsigned choice_stream, long long start,
                               const long long* r, const long long* c, const qq_u64* fire, long long n,
                               const qq_u64* slots, const long long* slot_row, const long long* cut_at,
                               const long long* cut_count, const qq_u64* cuts, long long* out_entry,
                               long long* out_lane, long long* out_row, const unsigned char* letters,
                               int width, qq_u64* masks) {
    const qq_key key = {k0, k1};
    long long at = 0;
    for (long long e = 0; e < n; ++e) {
        const long long s = r[e];
        const qq_u64 shot0 = (qq_u64)(start + c[e]) << 6;
        qq_u64* word_masks = masks ? masks + e * width : 0;
        if (word_masks)
            for (int k = 0; k < width; ++k) word_masks[k] = 0;
        for (qq_u64 rest = fire[e]; rest; rest &= rest - 1) {
            const int lane = __builtin_ctzll(rest);
            const long long row = host_lane_row(key, choice_stream, s, shot0 + (qq_u64)lane, slots, slot_row, cut_at,
                                                cut_count, cuts);
            if (out_entry) {
                out_entry[at] = e;
                out_lane[at] = lane;
                out_row[at] = row;
                ++at;
            }
            if (word_masks) {
                const unsigned char* letter = letters + row * width;
                for (int k = 0; k < width; ++k) word_masks[k] |= (qq_u64)letter[k] << lane;
            }
        }
    }
}

// The firing lanes of n nonzero Bernoulli words through a linear map (engines/numpy/linear.py): a
// lane's Pauli (host_lane_row) sets input first_input[s] + k for each letter k it has, and each
// input flips bit `lane` of word c[e] of every output ptr[input] .. ptr[input + 1] of `outputs`
// lists: out[output * count + c[e]].
extern "C" void qq_host_noise_outputs(unsigned k0, unsigned k1, unsigned choice_stream, long long start,
                                      const long long* r, const long long* c, const qq_u64* fire, long long n,
                                      const qq_u64* slots, const long long* slot_row, const long long* cut_at,
                                      const long long* cut_count, const qq_u64* cuts, const unsigned char* letters,
                                      int width, const long long* first_input, const long long* ptr,
                                      const long long* outputs, qq_u64* out, long long count) {
    const qq_key key = {k0, k1};
    for (long long e = 0; e < n; ++e) {
        const long long s = r[e];
        const qq_u64 shot0 = (qq_u64)(start + c[e]) << 6;
        qq_u64* column = out + c[e];
        for (qq_u64 rest = fire[e]; rest; rest &= rest - 1) {
            const int lane = __builtin_ctzll(rest);
            const qq_u64 bit = 1ull << lane;
            const unsigned char* letter =
                letters + width * host_lane_row(key, choice_stream, s, shot0 + (qq_u64)lane, slots, slot_row, cut_at,
                                                cut_count, cuts);
            for (int k = 0; k < width; ++k) {
                if (!letter[k]) continue;
                const long long input = first_input[s] + k;
                for (long long o = ptr[input]; o < ptr[input + 1]; ++o) column[outputs[o] * count] ^= bit;
            }
        }
    }
}
