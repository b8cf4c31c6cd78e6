// host_tableau.cpp: the NumPy engine's tableau mode (engines/numpy/tableau.py) compiled for the CPU:
// a layer of gates as products of old rows (GateTable's groups) and a collapse's CX fan, the row
// operations of docs/engine-semantics.md that a first call's reference run spends its time in.
// core/native.py builds it beside host_draws.cpp; the NumPy code stays the definition and the
// oracle (tests/test_native_tableau.py) and the fallback.
//
// Rows are uint64 words: X part at X[r * stride + w], Z part at Z[r * stride + w], sign S[r].
typedef unsigned long long qq_u64;

// popcount as one instruction where the processor has it (chosen when the library loads), a
// sequence of bit operations on x86-64 processors without it
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QQ_POPCOUNT_CLONES __attribute__((target_clones("popcnt", "default")))
#else
#define QQ_POPCOUNT_CLONES
#endif

// The outputs of one group of a layer: output j is i^logs[j] times the product of the old rows
// inputs[0][j], inputs[1][j], ... (inputs[k * m + j]), multiplied in that order (tableau.py,
// _product_log: each factor adds |anti| + 2 |anti & (x ^ z ^ (a_x & b_z))| to log_i, anti the
// positions where the factors anticommute) and every input's sign twice. Writes the product's X
// and Z parts to result[j * w .. ] and result[(m + j) * w ..], and its sign (bit 1 of log_i) to signs[j].
extern "C" QQ_POPCOUNT_CLONES void qq_host_products(const qq_u64* X, const qq_u64* Z, long long stride,
                                                    long long w, const unsigned char* S, long long m, int size,
                                                    const long long* inputs, const long long* logs,
                                                    qq_u64* result, unsigned char* signs) {
    for (long long j = 0; j < m; ++j) {
        qq_u64* ax = result + j * w;
        qq_u64* az = result + (m + j) * w;
        const long long r0 = inputs[j];
        long long log_i = logs[j] + 2 * (long long)S[r0];
        for (long long k = 0; k < w; ++k) {
            ax[k] = X[r0 * stride + k];
            az[k] = Z[r0 * stride + k];
        }
        for (int f = 1; f < size; ++f) {
            const long long r = inputs[(long long)f * m + j];
            const qq_u64* bx = X + r * stride;
            const qq_u64* bz = Z + r * stride;
            long long anti_count = 0, that_count = 0;
            for (long long k = 0; k < w; ++k) {
                const qq_u64 xz = ax[k] & bz[k];
                const qq_u64 anti = (bx[k] & az[k]) ^ xz;
                const qq_u64 px = ax[k] ^ bx[k], pz = az[k] ^ bz[k];
                anti_count += __builtin_popcountll(anti);
                that_count += __builtin_popcountll((px ^ pz ^ xz) & anti);
                ax[k] = px;
                az[k] = pz;
            }
            log_i += anti_count + 2 * that_count + 2 * (long long)S[r];
        }
        signs[j] = (unsigned char)((log_i & 3) >> 1);
    }
}

// CX(p, t) for every victim t (the set bits of v, words w0 .. w0 + nv) on `rows` rows, as
// tableau.py's _cx_fan: with m = |z & v|, a row whose x has bit p takes x ^= v and flips its sign
// by |x & z & v| ^ m (1 ^ z_p) ^ C(m, 2) (mod 2); every row's z at p takes m's parity.
extern "C" QQ_POPCOUNT_CLONES void qq_host_cx_fan(qq_u64* X, qq_u64* Z, unsigned char* S, long long rows,
                                                  long long stride, long long p, long long w0, long long nv,
                                                  const qq_u64* v) {
    const long long wp = p >> 6;
    const int bp = (int)(p & 63);
    for (long long r = 0; r < rows; ++r) {
        qq_u64* x = X + r * stride;
        qq_u64* z = Z + r * stride + w0;
        long long m = 0;
        for (long long k = 0; k < nv; ++k) m += __builtin_popcountll(z[k] & v[k]);
        if ((x[wp] >> bp) & 1) {
            const long long zp = (long long)((Z[r * stride + wp] >> bp) & 1);
            long long c = 0;
            qq_u64* xv = x + w0;
            for (long long k = 0; k < nv; ++k) {
                c += __builtin_popcountll(z[k] & v[k] & xv[k]);
                xv[k] ^= v[k];
            }
            S[r] ^= (unsigned char)((c ^ (m & (1 ^ zp)) ^ (m >> 1)) & 1);
        }
        Z[r * stride + wp] ^= (qq_u64)(m & 1) << bp;
    }
}

