// host_rows.cpp: passes over Program rows compiled for the CPU (core/native.py builds this file with
// the others):
// - the Stim compiler's whole instructions (compiler/stim_circuit.py, `_flush_segment`): a segment's
//   target text read (`qq_host_parse_targets`), its rows placed (`qq_host_place_segment`) and written
//   sorted by position (`qq_host_write_segment`, by threads of their own: `qq_host_write_segment_later`),
//   as stim_text._parse_targets, stim_rows.segment_rows, _StimCompiler._place_rows and
//   ProgramBuilder.emit_rows make them; a printer's piece read in one pass (`qq_host_read_piece`; a
//   whole compile's text in parts on threads: `qq_host_read_piece_parts`) and its runs checked there
//   (`qq_host_check_segment`), placed unchecked by the compile;
// - the schedule of rows in layers already (schedule/windows.py, `_sorted_from_steps`): their
//   stretches (`qq_host_layer_stretches`) and the stretches moved in key order (`qq_host_move_stretches`);
// - the layers of a schedule's rows in program order (a Cirq circuit's, or a Stim circuit's with
//   TICKs: `qq_host_layer_rows`), and its rows moved in a stable order of their keys by counting
//   (`qq_host_sort_rows`);
// - the qubits each of the GPU engine's gate windows leaves idle (engines/cuda/device_program.py,
//   `idle_lists`): `qq_host_idle_lists`.
// The NumPy code stays the definition, the oracle (tests/test_native_rows.py) and the fallback.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include <unistd.h>

#include "host_parts.cuh"

// Fields of a Program row (core/program.py: OP, A, B, REC, RAND, AUX, COND, FLAGS, STEP).
enum { QQ_OP, QQ_A, QQ_B, QQ_REC, QQ_RAND, QQ_AUX, QQ_COND, QQ_FLAGS, QQ_STEP, QQ_FIELDS };

// One whole instruction of a segment, as stim_circuit._native_entry writes it: its rows' opcode and
// aux, two qubits a row, a random slot a row, a record a row, how it reads '!' (0: never, 1: a Z
// basis collapse, FLAGS from it, 2: an X / Y basis collapse, three rows a target: the basis change
// `before`, the collapse, the change back `after`).
struct qq_entry {
    int code, aux, pair, rand, rec, mode, before, after;
};

// Lines of plain targets ('0 !3 5'): one byte of at most ' ' between targets, '\n' ending a line, a
// target an optional '!' and 1 to 9 digits. Writes the qubits, per target whether it had a '!',
// and each line's first target (starts[0 .. lines]); counts[0] = lines, counts[1] = the '!'s.
// Returns the number of targets, or -1 where the text is not in that form (qubits, inverted:
// room for len / 2 + 1 targets; starts: one more).
extern "C" qq_i64 qq_host_parse_targets(const char* text, qq_i64 len, qq_i64* qubits, unsigned char* inverted,
                                        qq_i64* starts, qq_i64* counts) {
    const unsigned char* s = (const unsigned char*)text;
    qq_i64 at = 0, targets = 0, lines = 0, bangs = 0;
    starts[0] = 0;
    for (;;) {
        unsigned char bang = 0;
        if (at < len && s[at] == '!') {
            bang = 1;
            ++at;
            ++bangs;
        }
        qq_i64 value = 0;
        const qq_i64 first = at;
        while (at < len && s[at] >= '0' && s[at] <= '9' && at - first < 10)
            value = 10 * value + (s[at++] - '0');
        if (at == first || at - first > 9)
            return -1;
        qubits[targets] = value;
        inverted[targets] = bang;
        ++targets;
        if (at == len)
            break;
        const unsigned char gap = s[at++];
        if (gap > ' ')
            return -1;
        if (gap == '\n')
            starts[++lines] = targets;
    }
    starts[++lines] = targets;
    counts[0] = lines;
    counts[1] = bangs;
    return targets;
}

// The line of `s` that starts at byte `at`: its end (its '\n', or len) and the end of its first word
// (its first ' ', or the line's end).
static inline void qq_line(const unsigned char* s, qq_i64 len, qq_i64 at, qq_i64& end, qq_i64& word) {
    const unsigned char* newline = (const unsigned char*)std::memchr(s + at, '\n', len - at);
    end = newline ? newline - s : len;
    for (word = at; word < end && s[word] != ' '; ++word) {
    }
}

// Where a reading of lines is (`qq_read_lines`): the next line's number, the next line with targets'
// number, the next target's index, the '!'s so far.
struct qq_read_at {
    qq_i64 line, plain, target, bangs;
};

