"""Step 1 for Stim circuits: the rows of whole instructions, everything of them but their positions.

A run of whole instructions (`stim_circuit._StimCompiler`'s segments: unitaries, M / MR / R in any
basis, Pauli channels, each on distinct qubits) makes rows whose fields follow from the run alone,
given the first record and random slot: `segment_rows` builds them, with each row's qubits and the
run's batches (consecutive instructions on disjoint qubits, and each X / Y basis collapse), which
the compile then places batch by batch from each qubit's next free position (`_StimCompiler._place_rows`).
Only that placing needs the state of the compile so far.

So a printer of a streamed compile's pieces (`stim_printing`) can do the rest ahead, in its own
process: `digest_piece(text)` reads the piece's lines (`stim_text._read_lines`) and, where the piece
is nothing but whole instructions with their targets read and TICKs at the top level (the paper's
random circuits, with or without TICKs), makes its rows run by run with slots counted from the
piece's start (`PreparedPiece`). The compile adds its first record and random slot to the rows that
have one, places the batches and sorts the rows (`_StimCompiler._walk_prepared`): the same Program,
row for row (tests/test_stim_compile_golden.py). A piece of anything else keeps its read targets and
is walked as before.

This module is the NumPy definition of those rows. Where the host's compiled path is on
(core/native.py), cuda_src/host_rows.cpp makes, places and sorts a segment's rows in one pass
(`_StimCompiler._compiled_segment`), and a printer hands over such a piece's runs read and checked
as that pass takes them (`CompiledPiece`), so that the compile places them with no walk over their
lines and no check (`_StimCompiler._walk_compiled`): at 100k qubits on an H200 host the compile's
own work a first call went from about 160 to 100 ms (docs/benchmarks-first-call.md, session 30).
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from ..core import native
from ..core.program import A, AUX, B, FLAG_INVERT, FLAGS, NUM_FIELDS, OP, RAND, REC
from .stim_instructions import _N, _XY, _Z, _plain
from .stim_memory import plain_instructions
from .stim_text import _LineTargets, _read_split

# Kinds of a batch (`SegmentRows.batches`): one-qubit rows only; rows of which some are on pairs;
# an X / Y basis collapse (three rows a target: the basis change, the collapse, the change back,
# at the target's next three positions).
ONE_QUBIT, PAIRS, TRIPLES = range(3)


_MINUS = np.full(1024, -1, dtype=np.int64)


def _minus(k: int) -> np.ndarray:
    """k times -1 (column B of one-qubit rows: a view of one array that grows; never written)."""
    global _MINUS
    if len(_MINUS) < k:
        _MINUS = np.full(2 * k, -1, dtype=np.int64)
    return _MINUS[:k]


class SegmentRows(NamedTuple):
    """The rows of a run of whole instructions, before their positions (`segment_rows`)."""

    rows: np.ndarray  # int32 [R, NUM_FIELDS], in the order the per-target path writes them; STEP 0
    qa: np.ndarray  # int64 [R] (int32 from a printer): each row's qubit (the first of a pair)
    qb: np.ndarray  # likewise: the second of a pair, else qa's
    batches: np.ndarray  # int64 [K, 3]: first row, end row, kind
    records: int  # records written
    rand: int  # random slots taken
    rec_rows: np.ndarray  # int64: the rows that write a record
    rand_rows: np.ndarray  # int64: the rows that take a random slot


def previous_targets(qubits: np.ndarray, bounds: Sequence[int], last: np.ndarray,
                     base: int) -> Tuple[np.ndarray, np.ndarray]:
    """For instructions whose targets are qubits[bounds[i]:bounds[i + 1]], target t's id being base + t:
    (per target the id of the target before it on its qubit, from `last` (per qubit the id of the last
    target naming it, updated here) where it is before these; whether each target is named once in
    its instruction). Two NumPy calls an instruction."""
    total = len(qubits)
    ids = np.arange(base, base + total, dtype=np.int64)
    seen = np.empty(total, dtype=np.int64)
    for i in range(len(bounds) - 1):
        s, e = bounds[i], bounds[i + 1]
        q = qubits[s:e]
        last.take(q, out=seen[s:e], mode="clip")  # "clip": no buffered copy
        last[q] = ids[s:e]
    # A target that no later one sees and that is not its qubit's last lost its place in `last`
    # to a repeat of its qubit in its own instruction.
    named = last[qubits] == ids
    later = seen[seen >= base] - base
    named[later] = True
    return seen, named


def segment_rows(entries: Sequence[tuple], qubits: np.ndarray, inverted: Optional[np.ndarray],
                 bounds: Sequence[int], seen: np.ndarray, base: int, rec: int, rand: int,
                 cond: int = -1) -> SegmentRows:
    """The rows of whole instructions `entries` ((`_plain` entry, opcode of its rows, channel id or
    -1) each; none names a qubit twice), instruction i's targets qubits[bounds[i]:bounds[i + 1]]
    (`inverted`: per target of `qubits`, or None), their first record and random slots `rec` and
    `rand`, condition `cond`; `seen` and `base` as `previous_targets` gave them (for the batches).
    The per-target path's rows, field for field, but STEP; slots counted in instruction order."""
    m = len(entries)
    parts, qas, qbs, rec_rows, rand_rows = [], [], [], [], []
    row_at = [0] * (m + 1)  # per instruction: its first row
    at = 0
    rec0, rand0 = rec, rand
    i = 0
    while i < m:
        if entries[i][0][0] == _XY:  # three rows a target, interleaved
            s, e = bounds[i], bounds[i + 1]
            k, q = e - s, qubits[s:e]
            _, op, _, measures, (before, _, after) = entries[i][0]
            count = np.arange(k, dtype=np.int64)
            block = np.empty((k, 3, NUM_FIELDS), dtype=np.int32)
            block[:] = (0, 0, -1, -1, -1, -1, cond, 0, 0)
            block[:, :, OP] = (before, op, after)
            block[:, :, A] = q[:, None]
            block[:, 1, RAND] = rand + count
            middle = at + 1 + 3 * count
            rand_rows.append(middle)
            rand += k
            if measures:
                block[:, 1, REC] = rec + count
                rec_rows.append(middle)
                rec += k
            if inverted is not None:
                block[:, 1, FLAGS] = inverted[s:e] * FLAG_INVERT
            parts.append(block.reshape(3 * k, NUM_FIELDS))
            three = np.repeat(q, 3)
            qas.append(three)
            qbs.append(three)
            at += 3 * k
            row_at[i + 1] = at
            i += 1
            continue
        # instructions i .. j - 1, none an X / Y collapse: a template row each, repeated
        j = i
        while j < m and entries[j][0][0] != _XY:
            j += 1
        first_row = at
        codes, auxes, repeats, firsts, seconds, columns, slots = [], [], [], [], [], [], []
        for g in range(i, j):
            entry, code, aux = entries[g]
            kind, _, pair, measures, _ = entry
            s, e = bounds[g], bounds[g + 1]
            q = qubits[s:e]
            if pair:
                r = (e - s) >> 1
                firsts.append(q[0::2])
                seconds.append(q[1::2])
                columns.append(q[1::2])
            else:
                r = e - s
                firsts.append(q)
                seconds.append(q)
                columns.append(_minus(r))
            codes.append(code)
            auxes.append(aux)
            repeats.append(r)
            if kind >= _Z:
                slots.append((at, at + r, RAND, rand))
                rand_rows.append(np.arange(at, at + r, dtype=np.int64))
                rand += r
                if measures:
                    slots.append((at, at + r, REC, rec))
                    rec_rows.append(rand_rows[-1])
                    rec += r
            at += r
            row_at[g + 1] = at
        pairs = [entries[g][0][2] for g in range(i, j)]
        span = qubits[bounds[i]:bounds[j]]
        if not any(pairs):  # the rows' qubits, the second's (the first for one row)
            qa = qb = span
        elif all(pairs):
            qa, qb = span[0::2], span[1::2]
        else:
            qa, qb = np.concatenate(firsts), np.concatenate(seconds)
        template = np.empty((j - i, NUM_FIELDS), dtype=np.int32)
        template[:] = (0, 0, -1, -1, -1, -1, cond, 0, 0)
        template[:, OP] = codes
        template[:, AUX] = auxes
        rows = template.repeat(repeats, axis=0)
        rows[:, A] = qa
        if any(pairs):
            rows[:, B] = qb if all(pairs) else np.concatenate(columns)
        for r0, r1, field, first in slots:
            rows[r0 - first_row:r1 - first_row, field] = np.arange(first, first + r1 - r0)
        if inverted is not None:
            for g in range(i, j):
                if entries[g][0][0] == _Z:
                    rows[row_at[g] - first_row:row_at[g + 1] - first_row, FLAGS] = \
                        inverted[bounds[g]:bounds[g + 1]] * FLAG_INVERT
        parts.append(rows)
        qas.append(qa)
        qbs.append(qb)
        i = j
    empty = np.zeros(0, dtype=np.int64)
    return SegmentRows(parts[0] if len(parts) == 1 else np.concatenate(parts),
                       qas[0] if len(qas) == 1 else np.concatenate(qas),
                       qbs[0] if len(qbs) == 1 else np.concatenate(qbs),
                       _batches(entries, bounds, seen, base, row_at), rec - rec0, rand - rand0,
                       np.concatenate(rec_rows) if rec_rows else empty,
                       np.concatenate(rand_rows) if rand_rows else empty)


