"""The CUDA engine: tableau mode and frame mode on an NVIDIA GPU through PyCUDA.

Same contract and bits as the NumPy engine (docs/engine-semantics.md). The scheduled program is
uploaded once per (program, schedule) as `QQTables` (cuda_src/tables.cuh); every kernel reads it
from there, so a launch carries only indices.

Tableau mode keeps the inverse tableau (Stim's convention) on the device: rows 0..n-1 are
xrow[k] = T⁻¹X_kT, rows n..2n-1 zrow[k] = T⁻¹Z_kT, X / Z parts as 64-bit words, row-major ("gate
layout", X[r*W + w]) for gate windows and word-major (X[w*2n + r]) inside measurement windows.
Per window: one gate launch (gates.cu); for collapses one scan of the whole window (measure.cu,
deterministic outcomes done there) and one small read of its flags; random collapses then run
pivot -> eliminate on the device (pivot, coin and the H / X decisions never visit the host).

Frame mode runs the whole program, loops included, in one launch per chunk of shot words
(frames.cu), frames in shared memory where they fit, else in global memory.
"""

from __future__ import annotations

import atexit
import dataclasses
import sys
import weakref
from typing import Dict, List, Optional, Tuple

import numpy as np

from ... import opcodes, rng
from ...errors import OutOfMemoryError, UnsupportedOperationError
from ...program import COND, OP, Program
from ...schedule import Schedule
from ...schedule.windows import RUN_START, RUN_WINDOW
from ..base import Engine, InverseTableau, TableauRun, gib
from ..walk import walk
from . import loader

Kind = opcodes.Kind
_M, _R, _MR = opcodes.CODE["M"], opcodes.CODE["R"], opcodes.CODE["MR"]
_COLLAPSE = (Kind.MEASURE, Kind.RESET, Kind.MEASURE_RESET)

GATE_BLOCK = loader.source_define("gates.cu", "QQ_GATE_BLOCK")
PIVOT_BLOCK = loader.source_define("measure.cu", "QQ_PIVOT_BLOCK")
ELIM_BLOCK = loader.source_define("measure.cu", "QQ_ELIM_BLOCK")
WINDOW_BLOCK = loader.source_define("measure.cu", "QQ_WINDOW_BLOCK")
BLOCK_MAX_W = loader.source_define("measure.cu", "QQ_BLOCK_MAX_W")  # words a row: n <= 4096
SYNC_WINDOW = 16  # collapses in a window above which its flags are read back
FRAME_BLOCK = loader.source_define("frames.cu", "QQ_FRAME_BLOCK")
MAX_DEPTH = loader.source_define("tables.cuh", "QQ_MAX_DEPTH")
MAX_CONFUSION_BITS = loader.source_define("frames.cu", "QQ_MAX_CONFUSION_BITS")
CTX_STRIDE = 3 + MAX_DEPTH  # (record shift, random shift, depth_rec[0..MAX_DEPTH]); tables.cuh
SCAN_BLOCK = 256  # measure_window_scan: one warp per collapse
TILE = 32  # transpose.cu: QQ_TILE x QQ_TILE tiles, blockDim (32, 8)

_SIGNATURES = {
    "gates.cu": {"tableau_init": "PPPii", "tableau_gates_window": "PPiiPPPPiIIiii",
                 "tableau_confusion": "PPiPIIi"},
    "transpose.cu": {"transpose_words": "PPPPii"},
    "measure.cu": {"measure_window_scan": "PPiiPPPPi", "measure_pivot": "PPiiiPiPPPPPPPiIIii",
                   "measure_eliminate": "PPPPPPii", "measure_window_block": "PPiiPPPPiIIii"},
    "frames.cu": {"frames_program_shared": "PPPiqiiII", "frames_program_global": "PPPiqiiPII"},
}


def _pad(a: np.ndarray, dtype) -> np.ndarray:
    """Contiguous copy with at least one element (no zero-size device allocations)."""
    a = np.ascontiguousarray(np.asarray(a, dtype=dtype).reshape(-1))
    return a if a.size else np.zeros(1, dtype=dtype)