// The lines of `text` that start at bytes from .. to - 1 (each at a line's start; to = len + 1: to
// the end) read as `qq_host_read_piece` reads them into its outputs, from the places `at` gives on,
// which it advances. Returns -1 at a line whose text is not plain targets, -2 where a line is left
// when line `room` is reached (none is written there or after), else 0.
static qq_i64 qq_read_lines(const char* text, qq_i64 len, qq_i64 from, qq_i64 to, qq_i64 room, qq_read_at& at,
                            qq_i64* line_start, qq_i64* name_end, qq_i64* parsed, qq_i64* qubits,
                            unsigned char* inverted, qq_i64* starts) {
    const unsigned char* s = (const unsigned char*)text;
    for (qq_i64 byte = from; byte < to;) {
        if (at.line >= room)  // (a later part of `qq_host_read_piece_parts` may start past it)
            return -2;
        qq_i64 end, cut;
        qq_line(s, len, byte, end, cut);
        line_start[at.line] = byte;
        name_end[at.line] = cut;
        parsed[at.line] = -1;
        if (cut > byte && cut + 1 < end) {  // a first word, and text after its space: targets or -1
            qq_i64 one[2], line_counts[2];
            const qq_i64 got = qq_host_parse_targets(text + cut + 1, end - cut - 1, qubits + at.target,
                                                     inverted + at.target, one, line_counts);
            if (got < 0)
                return -1;
            at.target += got;
            at.bangs += line_counts[1];
            parsed[at.line] = at.plain++;
            starts[at.plain] = at.target;
        }
        ++at.line;
        byte = end + 1;
    }
    return 0;
}

// A printed piece's lines in one pass (stim_rows.CompiledPiece): lines end at '\n' (the last may
// not); per line k its first byte line_start[k], the end of its first word name_end[k] (its first
// ' ', or the line's end), and parsed[k], its number among the lines with text after that ' ', or
// -1 for a line of one word; that text read as `qq_host_parse_targets` reads plain targets, each
// such line's first target in starts[0 .. such lines]; counts[0] = such lines, counts[1] = the
// '!'s. Returns the lines, -1 where such a line's text is not plain targets (the piece is then not
// one of whole instructions and TICKs), or -2 where there are more than `room` lines (qubits,
// inverted: room for len / 2 + 1 targets; starts: room + 1).
extern "C" qq_i64 qq_host_read_piece(const char* text, qq_i64 len, qq_i64 room, qq_i64* line_start, qq_i64* name_end,
                                     qq_i64* parsed, qq_i64* qubits, unsigned char* inverted, qq_i64* starts,
                                     qq_i64* counts) {
    qq_read_at at = {0, 0, 0, 0};
    starts[0] = 0;
    const qq_i64 read = qq_read_lines(text, len, 0, len + 1, room, at, line_start, name_end, parsed, qubits,
                                      inverted, starts);
    if (read < 0)
        return read;
    counts[0] = at.plain;
    counts[1] = at.bangs;
    return at.line;
}

// Calls row(a, b, op, aux, takes_rand, takes_rec, flags) for each row of the segment in the order
// stim_rows.segment_rows writes them (b = -1 for a row on one qubit).
template <class Row>
static inline void qq_segment_rows(const qq_entry* entries, qq_i64 m, const qq_i64* qubits,
                                   const unsigned char* inverted, const qq_i64* bounds, Row&& row) {
    for (qq_i64 i = 0; i < m; ++i) {
        const qq_entry& e = entries[i];
        const qq_i64 lo = bounds[i], hi = bounds[i + 1];
        if (e.mode == 2) {
            for (qq_i64 t = lo; t < hi; ++t) {
                const int flags = inverted ? inverted[t] : 0;
                row(qubits[t], -1, e.before, -1, 0, 0, 0);
                row(qubits[t], -1, e.code, -1, 1, e.rec, flags);
                row(qubits[t], -1, e.after, -1, 0, 0, 0);
            }
        } else if (e.pair) {
            for (qq_i64 t = lo; t + 1 < hi; t += 2)
                row(qubits[t], qubits[t + 1], e.code, e.aux, e.rand, e.rec, 0);
        } else {
            for (qq_i64 t = lo; t < hi; ++t)
                row(qubits[t], -1, e.code, e.aux, e.rand, e.rec, e.mode == 1 && inverted ? inverted[t] : 0);
        }
    }
}

// Checks a segment: returns 1 where an instruction names a qubit twice, 2 for a '!' on an
// instruction that does not read it, 3 for a qubit outside 0 .. n - 1 or an odd count of a pair
// instruction, else 0 (`stamp`, n entries, marks each qubit with stamp0 + the instruction naming it;
// its marks are this function's alone). A printer checks its piece's runs with it
// (stim_rows.CompiledPiece), and the compile then places them unchecked.
extern "C" int qq_host_check_segment(const qq_entry* entries, qq_i64 m, const qq_i64* qubits,
                                     const unsigned char* inverted, const qq_i64* bounds, qq_i64 n,
                                     qq_i64* stamp, qq_i64 stamp0) {
    for (qq_i64 i = 0; i < m; ++i) {
        const qq_entry& e = entries[i];
        const qq_i64 lo = bounds[i], hi = bounds[i + 1];
        if (e.pair && ((hi - lo) & 1))
            return 3;
        for (qq_i64 t = lo; t < hi; ++t) {
            const qq_i64 q = qubits[t];
            if (q < 0 || q >= n)
                return 3;
            if (stamp[q] == stamp0 + i)
                return 1;
            stamp[q] = stamp0 + i;
            if (inverted && inverted[t] && e.mode == 0)
                return 2;
        }
    }
    return 0;
}

