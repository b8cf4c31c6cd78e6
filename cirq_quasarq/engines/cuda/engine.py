"""The CUDA engine: tableau mode and frame mode on an NVIDIA GPU through PyCUDA.

Same contract and bits as the NumPy engine (docs/engine-semantics.md). This module is the facade:
the CUDA context, the device's attributes, the memory budget, the uploaded programs and dispatch.
The work lives beside it, split as the kernels are: loader.py (compiles cuda_src, prepares every
kernel from its prototype, and the one `Launcher` every launch goes through), device_program.py
(the QQTables upload and tableau mode's plan of launches), tableau.py (tableau mode: gates.cu),
measure.py (collapse windows: the measure_*.cu kernels and transpose.cu) and frames.py (frame
mode: frames.cu).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import threading
from typing import Dict, List, Optional

import numpy as np

from ...core.packed import REDUCTIONS
from ...core.parities import Parities
from ...core.program import Program
from ...core.sizes import parse_bytes
from ...core.tableau import InverseTableau
from ...errors import GpuFaultError, InvalidInputError
from ...schedule import Schedule
from ..base import Engine, TableauRun
from . import faults, loader, measure, measured_rows
from .device_program import DeviceProgram
from .frames import PIPELINE_MIN_BYTES, FrameMode
from .tableau import TableauMode


MEMORY_LIMIT_ENV = "CIRQ_QUASARQ_GPU_MEMORY_LIMIT"
# The page-locked memory a process's first calls use (frame mode's staging slots, tableau mode's window
# flags) locked on a thread as the engine starts, while its kernels load: at the first large result
# the locking (tens of ms for the slots) was often not done, and that call copied into ordinary memory
# directly (d = 11 with 1M shots: a process's first call 30.7 ms where the next took 20-22, H200
# host). False: locked at the first call that uses them (the code before, for benchmarks).
STAGING_AT_START = True


def resolve_memory_limit(value=None) -> Optional[int]:
    """CudaEngine's memory_limit in bytes: `value` (bytes, or a size such as "512M" / "2G"), else
    $CIRQ_QUASARQ_GPU_MEMORY_LIMIT, else None (no limit). An empty variable means no limit."""
    where = "memory_limit"
    if value is None:
        value = os.environ.get(MEMORY_LIMIT_ENV, "").strip() or None
        where = f"${MEMORY_LIMIT_ENV}"
    if value is None:
        return None
    try:
        return parse_bytes(value)
    except ValueError as exc:
        raise InvalidInputError(f"{where}: {exc}") from None


def _guarded(method):
    """An engine call: refused at once when the context is dead; a PyCUDA error escaping it becomes
    GpuFaultError / OutOfMemoryError (naming the last kernel launched); a KeyboardInterrupt (or any
    other error) first waits for the device's queued work, so the next call starts clean."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if faults.context_fault() is not None:
            raise faults.dead_engine_error(f"CudaEngine.{method.__name__}")
        with self.context_current():
            try:
                if self.memory_limit is not None:  # under a cap, each call plans from an empty scratch
                    self._frames._buffers.clear()
                    self._frames.parity_tables = None
                    self._frames.reference_bits = None
                return method(self, *args, **kwargs)
            except BaseException as exc:
                if isinstance(exc, self.cuda.Error):
                    error = self._fault(exc, f"CudaEngine.{method.__name__}")
                    self._drain()
                    raise error from exc
                self._drain()
                raise

    return call


