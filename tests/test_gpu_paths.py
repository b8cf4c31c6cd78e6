"""Every fast path of tableau mode's collapse windows against its oracle, at the edges of the
domain it accepts (cirq_quasarq/engines/cuda/measure.py, `window_path`):

| path | takes a window of k collapses on n qubits (W = ceil(n / 64) words a row) when |
|---|---|
| one block (measure_block.cu) | W <= 64 (n <= 4096); past max(64, n // 64) collapses only where the scan finds few random ones |
| low rank (measure_lowrank.cu) | W > 64, 8 <= k <= max(64, n // 64), no classical control; chunks of 160 collapses (128 in a run whose windows do not fuse, `lowrank_chunk_apart`, or whose fused buffers fit only for 128, `fused_chunks`), a chunk's pivot columns up to 160 (three words of bits); the next gate window folded into its last pass when the window holds only M |
| rows (measure_rows.cu) | W > 64, k <= max(64, n // 64), below the low-rank path's k; the next gate window folded in when W <= 160; the plan in one block when W <= 160 |
| low rank after the scan | any W, k past the low-rank path's width, no classical control, and the window's scan finds at least max(8, 2 x its pieces) possibly random collapses (`wide_lowrank`): the low-rank path on consecutive pieces of at most max(64, n // 64) collapses, widths equal within one (`wide_pieces`) |
| per collapse, transposed | everything else (the oracle of all: `batch_windows=False`) |

Each window here has an exact width, the edges of each domain: 1, 7, 8 (low rank's first),
64, 65, 127, 128, 129 (the edges of a chunk's words of bits), 159, 160, 161 (chunk edges), the
largest k the low rank path takes and one more; on a tableau after 0, 2 or 20 paper-shaped layers
of gates (0 layers: every collapse random with its own pivot, so a chunk holds 160 distinct pivot
columns); with deterministic collapses (qubits
measured again), inverted M, R and MR mixed in; each followed by a full gate layer (the fold).
Records and final inverse tableau equal the per-collapse path bit for bit, for a sampled shot,
another repetition and the reference. `--gpu-long` adds n = 60k and 100k with windows of 1,000
collapses and more, and the measure-twice probe: M of 1,000 qubits twice after 20 layers."""

from __future__ import annotations

import gc
import random

import numpy as np
import pytest

from cirq_quasarq.core import opcodes, rng
from cirq_quasarq.core.program import ProgramBuilder
from cirq_quasarq.engines import NumpyEngine, cuda_available
from cirq_quasarq.schedule import schedule

from .conftest import stream_from
from .programs import window_widths

pytestmark = pytest.mark.gpu

_CODE = opcodes.CODE
PAPER_GATES = ("X", "Y", "Z", "H", "S", "S_DAG", "CX", "CY", "CZ", "SWAP", "ISWAP")