// Checks the segment (`qq_host_check_segment`; not where `stamp` is null: checked already) and
// places its rows, each at the first position free on its qubits (one row after another:
// `_place_rows`' batches give the same positions), updating `free` (per qubit, n of them). Returns
// the check's refusal with nothing placed, else 0, pos[r] for each row, counts[p - low] the rows at
// position p where the positions' width (high - low + 1) is at most `room`, and out = (rows, lowest
// position, highest, records, random slots, highest position of a record row or -1, width).
extern "C" int qq_host_place_segment(const qq_entry* entries, qq_i64 m, const qq_i64* qubits,
                                     const unsigned char* inverted, const qq_i64* bounds, qq_i64 n,
                                     qq_i64* stamp, qq_i64 stamp0, qq_i64* free, qq_i64* pos, qq_i64* counts,
                                     qq_i64 room, qq_i64* out) {
    if (stamp) {
        const int refused = qq_host_check_segment(entries, m, qubits, inverted, bounds, n, stamp, stamp0);
        if (refused)
            return refused;
    }
    qq_i64 rows = 0, low = -1, high = -1, records = 0, rands = 0, record_top = -1;
    qq_segment_rows(entries, m, qubits, inverted, bounds,
                    [&](qq_i64 a, qq_i64 b, int, int, int takes_rand, int takes_rec, int) {
                        qq_i64 p = free[a];
                        if (b >= 0 && free[b] > p)
                            p = free[b];
                        free[a] = p + 1;
                        if (b >= 0)
                            free[b] = p + 1;
                        pos[rows++] = p;
                        if (low < 0 || p < low)
                            low = p;
                        if (p > high)
                            high = p;
                        rands += takes_rand;
                        if (takes_rec) {
                            ++records;
                            if (p > record_top)
                                record_top = p;
                        }
                    });
    const qq_i64 width = rows ? high - low + 1 : 0;
    if (width <= room) {
        for (qq_i64 p = 0; p < width; ++p)
            counts[p] = 0;
        for (qq_i64 r = 0; r < rows; ++r)
            ++counts[pos[r] - low];
    }
    out[0] = rows;
    out[1] = low;
    out[2] = high;
    out[3] = records;
    out[4] = rands;
    out[5] = record_top;
    out[6] = width;
    return 0;
}

// Writes the segment's rows (`qq_host_place_segment` gave their positions pos and counts[p - low],
// the rows at each position p from low to high) into out (rows x QQ_FIELDS), ordered by position
// and within a position in the order made (a stable counting sort, as ProgramBuilder's sort),
// STEP = step + position, record and random slots counted from rec and rand, COND = cond. `next`:
// high - low + 1 entries of scratch (the caller's: nothing here allocates, so nothing can fail).
extern "C" void qq_host_write_segment(const qq_entry* entries, qq_i64 m, const qq_i64* qubits,
                                      const unsigned char* inverted, const qq_i64* bounds, const qq_i64* pos,
                                      qq_i64 rows, qq_i64 low, qq_i64 high, qq_i64 rec, qq_i64 rand, int cond,
                                      qq_i64 step, const qq_i64* counts, qq_i64* next, int* out) {
    const qq_i64 width = high - low + 1;  // next[p - low]: position p's next row
    qq_i64 sum = 0;
    for (qq_i64 p = 0; p < width; ++p) {
        next[p] = sum;
        sum += counts[p];
    }
    qq_i64 r = 0;
    qq_segment_rows(entries, m, qubits, inverted, bounds,
                    [&](qq_i64 a, qq_i64 b, int op, int aux, int takes_rand, int takes_rec, int flags) {
                        const qq_i64 p = pos[r++];
                        int* f = out + QQ_FIELDS * next[p - low]++;
                        f[QQ_OP] = op;
                        f[QQ_A] = (int)a;
                        f[QQ_B] = (int)b;
                        f[QQ_REC] = takes_rec ? (int)rec++ : -1;
                        f[QQ_RAND] = takes_rand ? (int)rand++ : -1;
                        f[QQ_AUX] = aux;
                        f[QQ_COND] = cond;
                        f[QQ_FLAGS] = flags;
                        f[QQ_STEP] = (int)(step + p);
                    });
}

// The segment writers: `qq_host_write_segment` run later by threads of their own while the caller
// places the next segments (a 100k-qubit compile writes 252 MB of rows, 90-110 ms of the calling
// thread's time on an H200 host). The jobs write disjoint rows and scratch, so `qq_host_segment_writers`
// threads take them in the order given and write them at once. `qq_host_write_segment_later` takes the
// same arguments, which must stay alive and unwritten by the caller until `qq_host_segments_written`
// of the ticket it returns (or of a later one) has returned. A process forked from one whose writers
// ran starts writers of its own (the child has none of the parent's threads; the parent's lock and
// queue are left as they were).
struct qq_write_job {
    const qq_entry* entries;
    qq_i64 m;
    const qq_i64 *qubits;
    const unsigned char* inverted;
    const qq_i64 *bounds, *pos;
    qq_i64 rows, low, high, rec, rand;
    int cond;
    qq_i64 step;
    const qq_i64* counts;
    qq_i64* next;
    int* out;
};

