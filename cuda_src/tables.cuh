// tables.cuh: the scheduled Program as the kernels see it (uploaded once per program).
//
// QQTables holds device pointers to int32 / uint64 / uint8 arrays built by
// cirq_quasarq/engines/cuda/device_program.py (every field 8 bytes, in this order):
//   ins[i*QQ_NF + f]       scheduled instruction i, field f (program.py's OP, A, B, REC, ...)
//   runs[r*4 + f]          schedule run r: start, end, opcode, window
//   loops[l*5 + f]         loop l: count, rec_stride, rand_stride, REPEAT run, END_REPEAT run
//   ext_qubits[k]          targets of arity-0 opcodes
//   ch_info[c*6 + f]       channel c: Bernoulli mode, outcomes m, arity, outcome thresholds offset,
//                          Paulis offset, first-lane thresholds offset (sparse mode, 63 of them)
//   ch_p[2*c + i]          fixed-point threshold (64-bit) of the channel's total probability p, and
//                          (32-bit) of the probability 1 - (1-p)^64 that any of 64 lanes fires
//   thr[k]                 pool of cumulative outcome thresholds (rng.thresholds), uint64
//   ch_paulis[k]           pool of Paulis (0=I 1=X 2=Y 3=Z), outcome-major, arity per outcome
//   cf_info[f*2 + i]       confusion f: bits k, thresholds offset (row t at offset + t*(2^k - 1))
//   cd_info[d*3 + i]       condition d: refs k, refs offset, table offset
//   cd_refs[2*j + i]       (record slot at iteration 0, loop depth)
//   cd_table[k]            truth tables, one byte per assignment
// and the counts num_runs, n, num_records.
//
// A loop context ctx[c*QQ_CTX_STRIDE + i] = (record shift, random shift, depth_rec[0..QQ_MAX_DEPTH])
// gives the slot shifts of one loop iteration (depth_rec[d]: record shift of the d outermost loops).
#pragma once
#include "philox.cuh"
#include "opcodes.cuh"
#include "program.cuh"

#define QQ_MAX_DEPTH 16
#define QQ_CTX_STRIDE (3 + QQ_MAX_DEPTH)

#define QQ_CH_MODE 0
#define QQ_CH_M 1
#define QQ_CH_ARITY 2
#define QQ_CH_THR 3
#define QQ_CH_PAULI 4
#define QQ_CH_LANES 5
#define QQ_CH_STRIDE 6

#define QQ_LOOP_COUNT 0
#define QQ_LOOP_REC 1
#define QQ_LOOP_RAND 2
#define QQ_LOOP_BEGIN 3
#define QQ_LOOP_END 4
#define QQ_LOOP_STRIDE 5

struct QQTables {
    const int* ins;
    const int* runs;
    const int* loops;
    const int* ext_qubits;
    const int* ch_info;
    const qq_u64* ch_p;
    const qq_u64* thr;
    const unsigned char* ch_paulis;
    const int* cf_info;
    const int* cd_info;
    const int* cd_refs;
    const unsigned char* cd_table;
    long long num_runs;
    long long n;
    long long num_records;
};

// Absolute record slot of condition ref j given the depth shifts of the current iteration.
__device__ __forceinline__ int qq_ref_slot(const QQTables* T, int ref, const int* depth_rec) {
    const int slot0 = T->cd_refs[2 * ref];
    const int depth = T->cd_refs[2 * ref + 1];
    return slot0 + depth_rec[depth];
}

// Tableau mode: is condition `cond` true for the single shot's records (one byte per record)?
__device__ __forceinline__ bool qq_condition_shot(const QQTables* T, int cond, const unsigned char* rec,
                                                  const int* depth_rec) {
    const int k = T->cd_info[3 * cond], ref0 = T->cd_info[3 * cond + 1], tab = T->cd_info[3 * cond + 2];
    int index = 0;
    for (int j = 0; j < k; ++j) index |= (rec[qq_ref_slot(T, ref0 + j, depth_rec)] & 1) << j;
    return T->cd_table[tab + index] != 0;
}

// Targets of a noise instruction: arity 1 / 2 from A, B; arity 0 from ext_qubits[A : A + B].
__device__ __forceinline__ int qq_target(const QQTables* T, const int* row, int j) {
    if (qq_arity[row[QQ_F_OP]] == 0) return T->ext_qubits[row[QQ_F_A] + j];
    return j == 0 ? row[QQ_F_A] : row[QQ_F_B];
}

__device__ __forceinline__ int qq_num_targets(const int* row) {
    const int arity = qq_arity[row[QQ_F_OP]];
    return arity == 0 ? row[QQ_F_B] : arity;
}

// Which outcome of channel c shot `shot` takes, given that the channel fired for it.
__device__ __forceinline__ int qq_channel_outcome(const QQTables* T, qq_key key, int c, qq_u32 slot,
                                                  qq_u64 shot) {
    const int* info = T->ch_info + QQ_CH_STRIDE * c;
    const int m = info[QQ_CH_M];
    if (m <= 1) return 0;
    const qq_u64 u = qq_word(key, QQ_STREAM_NOISE_CHOICE, slot, 0, shot);
    return qq_choose(T->thr + info[QQ_CH_THR], m - 1, u);
}

// The Pauli (0..3) that outcome `k` of channel c puts on target j.
__device__ __forceinline__ int qq_channel_pauli(const QQTables* T, int c, int k, int j) {
    const int* info = T->ch_info + QQ_CH_STRIDE * c;
    return T->ch_paulis[info[QQ_CH_PAULI] + k * info[QQ_CH_ARITY] + j];
}

__device__ __forceinline__ qq_u64 qq_channel_fire(const QQTables* T, qq_key key, int c, qq_u32 slot,
                                                  qq_u64 word) {
    const int* info = T->ch_info + QQ_CH_STRIDE * c;
    return qq_bernoulli_word(key, QQ_STREAM_NOISE, info[QQ_CH_MODE], T->ch_p[2 * c], T->ch_p[2 * c + 1],
                             T->thr + info[QQ_CH_LANES], slot, word);
}

// The lanes of a sparse-mode channel c's word w once its any-lane draw fired (qq_channel_fire's
// sparse case after its first draw).
__device__ __forceinline__ qq_u64 qq_channel_fired_lanes(const QQTables* T, qq_key key, int c, qq_u32 slot,
                                                         qq_u64 w) {
    const int* info = T->ch_info + QQ_CH_STRIDE * c;
    return qq_sparse_lanes(key, QQ_STREAM_NOISE, T->ch_p[2 * c], T->thr + info[QQ_CH_LANES], slot, w);
}
