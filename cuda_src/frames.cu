// frames.cu: frame mode (paper section 6, "Sampling on GPU", with the reference XOR it lacks).
//
// Semantics: docs/engine-semantics.md, "Frame mode". Shots are packed 64 to a word; one kernel
// launch runs the WHOLE scheduled program (loops included) for a chunk of shot words: block b owns
// chunk words [b*S, b*S + S) and keeps their Pauli frames of all n qubits in a slab
//   fx[q*S + j], fz[q*S + j]   bit l: X / Z part of the frame of shot 64*(word0 + b*S + j) + l on q
// streaming the instruction array; blocks never talk to each other, so only windows need a
// __syncthreads (instructions of one window act on disjoint qubits and records).
//   frames_program_shared  slab in shared memory (2*n*S words of dynamic shared memory): global
//                          traffic is the records (and the program); for n up to ~14k qubits.
//   frames_program_global  the same program walk with the slab in global memory (gslab, 2*n*S
//                          words per block): any n.
//   frames_program_spread  the same walk by every block of the grid on the same S words (one slab in
//                          global memory), each block a share of every run, a grid barrier between
//                          windows (grid_barrier.cuh): a call of few shot words, to which the two
//                          above give few blocks, each walking every row on one multiprocessor.
// Records: out[r*out_stride + (b*S + j)] = measured bits (reference XOR frame flip) of record r
// for the chunk's words; ref[r] is the reference sample's record bit.
// Launch contract: 1-D grid of ceil(chunk_words / S) blocks (spread: S >= chunk_words, and no more
// blocks than are resident at once), blockDim.x == QQ_FRAME_BLOCK (two blocks a multiprocessor);
// word0 is the chunk's first absolute shot word, so every random word depends on absolute (slot,
// word, shot) only and results do not depend on S, chunking or the kernel.
// defer_noise: noise runs take every word's any-lane draw first and finish only the words that
// fired, 32 at a time per warp (qq_noise_run); 0 runs each word in place (its oracle).
// shot_rows (may be null): the block also writes its words' records in Stim's shot-major layout
// (parities.cu's parities_shot_major, its oracle): rows of row_bytes = ceil(num_records / 8) bytes,
// shot 64*(b*S + j) + l at shot_rows + (64*(b*S + j) + l) * row_bytes (64-byte aligned); staged
// through stage_bytes >= 64 * row_bytes of the dynamic shared memory (qq_shot_major_epilogue).
// With offsets, flat and flip (parities.cu's record_parities tables; offsets null: none), the rows
// hold the num_parities parities of the records instead (row_bytes = ceil(num_parities / 8)): the
// detection events, XORed from the block's records as the epilogue reads them.
// signal_at, num_signals, progress (block kernels; num_signals 0: none): the block adds one to
// progress[k] at the first window barrier where it has written signal_at[k] records (not decreasing;
// the host's frames.record_progress says which records that many are), and to every count left at
// its end; frames_progress_wait lets a band's transpose and copy follow on another stream.
#include "paulis.cuh"
#include "tables.cuh"
#include "grid_barrier.cuh"
#include "parity_rows.cuh"

#define QQ_FRAME_BLOCK 512
#define QQ_MAX_CONFUSION_BITS 16

struct QQFrameRun {
    int rec_shift, rand_shift;
    const int* depth_rec;
};

__device__ __forceinline__ void qq_xor_pauli(qq_u64* fx, qq_u64* fz, size_t at, int pauli, qq_u64 mask) {
    if (pauli == 1 || pauli == 2) fx[at] ^= mask;
    if (pauli == 2 || pauli == 3) fz[at] ^= mask;
}

