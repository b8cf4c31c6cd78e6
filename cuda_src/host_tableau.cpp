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