def lowrank_max(n: int) -> int:
    """The widest window the low-rank (and rows) path takes on n qubits (measure.window_path)."""
    return max(64, n // 64)


def _paper_layer(b: ProgramBuilder, n: int, r: random.Random, first=()) -> None:
    """~0.7 n gates of the paper's set on a shuffled order (two-qubit partners from the rest), the
    qubits `first` among those that get one."""
    order = list(range(n))
    r.shuffle(order)
    if len(first):
        order = list(first) + [q for q in order if q not in set(first)]
    active, partners = order[: max(len(first), int(0.7 * n))], order[max(len(first), int(0.7 * n)):]
    codes, a, bb = [], [], []
    for q in active:
        g = r.choice(PAPER_GATES)
        if opcodes.BY_NAME[g].arity == 2:
            if not partners:
                g = "H"
            else:
                codes.append(_CODE[g]), a.append(q), bb.append(partners.pop())
                continue
        codes.append(_CODE[g]), a.append(q), bb.append(-1)
    b.gate_layer(np.array(codes), np.array(a), np.array(bb))


def windows_program(n: int, seed: int, widths, scramble: int, mix: bool = True):
    """`scramble` paper layers, a layer of H on every qubit, then per width a collapse window of
    exactly that many distinct qubits (with `mix`: about half measured before, so deterministic; M
    with some inverted; in every other window a few R and MR), a full layer of S_DAG (diagonal: measured qubits stay
    deterministic; the measured ones' part of it follows the window: the fold), and a barrier
    (a classically controlled I) so that the next window's collapses share one layer."""
    r = random.Random(seed)
    b = ProgramBuilder(n)
    for _ in range(scramble):
        _paper_layer(b, n, r)
    b.gate_layer(np.full(n, _CODE["H"]), np.arange(n), np.full(n, -1))
    measured, first_record = [], None
    for index, width in enumerate(widths):
        fresh = [q for q in r.sample(range(n), min(n, 2 * width)) if q not in set(measured)]
        again = r.sample(measured, min(len(measured), width // 2)) if mix else []
        qubits = (again + fresh)[:width]
        r.shuffle(qubits)
        assert len(set(qubits)) == width
        b.next_step()
        for q in qubits:
            # resets in every other window only: the others hold M alone and fold the next gates
            roll = r.random() if mix and first_record is not None else 0.5
            if roll < 0.9 or index % 2 == 0:
                rec = b.measure(q, invert=roll < 0.2)
            elif roll < 0.95:
                b.reset(q)
                continue
            else:
                rec = b.measure(q, reset=True)
            first_record = rec if first_record is None else first_record
        measured = list(dict.fromkeys(measured + qubits))
        b.gate_layer(np.full(n, _CODE["S_DAG"]), np.arange(n), np.full(n, -1))
        if first_record is not None:
            b.next_step()
            b.gate("I", 0, cond=b.condition([(first_record, 0)], [False, True]))
    return b.build()


def engines():
    from cirq_quasarq.engines.cuda import CudaEngine, measure

    default = CudaEngine()
    unfolded = CudaEngine()
    unfolded.fold_gates = False
    unfused = CudaEngine()  # windows apart take chunks of LOWRANK_NARROW (the kernels of two words)
    unfused.fuse_windows = False
    wide_apart = CudaEngine()  # chunks of LOWRANK_CHUNK apart: the three-word kernels outside the fused pass
    wide_apart.fuse_windows = False
    wide_apart.lowrank_chunk_apart = measure.LOWRANK_CHUNK
    narrow_fused = CudaEngine()  # fused passes of chunks of LOWRANK_NARROW: where two planes of counts do not fit
    narrow_fused.fused_chunks = (measure.LOWRANK_NARROW,)
    rows = CudaEngine(lowrank_windows=False)
    sequential = CudaEngine(batch_windows=False)
    return {"default": default, "fold_gates=False": unfolded, "fuse_windows=False": unfused,
            "chunks of 160 apart": wide_apart, "fused chunks of 128": narrow_fused,
            "lowrank_windows=False": rows}, sequential


def assert_paths_equal(program, seed: int, expect_paths=(), settings=None,
                       runs=((0, False), (3, False), (0, True)), expect_kernels=()):
    """Every engine setting (or those named in `settings`) equals the per-collapse path on records
    and inverse tableau for each (repetition, reference) of `runs`; the paths in `expect_paths` ran
    (the profiled stages name them), and so did the kernels in `expect_kernels` (the profiled
    launches name them)."""
    sched = schedule(program)
    fast, sequential = engines()
    fast = {name: engine for name, engine in fast.items() if settings is None or name in settings}
    ran, launched = set(), set()
    for repetition, reference in runs:
        key = rng.make_key(seed)
        want = sequential.run_tableau(program, sched, key, repetition=repetition, reference=reference)
        for name, engine in fast.items():
            engine.launcher.kernel_totals.clear()
            engine.profile = True
            got = engine.run_tableau(program, sched, key, repetition=repetition, reference=reference)
            engine.profile = False
            ran |= set(engine.stage_seconds)
            launched |= set(engine.launcher.kernel_totals)
            ctx = f"{name}, repetition {repetition}, reference {reference}, windows {window_widths(program, sched)}"
            assert np.array_equal(got.records, want.records), ctx
            assert got.tableau.equals(want.tableau), ctx
    for stage in expect_paths:
        assert stage in ran, (stage, sorted(ran))
    missing = set(expect_kernels) - launched
    assert not missing, (sorted(missing), sorted(launched))
    return sched, sequential


@pytest.fixture(autouse=True)
def _gpu():
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    yield
    gc.collect()  # the engines' workspaces (a cycle: engine <-> its tableau mode) before the next test

@pytest.mark.parametrize("scramble", [0, 2, 20])
def test_lowrank_windows_at_the_edges_of_their_domain(scramble):
    """n = 13000 (low rank up to 203 collapses a window): widths at every edge of a chunk's words and
    of the chunk, the last the low-rank path takes and the first past it (per collapse)."""
    n = 13000
    top = lowrank_max(n)
    widths = [1, 7, 8, 64, 65, 127, 128, 129, 159, 160, 161, top, top + 1]
    program = windows_program(n, 100 + scramble, widths, scramble)
    sched = schedule(program)
    assert window_widths(program, sched) == widths
    assert_paths_equal(program, 7 + scramble, ("collapse window (low rank)", "collapse window (low rank) + gates",
                                                "collapse window (rows)", "elimination"))


def test_lowrank_counts_kernel_of_every_size_equals_sequential():
    """Windows of 16, 20, 40, 60, 70, 90, 100, 128, 140, 160 and 200 collapses (chunks of 160 and 40)
    on 13k qubits, run apart in chunks of 160 (a fused pass counts its chunk itself), take each of
    lowrank_counts_16/32/.../160 (a chunk takes the smallest that holds it) and the three-word
    passes 2 apart (lowrank_apply_wide; lowrank_apply_gates_wide where a window of 140 folds its
    gates), each seen launched: records and inverse tableau equal the per-collapse path bit for bit."""
    from cirq_quasarq.engines.cuda import measure

    n = 13000
    widths = [16, 20, 40, 60, 70, 90, 100, 128, 140, 160, 200]
    assert measure.LOWRANK_CHUNK == 160 and lowrank_max(n) >= max(widths)
    program = windows_program(n, 77, widths, 2)
    assert window_widths(program, schedule(program)) == widths
    assert_paths_equal(program, 4242, settings=("chunks of 160 apart",),
                       expect_kernels=(*measure.LOWRANK_COUNTS.values(), "lowrank_apply_wide",
                                       "lowrank_apply_gates_wide"))


def test_lowrank_chunks_with_more_than_64_distinct_pivots():
    """n = 30000, no scrambling: every collapse random with a pivot of its own, so the chunks of
    windows of 255, 256 and 468 (the widest the low-rank path takes) hold 160 distinct pivot columns,
    three words of bits (more than 64: the case a 128-bit integer's miscompiled bit clear broke);
    measured only, so each folds."""
    n = 30000
    widths = [255, 256, lowrank_max(n)]
    program = windows_program(n, 5, widths, 0, mix=False)
    assert window_widths(program, schedule(program)) == widths
    assert_paths_equal(program, 11, ("collapse window (low rank) + gates",), settings=("default", "fold_gates=False"))


@pytest.mark.parametrize("n", [4096, 4097, 10240, 10241])
def test_one_block_and_rows_paths_at_their_edges(n):
    """64 / 65 words a row (the one-block path's edge), 160 / 161 (the rows fold's and the
    one-block plan's edge), windows of 1 to 65 collapses, after 2 layers; at n <= 4097 the NumPy
    engine agrees too."""
    widths = [1, 3, 7, 8, 64, 65]
    program = windows_program(n, n, widths, 2)
    sched, sequential = assert_paths_equal(program, n)
    if n <= 4097:
        key = rng.make_key(n)
        want = sequential.run_tableau(program, sched, key)
        got = NumpyEngine().run_tableau(program, sched, key)
        assert np.array_equal(got.records, want.records) and got.tableau.equals(want.tableau)


def test_measuring_twice_repeats_after_a_wide_window():
    """The issue's probe, at the default suite's size: 20 paper layers on 13000 qubits, then M of the
    widest window the low-rank path takes, then M of the same qubits: the second block repeats the
    first on every path, and the paths agree."""
    n = 13000
    _measure_twice(n, lowrank_max(n), 20)


def _measure_twice(n: int, width: int, layers: int, seed: int = 3):
    r = random.Random(seed)
    b = ProgramBuilder(n)
    for _ in range(layers):
        _paper_layer(b, n, r)
        b.next_step()
        for q in r.sample(range(n), max(1, n // 1400)):
            b.measure(q)
    qubits = r.sample(range(n), width)
    for _ in range(2):
        b.next_step()
        for q in qubits:
            b.measure(q)
    program = b.build()
    sched = schedule(program)
    fast, sequential = engines()
    want = sequential.run_tableau(program, sched, rng.make_key(seed), reference=True).records
    for name, engine in dict(fast, sequential=sequential).items():
        records = engine.run_tableau(program, sched, rng.make_key(seed), reference=True).records
        assert np.array_equal(records[-2 * width:-width], records[-width:]), name
        assert np.array_equal(records, want), name


def _wide_windows_program(n: int, fresh_counts, width: int, scramble: int, seed: int):
    """`scramble` paper layers, H on every qubit, then per entry f of `fresh_counts` a window of
    `width` distinct qubits: f never measured before, the rest measured in the first window
    (deterministic: only diagonal S_DAG layers come between), alternately all M and a mix with
    inverted M, R and MR; a barrier after each window. Without scrambling every fresh qubit is |+>,
    so a window's random collapses are exactly its fresh ones."""
    r = random.Random(seed)
    b = ProgramBuilder(n)
    for _ in range(scramble):
        _paper_layer(b, n, r)
    b.gate_layer(np.full(n, _CODE["H"]), np.arange(n), np.full(n, -1))
    order = list(range(n))
    r.shuffle(order)
    base, spare = [], order
    first = None
    for index, fresh in enumerate(fresh_counts):
        qubits = r.sample(base, width - fresh) + [spare.pop() for _ in range(fresh)]
        base = base or qubits
        r.shuffle(qubits)
        b.next_step()
        for q in qubits:
            roll = r.random() if index % 2 else 0.5
            if roll < 0.85:
                rec = b.measure(q, invert=roll < 0.2)
            elif roll < 0.9:
                b.reset(q)
                continue
            else:
                rec = b.measure(q, reset=True)
            first = rec if first is None else first
        b.gate_layer(np.full(n, _CODE["S_DAG"]), np.arange(n), np.full(n, -1))
        b.next_step()
        b.gate("I", 0, cond=b.condition([(first, 0)], [False, True]))
    return b.build()


@pytest.mark.parametrize("n,width,scramble", [(4200, 300, 0), (13000, 1300, 0), (13000, 1300, 2),
                                               (1324, 300, 0), (4096, 130, 2)])
def test_wide_windows_take_the_lowrank_update_when_the_scan_finds_many_random_collapses(n, width, scramble,
                                                                                      monkeypatch):
    """Windows wider than the low-rank path takes (`window_path`: per collapse, or in one block for
    W <= 64) read their scan's flags; with at least max(8, 2 x pieces) possibly random collapses the
    window takes the low-rank path in consecutive pieces as wide as it takes from the start
    (`measure.wide_lowrank`), with fewer the per-collapse path (the one block). W = 66 (300
    collapses: five pieces of 60, plans in one block), W = 204 (1,300, a distance-51 surface code's
    round: seven of 185-186, spread plans), W = 21 (a distance-25 code's round: five pieces of 60)
    and W = 64 (the one-block path's widest rows, three pieces of 43-44); thresholds 10, 14, 10 and
    8; windows with exactly the threshold's random collapses and one fewer. Records and final
    tableau equal the per-collapse (one-block) path bit for bit."""
    from cirq_quasarq.engines.cuda import measure

    step = lowrank_max(n)
    assert width > step
    need = max(measure.LOWRANK_MIN_COLLAPSES, 2 * -(-width // step))
    fresh = [width, need, need - 1, width // 2, 0]
    program = _wide_windows_program(n, fresh, width, scramble, seed=n + scramble)
    sched = schedule(program)
    assert window_widths(program, sched) == [width] * len(fresh)
    decided, took = [], []
    real_decide, real_lowrank = measure.wide_lowrank, measure._lowrank

    def decide(engine, n_, W, ins, cstart, cend, randoms):
        got = real_decide(engine, n_, W, ins, cstart, cend, randoms)
        if engine.batch_windows:  # not the per-collapse oracle, which never switches
            decided.append((randoms, got))
        return got

    def lowrank(engine, ws, T, ctx, cstart, cend, *args, **kwargs):
        took.append(cend - cstart)
        return real_lowrank(engine, ws, T, ctx, cstart, cend, *args, **kwargs)

    monkeypatch.setattr(measure, "wide_lowrank", decide)
    monkeypatch.setattr(measure, "_lowrank", lowrank)
    single = "collapse window (one block)" if n <= 4096 else "elimination"
    assert_paths_equal(program, n, ("collapse window (low rank)", single), settings=("default",))
    assert decided and all(got == (randoms >= need) for randoms, got in decided), decided
    pieces = [end - start for start, end in measure.wide_pieces(n, 0, width)]
    assert took == pieces * sum(got for _, got in decided), took
    if scramble == 0:  # the windows with width, need and width / 2 random collapses, in each of 3 runs
        assert [randoms for randoms, _ in decided] == [width, need, need - 1, width // 2] * 3, decided


def layered_program(n: int, seed: int, widths, resets: bool = False):
    """Per width: a paper layer that gates the window's qubits and the last window's (so that the
    schedule keeps each measurement in its layer: windows of exactly these widths), then M of them (a third measured before, a
    fifth inverted); width 0: the last window's qubits again after H on every other qubit (all
    deterministic). With `resets`, a few R and MR in every third window. No barriers: each
    window's gate layer folds into the window before it, and each low-rank window is decided and
    its first chunk counted by the pass before it (measure.fuse_pass) where that window folds its
    gates."""
    r = random.Random(seed)
    b = ProgramBuilder(n)
    measured, qubits = [], []
    for index, width in enumerate(widths):
        if width == 0:
            others = np.setdiff1d(np.arange(n), qubits)
            b.gate_layer(np.full(len(others), _CODE["H"]), others, np.full(len(others), -1))
        else:
            last = qubits
            again = r.sample(measured, min(len(measured), width // 3))
            fresh = [q for q in r.sample(range(n), 2 * width) if q not in set(again) | set(last)]
            qubits = (again + fresh)[:width]
            r.shuffle(qubits)
            _paper_layer(b, n, r, first=list(dict.fromkeys(list(last) + qubits)))
        b.next_step()
        for q in qubits:
            roll = r.random()
            if resets and index % 3 == 2 and roll > 0.9:
                if roll > 0.95:
                    b.reset(q)
                else:
                    b.measure(q, reset=True)
            else:
                b.measure(q, invert=roll < 0.2)
        measured = list(dict.fromkeys(measured + list(qubits)))
        b.next_step()
    return b.build()


@pytest.mark.parametrize("n,widths,resets", [
    (13001, [8, 9, 16, 17, 40, 64, 100, 128, 128, 12, 0, 9, 8], False),  # odd n: a half group alone
    (13000, [200, 30, 128, 20, 150, 8, 0, 24], True),  # two chunks before a fused window; resets
    (13000, [64, 0, 64, 40], False),  # an all-deterministic window between two random ones
    (30000, [128, 21, 180, 140, 64, 33], False),
])
def test_fused_windows_equal_each_window_its_own_pass_1(n, widths, resets):
    """A low-rank window's last pass, its gate layer folded in, also makes the next window's pass 1
    (lowrank_ahead, the plan on those rows, lowrank_apply_gates_counts, lowrank_reduce): records and
    final tableau equal each window making its own pass 1 and the per-collapse path bit for bit.
    The schedule's layering moves measurements, so the windows fused into the one before them are
    (checked on the CPU when these were chosen) of 9 to 127 collapses: every count of 16-collapse
    tiles, across each tile's edge (15, 16, 17; 32, 39; ...), all deterministic ones (the 64 after
    64), ones after a two-chunk window (200), and ones with resets, whose rows are replayed."""
    program = layered_program(n, n + len(widths), widths, resets)
    assert_paths_equal(program, 5, ("collapse window (low rank, fused)",),
                       settings=("default", "fuse_windows=False"))


@pytest.mark.parametrize("n,widths,resets,chunks,kinds", [
    # windows of 64, 86, 70, 308, 417, 401, 265, 192, 168, 68, 40, 15, 3, 2 collapses
    (30000, [64, 129, 40, 450, 468, 400, 200, 170, 145, 33], False, {2, 3}, {(False, True), (True, True)}),
    # 100, 134, 165, 233, 127, 125, 65, 12, 8, 1, with R and MR in some
    (20000, [100, 200, 150, 300, 60, 140, 20], True, {1, 2}, {(False, True)}),
    # 100, 134, 133, 66, 37, 9, 1: every pair of narrow and wide chunks, as at 180k qubits
    (20000, [100, 200, 100, 60, 20], False, {1}, {(False, False), (False, True), (True, False), (True, True)}),
])
def test_fused_passes_decide_windows_of_several_chunks(monkeypatch, n, widths, resets, chunks, kinds):
    """A window's pass also makes the pass 1 of the next window's first chunk when that window has
    several (lowrank_ahead and the plan on its rows as for one chunk; its later chunks make their
    own), and of a first chunk of more than 128 collapses (partial counts in two planes, pivot bits
    in three words): records and final tableau equal each window making its own passes 1 and the
    per-collapse path bit for bit. The low-rank path takes windows of up to 468 collapses at
    n = 30000 and 312 at 20000, so two chunks and three (the paper's circuit at 180k qubits has
    windows of 129-134: one chunk). `kinds`: the (this chunk, the next) past LOWRANK_NARROW that
    fused passes took, so each of lowrank_apply_gates_counts{,_wide}{,_to_wide} is run."""
    from cirq_quasarq.engines.cuda import measure

    program = layered_program(n, len(widths), widths, resets)
    actual = window_widths(program, schedule(program))
    decided, taken, chunk_of = [], set(), {}
    real_fuse = measure.fuse_pass

    def fuse(engine, ws, T, X, Z, kc, fold, nxt, *args):
        decided.append(nxt.end - nxt.start)
        first = min(nxt.end - nxt.start, ws.chunk)  # the next window's chunk this pass counts
        if ws.chunk == measure.LOWRANK_CHUNK:
            taken.add((kc > measure.LOWRANK_NARROW, first > measure.LOWRANK_NARROW))
        chunk_of.setdefault(engine.fused_chunks, set()).add(ws.chunk)
        return real_fuse(engine, ws, T, X, Z, kc, fold, nxt, *args)

    monkeypatch.setattr(measure, "fuse_pass", fuse)
    assert_paths_equal(program, 11, ("collapse window (low rank, fused)",),
                       settings=("default", "fuse_windows=False", "fused chunks of 128"))
    assert set(decided) <= set(actual), (decided, actual)
    assert {-(-k // measure.LOWRANK_CHUNK) for k in decided} >= chunks, (decided, actual)
    assert taken >= kinds, (taken, decided, actual)
    # the default engine's fused passes took chunks of 160, the narrow one's of 128
    assert chunk_of == {(measure.LOWRANK_CHUNK, measure.LOWRANK_NARROW): {measure.LOWRANK_CHUNK},
                        (measure.LOWRANK_NARROW,): {measure.LOWRANK_NARROW}}, chunk_of


@pytest.mark.parametrize("blocks", [1, 3])
def test_fused_windows_do_not_depend_on_the_plan_blocks(blocks):
    """The next window's plan on rows made ahead, over 1 and 3 blocks (measure_window_plan's grid
    barrier between them), equals the default engine's."""
    from cirq_quasarq.engines.cuda import CudaEngine

    program = layered_program(13000, blocks, [64, 65, 128, 8, 16])
    sched = schedule(program)
    fused, unfused = CudaEngine(), CudaEngine()
    fused.plan_blocks = blocks
    unfused.fuse_windows = False
    fused.profile = True
    for repetition, reference in ((0, False), (2, False), (0, True)):
        key = rng.make_key(blocks)
        got = fused.run_tableau(program, sched, key, repetition=repetition, reference=reference)
        want = unfused.run_tableau(program, sched, key, repetition=repetition, reference=reference)
        assert np.array_equal(got.records, want.records) and got.tableau.equals(want.tableau), (repetition, reference)
    assert "collapse window (low rank, fused)" in fused.stage_seconds


# The kernels that read and write every row of the tableau once a launch (a pass over it)
_PASS_KERNELS = ("tableau_gates_window", "lowrank_apply", "lowrank_apply_gates", "lowrank_apply_gates_counts",
                 "lowrank_apply_wide", "lowrank_apply_gates_wide", "lowrank_apply_gates_counts_wide",
                 "lowrank_apply_gates_counts_to_wide", "lowrank_apply_gates_counts_wide_to_wide",
                 "measure_rows_apply", "measure_rows_apply_gates")


@pytest.mark.parametrize("setting", ["default", "fold_gates=False", "fuse_windows=False", "fused chunks of 128",
                                     "lowrank_windows=False"])
def test_tableau_passes_are_the_pass_kernels_launched(setting):
    """CudaEngine.tableau_passes (the benchmarks' floor counts it) equals the launches of the kernels
    that pass over every row, for each engine setting, on windows of at most one chunk without
    resets (a chunk a pass; a reset's rows are replayed one collapse at a time)."""
    program = layered_program(13000, 7, [64, 65, 128, 8, 16, 40])
    sched = schedule(program)
    engine = engines()[0][setting]
    totals = engine.launcher.kernel_totals
    totals.clear()
    engine.profile = True
    try:
        engine.run_tableau(program, sched, rng.make_key(7))
    finally:
        engine.profile = False
    launches = {name: count for name, (count, _) in totals.items()}
    totals.clear()
    launched = sum(launches.get(name, 0) for name in _PASS_KERNELS)
    passes = engine.tableau_passes(program, sched)
    windows = sum(kind in ("G", "C") for kind, *_ in engine.device_program(program, sched).tableau_plan().actions)
    assert passes == launched, (setting, passes, launched, launches)
    if setting == "fold_gates=False":
        assert passes == windows, (passes, windows)
    if setting == "default":  # the gate layers after the first ride in the collapse windows' passes
        assert passes < windows, (passes, windows)


@pytest.mark.gpu_long
@pytest.mark.parametrize("n", [60000, 100000])
def test_wide_windows_on_large_tableaux(n):
    """n = 60k and 100k after 20 layers: windows of 1,000, the widest the low-rank path takes and
    one more."""
    top = lowrank_max(n)
    widths = [1000, top, top + 1]
    program = windows_program(n, n, widths, 20)
    assert window_widths(program, schedule(program)) == widths
    assert_paths_equal(program, n, ("collapse window (low rank)",), settings=("default", "fold_gates=False"),
                       runs=((0, False), (0, True)))


@pytest.mark.gpu_long
@pytest.mark.parametrize("n,width", [(60000, 900), (100000, 1000), (100000, 1562)])
def test_measuring_twice_repeats_on_large_tableaux(n, width):
    _measure_twice(n, width, 20)


# ------------------------------------------------------------------------------- loops, reference run
# engines/cuda/tableau.py `_LoopFolding`: a reference run stops repeating a top-level loop once the
# tableau repeats, copies the skipped iterations' records from the cycle, and runs the iterations
# that take the tableau to its final state; `fold_loops=False` runs every iteration (the oracle).


def _loop_folding_equal(program, engines_, expect_folded=None, numpy=True):
    """Reference runs of each engine equal `fold_loops=False`'s (records and final tableau), and so
    does the NumPy engine's (`numpy`); the engines `expect_folded` names skipped iterations. Runs
    that are not a reference run every iteration."""
    from cirq_quasarq.engines.cuda import CudaEngine

    sched = schedule(program)
    key = rng.make_key(7)
    oracle = CudaEngine()
    oracle.fold_loops = False
    want = oracle.run_tableau(program, sched, key, reference=True)
    assert oracle._tableau.folded_iterations == 0
    if numpy:
        host = NumpyEngine().run_tableau(program, sched, key, reference=True)
        assert np.array_equal(host.records, want.records) and host.tableau.equals(want.tableau)
    for name, engine in engines_.items():
        got = engine.run_tableau(program, sched, key, reference=True)
        assert np.array_equal(got.records, want.records), name
        assert got.tableau.equals(want.tableau), name
        if expect_folded is not None and name in expect_folded:
            assert engine._tableau.folded_iterations > 0, name
        sampled = engine.run_tableau(program, sched, key, repetition=1)  # not a reference run: every iteration
        assert engine._tableau.folded_iterations == 0
        again = oracle.run_tableau(program, sched, key, repetition=1)
        assert np.array_equal(sampled.records, again.records), name


@pytest.mark.parametrize("text", [
    # period 4 (S) and 2 (H) with a random collapse a round; counts 23-26: every tail of a period 4
    *(f"R 0 1 2\nH 0\nREPEAT {count} {{\n  S 0\n  H 1\n  CX 0 2\n  M 1\n}}\nM 0 1 2" for count in range(23, 27)),
    # a nested loop inside, records of both levels; then a loop that reads records (never folded)
    "H 0 2\nREPEAT 9 {\n  H 0\n  REPEAT 3 {\n    CX 0 1\n    MR 1\n  }\n  M 0\n}\n"
    "REPEAT 5 {\n  M 2\n  CX rec[-1] 1\n  H 2\n}\nM 0 1 2",
    # one launch an iteration, and consecutive loops
    "H 0\nREPEAT 7 {\n  M 0\n}\nREPEAT 4 {\n  H 1\n  M 1\n}\nM 0 1",
])
def test_reference_runs_fold_loops_into_the_same_records(text):
    import stim

    from cirq_quasarq.compiler.stim_circuit import compile_stim
    from cirq_quasarq.engines.cuda import CudaEngine

    _loop_folding_equal(compile_stim(stim.Circuit(text)), {"default": CudaEngine()}, expect_folded=("default",))


@pytest.mark.parametrize("name,d,rounds", [
    ("surface_code:rotated_memory_z", 5, 20), ("surface_code:rotated_memory_x", 3, 31),
    ("color_code:memory_xyz", 5, 30), ("surface_code:rotated_memory_z", 51, 10),  # W > 64: rows, wide windows
])
def test_reference_runs_fold_the_rounds_of_codes(name, d, rounds):
    """The generated codes' rounds (one loop): the reference run folds them, same records and
    tableau as every round run; at d = 51 the round windows take the batched paths (W = 84)."""
    import stim

    from cirq_quasarq.compiler.stim_circuit import compile_stim
    from cirq_quasarq.engines.cuda import CudaEngine

    circuit = stim.Circuit.generated(name, distance=d, rounds=rounds, after_clifford_depolarization=1e-3,
                                     before_measure_flip_probability=1e-3)
    _loop_folding_equal(compile_stim(circuit), {"default": CudaEngine()}, expect_folded=("default",), numpy=d < 51)


def test_reference_runs_fold_loops_whose_windows_fold_the_next_gates():
    """n = 13000: a loop whose body is H on 64 qubits then M of them (the low-rank path, which takes
    the next iteration's H into its pass: the boundaries are compared after it) and a paper layer on
    the others. Without fused windows the loop folds; with them (each window's pass decides the next
    iteration's window) every iteration runs; both equal every iteration run."""
    from cirq_quasarq.engines.cuda import CudaEngine

    n, r = 13000, random.Random(4)
    b = ProgramBuilder(n)
    _paper_layer(b, n, r)
    qubits = np.array(sorted(r.sample(range(n), 64)))
    b.begin_loop(9)
    b.next_step()
    b.gate_layer(np.full(64, _CODE["H"]), qubits, np.full(64, -1))
    b.next_step()
    for q in qubits.tolist():
        b.measure(q)
    b.next_step()
    b.end_loop()
    b.next_step()
    for q in range(0, n, 97):
        b.measure(q)
    program = b.build()
    unfused = CudaEngine()
    unfused.fuse_windows = False
    unfused.profile = True
    _loop_folding_equal(program, {"fuse_windows=False": unfused, "default": CudaEngine()},
                        expect_folded=("fuse_windows=False",), numpy=False)
    assert "collapse window (low rank) + gates" in unfused.stage_seconds, sorted(unfused.stage_seconds)


# ------------------------------------------------------------------------------------- frame mode
# engines/cuda/frames.py: the frames live in shared memory when one 64-shot word of all qubits
# fits a block (16 n bytes <= the opt-in limit), else in global memory; shot-major records come from
# the frame kernel's epilogue when 64 shots' rows fit its shared memory, else from
# parities_shot_major afterwards (its oracle, `fused_shot_major=False`).


def frames_program(n: int, seed: int, measure_rounds: int = 1, measured=None):
    """H on every qubit, depolarizing noise, CX pairs, X errors, then `measure_rounds` rounds of M on
    `measured` qubits (default all), one layer of noise between rounds."""
    r = random.Random(seed)
    b = ProgramBuilder(n)
    b.gate_layer(np.full(n, _CODE["H"]), np.arange(n), np.full(n, -1))
    dep = b.channel_id(1, [0.01, 0.01, 0.01], [[1], [2], [3]])
    flip = b.channel_id(1, [0.05], [[1]])
    b.next_step()
    for q in range(n):
        b.noise("DEPOLARIZE1", [q], dep)
    order = list(range(n))
    r.shuffle(order)
    b.next_step()
    for k in range(0, n - 1, 2):
        b.gate("CX", order[k], order[k + 1])
    qubits = list(range(n)) if measured is None else list(measured)
    for _ in range(measure_rounds):
        b.next_step()
        for q in qubits:
            b.noise("X_ERROR", [q], flip)
        b.next_step()
        for q in qubits:
            b.measure(q, invert=r.random() < 0.2)
    return b.build()


def _frames_equal(program, shots: int, seed: int, shot_major: bool, engines_) -> None:
    sched = schedule(program)
    numpy = NumpyEngine()
    key = rng.make_key(seed)
    reference = numpy.run_tableau(program, sched, key, reference=True).records
    want = numpy.sample_frames(program, sched, key, reference, shots, shot_major=shot_major)
    for name, engine in engines_.items():
        got = engine.sample_frames(program, sched, key, reference, shots, shot_major=shot_major)
        assert got.shape == want.shape and np.array_equal(got, want), name


def test_frames_in_shared_and_global_memory_at_their_edge():
    """n = the most qubits whose frames fit a block's shared memory beside the kernel's static
    part, one more, and smem_optin / 16 (where the frames alone would fit: it had been launched with
    more shared memory than a block has): CUDA == NumPy."""
    from cirq_quasarq.engines.cuda import CudaEngine

    engine = CudaEngine()
    static = engine._frames._static_shared("frames_program_shared")
    edge = (engine.smem_optin - static) // 16
    assert 0 < static and edge < engine.smem_optin // 16
    for n in (edge, edge + 1, engine.smem_optin // 16):
        program = frames_program(n, n, measured=range(0, n, 7))
        _frames_equal(program, 1000, n, False, {f"auto, n = {n}": engine})


def test_shot_major_records_from_the_frame_kernel_at_their_edge():
    """Records per shot at the fused epilogue's edge (64 shots' rows in the kernel's shared memory)
    and one byte past it: CUDA == NumPy, fused or not."""
    from cirq_quasarq.engines.cuda import CudaEngine

    fused, unfused = CudaEngine(), CudaEngine()
    unfused.fused_shot_major = False
    warm = frames_program(16, 1)
    _frames_equal(warm, 64, 1, True, {"warm": fused})
    room = fused._frames.dynamic_room("frames_program_shared")
    edge_records = 8 * (room // 64)  # the most records whose 64 shot rows fit
    n = 8
    for records in (edge_records, edge_records + 8):
        program = frames_program(n, records, measure_rounds=records // n)
        assert program.num_records == records
        _frames_equal(program, 700, records, True, {"fused": fused, "fused_shot_major=False": unfused})


@pytest.mark.parametrize("n, depth, count, ticks", [(2000, 12, 1, True), (2000, 12, 5, True), (2000, 12, 5, False),
                                                    (13000, 10, 4, True), (13000, 10, 12, True),
                                                    (13000, 10, 12, False), (30000, 6, 7, False)])
def test_reference_pieces_run_as_the_whole_program(n, depth, count, ticks):
    """CudaEngine.run_reference_pieces on the windows of a paper circuit (with or without TICKs)
    compiled in `count` pieces, uploaded without waiting: the records and final tableau of
    run_tableau on the whole program (rows-path windows at 2000, low-rank windows folding the next
    gates and fused at 13000 and 30000)."""
    from benchmarks.random_clifford import paper_random_circuit_stim
    from cirq_quasarq.compiler.stim_circuit import clear_stim_cache, compile_stim
    from cirq_quasarq.engines.cuda import CudaEngine
    from cirq_quasarq.shots import REFERENCE_KEY, StreamedCompile

    circuit = paper_random_circuit_stim(n, depth, seed=n + count, ticks=ticks)
    compiling = StreamedCompile(circuit, count)
    engine = CudaEngine()
    run = engine.run_reference_pieces(n, circuit.num_measurements, compiling, REFERENCE_KEY)
    program = compiling.program
    got_records, got_tableau = run.records, run.tableau
    clear_stim_cache()
    whole = compile_stim(circuit)
    assert np.array_equal(program.instructions, whole.instructions)
    want = engine.run_tableau(whole, schedule(whole), REFERENCE_KEY, reference=True)
    assert np.array_equal(got_records, want.records) and got_tableau.equals(want.tableau)


def test_reference_pieces_keep_their_staging_buffers_for_the_next_call():
    """The page-locked buffers a piecewise run stages its uploads in stay with the engine: a second
    run of like pieces stages in the same two buffers, a run of larger pieces grows them (a buffer
    grows where a piece's arrays outgrow it, so it may be one of the two); every run
    gives the records and final tableau of the whole program."""
    from benchmarks.random_clifford import paper_random_circuit_stim
    from cirq_quasarq.compiler.stim_circuit import clear_stim_cache, compile_stim
    from cirq_quasarq.engines.cuda import CudaEngine
    from cirq_quasarq.shots import REFERENCE_KEY, StreamedCompile

    engine = CudaEngine()
    kept = engine._tableau.piece_buffers
    assert kept == [None, None]
    made = []
    for n, depth, seed in ((2000, 10, 1), (2000, 10, 2), (30000, 8, 3)):  # pieces of about 0.1 and 1.5 MB
        circuit = paper_random_circuit_stim(n, depth, seed=seed)
        clear_stim_cache()
        compiling = StreamedCompile(circuit, 4)
        run = engine.run_reference_pieces(n, circuit.num_measurements, compiling, REFERENCE_KEY)
        whole = compile_stim(circuit)
        want = engine.run_tableau(whole, schedule(whole), REFERENCE_KEY, reference=True)
        assert np.array_equal(run.records, want.records) and run.tableau.equals(want.tableau)
        assert engine._tableau.piece_buffers is kept and all(buf is not None for buf in kept)
        made.append([(id(buf), len(buf)) for buf in kept])
    assert made[1] == made[0]  # like pieces: the same buffers
    assert max(size for _, size in made[2]) > max(size for _, size in made[0])  # larger pieces: grown
    assert engine.held_bytes()["pinned"] >= sum(len(buf) for buf in kept)


def test_streamed_first_calls_sample_the_bits_of_a_whole_compile(monkeypatch):
    """sample_measurements on the GPU of a circuit new to the process, streamed (its reference made
    while it compiled), against the NumPy engine's and an unstreamed GPU call's bits; a circuit whose
    last window is wider than the first piece's workspace allows (NotStreamable from the engine)
    falls back to the whole compile with the same bits."""
    pytest.importorskip("stim")
    from benchmarks.random_clifford import paper_random_circuit_stim
    from cirq_quasarq import QuasarqSimulator, shots
    from cirq_quasarq.compiler.stim_circuit import clear_stim_cache

    from cirq_quasarq.errors import NotStreamable

    wide = paper_random_circuit_stim(3000, 20, seed=8, ticks=True)
    wide.append("M", list(range(3000)))
    calls, real = [], shots._streamed

    def spy(*args):
        try:
            program = real(*args)
        except NotStreamable:
            calls.append("whole")
            raise
        calls.append("streamed")
        return program

    monkeypatch.setattr(shots, "_streamed", spy)
    monkeypatch.setattr(shots, "_measured_rows_likely", lambda *args: False)  # the full run streams
    for circuit, way in ((paper_random_circuit_stim(3000, 40, seed=7, ticks=True), "streamed"),
                         (paper_random_circuit_stim(3000, 40, seed=5), "streamed"), (wide, "whole")):
        stream_from(monkeypatch, 1)
        clear_stim_cache()
        calls.clear()
        streamed = QuasarqSimulator(seed=3, device="gpu").sample_measurements(circuit, 500, bit_packed=True)
        assert calls == [way]
        stream_from(monkeypatch, 10**9)
        clear_stim_cache()
        whole = QuasarqSimulator(seed=3, device="gpu").sample_measurements(circuit, 500, bit_packed=True)
        clear_stim_cache()
        cpu = QuasarqSimulator(seed=3, device="cpu").sample_measurements(circuit, 500, bit_packed=True)
        assert np.array_equal(streamed, whole) and np.array_equal(streamed, cpu)


@pytest.mark.parametrize("short", ["pieces", "join"])
def test_streamed_first_calls_short_of_device_memory(monkeypatch, short):
    """Where the device has no room for the next piece's tables, the whole program runs instead
    (NotStreamable); where it has none for the joined table, the run keeps its records and the
    frames upload the table: the same bits either way."""
    pytest.importorskip("stim")
    from benchmarks.random_clifford import paper_random_circuit_stim
    from cirq_quasarq import QuasarqSimulator, shots
    from cirq_quasarq.compiler.stim_circuit import clear_stim_cache, compile_stim
    from cirq_quasarq.engines.cuda import tableau

    circuit = paper_random_circuit_stim(3000, 30, seed=9, ticks=True)
    clear_stim_cache()
    whole_bytes = compile_stim(circuit).instructions.nbytes
    clear_stim_cache()
    want = QuasarqSimulator(seed=4, device="cpu").sample_measurements(circuit, 300, bit_packed=True)
    clear_stim_cache()
    room = tableau._room
    refused = []

    def short_room(engine, nbytes):
        if (nbytes == whole_bytes) == (short == "join"):
            refused.append(nbytes)
            return False
        return room(engine, nbytes)

    monkeypatch.setattr(tableau, "_room", short_room)
    monkeypatch.setattr(shots, "_measured_rows_likely", lambda *args: False)  # the full run streams
    stream_from(monkeypatch, 1)
    got = QuasarqSimulator(seed=4, device="gpu").sample_measurements(circuit, 300, bit_packed=True)
    assert refused and np.array_equal(got, want)