@dataclasses.dataclass
class _Plan:
    """Tableau mode's launch list for one (program, schedule): ('G'|'C'|'F', start, end, ctx)."""

    actions: List[Tuple[str, int, int, int]]
    ctx: np.ndarray  # int32 [num_ctx, CTX_STRIDE]
    max_collapses: int


class _DeviceProgram:
    """The scheduled program on the device (QQTables and the arrays it points to)."""

    def __init__(self, cuda, program: Program, schedule: Schedule):
        self.program, self.schedule = program, schedule
        self._keep = []
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
            if p <= 0:
                mode, threshold, any_threshold = 0, 0, 0
            elif p >= 1:
                mode, threshold, any_threshold = 1, 0, 0
            elif p >= rng.SPARSE_BELOW:
                mode, threshold, any_threshold = 2, rng.fixed_point(p), 0
            else:
                mode, threshold, any_threshold = 3, rng.fixed_point(p), rng._any_threshold(p)
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
            _pad(schedule.instructions, np.int32),
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
        ptrs = [self._upload(cuda, a) for a in arrays]
        counts = [len(schedule.runs), program.num_qubits, program.num_records]
        blob = np.array(ptrs + counts, dtype=np.uint64)
        self.tables = self._upload(cuda, blob)
        self.plan: Optional[_Plan] = None

    def _upload(self, cuda, a: np.ndarray) -> int:
        buf = cuda.to_device(a)
        self._keep.append(buf)
        return int(buf)


def _build_plan(program: Program, schedule: Schedule) -> _Plan:
    """Walk the schedule once (loops expanded on the host, as launches are) into window launches."""
    runs = schedule.runs
    ins = schedule.instructions
    run_of = {int(s): r for r, s in enumerate(runs[:, RUN_START])} if len(runs) else {}
    ctx_ids = {}
    ctx_rows: List[List[int]] = []
    groups: List[Tuple[int, int, List[Tuple[int, int, int]]]] = []  # (window, ctx, [(start, end, op)])
    last_run = -1
    for step in walk(program, schedule):
        r = run_of[step.start]
        depth_rec = list(step.depth_rec_shifts)
        if len(depth_rec) > MAX_DEPTH + 1:
            raise UnsupportedOperationError(f"loops nested deeper than {MAX_DEPTH}")
        key = (step.rec_shift, step.rand_shift, tuple(depth_rec))
        ctx = ctx_ids.get(key)
        if ctx is None:
            ctx = ctx_ids[key] = len(ctx_rows)
            ctx_rows.append([step.rec_shift, step.rand_shift] + depth_rec + [0] * (MAX_DEPTH + 1 - len(depth_rec)))
        window = int(runs[r, RUN_WINDOW])
        if groups and groups[-1][0] == window and groups[-1][1] == ctx and r > last_run:
            groups[-1][2].append((step.start, step.end, step.op))
        else:
            groups.append((window, ctx, [(step.start, step.end, step.op)]))
        last_run = r
    actions: List[Tuple[str, int, int, int]] = []
    max_collapses = 0
    for _, ctx, parts in groups:
        gate_lo = gate_hi = col_lo = col_hi = -1
        for start, end, op in parts:
            kind = opcodes.KIND[op]
            if kind in _COLLAPSE:
                col_lo = start if col_lo < 0 else col_lo
                col_hi = end
            elif kind == Kind.RECORD_NOISE:
                for i in range(start, end):
                    actions.append(("F", i, i + 1, ctx))
            elif kind in (Kind.UNITARY, Kind.NOISE):
                if op == opcodes.CODE["I"] and ins[start, COND] < 0:
                    continue
                gate_lo = start if gate_lo < 0 else gate_lo
                gate_hi = end
        if gate_lo >= 0:
            actions.append(("G", gate_lo, gate_hi, ctx))
        if col_lo >= 0:
            actions.append(("C", col_lo, col_hi, ctx))
            max_collapses = max(max_collapses, col_hi - col_lo)
    ctx_arr = np.array(ctx_rows, dtype=np.int32).reshape(-1, CTX_STRIDE)
    return _Plan(actions, ctx_arr, max_collapses)


