"""Frame mode on the device (paper section 6, "Sampling on GPU", with the reference XOR it lacks).

Kernels driven (frames.cu): frames_program_shared (frames in shared memory, where one shot word of
all qubits fits) or frames_program_global (frames in global memory, any n), a block per few shot
words, or frames_program_spread (every multiprocessor on the same few words, grid barriers between
windows) where a call has too few words to give the others work (`spread_pays`). Each runs the whole
program, loops included, in one launch per chunk of shot words; chunks are sized to the device
memory (and `max_shot_words`), and results do not depend on them (docs/engine-semantics.md,
"Frame mode"). With parities (detectors, observables), each chunk's records are reduced on the
device and only the parities are copied: shot-major, as they are transposed (by the frame kernel's
epilogue or parities_shot_major: the records read once more, no pass of their own); otherwise by
record_parities. With `reduce` (reduce_frames), parities.cu's rows_reduce folds each chunk's rows
into one word per row on the device, and only those words are copied. What comes back goes through
page-locked host memory; a chunk whose results are large runs as pieces on their own streams, so
that one piece's copy overlaps the next pieces' kernels. A call whose blocks all run at once (one
wave, which ends all together) sends its shot-major rows back in bands instead, each transposed and
copied once the frame kernel has written its records (`record_progress`, frames_progress_wait).
"""

from __future__ import annotations

import concurrent.futures
import sys
import threading
from typing import List, Optional, Tuple

import numpy as np

from ...core import native, opcodes
from ...core.parities import Parities, parities_shot_major
from ...core.program import REC, Program
from ...errors import OutOfMemoryError
from ...schedule import Schedule
from ...schedule.walk import walk
from ..base import gib
from . import loader
from .device_program import _pad, upload

FRAME_BLOCK = loader.source_define("frames.cu", "QQ_FRAME_BLOCK")
PARITY_BLOCK = loader.source_define("parities.cu", "QQ_PARITY_BLOCK")
ROWS_PER_BLOCK = PARITY_BLOCK // 32  # rows_reduce: a warp per row
TILE_WORDS = loader.source_define("parities.cu", "QQ_TILE_WORDS")  # parities_shot_major's tile
TILE_ROWS = loader.source_define("parities.cu", "QQ_TILE_ROWS")
PIPELINE_PIECES = 4  # pieces (and streams) a chunk runs as when its results come back, at least:
PIPELINE_MAX_PIECES = 8  # a chunk of several waves of blocks runs as pieces of half a wave
PIPELINE_MIN_BYTES = 8 << 20  # below this a copy is too short to be worth overlapping
SPREAD_MAX_WORDS = 64  # shot words of a spread launch at most (a noise queue entry holds a word in 6 bits)
COPY_BANDS = 8  # bands of rows a one-wave call's shot-major result goes back in (`_band_plan`), at most
BAND_ROWS = 1024  # a band's rows: whole tiles of parities_shot_major (128 bytes of a shot's row)
_STAGED_BAND_MIN_BYTES = 1024  # a band's part of a shot's row, at least, for bands through the staging slots
# A round of a block kernel's items (each thread one (row, word) item) with the frames in global
# memory costs about this many with them in shared memory (`spread_pays`)
GLOBAL_ROUND_COST = 2


_PINNED_KEPT = 2  # page-locked result buffers kept for reuse (`_host_records`)
# A page-locked buffer is made once this many earlier calls of the engine missed one as large:
# making it costs about what five calls' copies into touched ordinary memory lose against a kept
# buffer (169 MB: 65-90 ms against 12-18 ms a call; H100 host), so the first four large calls of a
# process copy into ordinary memory and the fifth locks (on the calling thread: locked on a thread
# of its own, the lock slowed the call beside it more than it cost there, its page faults and the
# call's contending; d = 51 10k records: 133-139 ms against 72 ms)
_PINNED_AFTER = 4
_PREFAULT_MIN_BYTES = 8 << 20  # ordinary result memory at least this large is touched on threads
# Results bound for ordinary memory come back through page-locked slots (`_Staging`) when at least
# this large. A slot is a device copy's unit; enough of them that the device fills slots while the
# threads empty others (H100 host, d = 51 10k records / d = 11 1M a call: 3 x 8 MiB 50-70 / 21-25 ms,
# 6 x 8 MiB 32-33 / 18-20 ms, 3 x 32 MiB 31-32 / 16-17 ms, 6 x 4 MiB 55-57 / 26-30 ms)
_STAGING_MIN_BYTES = 8 << 20
_STAGING_SLOT = 8 << 20
_STAGING_SLOTS = 6
# A program's array at least this large goes up through the same slots (`_Staging.upload`): from
# ordinary memory the driver copies at one thread's pace. The instruction table of the paper's
# circuit on an H200 host: 252 MB (100k qubits) in 32-36 ms straight, 9-10 ms through the slots;
# 454 MB (180k) in 66-68 against 15-22 ms (docs/benchmarks-first-call.md, session 30).
_STAGED_UPLOAD_MIN_BYTES = 8 << 20
_PAGE = 4096
# Threads that touch and fill ordinary result memory, at most (one a core): on a 16-core H100 host 16
# were slower than 8 in every round (fresh-memory calls, d = 11 1M records 34-107 against 26-35 ms,
# d = 51 10k 40-60 against 37-41 ms; docs/results/h100-2026-11-25-touch-threads.txt)
_TOUCH_THREADS = 8