// engines/numpy/measured_rows.py's backward sweep: the schedule's runs (start, end, opcode, window;
// four ints a run) from the last to the first over its rows (`fields` ints a row: OP, A, B, ...), on the
// measurements' strings bit-sliced 64 to a word (X, Z: qubit q's words at q * words, signs S).
// what[op]: 0 skipped, 1 a unitary (its pull-back: masks[4 op + j] over the input bits (x0, z0,
// x1, z1) for output bit j, signs[op] its sign's monomials as a set over the 16 masks, arity[op]),
// 2 a collapse, which starts string e (Z at its qubit; e runs from first_event[run] in row order)
// after copying Z's words of that qubit to reset_masks[reset_slot[e] * words] where e is a reset.
// Only the words from first_word[run] on hold begun strings.
extern "C" void qq_host_pullback(const int* rows, long long fields, const int* runs, long long num_runs,
                                 const long long* first_event, const long long* first_word, const unsigned char* what,
                                 const int* arity, const unsigned char* masks, const int* signs, qq_u64* X, qq_u64* Z,
                                 qq_u64* S, long long words, const long long* reset_slot, qq_u64* reset_masks) {
    for (long long r = num_runs - 1; r >= 0; --r) {
        const int lo = runs[4 * r], hi = runs[4 * r + 1], op = runs[4 * r + 2];
        const long long w0 = first_word[r];
        if (what[op] == 1) {
            const unsigned char* m = masks + 4 * op;
            const unsigned monomials = (unsigned)signs[op];
            const bool two = arity[op] == 2;
            for (int i = lo; i < hi; ++i) {
                const int* row = rows + (long long)i * fields;
                qq_u64* xa = X + (long long)row[1] * words;
                qq_u64* za = Z + (long long)row[1] * words;
                qq_u64* xb = two ? X + (long long)row[2] * words : nullptr;
                qq_u64* zb = two ? Z + (long long)row[2] * words : nullptr;
                for (long long w = w0; w < words; ++w) {
                    const qq_u64 in[4] = {xa[w], za[w], two ? xb[w] : 0ull, two ? zb[w] : 0ull};
                    qq_u64 out[4];
                    for (int j = 0; j < 4; ++j)
                        out[j] = ((m[j] & 1) ? in[0] : 0ull) ^ ((m[j] & 2) ? in[1] : 0ull) ^
                                 ((m[j] & 4) ? in[2] : 0ull) ^ ((m[j] & 8) ? in[3] : 0ull);
                    qq_u64 flip = 0;
                    for (int u = 1; u < 16; ++u) {
                        if (!((monomials >> u) & 1)) continue;
                        qq_u64 t = ~0ull;
                        for (int j = 0; j < 4; ++j)
                            if ((u >> j) & 1) t &= in[j];
                        flip ^= t;
                    }
                    S[w] ^= flip;
                    xa[w] = out[0];
                    za[w] = out[1];
                    if (two) {
                        xb[w] = out[2];
                        zb[w] = out[3];
                    }
                }
            }
        } else if (what[op] == 2) {
            for (int i = hi - 1; i >= lo; --i) {
                const long long e = first_event[r] + (i - lo);
                qq_u64* z = Z + (long long)rows[(long long)i * fields + 1] * words;
                if (reset_slot[e] >= 0)
                    for (long long w = 0; w < words; ++w) reset_masks[reset_slot[e] * words + w] = z[w];
                z[e >> 6] |= 1ull << (e & 63);
            }
        }
    }
}