// The lanes `fire` of shot word w where noise instruction `row` fired: each gets the channel's
// Pauli (the only one, or its own outcome's).
__device__ __forceinline__ void qq_apply_noise(const QQTables* T, const int* row, qq_key key, qq_u32 slot, qq_u64 w,
                                               qq_u64 fire, qq_u64* fx, qq_u64* fz, int S, int j) {
    if (!fire) return;
    const int c = row[QQ_F_AUX];
    const int nt = qq_num_targets(row);
    if (T->ch_info[QQ_CH_STRIDE * c + QQ_CH_M] <= 1) {
        for (int t = 0; t < nt; ++t)
            qq_xor_pauli(fx, fz, (size_t)qq_target(T, row, t) * S + j, qq_channel_pauli(T, c, 0, t), fire);
        return;
    }
    for (qq_u64 left = fire; left; left &= left - 1) {
        const int l = qq_ctz(left);
        const int k = qq_channel_outcome(T, key, c, slot, w * 64 + l);
        for (int t = 0; t < nt; ++t)
            qq_xor_pauli(fx, fz, (size_t)qq_target(T, row, t) * S + j, qq_channel_pauli(T, c, k, t), 1ull << l);
    }
}

// One instruction on one shot word (chunk-relative word oj, absolute word w, slab column j).
__device__ __forceinline__ void qq_frame_step(const QQTables* T, const int* row, int kind, qq_u64* fx,
                                             qq_u64* fz, int S, int j, int oj, qq_u64 w, const QQFrameRun& ctx,
                                             const unsigned char* ref, qq_u64* out, int out_stride, qq_key key) {
    const int op = row[QQ_F_OP];
    if (row[QQ_F_COND] >= 0) {
        // A classically controlled Pauli: XOR it where the shot's condition differs from the
        // reference's (frame mode only runs programs whose controlled ops are Paulis).
        const int c = row[QQ_F_COND];
        const int k = T->cd_info[3 * c], ref0 = T->cd_info[3 * c + 1];
        const unsigned char* table = T->cd_table + T->cd_info[3 * c + 2];
        int aref = 0;
        for (int t = 0; t < k; ++t) aref |= (ref[qq_ref_slot(T, ref0 + t, ctx.depth_rec)] & 1) << t;
        const unsigned char ref_value = table[aref];
        qq_u64 differs = 0;
        for (int l = 0; l < 64; ++l) {
            int a = 0;
            for (int t = 0; t < k; ++t) {
                const size_t slot = qq_ref_slot(T, ref0 + t, ctx.depth_rec);
                a |= (int)((out[slot * out_stride + oj] >> l) & 1) << t;
            }
            if (table[a] != ref_value) differs |= 1ull << l;
        }
        const int pauli = op == QQ_OP_X ? 1 : op == QQ_OP_Y ? 2 : op == QQ_OP_Z ? 3 : 0;
        qq_xor_pauli(fx, fz, (size_t)row[QQ_F_A] * S + j, pauli, differs);
        return;
    }
    if (kind == QQ_KIND_UNITARY || kind == QQ_KIND_FRAME) {  // FRAME: a frame parity, by its map alone
        if (op == QQ_OP_I) return;
        const int arity = qq_arity[op];
        const size_t a0 = (size_t)row[QQ_F_A] * S + j;
        const size_t a1 = arity == 2 ? (size_t)row[QQ_F_B] * S + j : a0;
        const qq_u64 in[4] = {fx[a0], fz[a0], arity == 2 ? fx[a1] : 0ull, arity == 2 ? fz[a1] : 0ull};
        qq_u64 res[4];
#pragma unroll
        for (int o = 0; o < 4; ++o) {
            const int mask = qq_frame_maps[op][o];
            qq_u64 acc = 0;
#pragma unroll
            for (int b = 0; b < 4; ++b)
                if ((mask >> b) & 1) acc ^= in[b];
            res[o] = acc;
        }
        fx[a0] = res[0];
        fz[a0] = res[1];
        if (arity == 2) {
            fx[a1] = res[2];
            fz[a1] = res[3];
        }
    } else if (kind == QQ_KIND_MEASURE || kind == QQ_KIND_RESET || kind == QQ_KIND_MEASURE_RESET) {
        const size_t a = (size_t)row[QQ_F_A] * S + j;
        const qq_u64 fresh = qq_word(key, QQ_STREAM_FRAME_MEASURE, (qq_u32)(row[QQ_F_RAND] + ctx.rand_shift), 0, w);
        if (op != QQ_OP_R) {
            const int r = row[QQ_F_REC] + ctx.rec_shift;
            out[(size_t)r * out_stride + oj] = fx[a] ^ qq_spread(ref[r] & 1);
        }
        if (op == QQ_OP_M) {
            fz[a] ^= fresh;
        } else {
            fx[a] = 0ull;
            fz[a] = fresh;
        }
    } else if (kind == QQ_KIND_NOISE) {
        const qq_u32 slot = (qq_u32)(row[QQ_F_RAND] + ctx.rand_shift);
        qq_apply_noise(T, row, key, slot, w, qq_channel_fire(T, key, row[QQ_F_AUX], slot, w), fx, fz, S, j);
    } else if (kind == QQ_KIND_RECORD_NOISE) {
        // CONFUSION: per shot, the true value of the k records (first most significant) picks a row
        // of the matrix, whose cumulative thresholds turn the shot's uniform into the recorded value.
        const int f = row[QQ_F_AUX];
        const int k = T->cf_info[2 * f], off = T->cf_info[2 * f + 1];
        const int cuts = (1 << k) - 1;
        const int first = row[QQ_F_REC] + ctx.rec_shift;
        const qq_u32 slot = (qq_u32)(row[QQ_F_RAND] + ctx.rand_shift);
        qq_u64 old[QQ_MAX_CONFUSION_BITS], neu[QQ_MAX_CONFUSION_BITS];
        for (int t = 0; t < k; ++t) {
            old[t] = out[(size_t)(first + t) * out_stride + oj];
            neu[t] = 0ull;
        }
        for (int l = 0; l < 64; l += 2) {
            qq_u64 u[2];
            qq_word_pair(key, QQ_STREAM_CONFUSION, slot, 0, (w * 64 + l) >> 1, &u[0], &u[1]);
            for (int h = 0; h < 2; ++h) {
                int truth = 0;
                for (int t = 0; t < k; ++t) truth = (truth << 1) | (int)((old[t] >> (l + h)) & 1);
                const int got = qq_choose(T->thr + off + (size_t)truth * cuts, cuts, u[h]);
                for (int t = 0; t < k; ++t) neu[t] |= (qq_u64)((got >> (k - 1 - t)) & 1) << (l + h);
            }
        }
        for (int t = 0; t < k; ++t) out[(size_t)(first + t) * out_stride + oj] = neu[t];
    }
}


