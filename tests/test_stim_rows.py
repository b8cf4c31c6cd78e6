"""A printer makes a piece's rows ahead (`compiler.stim_rows`): pieces of whole instructions and
TICKs, made ahead and placed by the compile, give the Program of the walk of the whole circuit and of
the per-target path, with TICKs anywhere, collapses in every basis among the gates, pairs and single
qubits in one batch, however the circuit is cut into pieces and however many rows are sorted at once;
a piece of anything else is not made ahead. (The golden Programs from made pieces:
tests/test_stim_compile_golden.py.)"""

from __future__ import annotations

import mmap

import numpy as np
import pytest

stim = pytest.importorskip("stim")

from cirq_quasarq.compiler import stim_circuit, stim_memory, stim_printing, stim_rows, stim_text

from benchmarks.random_clifford import paper_random_circuit_stim

from .test_stim_compile_golden import DigestedHere, program_digest


@pytest.fixture(autouse=True)
def numpy_rows(monkeypatch):
    """Printers make rows ahead only without the host's compiled path (with it they hand over read
    targets, which host_rows.cpp makes into rows: tests/test_native_rows.py); this module tests the
    NumPy path, forked printers included (they inherit the setting)."""
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "0")


def mixed(seed: int) -> "stim.Circuit":
    """Whole instructions of every kind a printer makes ahead, on distinct qubits each, TICKs
    anywhere (first, last, two in a row); no two lines in a row of one name (Stim would join them,
    naming a qubit twice)."""
    r = np.random.default_rng(seed)
    lines = ["TICK"] if seed % 2 else []
    for k in range(80):
        qs = r.permutation(16)[: r.integers(1, 9)].tolist()
        roll = r.random()
        if roll < 0.25:
            line = f"{r.choice(['H', 'S', 'X', 'SQRT_Y', 'C_XYZ'])} " + " ".join(map(str, qs))
        elif roll < 0.5 and len(qs) >= 2:
            line = f"{r.choice(['CX', 'CZ', 'SWAP', 'ISWAP', 'XCY'])} " + " ".join(map(str, qs[: len(qs) // 2 * 2]))
        elif roll < 0.75:
            name = r.choice(["M", "MR", "R", "MX", "MY", "MRX", "MRY", "RX", "RY"])
            bang = not name.startswith("R")
            line = f"{name} " + " ".join(("!" if bang and r.random() < 0.3 else "") + str(q) for q in qs)
        elif roll < 0.85:
            line = "TICK"
            if r.random() < 0.3:
                lines.append("TICK")
        else:
            line = f"{r.choice(['H', 'S_DAG'])} " + " ".join(map(str, qs))
        if lines and line != "TICK" and lines[-1].split(" ")[0] == line.split(" ")[0]:
            lines.append("TICK")  # (a TICK between: both kept whole)
        lines.append(line)
    if seed % 3 == 0:
        lines.append("TICK")
    return stim.Circuit("\n".join(lines))


def compiled(circuit, pieces: int, made: list, monkeypatch):
    """The Program of the whole compile from printed pieces digested here, and of the streamed compile
    (with a ramp of half pieces); the whole compile's pieces."""
    monkeypatch.setattr(stim_circuit, "PRINTED_MIN", 0)
    monkeypatch.setattr(stim_memory, "PRINT_HERE", False)  # (printers print what Stim prints)
    monkeypatch.setattr(stim_circuit, "PRINTED_PIECES", pieces)
    texts: list = []
    monkeypatch.setattr(stim_circuit, "PrintedPieces", lambda *args, **kw: texts.append(DigestedHere(*args, **kw))
                        or texts[-1])
    walk = stim_circuit._StimCompiler._walk_prepared
    monkeypatch.setattr(stim_circuit._StimCompiler, "_walk_prepared",
                        lambda self, piece: made.append(piece) or walk(self, piece))
    whole = stim_circuit.compile_new_stim(circuit)
    streamed = stim_circuit.stim_pieces(circuit, pieces, printers=0, ramp=2)  # (half pieces after the first)
    while True:
        try:
            next(streamed)
        except StopIteration as finished:
            return whole, finished.value, texts[0].bounds


@pytest.mark.parametrize("sorted_rows", [1, 5, 1 << 14])
@pytest.mark.parametrize("pieces", [2, 3, 7])
@pytest.mark.parametrize("case", ["paper 40", "paper 300", "paper 300 ticks", "paper 1400 ticks"] +
                         [f"mixed {seed}" for seed in range(6)])
def test_pieces_made_ahead_give_the_walks_program(monkeypatch, case, pieces, sorted_rows):
    if case.startswith("paper"):
        n = int(case.split()[1])
        circuit = paper_random_circuit_stim(n, 16, seed=n, ticks=case.endswith("ticks"))
    else:
        circuit = mixed(int(case.split()[1]))
    want = program_digest(stim_circuit._StimCompiler(stim, circuit.num_qubits).run(circuit))
    assert program_digest(stim_circuit._StimCompiler(stim, circuit.num_qubits, whole_instructions=False)
                          .run(circuit)) == want
    monkeypatch.setattr(stim_circuit, "_SORTED_ROWS", sorted_rows)
    made: list = []
    whole, streamed, whole_bounds = compiled(circuit, pieces, made, monkeypatch)
    assert program_digest(whole) == program_digest(streamed) == want
    # every piece but the first (printed here, as the engine's first) was made ahead, in both compiles,
    # but one of TICKs alone (its bounds depend on the printers this machine may run)
    def ahead(bounds):
        return sum(any(len(inst.targets_copy()) for inst in circuit[lo:hi]) for lo, hi in bounds[1:])

    assert len(made) == ahead(whole_bounds) + ahead(stim_circuit._piece_bounds(circuit, pieces, 2))
    if "ticks" in case or case.startswith("mixed"):
        assert any(run is None for piece in made for run in piece.runs)


@pytest.mark.parametrize("text", [
    "H 0 1\nM(0.1) 0",  # a flip probability
    "H 0 1\nH[tag] 0",  # a tag
    "H 0 1\nX_ERROR(0.1) 0",  # a channel
    "H 0 1\nCX 0 1 1 2",  # a qubit named twice in one instruction
    "H 0 1\nM 0 0",
    "H 0 1\nREPEAT 2 {\n    H 0\n}",
    "H 0 1\nM 0\nDETECTOR rec[-1]",
    "H 0 1\nM 0\nCX rec[-1] 1",
    "H 0 1\nQUBIT_COORDS(1, 2) 0",
    "H 0 1\nI 0",  # no rows
    "H 0 1\nMPP X0*Z1",
    "H 0 1\nH !0",  # '!' on a unitary: never Stim's own text
    "TICK",
    "",
])
def test_a_piece_of_anything_else_is_not_made_ahead(text):
    short, digest = stim_rows.digest_piece(text)
    assert not isinstance(digest, stim_rows.PreparedPiece)
    want_short, want = stim_text._read_lines(text)  # its lines' targets read, as before
    assert short == want_short and (digest is None) == (want is None)
    if want is not None:
        assert all(np.array_equal(getattr(digest, f), getattr(want, f)) for f in ("qubits", "starts", "line", "chars"))


@pytest.mark.parametrize("text", ["H 0 1\nTICK\nCX 0 1 2 3\nM !0 2\nTICK\nMRX 1 !3", "TICK\nTICK\nM 0", "H 0"])
def test_a_piece_of_whole_instructions_and_ticks_is_made_ahead(text):
    short, digest = stim_rows.digest_piece(text)
    assert short == "" and isinstance(digest, stim_rows.PreparedPiece)
    lines = text.split("\n")
    assert sum(run is None for run in digest.runs) == lines.count("TICK")
    rows = sum(len(run.rows) for run in digest.runs if run is not None)
    program = stim_circuit._StimCompiler(stim, stim.Circuit(text).num_qubits).run(stim.Circuit(text))
    assert rows == len(program.instructions)


@pytest.mark.skipif(not stim_printing.printers_available(), reason="no fork and memfd here (or one processor)")
@pytest.mark.parametrize("ticks", [False, True])
def test_a_streamed_compile_from_printers_takes_their_rows(monkeypatch, ticks):
    """Printers of their own processes make the pieces' rows; the compile moves their slots on in its
    private mapping of the printer's file (the rows are never written back) and gives the Program
    of the walk."""
    monkeypatch.setattr(stim_printing, "printers_available", lambda: 3)
    circuit = paper_random_circuit_stim(2000, 30, seed=11, ticks=ticks)
    made = []
    walk = stim_circuit._StimCompiler._walk_prepared
    monkeypatch.setattr(stim_circuit._StimCompiler, "_walk_prepared",
                        lambda self, piece: made.append(piece) or walk(self, piece))
    streamed = stim_circuit.stim_pieces(circuit, 6, printers=3, ramp=3)
    while True:
        try:
            next(streamed)
        except StopIteration as finished:
            program = finished.value
            break
    assert program_digest(program) == program_digest(stim_circuit._StimCompiler(stim, circuit.num_qubits).run(circuit))
    assert len(made) == len(stim_circuit._piece_bounds(circuit, 6, 3)) - 1
    for piece in made:  # views of the printer's file, mapped here (not copies)
        for run in piece.runs:
            if run is not None:
                owner = run.rows
                while isinstance(owner, np.ndarray):
                    owner = owner.base
                assert isinstance(owner, memoryview) and isinstance(owner.obj, mmap.mmap)


@pytest.mark.parametrize("count", [1, 2, 5, 30, 97, 400])
@pytest.mark.parametrize("pieces", [1, 3, 24])
@pytest.mark.parametrize("ramp", [0, 1, 4])
@pytest.mark.parametrize("part", [2, 4])
def test_piece_bounds_cover_the_circuit_a_quarter_then_the_ramps_parts(count, pieces, ramp, part):
    circuit = stim.Circuit("\n".join(f"H {k}" if k % 2 else f"S {k}" for k in range(count)))
    bounds = stim_circuit._piece_bounds(circuit, pieces, ramp, part)
    assert bounds[0][0] == 0 and bounds[-1][1] == count
    assert all(hi == lo for (_, hi), (lo, _) in zip(bounds, bounds[1:])) and all(lo < hi for lo, hi in bounds)
    step = -(-count // pieces)
    sizes = [hi - lo for lo, hi in bounds]
    want = [-(-step // 4)] + [-(-step // part)] * ramp + [step] * len(bounds)
    assert sizes[:-1] == want[:len(sizes) - 1] and sizes[-1] <= want[len(sizes) - 1]


def test_a_piece_of_few_qubits_of_large_numbers_is_made_as_with_small_ones():
    """A printer numbers the qubits of a piece by rank where their numbers are large beside their
    count (it keeps one entry a qubit number): the same rows and batches as with small numbers."""
    small, large = ("H 9 3\nCX 3 9 7 5\nS 9\nM 5 9\nMRY 7 !9", "H 999999999 3\nCX 3 999999999 7 5\nS 999999999\n"
                    "M 5 999999999\nMRY 7 !999999999")
    got, want = stim_rows.digest_piece(large)[1], stim_rows.digest_piece(small)[1]
    for g, w in zip(got.runs, want.runs):
        rows = g.rows.copy()
        for field in (1, 2):  # the qubits' columns, 999999999 as 9
            rows[:, field][rows[:, field] == 999999999] = 9
        assert np.array_equal(rows, w.rows) and np.array_equal(g.batches, w.batches)
        assert np.array_equal(np.where(g.qa == 999999999, 9, g.qa), w.qa)