def _batches(entries, bounds: Sequence[int], seen: np.ndarray, base: int, row_at: List[int]) -> np.ndarray:
    """The batches of `segment_rows`: greedily, instructions whose targets were all named last before
    the batch's first (so on qubits disjoint from the batch's so far), and each X / Y collapse alone."""
    m = len(entries)
    lengths = np.diff(np.asarray(bounds, dtype=np.int64))
    prev = np.maximum.reduceat(seen[bounds[0]:bounds[-1]], lengths.cumsum() - lengths).tolist() if m else []
    batches = []
    i = 0
    while i < m:
        if entries[i][0][0] == _XY:
            batches.append((row_at[i], row_at[i + 1], TRIPLES))
            i += 1
            continue
        first_id = base + bounds[i]
        j = i + 1
        while j < m and prev[j] < first_id and entries[j][0][0] != _XY:
            j += 1
        batches.append((row_at[i], row_at[j], PAIRS if any(entries[g][0][2] for g in range(i, j)) else ONE_QUBIT))
        i = j
    return np.array(batches, dtype=np.int64).reshape(-1, 3)


class PreparedPiece(NamedTuple):
    """A piece of whole instructions and top-level TICKs, its rows made ahead (`digest_piece`):
    per run of instructions between TICKs its `SegmentRows` (slots counted from the piece's start),
    None for a TICK."""

    runs: List[Optional[SegmentRows]]


