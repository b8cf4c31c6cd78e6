"""The scheduled program on the device: the `QQTables` upload (cuda_src/tables.cuh) that every
kernel reads, so a launch carries only indices, and tableau mode's plan of launches.

Drives no kernel itself. `DeviceProgram` uploads the program once per (program, schedule): the
instruction and run arrays, loops, and the channels' and confusion maps' Bernoulli modes and
thresholds exactly as `core.rng` draws them (docs/engine-semantics.md, "Frame mode"). `_build_plan`
walks the schedule once (loops expanded on the host, as launches are) into the window launches of
tableau mode: 'G' a gate window (gates.cu, paper Alg. 3), 'C' a collapse window (the measure_*.cu
kernels, Algs. 4-8), 'F' one CONFUSION instruction (gates.cu), each with its loop context.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Iterable, List, Optional, Tuple

import numpy as np

from ...core import native, opcodes, rng
from ...core.program import A, B, COND, OP, REC, Program
from ...errors import UnsupportedOperationError
from ...schedule import Schedule
from ...schedule.walk import LoopBlock, walk
from ...schedule.windows import RUN_START, RUN_WINDOW, window_rows
from . import loader

Kind = opcodes.Kind
_COLLAPSE = (Kind.MEASURE, Kind.RESET, Kind.MEASURE_RESET)

MAX_DEPTH = loader.source_define("tables.cuh", "QQ_MAX_DEPTH")
# A loop context: (record shift, random shift, depth_rec[0..MAX_DEPTH]) as int32.
CTX_STRIDE = loader.source_define("tables.cuh", "QQ_CTX_STRIDE")
MAX_CONFUSION_BITS = loader.source_define("frames.cu", "QQ_MAX_CONFUSION_BITS")
# Device bytes of idle-qubit lists a program keeps (tableau mode's gate windows folded into a rows
# pass); the windows past it keep the gate kernel.
IDLE_LIST_BUDGET = 64 << 20
# The alignment of each array in a packed upload (DeviceProgram._upload_packed) and of each copy
# staged in page-locked memory (PieceUploads): the device's allocations are aligned to 256 bytes, so
# the arrays are aligned as if each had its own.
_ALIGN = 256


def _aligned(nbytes: int) -> int:
    """nbytes rounded up to a multiple of _ALIGN."""
    return -(-nbytes // _ALIGN) * _ALIGN


def _pad(a: np.ndarray, dtype) -> np.ndarray:
    """Contiguous copy with at least one element (no zero-size device allocations)."""
    a = np.ascontiguousarray(np.asarray(a, dtype=dtype).reshape(-1))
    return a if a.size else np.zeros(1, dtype=dtype)


def upload(cuda, a: np.ndarray):
    """A device copy of `a` (contiguous, at least one element): the allocation and one copy from
    the array's own memory. PyCUDA's `to_device` first copies the array into a bytes object; for
    the instruction table of a random circuit's first call that copy was 8 ms at n = 5k and 14 ms
    at 10k on an H100 host."""
    if not a.flags.c_contiguous:
        raise ValueError("upload takes a contiguous array")
    buf = cuda.mem_alloc(max(1, a.nbytes))
    cuda.memcpy_htod(buf, a)
    return buf


class PieceUploads:
    """Uploads that do not wait for the device (a program run in pieces, tableau.run_pieces): each
    array is copied into page-locked memory and goes up by an asynchronous copy on the default
    stream, so it lands after the kernels enqueued before it and before those enqueued after it,
    while the host goes on compiling. A copy from ordinary memory would wait for every kernel
    enqueued, asynchronous or not (but for a few kilobytes, which the driver takes at once). Two
    page-locked buffers take turns, a piece each: a buffer is filled again once the device is past
    the copies out of it. Making one (and at times a device allocation) waits for the device too:
    behind a 44 ms kernel on an H100, locking 4.6 MB and allocating 1 MB each returned after it.
    `buffers`: the two buffers (a list of two, None where not made yet), which it may grow or make:
    the engine keeps them for its next call, which finds them free (every call waits for its device
    work before it returns)."""

    def __init__(self, engine, buffers: List[Optional[np.ndarray]]):
        self._engine = engine
        self._buffers = buffers
        self._copied = [None, None]  # per buffer: an event after the last copies out of it
        self._retired: List[np.ndarray] = []  # outgrown buffers some copies may still read
        self._turn, self._used = 0, 0

    def __call__(self, a: np.ndarray):
        cuda = self._engine.cuda
        if not a.flags.c_contiguous:
            raise ValueError("upload takes a contiguous array")
        nbytes = max(1, a.nbytes)
        at = _aligned(self._used)
        buf = self._buffers[self._turn]
        if buf is None or at + nbytes > len(buf):
            if buf is not None:
                self._retired.append(buf)
            # twice what it must hold, so that a piece's small arrays after its table fit
            size = max(2 * nbytes, 2 * (len(buf) if buf is not None else 0), 1 << 20)
            buf = self._buffers[self._turn] = self._engine.pinned(size, np.uint8, "a program piece's tables")
            at = 0
        staged = buf[at:at + a.nbytes]
        staged[:] = a.reshape(-1).view(np.uint8)
        self._used = at + nbytes
        dev = cuda.mem_alloc(nbytes)
        if a.nbytes:
            cuda.memcpy_htod_async(dev, staged)
        return dev

    def next_piece(self) -> None:
        """This piece's uploads are all enqueued: the other buffer takes the next piece's, once the
        device is past the copies of the piece before (two pieces ago)."""
        cuda = self._engine.cuda
        event = cuda.Event()
        event.record()
        self._copied[self._turn] = event
        self._turn, self._used = 1 - self._turn, 0
        if self._copied[self._turn] is not None:
            self._copied[self._turn].synchronize()


@dataclasses.dataclass
class LoopIterations:
    """A top-level loop of the plan whose iterations a reference run may fold (tableau.py): its
    body reads no records and each iteration writes its own `stride` records, from `first_record`
    on. `starts[k]`: the action index of iteration k's first launch; `end`: the first after the loop."""

    starts: List[int]
    end: int
    first_record: int
    stride: int

    @property
    def count(self) -> int:
        return len(self.starts)