// A run of noise instructions with the any-lane draws first (frame_noise "deferred"). A sparse
// channel (p below rng.SPARSE_BELOW) fires in a word with probability 1 - (1-p)^64, about 6% at
// p = 1e-3, but finishing such a word costs ~9 Philox calls (first lane, bit-sliced planes). Done
// in place, nearly every warp waits on some lane's slow path; here each lane takes one Philox call
// (four consecutive words' any-lane draws, rng.words32_range) and the words that fired go to a
// per-warp queue, finished 32 at a time. Channels of other modes are done in place. Same bits as
// qq_frame_step: every word's lanes come from the same draws, only their order of work differs.
#define QQ_NOISE_QUEUE 64
__device__ __forceinline__ void qq_noise_run(const QQTables* T, const int* rows, int count, qq_u64* fx, qq_u64* fz,
                                             int S, int SE, qq_u64 w0, const QQFrameRun& ctx, qq_key key) {
    __shared__ int queue[QQ_FRAME_BLOCK / 32][QQ_NOISE_QUEUE];
    const int lane = threadIdx.x & 31;
    int* q = queue[threadIdx.x >> 5];
    int queued = 0;  // warp-uniform
    const qq_u64 first_quad = w0 >> 2, quads = ((w0 + SE - 1) >> 2) - first_quad + 1;
    const int items = count * (int)quads;
    // Finishes the queued word (instruction k, slab column j) in entry e = k * 64 + j.
    auto finish = [&](int e) {
        const int* row = rows + (size_t)(e >> 6) * QQ_NF;
        const int j = e & 63;
        const qq_u32 slot = (qq_u32)(row[QQ_F_RAND] + ctx.rand_shift);
        const qq_u64 w = w0 + j;
        qq_apply_noise(T, row, key, slot, w, qq_channel_fired_lanes(T, key, row[QQ_F_AUX], slot, w), fx, fz, S, j);
    };
    for (int base = threadIdx.x - lane; base < items; base += blockDim.x) {
        const int item = base + lane;
        const int k = item / (int)quads;
        const qq_u64 quad = first_quad + (qq_u64)(item - k * (int)quads);
        const int* row = rows + (size_t)k * QQ_NF;
        qq_u32 u[4] = {0u, 0u, 0u, 0u};
        qq_u64 any = 0;  // the any-lane threshold of a sparse channel; 0: nothing to queue
        if (item < items) {
            const int c = row[QQ_F_AUX];
            const qq_u32 slot = (qq_u32)(row[QQ_F_RAND] + ctx.rand_shift);
            if (T->ch_info[QQ_CH_STRIDE * c + QQ_CH_MODE] == QQ_BERN_SPARSE) {
                any = T->ch_p[2 * c + 1];
                qq_word32_quad(key, QQ_STREAM_NOISE, slot, 0, quad, u);
            } else {
                for (int s = 0; s < 4; ++s) {
                    const qq_u64 w = 4 * quad + s;
                    if (w >= w0 && w < w0 + SE)
                        qq_apply_noise(T, row, key, slot, w, qq_channel_fire(T, key, c, slot, w), fx, fz, S,
                                       (int)(w - w0));
                }
            }
        }
        for (int s = 0; s < 4; ++s) {
            const qq_u64 w = 4 * quad + s;
            const bool fired = w >= w0 && w < w0 + SE && (qq_u64)u[s] < any;
            const unsigned mask = __ballot_sync(0xFFFFFFFFu, fired);
            if (fired) q[queued + __popc(mask & ((1u << lane) - 1u))] = k * 64 + (int)(w - w0);
            queued += __popc(mask);
            __syncwarp();
            if (queued >= 32) {
                const int e = q[queued - 32 + lane];
                __syncwarp();
                queued -= 32;
                finish(e);
            }
        }
    }
    if (lane < queued) finish(q[lane]);
    __syncwarp();  // the queue is read before the warp's next run writes it
}

