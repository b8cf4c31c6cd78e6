"""The CUDA engine's reference sample from the measured rows alone (engines/measured_rows.py says
why it is the tableau run's records): the backward sweep (in one launch where a word's strings fit
a block's shared memory, else a schedule window a launch: `one_launch`) and the planes' transpose
to rows on the device (cuda_src/measured_rows.cu), then the forward sweep with
the tableau's own kernels on those rows: each window of collapses decided on its rows by
measure_window_plan (`side` rows) and applied to the rows of every later collapse as a low-rank
update (measure_lowrank.cu's prepare, counts, apply and signs, the rows taken as a tableau of their
own) where the window has `engine.lowrank_min` collapses and the low-rank path is on, else by
measure_rows_apply (its oracle). Programs with resets keep the full run (a reset's flips of later
rows are the NumPy engine's only)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ...core.program import NUM_FIELDS, Program
from ...schedule import Schedule
from .. import measured_rows as shared
from . import loader, measure
from .device_program import CTX_STRIDE
from .tableau import _WindowBuffers

PULLBACK_WARPS = loader.source_define("measured_rows.cu", "QQ_PULLBACK_WARPS")
PULLBACK_ROWS = loader.source_define("measured_rows.cu", "QQ_PULLBACK_ROWS")
SLICE_WARPS = loader.source_define("measured_rows.cu", "QQ_SLICE_WARPS")
PULLBACK_ALL_THREADS = loader.source_define("measured_rows.cu", "QQ_PULLBACK_ALL_THREADS")
WINDOW = 128  # collapses a forward window decides together (64: 0.082 against 0.076 s at 100k qubits, H200)


def supports(program: Program, schedule: Schedule) -> bool:
    """The shared conditions, no reset among the collapses, and each window's collapses its last rows."""
    if not shared.supports(program) or np.isin(schedule.runs[:, 2], shared.RESET_CODES).any():
        return False
    return _windows(schedule) is not None