@dataclasses.dataclass
class _Plan:
    """Tableau mode's launch list for one (program, schedule): ('G'|'C'|'F', start, end, ctx), and
    the loops a reference run may fold."""

    actions: List[Tuple[str, int, int, int]]
    ctx: np.ndarray  # int32 [num_ctx, CTX_STRIDE]
    max_collapses: int
    loops: List[LoopIterations] = dataclasses.field(default_factory=list)


class DeviceProgram:
    """The scheduled program on the device (QQTables and the arrays it points to)."""

    def __init__(self, cuda, program: Program, schedule: Schedule,
                 uploads: Optional[Callable[[np.ndarray], object]] = None, table=None):
        """`uploads`: how arrays go up, a device allocation of each (default: `upload`, a copy that
        waits for the device; the engine's `FrameMode.upload`, large ones through its page-locked
        slots; `PieceUploads`); `table`: the scheduled instructions already on the device (a device
        allocation), not uploaded again."""
        self.program, self.schedule = program, schedule
        self._cuda = cuda
        self._send = uploads if uploads is not None else (lambda a: upload(cuda, a))
        self._keep = []
        self.nbytes = 0  # device bytes uploaded (the engine's memory_limit counts them)
        depth = max((loop.depth for loop in program.loops), default=0)
        if depth > MAX_DEPTH:
            raise UnsupportedOperationError(
                f"loops nested {depth} deep; the CUDA engine supports up to {MAX_DEPTH} (use the NumPy engine)")
        loops = np.zeros((max(1, len(program.loops)), 5), dtype=np.int32)
        for i, loop in enumerate(program.loops):
            loops[i] = (loop.count, loop.rec_stride, loop.rand_stride,
                        schedule.loop_runs[i, 0], schedule.loop_runs[i, 1])
        thr: List[int] = []
        ch_info, ch_p, ch_paulis = [], [], []
        for ch in program.channels:
            # Exactly the branches of rng.bernoulli_words for p = the channel's total.
            p = ch.total
            lanes = len(thr)
            mode, threshold, any_threshold = rng.bernoulli_mode(p), 0, 0
            if mode in (rng.BernoulliMode.BITS, rng.BernoulliMode.SPARSE):
                threshold = rng.fixed_point(p)
            if mode == rng.BernoulliMode.SPARSE:
                any_threshold = rng._any_threshold(p)
                thr.extend(int(c) for c in rng._first_lane_cuts(p))
            m = len(ch.probs)
            ch_info.append((mode, m, ch.arity, len(thr), len(ch_paulis), lanes))
            ch_p.extend((threshold, any_threshold))
            if m > 1:
                thr.extend(int(c) for c in rng.thresholds(ch.probs))
            ch_paulis.extend(int(v) for v in np.asarray(ch.paulis, dtype=np.uint8).reshape(-1))
        cf_info = []
        for cf in program.confusions:
            if cf.num_bits > MAX_CONFUSION_BITS:
                raise UnsupportedOperationError(
                    f"a confusion map on {cf.num_bits} records; the CUDA engine supports {MAX_CONFUSION_BITS}")
            cf_info.append((cf.num_bits, len(thr)))
            for row in np.asarray(cf.matrix, dtype=np.float64):
                thr.extend(int(c) for c in rng.thresholds(row))
        cd_info, cd_refs, cd_table = [], [], []
        for cd in program.conditions:
            refs = np.asarray(cd.refs, dtype=np.int64).reshape(-1, 2)
            cd_info.append((len(refs), len(cd_refs) // 2, len(cd_table)))
            cd_refs.extend(int(v) for v in refs.reshape(-1))
            cd_table.extend(int(bool(v)) for v in np.asarray(cd.table).reshape(-1))
        arrays = [
            _pad(schedule.runs, np.int32),
            _pad(loops, np.int32),
            _pad(program.ext_qubits, np.int32),
            _pad(np.array(ch_info, dtype=np.int32), np.int32),
            _pad(np.array(ch_p, dtype=np.uint64), np.uint64),
            _pad(np.array(thr, dtype=np.uint64), np.uint64),
            _pad(np.array(ch_paulis, dtype=np.uint8), np.uint8),
            _pad(np.array(cf_info, dtype=np.int32), np.int32),
            _pad(np.array(cd_info, dtype=np.int32), np.int32),
            _pad(np.array(cd_refs, dtype=np.int32), np.int32),
            _pad(np.array(cd_table, dtype=np.uint8), np.uint8),
        ]
        if table is None:
            instructions = _pad(schedule.instructions, np.int32)
            table = self._send(instructions)
            self.nbytes += instructions.nbytes
        else:  # the pieces' tables joined on the device: the host's rows are not read (nor joined)
            self.nbytes += schedule.nbytes or 4
        self.table = table
        self._keep.append(self.table)
        ptrs = [int(self.table)] + self._upload_packed(arrays)
        counts = [len(schedule.runs), program.num_qubits, program.num_records]
        blob = np.array(ptrs + counts, dtype=np.uint64)
        self.tables = self._upload(blob)
        self.plan: Optional[_Plan] = None
        self.ctx = None  # device copy of plan.ctx
        self.foldable = None  # tableau mode: {gate window (start, end): its two-qubit gates, or None} (tableau.py)
        self.routes = {}  # tableau mode: {engine setting: (paths, folds) of the collapse windows} (tableau.py)
        self.idle: Dict[Tuple[int, int], Optional[Tuple[int, int]]] = {}  # `idle_qubits`
        self._idle_bytes = 0
        self._window_rows: Optional[Tuple[np.ndarray, int]] = None

    def window_rows(self) -> Tuple[np.ndarray, int]:
        """`schedule.windows.window_rows` of the program's schedule (made once)."""
        if self._window_rows is None:
            self._window_rows = window_rows(self.schedule)
        return self._window_rows

    def _upload(self, a: np.ndarray) -> int:
        buf = self._send(a)
        self._keep.append(buf)
        self.nbytes += a.nbytes
        return int(buf)

    def _upload_packed(self, arrays: List[np.ndarray]) -> List[int]:
        """The device addresses of `arrays` (contiguous), sent as one upload: each at an offset
        aligned to _ALIGN in one buffer. With an allocation and a copy an array, a streamed
        first call at 10k qubits had made about 200 of each (a dozen a piece)."""
        offsets, size = [], 0
        for a in arrays:
            size = _aligned(size)
            offsets.append(size)
            size += a.nbytes
        packed = np.zeros(max(1, size), dtype=np.uint8)
        for a, at in zip(arrays, offsets):
            packed[at:at + a.nbytes] = a.reshape(-1).view(np.uint8)
        base = self._upload(packed)
        return [base + at for at in offsets]

    def idle_qubits(self, windows: Iterable[Tuple[int, int]]) -> Dict[Tuple[int, int], Optional[Tuple[int, int]]]:
        """{gate window (start, end): (device address, count) of the qubits none of its instructions
        acts on, or None past IDLE_LIST_BUDGET}; the lists not yet on the device go up together."""
        missing = [w for w in dict.fromkeys(windows) if w not in self.idle]
        lists = []
        idle, counts = idle_lists(self.schedule.instructions, self.program.num_qubits, missing)
        at = 0
        for window, count in zip(missing, counts.tolist()):
            listed = idle[at:at + count]
            at += count
            if self._idle_bytes + listed.nbytes > IDLE_LIST_BUDGET:
                self.idle[window] = None
                continue
            self._idle_bytes += listed.nbytes
            lists.append((window, listed))
        if lists:
            base = self._upload(_pad(np.concatenate([idle for _, idle in lists]), np.int32))
            offset = 0
            for window, idle in lists:
                self.idle[window] = (base + 4 * offset, len(idle))
                offset += len(idle)
        return self.idle

    def tableau_plan(self) -> _Plan:
        """Tableau mode's plan, built (and its loop contexts uploaded) on first use."""
        if self.plan is None:  # both kept only when both are made (an interruption leaves neither)
            plan = _build_plan(self.program, self.schedule)
            ctx = _pad(plan.ctx, np.int32)
            buf = self._send(ctx)
            self._keep.append(buf)
            self.ctx = int(buf)
            self.nbytes += ctx.nbytes
            self.plan = plan
        return self.plan


def idle_lists(ins: np.ndarray, n: int, windows: List[Tuple[int, int]]) -> Tuple[np.ndarray, np.ndarray]:
    """(the qubits no row of each window (start, end) of `ins` acts on, each window's in increasing
    order after the one before it, int32; how many each window has): a row acts on A, and on B
    where its opcode's arity is 2. By the host's compiled path (host_rows.cpp) where it is on, else
    `_idle_lists_numpy`, the definition."""
    lib = native.compiled()
    if lib is None or not windows:
        return _idle_lists_numpy(ins, n, windows)
    ins = np.ascontiguousarray(ins, dtype=np.int32)
    starts = np.array([start for start, _ in windows], dtype=np.int64)
    ends = np.array([end for _, end in windows], dtype=np.int64)
    if not (0 <= starts.min() and (starts <= ends).all() and ends.max() <= len(ins)):
        return _idle_lists_numpy(ins, n, windows)
    counts = np.empty(len(windows), dtype=np.int64)
    seen = np.empty(max(1, n), dtype=np.uint8)
    a = native.address
    parts = []
    step = max(1, _IDLE_ROOM // max(1, n))  # windows a call: room for each to leave every qubit idle
    for lo in range(0, len(windows), step):
        hi = min(len(windows), lo + step)
        idle = np.empty((hi - lo) * n, dtype=np.int32)  # (pages never written are never touched)
        if lib.qq_host_idle_lists(a(ins), a(starts[lo:hi]), a(ends[lo:hi]), hi - lo, n, a(_ARITY), len(_ARITY),
                                  a(seen), a(idle), a(counts[lo:hi])):
            return _idle_lists_numpy(ins, n, windows)  # (a qubit or opcode out of range: it says which)
        parts.append(idle[:int(counts[lo:hi].sum())])
    return (parts[0] if len(parts) == 1 else np.concatenate(parts)), counts


_ARITY = np.ascontiguousarray(opcodes.ARITY, dtype=np.int32)
_IDLE_ROOM = 1 << 24  # qubit entries a call of the compiled path has room for (64 MiB)


def _idle_lists_numpy(ins: np.ndarray, n: int, windows: List[Tuple[int, int]]) -> Tuple[np.ndarray, np.ndarray]:
    """`idle_lists`, a window at a time in NumPy."""
    lists = []
    for start, end in windows:
        block = ins[start:end]
        touched = np.zeros(n, dtype=bool)
        touched[block[:, A]] = True
        touched[block[opcodes.ARITY[block[:, OP]] == 2, B]] = True
        lists.append(np.flatnonzero(~touched).astype(np.int32))
    counts = np.array([len(listed) for listed in lists], dtype=np.int64)
    return (np.concatenate(lists) if lists else np.zeros(0, dtype=np.int32)), counts


def _build_plan(program: Program, schedule: Schedule) -> _Plan:
    """Tableau mode's window launches: for a program without loops from the runs' arrays (a
    window's gate runs are one 'G', its collapse runs one 'C', after its 'F's), else by walking."""
    runs = schedule.runs
    if program.loops or not len(runs):
        return _walked_plan(program, schedule)
    ins = schedule.instructions
    starts, ends, ops, windows = (runs[:, i].astype(np.int64) for i in range(4))
    kinds = opcodes.KIND[ops]
    # an identity run launches nothing unless it is classically controlled (a barrier run of one)
    gate = np.isin(kinds, (Kind.UNITARY, Kind.NOISE)) & ~((ops == opcodes.CODE["I"]) & (ins[starts, COND] < 0))
    collapse = np.isin(kinds, _COLLAPSE)
    confusion = np.flatnonzero(kinds == Kind.RECORD_NOISE)
    first = np.flatnonzero(np.diff(windows, prepend=-1) != 0)  # each window's first run
    big = np.iinfo(np.int64).max
    spans = []
    for mask in (gate, collapse):
        lo = np.minimum.reduceat(np.where(mask, starts, big), first)
        hi = np.maximum.reduceat(np.where(mask, ends, -1), first)
        spans.append((lo.tolist(), hi.tolist()))
    (gate_lo, gate_hi), (col_lo, col_hi) = spans
    by_window = {}
    for r in confusion.tolist():  # 'F': one CONFUSION instruction each
        by_window.setdefault(int(windows[r]), []).extend(range(int(starts[r]), int(ends[r])))
    actions: List[Tuple[str, int, int, int]] = []
    window_of = windows[first].tolist()
    for g, window in enumerate(window_of):
        for i in by_window.get(window, ()):
            actions.append(("F", i, i + 1, 0))
        if gate_hi[g] >= 0:
            actions.append(("G", gate_lo[g], gate_hi[g], 0))
        if col_hi[g] >= 0:
            actions.append(("C", col_lo[g], col_hi[g], 0))
    max_collapses = int(max((h - l for l, h in zip(col_lo, col_hi) if h >= 0), default=0))
    return _Plan(actions, np.zeros((1, CTX_STRIDE), dtype=np.int32), max_collapses)


# Each opcode's part in a window's launches: a collapse, a CONFUSION ('F'), a gate, or nothing.
_PART_OTHER, _PART_COLLAPSE, _PART_CONFUSION, _PART_GATE = range(4)
_PART = [_PART_COLLAPSE if kind in _COLLAPSE else _PART_CONFUSION if kind == Kind.RECORD_NOISE
         else _PART_GATE if kind in (Kind.UNITARY, Kind.NOISE) else _PART_OTHER for kind in opcodes.KIND.tolist()]


def foldable_loop(block: LoopBlock) -> bool:
    """Whether a reference run may stop repeating this loop once its tableau repeats (the NumPy
    engine's rule, engines/numpy/engine.py `_TableauPass.loop`): a top-level loop of more than two
    iterations that writes records and whose body reads none."""
    return (block.loop.depth == 1 and block.loop.count > 2 and block.loop.rec_stride > 0
            and not (block.instructions()[:, COND] >= 0).any())


def _walked_plan(program: Program, schedule: Schedule) -> _Plan:
    """Walk the schedule once (loops expanded on the host, as launches are) into window launches.
    Per step only list and dict lookups (a distance-51 surface code's 50 rounds are 10k steps).
    The iterations of each foldable loop start groups of their own, whose first actions it notes."""
    runs = schedule.runs
    ins = schedule.instructions
    run_of = {s: r for r, s in enumerate(runs[:, RUN_START].tolist())}
    window_of = runs[:, RUN_WINDOW].tolist()
    part_of, identity = _PART, opcodes.CODE["I"]
    ctx_ids = {}
    ctx_rows: List[List[int]] = []
    groups: List[Tuple[int, int, List[Tuple[int, int, int]]]] = []  # (window, ctx, [(start, end, op)])
    loop_groups: List[list] = []  # per foldable loop: [first group of each iteration, first record, stride, end group]

    def steps():
        for item in walk(program, schedule, fold=foldable_loop):
            if not isinstance(item, LoopBlock):
                yield item
                continue
            rows = item.instructions()
            firsts: List[int] = []
            loop = [firsts, int(rows[rows[:, REC] >= 0, REC].min()) + item.rec_shift, item.loop.rec_stride, None]
            loop_groups.append(loop)
            for k in range(item.loop.count):
                firsts.append(len(groups))
                yield None  # a group boundary
                yield from item.iteration(k)
            yield None
            loop[3] = len(groups)

    last_run = -1
    for step in steps():
        if step is None:
            last_run = len(runs)  # the next step starts a group
            continue
        r = run_of[step.start]
        key = (step.rec_shift, step.rand_shift, step.depth_rec_shifts)
        ctx = ctx_ids.get(key)
        if ctx is None:
            depth_rec = list(step.depth_rec_shifts)
            if len(depth_rec) > MAX_DEPTH + 1:
                raise UnsupportedOperationError(f"loops nested deeper than {MAX_DEPTH}")
            ctx = ctx_ids[key] = len(ctx_rows)
            ctx_rows.append([step.rec_shift, step.rand_shift] + depth_rec + [0] * (MAX_DEPTH + 1 - len(depth_rec)))
        window = window_of[r]
        if groups and groups[-1][0] == window and groups[-1][1] == ctx and r > last_run:
            groups[-1][2].append((step.start, step.end, step.op))
        else:
            groups.append((window, ctx, [(step.start, step.end, step.op)]))
        last_run = r
    actions: List[Tuple[str, int, int, int]] = []
    first_action: List[int] = []  # per group
    max_collapses = 0
    for _, ctx, parts in groups:
        first_action.append(len(actions))
        gate_lo = gate_hi = col_lo = col_hi = -1
        for start, end, op in parts:
            part = part_of[op]
            if part == _PART_COLLAPSE:
                col_lo = start if col_lo < 0 else col_lo
                col_hi = end
            elif part == _PART_CONFUSION:
                for i in range(start, end):
                    actions.append(("F", i, i + 1, ctx))
            elif part == _PART_GATE:
                if op == identity and ins[start, COND] < 0:
                    continue
                gate_lo = start if gate_lo < 0 else gate_lo
                gate_hi = end
        if gate_lo >= 0:
            actions.append(("G", gate_lo, gate_hi, ctx))
        if col_lo >= 0:
            actions.append(("C", col_lo, col_hi, ctx))
            max_collapses = max(max_collapses, col_hi - col_lo)
    first_action.append(len(actions))
    ctx_arr = np.array(ctx_rows, dtype=np.int32).reshape(-1, CTX_STRIDE)
    loops = [LoopIterations([first_action[g] for g in firsts], first_action[end], first, stride)
             for firsts, first, stride, end in loop_groups]
    return _Plan(actions, ctx_arr, max_collapses, loops)