class FrameMode:
    """Frame mode of one CudaEngine: its reusable device and page-locked host buffers."""

    def __init__(self, engine):
        self.engine = engine
        self._buffers = {}
        self.parity_tables = None  # (Parities, its device tables, bytes): `_parities_on_device`
        self.reference_bits = None  # (the array, its bits, their device copy): `_reference_on_device`
        self._pinned: List[np.ndarray] = []  # page-locked result buffers (`_host_records`)
        self._misses: List[int] = []  # sizes of the last calls that found no page-locked buffer free
        self._prefault: list = []  # futures touching the pages of this call's ordinary result memory
        self._streams: list = []
        self._staging: Optional[_Staging] = None  # made (on a thread) at the engine's first call
        self._bar = None  # the spread kernel's two barrier counters (zeroed; each launch leaves them so)
        self._expected = None  # ((records, words, shot_major), the host memory, page-locked?) made ahead: `expect`

    def start_staging(self) -> None:
        """Start locking the staging slots (on a thread) and the touch pool's threads now, not at the
        first call that needs them."""
        if self._staging is None:
            self._staging = _Staging(self.engine)
        start_touch_threads()

    def upload(self, a: np.ndarray):
        """A device copy of `a` (contiguous, at least one element; `device_program.upload`'s
        contract): through the staging slots where they are locked and `a` has at least
        _STAGED_UPLOAD_MIN_BYTES, else straight from its own memory."""
        staging = self._staging
        if a.nbytes >= _STAGED_UPLOAD_MIN_BYTES and staging is not None and staging.ready():
            return staging.upload(a)
        return upload(self.engine.cuda, a)

    def expect(self, num_records: int, shots: int, shot_major: bool) -> None:
        """The result memory of the next call (records, no parities), made now and its pages touched
        on the pool's threads while the caller makes the schedule and the reference sample: a first
        call at d = 11 of 1M shots waited for the touching of its 180 MB after those (`_host_records`
        is the same either way: the next `sample` takes it, or drops it where that call asks for
        another)."""
        self._expected = None
        words = (shots + 63) // 64
        if num_records <= 0 or words <= 0 or 8 * words * num_records < _PREFAULT_MIN_BYTES:
            return
        count = _result_words(num_records, words, shot_major)
        self._expected = ((num_records, words, bool(shot_major)),) + self._host_records(count)

    def _result_memory(self, rows: int, words: int, shot_major: bool, expected: bool) -> Tuple[np.ndarray, bool]:
        """`_host_records` of a call's records (`rows` of them, `words` shot words): the memory `expect`
        made where it was for this call (`expected`), else new."""
        made, self._expected = self._expected, None
        if made is not None and expected and made[0] == (rows, words, bool(shot_major)):
            return made[1], made[2]
        return self._host_records(_result_words(rows, words, shot_major))

    def sample(self, program: Program, schedule: Schedule, key, reference: np.ndarray, shots: int,
               parities: Optional[Parities] = None, shot_major: bool = False, *,
               first_word: int = 0, reduce: Optional[str] = None) -> Tuple[np.ndarray, Optional[float]]:
        """The records (or `parities`) of `shots` shots (engine.sample_frames) and the device time
        of their kernels (None when no kernel ran: no records or no shots). `first_word`: the
        absolute shot word of the call's word 0; only the kernels' random streams see it (their
        `word0`), every output index stays local to the call. `reduce` ("popcount" or "xor"):
        uint64 [rows] instead, each row reduced over the shots on the device (reduce_frames)."""
        first_word = int(first_word)
        if first_word < 0:
            raise ValueError(f"first_word must be >= 0, got {first_word}")
        engine = self.engine
        cuda, launch = engine.cuda, engine.launcher.launch
        if self._staging is None:
            self._staging = _Staging(engine)
        words = (shots + 63) // 64
        num_records = program.num_records
        rows = num_records if parities is None else parities.count
        row_bytes = (rows + 7) // 8  # of a shot-major row
        if num_records == 0 or words == 0 or rows == 0:
            empty = np.zeros((rows, words), dtype=np.uint64)
            if reduce is not None:
                return np.zeros(rows, dtype=np.uint64), None
            return (parities_shot_major(empty, shots) if shot_major else empty), None
        locked = False  # whether `out` is page-locked
        if reduce is not None:
            self._expected = None
            shot_major = False
            out = np.zeros(rows, dtype=np.uint64)
        else:
            out, locked = self._result_memory(rows, words, shot_major, parities is None)
            # shot-major: Stim's bit-packed samples, a row of ceil(rows / 8) bytes per shot
            out = out.view(np.uint8).reshape(64 * words, row_bytes) if shot_major else out.reshape(rows, words)
        dp = engine.device_program(program, schedule)
        ref = self._reference_on_device(reference)
        n = program.num_qubits
        slab_word = 16 * n  # fx and fz of one shot word, all qubits
        shared = self.fits_shared(n) and engine.frame_memory != "global"
        spread = self.spread_pays(dp, words, shared)
        shared = shared and not spread
        if engine.frame_memory == "shared" and not shared and not spread:
            most = engine.smem_optin - self._static_shared("frames_program_shared")
            raise OutOfMemoryError(f"the frames of {n} qubits need {slab_word} bytes of shared memory per 64 shots; "
                                   f"a block has at most {most} besides the kernel's own")
        # Shot-major parities are XORed from the records by the transpose itself; else record_parities
        # writes them to a buffer of their own first (also the former's oracle: fused_parities False).
        gathered = parities is not None and shot_major and engine.fused_parities
        per_word = (8 * num_records + (0 if shared else slab_word)
                    + (0 if parities is None or gathered else 8 * rows) + (64 * row_bytes if shot_major else 0))
        held = sum(b[1] for b in self._buffers.values())  # reused, so available to this call
        budget = engine.free_bytes() + held - (1 << 20)
        chunk = budget // per_word if per_word else words
        if engine.max_shot_words:
            chunk = min(chunk, int(engine.max_shot_words))
        chunk = int(min(chunk, words, SPREAD_MAX_WORDS if spread else words))
        if chunk < 1:
            raise OutOfMemoryError(
                f"frame mode needs {per_word} bytes of GPU memory per 64 shots ({num_records} records"
                f"{'' if shared else f', frames of {n} qubits'}); {gib(max(budget, 0))} is available")
        defer_noise = int(engine.frame_noise == "deferred")
        slots = 2 * engine.sm_count  # blocks resident at once: two a multiprocessor
        name = "frames_program_spread" if spread else "frames_program_shared" if shared else "frames_program_global"
        room = self.dynamic_room(name)
        # Shot-major records (or parities) come from the frame kernel itself where 64 shots' rows fit
        # its shared memory (qq_shot_major_epilogue). Longer rows (over ~14k: then a block's records
        # are no longer in L2 when it ends, and its one-word reads of them cost whole sectors from
        # DRAM) are transposed afterwards, by parities_shot_major (also the oracle).
        fused = bool(shot_major and engine.fused_shot_major and 64 * row_bytes <= room
                     and (parities is None or gathered))
        resident = slots  # blocks that run at once
        if shared:
            cap = int(min(64, max(1, room // slab_word))) if slab_word else 64
            alone = self.dynamic_room(name, alone=True)  # one block a multiprocessor
            S = self._words_a_block(chunk, slots, cap, int(min(64, alone // slab_word)) if slab_word else 64)
            if S * slab_word > room:
                room, resident = alone, engine.sm_count
        elif spread:
            S = chunk  # the grid's words, one slab
        else:
            S = int(max(1, min(8, -(-chunk // (2 * slots)))))
        blocks = -(-chunk // S)
        # One wave of blocks ends all at once, so the rows' transpose and copy would all come after it:
        # instead each band of rows goes once the blocks have written its records (frames_progress_wait)
        # (the records' rows then `stride` words apart: whole 128-byte lines a row, where bands read them
        # while the kernel writes the next rows)
        stride = 16 * -(-chunk // 16)
        copy_bytes = (64 * row_bytes if shot_major else 8 * rows) * chunk
        can_stage = (reduce is None and not locked and copy_bytes >= _STAGING_MIN_BYTES and self._staging.ready())
        # Into page-locked memory, or through the staging slots where a band's part of a shot's row is
        # wide (each band's columns go into the result a part of a row at a time: at d = 25 10k shots,
        # 254 bytes a band, that lost 1.0-1.8 ms, while d = 51's 2,176 bytes gained)
        banded = (engine.banded_copies and shot_major and not fused and (parities is None or gathered)
                  and (locked or (can_stage and row_bytes >= COPY_BANDS * _STAGED_BAND_MIN_BYTES))
                  and not spread and chunk == words and blocks <= resident and rows >= 2 * BAND_ROWS
                  and not program.confusions and budget - chunk * per_word >= 8 * num_records * (stride - chunk))
        stride = stride if banded else chunk
        out_dev = self._scratch("frames_out", 8 * num_records * stride)
        slab = None if shared else self._scratch("frames_slab", 8 * 2 * n * S * blocks)
        copied = out_dev  # the rows that come back, or that parities_shot_major transposes
        tables = (0, 0, 0)  # the gather of parities_shot_major or the frame kernel's epilogue: none
        if parities is not None:
            offsets, flat, flip = self._parities_on_device(parities)
            if gathered:
                tables = (int(offsets), int(flat), int(flip))
            else:
                copied = self._scratch("parities_out", 8 * rows * chunk)
        if shot_major:
            by_shot = self._scratch("shot_major", 64 * row_bytes * chunk)
        if reduce is not None:
            acc = self._scratch("reduced", 8 * rows)
            cuda.memset_d8(acc, 0, 8 * rows)
            op = {"popcount": 0, "xor": 1}[reduce]
            tail = np.uint64((1 << (shots % 64)) - 1 if shots % 64 else (1 << 64) - 1)
        # A chunk whose results come back to the host runs as pieces, each on its own stream: the
        # copy of one piece overlaps the kernels of the next, and the next piece's blocks fill the
        # multiprocessors that the last blocks of one leave idle. Pieces are whole blocks of S words;
        # over several waves of blocks, half a wave each (the last copy, which nothing overlaps, is
        # then shorter: d=11 1M shots 7.0 -> 6.6 ms on an H100), never fewer than PIPELINE_PIECES
        # (smaller pieces of one wave ran slower: d=51 10k shots 15.7 -> 21.7 ms with 6).
        pieces = 1
        if reduce is None and copy_bytes >= engine.pipeline_min_bytes and not spread and not banded:  # (spread: one launch)
            pieces = min(PIPELINE_MAX_PIECES, max(PIPELINE_PIECES, -(-blocks // max(1, slots // 2))))
        bands, signals = self._band_plan(program, schedule, rows, parities) if banded else ((), None)
        # (a banded call's kernel on a stream of its own: the default stream would wait for the others)
        streams = self._stream_pool(1 + len(bands) if banded else pieces) if pieces > 1 or banded else [None]
        staging = self._staging if can_stage and (pieces > 1 or banded) else None
        if staging is not None:
            staging.discard()  # what an interrupted call left filled (the device has drained since)
        k0, k1 = (int(v) & 0xFFFFFFFF for v in key)
        progress = (0, 0, 0)  # the frame kernel's (signal_at, num_signals, progress): none
        if banded:
            counters = self._scratch("band_progress", 8 * len(bands))  # signal_at, then progress
            cuda.memcpy_htod_async(counters, signals, streams[0])
            cuda.memset_d32_async(int(counters) + 4 * len(bands), 0, len(bands), streams[0])
            progress = (int(counters), len(bands), int(counters) + 4 * len(bands))
            # the bands wait for the counters to be zeroed: else a band could read the last call's counts
            zeroed = cuda.Event()
            zeroed.record(streams[0])
            for stream in streams[1:]:
                stream.wait_for_event(zeroed)
        timed = []  # per chunk, its pieces' frame-kernel events, read once the device is past them
        for start in range(0, words, chunk):
            count = min(chunk, words - start)
            timed.append([])
            plan = self._piece_plan(count, S, pieces)
            # Every piece's kernels first, then their copies: a copy through the staging slots waits on
            # this thread for a slot to empty, and kernels launched after it had waited too (d = 11 1M
            # shots into fresh memory: each piece's kernel launched after the copies before it; d = 51
            # 10k: the last two pieces' kernels launched once the first piece's copy had begun to drain).
            for i, (at, part) in enumerate(plan):
                stream = streams[i % len(streams)]
                shot_rows = int(by_shot) + 64 * row_bytes * at if fused else 0
                timed[-1].append(self._piece(name, n, S, room, dp, ref, out_dev, stride, first_word + start + at, at,
                                             part, slab, k0, k1, defer_noise, stream, shot_rows, row_bytes,
                                             (rows, *tables), progress))
                if parities is not None and not gathered:
                    total = rows * part
                    launch("parities", "record_parities", ((total + PARITY_BLOCK - 1) // PARITY_BLOCK, 1),
                           (PARITY_BLOCK, 1, 1), int(out_dev) + 8 * at, chunk, int(offsets), int(flat), int(flip),
                           int(copied) + 8 * at, chunk, rows, part, stream=stream)
                if reduce is not None:  # the call's last word keeps only its shots' bits
                    tail_word = count - 1 if start + count == words else -1
                    launch("parities", "rows_reduce", (-(-rows // ROWS_PER_BLOCK), 1), (PARITY_BLOCK, 1, 1),
                           int(copied), chunk, rows, part, tail_word, tail, op, int(acc))
                elif banded:
                    for b, (r0, r1) in enumerate(bands):  # each band on its stream, once its records are written
                        band_stream = streams[1 + b]
                        launch("frames", "frames_progress_wait", (1, 1), (1, 1, 1), progress[2] + 4 * b, -(-part // S),
                               stream=band_stream)
                        self._transpose(copied, stride, r0, r1, by_shot, row_bytes, part, gathered, tables,
                                        band_stream, band=True)
                elif shot_major and not fused:  # 64·part shot rows of row_bytes, back to back as the host wants them
                    self._transpose(int(copied) + 8 * at, stride, 0, rows, int(by_shot) + 64 * row_bytes * at,
                                    row_bytes, part, gathered, tables, stream)
            self._await_prefault()
            if banded:  # each band's bytes of every shot's row, on its stream (the call is one chunk)
                for b, (r0, r1) in enumerate(bands):
                    a, z = r0 // 8, (r1 + 7) // 8
                    if staging is None or not staging.rows(streams[1 + b], out[:, a:z], int(by_shot) + a, row_bytes):
                        self._copy_band(out, a, z, int(by_shot), streams[1 + b])
            for i, (at, part) in enumerate(plan if reduce is None and not banded else ()):
                stream = streams[i % len(streams)]
                if shot_major:
                    device_rows = int(by_shot) + 64 * row_bytes * at
                    host_rows = out[64 * (start + at): 64 * (start + at + part)]
                    if staging is not None and staging.rows(stream, host_rows, device_rows, row_bytes):
                        pass
                    elif stream is None:
                        cuda.memcpy_dtoh(host_rows, device_rows)
                    else:
                        cuda.memcpy_dtoh_async(host_rows, device_rows, stream)
                elif staging is not None and staging.rows(stream, out[:, start + at: start + at + part],
                                                            int(copied) + 8 * at, 8 * chunk):
                    pass
                else:  # the piece's columns of every row, straight into `out`
                    copy = cuda.Memcpy2D()
                    copy.set_src_device(int(copied) + 8 * at)
                    copy.src_pitch = 8 * chunk
                    copy.set_dst_host(out)
                    copy.dst_pitch = 8 * words
                    copy.dst_x_in_bytes = 8 * (start + at)
                    copy.width_in_bytes = 8 * part
                    copy.height = rows
                    self._copy(copy, stream, aligned=True)
            for stream in streams:  # the chunk's buffers are free again (and its events past)
                if stream is not None:
                    stream.synchronize()
        if staging is not None:
            staging.finish()  # the slots' last pieces into `out`
        if reduce is not None:
            cuda.memcpy_dtoh(out, acc)  # synchronous, like the copies above: every event is past
        # Kernel time: per chunk, from its first kernel's start to its last kernel's end (pieces overlap).
        kernel_s = sum(max(end.time_since(events[0][0]) for _, end in events) for events in timed) / 1000.0
        return (out[:shots] if shot_major else out), kernel_s

    def fits_shared(self, n: int) -> bool:
        """Whether one shot word's frames of n qubits (16 n bytes) fit a block's shared memory beside
        the block kernel's static part (its noise queues)."""
        return 16 * n + self._static_shared("frames_program_shared") <= self.engine.smem_optin

    def spread_pays(self, dp, words: int, shared: bool) -> bool:
        """Whether a call of `words` shot words runs the spread kernel (`engine.spread_frames`: None
        decides, True / False always / never); `shared`: whether the block kernel's frames would be
        in shared memory. The block kernels give each block its own words, so a call of few words
        leaves most multiprocessors idle while each of its blocks walks every row (a one-shot call of
        the paper's circuit at 180k qubits: 12.6M rows, 91 ms on one H100 multiprocessor, 3.5 ms
        spread). Counted in rounds (each thread of a block one (row, word) item, about 1-2 us), a
        block kernel takes sum_w ceil(rows_w / FRAME_BLOCK) rounds a word (GLOBAL_ROUND_COST times
        that with its frames in global memory), the spread kernel
        sum_w ceil(rows_w * words / (sm_count * FRAME_BLOCK)), and about a round more a window (its
        grid barrier) and a run (each walked by every block: the spread kernel spends them on few
        items). Fitted on an H100: the paper's circuits at 5k to 180k qubits and surface codes of
        d = 25 and 51, 1 to 64 words (docs/benchmarks-first-call.md). Never under frame_memory
        "shared" or "global", the block kernels' settings."""
        engine = self.engine
        if engine.spread_frames is not None:
            return bool(engine.spread_frames)
        if engine.frame_memory != "auto" or words > min(SPREAD_MAX_WORDS, engine.sm_count // 2):
            return False
        rows, runs = dp.window_rows()
        block = int(np.sum(-(-rows // FRAME_BLOCK))) * (1 if shared else GLOBAL_ROUND_COST)
        spread = int(np.sum(-(-rows * words // (engine.sm_count * FRAME_BLOCK)))) + len(rows) + runs
        return spread < block

    def _barrier(self):
        """The spread kernel's barrier counters (made zeroed; every launch leaves them zeroed)."""
        if self._bar is None:
            bar = self.engine.alloc(8, "frame mode's barrier counters")
            self.engine.cuda.memset_d32(bar, 0, 2)
            self._bar = bar
        return self._bar

    @staticmethod
    def _words_a_block(words: int, slots: int, cap: int, alone_cap: int) -> int:
        """Shot words a block takes: as few waves of `slots` blocks (two a multiprocessor) as `cap`
        words a block allow, the words spread evenly over them (a last, part-filled wave would cost a
        whole one). Where that leaves more blocks than multiprocessors but fewer than twice as many,
        some multiprocessors would run two blocks and the rest one (d = 51 10k shots: 157 one-word
        blocks on 132, whose doubled-up piece took 13.6 ms against 9.5); the words then go out one
        block a multiprocessor if they fit its shared memory alone (`alone_cap` words), since a block
        walks the program once for all its words (d = 51: frame kernels 13.8 -> 11.1 ms)."""
        waves = -(-words // (slots * cap))
        S = int(max(1, -(-words // (slots * waves))))
        sms = slots // 2
        if sms < -(-words // S) < slots and -(-words // sms) <= alone_cap:
            S = -(-words // sms)
        return S

    @staticmethod
    def _piece_plan(count: int, S: int, pieces: int) -> list:
        """(first word, words) of each piece of a chunk of `count` words: whole blocks of S words."""
        per_piece = -(-count // pieces)
        per_piece = S * -(-per_piece // S)  # rounded up to whole blocks
        return [(at, min(per_piece, count - at)) for at in range(0, count, per_piece)]

    def _transpose(self, records, stride: int, r0: int, r1: int, by_shot, row_bytes: int, count: int,
                   gathered: bool, tables, stream, band: bool = False) -> None:
        """parities_shot_major on rows [r0, r1) of `count` words, `stride` words apart from `records`
        on (`gathered`: the parities that `tables` gather from those records): into bytes r0 / 8 on
        of each shot's row at `by_shot` (rows of row_bytes). `band`: parities_shot_major_band, which
        reads the records at L2 while the frame kernel writes more of them."""
        width = r1 - r0
        row_words = -(-width // 64)
        grid = (-(-count // TILE_WORDS), -(-row_words // TILE_ROWS))
        if gathered:  # the band's parities' tables, the records whole
            offsets, flat, flip = tables
            src, tables = int(records), (int(offsets) + 4 * r0, int(flat), int(flip) + r0)
        else:
            src = int(records) + 8 * stride * r0
        name = "parities_shot_major_band" if band else "parities_shot_major"
        self.engine.launcher.launch("parities", name, grid, (PARITY_BLOCK, 1, 1), src, stride, width,
                                    int(by_shot) + r0 // 8, (width + 7) // 8, row_bytes, count, *tables, stream=stream)

    def _copy_band(self, out: np.ndarray, a: int, b: int, by_shot: int, stream) -> None:
        """Bytes [a, b) of every shot's row of `out` (page-locked, rows of out.shape[1] bytes) from the
        device's rows at `by_shot`, laid out alike, in one 2-D copy on `stream`."""
        pitch = out.shape[1]
        copy = self.engine.cuda.Memcpy2D()
        copy.set_src_device(by_shot + a)
        copy.src_pitch = pitch
        copy.set_dst_host(out)
        copy.dst_pitch = pitch
        copy.dst_x_in_bytes = a
        copy.width_in_bytes = b - a
        copy.height = out.shape[0]
        self._copy(copy, stream, aligned=False)

    def _band_plan(self, program: Program, schedule: Schedule, rows: int, parities) -> tuple:
        """The bands of a banded call: (r0, r1) of each, whole BAND_ROWS apart but the last, and per
        band the records the frame kernel has written when every record it needs is (uint32
        `signal_at`, not decreasing; `record_progress`). A band of parities needs every record below
        its parities' last."""
        # kept with the program, a plan per Parities (a loop sampling records and detection events in
        # turn asks for two), beside the walk they share
        plans = program.derived.setdefault("band_plans", {})
        kept = plans.get(id(parities))
        if kept is not None and kept[0] is parities and kept[1] is schedule:
            return kept[2]
        size = BAND_ROWS * -(-rows // (COPY_BANDS * BAND_ROWS))
        bands = [(r0, min(rows, r0 + size)) for r0 in range(0, rows, size)]
        if parities is None:
            need = np.array([r1 for _, r1 in bands], dtype=np.int64)
        else:
            need = np.array([int(parities.records[parities.offsets[r0]:parities.offsets[r1]].max(initial=-1)) + 1
                             for r0, r1 in bands], dtype=np.int64)
        found = program.derived.get("record_progress")  # (the schedule it walked, its result)
        if found is None or found[0] is not schedule:
            found = program.derived["record_progress"] = (schedule, record_progress(program, schedule))
        counts, complete = found[1]
        at = np.searchsorted(complete, need)  # the first run after which the records below `need` are written
        never = 0xFFFFFFFF  # (records no run writes: the kernel's end gives every count)
        reached = counts[np.minimum(at, len(counts) - 1)] if len(counts) else np.zeros(len(need), dtype=np.int64)
        signal_at = np.where(need == 0, 0, np.where(at < len(counts), reached, never))
        signal_at = np.maximum.accumulate(signal_at).astype(np.uint32)
        plan = (bands, signal_at)
        if len(plans) >= 8:
            plans.clear()
        plans[id(parities)] = (parities, schedule, plan)
        return plan

    def _piece(self, name, n, S, room, dp, ref, out_dev, chunk, word0, at, part, slab, k0, k1, defer_noise, stream,
               shot_rows, row_bytes, parities, progress=(0, 0, 0)):
        """Launch the frame kernel `name` on `part` words from chunk column `at` (absolute word
        `word0`), S words a block. In global memory its blocks take the chunk's slabs from block
        at / S on (pieces are whole blocks). `shot_rows` (0: none): the piece's shot-major
        rows, written by the kernel (staged in its dynamic shared memory, `room` bytes at most);
        `parities` (their count and device tables, or null tables): the rows' parities of the
        records instead; `progress`: the block kernels' (signal_at, num_signals, progress) or
        zeros. Returns the launch's events."""
        grid = (-(-part // S), 1)
        launch = self.engine.launcher.launch
        if name == "frames_program_spread":  # one block a multiprocessor: all resident (its grid barrier)
            stage = 64 * row_bytes * min(S, room // (64 * row_bytes)) if shot_rows else 0
            return launch("frames", name, (self.engine.sm_count, 1), (FRAME_BLOCK, 1, 1), dp.tables, int(ref),
                          int(out_dev) + 8 * at, chunk, word0, part, S, int(slab), k0, k1, defer_noise, shot_rows,
                          row_bytes, stage, int(self._barrier()), *parities, shared_size=stage, timed=True,
                          stream=stream)
        out = int(out_dev) + 8 * at
        slab_bytes = 8 * 2 * n * S if slab is None else 0
        stage = 0
        if shot_rows:  # the slab, or at least 64 shots' rows (in global memory up to S words' rows)
            stage = max(slab_bytes, 64 * row_bytes * (1 if slab is None else min(S, room // (64 * row_bytes))))
        smem = max(slab_bytes, stage)
        if slab is None:
            return launch("frames", name, grid, (FRAME_BLOCK, 1, 1), dp.tables, int(ref), out, chunk, word0, part,
                          S, k0, k1, defer_noise, shot_rows, row_bytes, stage, *parities, *progress, shared_size=smem,
                          timed=True, stream=stream)
        block_slab = 8 * 2 * n * S
        return launch("frames", name, grid, (FRAME_BLOCK, 1, 1), dp.tables, int(ref), out, chunk, word0, part, S,
                      int(slab) + block_slab * (at // S), k0, k1, defer_noise, shot_rows, row_bytes, stage,
                      *parities, *progress, shared_size=smem, timed=True, stream=stream)

    def _copy(self, copy, stream, aligned: bool) -> None:
        """A 2-D device-to-host copy: on `stream` (asynchronous) or at once."""
        if stream is None:
            copy(aligned=aligned)
        else:
            copy(stream)

    def _stream_pool(self, count: int) -> list:
        while len(self._streams) < count:
            self._streams.append(self.engine.cuda.Stream())
        return self._streams[:count]

    def _host_records(self, count: int) -> Tuple[np.ndarray, bool]:
        """Host memory for the records (`count` words) and whether it is page-locked. Page-locked memory
        takes the device's copy at full link speed (169 MB: 3.1 ms on an H100 host) but costs far more
        to make than to use (65-90 ms), so at most `_PINNED_KEPT` such buffers are kept and reused
        whenever no result holds them. A call that finds none free takes ordinary memory (its pages
        touched on threads, `_start_prefault`, and filled through the staging slots, `_Staging`); one is
        made only when `_PINNED_AFTER` earlier calls found none free at this size, and while fewer than
        `_PINNED_KEPT` exist. So a process's first large calls (a first call on a new circuit, its
        repeat) do not pay for locking, a loop that keeps the previous result while it samples the next
        settles on two buffers used in turn, and a loop that keeps every result stops making buffers
        once both are held."""
        for buf in self._pinned:
            # 3 references when no result holds it: the list, `buf` and getrefcount's argument
            if buf.size >= count and sys.getrefcount(buf) <= 3:
                return buf[:count], True
        held = [b for b in self._pinned if sys.getrefcount(b) > 3]  # (the free ones are too small)
        earlier = sum(1 for size in self._misses if size >= count)
        self._misses = self._misses[-7:] + [count]
        if earlier < _PINNED_AFTER or len(held) >= _PINNED_KEPT:
            out = np.empty(max(count, 1), dtype=np.uint64)[:count]
            self._start_prefault(out)
            return out, False
        buf = self.engine.pinned(max(count, 1), np.uint64, "frame mode's results")
        self._pinned = held + [buf]  # a free buffer too small for this call goes
        return buf[:count], True

    def _start_prefault(self, out: np.ndarray) -> None:
        """Touch a byte of each page of fresh ordinary memory on several threads while the kernels
        run: a pageable copy into untouched memory faults its pages in one at a time on the copying
        thread (169 MB on an H100 host: 56 ms against 12-18 ms once touched, which eight threads do
        in 6 ms)."""
        raw = out.view(np.uint8)
        if raw.nbytes < _PREFAULT_MIN_BYTES:
            return
        pool, workers = _touch_pool()
        step = -(-raw.nbytes // workers // _PAGE) * _PAGE
        self._prefault = [pool.submit(raw[i:i + step][::_PAGE].fill, 0) for i in range(0, raw.nbytes, step)]

    def _await_prefault(self) -> None:
        """Before the first copy into the call's result memory: its pages are touched."""
        touching, self._prefault = self._prefault, []
        for future in touching:
            future.result()

    def dynamic_room(self, kernel: str, alone: bool = False) -> int:
        """Bytes of dynamic shared memory a block of frame kernel `kernel` may take: two blocks a
        multiprocessor (228 KiB), each its dynamic share, its static noise queues and the 1 KiB the
        driver keeps; `alone`: one block a multiprocessor, all a block may opt in to. The shot-major
        epilogue runs where 64 shots' rows fit in the share of two."""
        most = self.engine.smem_optin if alone else min(self.engine.smem_optin, 113 * 1024)
        return most - self._static_shared(kernel)

    def _static_shared(self, kernel: str) -> int:
        """Bytes of shared memory `kernel` declares statically (a block's dynamic share comes on top)."""
        cuda = self.engine.cuda
        return int(self.engine.launcher.functions[kernel].get_attribute(cuda.function_attribute.SHARED_SIZE_BYTES))

    def _reference_on_device(self, reference: np.ndarray):
        """The device copy of the reference sample's bits, kept for the last array uploaded while its
        bits stay the same: a sampling loop passes the same array each call (at d = 51 its 135 KB had
        been padded and uploaded every call, the upload waiting for the device)."""
        bits = np.asarray(reference, dtype=np.uint8)
        kept = self.reference_bits
        if kept is not None and kept[0] is reference and np.array_equal(kept[1], bits):
            return kept[2]
        self.reference_bits = None  # the old copy goes first
        device = upload(self.engine.cuda, _pad(bits & 1, np.uint8))
        self.reference_bits = (reference, bits.copy(), device)
        return device

    def _parities_on_device(self, parities: Parities) -> tuple:
        """The device copy of `parities`' tables (offsets, records, flips), kept for the last
        Parities object uploaded: a sampling loop passes the same one each call (the simulator keeps
        it with its program), and at d = 51 its three tables (1.7 MB) had been uploaded every call."""
        kept = self.parity_tables
        if kept is None or kept[0] is not parities:
            self.parity_tables = None  # the old copy goes first
            cuda = self.engine.cuda
            tables = tuple(upload(cuda, _pad(a, t)) for a, t in
                           ((parities.offsets, np.int32), (parities.records, np.int32), (parities.flip, np.uint8)))
            nbytes = 4 * (len(parities.offsets) + len(parities.records)) + len(parities.flip)
            kept = self.parity_tables = (parities, tables, nbytes)
        return kept[1]

    def _scratch(self, name: str, nbytes: int):
        """A device buffer reused across calls (grown when too small: the old one is freed first)."""
        buf = self._buffers.get(name)
        if buf is None or buf[1] < nbytes:
            self._buffers.pop(name, None)
            buf = None
            buf = self._buffers[name] = (self.engine.alloc(nbytes, f"frame mode's {name} buffer"), int(nbytes))
        return buf[0]


def record_progress(program: Program, schedule: Schedule) -> Tuple[np.ndarray, np.ndarray]:
    """The frame kernels' walk over the schedule's runs, loops as they run (`schedule.walk`, as
    frames.cu walks them): after each run of M or MR rows, the records written so far, counted a row
    at a time as the kernels count them (int64, increasing), and how many records from record 0 on
    are all written (not decreasing). The schedule may write a later record before an earlier one,
    which is why the two differ."""
    ins = schedule.instructions
    writes = {opcodes.CODE["M"], opcodes.CODE["MR"]}
    written = np.zeros(program.num_records + 1, dtype=bool)  # (a last False: the scan below stops)
    counts, complete = [], []
    count = done = 0
    for step in walk(program, schedule):
        if step.op not in writes:
            continue
        written[ins[step.start:step.end, REC] + step.rec_shift] = True
        count += step.end - step.start
        while written[done]:  # on to the first record not yet written, a stretch at a time
            stretch = written[done:done + 4096]
            first_unwritten = int(stretch.argmin())
            done += first_unwritten if not stretch[first_unwritten] else len(stretch)
        counts.append(count)
        complete.append(done)
    return np.array(counts, dtype=np.int64), np.array(complete, dtype=np.int64)


class _Staging:
    """Page-locked slots through which a result bound for ordinary memory comes back (and a program's
    large arrays go up: `upload`): the device
    copies a slot's worth at link speed, asynchronously on the piece's stream, and the touch pool's
    threads copy full slots into the result while the device fills the next. A slot is emptied on
    the pool as soon as its copy is seen done (`_start_drains`), so that several empty at once; it
    had been emptied on the calling thread when taken again, which held the copies to one slot's
    pace (H100 host, results in fresh memory: d = 11 1M shots' records 21.8 -> 13.6 ms a call,
    d = 25 100k 26.2 -> 16.3 ms, d = 51 10k 29.7 -> 20.4 ms; `async_drains` False gives that
    code, for benchmarks). Ordinary memory takes
    a device copy only through the driver's own staging, on the calling thread (H100 host, results
    kept so that each call takes fresh ordinary memory: d = 11 1M shots' records 31-38 ms a call
    copied straight, 18-20 ms through six slots; d = 51 10k 56-61 -> 32-33 ms; into a kept
    page-locked buffer 7 and 16 ms). The slots (_STAGING_SLOTS of _STAGING_SLOT bytes, 48 MiB) are
    locked on a thread at the engine's first call; until they are, and for a result whose row does
    not fit a slot, copies go straight to `out`. Slots are emptied in the order they were filled,
    each before it is filled again.

    Rows back to back on both sides (a shot-major piece) go as one line. A 2-D copy of lines a row
    long runs at the line's pace, and a row can be a few bytes (Stim's layout of a d = 3 surface
    code's 33 records: 5 bytes a shot): 8 MiB into a slot took 2.15 ms in lines of 5 bytes, 0.37 ms
    in lines of 40 and 0.16 ms as one line (H100 host; d = 3 10M shots' records into fresh memory
    20.8 -> 7.8 ms a call). `lines_as_one` False: the 2-D copy (the code before, for benchmarks)."""

    lines_as_one = True
    async_drains = True  # False: each slot emptied on the calling thread when it is taken again (the code before)
    drain_parts = 2  # tasks a slot's drain is cut into

    def __init__(self, engine):
        self.engine = engine

        def lock():
            with engine.context_current():
                return engine.pinned(_STAGING_SLOTS * _STAGING_SLOT, np.uint8, "frame mode's staging slots")

        self._locking = lock_pool().submit(lock)
        self._slots: Optional[List[np.ndarray]] = None
        # per slot: None (free), ("filling", its copy's event, destination) or ("draining", futures)
        self._state: List[Optional[tuple]] = [None] * _STAGING_SLOTS
        self._order: List[int] = []  # the filling slots, in the order they were filled
        self._next = 0

    def ready(self) -> bool:
        if self._slots is None and self._locking is not None and self._locking.done():
            locking, self._locking = self._locking, None
            try:
                buf = locking.result()
            except Exception:  # (OutOfMemoryError, a context gone): copies stay direct
                return False
            self._slots = [buf[i * _STAGING_SLOT:(i + 1) * _STAGING_SLOT] for i in range(_STAGING_SLOTS)]
        return self._slots is not None

    def rows(self, stream, dest: np.ndarray, device: int, pitch: int) -> bool:
        """dest [rows, width] (shot-major rows, or a column range of the [records, words] result)
        from `device`, rows `pitch` bytes apart there, a slot's worth of rows at a time; False
        (nothing done) when one row is larger than a slot."""
        width = dest.shape[1] * dest.itemsize
        per = _STAGING_SLOT // max(1, width)
        if per == 0 or stream is None:
            return False
        cuda = self.engine.cuda
        for r0 in range(0, dest.shape[0], per):
            part = dest[r0:r0 + per]
            index, slot = self._take()
            if pitch == width and self.lines_as_one:  # rows back to back on both sides: one line
                cuda.memcpy_dtoh_async(slot[:part.nbytes], device + r0 * pitch, stream)
                self._fill(index, stream, part)
                continue
            copy = cuda.Memcpy2D()
            copy.set_src_device(device + r0 * pitch)
            copy.src_pitch = pitch
            copy.set_dst_host(slot)
            copy.dst_pitch = width
            copy.width_in_bytes = width
            copy.height = part.shape[0]
            copy(stream)
            self._fill(index, stream, part)
        return True

    def finish(self) -> None:
        """Every filled slot into its destination (the call's last pieces)."""
        for _ in range(_STAGING_SLOTS):
            self._take()

    def discard(self) -> None:
        """Forget the filled slots: a call that finished emptied them all, an interrupted one's
        destination is never returned (copies and drains already under way finish first: their
        slots are filled again next)."""
        for state in self._state:
            if state is not None and state[0] == "draining":
                for future in state[1]:
                    future.result()
            elif state is not None:
                state[1].synchronize()
        self._state = [None] * _STAGING_SLOTS
        self._order = []

    def upload(self, a: np.ndarray):
        """A device copy of `a` (contiguous) through the slots, the other direction: each slot is a
        lane of the touch pool, which copies half-slots of `a` into it in turn and sends each up by
        an asynchronous copy on the lane's stream, filling one half while the other goes up; a half
        is filled again once its copy is done. Returns once every copy has landed, as a copy from
        ordinary memory does (and after the device's work enqueued before it: the lanes' streams
        wait for the default stream's work)."""
        cuda, engine = self.engine.cuda, self.engine
        self.discard()
        src = a.reshape(-1).view(np.uint8)
        nbytes = src.nbytes
        dev = cuda.mem_alloc(max(1, nbytes))
        half = _STAGING_SLOT // 2
        chunks = -(-nbytes // half)
        pool, workers = _touch_pool()
        lanes = max(1, min(_STAGING_SLOTS, workers, chunks))

        def lane(k: int) -> None:
            with engine.context_current():
                stream, slot, sent = cuda.Stream(), self._slots[k], [None, None]
                try:
                    for turn, chunk in enumerate(range(k, chunks, lanes)):
                        lo = chunk * half
                        size = min(half, nbytes - lo)
                        h = turn & 1
                        if sent[h] is not None:
                            sent[h].synchronize()
                        staged = slot[h * half:h * half + size]
                        np.copyto(staged, src[lo:lo + size])
                        cuda.memcpy_htod_async(int(dev) + lo, staged, stream)
                        sent[h] = cuda.Event()
                        sent[h].record(stream)
                finally:  # (after an error too: no copy may still read the slot)
                    stream.synchronize()
                    # freed while the context is current here (else PyCUDA warns that it could not
                    # clean them up out of their context, and they are lost)
                    sent.clear()
                    del stream

        failed = [future.exception() for future in [pool.submit(lane, k) for k in range(lanes)]]
        for exc in failed:
            if exc is not None:  # every lane has stopped: no copy reads the slots any more
                raise exc
        return dev

    def _take(self) -> Tuple[int, np.ndarray]:
        """The next slot (index, array), emptied into the destination it was filled for."""
        index = self._next
        self._next = (index + 1) % _STAGING_SLOTS
        self._start_drains(upto=index)
        state, self._state[index] = self._state[index], None
        if state is not None:
            for future in state[1]:
                future.result()
        return index, self._slots[index]

    def _start_drains(self, upto: int) -> None:
        """Start emptying the filled slots whose copies are done, in the order they were filled;
        slot `upto` (and those filled before it) whatever it takes, waiting for its copy. Each
        drain runs on the touch pool, so that several slots empty at once while the device fills
        others: a slot emptied on the calling thread before the next copy was enqueued held every
        copy to one slot's pace (8 MiB in 0.7 ms on eight threads: about 11 GB/s, H100 host)."""
        must = self._order.index(upto) + 1 if upto in self._order else 0  # slots that must start
        while self._order:
            index = self._order[0]
            _, event, dest = self._state[index]
            if must <= 0 and not (self.async_drains and event.query()):
                return
            must -= 1
            event.synchronize()
            self._order.pop(0)
            src = self._slots[index][:dest.nbytes].view(dest.dtype).reshape(dest.shape)
            pool, workers = _touch_pool()
            # (the code before: emptied here, on every worker, when the slot is taken again)
            parts = self.drain_parts if self.async_drains else workers
            cuts = np.linspace(0, dest.shape[0], min(parts, dest.shape[0]) + 1).astype(int)
            copies = [pool.submit(np.copyto, dest[a:b], src[a:b]) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
            self._state[index] = ("draining", copies)

    def _fill(self, index: int, stream, dest: np.ndarray) -> None:
        """Slot `index` is being filled on `stream` for `dest`."""
        event = self.engine.cuda.Event()
        event.record(stream)
        self._state[index] = ("filling", event, dest)
        self._order.append(index)


_TOUCH_POOL: Optional[Tuple[concurrent.futures.ThreadPoolExecutor, int]] = None
_TOUCH_LOCK = threading.Lock()
_LOCK_POOL: Optional[concurrent.futures.ThreadPoolExecutor] = None


def lock_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The thread that locks page-locked memory ahead (`_Staging`, tableau mode's window flags)."""
    global _LOCK_POOL
    with _TOUCH_LOCK:
        if _LOCK_POOL is None:
            _LOCK_POOL = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="quasarq-staging")
        return _LOCK_POOL


def _result_words(rows: int, words: int, shot_major: bool) -> int:
    """uint64 words of host memory a call's `rows` records (or parities) of `words` shot words take:
    record-major rows of `words`, or shot-major rows of ceil(rows / 8) bytes for 64 * words shots."""
    return 8 * words * ((rows + 7) // 8) if shot_major else rows * words


_TOUCH_STARTED: list = []  # the touch pool whose threads `start_touch_threads` started


def start_touch_threads() -> None:
    """Start every thread of the touch pool now: a pool starts a thread at a submit that finds none
    idle, so each task waits here until all have started (a quick task freed its thread for the next
    submit, and the process's first large result started the rest: about 1 ms of its call)."""
    pool, workers = _touch_pool()
    if _TOUCH_STARTED and _TOUCH_STARTED[0] is pool:
        return
    _TOUCH_STARTED[:] = [pool]
    started = threading.Barrier(workers)

    def wait() -> None:
        try:
            started.wait(timeout=5.0)
        except threading.BrokenBarrierError:  # (a thread not started in time: it starts when needed)
            pass

    for _ in range(workers):
        pool.submit(wait)


def _touch_pool() -> Tuple[concurrent.futures.ThreadPoolExecutor, int]:
    """The threads that touch fresh result memory (one per core the process may use, up to
    _TOUCH_THREADS), and their number."""
    global _TOUCH_POOL
    with _TOUCH_LOCK:
        if _TOUCH_POOL is None:
            workers = max(1, min(_TOUCH_THREADS, native.processors()))
            _TOUCH_POOL = (concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="quasarq-prefault"),
                           workers)
        return _TOUCH_POOL