class _Workspace:
    """Device buffers of tableau mode for one (n, num_records, collapses) shape, reused per shot."""

    def __init__(self, cuda, n: int, num_records: int, max_collapses: int, need_scratch: bool):
        self.n, self.num_records = n, num_records
        self.W = max(1, (n + 63) // 64)
        words = 2 * n * self.W
        alloc = lambda nbytes: cuda.mem_alloc(max(8, int(nbytes)))  # noqa: E731
        self.X, self.Z = alloc(8 * words), alloc(8 * words)
        self.X2 = alloc(8 * words) if need_scratch else None
        self.Z2 = alloc(8 * words) if need_scratch else None
        self.S = alloc(2 * n)
        self.rec = alloc(num_records)
        self.flags = alloc(4 * max(1, max_collapses))
        self.host_flags = cuda.pagelocked_empty(max(1, max_collapses), dtype=np.int32)
        self.ms = alloc(4 * 8)
        self.vw = alloc(4 * self.W)
        self.vmask = alloc(8 * self.W)
        self.max_collapses = max_collapses
        self.scratch = need_scratch

    @staticmethod
    def bytes_needed(n: int, num_records: int, need_scratch: bool) -> int:
        W = max(1, (n + 63) // 64)
        return 8 * 2 * n * W * (4 if need_scratch else 2) + 2 * n + num_records + 12 * W + 4096


class _LazyTableauRun(TableauRun):
    """A TableauRun whose inverse tableau stays on the device until it is first read (the records
    are on the host at once). The engine downloads it anyway before its next run_tableau
    overwrites the device buffers, so a late read is always right."""

    def __init__(self, records: np.ndarray, engine: "CudaEngine", generation: int):
        self.records = records
        self._engine = engine
        self._generation = generation
        self._tableau: Optional[InverseTableau] = None

    @property
    def tableau(self) -> InverseTableau:
        if self._tableau is None:
            self._tableau = self._engine._download_tableau(self._generation)
        return self._tableau

    @tableau.setter
    def tableau(self, value: InverseTableau) -> None:
        self._tableau = value


class CudaEngine(Engine):
    """Tableau and frame modes on the GPU; results identical to NumpyEngine for the same key.

    max_shot_words: frame mode processes at most this many 64-shot words per launch (None: as
    many as fit in device memory); results do not depend on it. memory_fraction: the share of
    the device's free memory the engine plans to use. frame_memory: where frame mode keeps the
    frames: "auto" (shared memory when one shot word of all qubits fits), "shared" or "global".
    window_sync: read each measurement window's deterministic / random flags back to the host
    (one small copy per window) so that only random collapses are launched and windows without
    any skip the transposes; None: for windows of more than SYNC_WINDOW collapses and for
    tableaux over 1 GiB, where that saves more than the round trip costs.
    block_windows: for tableaux of at most BLOCK_MAX_W words a row (n <= 4096), run each
    measurement window in one block (measure_window_block): one launch a window, no transposes."""

    name = "cuda"

    def __init__(self, max_shot_words: Optional[int] = None, device: int = 0, memory_fraction: float = 0.85,
                 frame_memory: str = "auto", window_sync: Optional[bool] = None, block_windows: bool = True):
        import pycuda.driver as cuda

        if frame_memory not in ("auto", "shared", "global"):
            raise ValueError(f'frame_memory must be "auto", "shared" or "global", got {frame_memory!r}')
        self.frame_memory = frame_memory
        self.window_sync = window_sync
        self.block_windows = block_windows

        self.cuda = cuda
        self.max_shot_words = max_shot_words
        self.memory_fraction = memory_fraction
        cuda.init()
        if cuda.Context.get_current() is None:
            ctx = cuda.Device(device).retain_primary_context()
            ctx.push()
            atexit.register(_pop_context, ctx)
        self.device = cuda.Context.get_device()
        attr = cuda.device_attribute
        self.sm_count = self.device.get_attribute(attr.MULTIPROCESSOR_COUNT)
        optin = getattr(attr, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", None)
        self.smem_optin = int(self.device.get_attribute(optin)) if optin is not None else 48 * 1024
        self._fn = {}
        for filename, funcs in _SIGNATURES.items():
            module = loader.load_module(filename)
            for name, sig in funcs.items():
                self._fn[name] = module.function(name, sig)
        self._smem_set = 48 * 1024
        self._programs: List[_DeviceProgram] = []
        self._ws: Optional[_Workspace] = None
        self._buffers = {}
        self._generation = 0  # counts tableau runs; a lazy result holds the one it came from
        self._pending = None  # weak reference to the last lazy result not yet downloaded
        self.last_frame_kernel_s = 0.0  # device time of the last sample_frames' kernels (events)
        # profile=True: run_tableau records CUDA events around each launch and sums them per
        # stage into stage_seconds (gates, transpose, pivot+compaction, elimination).
        self.profile = False
        self._pinned: Optional[np.ndarray] = None
        self.stage_seconds: Dict[str, float] = {}
        self._events: List[Tuple[str, object, object]] = []

    # ------------------------------------------------------------------ shared
    def _launch(self, stage: str, name: str, grid, block, *args) -> None:
        if not self.profile:
            self._fn[name].prepared_call(grid, block, *args)
            return
        start, end = self.cuda.Event(), self.cuda.Event()
        start.record()
        self._fn[name].prepared_call(grid, block, *args)
        end.record()
        self._events.append((stage, start, end))

    def _collect_stage_times(self) -> None:
        if not self.profile:
            return
        self.cuda.Context.synchronize()
        self.stage_seconds = {}
        for stage, start, end in self._events:
            self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + end.time_since(start) / 1e3
        self._events = []

    def _device_program(self, program: Program, schedule: Schedule) -> _DeviceProgram:
        for dp in self._programs:
            if dp.program is program and dp.schedule is schedule:
                return dp
        dp = _DeviceProgram(self.cuda, program, schedule)
        self._programs = [dp] + self._programs[:3]
        return dp

    def _free_bytes(self) -> int:
        free, _ = self.cuda.mem_get_info()
        return int(free * self.memory_fraction)

    # ------------------------------------------------------------------ tableau mode
    def run_tableau(self, program: Program, schedule: Schedule, key, *, repetition: int = 0,
                    reference: bool = False) -> TableauRun:
        cuda = self.cuda
        self._settle_pending()
        self._generation += 1
        dp = self._device_program(program, schedule)
        if dp.plan is None:
            dp.plan = _build_plan(program, schedule)
            dp.ctx = cuda.to_device(_pad(dp.plan.ctx, np.int32))
        plan = dp.plan
        n = program.num_qubits
        need_scratch = plan.max_collapses > 0
        ws = self._ws
        if (ws is None or ws.n != n or ws.num_records != program.num_records
                or ws.max_collapses < plan.max_collapses or (need_scratch and not ws.scratch)):
            self._ws = None
            need = _Workspace.bytes_needed(n, program.num_records, need_scratch)
            if need > self._free_bytes():
                raise OutOfMemoryError(
                    f"tableau mode on {n} qubits needs {gib(need)} of GPU memory (the 2n x n-bit X and Z "
                    f"parts{' twice, for the measurement transpose' if need_scratch else ''}); "
                    f"{gib(self._free_bytes())} is available to the engine")
            ws = self._ws = _Workspace(cuda, n, program.num_records, plan.max_collapses, need_scratch)
            # Threads per row in measure_eliminate: enough rows x segments to fill the device.
            want = max(1, (self.sm_count * 2048) // max(1, 2 * n))
            ws.seg_shift = min(5, max(0, (want - 1).bit_length()))
        W = ws.W
        k0, k1 = (int(v) & 0xFFFFFFFF for v in key)
        rep, ref_flag = int(repetition), int(bool(reference))
        fn = self._fn
        T = dp.tables
        X, Z, X2, Z2 = ws.X, ws.Z, ws.X2, ws.Z2
        rows = 2 * n
        if rows:
            total = rows * W
            fn["tableau_init"].prepared_call((min(4096, (total + 255) // 256), 1), (256, 1, 1),
                                             int(X), int(Z), int(ws.S), n, W)
        if program.num_records:
            cuda.memset_d8(ws.rec, 0, program.num_records)
        gshift = 3 if W <= 8 else 4 if W <= 16 else 5 if W <= 64 else 6 if W <= 256 else 7 if W <= 1024 else 8
        ctx_base = int(dp.ctx)
        ins = schedule.instructions
        for kind, start, end, ctx_id in plan.actions:
            ctx = ctx_base + 4 * CTX_STRIDE * ctx_id
            if kind == "G":
                threads = (end - start) << gshift
                self._launch(
                    "gates", "tableau_gates_window",
                    ((threads + GATE_BLOCK - 1) // GATE_BLOCK, 1), (GATE_BLOCK, 1, 1), T, ctx, start, end,
                    int(X), int(Z), int(ws.S), int(ws.rec), W, k0, k1, rep, ref_flag, gshift)
            elif kind == "F":
                if not reference:
                    fn["tableau_confusion"].prepared_call((1, 1), (1, 1, 1), T, ctx, start, int(ws.rec), k0, k1, rep)
            else:
                X, Z, X2, Z2 = self._collapse_window(ws, T, ctx, start, end, ins, X, Z, X2, Z2, k0, k1, rep,
                                                     ref_flag)
        records = np.empty(program.num_records, dtype=np.uint8)
        if program.num_records:
            cuda.memcpy_dtoh(records, ws.rec)
        else:
            cuda.Context.synchronize()
        self._collect_stage_times()
        # Keep the buffers in gate layout order for the next run (and the lazy download).
        ws.X, ws.Z, ws.X2, ws.Z2 = X, Z, X2, Z2
        run = _LazyTableauRun(records, self, self._generation)
        self._pending = weakref.ref(run)
        return run

    def _settle_pending(self) -> None:
        """Download the last run's tableau if its result is still alive and has not read it."""
        run = self._pending() if self._pending is not None else None
        self._pending = None
        if run is not None and run._tableau is None:
            run._tableau = self._download_tableau(run._generation)

    def _download_tableau(self, generation: int) -> InverseTableau:
        if generation != self._generation or self._ws is None:
            raise RuntimeError("this tableau run's device state was overwritten")  # not reachable
        cuda, ws = self.cuda, self._ws
        n, W = ws.n, ws.W
        rows = 2 * n
        S = np.empty(rows, dtype=np.uint8)
        Xh = np.empty((rows, W), dtype=np.uint64)
        Zh = np.empty((rows, W), dtype=np.uint64)
        if rows:
            cuda.memcpy_dtoh(Xh, ws.X)
            cuda.memcpy_dtoh(Zh, ws.Z)
            cuda.memcpy_dtoh(S, ws.S)
        return InverseTableau(n, Xh[:n], Zh[:n], Xh[n:], Zh[n:], S[:n], S[n:])

    def _collapse_window(self, ws, T, ctx, cstart, cend, ins, X, Z, X2, Z2, k0, k1, rep, ref_flag):
        cuda = self.cuda
        n, W = ws.n, ws.W
        if self.block_windows and W <= BLOCK_MAX_W:  # small tableau: the whole window in one launch
            self._launch("collapse window (one block)", "measure_window_block", (1, 1), (WINDOW_BLOCK, 1, 1),
                         T, ctx, cstart, cend, int(X), int(Z), int(ws.S), int(ws.rec), W, k0, k1, rep, ref_flag)
            return X, Z, X2, Z2
        rows = 2 * n
        count = cend - cstart
        sync = self.window_sync
        if sync is None:
            # Read the window's random/deterministic flags back when that saves launches: big
            # windows (QEC rounds: mostly deterministic) or a tableau so big that skipping the
            # transposes of an all-deterministic window outweighs one round trip.
            sync = count > SYNC_WINDOW or 2 * rows * W * 8 > (1 << 30)
        if sync:
            self._launch(
                "pivot search + compaction", "measure_window_scan", ((count * 32 + SCAN_BLOCK - 1) // SCAN_BLOCK, 1), (SCAN_BLOCK, 1, 1), T, ctx, cstart, cend,
                int(X), int(ws.S), int(ws.rec), int(ws.flags), W)
            flags = ws.host_flags[:count]
            cuda.memcpy_dtoh(flags, ws.flags)  # the window's one host read: which collapses are random
            randoms = np.flatnonzero(flags == 1)
            det_reset = (flags == 0) & (ins[cstart:cend, OP] != _M)
        else:  # no host read: every collapse goes through measure_pivot, which settles it
            randoms = np.arange(count)
            det_reset = np.zeros(count, dtype=bool)

        def clear_resets(lo, hi):
            if det_reset[lo - cstart : hi - cstart].any():
                self._pivot(ws, T, ctx, -1, lo, hi, cstart, X, Z, k0, k1, rep, ref_flag)

        if len(randoms) == 0:
            clear_resets(cstart, cend)
            return X, Z, X2, Z2
        self._transpose(X, X2, Z, Z2, rows, W)  # gate layout -> word-major
        X, Z, X2, Z2 = X2, Z2, X, Z
        prev = cstart
        seg_shift = ws.seg_shift
        elim_grid = ((rows + (ELIM_BLOCK >> seg_shift) - 1) // (ELIM_BLOCK >> seg_shift), 1)
        for j in randoms:
            i = cstart + int(j)
            self._pivot(ws, T, ctx, i, prev if sync else i, i, cstart, X, Z, k0, k1, rep, ref_flag)
            self._launch("elimination", "measure_eliminate", elim_grid, (ELIM_BLOCK, 1, 1), int(X), int(Z), int(ws.S),
                                                  int(ws.ms), int(ws.vw), int(ws.vmask), n, seg_shift)
            prev = i + 1
        self._transpose(X, X2, Z, Z2, W, rows)  # word-major -> gate layout
        X, Z, X2, Z2 = X2, Z2, X, Z
        if prev < cend:
            clear_resets(prev, cend)
        return X, Z, X2, Z2

    def _pivot(self, ws, T, ctx, i, pend_start, pend_end, cstart, X, Z, k0, k1, rep, ref_flag):
        self._launch(
            "pivot search + compaction", "measure_pivot", (1, 1), (PIVOT_BLOCK, 1, 1), T, ctx, i, pend_start, pend_end, int(ws.flags), cstart, int(X), int(Z),
            int(ws.S), int(ws.rec), int(ws.ms), int(ws.vw), int(ws.vmask), ws.W, k0, k1, rep, ref_flag)

    def _transpose(self, src_x, dst_x, src_z, dst_z, rows, cols):
        grid = ((cols + TILE - 1) // TILE, (rows + TILE - 1) // TILE, 2)
        self._launch("transpose", "transpose_words", grid, (TILE, 8, 1), int(src_x), int(dst_x), int(src_z),
                                                  int(dst_z), rows, cols)

    # ------------------------------------------------------------------ frame mode
    def sample_frames(self, program: Program, schedule: Schedule, key, reference: np.ndarray,
                      shots: int) -> np.ndarray:
        cuda = self.cuda
        words = (shots + 63) // 64
        num_records = program.num_records
        if num_records == 0 or words == 0:
            return np.zeros((num_records, words), dtype=np.uint64)
        out = self._host_records(num_records * words).reshape(num_records, words)
        dp = self._device_program(program, schedule)
        ref = cuda.to_device(_pad(np.asarray(reference, dtype=np.uint8) & 1, np.uint8))
        n = program.num_qubits
        slab_word = 16 * n  # fx and fz of one shot word, all qubits
        shared = slab_word <= self.smem_optin and self.frame_memory != "global"
        if self.frame_memory == "shared" and not shared:
            raise OutOfMemoryError(f"the frames of {n} qubits need {slab_word} bytes of shared memory per 64 shots; "
                                   f"a block has at most {self.smem_optin}")
        per_word = 8 * num_records + (0 if shared else slab_word)
        held = sum(b[1] for b in self._buffers.values())  # reused, so available to this call
        budget = self._free_bytes() + held - (1 << 20)
        chunk = budget // per_word if per_word else words
        if self.max_shot_words:
            chunk = min(chunk, int(self.max_shot_words))
        chunk = int(min(chunk, words))
        if chunk < 1:
            raise OutOfMemoryError(
                f"frame mode needs {per_word} bytes of GPU memory per 64 shots ({num_records} records"
                f"{'' if shared else f', frames of {n} qubits'}); {gib(max(budget, 0))} is available")
        if shared:
            cap = max(1, min(self.smem_optin, 112 * 1024) // slab_word) if slab_word else 64
            spread = -(-chunk // (2 * self.sm_count))  # aim for two blocks per multiprocessor
            S = int(max(1, min(cap, spread, 64)))
            smem = 2 * n * S * 8
            fn = self._fn["frames_program_shared"]
            if smem > self._smem_set:
                fn.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
                self._smem_set = smem
        else:
            S = int(max(1, min(8, -(-chunk // (4 * self.sm_count)))))
            smem = 0
            fn = self._fn["frames_program_global"]
        blocks = -(-chunk // S)
        out_dev = self._scratch("frames_out", 8 * num_records * chunk)
        slab = None if shared else self._scratch("frames_slab", 8 * 2 * n * S * blocks)
        k0, k1 = (int(v) & 0xFFFFFFFF for v in key)
        start_evt, end_evt = cuda.Event(), cuda.Event()
        kernel_s = 0.0
        for start in range(0, words, chunk):
            count = min(chunk, words - start)
            grid = (-(-count // S), 1)
            start_evt.record()
            if shared:
                fn.prepared_call(grid, (FRAME_BLOCK, 1, 1), dp.tables, int(ref), int(out_dev), chunk, start, count,
                                 S, k0, k1, shared_size=smem)
            else:
                fn.prepared_call(grid, (FRAME_BLOCK, 1, 1), dp.tables, int(ref), int(out_dev), chunk, start, count,
                                 S, int(slab), k0, k1)
            end_evt.record()
            if count == words:  # one chunk: same layout as `out`
                cuda.memcpy_dtoh(out, out_dev)
            else:  # the chunk's columns of every record row, straight into `out`
                copy = cuda.Memcpy2D()
                copy.set_src_device(out_dev)
                copy.src_pitch = 8 * chunk
                copy.set_dst_host(out)
                copy.dst_pitch = 8 * words
                copy.dst_x_in_bytes = 8 * start
                copy.width_in_bytes = 8 * count
                copy.height = num_records
                copy(aligned=True)
            kernel_s += end_evt.time_since(start_evt) / 1000.0
        self.last_frame_kernel_s = kernel_s
        return out

    def _host_records(self, count: int) -> np.ndarray:
        """Page-locked host memory for the records (a DMA copy at full link speed). The buffer is
        reused only when nobody holds a result from it any more; otherwise a new one is made."""
        # getrefcount(self._pinned) is 2 (the attribute and the argument) when no result is alive.
        if self._pinned is None or self._pinned.size < count or sys.getrefcount(self._pinned) > 2:
            self._pinned = self.cuda.pagelocked_empty(max(count, 1), np.uint64)
        return self._pinned[:count]

    def _scratch(self, name: str, nbytes: int):
        """A device buffer reused across calls (grown when too small)."""
        buf = self._buffers.get(name)
        if buf is None or buf[1] < nbytes:
            self._buffers.pop(name, None)
            buf = self._buffers[name] = (self.cuda.mem_alloc(max(8, int(nbytes))), int(nbytes))
        return buf[0]


def _pop_context(ctx) -> None:
    try:
        ctx.pop()
    except Exception:  # noqa: BLE001 - interpreter shutdown
        pass
