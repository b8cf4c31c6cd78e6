// host_stim_memory.cpp: a stim.Circuit read where Stim keeps it (compiler/stim_memory.py; core/native.py
// builds this file with the others), without the interpreter lock:
// - its text, byte for byte what Stim's `str(circuit[lo:hi])` prints, in threads
//   (`qq_stim_text_sizes`, `qq_stim_text_write`);
// - its instructions of plain targets, as host_rows.cpp's `qq_host_read_piece` reads their text
//   (`qq_stim_read_plain`): the compile's whole instructions with no text at all.
//
// Stim offers no bulk view of a circuit's targets: its printing, the one way out, takes the
// interpreter lock for 22-35 ms at 5k qubits (2.4 MB). The layout read here (where the circuit's
// instructions, targets, arguments, tags and REPEAT bodies lie) is given by the caller, who has
// checked it against Stim's own view of a probe circuit, and the names of the gate types with it.
// What these functions cannot read as Stim's text reads (a gate type without a name, a layout that
// does not add up) they refuse, and the caller prints with Stim.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "host_parts.cuh"

namespace {

// Offsets and sizes of Stim's structures (compiler/stim_memory.py: LAYOUT says each).
struct Layout {
    qq_i64 value_at, ops_at, blocks_at, circuit_bytes, inst_bytes, gate_at, args_at, targets_at, tag_len_at,
        tag_ptr_at;
};

struct Names {
    const char *blob;
    const qq_i64 *at;  // gate type g's name is blob[at[g], at[g + 1]); an empty one: no name known
};

constexpr uint32_t VALUE_MASK = (uint32_t{1} << 24) - 1;
constexpr uint32_t INVERTED = uint32_t{1} << 31;
constexpr uint32_t PAULI_X = uint32_t{1} << 30;
constexpr uint32_t PAULI_Z = uint32_t{1} << 29;
constexpr uint32_t RECORD = uint32_t{1} << 28;
constexpr uint32_t COMBINER = uint32_t{1} << 27;
constexpr uint32_t SWEEP = uint32_t{1} << 26;

template <typename T>
inline T field(const char *base, qq_i64 at) {
    T v;
    std::memcpy(&v, base + at, sizeof(T));
    return v;
}

// One instruction's parts, as the layout places them
struct Inst {
    unsigned gate;
    const double *args, *args_end;
    const uint32_t *targets, *targets_end;
    const char *tag;
    size_t tag_len;
};

inline Inst instruction(const Layout &L, const char *p) {
    Inst i;
    i.gate = field<uint8_t>(p, L.gate_at);
    i.args = field<const double *>(p, L.args_at);
    i.args_end = field<const double *>(p, L.args_at + 8);
    i.targets = field<const uint32_t *>(p, L.targets_at);
    i.targets_end = field<const uint32_t *>(p, L.targets_at + 8);
    i.tag_len = field<size_t>(p, L.tag_len_at);
    i.tag = field<const char *>(p, L.tag_ptr_at);
    return i;
}

// Where text goes: counted (`Count`) or written (`Write`, into the room the count gave), through the
// same calls, so that what is written is what was counted.
struct Count {
    qq_i64 n = 0;
    inline void put(char) { n++; }
    inline void put(const char *, size_t k) { n += (qq_i64)k; }
    inline void spaces(int k) { n += k; }
    inline void digits(const char *, size_t k) { n += (qq_i64)k; }
};

struct Write {
    char *p, *end;
    bool over = false;
    inline void put(char c) {
        if (p < end) *p++ = c;
        else over = true;
    }
    inline void put(const char *s, size_t k) {
        if ((size_t)(end - p) >= k) {
            std::memcpy(p, s, k);
            p += k;
        } else {
            over = true;
        }
    }
    inline void spaces(int k) {
        if (end - p >= k) {
            std::memset(p, ' ', (size_t)k);
            p += k;
        } else {
            over = true;
        }
    }
    inline void digits(const char *s, size_t k) { put(s, k); }
};

static const char DIGIT_PAIRS[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

inline void put_unsigned(Count &out, uint64_t v) {
    size_t k = 1;
    while (v >= 10000) {
        v /= 10000;
        k += 4;
    }
    out.n += (qq_i64)(k + (v >= 10) + (v >= 100) + (v >= 1000));
}

inline void put_unsigned(Write &out, uint64_t v) {
    char digits[20];
    int k = 20;
    while (v >= 100) {
        std::memcpy(digits + (k -= 2), DIGIT_PAIRS + 2 * (v % 100), 2);
        v /= 100;
    }
    if (v >= 10) std::memcpy(digits + (k -= 2), DIGIT_PAIRS + 2 * v, 2);
    else digits[--k] = (char)('0' + v);
    out.put(digits + k, (size_t)(20 - k));
}

// An argument as Stim writes it: an integral value in int64's range as an integer, else as an
// ostream writes a double (printf's %g: six significant digits).
template <class Out>
inline void put_argument(Out &out, double e) {
    if (e > (double)INT64_MIN && e < (double)INT64_MAX && (int64_t)e == e) {
        int64_t v = (int64_t)e;
        if (v < 0) {
            out.put('-');
            put_unsigned(out, (uint64_t)0 - (uint64_t)v);
        } else {
            put_unsigned(out, (uint64_t)v);
        }
        return;
    }
    char text[64];
    int k = std::snprintf(text, sizeof text, "%g", e);
    out.put(text, (size_t)k);
}

// A tag as Stim escapes it inside '[' ']'
template <class Out>
inline void put_tag(Out &out, const char *tag, size_t len) {
    out.put('[');
    for (size_t i = 0; i < len; i++) {
        char c = tag[i];
        switch (c) {
            case '\n': out.put("\\n", 2); break;
            case '\r': out.put("\\r", 2); break;
            case '\\': out.put("\\B", 2); break;
            case ']': out.put("\\C", 2); break;
            default: out.put(c);
        }
    }
    out.put(']');
}

template <class Out>
inline void put_target(Out &out, uint32_t data) {
    if (data == COMBINER) {
        out.put('*');
        return;
    }
    if (data & INVERTED) out.put('!');
    if (data & (PAULI_X | PAULI_Z)) out.put("IXZY"[((data & PAULI_X) ? 1 : 0) + ((data & PAULI_Z) ? 2 : 0)]);
    if (data & RECORD) {
        out.put("rec[-", 5);
        put_unsigned(out, data & VALUE_MASK);
        out.put(']');
    } else if (data & SWEEP) {
        out.put("sweep[", 6);
        put_unsigned(out, data & VALUE_MASK);
        out.put(']');
    } else {
        put_unsigned(out, data & VALUE_MASK);
    }
}



struct Printer {
    Layout L;
    Names names;
    unsigned repeat;  // the gate type of REPEAT

    // Instructions [lo, hi) of the circuit at `c` (a stim::Circuit), as Stim's print_circuit writes
    // them at `indent`; false where one cannot be printed here.
    template <class Out>
    bool circuit(Out &out, const char *c, qq_i64 lo, qq_i64 hi, int indent) const {
        const char *ops = field<const char *>(c, L.ops_at);
        for (qq_i64 k = lo; k < hi; k++) {
            if (k > lo) out.put('\n');
            if (!instruction(out, c, ops + k * L.inst_bytes, indent)) return false;
        }
        return true;
    }

    template <class Out>
    bool instruction(Out &out, const char *c, const char *p, int indent) const {
        Inst i = ::instruction(L, p);
        if (names.at[i.gate] == names.at[i.gate + 1]) return false;
        size_t count = (size_t)(i.targets_end - i.targets);
        if (i.gate == repeat && count == 3) {
            const char *blocks = field<const char *>(c, L.blocks_at);
            const char *blocks_end = field<const char *>(c, L.blocks_at + 8);
            uint64_t block = i.targets[0];
            if (block < (uint64_t)((blocks_end - blocks) / L.circuit_bytes)) {
                const char *body = blocks + block * L.circuit_bytes;
                const char *body_ops = field<const char *>(body, L.ops_at);
                const char *body_ops_end = field<const char *>(body, L.ops_at + 8);
                out.spaces(indent);
                out.put("REPEAT", 6);
                if (i.tag_len) put_tag(out, i.tag, i.tag_len);
                out.put(' ');
                put_unsigned(out, (uint64_t)i.targets[1] | ((uint64_t)i.targets[2] << 32));
                out.put(" {\n", 3);
                if (!circuit(out, body, 0, (body_ops_end - body_ops) / L.inst_bytes, indent + 4)) return false;
                out.put('\n');
                out.spaces(indent);
                out.put('}');
                return true;
            }
        }
        out.spaces(indent);
        out.put(names.blob + names.at[i.gate], (size_t)(names.at[i.gate + 1] - names.at[i.gate]));
        if (i.tag_len) put_tag(out, i.tag, i.tag_len);
        if (i.args != i.args_end) {
            out.put('(');
            for (const double *a = i.args; a != i.args_end; a++) {
                if (a != i.args) out.put(", ", 2);
                put_argument(out, *a);
            }
            out.put(')');
        }
        bool skip_space = false;  // as Stim's write_targets: no space around a combiner
        for (const uint32_t *t = i.targets; t != i.targets_end; t++) {
            if (*t == COMBINER) skip_space = true;
            else if (!skip_space) out.put(' ');
            else skip_space = false;
            put_target(out, *t);
        }
        return true;
    }
};

}  // namespace

extern "C" {

// The bytes of `str(circuit[lo:hi])` for the stim.Circuit at `object` (its Python object's
// address), its instructions [lo, hi) with the newline after each but the last, counted by `threads`
// threads: each one's count in `sizes[k - lo]` (the caller's room for hi - lo), their sum returned;
// -1 where one cannot be printed here or the circuit does not hold `count` instructions (a layout
// that does not add up).
qq_i64 qq_stim_text_sizes(const void *object, qq_i64 count, qq_i64 lo, qq_i64 hi, const qq_i64 *layout,
                          const char *blob, const qq_i64 *name_at, qq_i64 repeat, qq_i64 *sizes, int threads) {
    Printer P{};
    std::memcpy(&P.L, layout, sizeof(Layout));
    P.names = Names{blob, name_at};
    P.repeat = (unsigned)repeat;
    const char *c = field<const char *>((const char *)object, P.L.value_at);
    const char *ops = field<const char *>(c, P.L.ops_at), *ops_end = field<const char *>(c, P.L.ops_at + 8);
    if ((ops_end - ops) != count * P.L.inst_bytes || lo < 0 || hi > count || lo > hi) return -1;
    std::vector<qq_i64> sums(std::max(threads, 1), 0);
    qq_parts(threads, hi - lo, [&](qq_i64 t, qq_i64 a, qq_i64 b) {
        for (qq_i64 k = lo + a; k < lo + b; k++) {
            Count out;
            if (!P.instruction(out, c, ops + k * P.L.inst_bytes, 0)) {
                sums[t] = -1;
                return;
            }
            sizes[k - lo] = out.n + (k + 1 < hi ? 1 : 0);
            sums[t] += sizes[k - lo];
        }
    });
    qq_i64 total = 0;
    for (qq_i64 sum : sums) {
        if (sum < 0) return -1;
        total += sum;
    }
    return total;
}

// The text `qq_stim_text_sizes` counted, written into `out` (`room` bytes, its total) by `threads`
// threads, each a run of instructions at the offsets their sizes give; returns the bytes written,
// or -1 where they are not what was counted (the circuit changed in between).
qq_i64 qq_stim_text_write(const void *object, qq_i64 lo, qq_i64 hi, const qq_i64 *layout, const char *blob,
                          const qq_i64 *name_at, qq_i64 repeat, const qq_i64 *sizes, char *out, qq_i64 room,
                          int threads) {
    Printer P{};
    std::memcpy(&P.L, layout, sizeof(Layout));
    P.names = Names{blob, name_at};
    P.repeat = (unsigned)repeat;
    const char *c = field<const char *>((const char *)object, P.L.value_at);
    const char *ops = field<const char *>(c, P.L.ops_at);
    qq_i64 n = hi - lo;
    std::vector<qq_i64> start(n + 1, 0);
    for (qq_i64 k = 0; k < n; k++) start[k + 1] = start[k] + sizes[k];
    if (start[n] != room) return -1;
    // runs of about equal bytes, one a thread
    threads = (int)std::max<qq_i64>(1, std::min<qq_i64>(threads, n));
    std::vector<qq_i64> cut(threads + 1, n);
    cut[0] = 0;
    for (int t = 1; t < threads; t++)
        cut[t] = std::lower_bound(start.begin(), start.end(), room * t / threads) - start.begin();
    std::vector<char> bad(threads, 0);
    qq_parts(threads, threads, [&](qq_i64, qq_i64 first, qq_i64 last) {
        for (qq_i64 t = first; t < last; t++) {
            qq_i64 a = cut[t], b = std::max(cut[t], cut[t + 1]);
            Write w{out + start[a], out + start[b]};
            for (qq_i64 k = a; k < b && !w.over; k++) {
                if (!P.instruction(w, c, ops + (lo + k) * P.L.inst_bytes, 0)) {
                    w.over = true;
                    break;
                }
                if (lo + k + 1 < hi) w.put('\n');
                if (w.p != out + start[k + 1]) w.over = true;
            }
            bad[t] = w.over;
        }
    });
    for (char refused : bad)
        if (refused) return -1;
    return room;
}

// Instructions [lo, hi) of the stim.Circuit at `object` read as `qq_host_read_piece` reads their
// text, where each is a bare name and plain targets (no argument, no tag, no REPEAT, every target a
// qubit, maybe inverted): per instruction its gate type gate[k - lo] and parsed[k - lo], its number
// among those with targets, or -1 for one of none; their targets in qubits / inverted, each such
// instruction's first in starts[0 .. such], by a thread for each `thread_targets` of them, at most
// `threads`; counts[0] = such instructions, counts[1] = inverted targets. Returns the targets read,
// -1 where an instruction is not of that form (the circuit is not whole instructions: nothing of it
// is of use), -2 where they would pass `room` (counts[0] = the targets), or -3 where the circuit
// does not hold `count` instructions.
qq_i64 qq_stim_read_plain(const void *object, qq_i64 count, qq_i64 lo, qq_i64 hi, const qq_i64 *layout, qq_i64 repeat,
                          qq_i64 room, qq_i64 *gate, qq_i64 *parsed, qq_i64 *qubits, unsigned char *inverted,
                          qq_i64 *starts, qq_i64 *counts, int threads, qq_i64 thread_targets) {
    Layout L;
    std::memcpy(&L, layout, sizeof(Layout));
    const char *c = field<const char *>((const char *)object, L.value_at);
    const char *ops = field<const char *>(c, L.ops_at), *ops_end = field<const char *>(c, L.ops_at + 8);
    if ((ops_end - ops) != count * L.inst_bytes || lo < 0 || hi > count || lo > hi) return -3;
    // each instruction's first target, from the spans alone
    qq_i64 such = 0, total = 0;
    starts[0] = 0;
    for (qq_i64 k = lo; k < hi; k++) {
        Inst i = instruction(L, ops + k * L.inst_bytes);
        if (i.gate == repeat || i.args != i.args_end || i.tag_len) return -1;
        gate[k - lo] = i.gate;
        qq_i64 n = i.targets_end - i.targets;
        parsed[k - lo] = n ? such : -1;
        if (n) {
            total += n;
            starts[++such] = total;
        }
    }
    if (total > room) {
        counts[0] = total;
        return -2;
    }
    threads = (int)std::max<qq_i64>(1, std::min<qq_i64>(threads, total / std::max<qq_i64>(1, thread_targets)));
    std::vector<qq_i64> bangs(threads, 0);
    std::vector<char> bad(threads, 0);
    qq_parts(threads, such, [&](qq_i64 t, qq_i64 a, qq_i64 b) {  // instructions with targets [a, b) of those
        qq_i64 j = 0, inv = 0, k = lo;
        for (; k < hi && j < a; k++) j += parsed[k - lo] >= 0;  // (the first such instruction of the run)
        for (; k < hi && j < b; k++) {
            if (parsed[k - lo] < 0) continue;
            Inst i = instruction(L, ops + k * L.inst_bytes);
            qq_i64 at = starts[j++];
            for (const uint32_t *p = i.targets; p != i.targets_end; p++, at++) {
                uint32_t data = *p;
                if (data & ~(INVERTED | VALUE_MASK)) {  // a Pauli, record, sweep bit or combiner
                    bad[t] = 1;
                    return;
                }
                qubits[at] = data & VALUE_MASK;
                inverted[at] = (unsigned char)(data >> 31);
                inv += data >> 31;
            }
        }
        bangs[t] = inv;
    });
    counts[0] = such;
    counts[1] = 0;
    for (int t = 0; t < threads; t++) {
        if (bad[t]) return -1;
        counts[1] += bangs[t];
    }
    return total;
}

}  // extern "C"
