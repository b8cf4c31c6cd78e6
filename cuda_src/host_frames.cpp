// host_frames.cpp: the NumPy engine's frame mode (engines/numpy/frames.py) compiled for the CPU: a
// run of one unitary's gates on the Pauli frames. core/native.py builds it beside host_draws.cpp;
// the NumPy update (`_Unitary.run`, the frame maps of core/opcodes.py) stays the definition, the
// oracle (tests/test_native_frames.py) and the fallback.
//
// Frames are uint64 words, a bit a shot: X of qubit q at fx[q * words + w], Z at fz[q * words + w].
// A run's gates act on distinct qubits (a schedule window's), so updating them one after another
// gives what NumPy's gather, products and scatter give.
typedef unsigned long long qq_u64;

// 256-bit words where the processor has them (chosen when the library loads), 128-bit elsewhere
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QQ_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define QQ_VECTOR_CLONES
#endif

// The gates (q0[g]) or (q0[g], q1[g]) of one opcode, `arity` 1 or 2: output o of a gate (x0, z0,
// x1, z1 in that order) is the XOR of the inputs whose bits masks[o] sets (bit i: input i), all
// outputs made from the old inputs. One pass over each gate's words: NumPy's gathers, XORs and
// scatters of a run were each a pass over all of its rows.
extern "C" QQ_VECTOR_CLONES void qq_host_frame_gates(qq_u64* fx, qq_u64* fz, long long words, const long long* q0,
                                    const long long* q1, long long count, int arity,
                                    const unsigned char* masks) {
    qq_u64 m[4][4];  // m[o][i]: all ones where output o takes input i
    for (int o = 0; o < 4; ++o)
        for (int i = 0; i < 4; ++i)
            m[o][i] = (o < 2 * arity && (masks[o] >> i) & 1) ? ~0ULL : 0ULL;
    if (arity == 1) {
        for (long long g = 0; g < count; ++g) {
            qq_u64* __restrict__ x0 = fx + q0[g] * words;
            qq_u64* __restrict__ z0 = fz + q0[g] * words;
            for (long long w = 0; w < words; ++w) {
                const qq_u64 a = x0[w], b = z0[w];
                x0[w] = (a & m[0][0]) ^ (b & m[0][1]);
                z0[w] = (a & m[1][0]) ^ (b & m[1][1]);
            }
        }
        return;
    }
    for (long long g = 0; g < count; ++g) {
        qq_u64* __restrict__ x0 = fx + q0[g] * words;
        qq_u64* __restrict__ z0 = fz + q0[g] * words;
        qq_u64* __restrict__ x1 = fx + q1[g] * words;
        qq_u64* __restrict__ z1 = fz + q1[g] * words;
        for (long long w = 0; w < words; ++w) {
            const qq_u64 a = x0[w], b = z0[w], c = x1[w], d = z1[w];
            x0[w] = (a & m[0][0]) ^ (b & m[0][1]) ^ (c & m[0][2]) ^ (d & m[0][3]);
            z0[w] = (a & m[1][0]) ^ (b & m[1][1]) ^ (c & m[1][2]) ^ (d & m[1][3]);
            x1[w] = (a & m[2][0]) ^ (b & m[2][1]) ^ (c & m[2][2]) ^ (d & m[2][3]);
            z1[w] = (a & m[3][0]) ^ (b & m[3][1]) ^ (c & m[3][2]) ^ (d & m[3][3]);
        }
    }
}
