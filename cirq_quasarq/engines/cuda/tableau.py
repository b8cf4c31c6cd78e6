"""Tableau mode on the device: one shot of the scheduled program on the inverse tableau.

The state (Stim's convention, docs/engine-semantics.md) stays on the device: rows 0..n-1 are
xrow[k] = T⁻¹X_kT, rows n..2n-1 zrow[k] = T⁻¹Z_kT, X / Z parts as 64-bit words, row-major ("gate
layout", X[r*W + w]) between windows. Kernels driven (gates.cu): tableau_init (|0…0>, or an upload
of the caller's `initial` tableau instead), tableau_gates_window (one launch per gate window, paper
Alg. 3: unitaries and the shot's Pauli noise) and tableau_confusion (one CONFUSION instruction);
collapse windows go to measure.py (Algs. 4-8), which may take the gate window after a window into
its pass over the rows (`_routes`). The records come back at once; the final tableau is
downloaded lazily (`_LazyTableauRun`), and at the latest before the next run overwrites it.
"""

from __future__ import annotations

import concurrent.futures
import weakref
from typing import List, Optional, Tuple

import numpy as np

from ...core.program import Program
from ...core.tableau import InverseTableau
from ...errors import NotStreamable, OutOfMemoryError
from ...schedule import Schedule
from ..base import TableauRun, gib
from . import faults, loader, measure
from .device_program import CTX_STRIDE, DeviceProgram, PieceUploads
from .frames import lock_pool

GATE_BLOCK = loader.source_define("gates.cu", "QQ_GATE_BLOCK")
INIT_BLOCK = loader.source_define("gates.cu", "QQ_INIT_BLOCK")
INIT_MAX_BLOCKS = 4096  # tableau_init is grid-stride: any launch shape
FWD_GENS = loader.source_define("forward.cu", "QQ_FWD_GENS")
FWD_LETTER_BLOCK = loader.source_define("forward.cu", "QQ_FWD_LETTER_BLOCK")
FWD_LETTER_BAND_BYTES = 1 << 28  # the letters of a band of generators, on the device at once
PIECE_COLLAPSES = 256  # the widest window a piecewise run's workspace takes at least (run_pieces)
HOST_FLAGS_MIN = 1 << 14  # window flags kept page-locked (64 KiB): any window of a distance-51 code