// The block's records of its SE words (out[r*out_stride + b0 + j], complete and visible to the
// block) as shot-major rows, J words at a time staged in `stage` (stage_bytes >= 64*row_bytes of
// shared memory; in the shared kernel the slab, free once the program is done). A warp takes 32
// records of one shot word and transposes them by shuffles into 32 bits of each of the word's 64
// shots: 4 bytes of each shot's row. The stage holds the exact output bytes of J words
// (contiguous, a multiple of 64 bytes from a 64-byte aligned start), which leave in 16-byte
// stores. Done right after the block's last instruction, while its records are in L2, so the
// copy of a piece to the host waits for no other kernel.
__device__ __forceinline__ void qq_shot_major_epilogue(const qq_u64* out, int out_stride, int b0, int SE,
                                                      int num_rows, unsigned char* shot_rows, int row_bytes,
                                                      unsigned char* stage, int stage_bytes, const int* offsets,
                                                      const int* flat, const unsigned char* flip) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int groups = (row_bytes + 3) >> 2;  // of 32 records: 4 bytes of a row
    const int J = stage_bytes / (64 * row_bytes);
    for (int j0 = 0; j0 < SE; j0 += J) {
        const int jn = min(J, SE - j0);
        for (int task = warp; task < jn * groups; task += warps) {
            const int jl = task / groups, g = task - jl * groups;
            const int r = 32 * g + lane;
            const size_t column = (size_t)b0 + j0 + jl;
            qq_u64 v = 0ull;
            if (r < num_rows)  // record r, or parity r of the records
                v = offsets == nullptr ? out[(size_t)r * out_stride + column]
                                       : qq_parity_word(out, out_stride, offsets, flat, flip, r, column);
            const unsigned shots[2] = {qq_transpose32((unsigned)v, lane), qq_transpose32((unsigned)(v >> 32), lane)};
            const int bytes = min(4, row_bytes - 4 * g);
            for (int h = 0; h < 2; ++h) {
                unsigned char* row = stage + (size_t)(64 * jl + 32 * h + lane) * row_bytes + 4 * g;
                for (int k = 0; k < bytes; ++k) row[k] = (unsigned char)(shots[h] >> (8 * k));
            }
        }
        __syncthreads();
        const size_t vectors = (size_t)jn * 64 * row_bytes / 16;
        uint4* dst = reinterpret_cast<uint4*>(shot_rows + (size_t)64 * (b0 + j0) * row_bytes);
        for (size_t i = threadIdx.x; i < vectors; i += blockDim.x) dst[i] = reinterpret_cast<const uint4*>(stage)[i];
        __syncthreads();  // the stage is free for the next words
    }
}

