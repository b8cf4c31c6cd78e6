"""Tableau mode's collapse windows: Z measurements and resets of one window (paper Algs. 4-8).

Kernels driven, per window ('C' action of the plan), one of four equivalent paths
(docs/engine-semantics.md, "Z measurement of qubit q"), chosen by `window_path`:

- low rank (`lowrank_windows`, the default, for windows of engine.lowrank_min
  (LOWRANK_MIN_COLLAPSES) to max(64, n/64) collapses without classical control):
  measure_window_plan decides the whole window on the measured qubits' rows alone (measure_plan.cu:
  spread over the multiprocessors, one grid barrier a collapse; measure_rows_plan, one block, on
  small tableaux), then per chunk
  of LOWRANK_CHUNK collapses lowrank_prepare, lowrank_counts_<C>, lowrank_apply and lowrank_signs
  update every row at once (measure_lowrank.cu: a bit-matrix product on the tensor cores and a
  table-driven pass, whatever the number of collapses); the rows whose sign a reset clears
  mid-window are replayed by measure_rows_apply. No transposes, no second tableau buffer. A window
  of measurements alone takes the gate window after it into its last pass 2 (`can_fold`,
  `foldable_gates`: lowrank_gate_groups, lowrank_idle_groups, lowrank_apply_gates), so the rows
  are read and written once for both; `engine.fold_gates = False` leaves the gates to gates.cu (the
  oracle of both folds). Where the collapse window after that gate window takes the low-rank path
  in one chunk, the same pass makes its pass 1 too (`can_fuse`, `fuse_pass`: that window is
  decided first on its measured rows made ahead, lowrank_ahead and measure_window_plan; then
  lowrank_apply_gates_counts and lowrank_reduce), so a layer reads and writes the tableau once;
  `engine.fuse_windows = False` gives each window its own pass 1 (the oracle).
- rows (`batch_windows`, for the windows low rank does not take, or all when it is off): the same
  plan, then measure_rows_apply takes every row of the tableau through all of the window's
  collapses one after the other in shared memory (measure_rows.cu): one read and one write of the
  tableau a window, but per row the work of every collapse. On rows of at most ROWS_FOLD_MAX_W
  words measure_rows_apply_gates takes the gate window after it too (resets included): a block
  takes a few gates or idle qubits (those listed per gate window, DeviceProgram.idle_qubits), their
  rows through the collapses, then through their gates.
- one block (`block_windows` and W <= BLOCK_MAX_W words a row, n <= 4096): measure_window_block
  (measure_block.cu: Algs. 5, 7 and 8 for the whole window in gate layout), one launch a window.
- with the window's host read: measure_window_scan (measure_scan.cu, Alg. 5 for every collapse at
  once: deterministic outcomes written there) and one small read of its flags; then, when many
  collapses may be random (`wide_lowrank`), the low-rank path as above on consecutive pieces of
  the window, each at most as wide as that path takes (`wide_pieces`);
  otherwise, only if some collapse is random, transpose_words (transpose.cu, Alg. 4) to word-major and for each random
  collapse i, in program order, measure_pivot (measure_pivot.cu: Alg. 5 re-check + Alg. 6
  compaction, coin and the H / H_YZ and X decisions) -> measure_eliminate (measure_eliminate.cu:
  Alg. 7 with Alg. 8 fused); pivot, coin and decisions never visit the host. Then transpose back.
- without it: the same pivot -> eliminate pair for every collapse, measure_pivot settling the
  deterministic ones itself, in program order.

Deterministic resets keep their program order: measure_pivot clears those between the previous
random collapse and its own, and a launch with i < 0 clears the window's tail.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from ...core import opcodes
from ...core.program import COND, OP
from . import loader

_M = opcodes.CODE["M"]
_UNITARY = int(opcodes.Kind.UNITARY)

SCAN_BLOCK = loader.source_define("measure_scan.cu", "QQ_SCAN_BLOCK")  # one warp per collapse
PIVOT_BLOCK = loader.source_define("measure_pivot.cu", "QQ_PIVOT_BLOCK")
ELIM_BLOCK = loader.source_define("measure_eliminate.cu", "QQ_ELIM_BLOCK")
ELIM_MAX_SEG_SHIFT = loader.source_define("measure_eliminate.cu", "QQ_ELIM_MAX_SEG_SHIFT")
WINDOW_BLOCK = loader.source_define("measure_block.cu", "QQ_WINDOW_BLOCK")
BLOCK_MAX_W = loader.source_define("measure_block.cu", "QQ_BLOCK_MAX_W")  # words a row: n <= 4096
TILE = loader.source_define("transpose.cu", "QQ_TILE")
TILE_ROWS = loader.source_define("transpose.cu", "QQ_TILE_ROWS")
SYNC_WINDOW = 16  # collapses in a window above which its flags are read back
# Rows of at least this many words: a one-block window past the batched width is scanned first and
# takes the low-rank pieces where it has many random collapses (`wide_lowrank`); below it the block's
# collapses cost less than the scan's round trip and the pieces' launches. Reference runs of surface
# codes on an H100 (pieces / one block): W = 8 3.1 / 2.8 ms, W = 10 3.7 / 3.7, W = 13 4.4 / 5.6,
# W = 21 7.0 / 14.9.
BLOCK_SCAN_MIN_W = 10
PLAN_BLOCK = loader.source_define("measure_plan.cu", "QQ_PLAN_BLOCK")
PLAN_MAX_BLOCKS = loader.source_define("measure_plan.cu", "QQ_PLAN_MAX_BLOCKS")
PLAN_PLANES = loader.source_define("measure_plan.cu", "QQ_PLAN_PLANES")
PLAN_BLOCK_WORDS = 8  # words of a slice row a plan block owns at least (fewer blocks: fewer arrivals a barrier)
# measure_window_plan takes at most this share of the multiprocessors by default: each step's grid
# barrier waits on every block, and fewer blocks with a few more words each were faster (H100, the
# paper's circuits, the plan's device time a run at 132 / 112 / 104 / 96 blocks: 34.0 / 30.3 / 30.4 /
# 31.6 ms at 100k qubits, 76.0 / 68.9 / 68.9 / 66.4 ms at 180k; docs/benchmarks-collapse.md, run 17)
PLAN_SM_SHARE = 0.8
ROWS_PLAN_BLOCK = loader.source_define("measure_rows.cu", "QQ_ROWS_PLAN_BLOCK")
# Rows of at most this many words take the one-block plan (measure_rows_plan): on an H100 it took
# 17 us a window at n = 5k (3 collapses; measure_window_plan 31 us), the same at 10k (7 collapses,
# 35 us), and 153 us against 91 us at 30k (21 collapses); with its slice in shared memory since,
# 11.7 us at 5k and 21 us at 10k. docs/benchmarks-collapse.md.
PLAN_ONE_BLOCK_MAX_W = 160
ROWS_MAX_PER_BLOCK = loader.source_define("measure_rows.cu", "QQ_ROWS_MAX_PER_BLOCK")
PLAN_FIELDS = loader.source_define("measure_rows.cu", "QQ_PLAN_FIELDS")
ROW_MAX_WARPS = loader.source_define("measure_rows.cu", "QQ_ROW_MAX_WARPS")
ONE_WARP_WORDS = 512  # rows of at most this many words take one warp each (measured on an H100)
ROWS_FOLD_WARPS = loader.source_define("measure_rows.cu", "QQ_ROWS_FOLD_WARPS")
ROWS_FOLD_UNITS = loader.source_define("measure_rows.cu", "QQ_ROWS_FOLD_UNITS")
# measure_rows_apply_gates holds a unit's (up to) four rows in 8 * W words of shared memory, and the
# window's victim masks, k * W words, a block: up to 160 words a row (n <= 10240) and 4096 words of
# masks leave several blocks a multiprocessor; other windows keep two kernels.
ROWS_FOLD_MAX_W = 160
ROWS_FOLD_MAX_MASK_WORDS = 4096
LOWRANK_CHUNK = loader.source_define("measure_lowrank.cu", "QQ_LR_CHUNK")
LOWRANK_WORDS = loader.source_define("measure_lowrank.cu", "QQ_LR_WORDS")
# chunks of more than this many collapses take the kernels of three words of alpha (lowrank_*_wide)
LOWRANK_NARROW = loader.source_define("measure_lowrank.cu", "QQ_LR_NARROW")
LOWRANK_PREP_BLOCK = loader.source_define("measure_lowrank.cu", "QQ_LR_PREP_BLOCK")
LOWRANK_COUNT_BLOCK = loader.source_define("measure_lowrank.cu", "QQ_LR_COUNT_BLOCK")
LOWRANK_COUNT_ROWS = loader.source_define("measure_lowrank.cu", "QQ_LR_COUNT_ROWS")
LOWRANK_COUNT_SMEM = loader.source_define("measure_lowrank.cu", "QQ_LR_COUNT_SMEM")
# lowrank_counts_<C> by the most collapses C of a chunk it takes: a chunk takes the smallest that holds it
LOWRANK_COUNTS = {16: "lowrank_counts_16", 32: "lowrank_counts_32", 48: "lowrank_counts_48", 64: "lowrank_counts_64",
                  80: "lowrank_counts_80", 96: "lowrank_counts_96", 112: "lowrank_counts_112",
                  128: "lowrank_counts_128", 144: "lowrank_counts_144", 160: "lowrank_counts_160"}
# lowrank_counts' 16-byte copies may read this far past the end of X, Z (X2, Z2) and the victim masks
LOWRANK_TAIL_BYTES = 8 * loader.source_define("measure_lowrank.cu", "QQ_LR_TAIL_WORDS")
LOWRANK_APPLY_BLOCK = loader.source_define("measure_lowrank.cu", "QQ_LR_APPLY_BLOCK")
LOWRANK_TILE = loader.source_define("measure_lowrank.cu", "QQ_LR_TILE")
LOWRANK_GROUP_BITS = loader.source_define("measure_lowrank.cu", "QQ_LR_GROUP_BITS")
LOWRANK_XCH_WORDS = loader.source_define("measure_lowrank.cu", "QQ_LR_XCH_WORDS")  # a warp's words, gates folded in
LOWRANK_SIGNS_BLOCK = loader.source_define("measure_lowrank.cu", "QQ_LR_SIGNS_BLOCK")
LOWRANK_GROUPS_BLOCK = loader.source_define("measure_lowrank.cu", "QQ_LR_GROUPS_BLOCK")
LOWRANK_META_FIELDS = loader.source_define("measure_lowrank.cu", "QQ_LR_META_FIELDS")
LOWRANK_VT_TILE_BYTES = loader.source_define("measure_lowrank.cu", "QQ_LR_VT_TILE_BYTES")
LOWRANK_REDUCE_BLOCK = loader.source_define("measure_lowrank.cu", "QQ_LR_REDUCE_BLOCK")
LOWRANK_AHEAD_BLOCK = loader.source_define("measure_lowrank.cu", "QQ_LR_AHEAD_BLOCK")
# Below this many collapses a window costs the rows path less than the low-rank update's two passes
# (H100, docs/benchmarks-collapse.md, with the gate windows folded into both: random Clifford depth
# 100, 30k qubits 103.7 ms with 16, 96.9 ms with 8 or 4; 10k 18.0, 17.9, 17.7 ms, the last
# bound by the host's launches; 5k, 3 collapses a window, 5.9 ms with 8, 6.5 ms with 4).
LOWRANK_MIN_COLLAPSES = 8


class Fold(NamedTuple):
    """The gate window [start, end) that a collapse window takes into its pass over the rows (`path`,
    "lowrank" or "rows"): its two-qubit gates, and for the rows path the device list of the qubits it
    leaves idle."""

    path: str
    start: int
    end: int
    pairs: int
    idle: int = 0
    idle_count: int = 0


class Fuse(NamedTuple):
    """The collapse window [start, end) (loop context ctx, a device address) after a folded gate
    window, whose pass 1 the pass before it takes (`fuse_pass`)."""

    start: int
    end: int
    ctx: int


def rows_per_block(smem_optin: int, W: int) -> int:
    """Rows a block of measure_rows_apply holds in shared memory (0: a row does not fit)."""
    return max(0, min(ROWS_MAX_PER_BLOCK, (smem_optin // 8 - W) // (2 * W)))


def window_path(engine, n: int, W: int, ins: np.ndarray, cstart: int, cend: int) -> str:
    """"block", "lowrank", "rows" or "transpose": how collapses [cstart, cend) of a window run."""
    if engine.block_windows and W <= BLOCK_MAX_W:
        return "block"
    count = cend - cstart
    if count <= batched_width(n) and _batchable(engine, W, ins, cstart, cend):
        return "lowrank" if lowrank_on(engine) and count >= max(2, engine.lowrank_min) else "rows"
    return "transpose"


# Static shared memory the low-rank pass-2 kernels may add to their dynamic share (3.3 KiB at
# QQ_LR_CHUNK 160, nvcc 13.0 for sm_90)
LOWRANK_STATIC_SHARED = 4096


def lowrank_shared_bytes() -> int:
    """The most shared memory a block of the low-rank kernels asks for: the fused pass on two full
    chunks, and its static share."""
    return fused_shared_bytes(LOWRANK_CHUNK, LOWRANK_CHUNK) + LOWRANK_STATIC_SHARED


def fused_shared_bytes(kc: int, kc2: int) -> int:
    """lowrank_apply_gates_counts' dynamic shared memory for a chunk of kc collapses and a next
    chunk of kc2: pass 2's tables, two groups' exchange words a warp, the next chunk's A fragments
    on the tile."""
    return (_tables_bytes(kc) + 8 * 2 * LOWRANK_XCH_WORDS * (LOWRANK_APPLY_BLOCK // 32)
            + LOWRANK_VT_TILE_BYTES * -(-kc2 // 16))


def lowrank_on(engine) -> bool:
    """Whether windows may take the low-rank update: asked for (`engine.lowrank_windows`) and its
    kernels' shared memory fits a block on this device (227 KiB on an H100 or H200; a GPU with less,
    such as an A100's 164 KiB, keeps the rows path, which asks for a few rows' worth)."""
    return engine.lowrank_windows and engine.smem_optin >= lowrank_shared_bytes()


def _batchable(engine, W: int, ins: np.ndarray, cstart: int, cend: int) -> bool:
    """Whether collapses [cstart, cend) may take a plan and a pass over the rows (the rows and
    low-rank paths): batching on, no classically controlled collapse, a row fits a block."""
    return (engine.batch_windows and rows_per_block(engine.smem_optin, W) >= 1
            and not (ins[cstart:cend, COND] >= 0).any())


def wide_lowrank(engine, n: int, W: int, ins: np.ndarray, cstart: int, cend: int, randoms: int) -> bool:
    """Whether a window past the batched paths' width (`window_path` gave it the transposed path, or
    the one block), whose scan found `randoms` collapses that may be random, takes the low-rank
    update after all, in consecutive pieces of at most `batched_width(n)` collapses (`wide_pieces`).
    The transposed path launches two kernels and makes a pass over the tableau per random collapse,
    the one block runs them one after the other on one multiprocessor; a piece takes a plan and a
    low-rank chunk, five launches and two passes, random or not. So a window of mostly
    deterministic collapses (a QEC round after the first) stays, and one of many random ones (a
    distance-51 surface code's first round and final data measurement: 3,900 random collapses on
    5,354 qubits, 7,800 launches; distance 25's 300 a window, 7 ms in one block) goes low-rank.
    `engine.wide_lowrank = False` keeps every such window per collapse (in one block)."""
    if not (engine.wide_lowrank and lowrank_on(engine)):
        return False
    pieces = -(-(cend - cstart) // batched_width(n))
    return randoms >= max(engine.lowrank_min, 2 * pieces) and _batchable(engine, W, ins, cstart, cend)


def wide_pieces(n: int, cstart: int, cend: int):
    """The consecutive pieces [start, end) a wide window takes the low-rank path in (`wide_lowrank`):
    as few as `batched_width(n)` allows, their widths equal within one."""
    count = cend - cstart
    pieces = -(-count // batched_width(n))
    cuts = [cstart + count * i // pieces for i in range(pieces + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def batched_width(n: int) -> int:
    """The most collapses a window may have for the rows and low-rank paths to take it from the
    start (`window_path`; wider ones only after their scan, `wide_lowrank`)."""
    return max(64, n // 64)


def plan_blocks(engine, W: int) -> int:
    """measure_window_plan's blocks, 0 for the one-block measure_rows_plan (rows of at most
    PLAN_ONE_BLOCK_MAX_W words): one a multiprocessor at most (its grid barrier needs them all
    resident at once), by default at most PLAN_SM_SHARE of them, each at least PLAN_BLOCK_WORDS words
    of a slice row. `engine.plan_blocks` sets the count, 0 included (tests: results do not depend on it)."""
    want = engine.plan_blocks
    if want is None:
        share = max(1, int(PLAN_SM_SHARE * engine.sm_count))
        want = 0 if W <= PLAN_ONE_BLOCK_MAX_W else min(-(-W // PLAN_BLOCK_WORDS), share)
    return 0 if want == 0 else max(1, min(want, W, engine.sm_count, PLAN_MAX_BLOCKS))


def plan_published_words(max_collapses: int) -> int:
    """measure_window_plan's published words (u32): two steps of, per block, a candidate and four
    bit planes of the window's rows (measure_plan.cu, QQPlanPub)."""
    return 2 * PLAN_MAX_BLOCKS * (1 + 4 * -(-max(1, max_collapses) // 32))


def plan_shared_bytes(W: int, blocks: int, k: int, slice_in_smem: bool) -> int:
    """measure_window_plan's dynamic shared memory (measure_plan.cu, in its order): V_i's words, the
    block's columns of the slice when they fit, the collapses' qubits and record indices, bit planes."""
    cols = -(-W // blocks)
    return 8 * cols + (16 * k * cols if slice_in_smem else 0) + 8 * k + 4 * PLAN_PLANES * -(-k // 32)


def _plan(engine, ws, T, ctx, cstart, cend, X, Z, k0, k1, rep, ref_flag, side=None) -> None:
    """The window's records and decisions, from the measured qubits' rows (measure_window_plan, or
    measure_rows_plan on small tableaux); side: those rows made ahead, (X, Z, S) of k rows
    (measure_window_plan only)."""
    W, k, blocks = ws.W, cend - cstart, plan_blocks(engine, ws.W)
    S = ws.S if side is None else side[2]
    if side is not None:
        X, Z = side[0], side[1]
        assert blocks > 0, "rows made ahead take measure_window_plan"
    if blocks == 0:
        smem = 16 * k * W + 4 * k  # the slice and its signs
        in_smem = engine.plan_slice_shared and smem <= engine.smem_optin - 1024
        engine.launcher.launch("collapse window plan", "measure_rows_plan", (1, 1), (ROWS_PLAN_BLOCK, 1, 1), T, ctx,
                               cstart, cend, int(X), int(Z), int(ws.S), int(ws.sx), int(ws.sz), int(ws.ss),
                               int(in_smem), int(ws.plan), int(ws.vrows), int(ws.active), int(ws.rec), W, k0, k1, rep,
                               ref_flag, shared_size=smem if in_smem else 0)
        return
    in_smem = engine.plan_slice_shared and plan_shared_bytes(W, blocks, k, True) <= engine.smem_optin - 1024
    engine.launcher.launch("collapse window plan", "measure_window_plan", (blocks, 1), (PLAN_BLOCK, 1, 1), T, ctx,
                           cstart, cend, int(X), int(Z), int(S), int(ws.sx), int(ws.sz), int(in_smem),
                           int(ws.plan_pub), int(ws.plan_bar), int(ws.plan), int(ws.vrows), int(ws.active),
                           int(ws.rec), W, k0, k1, rep, ref_flag, int(side is not None),
                           shared_size=plan_shared_bytes(W, blocks, k, in_smem))


def _rows_apply(engine, ws, X, Z, k, stage, per, grid, row_ids) -> None:
    """measure_rows_apply: every row (row_ids 0) or the rows listed at row_ids (one a block)."""
    W = ws.W
    smem = 8 * (2 * per + 1) * W
    warps = engine.row_warps or (1 if W <= ONE_WARP_WORDS else ROW_MAX_WARPS)
    engine.launcher.launch(stage, "measure_rows_apply", (grid, 1), (32 * warps * per, 1, 1), int(X), int(Z),
                           int(ws.S), int(ws.plan), int(ws.vrows), int(ws.active), k, ws.n, W, per, warps, row_ids,
                           shared_size=smem)


def _rows(engine, ws, T, ctx, cstart, cend, X, Z, k0, k1, rep, ref_flag, fold: Optional[Fold] = None) -> None:
    """The window in one pass over the tableau, each row through every collapse (measure_rows.cu);
    with `fold`, the gate window after it in the same pass (measure_rows_apply_gates)."""
    _plan(engine, ws, T, ctx, cstart, cend, X, Z, k0, k1, rep, ref_flag)
    if fold is not None:
        units = fold.end - fold.start + fold.idle_count
        k = cend - cstart
        engine.launcher.launch("collapse window (rows) + gates", "measure_rows_apply_gates",
                               (-(-units // ROWS_FOLD_UNITS), 1), (32 * ROWS_FOLD_WARPS, 1, 1), int(X), int(Z),
                               int(ws.S), int(ws.plan), int(ws.vrows), k, ws.n, ws.W, T, fold.start, fold.end,
                               fold.idle, fold.idle_count,
                               shared_size=8 * (8 * ROWS_FOLD_UNITS + k) * ws.W + 4 * PLAN_FIELDS * k)
        return
    per = rows_per_block(engine.smem_optin, ws.W)
    _rows_apply(engine, ws, X, Z, cend - cstart, "collapse window (rows)", per, (2 * ws.n + per - 1) // per, 0)


def lowrank_apply_shape(n: int, W: int, sm_count: int):
    """lowrank_apply's grid (tiles of columns, blocks of groups of four rows) and groups a block: as
    many as leave each multiprocessor about eight blocks (a block builds its tile's tables once for all
    its rows; a few waves keep the tail short)."""
    tiles, groups = -(-W // LOWRANK_TILE), -(-n // 2)
    want = -(-groups * tiles // (8 * sm_count))
    per = max(64, min(1024, 8 * -(-want // 8)))
    return (tiles, -(-groups // per)), per


def lowrank_part_words(n: int, W: int) -> int:
    """Words of lowrank_apply's per-tile sign shares (T mod 4) and phases (a word a tile and group)."""
    return -(-W // LOWRANK_TILE) * -(-n // 2)


def fused_count_words(n: int, W: int, max_collapses: int) -> int:
    """8-byte words of lowrank_apply_gates_counts' partial counts for next windows of up to
    max_collapses: per octet of rows (two groups of four), tile of columns and lane, 2 bits a row and
    collapse, 8 x 16 collapses a word, in planes of a word each (`pcount_planes`)."""
    groups = -(-n // 2)
    octets = -(-groups // 2)
    return -(-W // LOWRANK_TILE) * octets * 32 * pcount_planes(max_collapses)


def pcount_planes(collapses: int) -> int:
    """Planes of partial counts a next window of this many collapses fills (its first chunk's: a
    plane a word of eight tiles of 16 collapses, as qq_lr_octet_counts writes them)."""
    tiles = -(-min(max(1, collapses), LOWRANK_CHUNK) // 16)
    return -(-tiles // 8)


def foldable_gates(ins: np.ndarray, start: int, end: int) -> Optional[int]:
    """The two-qubit gates of gate window [start, end) when a collapse window's pass can take it
    (unitaries without classical control: no noise, whose coins the gate kernel draws), else None."""
    return foldable_windows(ins, [(start, end)])[start, end]


def foldable_windows(ins: np.ndarray, windows) -> dict:
    """{(start, end): `foldable_gates(ins, start, end)`} for every gate window given, each a sum
    over its rows' segment (a distance-51 surface code has 700 gate windows: one call each was
    26 ms of its first call's host work)."""
    given = {(int(s), int(e)) for s, e in windows}
    found = {w: None for w in given if w[1] <= w[0]}  # an empty window launches nothing to fold
    spans = sorted(given - found.keys())
    if not spans:
        return found
    cuts = np.array(spans, dtype=np.int64).reshape(-1)  # start, end, start, end, ...
    if (np.diff(cuts) < 0).any():  # a plan's gate windows never overlap
        raise ValueError(f"foldable_windows: overlapping gate windows among {spans[:8]}")
    lo = int(cuts[0])
    block = ins[lo:int(cuts[-1])]
    ops = block[:, OP]
    bad = ((block[:, COND] >= 0) | (opcodes.KIND[ops] != _UNITARY)).view(np.uint8)
    two = (opcodes.ARITY[ops] == 2).view(np.uint8)
    at = cuts[:-1] - lo  # every segment, windows and the gaps between them: the windows are the even ones
    unfit = (np.maximum.reduceat(bad, at)[::2] != 0).tolist()
    pairs = np.add.reduceat(two, at, dtype=np.int64)[::2].tolist()
    found.update((w, None if u else int(k)) for w, u, k in zip(spans, unfit, pairs))
    return found


def foldable_runs(schedule, windows) -> dict:
    """`foldable_windows` from the schedule's runs: a run holds one opcode, and a classically
    controlled instruction is a run of its own (a barrier), so a window that is a union of whole
    runs, as a plan's gate windows are, is read a run at a time instead of a row at a time (a
    random circuit of 10k qubits: 1,200 runs for 700k rows, whose columns cost 6 ms on the 2-core
    machine and 12-13 ms on an H100 host). Other windows go to `foldable_windows`."""
    runs, ins = schedule.runs, schedule.instructions
    given = list(dict.fromkeys((int(s), int(e)) for s, e in windows))
    if not len(runs) or not given:
        return foldable_windows(ins, given)
    starts, ends, ops = (runs[:, i].astype(np.int64) for i in range(3))
    bad = (ins[starts, COND] >= 0) | (opcodes.KIND[ops] != _UNITARY)
    two = np.where(opcodes.ARITY[ops] == 2, ends - starts, 0)
    bad_before = np.concatenate([[0], np.cumsum(bad)])
    two_before = np.concatenate([[0], np.cumsum(two)])
    spans = np.array(given, dtype=np.int64).reshape(-1, 2)
    lo = np.searchsorted(starts, spans[:, 0])
    hi = np.searchsorted(starts, spans[:, 1])
    # runs tile the rows in order, so a window from a run's start to a run's end is whole runs
    whole = (spans[:, 1] > spans[:, 0]) & np.isin(spans[:, 0], starts) & np.isin(spans[:, 1], ends)
    unfit = (bad_before[hi] - bad_before[lo]) > 0
    pairs = two_before[hi] - two_before[lo]
    found = {w: (None if u else int(k)) for w, ok, u, k in zip(given, whole.tolist(), unfit.tolist(), pairs.tolist())
             if ok}
    others = [w for w, ok in zip(given, whole.tolist()) if not ok]
    if others:
        found.update(foldable_windows(ins, others))
    return found


def _lowrank(engine, ws, T, ctx, cstart, cend, ins, X, Z, k0, k1, rep, ref_flag, fold: Optional[Fold] = None,
             counted: bool = False, ahead: Optional[Fuse] = None) -> None:
    """The window as low-rank updates of the tableau, chunks of ws.chunk collapses (measure_lowrank.cu).
    fold: the gate window that follows, folded into the last chunk's pass 2 (the caller checked that
    it may be: `can_fold`). counted: the window was decided and its first chunk's pass 1 made by the
    pass before it (`fuse_pass`), its buffers current. ahead: the collapse window after the fold,
    whose first chunk's pass 1 this window's last pass takes (`can_fuse`)."""
    launch = engine.launcher.launch
    n, W, k = ws.n, ws.W, cend - cstart
    if not counted:
        _plan(engine, ws, T, ctx, cstart, cend, X, Z, k0, k1, rep, ref_flag)
    apply_grid, per = lowrank_apply_shape(n, W, engine.sm_count)
    for c0 in range(0, k, ws.chunk):
        kc = min(ws.chunk, k - c0)
        if not counted or c0:  # a counted window's first chunk is prepared and counted already
            _prepare(engine, ws, c0, kc, k)
            counts = LOWRANK_COUNTS[min(c for c in LOWRANK_COUNTS if c >= kc)]
            launch("collapse window (low rank)", counts,
                   (-(-2 * n // LOWRANK_COUNT_ROWS), 1), (LOWRANK_COUNT_BLOCK, 1, 1), int(X), int(Z), int(ws.S),
                   int(ws.plan), int(ws.vn), int(ws.lr_meta), int(ws.lr_pcol), int(ws.lr_pivots), int(ws.lr_vp),
                   int(ws.lr_special), int(ws.active), int(ws.lr_rows), c0, kc, n, W, shared_size=LOWRANK_COUNT_SMEM)
        tables = _tables_bytes(kc)
        if fold is not None and c0 + ws.chunk >= k:
            gstart, gend, pairs = fold.start, fold.end, fold.pairs
            halves = n - 2 * pairs
            before = ws.group_counts
            stage = "collapse window (low rank) + gates"
            launch(stage, "lowrank_gate_groups", (-(-(gend - gstart) // LOWRANK_GROUPS_BLOCK), 1),
                   (LOWRANK_GROUPS_BLOCK, 1, 1), T, gstart, gend, int(ws.gpairs), int(ws.ghalves), int(ws.gcnt),
                   before[0], before[1], int(ws.gmark), int(ws.gate_of), int(ws.gdesc), pairs)
            launch(stage, "lowrank_idle_groups", (-(-n // LOWRANK_GROUPS_BLOCK), 1), (LOWRANK_GROUPS_BLOCK, 1, 1), n,
                   int(ws.ghalves), int(ws.gcnt), before[1], int(ws.gmark), int(ws.gdesc), pairs)
            ws.group_counts = (before[0] + pairs, before[1] + halves)
            if ahead is not None:
                fuse_pass(engine, ws, T, X, Z, kc, fold, ahead, k0, k1, rep, ref_flag)
                continue
            launch(stage, "lowrank_apply_gates_wide" if kc > LOWRANK_NARROW else "lowrank_apply_gates", apply_grid,
                   (LOWRANK_APPLY_BLOCK, 1, 1), int(X), int(Z), int(ws.vn), int(ws.lr_rows), int(ws.lr_meta),
                   int(ws.lr_pivots), int(ws.active), int(ws.gdesc), pairs, halves, int(ws.lr_part), kc, n, W, per,
                   shared_size=tables + 8 * LOWRANK_XCH_WORDS * (LOWRANK_APPLY_BLOCK // 32))
            _signs(engine, stage, ws, ws.window, T, fold)
        else:
            launch("collapse window (low rank)", "lowrank_apply_wide" if kc > LOWRANK_NARROW else "lowrank_apply",
                   apply_grid, (LOWRANK_APPLY_BLOCK, 1, 1), int(X), int(Z), int(ws.vn), int(ws.lr_rows),
                   int(ws.lr_meta), int(ws.lr_pivots), int(ws.active), int(ws.lr_part), kc, n, W, per,
                   shared_size=tables)
            _signs(engine, "collapse window (low rank)", ws, ws.window, T, None)
    special = 2 * int(np.count_nonzero(ins[cstart:cend, OP] != _M))
    if special:  # rows whose sign a reset clears mid-window: one collapse after the other
        assert fold is None
        _rows_apply(engine, ws, X, Z, k, "collapse window (low rank)", 1, special, int(ws.lr_special))


def _tables_bytes(kc: int) -> int:
    """Pass 2's tables for a chunk of kc collapses (qq_lr_lookup_groups): groups of
    LOWRANK_GROUP_BITS consecutive collapses, an even number of them (the lookups go in pairs),
    2^LOWRANK_GROUP_BITS entries a group, a word of the tile each."""
    groups = -(-kc // LOWRANK_GROUP_BITS)
    return 8 * (1 << LOWRANK_GROUP_BITS) * LOWRANK_TILE * (groups + (groups & 1))


def _signs(engine, stage: str, ws, window, T, fold: Optional[Fold]) -> None:
    """lowrank_signs: the signs after the pass 2 of `window`'s chunk (its buffers), and after the
    gates of `fold` where they were folded in."""
    n = ws.n
    groups = -(-n // 2)
    pairs = fold.pairs if fold is not None else 0
    gates = (T, int(ws.gpairs), int(ws.ghalves), pairs, n - 2 * pairs) if fold is not None else (0, 0, 0, 0, 0)
    engine.launcher.launch(stage, "lowrank_signs", (-(-groups // LOWRANK_SIGNS_BLOCK), 1),
                           (LOWRANK_SIGNS_BLOCK, 1, 1), int(ws.S), int(window.meta), int(window.active), *gates,
                           int(ws.lr_part), n, ws.W)


def _prepare(engine, ws, c0: int, kc: int, k: int) -> None:
    """lowrank_prepare: chunk [c0, c0 + kc) of a window of k collapses, into the current buffers."""
    W = ws.W
    prep_words = max(8, -(-W // (2 * engine.sm_count)))  # words a block
    engine.launcher.launch("collapse window (low rank)", "lowrank_prepare", (-(-W // prep_words), 1),
                           (LOWRANK_PREP_BLOCK, 1, 1), int(ws.plan), int(ws.vrows), c0, kc, k, ws.n, W, prep_words,
                           int(ws.vn), int(ws.lr_meta), int(ws.lr_pcol), int(ws.lr_pivots), int(ws.lr_vp),
                           int(ws.lr_special), int(ws.lr_span))


def can_fuse(engine, paths: dict, W: int, a: int, actions, fold: Optional[Fold]) -> bool:
    """Whether collapse window `a`'s last pass (the gate window after it folded in: `fold`) may also
    take the pass 1 of collapse window a + 2's first chunk (`fuse_pass`): that window takes the
    low-rank path, and its plan may read rows made ahead (measure_window_plan: `plan_blocks`). A
    window of more than one chunk makes its later chunks' passes 1 itself (the paper's circuit at
    180k qubits: 10 of its 110 windows hold 129-134 collapses)."""
    if not engine.fuse_windows or fold is None or fold.path != "lowrank" or a + 2 >= len(actions):
        return False
    kind, start, end, _ = actions[a + 2]
    return kind == "C" and paths.get(a + 2) == "lowrank" and plan_blocks(engine, W) > 0


def fuse_pass(engine, ws, T, X, Z, kc: int, fold: Fold, nxt: Fuse, k0, k1, rep, ref_flag) -> None:
    """The current window's last pass 2 with the folded gate window, and the pass 1 of the next
    collapse window's first chunk, in one pass over the rows (lowrank_apply_gates_counts). The next
    window is decided first, on its measured rows made ahead (lowrank_ahead: those rows after this
    window's update and the gates), then its first chunk prepared; after the pass lowrank_signs
    makes this window's signs and lowrank_reduce the next one's phase. The next window's buffers are
    current afterwards: the caller runs it `counted`. Every row is read and written once a layer
    where two passes read it before (docs/benchmarks-collapse.md)."""
    launch = engine.launcher.launch
    n, W = ws.n, ws.W
    fused = ws.fused
    k2 = nxt.end - nxt.start
    kc2 = min(k2, ws.chunk)  # the first chunk's collapses: those the pass counts
    pairs = fold.pairs
    halves = n - 2 * pairs
    stage = "collapse window (low rank, fused)"
    cur = ws.window
    ws.swap_windows()  # the next window's buffers: its plan and chunk go there
    launch(stage, "lowrank_ahead", (k2, 1), (LOWRANK_AHEAD_BLOCK, 1, 1), int(X), int(Z), int(ws.S), int(cur.vn),
           int(ws.lr_rows), int(cur.meta), int(cur.pivots), int(cur.active), kc, T, int(ws.gate_of), fold.start,
           fold.end, nxt.start, n, W, int(fused.ax), int(fused.az), int(fused.as_))
    _plan(engine, ws, T, nxt.ctx, nxt.start, nxt.end, X, Z, k0, k1, rep, ref_flag,
          side=(fused.ax, fused.az, fused.as_))
    _prepare(engine, ws, 0, kc2, k2)
    apply_grid, per = lowrank_apply_shape(n, W, engine.sm_count)
    # the kernel of this chunk's words of alpha (_wide past LOWRANK_NARROW) and the next chunk's (_to_wide)
    kernel = {(False, False): "lowrank_apply_gates_counts", (True, False): "lowrank_apply_gates_counts_wide",
              (False, True): "lowrank_apply_gates_counts_to_wide",
              (True, True): "lowrank_apply_gates_counts_wide_to_wide"}[kc > LOWRANK_NARROW, kc2 > LOWRANK_NARROW]
    launch(stage, kernel, apply_grid, (LOWRANK_APPLY_BLOCK, 1, 1), int(X), int(Z), int(cur.vn), int(ws.lr_rows),
           int(cur.meta), int(cur.pivots), int(cur.active), int(ws.gdesc), pairs, halves, int(ws.lr_part), kc, n, W,
           per, int(ws.vn), int(ws.lr_meta), int(ws.lr_pivots), int(ws.active), kc2, int(fused.pcounts),
           int(fused.pbits), shared_size=fused_shared_bytes(kc, kc2))
    _signs(engine, stage, ws, cur, T, fold)
    groups = -(-n // 2)
    octets = -(-groups // 2)  # octets of rows: two groups of four
    launch(stage, "lowrank_reduce_wide" if kc2 > LOWRANK_NARROW else "lowrank_reduce",
           (-(-octets // (4 * LOWRANK_REDUCE_BLOCK // 32)), 1), (LOWRANK_REDUCE_BLOCK, 1, 1),
           int(ws.S), int(ws.plan), int(ws.lr_meta), int(ws.lr_pcol), int(ws.lr_vp), int(ws.lr_special),
           int(ws.active), int(ws.gpairs), int(ws.ghalves), pairs, halves, int(fused.pcounts), int(fused.pbits),
           int(ws.lr_rows), kc2, n, -(-W // LOWRANK_TILE))


def can_fold(engine, path: str, W: int, ins: np.ndarray, cstart: int, cend: int) -> bool:
    """Whether collapse window [cstart, cend), which takes `path` (`window_path`), may take a
    foldable gate window after it into its pass over the rows: on the low-rank path when it holds
    only measurements (a reset's rows are replayed after pass 2), on the rows path when a unit's rows
    and the window's victim masks fit shared memory (ROWS_FOLD_MAX_W, ROWS_FOLD_MAX_MASK_WORDS)."""
    if not engine.fold_gates:
        return False
    if path == "lowrank":
        return bool((ins[cstart:cend, OP] == _M).all())
    return path == "rows" and W <= ROWS_FOLD_MAX_W and (cend - cstart) * W <= ROWS_FOLD_MAX_MASK_WORDS


def elimination_seg_shift(sm_count: int, n: int) -> int:
    """Threads per row in measure_eliminate (2^seg_shift): enough rows x segments to fill the device."""
    want = max(1, (sm_count * 2048) // max(1, 2 * n))
    return min(ELIM_MAX_SEG_SHIFT, max(0, (want - 1).bit_length()))


def collapse_window(engine, ws, T, ctx, cstart, cend, ins, X, Z, X2, Z2, k0, k1, rep, ref_flag, path: str,
                    fold: Optional[Fold] = None, counted: bool = False, ahead: Optional[Fuse] = None):
    """Collapses [cstart, cend) of one window by `path` (`window_path`); returns the buffers (X, Z,
    X2, Z2), gate layout first. fold: the next gate window, when the caller found it may be folded
    into this one (`can_fold`). counted / ahead (low rank only): the window was decided by the pass
    before it / its last pass takes the next collapse window's pass 1 (`fuse_pass`)."""
    launch = engine.launcher.launch
    n, W = ws.n, ws.W
    if path == "lowrank":
        _lowrank(engine, ws, T, ctx, cstart, cend, ins, X, Z, k0, k1, rep, ref_flag, fold, counted, ahead)
        return X, Z, X2, Z2
    assert not counted and ahead is None
    if path == "rows":
        _rows(engine, ws, T, ctx, cstart, cend, X, Z, k0, k1, rep, ref_flag, fold)
        return X, Z, X2, Z2
    assert fold is None
    rows = 2 * n
    count = cend - cstart
    if path == "block":  # small tableau: the whole window in one launch
        # A window past the batched paths' width runs its random collapses one after the other in
        # that block (d = 25: 300 a window, 7 ms); where its scan finds many, the low-rank pieces instead.
        if (count > batched_width(n) and W >= BLOCK_SCAN_MIN_W and engine.wide_lowrank
                and _batchable(engine, W, ins, cstart, cend)):
            randoms = int(np.count_nonzero(_scan(engine, ws, T, ctx, cstart, cend, X, W) == 1))
            if randoms and _wide_pieces(engine, ws, T, ctx, cstart, cend, ins, X, Z, k0, k1, rep, ref_flag, randoms):
                return X, Z, X2, Z2
        launch("collapse window (one block)", "measure_window_block", (1, 1), (WINDOW_BLOCK, 1, 1),
               T, ctx, cstart, cend, int(X), int(Z), int(ws.S), int(ws.rec), W, k0, k1, rep, ref_flag)
        return X, Z, X2, Z2
    sync = engine.window_sync
    if sync is None:
        # Read the window's random/deterministic flags back when that saves launches: big
        # windows (QEC rounds: mostly deterministic) or a tableau so big that skipping the
        # transposes of an all-deterministic window outweighs one round trip.
        sync = count > SYNC_WINDOW or 2 * rows * W * 8 > (1 << 30)
    if sync:
        flags = _scan(engine, ws, T, ctx, cstart, cend, X, W)
        randoms = np.flatnonzero(flags == 1)
        det_reset = (flags == 0) & (ins[cstart:cend, OP] != _M)
    else:  # no host read: every collapse goes through measure_pivot, which settles it
        randoms = np.arange(count)
        det_reset = np.zeros(count, dtype=bool)

    def clear_resets(lo, hi):
        if det_reset[lo - cstart : hi - cstart].any():
            _pivot(launch, ws, T, ctx, -1, lo, hi, cstart, X, Z, k0, k1, rep, ref_flag)

    if len(randoms) == 0:
        clear_resets(cstart, cend)
        return X, Z, X2, Z2
    if sync and _wide_pieces(engine, ws, T, ctx, cstart, cend, ins, X, Z, k0, k1, rep, ref_flag, len(randoms)):
        return X, Z, X2, Z2
    _transpose(launch, X, X2, Z, Z2, rows, W)  # gate layout -> word-major
    X, Z, X2, Z2 = X2, Z2, X, Z
    prev = cstart
    seg_shift = ws.seg_shift
    elim_grid = ((rows + (ELIM_BLOCK >> seg_shift) - 1) // (ELIM_BLOCK >> seg_shift), 1)
    for j in randoms:
        i = cstart + int(j)
        _pivot(launch, ws, T, ctx, i, prev if sync else i, i, cstart, X, Z, k0, k1, rep, ref_flag)
        launch("elimination", "measure_eliminate", elim_grid, (ELIM_BLOCK, 1, 1), int(X), int(Z), int(ws.S),
               int(ws.ms), int(ws.vw), int(ws.vmask), n, seg_shift)
        prev = i + 1
    _transpose(launch, X, X2, Z, Z2, W, rows)  # word-major -> gate layout
    X, Z, X2, Z2 = X2, Z2, X, Z
    if prev < cend:
        clear_resets(prev, cend)
    return X, Z, X2, Z2


def _wide_pieces(engine, ws, T, ctx, cstart, cend, ins, X, Z, k0, k1, rep, ref_flag, randoms: int) -> bool:
    """A wide window whose scan found `randoms` possibly random collapses: where `wide_lowrank`
    says so, run it as the low-rank path's pieces and return True. Pieces the low-rank path takes
    from the start (one plan of a whole wide window grows as k^2 W in one block, d = 51: 168 ms,
    or costs a grid step a collapse spread, 36 ms), of equal widths within one, so none is narrower
    than half of batched_width(n)."""
    if not wide_lowrank(engine, ws.n, ws.W, ins, cstart, cend, randoms):
        return False
    for start, end in wide_pieces(ws.n, cstart, cend):
        _lowrank(engine, ws, T, ctx, start, end, ins, X, Z, k0, k1, rep, ref_flag)
    return True


def _scan(engine, ws, T, ctx, cstart: int, cend: int, X, W: int) -> np.ndarray:
    """The window's flags from measure_window_scan (1: the collapse may be random; deterministic
    outcomes are recorded), read back to the host: the window's one host read."""
    count = cend - cstart
    engine.launcher.launch("pivot search + compaction", "measure_window_scan",
                           ((count * 32 + SCAN_BLOCK - 1) // SCAN_BLOCK, 1), (SCAN_BLOCK, 1, 1), T, ctx, cstart, cend,
                           int(X), int(ws.S), int(ws.rec), int(ws.flags), W)
    flags = ws.host_flags[:count]
    engine.cuda.memcpy_dtoh(flags, ws.flags)
    return flags


def _pivot(launch, ws, T, ctx, i, pend_start, pend_end, cstart, X, Z, k0, k1, rep, ref_flag):
    launch("pivot search + compaction", "measure_pivot", (1, 1), (PIVOT_BLOCK, 1, 1), T, ctx, i, pend_start, pend_end,
           int(ws.flags), cstart, int(X), int(Z), int(ws.S), int(ws.rec), int(ws.ms), int(ws.vw), int(ws.vmask),
           ws.W, k0, k1, rep, ref_flag)


def _transpose(launch, src_x, dst_x, src_z, dst_z, rows, cols):
    grid = ((cols + TILE - 1) // TILE, (rows + TILE - 1) // TILE, 2)
    launch("transpose", "transpose_words", grid, (TILE, TILE_ROWS, 1), int(src_x), int(dst_x), int(src_z),
           int(dst_z), rows, cols)