// Jobs taken and not yet counted as written, at most: one bit each in `ahead`
static const qq_i64 QQ_WRITES_AHEAD = 64;
static const int QQ_MOST_WRITERS = 16;

struct qq_writer {
    std::mutex lock;
    std::condition_variable wake, done;
    std::deque<qq_write_job> jobs;
    // tickets: jobs given, taken by a thread, written (every job up to `finished`); bit k of `ahead`:
    // job finished + 1 + k is written (threads end their jobs out of order)
    qq_i64 given = 0, taken = 0, finished = 0;
    unsigned long long ahead = 0;
    int threads = 0, wanted = 1;  // threads started; those that take jobs (the first `wanted`)
    std::atomic<int> asked{0};  // the `qq_writers_wanted` its threads were last fitted to
    pid_t pid = getpid();
};

static std::mutex qq_writer_start;
static qq_writer* qq_the_writer = nullptr;  // never freed: its threads live as long as the process
static std::atomic<int> qq_writers_wanted{1};  // `qq_host_segment_writers`

static void qq_write(const qq_write_job& j) {
    qq_host_write_segment(j.entries, j.m, j.qubits, j.inverted, j.bounds, j.pos, j.rows, j.low, j.high, j.rec, j.rand,
                          j.cond, j.step, j.counts, j.next, j.out);
}

static void qq_writer_loop(qq_writer* w, int index) {
    std::unique_lock<std::mutex> hold(w->lock);
    for (;;) {
        w->wake.wait(hold, [w, index] {
            return index < w->wanted && !w->jobs.empty() && w->taken - w->finished < QQ_WRITES_AHEAD;
        });
        const qq_write_job j = w->jobs.front();
        w->jobs.pop_front();
        const qq_i64 ticket = ++w->taken;  // (fewer than QQ_WRITES_AHEAD past `finished`, which only grows)
        hold.unlock();
        qq_write(j);
        hold.lock();
        w->ahead |= 1ULL << (ticket - w->finished - 1);
        const bool next = w->ahead & 1;
        for (; w->ahead & 1; w->ahead >>= 1)
            ++w->finished;
        if (next) {
            w->done.notify_all();
            w->wake.notify_all();  // (a thread may wait for room ahead)
        }
    }
}

// This process's writer, or nullptr where it has not started one (a forked child's copy of its
// parent's is not its own).
static qq_writer* qq_writer_running() {
    qq_writer* w = qq_the_writer;
    return w && w->pid == getpid() ? w : nullptr;
}

// The process's writer with `qq_writers_wanted` threads taking jobs, started on first use and more
// started as more are wanted (nullptr where no thread can be started).
static qq_writer* qq_writer_of_process() {
    qq_writer* w = qq_writer_running();
    const int asked = qq_writers_wanted.load();
    if (w && w->asked.load() == asked)
        return w;
    std::lock_guard<std::mutex> start(qq_writer_start);
    w = qq_writer_running();
    if (!w) {
        w = new (std::nothrow) qq_writer();
        if (!w)
            return nullptr;
    }
    while (w->threads < asked) {
        try {
            std::thread(qq_writer_loop, w, w->threads).detach();
        } catch (...) {
            break;
        }
        std::lock_guard<std::mutex> hold(w->lock);
        ++w->threads;
    }
    if (!w->threads) {
        if (w != qq_the_writer)
            delete w;
        return nullptr;
    }
    qq_the_writer = w;
    {
        std::lock_guard<std::mutex> hold(w->lock);
        w->wanted = asked < w->threads ? asked : w->threads;
    }
    w->asked.store(asked);
    w->wake.notify_all();
    return w;
}

// The threads the process's writer runs from its next job on: 1 to QQ_MOST_WRITERS (started as
// needed; threads beyond them wait).
extern "C" void qq_host_segment_writers(int count) {
    qq_writers_wanted.store(count < 1 ? 1 : count > QQ_MOST_WRITERS ? QQ_MOST_WRITERS : count);
}

// Returns the job's ticket, or 0 where it was written here and now (no writer threads, or no room
// in its queue).
extern "C" qq_i64 qq_host_write_segment_later(const qq_entry* entries, qq_i64 m, const qq_i64* qubits,
                                              const unsigned char* inverted, const qq_i64* bounds,
                                              const qq_i64* pos, qq_i64 rows, qq_i64 low, qq_i64 high, qq_i64 rec,
                                              qq_i64 rand, int cond, qq_i64 step, const qq_i64* counts,
                                              qq_i64* next, int* out) {
    const qq_write_job job{entries, m, qubits, inverted, bounds, pos, rows, low, high, rec, rand, cond, step, counts,
                           next, out};
    qq_writer* w = qq_writer_of_process();
    qq_i64 ticket = 0;
    if (w) {
        std::lock_guard<std::mutex> hold(w->lock);
        try {
            w->jobs.push_back(job);
            ticket = ++w->given;
        } catch (...) {
        }
    }
    if (!ticket) {
        qq_write(job);
        return 0;
    }
    w->wake.notify_all();
    return ticket;
}