class CompiledPiece(NamedTuple):
    """A piece of whole instructions and top-level TICKs read for the compiled path (`digest_piece`,
    `compiled_runs`): per run of instructions between TICKs (entries as host_rows.cpp's `qq_entry`
    reads them, int32 [m, 8]; their qubits, int64; per target whether written with '!', uint8, or
    None; each instruction's first target and the end, int64 [m + 1]), checked
    (`qq_host_check_segment`) for the circuit's qubits, so the compile places them unchecked; None
    for a TICK."""

    runs: List[Optional[Tuple[np.ndarray, np.ndarray, Optional[np.ndarray], np.ndarray]]]


def digest_piece(text: str, num_qubits: Optional[int] = None) -> Tuple[str, object]:
    """A printer's digest of a piece's text (`stim_printing.PrintedPieces`): (the text that stands for
    it, the digest). A piece of nothing but whole instructions with plain targets (unitaries, M / MR
    / R in any basis, with no arguments or tag, none naming a qubit twice) and TICKs: with the
    compiled path, where the circuit's `num_qubits` is given, its runs read and checked
    (`CompiledPiece`); without, its rows made ahead (`PreparedPiece`). Else the lines' targets read
    (`stim_text._read_lines`), or None."""
    lib = native.compiled()
    if lib is not None and num_qubits is not None:
        # the compile places such a piece's runs with no walk over its lines (`_walk_compiled`)
        compiled = _compiled_runs(lib, text, num_qubits)
        if compiled is not None:
            return "", compiled
    lines = text.split("\n")
    short, targets = _read_split(lines)
    if targets is None:
        return text, None
    prepared = _prepared(lines, targets) if lib is None else None
    return ("\n".join(short), targets) if prepared is None else ("", prepared)