// SPREAD: every block of the launch walks the program on the same words [0, chunk_words) (S of
// them at least), its frames in one global slab, and takes a share of every run: a grid barrier
// (grid_barrier.cuh) where the block kernels take __syncthreads. For calls of few shot words,
// whose blocks would otherwise be few and each walk every row on one multiprocessor.
template <bool SHARED, bool SPREAD>
__device__ __forceinline__ void qq_frames_program(const QQTables* T, const unsigned char* ref, qq_u64* out,
                                                  int out_stride, long long word0, int chunk_words, int S,
                                                  qq_u64* gslab, qq_u32 k0, qq_u32 k1, int defer_noise,
                                                  unsigned char* shot_rows, int row_bytes, int stage_bytes,
                                                  unsigned* bar, int num_parities, const int* offsets,
                                                  const int* flat, const unsigned char* flip,
                                                  const unsigned* signal_at, int num_signals, unsigned* progress) {
    extern __shared__ __align__(16) qq_u64 qq_slab[];
    const size_t n = (size_t)T->n;
    const int b0 = SPREAD ? 0 : blockIdx.x * S;
    const int SE = min(S, chunk_words - b0);  // this block's words (the last block may have fewer)
    if (SE <= 0) return;                      // (never with SPREAD: no block may miss a barrier)
    qq_u64* fx = SHARED ? qq_slab : gslab + (SPREAD ? 0 : (size_t)blockIdx.x * 2 * n * S);
    qq_u64* fz = fx + n * S;
    const qq_key key = {k0, k1};
    // a thread's index and the stride of the loops over a run's (row, word) items
    const int tid = SPREAD ? blockIdx.x * blockDim.x + threadIdx.x : threadIdx.x;
    const int bd = SPREAD ? gridDim.x * blockDim.x : blockDim.x;
    unsigned barriers = 0;  // SPREAD: grid barriers passed
    auto sync = [&]() {
        if (SPREAD)
            qq_grid_barrier(bar, ++barriers);
        else
            __syncthreads();
    };
    // Frames start with x = 0 and random z (stream FRAME_INIT, a = qubit, i = absolute word).
    for (size_t item = tid; item < n * SE; item += bd) {
        const size_t q = item / SE;
        const int j = (int)(item - q * SE);
        fx[q * S + j] = 0ull;
        fz[q * S + j] = qq_word(key, QQ_STREAM_FRAME_INIT, (qq_u32)q, 0, (qq_u64)(word0 + b0 + j));
    }
    // The loop stack (uniform across the block): iteration, loop id and slot shifts per depth.
    int iter[QQ_MAX_DEPTH + 1], lid[QQ_MAX_DEPTH + 1], drec[QQ_MAX_DEPTH + 1], drand[QQ_MAX_DEPTH + 1];
    int depth = 0;
    drec[0] = drand[0] = 0;
    int prev_window = -1;
    bool need_sync = true;
    // Progress (block kernels, may be none): the records this walk has written, counted a row of a
    // record-writing run at a time (the same count on every block); once it reaches signal_at[k], at
    // the next window's barrier, the block adds one to progress[k] (frames_progress_wait).
    unsigned written = 0;
    int signalled = 0;
    auto signal = [&](bool all) {  // at a barrier: whether one is due is the same on every thread
        const bool due = signalled < num_signals && (all || written >= __ldg(signal_at + signalled));
        if (due) __threadfence();  // this thread's records, visible before the count that says so
        sync();
        for (; due && signalled < num_signals && (all || written >= __ldg(signal_at + signalled)); ++signalled)
            if (threadIdx.x == 0) atomicAdd(progress + signalled, 1u);
    };
    // A window's runs continue one another on the threads (and with SPREAD, a noise run's share on the
    // blocks): a run's first item goes to the thread after the last run's last, so that a window of
    // many short runs keeps every thread busy rather than the first ones
    int rot = 0, block_rot = 0;
    const int num_runs = (int)T->num_runs;
    const int* const ins = T->ins;
    // A run's four fields in one load, and the next run's loaded before this one's items: where a
    // thread has an item or two a window, reading the runs one after the other was the walk's latency
    const int4* const runs = reinterpret_cast<const int4*>(T->runs);
    static_assert(QQ_RUN_START == 0 && QQ_RUN_END == 1 && QQ_RUN_OP == 2 && QQ_RUN_WINDOW == 3, "run fields");
    int4 run = num_runs > 0 ? __ldg(runs) : make_int4(0, 0, 0, 0);
    for (int r = 0; r < num_runs;) {
        const int4 next = r + 1 < num_runs ? __ldg(runs + r + 1) : run;  // the walk's usual next run
        const int start = run.x, end = run.y, op = run.z, window = run.w;
        auto jump = [&](int to) {  // the walk goes on at run `to` (a loop's start or end)
            r = to;
            if (r < num_runs) run = __ldg(runs + r);
        };
        if (op == QQ_OP_REPEAT) {
            const int id = ins[(size_t)start * QQ_NF + QQ_F_A];
            const int* L = T->loops + QQ_LOOP_STRIDE * id;
            if (L[QQ_LOOP_COUNT] == 0) {
                jump(L[QQ_LOOP_END] + 1);
                continue;
            }
            ++depth;
            iter[depth] = 0;
            lid[depth] = id;
            drec[depth] = drec[depth - 1];
            drand[depth] = drand[depth - 1];
            ++r;
            run = next;
            continue;
        }
        if (op == QQ_OP_END_REPEAT) {
            const int* L = T->loops + QQ_LOOP_STRIDE * lid[depth];
            if (++iter[depth] < L[QQ_LOOP_COUNT]) {
                drec[depth] += L[QQ_LOOP_REC];
                drand[depth] += L[QQ_LOOP_RAND];
                jump(L[QQ_LOOP_BEGIN] + 1);
            } else {
                --depth;
                ++r;
                run = next;
            }
            need_sync = true;
            continue;
        }
        if (need_sync || window != prev_window) {
            signal(false);  // the previous window's frames and records are complete
            need_sync = false;
            prev_window = window;
            rot = block_rot = 0;
        }
        const QQFrameRun ctx = {drec[depth], drand[depth], drec};
        const int kind = qq_kind[op];
        const int* rows = ins + (size_t)start * QQ_NF;
        // (A classically controlled instruction is a barrier, alone in its run: the plain step.)
        if (kind == QQ_KIND_NOISE && defer_noise && rows[QQ_F_COND] < 0) {
            int lo = 0, hi = end - start;  // SPREAD: this block's share of the run's rows
            if (SPREAD) {
                const int G = (int)gridDim.x, per = (hi + G - 1) / G, shares = (hi + per - 1) / per;
                lo = min(hi, (((int)blockIdx.x - block_rot + G) % G) * per);
                hi = min(hi, lo + per);
                block_rot = (block_rot + shares) % G;
            }
            if (lo < hi) qq_noise_run(T, rows + (size_t)lo * QQ_NF, hi - lo, fx, fz, S, SE, (qq_u64)(word0 + b0), ctx, key);
            ++r;
            run = next;
            continue;
        }
        const int items = (end - start) * SE;
        if (op == QQ_OP_M || op == QQ_OP_MR) written += (unsigned)(end - start);  // a record a row
        for (int item = tid >= rot ? tid - rot : tid - rot + bd; item < items; item += bd) {
            const int k = item / SE;
            const int j = item - k * SE;
            qq_frame_step(T, rows + (size_t)k * QQ_NF, kind, fx, fz, S, j, b0 + j, (qq_u64)(word0 + b0 + j), ctx,
                          ref, out, out_stride, key);
        }
        rot = (int)((rot + (long long)items) % bd);
        ++r;
        run = next;
    }
    if (num_signals) signal(true);  // every record is written: the counts not yet given
    if (shot_rows) {
        sync();  // every record is written (and the slab is free)
        if (!SPREAD || blockIdx.x == 0)
            qq_shot_major_epilogue(out, out_stride, b0, SE, offsets ? num_parities : (int)T->num_records, shot_rows,
                                   row_bytes, reinterpret_cast<unsigned char*>(qq_slab), stage_bytes, offsets, flat,
                                   flip);
    }
    if (SPREAD) qq_grid_barrier_done(bar);
}