// The tickets written so far (every job up to the one returned is written).
extern "C" qq_i64 qq_host_segments_done() {
    qq_writer* w = qq_writer_running();
    if (!w)
        return 0;
    std::lock_guard<std::mutex> hold(w->lock);
    return w->finished;
}

// Returns once the job of `ticket`, and every job given before it, is written.
extern "C" void qq_host_segments_written(qq_i64 ticket) {
    qq_writer* w = qq_writer_running();
    if (ticket <= 0 || !w)
        return;
    std::unique_lock<std::mutex> hold(w->lock);
    w->done.wait(hold, [w, ticket] { return w->finished >= ticket; });
}

// The qubits no row of each window acts on, in increasing order (DeviceProgram.idle_qubits: tableau
// mode's gate windows folded into a rows pass). Window w's rows are rows[starts[w] .. ends[w]) of
// a table of QQ_FIELDS ints; a row acts on A, and on B where its opcode's arity[OP] is 2; a
// negative qubit counts from the end, as NumPy's index does. Writes each window's list after the
// one before it into idle (room for m * n) and its length to counts[w], with `seen` n bytes of
// scratch. Returns 0, or 1 with nothing promised for a qubit or opcode out of range (NumPy raises).
extern "C" int qq_host_idle_lists(const int* rows, const qq_i64* starts, const qq_i64* ends, qq_i64 m, qq_i64 n,
                                  const int* arity, qq_i64 opcodes, unsigned char* seen, int* idle, qq_i64* counts) {
    qq_i64 at = 0;
    for (qq_i64 w = 0; w < m; ++w) {
        for (qq_i64 q = 0; q < n; ++q)
            seen[q] = 0;
        for (qq_i64 r = starts[w]; r < ends[w]; ++r) {
            const int* f = rows + QQ_FIELDS * r;
            const int op = f[QQ_OP];
            if (op < 0 || op >= opcodes)
                return 1;
            const int k = arity[op] == 2 ? 2 : 1;
            for (int side = 0; side < k; ++side) {
                qq_i64 q = f[side ? QQ_B : QQ_A];
                if (q < 0)
                    q += n;
                if (q < 0 || q >= n)
                    return 1;
                seen[q] = 1;
            }
        }
        const qq_i64 first = at;
        for (qq_i64 q = 0; q < n; ++q)
            if (!seen[q])
                idle[at++] = (int)q;
        counts[w] = at - first;
    }
    return 0;
}

// `qq_host_read_piece` in `threads` parts of the text, each cut at a line's start and read in a
// thread of its own: a first pass counts each part's lines and its lines' targets (one more than
// the bytes of at most ' ' after the first word's space: exact for every line the reading accepts),
// so that each part then reads its lines into their final places. The same results and returns as
// `qq_host_read_piece`, whatever the number of parts (a whole compile's text, read in this process
// while nothing else is: a 5k-qubit circuit's 2.4 MB).
extern "C" qq_i64 qq_host_read_piece_parts(const char* text, qq_i64 len, qq_i64 room, qq_i64* line_start,
                                           qq_i64* name_end, qq_i64* parsed, qq_i64* qubits, unsigned char* inverted,
                                           qq_i64* starts, qq_i64* counts, qq_i64 threads) {
    if (threads <= 1 || len <= 0)
        return qq_host_read_piece(text, len, room, line_start, name_end, parsed, qubits, inverted, starts, counts);
    const unsigned char* s = (const unsigned char*)text;
    std::vector<qq_i64> cut(threads + 1);  // part t's lines start at cut[t] .. cut[t + 1] - 1
    cut[0] = 0;
    for (qq_i64 t = 1; t < threads; ++t) {
        const qq_i64 at = std::max(cut[t - 1], len * t / threads);
        const unsigned char* newline = at < len ? (const unsigned char*)std::memchr(s + at, '\n', len - at) : nullptr;
        cut[t] = newline ? newline - s + 1 : len + 1;
    }
    cut[threads] = len + 1;  // (the last line may not end in '\n'; a text that does ends in an empty line)
    std::vector<qq_i64> lines(threads + 1, 0), plain(threads + 1, 0), targets(threads + 1, 0), bangs(threads, 0);
    qq_parts(threads, threads, [&](qq_i64, qq_i64 lo, qq_i64 hi) {
        for (qq_i64 t = lo; t < hi; ++t) {
            qq_i64 at = cut[t], n_lines = 0, n_plain = 0, n_targets = 0;
            while (at < cut[t + 1]) {
                qq_i64 end, word;
                qq_line(s, len, at, end, word);
                if (word > at && word + 1 < end) {  // (the lines `qq_read_lines` reads targets of)
                    qq_i64 gaps = 0;
                    for (qq_i64 k = word + 1; k < end; ++k)
                        gaps += s[k] <= ' ';
                    ++n_plain;
                    n_targets += gaps + 1;
                }
                ++n_lines;
                at = end + 1;
            }
            lines[t + 1] = n_lines, plain[t + 1] = n_plain, targets[t + 1] = n_targets;
        }
    });
    for (qq_i64 t = 0; t < threads; ++t)
        lines[t + 1] += lines[t], plain[t + 1] += plain[t], targets[t + 1] += targets[t];
    starts[0] = 0;
    std::vector<qq_i64> read(threads, 0);
    qq_parts(threads, threads, [&](qq_i64, qq_i64 lo, qq_i64 hi) {
        for (qq_i64 t = lo; t < hi; ++t) {
            qq_read_at at = {lines[t], plain[t], targets[t], 0};
            read[t] = qq_read_lines(text, len, cut[t], cut[t + 1], room, at, line_start, name_end, parsed, qubits,
                                    inverted, starts);
            if (read[t] == 0 && at.target != targets[t + 1])
                read[t] = -1;  // (never for a text the reading accepts: counted as it reads)
            bangs[t] = at.bangs;
        }
    });
    qq_i64 all_bangs = 0;
    for (qq_i64 t = 0; t < threads; ++t) {
        if (read[t] == -1)  // (a line before the room's end that is not read: -1 before -2, as in one)
            return -1;
        all_bangs += bangs[t];
    }
    if (lines[threads] > room)
        return -2;
    counts[0] = plain[threads];
    counts[1] = all_bangs;
    return lines[threads];
}