# A whole compile's text (`compiled_runs`) is read in up to this many threads, one for each
# _READ_BYTES_A_THREAD of it (`qq_host_read_piece_parts`); a printer reads its piece in one.
READ_THREADS = 4
_READ_BYTES_A_THREAD = 512 << 10


def compiled_runs(text: Union[str, bytes], num_qubits: int) -> Optional[CompiledPiece]:
    """`CompiledPiece` of a text (or its UTF-8 bytes) of whole instructions and TICKs on `num_qubits` qubits, read and
    checked here (a whole compile's text, which no printer read), or None where it is not such a
    text, the check refuses a run, or the compiled path is off."""
    lib = native.compiled()
    if lib is None:
        return None
    threads = max(1, min(READ_THREADS, native.processors(), len(text) // _READ_BYTES_A_THREAD))
    return _compiled_runs(lib, text, num_qubits, threads)


def _compiled_runs(lib, text: Union[str, bytes], n: int, threads: int = 1) -> Optional[CompiledPiece]:
    """`CompiledPiece` of a piece's text, its lines read in one pass (`qq_host_read_piece`: a twelfth
    of the paper's circuit at 100k qubits, 4.9 MB of text, in 5 ms on the 2-core machine, where
    `_read_split` took 9.5 ms and Stim's printing 22 ms) in `threads` parts of the text, or None
    where it is not whole instructions and TICKs or the check refuses a run."""
    raw = text if isinstance(text, bytes) else text.encode()
    qubits = np.empty(len(raw) // 2 + 1, dtype=np.int64)
    inverted = np.empty(len(raw) // 2 + 1, dtype=np.uint8)
    counts = np.empty(2, dtype=np.int64)
    address = native.address
    # (counting a piece's lines first took a quarter of the reading)
    room = max(_PIECE_LINES, len(raw) // _PIECE_LINE_BYTES)
    while True:
        line_start, name_end, parsed = (np.empty(room, dtype=np.int64) for _ in range(3))
        starts = np.empty(room + 1, dtype=np.int64)
        lines = lib.qq_host_read_piece_parts(raw, len(raw), room, address(line_start), address(name_end),
                                             address(parsed), address(qubits), address(inverted), address(starts),
                                             address(counts), threads)
        if lines != -2:
            break
        room = raw.count(b"\n") + 1
    if lines < 0:
        return None
    ends = np.append(line_start[1:lines] - 1, len(raw))
    kind_of: dict = {}  # each line's first word numbered as it first comes
    kinds = np.array([kind_of.setdefault(raw[at:cut], len(kind_of)) for at, cut in
                      zip(line_start[:lines].tolist(), name_end[:lines].tolist())], dtype=np.int64)
    return _runs(lib, kinds, [name.decode() for name in kind_of], parsed[:lines], name_end[:lines] == ends, qubits,
                 inverted, starts, int(counts[1]), n)


def circuit_runs(circuit, num_qubits: int) -> Tuple[bool, Optional[CompiledPiece]]:
    """`compiled_runs` of the circuit's text, read with no text where Stim keeps the circuit
    (`stim_memory.plain_instructions`): (whether it was read so, the `CompiledPiece` or None). Where
    it was read and is None, `compiled_runs` of the text is None too."""
    lib = native.compiled()
    read, plain = plain_instructions(circuit, num_qubits) if lib is not None else (False, None)
    if plain is None:
        return read, None
    return True, _runs(lib, plain.gates, plain.gate_names, plain.parsed, plain.parsed < 0, plain.qubits,
                       plain.inverted, plain.starts, plain.bangs, num_qubits)


def _runs(lib, kinds: np.ndarray, names: Sequence[str], parsed: np.ndarray, alone: np.ndarray, qubits: np.ndarray,
          inverted: np.ndarray, starts: np.ndarray, bangs: int, n: int) -> Optional[CompiledPiece]:
    """`CompiledPiece` of a piece's instructions: each of kind `kinds[i]`, whose name (its line's
    first word) is `names[kinds[i]]`, the number of its targets' line among those read `parsed[i]`
    (-1: none), `alone[i]` where that word is the whole line; their targets read (`qq_host_read_piece`'s
    or `stim_memory.plain_instructions`' qubits, inverted and starts; `bangs` of them inverted). None
    where they are not whole instructions and TICKs or the check refuses a run. In array passes, an
    entry made once a kind (a walk of the instructions took 2-3 ms of a 5k-qubit compile's 1,200 on an
    H200 host; it stays as the tests' definition, tests/test_stim_memory.py)."""
    import stim

    table = _plain(stim)
    entry_of = np.zeros((max(1, len(names)), 8), dtype=np.int32)
    whole = np.zeros(max(1, len(names)), dtype=bool)  # a kind whose instructions of targets are whole lines
    tick_kind = np.zeros(max(1, len(names)), dtype=bool)
    for k in np.unique(kinds).tolist():  # (the kinds present: a read in place names all 256 gate types)
        entry = table.get(names[k])
        tick_kind[k] = names[k] == "TICK"
        if entry is not None and entry[0] != _N:
            entry_of[k], whole[k] = native_entry(entry, entry[1], -1), True
    tick = tick_kind[kinds] & (parsed < 0) & alone
    body = np.flatnonzero(~tick)
    # each instruction but a TICK: a whole one, with targets (parsed in order: the next read line)
    if not whole[kinds[body]].all() or not np.array_equal(parsed[body], np.arange(len(body))):
        return None
    entries = entry_of[kinds[body]]
    stamp = np.full(max(1, n), -1, dtype=np.int64)
    address = native.address
    runs: list = []
    first = 0  # the open run's first entry
    ends = (np.cumsum(~tick)[tick]).tolist() + [len(body)]  # entries before each TICK, then all
    for k, end in enumerate(ends):
        if end > first:  # the run of entries [first, end), checked
            lo, hi = int(starts[first]), int(starts[end])
            bounds = starts[first:end + 1] - lo
            run_qubits = qubits[lo:hi]
            flags = inverted[lo:hi] if bangs and inverted[lo:hi].any() else None
            run = entries[first:end]
            if lib.qq_host_check_segment(address(run), len(run), address(run_qubits),
                                         None if flags is None else address(flags), address(bounds), n,
                                         address(stamp), first):
                return None  # (a qubit named twice in an instruction: walked as before)
            runs.append((run, run_qubits, flags, bounds))
            first = end
        if k < len(ends) - 1:
            runs.append(None)
    return CompiledPiece(runs)


def _whole_line(plain: dict, name: str, read: int, want: int) -> Optional[tuple]:
    """The `_plain` entry of a line named `name` whose targets are parsed line `read` (-1: not read)
    where a prepared piece takes it, a whole instruction of parsed line `want` (the next), else None
    (a channel's rows take its spec: walked as before)."""
    entry = plain.get(name) if read >= 0 else None
    return None if entry is None or entry[0] == _N or read != want else entry


# Lines a piece is read for at first (`_compiled_runs`), at least, and one for each this many bytes of
# its text: the paper's circuit has 12 lines a layer, a whole 5k-qubit one (2.4 MB) 1,200 lines
_PIECE_LINES = 1024
_PIECE_LINE_BYTES = 32
_NATIVE_ENTRIES: dict = {}


def native_entry(plain: tuple, code: int, aux: int) -> tuple:
    """A whole instruction as host_rows.cpp's `qq_entry` reads it, from its `_plain` entry, opcode and
    channel id: (code, aux, two qubits a row, a random slot a row, a record a row, how it reads '!':
    0 never, 1 a Z basis collapse's FLAGS, 2 an X / Y basis collapse of three rows a target, the
    basis change before, the change back after)."""
    key = (plain, code, aux)
    found = _NATIVE_ENTRIES.get(key)
    if found is None:
        kind, _, pair, measures, codes = plain
        mode = 2 if kind == _XY else 1 if kind == _Z else 0
        found = _NATIVE_ENTRIES[key] = (code, aux, int(pair), int(kind >= _Z), int(measures), mode,
                                        codes[0] if codes else 0, codes[2] if codes else 0)
    return found


def _prepared(lines: List[str], targets: _LineTargets) -> Optional[PreparedPiece]:
    import stim

    plain = _plain(stim)
    read = targets.line.tolist()
    entries: List[tuple] = []  # per instruction line, in order (all read, so parsed line g is entry g)
    plan: List[Optional[int]] = []  # per line: its entry's index, None for a TICK
    for k, line in enumerate(lines):
        if line == "TICK":
            plan.append(None)
            continue
        cut = line.find(" ")
        entry = _whole_line(plain, line[:cut] if cut > 0 else "", read[k], len(entries))
        if entry is None:
            return None
        plan.append(len(entries))
        entries.append((entry, entry[1], -1))
    qubits, inverted, starts = targets.qubits, targets.inverted, targets.starts
    bounds = starts.tolist()
    if inverted is not None and any(entries[g][0][0] not in (_Z, _XY) for g in
                                    set((np.searchsorted(starts, np.flatnonzero(inverted), "right") - 1).tolist())):
        return None  # ('!' only where Stim allows it: never for Stim's own text)
    if not len(qubits):
        return None
    keys = qubits
    if int(qubits.max()) >= 4 * len(qubits) + 4096:  # few qubits of large numbers: numbered by rank here
        keys = np.unique(qubits, return_inverse=True)[1].reshape(-1)
    seen, named = previous_targets(keys, bounds, np.full(int(keys.max()) + 1, -1, dtype=np.int64), 0)
    if not named.all():  # an instruction names a qubit twice: walked as before
        return None
    runs: List[Optional[SegmentRows]] = []
    rec = rand = 0
    lo = 0
    for k in range(len(plan) + 1):
        if k < len(plan) and plan[k] is not None:
            continue
        hi = plan[k - 1] + 1 if k and plan[k - 1] is not None else lo
        if hi > lo:  # the run of entries lo .. hi - 1
            made = segment_rows(entries[lo:hi], qubits, inverted, bounds[lo:hi + 1], seen, 0, rec, rand)
            qa = made.qa.astype(np.int32)  # (half the bytes handed over)
            made = made._replace(qa=qa, qb=qa if made.qb is made.qa else made.qb.astype(np.int32))
            rec += made.records
            rand += made.rand
            runs.append(made)
            lo = hi
        if k < len(plan):
            runs.append(None)
    return PreparedPiece(runs)