extern "C" __global__ void __launch_bounds__(QQ_FRAME_BLOCK, 2)
frames_program_shared(const QQTables* T, const unsigned char* ref, qq_u64* out, int out_stride, long long word0,
                      int chunk_words, int S, qq_u32 k0, qq_u32 k1, int defer_noise, unsigned char* shot_rows,
                      int row_bytes, int stage_bytes, int num_parities, const int* offsets, const int* flat,
                      const unsigned char* flip, const unsigned* signal_at, int num_signals, unsigned* progress) {
    qq_frames_program<true, false>(T, ref, out, out_stride, word0, chunk_words, S, nullptr, k0, k1, defer_noise,
                                   shot_rows, row_bytes, stage_bytes, nullptr, num_parities, offsets, flat, flip,
                                   signal_at, num_signals, progress);
}

extern "C" __global__ void __launch_bounds__(QQ_FRAME_BLOCK, 2)
frames_program_global(const QQTables* T, const unsigned char* ref, qq_u64* out, int out_stride, long long word0,
                      int chunk_words, int S, qq_u64* gslab, qq_u32 k0, qq_u32 k1, int defer_noise,
                      unsigned char* shot_rows, int row_bytes, int stage_bytes, int num_parities,
                      const int* offsets, const int* flat, const unsigned char* flip, const unsigned* signal_at,
                      int num_signals, unsigned* progress) {
    qq_frames_program<false, false>(T, ref, out, out_stride, word0, chunk_words, S, gslab, k0, k1, defer_noise,
                                    shot_rows, row_bytes, stage_bytes, nullptr, num_parities, offsets, flat, flip,
                                    signal_at, num_signals, progress);
}