// A layered schedule's first pass (schedule/windows.py, `_sorted_from_steps`): the stretches of rows
// of one STEP and opcode, a stretch also cut where a part starts (each block split every part_rows
// rows, as that function reads them). Block b holds rows[b] rows of QQ_FIELDS ints at address
// blocks[b]. Writes per stretch its block, first row there, length, key
// ((STEP - first_step + 1) * width + rank[OP]) and opcode; returns how many, -1 for an opcode
// outside 0 .. opcodes - 1, or -2 once there are more than `room` (the caller then sorts row by row):
// what a walk of the rows in order returns. The parts are read by `threads` threads (each part
// starts a stretch, so each thread's stretches are its own), then joined in order.
namespace {
struct qq_stretch_list {
    std::vector<qq_i64> block, first, length, key;
    std::vector<unsigned char> op;
    bool bad = false;  // it stopped at an opcode out of range (its stretches: those before it)
};
}  // namespace

extern "C" qq_i64 qq_host_layer_stretches(const qq_i64* blocks, const qq_i64* rows, qq_i64 count, qq_i64 part_rows,
                                          qq_i64 first_step, const qq_i64* rank, qq_i64 opcodes, qq_i64 width,
                                          qq_i64 room, qq_i64* s_block, qq_i64* s_first, qq_i64* s_length,
                                          qq_i64* s_key, unsigned char* s_op, qq_i64 threads) {
    std::vector<qq_i64> part_block, part_lo;  // the parts, in order
    for (qq_i64 b = 0; b < count; ++b)
        for (qq_i64 lo = 0; lo < rows[b]; lo += part_rows) {
            part_block.push_back(b);
            part_lo.push_back(lo);
        }
    const qq_i64 parts = (qq_i64)part_block.size();
    if (threads > parts)
        threads = parts;
    if (threads < 1)
        threads = 1;
    std::vector<qq_stretch_list> lists(threads);
    qq_parts(threads, parts, [&](qq_i64 t, qq_i64 lo_part, qq_i64 hi_part) {
        qq_stretch_list& list = lists[t];
        for (qq_i64 p = lo_part; p < hi_part; ++p) {
            const qq_i64 b = part_block[p], lo = part_lo[p], hi = std::min(rows[b], lo + part_rows);
            const int* r = (const int*)blocks[b];
            int step = 0, op = 0;
            for (qq_i64 i = lo; i < hi; ++i) {
                const int* f = r + QQ_FIELDS * i;
                if (i == lo || f[QQ_STEP] != step || f[QQ_OP] != op) {
                    step = f[QQ_STEP];
                    op = f[QQ_OP];
                    if (op < 0 || op >= opcodes) {
                        list.bad = true;
                        return;
                    }
                    if (i != lo)
                        list.length.back() = i - list.first.back();
                    if ((qq_i64)list.block.size() > room)  // more than room already: the caller's -2
                        return;
                    list.block.push_back(b);
                    list.first.push_back(i);
                    list.length.push_back(hi - i);
                    list.key.push_back(((qq_i64)step - first_step + 1) * width + rank[op]);
                    list.op.push_back((unsigned char)op);
                }
            }
        }
    });
    // In order: a walk of the rows returns -1 at the first opcode out of range unless it has made
    // more than room stretches before it, and -2 once it has.
    qq_i64 stretches = 0;
    for (const qq_stretch_list& list : lists) {
        const qq_i64 made = (qq_i64)list.block.size();
        if (stretches + made > room)
            return -2;
        if (list.bad)
            return -1;
        std::copy(list.block.begin(), list.block.end(), s_block + stretches);
        std::copy(list.first.begin(), list.first.end(), s_first + stretches);
        std::copy(list.length.begin(), list.length.end(), s_length + stretches);
        std::copy(list.key.begin(), list.key.end(), s_key + stretches);
        std::copy(list.op.begin(), list.op.end(), s_op + stretches);
        stretches += made;
    }
    return stretches;
}

