"""Tableau mode's collapse windows: Z measurements and resets of one window (paper Algs. 4-8).

Kernels driven, per window ('C' action of the plan), one of four equivalent paths
(docs/engine-semantics.md, "Z measurement of qubit q"), chosen by `window_path`:

- rows (`batch_windows`, the default, for windows of up to max(64, n/64) collapses without
  classical control): measure_rows_plan decides the whole window on the measured qubits' rows
  alone, then measure_rows_apply takes every row of the tableau through all of the window's
  collapses in shared memory (measure_rows.cu): one read and one write of the tableau a window,
  no transposes, so no second tableau buffer either.
- one block (`block_windows` and W <= BLOCK_MAX_W words a row, n <= 4096): measure_window_block
  (measure_block.cu: Algs. 5, 7 and 8 for the whole window in gate layout), one launch a window.
- with the window's host read: measure_window_scan (measure_scan.cu, Alg. 5 for every collapse at
  once: deterministic outcomes written there) and one small read of its flags; then, only if some
  collapse is random, transpose_words (transpose.cu, Alg. 4) to word-major and for each random
  collapse i, in program order, measure_pivot (measure_pivot.cu: Alg. 5 re-check + Alg. 6
  compaction, coin and the H / H_YZ and X decisions) -> measure_eliminate (measure_eliminate.cu:
  Alg. 7 with Alg. 8 fused); pivot, coin and decisions never visit the host. Then transpose back.
- without it: the same pivot -> eliminate pair for every collapse, measure_pivot settling the
  deterministic ones itself, in program order.

Deterministic resets keep their program order: measure_pivot clears those between the previous
random collapse and its own, and a launch with i < 0 clears the window's tail.
"""

from __future__ import annotations

import numpy as np

from ...core import opcodes
from ...core.program import COND, OP
from . import loader

_M = opcodes.CODE["M"]

SCAN_BLOCK = loader.source_define("measure_scan.cu", "QQ_SCAN_BLOCK")  # one warp per collapse
PIVOT_BLOCK = loader.source_define("measure_pivot.cu", "QQ_PIVOT_BLOCK")
ELIM_BLOCK = loader.source_define("measure_eliminate.cu", "QQ_ELIM_BLOCK")
ELIM_MAX_SEG_SHIFT = loader.source_define("measure_eliminate.cu", "QQ_ELIM_MAX_SEG_SHIFT")
WINDOW_BLOCK = loader.source_define("measure_block.cu", "QQ_WINDOW_BLOCK")
BLOCK_MAX_W = loader.source_define("measure_block.cu", "QQ_BLOCK_MAX_W")  # words a row: n <= 4096
TILE = loader.source_define("transpose.cu", "QQ_TILE")
TILE_ROWS = loader.source_define("transpose.cu", "QQ_TILE_ROWS")
SYNC_WINDOW = 16  # collapses in a window above which its flags are read back
PLAN_BLOCK = loader.source_define("measure_rows.cu", "QQ_PLAN_BLOCK")
ROWS_MAX_PER_BLOCK = loader.source_define("measure_rows.cu", "QQ_ROWS_MAX_PER_BLOCK")
PLAN_FIELDS = loader.source_define("measure_rows.cu", "QQ_PLAN_FIELDS")
ROW_MAX_WARPS = loader.source_define("measure_rows.cu", "QQ_ROW_MAX_WARPS")
ONE_WARP_WORDS = 512  # rows of at most this many words take one warp each (measured on an H100)