// At most as many blocks as are resident at once (the grid barrier); bar: two zeroed counters.
extern "C" __global__ void __launch_bounds__(QQ_FRAME_BLOCK, 2)
frames_program_spread(const QQTables* T, const unsigned char* ref, qq_u64* out, int out_stride, long long word0,
                      int chunk_words, int S, qq_u64* gslab, qq_u32 k0, qq_u32 k1, int defer_noise,
                      unsigned char* shot_rows, int row_bytes, int stage_bytes, unsigned* bar, int num_parities,
                      const int* offsets, const int* flat, const unsigned char* flip) {
    qq_frames_program<false, true>(T, ref, out, out_stride, word0, chunk_words, S, gslab, k0, k1, defer_noise,
                                   shot_rows, row_bytes, stage_bytes, bar, num_parities, offsets, flat, flip,
                                   nullptr, 0, nullptr);
}

// Waits on its stream until progress[0] reaches `blocks` (every block of a frame kernel running
// beside it has counted the records a band of the result needs): the band's transpose and copy
// come after it on that stream, while the frame kernel runs on. One thread, polling at a low rate.
extern "C" __global__ void frames_progress_wait(const unsigned* progress, unsigned blocks) {
    const volatile unsigned* count = progress;
    while (*count < blocks) __nanosleep(2000);
    __threadfence();
}