def pays(engine, program: Program, schedule: Schedule) -> bool:
    """Where the measured rows cost less than the full run (`shared.pays`) and a measured row fits a
    block of the rows pass (`measure.rows_per_block`), which windows narrower than the low-rank
    path's take."""
    W = max(1, (program.num_qubits + 63) // 64)
    return (supports(program, schedule) and shared.pays(program, schedule, engine.measured_rows_share)
            and measure.rows_per_block(engine.smem_optin, W) >= 1)


def _windows(schedule: Schedule) -> Optional[np.ndarray]:
    """The schedule's windows as int64 rows (first row, end row, first collapse row), in order; None
    where a window's collapses are not its last rows. Runs of one window are consecutive, and a
    window's collapses rank after its other rows (schedule/windows.py), so they end it: the backward
    sweep numbers them from the first (a window of no collapse: its end row). Made once a schedule
    (`supports` and `run_records` both ask), from its runs in a few array passes (a Python pass over
    them took 0.8 ms at 5k qubits, depth 100)."""
    kept = schedule.derived.get("measured_rows_windows")
    if kept is None:
        kept = schedule.derived["measured_rows_windows"] = (_windows_of(schedule.runs),)
    return kept[0]


def _windows_of(runs: np.ndarray) -> Optional[np.ndarray]:
    """`_windows` of the schedule's runs (int32 [R, 4]: start, end, opcode, window)."""
    if not len(runs):
        return np.zeros((0, 3), dtype=np.int64)
    lo, hi, code, window = (runs[:, k].astype(np.int64) for k in range(4))
    collapse = np.isin(code, shared.COLLAPSE_CODES)
    opens = np.ones(len(runs), dtype=bool)
    opens[1:] = window[1:] != window[:-1]
    which = np.cumsum(opens) - 1  # each run's window
    starts = np.flatnonzero(opens)
    ends = np.append(starts[1:], len(runs)) - 1  # each window's last run
    first_collapse = np.full(len(starts), len(runs), dtype=np.int64)
    np.minimum.at(first_collapse, which[collapse], np.flatnonzero(collapse))
    if (~collapse & (np.arange(len(runs)) > first_collapse[which])).any():
        return None  # a gate after a collapse of its window
    has = first_collapse < len(runs)
    c_lo = np.where(has, lo[np.minimum(first_collapse, len(runs) - 1)], hi[ends])
    return np.stack([lo[starts], hi[ends], c_lo], axis=1)


def one_launch(engine, n: int, words: int) -> bool:
    """Whether the backward sweep runs in one launch (pullback_all: block w takes word w's strings of
    every qubit, 16 n bytes of shared memory, through every window), where `engine.pullback_in_one_launch`
    allows it ("always" where it fits: tests; False: a launch a window, pullback_window, its oracle),
    the strings fit and the words are one wave of blocks (more, and each block's walk over every
    window would come after another's)."""
    setting = engine.pullback_in_one_launch
    fits = 16 * n + 1024 <= engine.smem_optin and words >= 1
    return bool(setting) and fits and (setting == "always" or words <= engine.sm_count)


def pulled_back(engine, program: Program, schedule: Schedule, events: shared.Measurements, dp, alloc, upload):
    """The backward sweep (device buffers x, z of n * words words, s of words: measurement e's
    string is bit e of x[q * words + e / 64], z[...] and s[e / 64]): last window first, a window's
    rows on distinct qubits, its collapses its last rows, and the words of measurements before the
    window hold no string yet. `dp`: the program's DeviceProgram; `alloc`, `upload`: the caller's."""
    cuda, launch = engine.cuda, engine.launcher.launch
    n, count = program.num_qubits, len(events.rows)
    words = -(-count // 64)
    planes = [alloc(8 * n * words), alloc(8 * n * words), alloc(8 * words)]
    for plane, size in zip(planes, (2 * n * words, 2 * n * words, 2 * words)):
        cuda.memset_d32(plane, 0, size)
    bx, bz, bs = planes
    windows = _windows(schedule)
    firsts = np.searchsorted(events.rows, windows[:, 2])
    if one_launch(engine, n, words):
        table = np.empty((len(windows), 4), dtype=np.int32)
        table[:, :3], table[:, 3] = windows, firsts
        launch("measured rows: backward sweep", "pullback_all", (words, 1), (PULLBACK_ALL_THREADS, 1, 1),
               int(dp.table), int(upload(table)), len(windows), n, int(bx), int(bz), int(bs), words,
               shared_size=16 * n)
    else:
        for (lo, hi, c_lo), first in zip(reversed(windows.tolist()), reversed(firsts.tolist())):
            if first >= count:
                continue
            launch("measured rows: backward sweep", "pullback_window",
                   (-(-(words - (first >> 6)) // 32), -(-(hi - lo) // PULLBACK_ROWS)), (32 * PULLBACK_WARPS, 1, 1),
                   int(dp.table), lo, hi, c_lo, first, int(bx), int(bz), int(bs), words, first >> 6)
    return bx, bz, bs


def run_records(engine, program: Program, schedule: Schedule, window: Optional[int] = None) -> np.ndarray:
    """The records of the reference run of `program` from its measured rows alone, `window`
    collapses decided together (default WINDOW; at most LOWRANK_NARROW: one low-rank chunk)."""
    cuda, launch = engine.cuda, engine.launcher.launch
    events = shared.Measurements(schedule)
    n, count, num_records = program.num_qubits, len(events.rows), program.num_records
    records = np.zeros(num_records, dtype=np.uint8)
    if count == 0:
        return records
    W, words = max(1, (n + 63) // 64), -(-count // 64)
    what = f"the measured rows of {count:,} collapses on {n:,} qubits"
    alloc = lambda nbytes: engine.alloc(nbytes, what)  # noqa: E731
    ins = schedule.instructions
    dp = engine.device_program(program, schedule)  # the schedule's rows on the device
    keep = []

    def upload(a: np.ndarray):
        buf = alloc(a.nbytes)
        cuda.memcpy_htod(buf, np.ascontiguousarray(a))
        keep.append(buf)
        return buf

    bx, bz, bs = pulled_back(engine, program, schedule, events, dp, alloc, upload)
    # One row a collapse (and a spare: the rows pass takes rows in pairs), in gate layout.
    tail = measure.LOWRANK_TAIL_BYTES
    X, Z, S = alloc(8 * (count + 1) * W + tail), alloc(8 * (count + 1) * W + tail), alloc(count + 1)
    for plane, rows in ((bx, X), (bz, Z)):
        launch("measured rows: rows", "slices_to_rows", (-(-W // SLICE_WARPS), words), (32 * SLICE_WARPS, 1, 1),
               int(plane), int(rows), n, count, words, W)
    launch("measured rows: rows", "slice_signs", (-(-count // 256), 1), (256, 1, 1), int(bs), int(S), count)
    del bx, bz, bs  # freed before the forward sweep's buffers (cuMemFree waits for the transposes)
    # The forward sweep: the collapses' rows of the schedule as the plan's instruction table.
    table = np.zeros((count + 1, NUM_FIELDS), dtype=np.int32)
    table[:count] = ins[events.rows]
    table = upload(table)
    tables = upload(np.array([int(table)] + [0] * 11 + [0, n, num_records], dtype=np.uint64))
    ctx = upload(np.zeros(CTX_STRIDE, dtype=np.int32))
    k_max = max(1, min(window or WINDOW, count, measure.LOWRANK_NARROW))
    if W % 2 and k_max > 1:  # every window's later rows 16-byte aligned: lowrank_counts copies them in pairs of words
        k_max -= k_max % 2
    ws = _Buffers(alloc, cuda, W, k_max, num_records, -(-count // 2))
    lowrank = measure.lowrank_on(engine)
    blocks = max(1, measure.plan_blocks(engine, W))
    per = measure.rows_per_block(engine.smem_optin, W)
    warps = engine.row_warps or (1 if W <= measure.ONE_WARP_WORDS else measure.ROW_MAX_WARPS)
    row_bytes = 8 * W
    for lo in range(0, count, k_max):
        hi = min(count, lo + k_max)
        k = hi - lo
        in_smem = engine.plan_slice_shared and \
            measure.plan_shared_bytes(W, blocks, k, True) <= engine.smem_optin - 1024
        launch("measured rows: plan", "measure_window_plan", (blocks, 1), (measure.PLAN_BLOCK, 1, 1), int(tables),
               int(ctx), lo, hi, int(X) + lo * row_bytes, int(Z) + lo * row_bytes, int(S) + lo, int(ws.sx),
               int(ws.sz), int(in_smem), int(ws.plan_pub), int(ws.plan_bar), int(ws.plan), int(ws.vrows),
               int(ws.active), int(ws.rec), W, 0, 0, 0, 1, 1,
               shared_size=measure.plan_shared_bytes(W, blocks, k, in_smem))
        later = count - hi
        if not later:
            continue
        # The later rows as a tableau of 2 n' rows (n' = ceil(later / 2); the spare row past the last).
        half, at = (later + 1) // 2, (int(X) + hi * row_bytes, int(Z) + hi * row_bytes, int(S) + hi)
        if lowrank and k >= engine.lowrank_min:
            _lowrank(engine, ws, *at, k, half, W)
        else:
            launch("measured rows: apply", "measure_rows_apply", (-(-2 * half // per), 1), (32 * warps * per, 1, 1),
                   *at, int(ws.plan), int(ws.vrows), int(ws.active), k, half, W, per, warps, 0,
                   shared_size=8 * (2 * per + 1) * W)
    if num_records:
        cuda.memcpy_dtoh(records, ws.rec)
    else:
        cuda.Context.synchronize()
    return records


def _lowrank(engine, ws: "_Buffers", X: int, Z: int, S: int, k: int, half: int, W: int) -> None:
    """The window's k collapses (one chunk) as a low-rank update of the 2 half rows at X, Z, S, with
    the tableau path's kernels (measure._lowrank without folded gates, fusion or reset rows)."""
    launch, stage = engine.launcher.launch, "measured rows: apply"
    prep_words = max(8, -(-W // (2 * engine.sm_count)))
    launch(stage, "lowrank_prepare", (-(-W // prep_words), 1), (measure.LOWRANK_PREP_BLOCK, 1, 1), int(ws.plan),
           int(ws.vrows), 0, k, k, half, W, prep_words, int(ws.vn), int(ws.meta), int(ws.pcol), int(ws.pivots),
           int(ws.vp), int(ws.special), int(ws.span))
    counts = measure.LOWRANK_COUNTS[min(c for c in measure.LOWRANK_COUNTS if c >= k)]
    launch(stage, counts, (-(-2 * half // measure.LOWRANK_COUNT_ROWS), 1), (measure.LOWRANK_COUNT_BLOCK, 1, 1), X, Z,
           S, int(ws.plan), int(ws.vn), int(ws.meta), int(ws.pcol), int(ws.pivots), int(ws.vp), int(ws.special),
           int(ws.active), int(ws.rowbits), 0, k, half, W, shared_size=measure.LOWRANK_COUNT_SMEM)
    grid, per = measure.lowrank_apply_shape(half, W, engine.sm_count)
    launch(stage, "lowrank_apply", grid, (measure.LOWRANK_APPLY_BLOCK, 1, 1), X, Z, int(ws.vn), int(ws.rowbits),
           int(ws.meta), int(ws.pivots), int(ws.active), int(ws.part), k, half, W, per,
           shared_size=measure._tables_bytes(k))
    launch(stage, "lowrank_signs", (-(-(-(-half // 2)) // measure.LOWRANK_SIGNS_BLOCK), 1),
           (measure.LOWRANK_SIGNS_BLOCK, 1, 1), S, int(ws.meta), int(ws.active), 0, 0, 0, 0, 0, int(ws.part), half, W)


class _Buffers(_WindowBuffers):
    """What measure_window_plan and the low-rank update read and write for windows of up to k
    collapses on rows of W words, up to 2 half rows after a window."""

    def __init__(self, alloc, cuda, W: int, k: int, num_records: int, half: int):
        super().__init__(alloc, W, k)
        self.sx, self.sz = alloc(8 * k * W), alloc(8 * k * W)
        self.plan_pub = alloc(4 * measure.plan_published_words(k))
        self.plan_bar = alloc(8)
        cuda.memset_d32(self.plan_bar, 0, 2)
        self.rec = alloc(max(1, num_records))
        cuda.memset_d8(self.rec, 0, max(1, num_records))
        self.span = alloc(12)  # lowrank_prepare's span of words over its blocks: (min, max, blocks done)
        cuda.memcpy_htod(self.span, np.array([0x7FFFFFFF, 0, 0], dtype=np.int32))
        self.rowbits = alloc(8 * 3 * measure.LOWRANK_WORDS * 2 * max(1, half))
        self.part = alloc(4 * measure.lowrank_part_words(half, W))
