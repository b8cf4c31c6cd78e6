// paulis.cuh: word-parallel Pauli arithmetic with phases (64 positions per 64-bit word).
//
// A Pauli letter is (x, z) with Y = i·X·Z. The product P·Q picks up i^g, g = sum over positions of
// +1 for (X,Y), (Y,Z), (Z,X) and -1 for the reverse pairs; qq_mul_phase returns the contribution
// of one word (to be summed mod 4 over a row's words). Also: bit helpers and the in-word prefix
// XOR used by the measurement elimination (eq. CXSign / zc in docs/engine-semantics.md).
#pragma once
#include "philox.cuh"

QQ_HD int qq_popc(qq_u64 v) {
#ifdef __CUDA_ARCH__
    return __popcll(v);
#else
    return __builtin_popcountll(v);
#endif
}

QQ_HD int qq_ctz(qq_u64 v) {
#ifdef __CUDA_ARCH__
    return __ffsll((long long)v) - 1;
#else
    return __builtin_ctzll(v);
#endif
}

QQ_HD qq_u64 qq_spread(int bit) { return bit ? QQ_ALL_ONES : 0ull; }

// log_i of the phase of (x1, z1)·(x2, z2) restricted to one word (not yet reduced mod 4).
QQ_HD int qq_mul_phase(qq_u64 x1, qq_u64 z1, qq_u64 x2, qq_u64 z2) {
    const qq_u64 y1 = x1 & z1, y2 = x2 & z2;
    const qq_u64 ox1 = x1 & ~z1, oz1 = z1 & ~x1;
    const qq_u64 ox2 = x2 & ~z2, oz2 = z2 & ~x2;
    const qq_u64 plus = (ox1 & y2) | (y1 & oz2) | (oz1 & ox2);
    const qq_u64 minus = (y1 & ox2) | (oz1 & y2) | (ox1 & oz2);
    return qq_popc(plus) - qq_popc(minus);
}

// The same phases summed over many words without a popcount a word: per position a 2-bit counter
// (bit planes c1, c2) of the products' i^g mod 4. Where the two letters anticommute
// ((x1 & z2) ^ (z1 & x2)), g is +1 for (X,Y), (Y,Z), (Z,X), which is where z1 ^ x2 ^ !(x1 | z2)
// holds, and -1 (= 3 mod 4) for the reverse pairs; adding 1 flips c2 where c1 is set, adding 3
// where it is clear, and both flip c1. qq_phase_total: the sum mod 4 over every position.
struct QQPhaseCount {
    qq_u64 c1, c2;
};

QQ_HD void qq_phase_add(QQPhaseCount* acc, qq_u64 x1, qq_u64 z1, qq_u64 x2, qq_u64 z2) {
    const qq_u64 anti = (x1 & z2) ^ (z1 & x2);
    const qq_u64 minus = z1 ^ x2 ^ (x1 | z2);  // where a +1 would be -1 instead
    acc->c2 ^= anti & (acc->c1 ^ minus);
    acc->c1 ^= anti;
}

QQ_HD int qq_phase_total(QQPhaseCount acc) { return (qq_popc(acc.c1) + 2 * qq_popc(acc.c2)) & 3; }

// Bit i of the result is the XOR of bits 0..i of v.
QQ_HD qq_u64 qq_prefix_xor_inclusive(qq_u64 v) {
    v ^= v << 1;
    v ^= v << 2;
    v ^= v << 4;
    v ^= v << 8;
    v ^= v << 16;
    v ^= v << 32;
    return v;
}

// One word of a gate applied to the inverse tableau (Alg. 3 in our convention). `in` holds the old
// rows' words in the order X_q0, Z_q0, X_q1, Z_q1 as (x, z) pairs: in[2*r] = x part, in[2*r + 1] =
// z part of row r. `img[g]` = (sign, x0, z0, x1, z1) is G†·P_g·G for generator g of the gate. The new
// row g is the product of the selected old rows in that order; out[2*g], out[2*g+1] get its words
// (one-qubit gates: the table's rows 2, 3 are zero, so only in[0..3] are read and out[0..3] meant)
// and g_phase[g] accumulates the product's log_i contribution of this word (the caller adds the
// Y letters, the old rows' signs and the image sign once per row, after reducing over words).
QQ_HD void qq_gate_word(const unsigned char (*img)[5], const qq_u64 in[8], qq_u64 out[8],
                        int g_phase[4]) {
#pragma unroll
    for (int g = 0; g < 4; ++g) {
        qq_u64 ax = 0, az = 0;
        int ph = 0;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            if (img[g][1 + r]) {
                const qq_u64 rx = in[2 * r], rz = in[2 * r + 1];
                ph += qq_mul_phase(ax, az, rx, rz);
                ax ^= rx;
                az ^= rz;
            }
        }
        out[2 * g] = ax;
        out[2 * g + 1] = az;
        g_phase[g] += ph;
    }
}

// The old rows that new row g of a gate multiplies (bit r: row r of in[], in qq_gate_word's order),
// read from its image: 1 << g where the row stays itself.
QQ_HD int qq_image_rows(const unsigned char (*img)[5], int arity, int g) {
    int sel = 0;
    for (int r = 0; r < 2 * arity; ++r) sel |= (img[g][1 + r] ? 1 : 0) << r;
    return sel;
}

// The sign of new row g once the word phases are summed: image sign, one i per Y letter, the
// old rows' signs (each -1 = i^2) and the product phase; the total must be even.
QQ_HD int qq_gate_sign(const unsigned char (*img)[5], int arity, int g, int phase_sum,
                       const int old_sign[4]) {
    int log_i = 2 * img[g][0] + phase_sum;
    for (int j = 0; j < arity; ++j) {
        const int xb = img[g][1 + 2 * j], zb = img[g][2 + 2 * j];
        if (xb && zb) log_i += 1;
        if (xb) log_i += 2 * old_sign[2 * j];
        if (zb) log_i += 2 * old_sign[2 * j + 1];
    }
    return ((log_i & 3) >> 1) & 1;
}

// The generator-space CX(p, t) for every victim t of one word (eq. CXSign / zc), on one row:
//   xw, zw: the row's words at this victim word; v: the victim mask of the word;
//   zp: the row's bit p before any victim; carry: parity of zv in earlier victim words (updated);
//   returns the parity contribution to the sign (to be ANDed with x_p by the caller).
QQ_HD int qq_cx_victims_word(qq_u64 xw, qq_u64 zw, qq_u64 v, int zp, int* carry) {
    const qq_u64 zv = zw & v;
    const qq_u64 c = (qq_prefix_xor_inclusive(zv) ^ zv) ^ qq_spread(*carry);
    const int term = qq_popc(zv & ~(xw ^ qq_spread(zp) ^ c)) & 1;
    *carry ^= qq_popc(zv) & 1;
    return term;
}