class _Workspace:
    """Device buffers of tableau mode for one (n, num_records, collapses) shape, reused per shot.
    The second tableau buffer (X2, Z2) exists only when some window takes the transpose path; the
    window-batched path needs the measured rows' slice and its plan instead (measure_rows.cu)."""

    def __init__(self, engine, n: int, num_records: int, max_collapses: int, need_scratch: bool, host_flags):
        self.n, self.num_records = n, num_records
        self.W = max(1, (n + 63) // 64)
        words = 2 * n * self.W
        alloc = lambda nbytes: engine.alloc(nbytes, f"tableau mode on {n} qubits")  # noqa: E731
        tail = measure.LOWRANK_TAIL_BYTES  # past the last row: lowrank_counts copies rows in 16-byte units
        self.X, self.Z = alloc(8 * words + tail), alloc(8 * words + tail)
        self.X2 = alloc(8 * words + tail) if need_scratch else None
        self.Z2 = alloc(8 * words + tail) if need_scratch else None
        self.S = alloc(2 * n)
        self.rec = alloc(num_records)
        self.flags = alloc(4 * max(1, max_collapses))
        self.host_flags = host_flags  # page-locked, at least max(1, max_collapses) (TableauMode._flags)
        self.ms = alloc(4 * 8)
        self.vw = alloc(4 * self.W)
        self.vmask = alloc(8 * self.W)
        slice_words = max(1, max_collapses) * self.W
        self.sx, self.sz = alloc(8 * slice_words), alloc(8 * slice_words)
        self.ss = alloc(4 * max(1, max_collapses))  # measure_rows_plan's signs of the slice rows
        self.plan_pub = alloc(4 * measure.plan_published_words(max_collapses))
        self.plan_bar = alloc(8)  # measure_window_plan's barrier: zero between launches
        engine.cuda.memset_d32(self.plan_bar, 0, 2)
        self.window = self.main_window = _WindowBuffers(alloc, self.W, max_collapses)
        self.lr_span = alloc(12)  # lowrank_prepare's span of words over its blocks: (min, max, blocks done)
        engine.cuda.memcpy_htod(self.lr_span, np.array([0x7FFFFFFF, 0, 0], dtype=np.int32))
        words = measure.LOWRANK_WORDS
        self.lr_rows = alloc(8 * 3 * words * 2 * max(1, n))  # per row: alpha, its pivot bits x, z (measure_lowrank.cu)
        self.lr_part = alloc(4 * measure.lowrank_part_words(n, self.W))  # lowrank_apply -> lowrank_signs
        # a gate window folded into the low-rank update: its groups of rows and their descriptors for
        # pass 2, counters that only grow (reset each run, `group_counts` their values on the host),
        # the marks of gated qubits and each gated qubit's instruction (lowrank_ahead reads it; -1
        # before any)
        groups = -(-n // 2)
        self.gpairs, self.ghalves, self.gmark = alloc(16 * groups), alloc(8 * 2 * groups), alloc(max(1, n))
        self.gdesc = alloc(16 * groups)
        self.gate_of = alloc(4 * max(1, n))
        engine.cuda.memset_d32(self.gate_of, 0xFFFFFFFF, max(1, n))
        self.gcnt = alloc(16)  # zeroed, with the marks, by each run that folds gates (TableauMode.run)
        self.group_counts = (0, 0)
        self.fused: Optional[_FusedBuffers] = None  # made by the first run that fuses windows (`fusion`)
        self.chunk = measure.LOWRANK_CHUNK  # collapses a low-rank chunk at most, set by each run (`_actions`)
        self.saved = None  # a copy of the tableau and a flag, for reference runs' loops (`save_tableau`)
        self.max_collapses = max_collapses
        self.scratch = need_scratch
        self.seg_shift = 0  # measure_eliminate's threads per row (2^seg_shift); set by the owner
        self._alloc = alloc

    # The current collapse window's buffers (measure.py reads them by these names).
    plan = property(lambda self: self.window.plan)
    vrows = property(lambda self: self.window.vrows)
    active = property(lambda self: self.window.active)
    vn = property(lambda self: self.window.vn)
    lr_meta = property(lambda self: self.window.meta)
    lr_pcol = property(lambda self: self.window.pcol)
    lr_pivots = property(lambda self: self.window.pivots)
    lr_vp = property(lambda self: self.window.vp)
    lr_special = property(lambda self: self.window.special)

    def fusion(self, engine) -> Optional["_FusedBuffers"]:
        """The buffers of fused windows (measure.fuse_pass), made once when the device has room for
        them (an eighth of the tableau a plane of partial counts), for the first of the engine's
        `fused_chunks` they fit (chunks of LOWRANK_NARROW need one plane where wider ones take two);
        None when there is room for none (the windows then run apart)."""
        if self.fused is None:
            for chunk in engine.fused_chunks:
                if _room(engine, _FusedBuffers.bytes_needed(self.n, self.W, self.max_collapses, chunk)):
                    self.fused = _FusedBuffers(self._alloc, self.n, self.W, self.max_collapses, chunk)
                    break
        return self.fused

    def swap_windows(self) -> None:
        """The next collapse window's buffers become the current ones (the next window is decided
        while the current one's update is still to run: measure.fuse_pass)."""
        self.window, self.fused.window = self.fused.window, self.window

    def settle_window(self) -> None:
        """The main buffers current again, for a window that no fused pass decided (they hold the
        program's widest window; the fused set only the widest low-rank one, `_FusedBuffers.widest`)."""
        if self.window is not self.main_window:
            self.swap_windows()

    def extra_bytes(self) -> int:
        """Device bytes made past `bytes_needed`: the fused windows' buffers, the saved tableau."""
        fused = (_FusedBuffers.bytes_needed(self.n, self.W, self.max_collapses, self.fused.chunk)
                 if self.fused is not None else 0)
        return fused + (self._saved_bytes() if self.saved is not None else 0)

    def _saved_bytes(self) -> int:
        return 16 * 2 * self.n * self.W + 2 * self.n + 4  # X, Z, the signs, the flag

    def save_tableau(self, engine, X, Z) -> bool:
        """Copy the tableau (X, Z and the signs) aside for `tableau_differs`; False when the device
        has no room for the copy (made once per workspace)."""
        words = 2 * self.n * self.W
        if self.saved is None:
            if not _room(engine, self._saved_bytes()):
                return False
            self.saved = (self._alloc(8 * words), self._alloc(8 * words), self._alloc(2 * self.n), self._alloc(4))
        cuda = engine.cuda
        sx, sz, ss, _ = self.saved
        if words:
            cuda.memcpy_dtod(sx, X, 8 * words)
            cuda.memcpy_dtod(sz, Z, 8 * words)
            cuda.memcpy_dtod(ss, self.S, 2 * self.n)
        return True

    def tableau_differs(self, engine, X, Z) -> bool:
        """Whether the tableau differs from the one `save_tableau` copied (waits for the device)."""
        cuda = engine.cuda
        sx, sz, ss, flag = self.saved
        cuda.memset_d32(flag, 0, 1)
        total = 2 * self.n * self.W
        if total:
            engine.launcher.launch("loop check", "tableau_differs",
                                   (min(INIT_MAX_BLOCKS, (total + INIT_BLOCK - 1) // INIT_BLOCK), 1), (INIT_BLOCK, 1, 1),
                                   int(X), int(Z), int(self.S), int(sx), int(sz), int(ss), self.n, self.W, int(flag))
        differs = self.host_flags[:1]  # page-locked already (a window's flags; none is being read now)
        cuda.memcpy_dtoh(differs, flag)
        return bool(differs[0])

    def repeat_records(self, engine, source: int, length: int, count: int) -> None:
        """Records [source + length, source + length + count) := the cycle [source, source + length)
        repeated (count a multiple of length), by copies that double the repeated span."""
        cuda, base, done = engine.cuda, int(self.rec), 0
        while done < count:
            size = min(length + done, count - done)
            cuda.memcpy_dtod(base + source + length + done, base + source, size)
            done += size

    @staticmethod
    def bytes_needed(n: int, num_records: int, need_scratch: bool, max_collapses: int = 0) -> int:
        """Bytes of the workspace (without the fused windows' buffers, made only where they fit)."""
        W = max(1, (n + 63) // 64)
        buffers = 4 if need_scratch else 2
        return (8 * 2 * n * W * buffers + (buffers + 1) * measure.LOWRANK_TAIL_BYTES + 2 * n + num_records
                + 12 * W + 4096
                + 8 * 3 * max(1, max_collapses) * W + 40 * max(1, max_collapses)
                + 4 * measure.plan_published_words(max_collapses) + 8
                + 8 * measure.LOWRANK_CHUNK * W + 12 + 16 * measure.LOWRANK_CHUNK * measure.LOWRANK_WORDS
                + 48 * measure.LOWRANK_WORDS * n
                + 4 * measure.lowrank_part_words(n, W) + 48 * -(-n // 2) + 5 * n + 16)


def _room(engine, nbytes: int) -> bool:
    """Whether the device has room for `nbytes` more of optional buffers, 64 MiB to spare."""
    return nbytes <= engine.free_bytes() - (64 << 20)


class _WindowBuffers:
    """A collapse window's plan (measure_plan.cu) and low-rank chunk (measure_lowrank.cu)."""

    def __init__(self, alloc, W: int, max_collapses: int):
        chunk, words, k = measure.LOWRANK_CHUNK, measure.LOWRANK_WORDS, max(1, max_collapses)
        self.plan = alloc(4 * measure.PLAN_FIELDS * k)
        self.vrows = alloc(8 * k * W)  # the victim masks V_i
        self.active = alloc(4)  # the window's random collapses
        self.vn = alloc(8 * chunk * W + measure.LOWRANK_TAIL_BYTES)
        self.meta = alloc(4 * measure.LOWRANK_META_FIELDS)
        self.pcol, self.pivots, self.vp = alloc(4 * chunk), alloc(4 * chunk), alloc(8 * words * chunk)
        self.special = alloc(4 * 2 * k)

    @staticmethod
    def bytes_needed(W: int, max_collapses: int) -> int:
        chunk, words, k = measure.LOWRANK_CHUNK, measure.LOWRANK_WORDS, max(1, max_collapses)
        return (4 * measure.PLAN_FIELDS * k + 8 * k * W + 4 + 8 * chunk * W + measure.LOWRANK_TAIL_BYTES
                + 4 * measure.LOWRANK_META_FIELDS + 8 * chunk + 8 * words * chunk + 8 * k)


class _FusedBuffers:
    """What fused windows add (measure.fuse_pass): the next window's buffers (a window of up to
    `widest` collapses, of which the pass counts the first chunk, of up to `chunk` collapses), its
    measured rows made ahead (lowrank_ahead), and pass 1's partial counts and pivot bits."""

    def __init__(self, alloc, n: int, W: int, max_collapses: int, chunk: int):
        k = _FusedBuffers.widest(n, max_collapses)
        self.chunk = chunk  # the run's chunks: a fused pass counts one
        self.window = _WindowBuffers(alloc, W, k)
        self.ax, self.az, self.as_ = alloc(8 * k * W), alloc(8 * k * W), alloc(k)
        self.pcounts = alloc(8 * measure.fused_count_words(n, W, min(k, chunk)))
        # zeroed by each run that fuses; lowrank_reduce clears its rows'
        self.pbits = alloc(_FusedBuffers.pbits_bytes(n))

    @staticmethod
    def pbits_bytes(n: int) -> int:
        """The rows' bits on the next window's pivots: x, then z, LOWRANK_WORDS words each, 2n rows."""
        return 8 * 2 * measure.LOWRANK_WORDS * 2 * max(1, n)

    @staticmethod
    def widest(n: int, max_collapses: int) -> int:
        """The widest window a fused pass may decide: one on the low-rank path (measure.can_fuse),
        so at most measure.batched_width(n) collapses."""
        return max(1, min(max_collapses, measure.batched_width(n)))

    @staticmethod
    def bytes_needed(n: int, W: int, max_collapses: int, chunk: int) -> int:
        k = _FusedBuffers.widest(n, max_collapses)
        return (_WindowBuffers.bytes_needed(W, k) + 16 * k * W + k
                + 8 * measure.fused_count_words(n, W, min(k, chunk)) + _FusedBuffers.pbits_bytes(n))


class _LoopFolding:
    """A reference run's loops, folded as the NumPy engine folds them (`_TableauPass.loop`): a
    reference run draws no coins and no noise, so once the tableau after some iteration equals the
    tableau `period` iterations earlier, every later iteration repeats the records of the one
    `period` before it. Brent's cycle finding compares the device tableau with a saved copy at
    iteration boundaries (one small launch and a 4-byte read each); once it repeats, the records of
    the iterations skipped are copied from the cycle on the device, and the run goes on with the
    iterations that take the tableau to its final state (the last `period` at most).

    A boundary is the first launch of an iteration, or the one after it where the window before
    folds that gate window into its pass (`phase` 1: every state compared then has the body's first
    gate window applied, a fixed Clifford, so equal states stay equal). A loop whose boundaries
    do not all have one phase is not folded, nor is a jump made while a fused pass has decided a
    window past the boundary (`pending`)."""

    def __init__(self, engine, ws: _Workspace, loops, folds):
        self.engine, self.ws = engine, ws
        self.checks = {}  # action index of a boundary -> (loop, iteration, phase)
        for loop in loops:
            phases = {int(loop.starts[k] - 1 in folds) for k in range(1, loop.count)}
            phase = phases.pop()
            bounds = loop.starts + [loop.end]
            if phases or any(bounds[k] + phase >= bounds[k + 1] for k in range(loop.count)):
                continue  # boundaries of mixed phase, or an iteration of no launch past one: every iteration runs
            for k in range(1, loop.count):
                self.checks[loop.starts[k] + phase] = (loop, k, phase)
        self.brent = {}  # id(loop) -> [iteration saved, power], or None once folded
        self.skipped = 0  # iterations not run

    def boundary(self, a: int, X, Z, pending: bool) -> Optional[int]:
        """At boundary action `a` with the tableau in X, Z (and the workspace's S): the action to
        go on from where the loop folds here, else None (after saving or comparing the tableau)."""
        loop, k, phase = self.checks[a]
        if id(loop) not in self.brent:  # its first boundary
            if self.ws.save_tableau(self.engine, X, Z):
                self.brent[id(loop)] = [k, 1]
            else:
                self.checks = {}  # no room for the copy: every iteration runs
            return None
        state = self.brent[id(loop)]
        if state is None:
            return None  # folded already
        saved, power = state
        period = k - saved
        if not self.ws.tableau_differs(self.engine, X, Z):
            j = loop.count - ((loop.count - k) % period or period)  # the iterations from j on run
            if j > k and not pending:
                self.ws.repeat_records(self.engine, loop.first_record + (k - period) * loop.stride,
                                       period * loop.stride, (j - k) * loop.stride)
                self.brent[id(loop)] = None
                self.skipped += j - k
                return loop.starts[j] + phase
        if period == power:
            self.ws.save_tableau(self.engine, X, Z)
            state[:] = [k, 2 * power]
        return None


class _LazyTableauRun(TableauRun):
    """A TableauRun whose inverse tableau stays on the device until it is first read (the records
    are on the host at once). The engine downloads it anyway before its next run_tableau
    overwrites the device buffers, so a late read is always right."""

    def __init__(self, records: np.ndarray, mode: "TableauMode", generation: int):
        self.records = records
        self._mode = mode
        self._generation = generation
        self._tableau: Optional[InverseTableau] = None

    @property
    def tableau(self) -> InverseTableau:
        if self._tableau is None:
            self._tableau = self._mode.download(self._generation)
        return self._tableau

    @tableau.setter
    def tableau(self, value: InverseTableau) -> None:
        self._tableau = value

    def forward_rows(self, half: str) -> Tuple[np.ndarray, np.ndarray]:
        return self._mode.forward_rows(self, half)


class TableauMode:
    """Tableau mode of one CudaEngine: its workspace and the last run's lazy result."""

    def __init__(self, engine):
        self.engine = engine
        self.ws: Optional[_Workspace] = None
        self.generation = 0  # counts tableau runs; a lazy result holds the one it came from
        self.folded_iterations = 0  # loop iterations the last run did not run (`_LoopFolding`)
        self.host_flags = None  # the workspaces' page-locked window flags, kept across them (`_flags`)
        self.pending = None  # weak reference to the last lazy result not yet downloaded
        # run_pieces' two page-locked staging buffers (PieceUploads), kept for the next such call:
        # locking them had taken 13 ms of a 10k-qubit first call (5 buffers as they grew)
        self.piece_buffers: List[Optional[np.ndarray]] = [None, None]

    def run(self, program: Program, schedule: Schedule, key, repetition: int, reference: bool,
            initial: Optional[InverseTableau], records: Optional[np.ndarray] = None) -> TableauRun:
        engine = self.engine
        cuda = engine.cuda
        self.settle_pending()
        self.generation += 1
        dp = engine.device_program(program, schedule)
        plan = dp.tableau_plan()
        n = program.num_qubits
        ws = self._workspace(n, program.num_records, plan.max_collapses, self._needs_scratch(dp))
        if initial is not None:
            _upload(cuda, ws, initial)
        else:
            self._init(ws)
        if records is not None:
            records = np.ascontiguousarray(records, dtype=np.uint8)
            if records.shape != (program.num_records,):
                raise ValueError(f"initial records of shape {records.shape} for a program of "
                                 f"{program.num_records} records")
            if program.num_records:
                cuda.memcpy_htod(ws.rec, records)
        elif program.num_records:
            cuda.memset_d8(ws.rec, 0, program.num_records)
        self.folded_iterations = self._actions(dp, ws, key, repetition, reference)
        return self._finish(ws, program.num_records)

    def run_pieces(self, n: int, num_records: int, pieces, key, whole=None) -> TableauRun:
        """The reference run (every coin 0) of a program that comes in pieces: (Program, Schedule)
        of consecutive runs of its rows (`pieces` may still be compiling the next while the device
        runs this one), each of unitaries and collapses only, `num_records` records in all. Each
        piece goes up without waiting for the device (`PieceUploads`); the records come back once
        the last piece has run. `whole` (Engine.run_reference_pieces): the whole program's device
        tables are made while the last pieces run, its instructions joined on the device from the
        pieces' (its frames need not upload them again). Raises errors.NotStreamable where a piece
        needs a larger workspace than the first piece's (the caller then runs the whole program)."""
        engine = self.engine
        self.settle_pending()
        self.generation += 1
        uploads = PieceUploads(engine, self.piece_buffers)
        kept = []  # every piece's device tables, until the device is past them
        try:
            return self._run_pieces(n, num_records, pieces, key, uploads, kept, whole)
        except BaseException:
            # the copies enqueued still read the page-locked buffers: the device past them first
            try:
                engine.cuda.Context.synchronize()
            except engine.cuda.Error:
                pass
            raise

    def _run_pieces(self, n: int, num_records: int, pieces, key, uploads, kept, whole) -> TableauRun:
        engine = self.engine
        ws = None
        for program, schedule in pieces:
            if ws is not None and not _room(engine, 2 * program.instructions.nbytes):
                # the pieces' tables stay until the run ends: where they (and the whole program's
                # table after them) would crowd the device, the whole program runs instead
                raise NotStreamable(f"no room on the device for a piece of {len(program.instructions):,} rows")
            dp = DeviceProgram(engine.cuda, program, schedule, uploads)
            kept.append(dp)
            plan = dp.tableau_plan()
            scratch = self._needs_scratch(dp)
            if ws is None:
                # room for windows of twice the first piece's widest (and of at least PIECE_COLLAPSES:
                # a first piece may hold only gates), so that like pieces fit
                ws = self._workspace(n, num_records, max(2 * plan.max_collapses, PIECE_COLLAPSES), scratch)
                self._init(ws)
                if num_records:
                    engine.cuda.memset_d8(ws.rec, 0, num_records)
            elif plan.max_collapses > ws.max_collapses or (scratch and not ws.scratch):
                raise NotStreamable(f"a piece's window of {plan.max_collapses} collapses past the workspace's "
                                    f"{ws.max_collapses}")
            uploads.next_piece()
            self._actions(dp, ws, key, 0, True)
        if ws is None:
            raise NotStreamable("a program of no rows")
        if whole is not None:
            program, schedule = whole()
            if _room(engine, schedule.nbytes):  # its host rows are not joined here
                table = engine.cuda.mem_alloc(max(1, schedule.nbytes))
                at = 0
                for dp in kept:
                    size = dp.schedule.nbytes
                    if size:
                        engine.cuda.memcpy_dtod_async(int(table) + at, dp.table, size)
                    at += size
                engine.keep_device_program(DeviceProgram(engine.cuda, program, schedule, uploads, table))
        self.folded_iterations = 0
        return self._finish(ws, num_records)

    def _init(self, ws: "_Workspace") -> None:
        """The workspace's tableau to |0...0>."""
        n, W = ws.n, ws.W
        if n:
            total = 2 * n * W
            self.engine.launcher.launch("init", "tableau_init",
                                        (min(INIT_MAX_BLOCKS, (total + INIT_BLOCK - 1) // INIT_BLOCK), 1),
                                        (INIT_BLOCK, 1, 1), int(ws.X), int(ws.Z), int(ws.S), n, W)

    def passes(self, dp) -> int:
        """Passes over the tableau's rows a run of the program makes: one a gate or collapse window,
        none for a gate window that the collapse window before it takes into its pass (a Fold).
        What a floor of one read and one write of the tableau a pass counts (benchmarks)."""
        _, folds, _ = self._routes(dp)
        return sum(kind in ("G", "C") for kind, *_ in dp.tableau_plan().actions) - len(folds)

    def _needs_scratch(self, dp) -> bool:
        """Whether a window of the program takes the transpose path (the second tableau buffer)."""
        paths, _, _ = self._routes(dp)
        return "transpose" in paths.values()

    def _actions(self, dp, ws: "_Workspace", key, repetition: int, reference: bool) -> int:
        """Enqueue the program's windows on the workspace's tableau and records; returns the loop
        iterations folding skipped."""
        engine = self.engine
        chunks = (engine.lowrank_chunk_apart, *engine.fused_chunks)
        if not all(1 <= c <= measure.LOWRANK_CHUNK for c in chunks):
            raise ValueError(f"a low-rank chunk holds 1 to {measure.LOWRANK_CHUNK} collapses: lowrank_chunk_apart "
                             f"{engine.lowrank_chunk_apart}, fused_chunks {engine.fused_chunks}")
        cuda, launch = engine.cuda, engine.launcher.launch
        program, schedule = dp.program, dp.schedule
        plan = dp.tableau_plan()
        n = program.num_qubits
        ins = schedule.instructions
        W = ws.W
        paths, folds, fuses = self._routes(dp)
        k0, k1 = (int(v) & 0xFFFFFFFF for v in key)
        rep, ref_flag = int(repetition), int(bool(reference))
        T = dp.tables
        X, Z, X2, Z2 = ws.X, ws.Z, ws.X2, ws.Z2
        # Threads a gate: one warp at most. A warp per gate beat 64-256 threads (a shared-memory
        # reduction of the phase per gate) at every size measured: n = 10k / 30k / 100k gate
        # windows 7.3 -> 6.1 / 53 -> 42 / 548 -> 420 ms on an H100.
        gshift = 3 if W <= 8 else 4 if W <= 16 else 5
        ctx_base = int(dp.ctx)
        actions = plan.actions
        if any(f.path == "lowrank" for f in folds.values()):
            # the low-rank groups' counters from zero, no qubit marked (a run cut short may have left marks)
            cuda.memset_d32(ws.gcnt, 0, 4)
            cuda.memset_d8(ws.gmark, 0, n)
            ws.group_counts = (0, 0)
        if fuses and ws.fusion(engine) is not None:
            cuda.memset_d32(ws.fused.pbits, 0, _FusedBuffers.pbits_bytes(n) // 4)  # a run cut short may have left some
        else:
            fuses = {}  # no room for the partial counts: each window makes its own pass 1
        # Chunks past 128 collapses pay where a fused pass counts them (180k qubits: one chunk for the
        # windows of 129-134); apart, their passes 1 cost more than another chunk of 128 (180k qubits,
        # windows of 264: lowrank_counts_160 15.7 ms against 10.1 for lowrank_counts_128)
        ws.chunk = ws.fused.chunk if fuses else engine.lowrank_chunk_apart
        folded = -1  # the gate window a collapse window took into its pass
        counted = -1  # the collapse window a fused pass decided and counted (measure.fuse_pass)
        loops = (_LoopFolding(engine, ws, plan.loops, folds)
                 if reference and engine.fold_loops and plan.loops else None)
        a = 0
        while a < len(actions):
            if loops is not None and a in loops.checks:
                jump = loops.boundary(a, X, Z, pending=counted >= a)
                if jump is not None:
                    a = jump
                    continue
            kind, start, end, ctx_id = actions[a]
            ctx = ctx_base + 4 * CTX_STRIDE * ctx_id
            if a == folded:
                a += 1
                continue
            if kind == "G":
                threads = (end - start) << gshift
                launch("gates", "tableau_gates_window", ((threads + GATE_BLOCK - 1) // GATE_BLOCK, 1),
                       (GATE_BLOCK, 1, 1), T, ctx, start, end, int(X), int(Z), int(ws.S), int(ws.rec), W, k0, k1,
                       rep, ref_flag, gshift)
            elif kind == "F":
                if not reference:
                    launch("confusion", "tableau_confusion", (1, 1), (1, 1, 1), T, ctx, start, int(ws.rec), k0, k1,
                           rep)
            else:
                fold = folds.get(a)
                if fold is not None:
                    folded = a + 1
                if a != counted:
                    ws.settle_window()
                ahead = None
                if a in fuses:
                    _, nstart, nend, nctx = actions[a + 2]
                    ahead = measure.Fuse(nstart, nend, ctx_base + 4 * CTX_STRIDE * nctx)
                X, Z, X2, Z2 = measure.collapse_window(engine, ws, T, ctx, start, end, ins, X, Z, X2, Z2, k0, k1,
                                                       rep, ref_flag, paths[a], fold, a == counted, ahead)
                if ahead is not None:
                    counted = a + 2
            a += 1
        # Keep the buffers in gate layout order for the next run (and the lazy download).
        ws.X, ws.Z, ws.X2, ws.Z2 = X, Z, X2, Z2
        return loops.skipped if loops is not None else 0

    def _finish(self, ws: "_Workspace", num_records: int) -> TableauRun:
        """The run's records to the host (waiting for the device), its tableau left there (lazy)."""
        cuda = self.engine.cuda
        records = np.empty(num_records, dtype=np.uint8)
        if num_records:
            cuda.memcpy_dtoh(records, ws.rec)
        else:
            cuda.Context.synchronize()
        run = _LazyTableauRun(records, self, self.generation)
        self.pending = weakref.ref(run)
        return run

    def _routes(self, dp):
        """({action index of a collapse window: its path (measure.window_path)}, {action index of a
        collapse window: the measure.Fold of the gate window after it that its pass over the rows takes
        with it}, {action indices of the collapse windows whose last pass takes the next collapse
        window's pass 1 (measure.can_fuse)}): found once per DeviceProgram and engine setting, not
        on every run."""
        engine = self.engine
        key = (engine.block_windows, engine.batch_windows, engine.lowrank_windows, engine.lowrank_min,
               engine.fold_gates, engine.fuse_windows, engine.plan_blocks, engine.smem_optin)
        routes = dp.routes.get(key)
        if routes is not None:
            return routes
        n, ins = dp.program.num_qubits, dp.schedule.instructions
        W = max(1, (n + 63) // 64)  # the workspace's words a row (_Workspace.W)
        actions = dp.tableau_plan().actions
        by_window = {}
        paths = {}
        for a, (kind, start, end, _) in enumerate(actions):
            if kind == "C":
                if (start, end) not in by_window:
                    by_window[start, end] = measure.window_path(engine, n, W, ins, start, end)
                paths[a] = by_window[start, end]
        folds, rows_folds = {}, {}
        if engine.fold_gates:
            if dp.foldable is None:  # {gate window: its two-qubit gates, or None}
                dp.foldable = measure.foldable_runs(dp.schedule, [(start, end) for kind, start, end, _ in actions
                                                                  if kind == "G"])
            for a, (kind, start, end, _) in enumerate(actions[:-1]):
                nxt = actions[a + 1]
                if kind != "C" or nxt[0] != "G":
                    continue
                pairs = dp.foldable[nxt[1], nxt[2]]  # unconditional gates: their loop context does not matter
                if pairs is None or not measure.can_fold(engine, paths[a], W, ins, start, end):
                    continue
                if paths[a] == "lowrank":
                    folds[a] = measure.Fold("lowrank", nxt[1], nxt[2], pairs)
                else:
                    rows_folds[a] = (nxt[1], nxt[2], pairs)
        if rows_folds:
            idle = dp.idle_qubits((start, end) for start, end, _ in rows_folds.values())
            for a, (start, end, pairs) in rows_folds.items():
                if idle[start, end] is not None:  # None: past the idle lists' budget
                    folds[a] = measure.Fold("rows", start, end, pairs, *idle[start, end])
        fuses = {a for a in folds if measure.can_fuse(engine, paths, W, a, actions, folds[a])}
        dp.routes[key] = (paths, folds, fuses)
        return paths, folds, fuses

    def _workspace(self, n: int, num_records: int, max_collapses: int, need_scratch: bool) -> _Workspace:
        """The workspace for this shape: the current one when it fits, else a new one."""
        ws = self.ws
        if (ws is None or ws.n != n or ws.num_records != num_records
                or ws.max_collapses < max_collapses or (need_scratch and not ws.scratch)):
            self.ws = ws = None  # the old workspace's memory is free before the new one is sized
            free = self.engine.free_bytes
            need = _Workspace.bytes_needed(n, num_records, need_scratch, max_collapses)
            if need > free():
                raise OutOfMemoryError(
                    f"tableau mode on {n} qubits needs {gib(need)} of GPU memory (the 2n x n-bit X and Z "
                    f"parts{' twice, for the measurement transpose' if need_scratch else ''}); "
                    f"{gib(free())} is available to the engine")
            ws = _Workspace(self.engine, n, num_records, max_collapses, need_scratch, self._flags(max_collapses))
            ws.seg_shift = measure.elimination_seg_shift(self.engine.sm_count, n)
            self.ws = ws  # kept only when whole (an interruption above leaves none)
        return ws

    def lock_flags_soon(self) -> None:
        """Lock the window flags' first buffer (HOST_FLAGS_MIN) on the staging slots' thread now."""
        if self.host_flags is None:
            engine = self.engine

            def lock():
                with engine.context_current():
                    return engine.pinned(HOST_FLAGS_MIN, np.int32, "tableau mode's window flags")

            self.host_flags = lock_pool().submit(lock)

    def _flags(self, max_collapses: int):
        """Page-locked int32 flags for windows of up to `max_collapses` collapses: one buffer of at
        least HOST_FLAGS_MIN, kept for every workspace, so that a new shape's first run locks no memory
        (a lock took 1 ms of a distance-11 code's first call on the H100's host)."""
        need = max(1, max_collapses)
        if isinstance(self.host_flags, concurrent.futures.Future):  # (`lock_flags_soon`)
            try:
                self.host_flags = self.host_flags.result()
            except Exception:  # (OutOfMemoryError, a context gone): locked here instead
                self.host_flags = None
        if self.host_flags is None or len(self.host_flags) < need:
            self.host_flags = self.engine.pinned(max(need, HOST_FLAGS_MIN), np.int32, "tableau mode's window flags")
        return self.host_flags

    def settle_pending(self) -> None:
        """Download the last run's tableau if its result is still alive and has not read it."""
        run = self.pending() if self.pending is not None else None
        self.pending = None
        if run is not None and run._tableau is None:
            run._tableau = self.download(run._generation)

    def download(self, generation: int) -> InverseTableau:
        """The final tableau of run `generation` (a fault on the way: GpuFaultError)."""
        if faults.context_fault() is not None:
            raise faults.dead_engine_error("reading a tableau run's final state")
        cuda = self.engine.cuda
        pushed = cuda.Context.get_current() is None  # read from a thread without the context
        if pushed:
            self.engine._context.push()
        try:
            return self._download(generation)
        except cuda.Error as exc:
            raise self.engine._fault(exc, "reading a tableau run's final state") from exc
        finally:
            if pushed:
                cuda.Context.pop()

    def forward_rows(self, run: "_LazyTableauRun", half: str) -> Tuple[np.ndarray, np.ndarray]:
        """`TableauRun.forward_rows` on the device (forward.cu): from the workspace where the run's
        tableau still is, else from its host copy uploaded for the purpose."""
        what = f"deriving the final state's {half}"
        if faults.context_fault() is not None:
            raise faults.dead_engine_error(what)
        cuda = self.engine.cuda
        pushed = cuda.Context.get_current() is None
        if pushed:
            self.engine._context.push()
        try:
            if run._tableau is None and run._generation == self.generation and self.ws is not None:
                return self._forward_rows(self.ws.X, self.ws.Z, self.ws.S, self.ws.n, half)
            inv = run.tableau
            n = inv.num_qubits
            X = self.engine.alloc(8 * 2 * n * max(1, (n + 63) // 64), what)
            Z = self.engine.alloc(8 * 2 * n * max(1, (n + 63) // 64), what)
            S = self.engine.alloc(2 * n, what)
            if n:
                cuda.memcpy_htod(X, np.ascontiguousarray(np.concatenate([inv.xx, inv.zx])))
                cuda.memcpy_htod(Z, np.ascontiguousarray(np.concatenate([inv.xz, inv.zz])))
                cuda.memcpy_htod(S, np.ascontiguousarray(np.concatenate([inv.xs, inv.zs])))
            return self._forward_rows(X, Z, S, n, half)
        except cuda.Error as exc:
            raise self.engine._fault(exc, what) from exc
        finally:
            if pushed:
                cuda.Context.pop()

    def _forward_rows(self, X, Z, S, n: int, half: str) -> Tuple[np.ndarray, np.ndarray]:
        cuda, launch = self.engine.cuda, self.engine.launcher.launch
        W = max(1, (n + 63) // 64)
        h = {"destabilizers": 0, "stabilizers": 1}[half]
        letters = np.empty((n, n), dtype=np.uint8)
        if not n:
            return letters, np.zeros(0, dtype=bool)
        log_i = self.engine.alloc(4 * n, f"the final state's {half}")
        cuda.memset_d32(log_i, 0, n)
        launch("forward", "forward_log_i", (-(-n // FWD_GENS), -(-W // 32)), (32, FWD_GENS, 1),
               X, Z, S, np.int32(n), np.int32(W), np.int32(h), log_i)
        # The letters a band of 64-generator words at a time: device memory stays bounded.
        band_words = max(1, min(W, FWD_LETTER_BAND_BYTES // (64 * n)))
        band = self.engine.alloc(64 * band_words * n, f"the final state's {half}")
        for w0 in range(0, W, band_words):
            words = min(band_words, W - w0)
            launch("forward", "forward_letters", (-(-n // 64), words), (FWD_LETTER_BLOCK, 1, 1),
                   X, Z, np.int32(n), np.int32(W), np.int32(h), np.int32(w0), band)
            rows = min(n, 64 * (w0 + words)) - 64 * w0
            cuda.memcpy_dtoh(letters[64 * w0 : 64 * w0 + rows], band)
        phases = np.empty(n, dtype=np.uint32)
        cuda.memcpy_dtoh(phases, log_i)
        if np.any(phases & 1):
            raise RuntimeError("the device tableau is not a valid Clifford")  # not reachable
        return letters, ((phases & 3) >> 1).astype(bool)

    def _download(self, generation: int) -> InverseTableau:
        if generation != self.generation or self.ws is None:
            raise RuntimeError("this tableau run's device state was overwritten")  # not reachable
        cuda, ws = self.engine.cuda, self.ws
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


def _upload(cuda, ws: _Workspace, initial: InverseTableau) -> None:
    """Copy `initial` into the workspace in gate layout (rows 0..n-1 xrow, n..2n-1 zrow); the
    caller's arrays are only read (the host copies below are new arrays)."""
    n, W = ws.n, ws.W
    parts = {name: np.asarray(getattr(initial, name)) for name in ("xx", "xz", "zx", "zz", "xs", "zs")}
    bad = [f"{name} {a.shape}" for name, a in parts.items()
           if a.shape != ((n, W) if name[1] != "s" else (n,))]
    if initial.num_qubits != n or bad:
        raise ValueError(f"initial tableau does not fit a program on {n} qubits (parts of shape ({n}, {W}) and "
                         f"signs of shape ({n},) expected): num_qubits {initial.num_qubits}"
                         f"{', ' + ', '.join(bad) if bad else ''}")
    if n == 0:
        return
    X = np.ascontiguousarray(np.concatenate([parts["xx"], parts["zx"]]), dtype=np.uint64)
    Z = np.ascontiguousarray(np.concatenate([parts["xz"], parts["zz"]]), dtype=np.uint64)
    S = np.ascontiguousarray(np.concatenate([parts["xs"], parts["zs"]]), dtype=np.uint8)
    cuda.memcpy_htod(ws.X, X)
    cuda.memcpy_htod(ws.Z, Z)
    cuda.memcpy_htod(ws.S, S)