class CudaEngine(Engine):
    """Tableau and frame modes on the GPU; results identical to NumpyEngine for the same key.

    max_shot_words: frame mode processes at most this many 64-shot words per launch (None: as
    many as fit in device memory); results do not depend on it. memory_fraction: the share of
    the device's free memory the engine plans to use. frame_memory: where frame mode keeps the
    frames: "auto" (shared memory when one shot word of all qubits fits), "shared" or "global".
    frame_noise: "deferred" (each noise run takes every word's any-lane draw first and finishes
    only the words that fired, 32 at a time per warp) or "direct" (each word in place: the oracle).
    window_sync: read each measurement window's deterministic / random flags back to the host
    (one small copy per window) so that only random collapses are launched and windows without
    any skip the transposes; None: for windows of more than measure.SYNC_WINDOW collapses and for
    tableaux over 1 GiB, where that saves more than the round trip costs.
    block_windows: for tableaux of at most measure.BLOCK_MAX_W words a row (n <= 4096), run each
    measurement window in one block (measure_window_block): one launch a window, no transposes.
    batch_windows: larger tableaux decide each window of up to max(64, n/64) collapses on its
    measured qubits' rows (measure_plan.cu), then update every row in one pass (measure_rows.cu),
    and wider windows whose scan finds many random collapses in pieces of at most that width (attribute
    `wide_lowrank`); False keeps the per-collapse transposed path (the batched path's oracle).
    lowrank_windows: among those, windows of at least `lowrank_min` collapses (default
    measure.LOWRANK_MIN_COLLAPSES) take the low-rank update (measure_lowrank.cu: per 160 collapses
    a tensor-core product and a table-driven pass instead of each row through every collapse);
    False keeps measure_rows_apply for them (its oracle).
    profile: when set, every kernel launch is bracketed by CUDA events and each run_tableau /
    sample_frames leaves its device time per stage in stage_seconds (init, gates, confusion,
    transpose, pivot search + compaction, elimination, collapse window (one block), frames); the
    launcher's `kernel_totals` sums the same times per kernel (launches, seconds) until cleared.
    last_frame_kernel_s: device time of the last sample_frames' frame kernels, per chunk from the
    first one's start to the last one's end (always measured).
    memory_limit: bytes (or a size such as "512M", "2G"; default: $CIRQ_QUASARQ_GPU_MEMORY_LIMIT,
    else none): plan as if the device had only this much memory for the engine. `free_bytes()` then
    never exceeds memory_limit minus the device buffers the engine holds (`held_bytes()`: frame and
    tableau workspaces, uploaded programs), `alloc` refuses more, and frame mode's chunks and
    tableau mode's memory check follow (under a cap frame mode's scratch buffers are made afresh
    for each call rather than kept); results do not depend on it.

    CUDA errors become errors.GpuFaultError (faults.py): the message names the kernel, its stage
    and launch shape; `context_ok` says whether the engine stays usable (`usable`). Ctrl-C during
    a call waits for the device's queued work before the KeyboardInterrupt goes on, so the next
    call starts clean."""

    name = "cuda"
    streams_pieces = True
    works_ahead = True
    # The measured rows' row-collapse costs about three times the fused pass's (H200, the paper's
    # circuit at 100k qubits: 1.1 against 0.37 ns), so they pay below E = 4n / 3: up to n collapses
    # (the 180k-qubit circuit at depth 1000: E = 0.71 n)
    measured_rows_share = 1.0

    def __init__(self, max_shot_words: Optional[int] = None, device: int = 0, memory_fraction: float = 0.85,
                 frame_memory: str = "auto", window_sync: Optional[bool] = None, block_windows: bool = True,
                 batch_windows: bool = True, lowrank_windows: bool = True, memory_limit=None,
                 frame_noise: str = "deferred"):
        import pycuda.driver as cuda

        if frame_memory not in ("auto", "shared", "global"):
            raise ValueError(f'frame_memory must be "auto", "shared" or "global", got {frame_memory!r}')
        if frame_noise not in ("deferred", "direct"):
            raise ValueError(f'frame_noise must be "deferred" or "direct", got {frame_noise!r}')
        if faults.context_fault() is not None:
            raise faults.dead_engine_error("CudaEngine()")
        self.frame_memory = frame_memory
        self.frame_noise = frame_noise
        self.window_sync = window_sync
        self.block_windows = block_windows
        self.batch_windows = batch_windows
        self.lowrank_windows = lowrank_windows
        self.lowrank_min = measure.LOWRANK_MIN_COLLAPSES
        # a window past the low-rank path's width whose scan finds many random collapses takes the
        # low-rank update instead of the per-collapse path (measure.wide_lowrank; False: per collapse)
        self.wide_lowrank = True
        self.row_warps: Optional[int] = None  # warps a row in measure_rows_apply (None: by row length)
        # blocks of measure_window_plan, 0 for measure_rows_plan's one (None: as measure.plan_blocks picks)
        self.plan_blocks: Optional[int] = None
        # measure_rows_plan keeps the slice, measure_window_plan a block's columns of it, in shared
        # memory where they fit (False: always in global memory, the path of windows too wide for it)
        self.plan_slice_shared = True
        # a gate window that follows a collapse window goes through that window's pass over the rows
        # (each row read and written once for both: lowrank_apply_gates, measure_rows_apply_gates);
        # False: its own gate kernel (the oracle)
        self.fold_gates = True
        # a low-rank window's last pass (its gates folded in) also makes the next low-rank window's
        # pass 1, that window decided ahead on its measured rows (measure.fuse_pass); False: each
        # window its own pass 1 (the oracle)
        self.fuse_windows = True
        # collapses a low-rank chunk holds at most in a run whose windows do not fuse (the fused pass
        # counts chunks of measure.LOWRANK_CHUNK): past LOWRANK_NARROW a chunk takes the kernels of
        # three words of bits, which pay inside the fused pass but not apart (docs/benchmarks-collapse.md)
        self.lowrank_chunk_apart = measure.LOWRANK_NARROW
        # the chunks a run whose windows fuse takes: the first whose fused buffers fit (a chunk past
        # LOWRANK_NARROW needs a second plane of partial counts, an eighth of the tableau: n = 370k on
        # an 80 GB device has room for one)
        self.fused_chunks = (measure.LOWRANK_CHUNK, measure.LOWRANK_NARROW)
        # a reference run stops repeating a loop once its tableau repeats, and copies the records of
        # the iterations left from the cycle (tableau._LoopFolding); False: every iteration runs
        self.fold_loops = True
        # a reference run of at most measured_rows_share * n collapses and no reset makes its records
        # from the measured rows alone (measured_rows.py: no tableau); "always": wherever it applies (tests); False:
        # the full tableau run, its oracle
        self.measured_rows = True
        # the measured rows' backward sweep in one launch where a word's strings fit a block
        # (measured_rows.one_launch); "always": wherever they fit (tests); False: a launch a window, its oracle
        self.pullback_in_one_launch = True
        # frame mode runs a chunk as pieces on their own streams when it copies back at least this
        self.pipeline_min_bytes = PIPELINE_MIN_BYTES
        # frame mode's shot-major records from the frame kernel's epilogue (False: a separate
        # transpose kernel afterwards, its oracle)
        self.fused_shot_major = True
        # frame mode's shot-major parities (detection events, observable flips) XORed from the records
        # as they are transposed (False: record_parities' pass first, its oracle)
        self.fused_parities = True
        # a call whose frame blocks all run at once (one wave) and whose shot-major rows are transposed
        # after the frame kernel takes them in bands of rows: each band transposed and copied once the
        # kernel's blocks have written its records, while they run on (False: after the kernel, its oracle)
        self.banded_copies = True
        # frame mode runs a call of few shot words on every multiprocessor (frames_program_spread)
        # where FrameMode.spread_pays finds it faster; True / False: always / never (the block
        # kernels, its oracle)
        self.spread_frames: Optional[bool] = None

        self.cuda = cuda
        self.max_shot_words = max_shot_words
        self.memory_fraction = memory_fraction
        self.memory_limit = resolve_memory_limit(memory_limit)
        cuda.init()
        pushed = cuda.Context.get_current() is None
        if pushed:
            cuda.Device(device).retain_primary_context().push()
        self._context = cuda.Context.get_current()
        try:
            self._setup(cuda)
        finally:
            if pushed and threading.current_thread() is threading.main_thread():
                atexit.register(_pop_context, self._context)  # kept current on the main thread
            elif pushed:
                cuda.Context.pop()  # a worker thread: each call makes it current (`_guarded`)

    def _setup(self, cuda) -> None:
        self.device = cuda.Context.get_device()
        attr = cuda.device_attribute
        self.sm_count = self.device.get_attribute(attr.MULTIPROCESSOR_COUNT)
        optin = getattr(attr, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", None)
        self.smem_optin = int(self.device.get_attribute(optin)) if optin is not None else 48 * 1024
        self._tableau = TableauMode(self)
        self._frames = FrameMode(self)
        if STAGING_AT_START:  # locked on a thread while the kernels load, not at the first large result
            self._frames.start_staging()
            self._tableau.lock_flags_soon()
        self.launcher = loader.Launcher()
        self._programs: List[DeviceProgram] = []
        self.last_frame_kernel_s = 0.0
        self.stage_seconds: Dict[str, float] = {}

    # ------------------------------------------------------------------ shared
    @property
    def profile(self) -> bool:
        return self.launcher.profile

    @profile.setter
    def profile(self, value: bool) -> None:
        self.launcher.profile = bool(value)

    def _collect_stage_times(self) -> None:
        if self.profile:
            self.stage_seconds = self.launcher.collect()

    def device_program(self, program: Program, schedule: Schedule) -> DeviceProgram:
        """The program's QQTables on the device (the last four programs stay uploaded)."""
        for dp in self._programs:
            if dp.program is program and dp.schedule is schedule:
                return dp
        dp = DeviceProgram(self.cuda, program, schedule, self._frames.upload)
        self.keep_device_program(dp)
        return dp

    def tableau_passes(self, program: Program, schedule: Schedule) -> int:
        """Passes over the tableau's rows a tableau-mode run of the program makes (TableauMode.passes)."""
        return self._tableau.passes(self.device_program(program, schedule))

    def keep_device_program(self, dp: DeviceProgram) -> None:
        """`dp` is the one `device_program` returns for its program and schedule from now on."""
        self._programs = [dp] + [kept for kept in self._programs[:3] if kept is not dp]

    @contextlib.contextmanager
    def context_current(self):
        """The engine's context current on this thread for the block. On a thread where it is not
        (a worker thread, the staging slots' locking thread) it is pushed for the block only, so no
        thread is left holding it at exit."""
        context = getattr(self, "_context", None)
        pushed = context is not None and self.cuda.Context.get_current() is None
        if pushed:
            context.push()
        try:
            yield
        finally:
            if pushed:
                self.cuda.Context.pop()

    def free_bytes(self) -> int:
        """Device memory the engine may still plan to use (memory_fraction of what is free, under
        `memory_limit` when set)."""
        return int(self._free() * self.memory_fraction)

    def _free(self) -> int:
        """Free device bytes, under memory_limit (less the engine's buffers) when set."""
        free, _ = self.cuda.mem_get_info()
        if self.memory_limit is None:
            return free
        return max(0, min(free, self.memory_limit - self.held_bytes()["device"]))

    def alloc(self, nbytes: int, what: str = "a device buffer"):
        """A device allocation of `nbytes` (at least 8); OutOfMemoryError naming the bytes asked
        for and free when the device (or memory_limit) cannot give them."""
        nbytes = max(8, int(nbytes))
        if self.memory_limit is not None and nbytes > self._free():
            raise faults.out_of_memory(None, nbytes, f"{what} (memory_limit {self.memory_limit:,} bytes)",
                                       self._free())
        try:
            return self.cuda.mem_alloc(nbytes)
        except self.cuda.MemoryError as exc:
            raise faults.out_of_memory(exc, nbytes, what, self._free_or_none()) from exc

    def pinned(self, count: int, dtype, what: str = "results"):
        """Page-locked host memory (numpy array of `count` elements); OutOfMemoryError when the
        host cannot lock that much."""
        try:
            return self.cuda.pagelocked_empty(count, dtype)
        except self.cuda.MemoryError as exc:
            raise faults.out_of_memory(exc, count * np.dtype(dtype).itemsize, what, None,
                                       place="page-locked host") from exc

    def _free_or_none(self) -> Optional[int]:
        try:
            return self._free()
        except self.cuda.Error:
            return None

    @property
    def usable(self) -> bool:
        """False once a sticky CUDA error killed this process's context (faults.context_fault())."""
        return faults.context_fault() is None

    def held_bytes(self) -> Dict[str, int]:
        """Memory the engine keeps between calls: device buffers (frame and tableau workspaces,
        uploaded programs) and page-locked host buffers, in bytes."""
        frames, ws = self._frames, self._tableau.ws
        device = sum(size for _, size in frames._buffers.values()) + sum(dp.nbytes for dp in self._programs)
        device += frames.parity_tables[2] if frames.parity_tables is not None else 0
        device += len(frames.reference_bits[1]) if frames.reference_bits is not None else 0
        pinned = sum(int(buf.nbytes) for buf in frames._pinned)
        pinned += sum(int(buf.nbytes) for buf in self._tableau.piece_buffers if buf is not None)
        if ws is not None:
            device += _workspace_bytes(ws)
            pinned += int(ws.host_flags.nbytes)
        return {"device": device, "pinned": pinned, "device_programs": len(self._programs)}

    def _fault(self, exc: BaseException, where: str) -> BaseException:
        """The error to raise for a PyCUDA error `exc` that escaped a call: out of memory, or a
        GpuFaultError naming the last kernel launched."""
        if isinstance(exc, self.cuda.MemoryError):
            return faults.out_of_memory(exc, None, where, self._free_or_none())
        return self.launcher.fault(exc, where)

    def _drain(self) -> None:
        """After an interruption: wait for the work already queued on the device (a sticky fault
        found there is recorded) and drop the interrupted call's profiling events."""
        if faults.context_fault() is not None:
            return
        try:
            self.launcher.synchronize("draining the device after an interruption")
        except GpuFaultError:
            pass
        self.launcher.discard_events()

    # ------------------------------------------------------------------ the two modes
    @_guarded
    def run_tableau(self, program: Program, schedule: Schedule, key, *, repetition: int = 0,
                    reference: bool = False, initial: Optional[InverseTableau] = None,
                    records: Optional[np.ndarray] = None) -> TableauRun:
        run = self._tableau.run(program, schedule, key, repetition, reference, initial, records)
        self._collect_stage_times()
        return run

    @_guarded
    def reference_records(self, program: Program, schedule: Schedule) -> np.ndarray:
        if self.measured_rows == "always" and measured_rows.supports(program, schedule) \
                or self.measured_rows and measured_rows.pays(self, program, schedule):
            records = measured_rows.run_records(self, program, schedule)
            self._collect_stage_times()
            return records
        return super().reference_records(program, schedule)

    @_guarded
    def run_reference_pieces(self, num_qubits: int, num_records: int, pieces, key, whole=None) -> TableauRun:
        run = self._tableau.run_pieces(num_qubits, num_records, pieces, key, whole)
        self._collect_stage_times()
        return run

    @_guarded
    def expect_samples(self, num_records: int, shots: int, shot_major: bool = False) -> None:
        self._frames.expect(num_records, shots, shot_major)

    @_guarded
    def sample_frames(self, program: Program, schedule: Schedule, key, reference: np.ndarray,
                      shots: int, parities: Optional[Parities] = None, shot_major: bool = False, *,
                      first_word: int = 0) -> np.ndarray:
        out, kernel_s = self._frames.sample(program, schedule, key, reference, shots, parities, shot_major,
                                            first_word=first_word)
        if kernel_s is not None:
            self.last_frame_kernel_s = kernel_s
            self._collect_stage_times()
        return out


    @_guarded
    def reduce_frames(self, program: Program, schedule: Schedule, key, reference: np.ndarray,
                      shots: int, parities: Optional[Parities] = None, *, op: str = "popcount",
                      first_word: int = 0) -> np.ndarray:
        if op not in REDUCTIONS:
            raise ValueError(f"unknown reduction {op!r}; known: {', '.join(REDUCTIONS)}")
        out, kernel_s = self._frames.sample(program, schedule, key, reference, shots, parities,
                                            first_word=first_word, reduce=op)
        if kernel_s is not None:
            self.last_frame_kernel_s = kernel_s
            self._collect_stage_times()
        return out


def _workspace_bytes(ws) -> int:
    return ws.bytes_needed(ws.n, ws.num_records, ws.scratch, ws.max_collapses) + ws.extra_bytes()


def _pop_context(ctx) -> None:
    try:
        ctx.pop()
    except Exception:  # noqa: BLE001 - interpreter shutdown
        pass