// Its second pass (`_moved`): the stretches in a stable sort of their keys (order: scratch for
// them), their rows copied one after another into out, and the runs of one key and opcode (its
// first row, key, opcode). Returns the number of runs. The rows are copied by `threads` threads,
// each a part of out.
extern "C" qq_i64 qq_host_move_stretches(const qq_i64* blocks, qq_i64 stretches, const qq_i64* s_block,
                                         const qq_i64* s_first, const qq_i64* s_length, const qq_i64* s_key,
                                         const unsigned char* s_op, qq_i64* order, int* out, qq_i64* run_first,
                                         qq_i64* run_key, unsigned char* run_op, qq_i64 threads) {
    for (qq_i64 k = 0; k < stretches; ++k)
        order[k] = k;
    std::stable_sort(order, order + stretches, [&](qq_i64 a, qq_i64 b) { return s_key[a] < s_key[b]; });
    std::vector<qq_i64> at(stretches + 1);  // where each stretch in that order goes
    qq_i64 runs = 0;
    at[0] = 0;
    for (qq_i64 j = 0; j < stretches; ++j) {
        const qq_i64 k = order[j];
        if (!runs || s_key[k] != run_key[runs - 1] || s_op[k] != run_op[runs - 1]) {
            run_first[runs] = at[j];
            run_key[runs] = s_key[k];
            run_op[runs] = s_op[k];
            ++runs;
        }
        at[j + 1] = at[j] + s_length[k];
    }
    qq_parts(threads, at[stretches], [&](qq_i64, qq_i64 lo, qq_i64 hi) {
        qq_i64 j = std::upper_bound(at.begin(), at.end(), lo) - at.begin() - 1;  // the stretch holding row lo
        for (; j < stretches && at[j] < hi; ++j) {
            const qq_i64 k = order[j], from = std::max(at[j], lo), to = std::min(at[j + 1], hi);
            const int* rows = (const int*)blocks[s_block[k]] + QQ_FIELDS * (s_first[k] + from - at[j]);
            std::memcpy(out + QQ_FIELDS * from, rows, sizeof(int) * QQ_FIELDS * (to - from));
        }
    });
    return runs;
}

// Where each of `count` blocks of rows (QQ_FIELDS ints a row) starts in the rows they make in turn.
static std::vector<qq_i64> qq_block_starts(const qq_i64* block_rows, qq_i64 count) {
    std::vector<qq_i64> starts(count + 1, 0);
    for (qq_i64 b = 0; b < count; ++b)
        starts[b + 1] = starts[b] + block_rows[b];
    return starts;
}

// Calls visit(i, row) for the rows lo .. hi - 1 of the blocks (`starts`: qq_block_starts), in order.
template <class Visit>
static void qq_visit_rows(const qq_i64* blocks, const std::vector<qq_i64>& starts, qq_i64 lo, qq_i64 hi,
                          Visit visit) {
    if (lo >= hi)
        return;
    qq_i64 b = std::upper_bound(starts.begin(), starts.end(), lo) - starts.begin() - 1;
    for (qq_i64 i = lo; i < hi; ++b) {
        const int* rows = (const int*)blocks[b];
        const qq_i64 to = std::min(hi, starts[b + 1]);
        for (; i < to; ++i)
            visit(i, rows + QQ_FIELDS * (i - starts[b]));
    }
}

// The rows of `count` blocks (QQ_FIELDS ints a row; n in all) in a stable order of their keys, by
// counting: each key is in 0 .. top - 1, so the rows move in one pass to where the keys before
// theirs end, and no key is compared (windows._sorted_rows: a layer-by-layer argsort and a gather of
// the rows). `threads` threads each count and move a part of the rows (new memory's pages fault in
// in parallel); counts: threads * (top + 1) words of scratch. sorted_key, sorted_op: n each, the
// keys and opcodes in the new order. Writes the rows moved and the runs of one key and opcode in
// that order (first row, key, opcode); returns the number of runs.
extern "C" qq_i64 qq_host_sort_rows(const qq_i64* blocks, const qq_i64* block_rows, qq_i64 count, const int* key,
                                    const unsigned char* op, qq_i64 top, qq_i64 threads, qq_i64* counts, int* out,
                                    int* sorted_key, unsigned char* sorted_op, qq_i64* run_first, qq_i64* run_key,
                                    unsigned char* run_op) {
    const std::vector<qq_i64> starts = qq_block_starts(block_rows, count);
    const qq_i64 n = starts[count];
    if (threads > n)
        threads = n;
    if (threads < 1)
        threads = 1;
    std::memset(counts, 0, sizeof(qq_i64) * (top + 1) * threads);
    qq_parts(threads, n, [&](qq_i64 t, qq_i64 lo, qq_i64 hi) {
        qq_i64* mine = counts + (top + 1) * t;
        for (qq_i64 i = lo; i < hi; ++i)
            ++mine[key[i]];
    });
    qq_i64 at = 0;  // each thread's counts become where its rows of each key begin
    for (qq_i64 k = 0; k < top; ++k)
        for (qq_i64 t = 0; t < threads; ++t) {
            qq_i64& c = counts[(top + 1) * t + k];
            const qq_i64 rows = c;
            c = at;
            at += rows;
        }
    qq_parts(threads, n, [&](qq_i64 t, qq_i64 lo, qq_i64 hi) {
        qq_i64* next = counts + (top + 1) * t;
        qq_visit_rows(blocks, starts, lo, hi, [&](qq_i64 i, const int* row) {
            const qq_i64 to = next[key[i]]++;
            std::memcpy(out + QQ_FIELDS * to, row, sizeof(int) * QQ_FIELDS);
            sorted_key[to] = key[i];
            sorted_op[to] = op[i];
        });
    });
    qq_i64 runs = 0;
    for (qq_i64 j = 0; j < n; ++j)
        if (!j || sorted_key[j] != sorted_key[j - 1] || sorted_op[j] != sorted_op[j - 1]) {
            run_first[runs] = j;
            run_key[runs] = sorted_key[j];
            run_op[runs] = sorted_op[j];
            ++runs;
        }
    return runs;
}

