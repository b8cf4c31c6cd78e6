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
from typing import Dict, List, Optional

import numpy as np

from ...core.parities import Parities
from ...core.program import Program
from ...core.tableau import InverseTableau
from ...schedule import Schedule
from ..base import Engine, TableauRun
from . import loader
from .device_program import DeviceProgram
from .frames import FrameMode
from .tableau import TableauMode


class CudaEngine(Engine):
    """Tableau and frame modes on the GPU; results identical to NumpyEngine for the same key.

    max_shot_words: frame mode processes at most this many 64-shot words per launch (None: as
    many as fit in device memory); results do not depend on it. memory_fraction: the share of
    the device's free memory the engine plans to use. frame_memory: where frame mode keeps the
    frames: "auto" (shared memory when one shot word of all qubits fits), "shared" or "global".
    window_sync: read each measurement window's deterministic / random flags back to the host
    (one small copy per window) so that only random collapses are launched and windows without
    any skip the transposes; None: for windows of more than measure.SYNC_WINDOW collapses and for
    tableaux over 1 GiB, where that saves more than the round trip costs.
    block_windows: for tableaux of at most measure.BLOCK_MAX_W words a row (n <= 4096), run each
    measurement window in one block (measure_window_block): one launch a window, no transposes.
    batch_windows: larger tableaux run each window of up to max(64, n/64) collapses in one pass
    (measure_rows.cu); False keeps the per-collapse transposed path (the batched path's oracle).
    profile: when set, every kernel launch is bracketed by CUDA events and each run_tableau /
    sample_frames leaves its device time per stage in stage_seconds (init, gates, confusion,
    transpose, pivot search + compaction, elimination, collapse window (one block), frames).
    last_frame_kernel_s: device time of the last sample_frames' kernels (always measured)."""

    name = "cuda"

    def __init__(self, max_shot_words: Optional[int] = None, device: int = 0, memory_fraction: float = 0.85,
                 frame_memory: str = "auto", window_sync: Optional[bool] = None, block_windows: bool = True,
                 batch_windows: bool = True):
        import pycuda.driver as cuda

        if frame_memory not in ("auto", "shared", "global"):
            raise ValueError(f'frame_memory must be "auto", "shared" or "global", got {frame_memory!r}')
        self.frame_memory = frame_memory
        self.window_sync = window_sync
        self.block_windows = block_windows
        self.batch_windows = batch_windows
        self.row_warps: Optional[int] = None  # warps a row in measure_rows_apply (None: by row length)

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
        self.launcher = loader.Launcher()
        self._programs: List[DeviceProgram] = []
        self._tableau = TableauMode(self)
        self._frames = FrameMode(self)
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
        dp = DeviceProgram(self.cuda, program, schedule)
        self._programs = [dp] + self._programs[:3]
        return dp

    def free_bytes(self) -> int:
        """Device memory the engine may still plan to use (memory_fraction of what is free)."""
        free, _ = self.cuda.mem_get_info()
        return int(free * self.memory_fraction)

    # ------------------------------------------------------------------ the two modes
    def run_tableau(self, program: Program, schedule: Schedule, key, *, repetition: int = 0,
                    reference: bool = False, initial: Optional[InverseTableau] = None,
                    records: Optional[np.ndarray] = None) -> TableauRun:
        run = self._tableau.run(program, schedule, key, repetition, reference, initial, records)
        self._collect_stage_times()
        return run

    def sample_frames(self, program: Program, schedule: Schedule, key, reference: np.ndarray,
                      shots: int, parities: Optional[Parities] = None, shot_major: bool = False) -> np.ndarray:
        out, kernel_s = self._frames.sample(program, schedule, key, reference, shots, parities, shot_major)
        if kernel_s is not None:
            self.last_frame_kernel_s = kernel_s
            self._collect_stage_times()
        return out


def _pop_context(ctx) -> None:
    try:
        ctx.pop()
    except Exception:  # noqa: BLE001 - interpreter shutdown
        pass