def rows_per_block(smem_optin: int, W: int) -> int:
    """Rows a block of measure_rows_apply holds in shared memory (0: a row does not fit)."""
    return max(0, min(ROWS_MAX_PER_BLOCK, (smem_optin // 8 - W) // (2 * W)))


def window_path(engine, n: int, W: int, ins: np.ndarray, cstart: int, cend: int) -> str:
    """"block", "rows" or "transpose": how collapses [cstart, cend) of a window run."""
    if engine.block_windows and W <= BLOCK_MAX_W:
        return "block"
    count = cend - cstart
    if (engine.batch_windows and count <= max(64, n // 64) and not (ins[cstart:cend, COND] >= 0).any()
            and rows_per_block(engine.smem_optin, W) >= 1):
        return "rows"
    return "transpose"


def _rows(engine, ws, T, ctx, cstart, cend, X, Z, k0, k1, rep, ref_flag) -> None:
    """The window in one pass over the tableau (measure_rows.cu)."""
    cuda, launch = engine.cuda, engine.launcher.launch
    n, W, k = ws.n, ws.W, cend - cstart
    launch("collapse window plan", "measure_rows_plan", (1, 1), (PLAN_BLOCK, 1, 1), T, ctx, cstart, cend, int(X), int(Z),
           int(ws.S), int(ws.sx), int(ws.sz), int(ws.ss), int(ws.plan), int(ws.vrows), int(ws.active), int(ws.rec),
           W, k0, k1, rep, ref_flag)
    per = rows_per_block(engine.smem_optin, W)
    smem = 8 * (2 * per + 1) * W
    name = "measure_rows_apply"
    if smem > engine.launcher.shared_set.get(name, 48 * 1024):
        engine.launcher.functions[name].set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
        engine.launcher.shared_set[name] = smem
    warps = engine.row_warps or (1 if W <= ONE_WARP_WORDS else ROW_MAX_WARPS)
    launch("collapse window (rows)", name, ((2 * n + per - 1) // per, 1), (32 * warps * per, 1, 1), int(X), int(Z),
           int(ws.S), int(ws.plan), int(ws.vrows), int(ws.active), k, n, W, per, warps, shared_size=smem)


def elimination_seg_shift(sm_count: int, n: int) -> int:
    """Threads per row in measure_eliminate (2^seg_shift): enough rows x segments to fill the device."""
    want = max(1, (sm_count * 2048) // max(1, 2 * n))
    return min(ELIM_MAX_SEG_SHIFT, max(0, (want - 1).bit_length()))


def collapse_window(engine, ws, T, ctx, cstart, cend, ins, X, Z, X2, Z2, k0, k1, rep, ref_flag):
    """Collapses [cstart, cend) of one window; returns the buffers (X, Z, X2, Z2), gate layout first."""
    cuda, launch = engine.cuda, engine.launcher.launch
    n, W = ws.n, ws.W
    path = window_path(engine, n, W, ins, cstart, cend)
    if path == "rows":
        _rows(engine, ws, T, ctx, cstart, cend, X, Z, k0, k1, rep, ref_flag)
        return X, Z, X2, Z2
    if path == "block":  # small tableau: the whole window in one launch
        launch("collapse window (one block)", "measure_window_block", (1, 1), (WINDOW_BLOCK, 1, 1),
               T, ctx, cstart, cend, int(X), int(Z), int(ws.S), int(ws.rec), W, k0, k1, rep, ref_flag)
        return X, Z, X2, Z2
    rows = 2 * n
    count = cend - cstart
    sync = engine.window_sync
    if sync is None:
        # Read the window's random/deterministic flags back when that saves launches: big
        # windows (QEC rounds: mostly deterministic) or a tableau so big that skipping the
        # transposes of an all-deterministic window outweighs one round trip.
        sync = count > SYNC_WINDOW or 2 * rows * W * 8 > (1 << 30)
    if sync:
        launch("pivot search + compaction", "measure_window_scan", ((count * 32 + SCAN_BLOCK - 1) // SCAN_BLOCK, 1),
               (SCAN_BLOCK, 1, 1), T, ctx, cstart, cend, int(X), int(ws.S), int(ws.rec), int(ws.flags), W)
        flags = ws.host_flags[:count]
        cuda.memcpy_dtoh(flags, ws.flags)  # the window's one host read: which collapses are random
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


def _pivot(launch, ws, T, ctx, i, pend_start, pend_end, cstart, X, Z, k0, k1, rep, ref_flag):
    launch("pivot search + compaction", "measure_pivot", (1, 1), (PIVOT_BLOCK, 1, 1), T, ctx, i, pend_start, pend_end,
           int(ws.flags), cstart, int(X), int(Z), int(ws.S), int(ws.rec), int(ws.ms), int(ws.vw), int(ws.vmask),
           ws.W, k0, k1, rep, ref_flag)


def _transpose(launch, src_x, dst_x, src_z, dst_z, rows, cols):
    grid = ((cols + TILE - 1) // TILE, (rows + TILE - 1) // TILE, 2)
    launch("transpose", "transpose_words", grid, (TILE, TILE_ROWS, 1), int(src_x), int(dst_x), int(src_z),
           int(dst_z), rows, cols)