// The scheduler's layers of rows in program order, read from `count` blocks of them
// (windows.Scheduler._layer, whose NumPy form layers each group of rows on distinct qubits at
// once): a row one layer past the latest row on its qubits A and B (B < 0: none) and past the
// latest barrier; a barrier (a COND, or an opcode with bit 1 of `special`) alone, one layer past
// every row since the barrier before; an opcode with bit 2 (E) on its range of ext_qubits instead.
// key[i] = layer * width + rank[op], op8[i] = op. last: each qubit's latest layer (n of them, read
// as at least base); state: {base, top}, the latest barrier's layer and the highest layer since,
// read and written. Returns 0, or -1 before writing anything where a row is outside what the NumPy
// form takes alike (an opcode out of range, a qubit A out of 0 .. n - 1 or B out of -1 .. n - 1,
// an empty or outside range): the caller's NumPy form then gives its own answer.
namespace {
template <typename K>
qq_i64 qq_layer_rows(const qq_i64* blocks, const qq_i64* block_rows, qq_i64 count, const qq_i64* rank,
                     const unsigned char* special, qq_i64 opcodes, qq_i64 width, const int* ext, qq_i64 ext_count,
                     K* last, qq_i64 n, qq_i64* state, K* key, unsigned char* op8) {
    const std::vector<qq_i64> starts = qq_block_starts(block_rows, count);
    bool refused = false;
    qq_visit_rows(blocks, starts, 0, starts[count], [&](qq_i64, const int* f) {
        const int op = f[QQ_OP];
        if (refused || op < 0 || op >= opcodes) {
            refused = true;
            return;
        }
        if (f[QQ_COND] >= 0 || (special[op] & 1))
            return;
        if (special[op] & 2) {
            const qq_i64 lo = f[QQ_A], size = f[QQ_B];
            if (lo < 0 || size < 1 || lo + size > ext_count) {
                refused = true;
                return;
            }
            for (qq_i64 k = lo; k < lo + size; ++k)
                if (ext[k] < 0 || ext[k] >= n)
                    refused = true;
        } else if (f[QQ_A] < 0 || f[QQ_A] >= n || f[QQ_B] < -1 || f[QQ_B] >= n) {
            refused = true;
        }
    });
    if (refused)
        return -1;
    qq_i64 base = state[0], top = state[1];
    qq_visit_rows(blocks, starts, 0, starts[count], [&](qq_i64 i, const int* f) {
        const int op = f[QQ_OP];
        op8[i] = (unsigned char)op;
        qq_i64 layer;
        if (f[QQ_COND] >= 0 || (special[op] & 1)) {
            base = std::max(base, top) + 1;
            top = 0;
            layer = base;
        } else if (special[op] & 2) {
            const int* qs = ext + f[QQ_A];
            layer = base;
            for (int k = 0; k < f[QQ_B]; ++k)
                layer = std::max(layer, (qq_i64)last[qs[k]]);
            ++layer;
            for (int k = 0; k < f[QQ_B]; ++k)
                last[qs[k]] = (K)layer;
            top = std::max(top, layer);
        } else {
            const int a = f[QQ_A], b = f[QQ_B];
            layer = std::max(base, (qq_i64)last[a]);
            if (b >= 0)
                layer = std::max(layer, (qq_i64)last[b]);
            ++layer;
            last[a] = (K)layer;
            if (b >= 0)
                last[b] = (K)layer;
            top = std::max(top, layer);
        }
        key[i] = (K)(layer * width + rank[op]);
    });
    state[0] = base;
    state[1] = top;
    return 0;
}
}  // namespace

extern "C" qq_i64 qq_host_layer_rows(const qq_i64* blocks, const qq_i64* block_rows, qq_i64 count, const qq_i64* rank,
                                     const unsigned char* special, qq_i64 opcodes, qq_i64 width, const int* ext,
                                     qq_i64 ext_count, void* last, qq_i64 n, qq_i64* state, void* key,
                                     unsigned char* op8, int wide) {
    if (wide)
        return qq_layer_rows(blocks, block_rows, count, rank, special, opcodes, width, ext, ext_count, (qq_i64*)last,
                             n, state, (qq_i64*)key, op8);
    return qq_layer_rows(blocks, block_rows, count, rank, special, opcodes, width, ext, ext_count, (int*)last, n,
                         state, (int*)key, op8);
}
