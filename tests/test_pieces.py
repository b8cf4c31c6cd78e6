"""A stim.Circuit compiled in pieces (`compiler.stim_pieces`) while an engine runs the windows of
the pieces before (`shots.compiled_with_reference`): the rows handed on after each piece (those no
later instruction can come before: `ProgramBuilder.settle`) are `compile_stim`'s Program row for
row, with or without TICKs; scheduled as they come (`schedule.Scheduler`: the windows no later row
can join), the windows joined are `schedule()`'s of the whole, for rows cut anywhere; circuits of
more than unitaries and collapses raise NotStreamable and compile whole; the orchestration caches
the Program with its schedule and reference, and sampling gives the bits of a whole compile. The
GPU engine's piecewise run: tests/test_gpu_paths.py (test_reference_pieces_*, test_streamed_*)."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

stim = pytest.importorskip("stim")

from cirq_quasarq import QuasarqSimulator, shots
from cirq_quasarq.compiler import stim_circuit
from cirq_quasarq.compiler.stim_circuit import cached_stim, clear_stim_cache, compile_stim, stim_pieces
from cirq_quasarq.core.program import NUM_FIELDS, Program
from cirq_quasarq.engines import NumpyEngine
from cirq_quasarq.errors import NotStreamable
from cirq_quasarq.schedule import Schedule, Scheduler, joined, schedule

from benchmarks.random_clifford import paper_random_circuit_stim

from .conftest import stream_from


_NO_ROWS = np.zeros((0, NUM_FIELDS), dtype=np.int32)


def compiled_in_pieces(circuit, pieces: int, with_layers: bool = False, printers=None):
    """(the pieces' rows, the Program stim_pieces returns); `with_layers`: each piece as (rows, the
    compile's LAYERED_FROM word or None); `printers`: processes printing the pieces (None: the default)."""
    compiling = stim_pieces(circuit, pieces, printers=printers)
    rows = []
    while True:
        try:
            piece = next(compiling)
        except StopIteration as done:
            return rows, done.value
        rows.append(piece if with_layers else piece[0])


def same_tableau(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("xx", "xz", "zx", "zz", "xs", "zs"))


def unitaries_and_collapses(seed: int, n: int = 9, lines: int = 60):
    """A random circuit of every kind of line the pieces take: one- and two-qubit gates on some
    qubits (so that some stay idle for long), collapses in every basis (inverted too), MPP, and
    TICKs here and there."""
    r = np.random.default_rng(seed)
    one, two = ["H", "S", "S_DAG", "X", "SQRT_X", "H_YZ", "C_XYZ"], ["CX", "CZ", "CY", "SWAP", "ISWAP", "XCZ"]
    out = []
    for _ in range(lines):
        qs = r.permutation(n)[: r.integers(1, n + 1)].tolist()
        roll = r.random()
        if roll < 0.35:
            out.append(f"{r.choice(one)} " + " ".join(map(str, qs)))
        elif roll < 0.7 and len(qs) >= 2:
            out.append(f"{r.choice(two)} " + " ".join(map(str, qs[: len(qs) // 2 * 2])))
        elif roll < 0.85:
            name = str(r.choice(['M', 'MX', 'MY', 'MR', 'MRX', 'R', 'RY']))
            out.append(f"{name} " + " ".join(("!" if r.random() < 0.2 and name[0] == "M" else "") + str(q)
                                             for q in qs[:3]))
        elif roll < 0.9 and len(qs) >= 2:
            out.append(f"MPP X{qs[0]}*Z{qs[1]}")
        else:
            out.append("TICK")
    return stim.Circuit("\n".join(out))


CIRCUITS = {
    "paper 300 x 12": lambda: paper_random_circuit_stim(300, 12, seed=4, ticks=True),
    "paper 2000 x 6": lambda: paper_random_circuit_stim(2000, 6, seed=5, ticks=True),
    "paper 300 x 12, no TICK": lambda: paper_random_circuit_stim(300, 12, seed=6),
    "paper 2000 x 6, no TICK": lambda: paper_random_circuit_stim(2000, 6, seed=7),
    "random 1": lambda: unitaries_and_collapses(1),
    "random 2": lambda: unitaries_and_collapses(2, n=5, lines=120),
    "random 3": lambda: unitaries_and_collapses(3, n=30, lines=80),
    "every basis": lambda: stim.Circuit("""
        H 0 1 2 3
        MPP X0*X1 Z2*Y3
        TICK
        CX 0 1 2 3
        TICK
        MX 0
        MY 1
        M !2
        MR 3
        TICK
        S 0 1
        CZ 0 2 1 3
        RX 2
        TICK
        TICK
        MRY 0
        SQRT_X 1 3
        ISWAP 0 1
        TICK
        M 0 1 2 3
        TICK
    """),
    "ticks apart": lambda: stim.Circuit("H 0 1\nTICK\nCX 0 1\nS 0\nH 1\nM 1\nTICK\nM 0\nH 0\nTICK\nM 0 1"),
    # one-instruction slices must grow to a TICK: a step ended between H 0 and H 1 would move H 1
    "steps between ticks": lambda: stim.Circuit("H 0\nH 1\nCX 0 1\nH 2\nTICK\nM 0 1 2\nS 3\nTICK\nH 0\nS 1\nTICK\nH 3"),
}


def assert_same_program(mine: Program, theirs: Program) -> None:
    assert np.array_equal(mine.instructions, theirs.instructions)
    assert mine.num_records == theirs.num_records and mine.num_rand_slots == theirs.num_rand_slots
    assert np.array_equal(mine.moment_rows, theirs.moment_rows)
    assert np.array_equal(mine.moment_records, theirs.moment_records)


def pieces_schedule(program: Program, rows, layers=None) -> Schedule:
    """The pieces scheduled as a Scheduler takes them, joined; `layers`: per piece the compile's
    LAYERED_FROM word (None: the scheduler layers them)."""
    scheduler = Scheduler(program.num_qubits, program.ext_qubits, len(program.loops))
    layers = [None] * len(rows) if layers is None else layers
    parts = [scheduler.add(r, layered_from=k) for r, k in zip(rows, layers)] + [scheduler.add(_NO_ROWS, last=True)]
    return joined(parts, scheduler.loop_runs)


@pytest.mark.parametrize("printers", [0, 3])
@pytest.mark.parametrize("pieces", [1, 2, 3, 7, 50, 1000])
@pytest.mark.parametrize("name", sorted(CIRCUITS))
def test_pieces_make_compile_stims_program(monkeypatch, name, pieces, printers):
    """Cut anywhere (TICKs or none), the pieces' rows are compile_stim's Program row for row, the
    pieces printed and their targets read here or by processes of their own (three, where this
    machine forks at all, whatever its processors);
    scheduled as they come (Scheduler), the windows joined are schedule()'s."""
    from cirq_quasarq.compiler import stim_printing

    if stim_printing.printers_available():
        monkeypatch.setattr(stim_printing, "printers_available", lambda: 8)
    circuit = CIRCUITS[name]()
    pieces_, program = compiled_in_pieces(circuit, pieces, with_layers=True, printers=printers)
    rows, layers = [r for r, _ in pieces_], [k for _, k in pieces_]
    assert 1 <= len(rows) <= min(pieces, len(circuit)) + 1
    assert np.array_equal(np.concatenate(rows), program.instructions)
    clear_stim_cache()
    assert_same_program(program, compile_stim(circuit))
    want = schedule(dataclasses.replace(program))  # the scheduler's own layers
    # scheduled as they come, by the scheduler's layers, and by the compile's while it gives them
    for got in (pieces_schedule(program, rows), pieces_schedule(program, rows, layers), schedule(program)):
        for field in ("instructions", "runs", "loop_runs"):
            assert np.array_equal(getattr(got, field), getattr(want, field)), field
    # a piece is layered by the compile exactly while no earlier line stopped it (TICK, MPP, ...)
    given = [k is not None for k in layers]
    assert given == sorted(given, reverse=True)
    if "no TICK" in name:
        assert all(given)


@pytest.mark.parametrize("pieces", [1, 3, 1000])
@pytest.mark.parametrize("name", sorted(CIRCUITS))
def test_a_forked_compile_gives_the_pieces_of_the_compile_in_line(name, pieces):
    """The compile in a process of its own (`stim_printing.ForkedCompile`, what a streamed first call
    uses where the system forks): the same pieces (empty ones too), layered words and Program."""
    from cirq_quasarq.compiler import stim_printing
    from cirq_quasarq.core.program import LAYERED_FROM

    if not stim_printing.printers_available():
        pytest.skip("this system does not fork (or has one processor)")
    circuit = CIRCUITS[name]()
    want, program = compiled_in_pieces(circuit, pieces, with_layers=True)
    forked = stim_printing.ForkedCompile(lambda: stim_pieces(circuit, pieces))
    got = []
    try:
        while True:
            got.append(next(forked))
    except StopIteration as done:
        made = done.value
    finally:
        forked.close()
    assert len(got) == len(want)
    for (rows, word), (rows_want, word_want) in zip(got, want):
        assert np.array_equal(rows, np.asarray(rows_want).reshape(-1, NUM_FIELDS)) and word == word_want
    assert_same_program(made, program)
    word, word_want = made.derived.get(LAYERED_FROM), program.derived.get(LAYERED_FROM)
    assert (word is None) == (word_want is None) and (word is None or word[0] == word_want[0])


def test_a_circuit_of_no_instructions_gives_no_pieces_and_the_empty_program():
    rows, program = compiled_in_pieces(stim.Circuit(), 3)
    assert rows == [] and len(program.instructions) == 0 and program.num_records == 0


def test_a_stream_that_stops_being_layered_partway_schedules_as_the_whole():
    """A TICK (here after a third of the circuit) ends the compile's word: the scheduler layers the
    rest itself, from an empty state, and gives the windows of the whole program."""
    layered_part = paper_random_circuit_stim(300, 12, seed=21)
    rest = paper_random_circuit_stim(300, 24, seed=22, ticks=True)
    circuit = layered_part + rest
    for pieces in (2, 3, 5, 9, 40):
        pieces_, program = compiled_in_pieces(circuit, pieces, with_layers=True)
        rows, layers = [r for r, _ in pieces_], [k for _, k in pieces_]
        assert layers[0] is not None and layers[-1] is None
        want = schedule(program)
        got = pieces_schedule(program, rows, layers)
        for field in ("instructions", "runs", "loop_runs"):
            assert np.array_equal(getattr(got, field), getattr(want, field)), (pieces, field)


def test_the_joined_schedule_joins_its_pieces_rows_when_first_read():
    """A streamed call's device joins the pieces' tables itself, so the whole schedule's host rows
    are one table only once something reads them: counted without it, then joined once."""
    circuit = CIRCUITS["random 3"]()
    rows, program = compiled_in_pieces(circuit, 7)
    scheduler = Scheduler(program.num_qubits, program.ext_qubits, len(program.loops))
    parts = [scheduler.add(r) for r in rows] + [scheduler.add(_NO_ROWS, last=True)]
    whole = joined(parts, scheduler.loop_runs)
    assert not whole._instructions.is_joined and whole.num_rows == len(program.instructions)
    assert "rows" in repr(whole)  # a repr reads no rows either
    assert not whole._instructions.is_joined
    table = whole.instructions
    assert np.array_equal(table, schedule(program).instructions) and whole.instructions is table
    assert whole.num_rows == len(table)


@pytest.mark.parametrize("stretch_rows", [1, 2**62])  # the rows moved as stretches, or one by one
@pytest.mark.parametrize("seed", range(40))
def test_windows_scheduled_as_rows_come_are_the_whole_programs(monkeypatch, seed, stretch_rows):
    """Scheduler.add on runs of rows cut anywhere (inside a step too), of programs with loops,
    conditions, E ranges and steps that reuse a qubit: joined, schedule() of the whole."""
    from cirq_quasarq.schedule import windows

    from .programs import random_program
    from .test_stim_circuit import random_circuit

    monkeypatch.setattr(windows, "_STRETCH_ROWS", stretch_rows)

    rng_ = np.random.default_rng(seed)
    program = (compile_stim(random_circuit(seed, n=4 + seed % 9, noisy=seed % 2 == 0)) if seed % 3
               else random_program(5 + seed, 8, seed, collapse=0.5, noise=True)[0])
    ins = program.instructions
    cuts = np.sort(rng_.choice(np.arange(1, max(2, len(ins))), size=min(len(ins) - 1, 1 + seed % 7), replace=False)) \
        if len(ins) > 1 else []
    rows = np.split(ins, cuts)
    got, want = pieces_schedule(program, rows), schedule(program)
    for field in ("instructions", "runs", "loop_runs"):
        assert np.array_equal(getattr(got, field), getattr(want, field)), field


@pytest.mark.parametrize("text", [
    "H 0\nTICK\nM 0\nTICK\nX_ERROR(0.1) 0\nTICK\nM 0",  # noise
    "H 0\nTICK\nM 0\nTICK\nREPEAT 3 {\n H 0\n M 0\n}",  # a loop
    "H 0\nTICK\nM 0\nTICK\nCX rec[-1] 1\nTICK\nM 1",  # a classically controlled gate
    "H 0\nTICK\nM(0.1) 0\nTICK\nM 0",  # a confusion
    "H 0 1\nTICK\nM 0\nTICK\nMPAD 1\nTICK\nM 1",  # a scratch qubit
    "H 0\nTICK\nM 0\nTICK\nDETECTOR rec[-1]",  # an annotation
])
def test_circuits_of_more_than_unitaries_and_collapses_are_not_streamed(text):
    circuit = stim.Circuit(text)
    with pytest.raises(NotStreamable):
        compiled_in_pieces(circuit, len(circuit))


class StreamingNumpy(NumpyEngine):
    """The NumPy engine taking pieces as the GPU engine does (its run: the pieces joined), to test
    the orchestration on the CPU."""

    streams_pieces = True

    def __init__(self):
        super().__init__(measured_rows=False)  # the full run, which streams (shots._measured_rows_likely)
        self.streamed = 0

    def run_reference_pieces(self, num_qubits, num_records, pieces, key, whole=None):
        pieces = list(pieces)
        self.streamed += 1
        sched = joined([s for _, s in pieces])
        if whole is not None:
            program, schedule_ = whole()
            assert np.array_equal(schedule_.instructions, sched.instructions)
        return self.run_tableau(Program.of_rows(num_qubits, sched.instructions, num_records), sched, key,
                                reference=True)


def test_a_large_new_circuit_streams_and_comes_back_with_its_schedule_and_reference(monkeypatch):
    stream_from(monkeypatch, 100)
    clear_stim_cache()
    circuit = paper_random_circuit_stim(400, 30, seed=11, ticks=True)
    engine = StreamingNumpy()
    program = shots.compiled_with_reference(engine, circuit)
    assert engine.streamed == 1 and cached_stim(circuit) is program
    assert shots.compiled_with_reference(engine, circuit) is program and engine.streamed == 1  # a cache hit
    clear_stim_cache()
    whole = compile_stim(circuit)
    assert_same_program(program, whole)
    want = schedule(whole)
    for field in ("instructions", "runs", "loop_runs"):
        assert np.array_equal(getattr(program.derived["schedule"], field), getattr(want, field)), field
    assert np.array_equal(program.derived["reference"], shots.reference(NumpyEngine(), whole))
    clear_stim_cache()
    sim = QuasarqSimulator(seed=5, device="cpu")
    sim.engine = engine
    streamed = sim.sample_measurements(circuit, 300, bit_packed=True)
    assert engine.streamed == 2
    clear_stim_cache()
    plain = QuasarqSimulator(seed=5, device="cpu").sample_measurements(circuit, 300, bit_packed=True)
    assert np.array_equal(streamed, plain)
    clear_stim_cache()
    program = shots.compiled_with_reference(engine, circuit)
    assert engine.streamed == 3
    # the cache keeps the copy made once the pieces were out: the circuit as compiled, not the object
    kept = stim_circuit._PROGRAMS.get(stim_circuit._fingerprint(circuit))[0][0][1]
    assert kept == circuit and kept is not circuit
    circuit.append("M", [0])  # changed in place: compiled again, not the kept Program
    assert shots.compiled_with_reference(engine, circuit).num_records == program.num_records + 1


def test_small_noisy_or_annotated_circuits_compile_whole(monkeypatch):
    clear_stim_cache()
    engine = StreamingNumpy()
    shots.compiled_with_reference(engine, paper_random_circuit_stim(300, 30, seed=2, ticks=True))  # too small
    stream_from(monkeypatch, 1)
    noisy = paper_random_circuit_stim(300, 30, seed=3, ticks=True)
    noisy.append("X_ERROR", [0, 1], 0.1)
    noisy.append("M", [0, 1])
    program = shots.compiled_with_reference(engine, noisy)  # NotStreamable at the last piece: whole
    assert "reference" not in program.derived and cached_stim(noisy) is program
    shots.compiled_with_reference(engine, stim.Circuit.generated("repetition_code:memory", distance=3, rounds=30))
    assert engine.streamed == 0


@pytest.mark.parametrize("stretch_rows", [1, 2**62])  # the rows moved as stretches, or one by one
def test_a_window_with_an_identity_row_waits_for_the_rows_that_may_join_it(monkeypatch, stretch_rows):
    """The frontier's edge: after H 0 1 and I 1, qubit 0's latest layer is 1, so layer 2 (where I,
    the opcode of rank 0, sits) may still get rows; X 0 comes in the next run and joins it."""
    from cirq_quasarq.core.program import ProgramBuilder
    from cirq_quasarq.schedule import windows

    monkeypatch.setattr(windows, "_STRETCH_ROWS", stretch_rows)

    b = ProgramBuilder(2)
    b.next_step()
    b.gate("H", 0)
    b.gate("H", 1)
    b.next_step()
    b.gate("I", 1)
    b.next_step()
    b.gate("X", 0)
    program = b.build()
    ins = program.instructions
    got, want = pieces_schedule(program, [ins[:3], ins[3:]]), schedule(program)
    for field in ("instructions", "runs", "loop_runs"):
        assert np.array_equal(getattr(got, field), getattr(want, field)), field


@pytest.mark.parametrize("where", ["thread", "process"])
def test_the_compile_ahead_gives_the_pieces_of_the_compile_in_line(where):
    """StreamedCompile(ahead=True) compiles in a thread of its own, StreamedCompile(forked=True) in a
    process of its own (`stim_printing.ForkedCompile`): the same pieces, schedules and Program
    (its layered word too) as in line; an error of the compile reaches the consumer as itself; a
    consumer that stops early stops the compile and leaves no thread or process behind."""
    import threading

    from cirq_quasarq.compiler import stim_printing
    from cirq_quasarq.core.program import LAYERED_FROM

    if where == "process" and not stim_printing.printers_available():
        pytest.skip("this system does not fork (or has one processor)")
    ahead = dict(ahead=True, forked=where == "process")
    for circuit in (paper_random_circuit_stim(300, 40, seed=5), CIRCUITS["paper 300 x 12"](), CIRCUITS["random 2"]()):
        runs = {}
        for mode in ("in line", where):
            clear_stim_cache()
            compiling = shots.StreamedCompile(circuit, 9, **(ahead if mode == where else dict(ahead=False, forked=False)))
            runs[mode] = [(p.instructions.copy(), s.runs.copy()) for p, s in compiling], compiling.whole()
        (got, (prog_a, sched_a)), (want, (prog_b, sched_b)) = runs[where], runs["in line"]
        assert len(got) == len(want) > 2
        for (ga, gb), (wa, wb) in zip(got, want):
            assert np.array_equal(ga, wa) and np.array_equal(gb, wb)
        assert_same_program(prog_a, prog_b)
        assert np.array_equal(sched_a.instructions, sched_b.instructions)
        word_a, word_b = prog_a.derived.get(LAYERED_FROM), prog_b.derived.get(LAYERED_FROM)
        assert (word_a is None) == (word_b is None)
        if word_a is not None:
            assert word_a[0] == word_b[0] and word_a[1] is prog_a.rows

    noisy = paper_random_circuit_stim(300, 40, seed=6)
    noisy.append("X_ERROR", [0], 0.1)
    with pytest.raises(NotStreamable, match="write more than unitaries and collapses"):
        list(shots.StreamedCompile(noisy, 9, **ahead))

    before = threading.active_count()
    compiling = shots.StreamedCompile(paper_random_circuit_stim(300, 40, seed=7), 9, **ahead)
    pid = getattr(compiling._compiling, "_pid", None)
    pieces = iter(compiling)
    next(pieces)
    pieces.close()  # the consumer gives up after one piece
    assert threading.active_count() == before
    if where == "thread":
        assert not compiling._compiling._thread.is_alive()
    else:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


class InterruptedAfterOnePiece(StreamingNumpy):
    """The engine taking one piece, then interrupted (Ctrl-C while the device runs the pieces)."""

    def run_reference_pieces(self, num_qubits, num_records, pieces, key, whole=None):
        for _ in pieces:
            raise KeyboardInterrupt


def test_an_interrupted_streamed_call_stops_its_compile_and_keeps_nothing(monkeypatch):
    """Ctrl-C in a streamed first call: the interrupt reaches the caller, the compile's thread has
    stopped, the compile cache holds nothing for the circuit, and the next call samples the bits of
    a call never interrupted."""
    import threading

    from cirq_quasarq.compiler import stim_printing

    stream_from(monkeypatch, 100)
    start, printers, heads = stim_printing.PrintedPieces._start, [], []

    def recorded(self):
        start(self)
        heads.append(self._head)

    monkeypatch.setattr(stim_printing.PrintedPieces, "_start", recorded)
    forked = stim_printing.ForkedCompile.__init__

    def recorded_compile(self, *args):
        forked(self, *args)
        printers.append(self._pid)

    monkeypatch.setattr(stim_printing.ForkedCompile, "__init__", recorded_compile)
    clear_stim_cache()
    circuit = paper_random_circuit_stim(400, 30, seed=12)
    before = threading.active_count()
    sim = QuasarqSimulator(seed=3, device="cpu")
    sim.engine = InterruptedAfterOnePiece()
    with pytest.raises(KeyboardInterrupt):
        sim.sample_measurements(circuit, 100, bit_packed=True)
    assert threading.active_count() == before and cached_stim(circuit) is None
    assert printers or not stim_printing.forked_compile_available()
    stim_printing.reap_ended(wait=True)
    for pid in printers + heads:  # and its compile's process (or its printers' head) reaped
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    for head in heads:  # and the printers with it
        with pytest.raises(ProcessLookupError):
            os.killpg(head, 0)
    sim.engine = StreamingNumpy()
    again = sim.sample_measurements(circuit, 100, bit_packed=True)
    assert sim.engine.streamed == 1
    clear_stim_cache()  # the interrupted call drew no key (a call draws it after the compile)
    plain = QuasarqSimulator(seed=3, device="cpu").sample_measurements(circuit, 100, bit_packed=True)
    assert np.array_equal(again, plain)
