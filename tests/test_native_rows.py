"""The Stim compiler's compiled rows (cuda_src/host_rows.cpp) against their NumPy form, the definition:
a target text read (`stim_text._parse_targets`) and a segment of whole instructions made, placed and
sorted (`_StimCompiler._compiled_segment` against `_place_segment`), for every name the whole path
takes, at the edges of what the text reader accepts. tests/test_stim_compile_golden.py runs its
golden Programs both ways too."""

import random

import numpy as np
import pytest

from cirq_quasarq.compiler import stim_circuit, stim_text
from cirq_quasarq.compiler.stim_instructions import _N, _plain
from cirq_quasarq.core import native

from .test_pieces import compiled_in_pieces
from .test_stim_compile_golden import program_digest

stim = pytest.importorskip("stim")
pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C++ compiler on this machine")


def both(monkeypatch, make):
    """`make()` with the compiled path and without: both results."""
    if native.library() is None:
        pytest.fail(f"the compiled path did not build: {native.why_not()}")
    out = []
    for flag in ("1", "0"):
        monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", flag)
        out.append(make())
    return out


def same_parse(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return all((x is None and y is None) or (x is not None and y is not None and x.dtype == y.dtype
                                               and np.array_equal(x, y)) for x, y in zip(a, b))


TEXTS = [
    "0", "7", "0 1 2", "10 200 3000\n4\n5 6", "!0", "!0 1 !2\n!3", "123456789", "000000001 007",
    "999999999 0", "1\t2\r3", "1\x002",  # any byte up to ' ' parts targets; only '\n' ends a line
    "1\n\n2",  # an empty line: an empty target
    "", " ", "1 ", " 1", "1  2", "1\n", "\n1", "1234567890", "!", "!!1", "1!", "1!2", "! 1", "1 !", "a",
    "1 x", "1,2", "-1", "+1", "1.0", "١", "1 ١", "99999999 !999999999",
]


@pytest.mark.parametrize("text", TEXTS)
def test_a_target_text_reads_as_numpys(monkeypatch, text):
    """Every form the NumPy reader takes or refuses, each way: the same arrays, or None both."""
    compiled, numpy_read = both(monkeypatch, lambda: stim_text._parse_targets(text))
    assert same_parse(compiled, numpy_read)
    if compiled is not None:
        assert compiled[0].dtype == np.int64 and compiled[2].dtype == np.int64


@pytest.mark.parametrize("seed", range(40))
def test_random_target_texts_read_as_numpys(monkeypatch, seed):
    r = random.Random(seed)
    lines = []
    for _ in range(r.randint(1, 60)):
        targets = [("!" if r.random() < 0.2 else "") + str(r.choice([r.randint(0, 9), r.randint(0, 10**r.randint(1, 9) - 1)]))
                   for _ in range(r.randint(1, 12))]
        lines.append(" ".join(targets))
    text = "\n".join(lines)
    if seed % 4 == 3:  # one flaw somewhere: both refuse it
        at = r.randrange(len(text) + 1)
        text = text[:at] + r.choice(["  ", "!!", "x", "1234567890", "\n\n"]) + text[at:]
    compiled, numpy_read = both(monkeypatch, lambda: stim_text._parse_targets(text))
    assert same_parse(compiled, numpy_read)
    assert compiled is not None or seed % 4 == 3


def _args(name: str) -> str:
    if name in ("PAULI_CHANNEL_1",):
        return "(0.01, 0.02, 0.03)"
    if name in ("PAULI_CHANNEL_2",):
        return "(" + ", ".join(["0.001"] * 15) + ")"
    return "(0.05)"


def plain_circuit(seed: int, n: int, twice: float) -> str:
    """Lines of every name the whole path takes (aliases too; Pauli channels with their
    probabilities, collapses with '!' and with a flip probability of 0), TICKs, REPEAT blocks and
    lines the whole path does not take between them (a Pauli product, a gate a record controls, a
    channel with a flip); a qubit named twice in a line at rate `twice`."""
    r = random.Random(seed)
    plain = _plain(stim)
    names = sorted(plain)

    def line() -> str:
        name = r.choice(names)
        kind, _, pair, _, _ = plain[name]
        qs = list(range(n))
        r.shuffle(qs)
        k = r.randint(1, max(1, n // 2)) * (2 if pair else 1)
        k = min(k, n - n % 2 if pair else n)
        targets = qs[:k]
        if r.random() < twice and len(targets) >= 2:
            targets[-1] = targets[0] if not pair or len(targets) > 2 else targets[-1]
        collapse = stim.gate_data(name).produces_measurements or stim.gate_data(name).is_reset
        text = " ".join(("!" if collapse and not stim.gate_data(name).is_reset and r.random() < 0.3 else "")
                        + str(q) for q in targets)
        args = _args(name) if kind == _N else ("(0)" if collapse and r.random() < 0.1 and
                                              stim.gate_data(name).produces_measurements else "")
        return f"{name}{args} {text}"

    def block(depth: int):
        out = []
        for _ in range(r.randint(3, 25)):
            roll = r.random()
            if roll < 0.75:
                out.append(line())
            elif roll < 0.85:
                out.append("TICK")
            elif roll < 0.9 and depth < 2:
                body = block(depth + 1)
                out.append(f"REPEAT {r.randint(1, 3)} {{")
                out.extend("    " + b for b in body)
                out.append("}")
            elif roll < 0.93:
                a, b = r.sample(range(n), 2) if n > 1 else (0, 0)
                out.append(f"MPP X{a}*Z{b}" if a != b else f"MPP X{a}")
            elif roll < 0.97:  # placed after the step's records (`rtop`)
                out.append(f"CX rec[-1] {r.randrange(n)}")
            else:
                out.append(f"X_ERROR(0.1) {r.randrange(n)}")
        return out

    return "\n".join(["M 0"] + block(0))  # (a record for rec[-1] from the start)


@pytest.mark.parametrize("chars", [1, 40, 1 << 17])
@pytest.mark.parametrize("seed", range(30))
def test_whole_instructions_compile_to_numpys_program(monkeypatch, seed, chars):
    """Every whole-path name, at segments cut anywhere (a line each, a few lines, all): the Program
    of the compiled path is the NumPy path's and the per-target path's, table for table."""
    n = [2, 5, 17, 64, 300][seed % 5]
    text = plain_circuit(seed, n, twice=0.05 if seed % 3 == 0 else 0)
    try:
        circuit = stim.Circuit(text)
    except ValueError:  # a repeat Stim refuses (a pair instruction on one qubit twice)
        pytest.skip("Stim refused the drawn text")
    monkeypatch.setattr(stim_circuit, "_SEGMENT_CHARS", chars)
    compiled, numpy_made = both(monkeypatch, lambda: program_digest(
        stim_circuit._StimCompiler(stim, circuit.num_qubits).run(circuit)))
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "0")
    per_target = program_digest(stim_circuit._StimCompiler(stim, circuit.num_qubits, whole_instructions=False)
                                .run(circuit))
    assert compiled == numpy_made == per_target


def test_the_compiled_segment_is_taken_and_steps_aside_for_a_qubit_named_twice(monkeypatch):
    """The compiled path writes segments of distinct targets and gives back, with nothing written, a
    segment where a line names a qubit twice (which the NumPy path splits there)."""
    taken = []
    real = stim_circuit._StimCompiler._compiled_segment
    monkeypatch.setattr(stim_circuit._StimCompiler, "_compiled_segment",
                        lambda self, *args: taken.append(real(self, *args)) or taken[-1])
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "1")
    circuit = stim.Circuit("H 0 1 2\nCX 0 1\nM !0 1\nMX 2\nTICK\nH 0 0 1\nCX 1 2\nM 1 1")
    monkeypatch.setattr(stim_circuit, "_SEGMENT_CHARS", 6)  # segments: H, CX; M, MX; H, CX; M
    compiled = program_digest(stim_circuit._StimCompiler(stim, 3).run(circuit))
    assert taken == [True, True, False, False]
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "0")
    assert compiled == program_digest(stim_circuit._StimCompiler(stim, 3).run(circuit))


def test_a_segment_that_cannot_be_placed_leaves_the_state_as_it_was():
    """`qq_host_place_segment` refuses a qubit named twice, a '!' on an instruction that does not read
    it, a qubit past n and an odd pair count before it moves any qubit's free position."""
    lib = native.library()
    if lib is None:
        pytest.fail(f"the compiled path did not build: {native.why_not()}")
    a = native.address
    one = (5, -1, 0, 0, 0, 0, 0, 0)  # a one-qubit unitary
    pair = (9, -1, 1, 0, 0, 0, 0, 0)
    cases = [([one], [0, 1, 0], None, 1), ([one], [0, 1], [0, 1], 2), ([one], [0, 4], None, 3),
             ([pair], [0, 1, 2], None, 3), ([one, one], [0, 1, 1], None, 0)]
    for entries, qubits, flags, want in cases:
        entries = np.array(entries, dtype=np.int32)
        bounds = np.array([0, 2, 3] if len(entries) == 2 else [0, len(qubits)], dtype=np.int64)
        qubits = np.array(qubits, dtype=np.int64)
        free = np.array([3, 1, 4, 1], dtype=np.int64)
        stamp = np.full(4, -1, dtype=np.int64)
        inverted = None if flags is None else np.array(flags, dtype=np.uint8)
        for room in (3, 2):  # the positions' width, 3, fits or does not
            pos, out, counts = np.zeros(9, dtype=np.int64), np.zeros(7, dtype=np.int64), np.full(4, 7, dtype=np.int64)
            free, stamp = np.array([3, 1, 4, 1], dtype=np.int64), np.full(4, -1, dtype=np.int64)
            code = lib.qq_host_place_segment(a(entries), len(entries), a(qubits),
                                             None if inverted is None else a(inverted), a(bounds), 4, a(stamp), 0,
                                             a(free), a(pos), a(counts), room, a(out))
            assert code == want
            if want:
                assert free.tolist() == [3, 1, 4, 1]
            else:  # H 0 1, then H 1: positions 3, 1, then 2
                assert pos[:3].tolist() == [3, 1, 2] and free.tolist() == [4, 3, 4, 1]
                assert out.tolist() == [3, 1, 3, 0, 0, -1, 3]
                assert counts.tolist() == ([1, 1, 1, 7] if room == 3 else [7] * 4)


class _WrittenAtTheWait(stim_circuit._RowWriter):
    """A writer whose rows are written only when waited for (their room filled with a mark until
    then): a Program read before its writer's wait differs from the NumPy walk's."""

    def __init__(self, lib):
        super().__init__(lib)
        self._given = []

    def write(self, arrays, *args):
        arrays[-1][...] = -7
        self._given.append((arrays, args))

    def wait(self):
        given, self._given = self._given, []
        for _, args in given:
            self._lib.qq_host_write_segment(*args)


def _long_moments(seed: int) -> str:
    """Moments of many segments over many positions (their ends join them as one block, reading
    the rows), and a collapse of which the next step's rows depend on the record."""
    r = random.Random(seed)
    lines = []
    for _ in range(6):
        for _ in range(r.randint(20, 80)):
            q = r.sample(range(12), r.choice([2, 4]))
            lines.append(r.choice(["H", "S", "SQRT_X"]) + " " + str(q[0]))
            lines.append(r.choice(["CX", "CZ", "SWAP"]) + " " + " ".join(map(str, q)))
        lines.append("M " + " ".join(map(str, r.sample(range(12), 3))))
        lines.append("TICK")
    return "\n".join(lines)


@pytest.mark.parametrize("seed", range(12))
def test_rows_written_late_make_the_same_program(monkeypatch, seed):
    """The compile reads no row before the writer has written it: with every segment written only
    at the wait, the Program is the NumPy walk's, whole and streamed in pieces (whose rows are read
    after each piece)."""
    from benchmarks.random_clifford import paper_random_circuit_stim

    if native.library() is None:
        pytest.fail(f"the compiled path did not build: {native.why_not()}")
    monkeypatch.setattr(stim_circuit, "_RowWriter", _WrittenAtTheWait)
    monkeypatch.setattr(stim_circuit, "_SEGMENT_CHARS", [1, 40, 1 << 17][seed % 3])
    texts = [plain_circuit(seed, [5, 17, 64][seed % 3], 0), _long_moments(seed)]
    circuits = [stim.Circuit(t) for t in texts] + [paper_random_circuit_stim(300, 12, seed=seed, ticks=seed % 2 == 1)]
    for circuit in circuits:
        monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "1")
        late = program_digest(stim_circuit._StimCompiler(stim, circuit.num_qubits).run(circuit))
        monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "0")
        want = program_digest(stim_circuit._StimCompiler(stim, circuit.num_qubits).run(circuit))
        assert late == want
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "1")
    compiling, seen = stim_circuit.stim_pieces(circuits[-1], 4, printers=0), []
    while True:  # each piece's rows as they are when it is handed on
        try:
            seen.append(np.array(next(compiling)[0], copy=True))
        except StopIteration as done:
            program = done.value
            break
    assert program_digest(program) == want and len(seen) > 1
    assert np.array_equal(np.concatenate(seen), np.asarray(program.instructions))


@pytest.mark.parametrize("depth", [4093, 4094, 4095, 6000])  # positions 4095, 4096 (the room), 4097, 6002 wide
def test_a_segment_of_positions_wider_than_the_placing_counts_gives_numpys_program(monkeypatch, depth):
    """A segment whose rows span more positions than `qq_host_place_segment` counts into its room
    (one qubit `depth` gates deep, another at the start) takes its counts from NumPy: the same Program."""
    circuit = stim.Circuit("".join("HS"[k % 2] + " 0\n" for k in range(depth)) + "CX 1 2\nSQRT_X 1 0 2\nM 0 1 2")
    assert len(circuit) == depth + 3
    compiled, numpy_made = both(monkeypatch, lambda: program_digest(
        stim_circuit._StimCompiler(stim, circuit.num_qubits).run(circuit)))
    assert compiled == numpy_made


@pytest.mark.parametrize("writers", [1, 3, 16])
def test_the_writer_threads_write_as_the_caller_would(writers):
    """Segments given to the writer threads, many at once and of sizes far apart (the first the
    longest, so that threads end later ones before it), come out as written in the calling thread;
    the tickets count them, a ticket counted as written (`qq_host_segments_done`) has every job up
    to it written whenever it is read, and a wait for the last returns with all of them written."""
    lib = native.library()
    if lib is None:
        pytest.fail(f"the compiled path did not build: {native.why_not()}")
    lib.qq_host_segment_writers(writers)
    a = native.address
    r = np.random.default_rng(5)
    entries = np.array([(5, -1, 0, 0, 0, 0, 0, 0), (9, 3, 1, 1, 1, 0, 0, 0), (11, -1, 0, 1, 1, 1, 0, 0)],
                       dtype=np.int32)
    jobs = []
    for k in range(300):
        n = 2_000_000 if k == 0 else 64 if k % 7 else 400_000  # the first job longest, one in seven large
        qubits = np.concatenate([r.permutation(n)[:10], r.permutation(n)[:20], r.permutation(n)[:7]]).astype(np.int64)
        bounds = np.array([0, 10, 30, 37], dtype=np.int64)
        if n > 64:
            qubits = r.permutation(n).astype(np.int64)
            bounds = np.array([0, n // 4, n // 4 + n // 2, n], dtype=np.int64)
        free = r.integers(0, 5, n).astype(np.int64)
        pos, counts = np.empty(3 * len(qubits), dtype=np.int64), np.empty(3 * len(qubits) + 1, dtype=np.int64)
        out = np.empty(7, dtype=np.int64)
        assert lib.qq_host_place_segment(a(entries), 3, a(qubits), None, a(bounds), n, a(np.full(n, -1, dtype=np.int64)),
                                         0, a(free), a(pos), a(counts), len(counts), a(out)) == 0
        rows, low, high = out[:3].tolist()
        args = [a(entries), 3, a(qubits), None, a(bounds), a(pos), rows, low, high, 100 * k, 7 * k, -1, k]
        mine, theirs = np.empty((rows, 9), dtype=np.int32), np.full((rows, 9), -7, dtype=np.int32)
        scratch, theirs_scratch = (np.empty(high - low + 1, dtype=np.int64) for _ in range(2))
        lib.qq_host_write_segment(*args, a(counts), a(scratch), a(mine))
        jobs.append((mine, theirs, [*args, a(counts), a(theirs_scratch), a(theirs)],
                     (qubits, bounds, pos, counts, theirs_scratch)))
    # all given at once, then read while the threads write them
    jobs = [(mine, theirs, lib.qq_host_write_segment_later(*args), kept) for mine, theirs, args, kept in jobs]
    tickets = [ticket for _, _, ticket, _ in jobs]
    assert tickets == list(range(tickets[0], tickets[0] + len(jobs))) and tickets[0] > 0
    checked = 0  # jobs seen written while the threads went on (every 499th row: read at once)
    while checked < len(jobs):
        done = lib.qq_host_segments_done()
        for mine, theirs, ticket, _ in jobs[checked:]:
            if ticket > done:
                break
            assert np.array_equal(mine[::499], theirs[::499]), (ticket, done)
            checked += 1
    lib.qq_host_segments_written(tickets[-1])
    assert lib.qq_host_segments_done() >= tickets[-1]
    for mine, theirs, _, _ in jobs:
        assert np.array_equal(mine, theirs)
    lib.qq_host_segment_writers(1)


def test_a_forked_process_compiles_with_a_writer_of_its_own(tmp_path):
    """A process forked after this one's writer thread ran (a pool's worker) starts its own: its
    compile returns, with this process's Program."""
    import multiprocessing

    if native.library() is None or "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no compiled path, or no fork on this platform")
    from benchmarks.random_clifford import paper_random_circuit_stim

    circuit = paper_random_circuit_stim(200, 10, seed=3)
    want = program_digest(stim_circuit._StimCompiler(stim, circuit.num_qubits).run(circuit))
    with multiprocessing.get_context("fork").Pool(1) as pool:
        got = pool.apply_async(_compiled_digest, (str(circuit),)).get(timeout=60)
    assert got == want


def _compiled_digest(text: str):
    circuit = stim.Circuit(text)
    return program_digest(stim_circuit._StimCompiler(stim, circuit.num_qubits).run(circuit))


def test_a_compile_that_fails_waits_for_its_writer(monkeypatch):
    """An error after segments went to the writer thread waits for them before the compile lets go
    of their arrays."""
    if native.library() is None:
        pytest.fail(f"the compiled path did not build: {native.why_not()}")
    waited = []
    real_wait = stim_circuit._RowWriter.wait
    monkeypatch.setattr(stim_circuit._RowWriter, "wait", lambda self: waited.append(len(self._held)) or real_wait(self))
    monkeypatch.setattr(stim_circuit._StimCompiler, "_program", lambda self: 1 / 0)
    monkeypatch.setattr(stim_circuit, "_SEGMENT_CHARS", 1)
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "1")
    circuit = stim.Circuit("H 0 1 2\nCX 0 1\nM 2\nH 0\nCX 1 2")
    compiler = stim_circuit._StimCompiler(stim, 3)
    with pytest.raises(ZeroDivisionError):
        compiler.run(circuit)
    assert waited and waited[0] > 0 and not compiler._writer._held


def test_every_whole_name_is_drawn():
    """The random circuits above draw from every name `_plain` takes: an instruction added to the
    whole path is tested by them without a change here."""
    drawn = set()
    for seed in range(30):
        for line in plain_circuit(seed, 17, 0).split("\n"):
            drawn.add(line.strip().split(" ")[0].split("(")[0])
    assert set(_plain(stim)) <= drawn


def test_printers_hand_over_checked_runs_which_the_compiled_path_places(monkeypatch):
    """With the compiled path a printer makes no rows: told the circuit's qubits, it reads a piece of
    whole instructions and TICKs into runs and checks them (`stim_rows.CompiledPiece`), else it
    hands over the read targets. A streamed compile from printers of their own processes (they
    inherit the path) places their runs and gives the NumPy walk's Program."""
    from benchmarks.random_clifford import paper_random_circuit_stim

    from cirq_quasarq.compiler import stim_printing, stim_rows

    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "1")
    text = "H 0 1\nTICK\nCX 0 1 2 3\nM !0 2"
    short, digest = stim_rows.digest_piece(text)
    assert short == "H \nTICK\nCX \nM " and isinstance(digest, stim_text._LineTargets)
    short, digest = stim_rows.digest_piece(text, num_qubits=4)
    assert short == "" and isinstance(digest, stim_rows.CompiledPiece)
    assert [run is None for run in digest.runs] == [False, True, False]
    entries, qubits, flags, bounds = digest.runs[2]
    assert qubits.tolist() == [0, 1, 2, 3, 0, 2] and bounds.tolist() == [0, 4, 6] and flags.tolist() == [0] * 4 + [1, 0]
    assert entries.shape == (2, 8) and entries.dtype == np.int32
    if not stim_printing.printers_available():
        return
    monkeypatch.setattr(stim_printing, "printers_available", lambda: 3)
    circuit = paper_random_circuit_stim(2000, 30, seed=11, ticks=True)
    walked = []
    walk = stim_circuit._StimCompiler._walk_compiled
    monkeypatch.setattr(stim_circuit._StimCompiler, "_walk_compiled",
                        lambda self, piece: walked.append(piece) or walk(self, piece))
    _, program = compiled_in_pieces(circuit, 6, printers=3)
    assert walked
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "0")
    assert program_digest(program) == program_digest(stim_circuit._StimCompiler(stim, circuit.num_qubits).run(circuit))


_COLLAPSES = "TICK\nMX 0 !3 5\nMRY !7 2\nM !1 4\nTICK\nTICK\nMR 9 !11\nRX 6"


_SHORT_LINES = "\n".join(f"H {i % 50}\nTICK" for i in range(3000))  # more lines than the read's first room


@pytest.mark.parametrize("case", ["random", "random-ticks", pytest.param(_SHORT_LINES, id="short-lines"),
                                  "H 0 1\nM 0 0", "H 0 1\nTICK\nH 1\nCX 0 1 1 0",
                                  "H 0 1\nM(0.1) 0", "H 0 1\nH[tag] 0", "H 0 1\nX_ERROR(0.1) 0",
                                  "H 0 1\nREPEAT 2 {\n    H 0\n}", "H 0 1\nM 0\nDETECTOR rec[-1]",
                                  "H 0 1\nM 0\nCX rec[-1] 1", "QUBIT_COORDS(1, 2) 0\nH 0"])
@pytest.mark.parametrize("bytes_a_thread", [512 << 10, 1 << 10])
def test_a_whole_compile_places_whole_instructions_read_in_one_pass(monkeypatch, case, bytes_a_thread):
    """A compile no printer helps (a whole one) reads a text of whole instructions and TICKs for the
    compiled runs and places them as a printer's piece (`stim_rows.compiled_runs`, `_walk_compiled`):
    the paper's circuit with and without TICKs and collapses in every basis with '!', and 6,000 short
    lines (more than the read's first room), its text read in one thread or in up to READ_THREADS
    parts of 1 KB and more. A text the check refuses (a qubit
    named twice in an instruction) or of anything else is walked line by line. Each gives the
    Program of the walk by lines and of the NumPy walk."""
    from benchmarks.random_clifford import paper_random_circuit_stim

    from cirq_quasarq.compiler import stim_rows

    monkeypatch.setattr(stim_rows, "_READ_BYTES_A_THREAD", bytes_a_thread)
    monkeypatch.setattr(native, "processors", lambda: 8)
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "1")
    circuit = (paper_random_circuit_stim(700, 6, seed=5, ticks=case.endswith("ticks")) + stim.Circuit(_COLLAPSES)
               if case.startswith("random") else stim.Circuit(case))
    placed = []
    walk = stim_circuit._StimCompiler._walk_compiled
    monkeypatch.setattr(stim_circuit._StimCompiler, "_walk_compiled",
                        lambda self, piece: placed.append(piece) or walk(self, piece))

    def compiled() -> str:
        stim_circuit.clear_stim_cache()
        return program_digest(stim_circuit.compile_new_stim(circuit))

    whole = case.startswith("random") or case == _SHORT_LINES
    read = compiled()
    assert len(placed) == whole
    monkeypatch.setattr(stim_circuit, "WHOLE_READ", False)
    assert compiled() == read
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "0")
    assert compiled() == read
    assert len(placed) == whole


@pytest.mark.parametrize("text, runs", [("H 0\nTICK\nH 1", [1, None, 1]), ("TICK\nTICK", [None, None]),
                                        ("H 0\nTICK \nH 1", None), ("H 0\nTICK[a]\nH 1", None),
                                        ("H 0\nTICK(0.5)\nH 1", None)])
def test_a_text_s_tick_closes_a_run_only_as_a_line_of_its_own(text, runs):
    """`compiled_runs`: a TICK line closes the open run where the word is the whole line; a TICK
    with anything after it (a space, a tag, an argument) is no whole instruction (None: walked by
    lines; mutation checked: the word alone unchecked fails the first of those)."""
    from cirq_quasarq.compiler import stim_rows

    piece = stim_rows.compiled_runs(text, 2)
    assert (None if piece is None else [None if run is None else len(run[0]) for run in piece.runs]) == runs


@pytest.mark.parametrize("piece_lines, line_bytes", [(1, 1 << 40), (2, 1 << 40), (3, 1 << 40), (1024, 1 << 40),
                                                     (1, 32), (1, 400)])
@pytest.mark.parametrize("ticks", [False, True])
def test_a_piece_is_read_in_one_pass_as_its_lines_targets(monkeypatch, piece_lines, line_bytes, ticks):
    """`qq_host_read_piece` (a printer's piece read for the compiled runs), with room for 1 to 1,024
    lines at first, or a line for each 32 or 400 bytes of text (too few lines: the room counted and
    the piece read again): each run's qubits, '!'s and bounds are those `stim_text._read_lines`
    reads from the same lines, a TICK where each TICK is; the paper's circuit, its lines of hundreds
    of targets, collapses in every basis with '!'."""
    from benchmarks.random_clifford import paper_random_circuit_stim

    from cirq_quasarq.compiler import stim_rows

    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "1")
    monkeypatch.setattr(stim_rows, "_PIECE_LINES", piece_lines)
    monkeypatch.setattr(stim_rows, "_PIECE_LINE_BYTES", line_bytes)
    circuit = paper_random_circuit_stim(700, 6, seed=5, ticks=ticks)
    circuit += stim.Circuit(_COLLAPSES)
    text = str(circuit)
    _, digest = stim_rows.digest_piece(text, num_qubits=circuit.num_qubits)
    assert isinstance(digest, stim_rows.CompiledPiece)
    lines = text.split("\n")
    _, want = stim_text._read_lines(text)
    assert [run is None for run in digest.runs if run is None] == [True] * lines.count("TICK")
    parsed = 0
    for run in digest.runs:
        if run is None:
            continue
        entries, qubits, flags, bounds = run
        lo, hi = want.starts[parsed], want.starts[parsed + len(entries)]
        assert np.array_equal(qubits, want.qubits[lo:hi])
        assert np.array_equal(bounds, want.starts[parsed:parsed + len(entries) + 1] - lo)
        assert np.array_equal(flags if flags is not None else np.zeros(hi - lo, dtype=np.uint8),
                              want.inverted[lo:hi] if want.inverted is not None else np.zeros(hi - lo))
        parsed += len(entries)
    assert parsed == len(want.starts) - 1 == sum(line != "TICK" for line in lines)


@pytest.mark.parametrize("text, num_qubits", [
    ("H 0 1\nCX 0 1 1 2", 3),  # a qubit named twice in one instruction
    ("H 0 1\nM 0 0", 2),
    ("H 0 1\nTICK\nH 0 7", 5),  # a qubit past the circuit's
    ("H 0 1\nH !0", 2),  # '!' on a unitary: never Stim's own text
    ("CX 0 1 2", 3),  # a pair instruction of an odd count
    ("H 0 1\nM(0.1) 0", 2), ("H 0 1\nH[tag] 0", 2), ("H 0 1\nX_ERROR(0.1) 0", 2),
    ("H 0 1\nREPEAT 2 {\n    H 0\n}", 2), ("H 0 1\nM 0\nDETECTOR rec[-1]", 2), ("H 0 1\nM 0\nCX rec[-1] 1", 2),
    ("H 0 1\nQUBIT_COORDS(1, 2) 0", 2), ("H 0 1\nI 0", 2), ("H 0 1\nMPP X0*Z1", 2), ("", 1),
    ("H 0  1", 2), ("H 0 1 ", 2), ("H 0 !!1", 2), ("H 0 1234567890", 2), ("H 0 1\n", 2), ("H 0 1\nTICK 0", 2),
    ("H 0\tX 1", 2), (" H 0 1", 2),
])
def test_a_piece_the_check_refuses_or_of_anything_else_hands_over_its_targets(monkeypatch, text, num_qubits):
    """A printer's piece with a qubit named twice, one past the circuit's qubits, a '!' where it is
    not read or an odd pair (the check's refusals), or anything but whole instructions and TICKs,
    hands over its read targets (the compile's walk handles them) and no runs."""
    from cirq_quasarq.compiler import stim_rows

    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "1")
    short, digest = stim_rows.digest_piece(text, num_qubits=num_qubits)
    assert not isinstance(digest, stim_rows.CompiledPiece)
    want_short, want = stim_text._read_lines(text)
    assert short == want_short and (digest is None) == (want is None)


@pytest.mark.parametrize("seed", range(12))
def test_idle_lists_equal_numpys(monkeypatch, seed):
    """The qubits each gate window leaves idle (`device_program.idle_lists`, host_rows.cpp) as NumPy
    lists them: rows of one- and two-qubit opcodes and of opcodes without qubits (their A of -1
    counts from the end, as NumPy's index does), windows empty, overlapping, repeated and touching
    every qubit, chunks of windows smaller than the call."""
    from cirq_quasarq.core import opcodes
    from cirq_quasarq.engines.cuda import device_program

    r = np.random.default_rng(seed)
    n = [1, 2, 7, 64, 65, 300][seed % 6]
    rows = np.zeros((int(r.integers(1, 400)), 9), dtype=np.int32)
    rows[:, 0] = r.integers(0, opcodes.NUM_OPCODES, len(rows))
    rows[:, 1] = r.integers(-1, n, len(rows))
    rows[:, 2] = r.integers(0, n, len(rows))
    windows = [tuple(sorted(r.integers(0, len(rows) + 1, 2).tolist())) for _ in range(int(r.integers(0, 20)))]
    windows += [(0, len(rows)), (3, 3)] + windows[:2]
    if seed % 3 == 0:
        monkeypatch.setattr(device_program, "_IDLE_ROOM", max(1, n) * 2)  # two windows a call
    compiled, numpy_made = both(monkeypatch, lambda: device_program.idle_lists(rows, n, windows))
    assert np.array_equal(compiled[1], numpy_made[1]) and np.array_equal(compiled[0], numpy_made[0])
    assert compiled[0].dtype == np.int32


def test_idle_lists_out_of_range_raise_as_numpys(monkeypatch):
    from cirq_quasarq.engines.cuda import device_program

    rows = np.zeros((2, 9), dtype=np.int32)
    rows[1, 1] = 5  # qubit 5 of 3
    for flag in ("1", "0"):
        monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", flag)
        with pytest.raises(IndexError):
            device_program.idle_lists(rows, 3, [(0, 2)])


def test_thread_counts_follow_the_processors_this_process_may_run_on():
    """Under a mask of one processor: one host pool thread, one thread a compiled pass, no printer
    (each counted from `native.processors()`, not the machine's processors)."""
    import os
    import subprocess
    import sys

    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no processor masks on this platform")
    probe = ("import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
             "from cirq_quasarq.core import native, packed; from cirq_quasarq.compiler import stim_printing; "
             "print(packed.HOST_THREADS, native.threads_for(1 << 30), stim_printing.printers_available())")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1", "0"]


@pytest.mark.parametrize("seed", range(20))
def test_a_layered_schedules_stretches_say_none_as_numpys(monkeypatch, seed):
    """`_sorted_from_steps` by the compiled path gives NumPy's rows and runs, and None exactly where
    NumPy does (its stretches counted alike: cut at every block and at every 64k rows of a block),
    around the short-stretch threshold and for blocks past 64k rows."""
    from cirq_quasarq.core import opcodes
    from cirq_quasarq.core.program import NUM_FIELDS, OP, STEP, RowBlocks
    from cirq_quasarq.schedule import windows

    r = np.random.default_rng(seed)
    stretches = int(r.integers(1, 40))
    lengths = r.integers(1, [3, 70, 130, 5000][seed % 4], stretches)
    if seed % 5 == 4:
        lengths[0] = 70_000  # one block past _BLOCK rows
    table = r.integers(-5, 1000, (int(lengths.sum()), NUM_FIELDS)).astype(np.int32)
    table[:, STEP] = np.repeat(np.cumsum(r.integers(0, 2, stretches)) + 3, lengths)
    table[:, OP] = np.repeat(r.integers(0, opcodes.NUM_OPCODES, stretches), lengths)
    cuts = np.unique(r.integers(0, len(table) + 1, int(r.integers(0, 8))))
    blocks = RowBlocks(np.split(table, cuts))
    for stretch_rows in (1, 2, 60, 64, 70, 1000):
        monkeypatch.setattr(windows, "_STRETCH_ROWS", stretch_rows)
        compiled, numpy_made = both(monkeypatch, lambda: windows._sorted_from_steps(blocks, 3))
        assert (compiled is None) == (numpy_made is None), stretch_rows
        if compiled is not None:
            assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(compiled, numpy_made))


def test_a_long_blocks_stretches_are_cut_every_64k_rows_as_numpys(monkeypatch):
    """NumPy reads a block in parts of 64k rows, each part a new stretch: a block of 70,000 rows of
    one STEP and opcode is two stretches, so with stretches counted short past 50,000 rows a stretch
    both paths say None (one stretch would not)."""
    from cirq_quasarq.core.program import NUM_FIELDS, OP, STEP, RowBlocks
    from cirq_quasarq.schedule import windows

    table = np.zeros((70_000, NUM_FIELDS), dtype=np.int32)
    table[:, STEP], table[:, OP] = 3, 5
    monkeypatch.setattr(windows, "_STRETCH_ROWS", 50_000)
    compiled, numpy_made = both(monkeypatch, lambda: windows._sorted_from_steps(RowBlocks([table]), 3))
    assert compiled is None and numpy_made is None
    monkeypatch.setattr(windows, "_STRETCH_ROWS", 35_000)
    compiled, numpy_made = both(monkeypatch, lambda: windows._sorted_from_steps(RowBlocks([table]), 3))
    assert all(np.array_equal(a, b) for a, b in zip(compiled, numpy_made)) and len(compiled[1]) == 1



@pytest.mark.parametrize("seed", range(12))
def test_a_layered_schedule_is_the_same_in_any_number_of_threads(monkeypatch, seed):
    """The compiled passes of `_sorted_from_steps` read their parts (blocks cut every `_BLOCK` rows,
    here a few rows) and write the moved rows in 1 to 9 threads: NumPy's rows, runs and None every
    time, with stretches that cross the threads' parts and more threads than parts."""
    from cirq_quasarq.core import opcodes
    from cirq_quasarq.core.program import NUM_FIELDS, OP, STEP, RowBlocks
    from cirq_quasarq.schedule import windows

    r = np.random.default_rng(100 + seed)
    stretches = int(r.integers(1, 60))
    lengths = r.integers(1, [4, 40, 300][seed % 3], stretches)
    table = r.integers(-5, 1000, (int(lengths.sum()), NUM_FIELDS)).astype(np.int32)
    table[:, STEP] = np.repeat(np.cumsum(r.integers(0, 2, stretches)) + 3, lengths)
    table[:, OP] = np.repeat(r.integers(0, opcodes.NUM_OPCODES, stretches), lengths)
    cuts = np.unique(r.integers(0, len(table) + 1, int(r.integers(0, 6))))
    blocks = RowBlocks(np.split(table, cuts))
    monkeypatch.setattr(windows, "_BLOCK", int(r.integers(1, 50)))
    monkeypatch.setattr(windows, "_STRETCH_ROWS", [1, 2, 5][seed % 3])
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "0")
    expected = windows._sorted_from_steps(blocks, 3)
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "1")
    for threads in range(1, 10):
        monkeypatch.setattr(native, "threads_for", lambda nbytes, k=threads: k)
        got = windows._sorted_from_steps(blocks, 3)
        assert (got is None) == (expected is None), threads
        if got is not None:
            assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(got, expected)), threads


def _stretches_walked(blocks, part_rows, room, opcodes_count):
    """What `qq_host_layer_stretches` returns, by a walk of the rows in order (its definition):
    -1 at the first opcode out of range, -2 at a stretch past `room`, else the stretches (block,
    first row, length, opcode)."""
    from cirq_quasarq.core.program import OP, STEP

    made = []
    for b, block in enumerate(blocks):
        for i in range(len(block)):
            step, op = int(block[i, STEP]), int(block[i, OP])
            if i % part_rows == 0 or (step, op) != (int(block[i - 1, STEP]), int(block[i - 1, OP])):
                if not 0 <= op < opcodes_count:
                    return -1
                if len(made) == room:
                    return -2
                made.append([b, i, 0, op])
            made[-1][2] += 1
    return made


@pytest.mark.parametrize("seed", range(30))
def test_layer_stretches_say_out_of_range_and_too_many_as_a_walk_in_order_in_any_threads(seed):
    """`qq_host_layer_stretches` in 1 to 8 threads against a walk of the rows in order: an opcode out
    of range (-1) and more stretches than `room` (-2) told apart as the walk meets them, wherever
    they fall among the threads' parts, and the stretches themselves where neither comes."""
    from cirq_quasarq.core.program import NUM_FIELDS, OP, STEP

    lib = native.library()
    if lib is None:
        pytest.fail(f"the compiled path did not build: {native.why_not()}")
    r = np.random.default_rng(seed)
    opcodes_count = 6
    blocks = []
    for _ in range(int(r.integers(1, 5))):
        rows = int(r.integers(0, 40))
        block = np.zeros((rows, NUM_FIELDS), dtype=np.int32)
        block[:, STEP] = np.cumsum(r.random(rows) < 0.2)
        block[:, OP] = r.integers(0, opcodes_count, rows) * (r.random(rows) < 0.5)
        if rows and seed % 3:  # an opcode out of range somewhere
            block[int(r.integers(0, rows)), OP] = [opcodes_count, -1][seed % 2]
        blocks.append(np.ascontiguousarray(block))
    part_rows = int(r.integers(1, 12))
    where = np.array([b.ctypes.data for b in blocks], dtype=np.int64)
    counts = np.array([len(b) for b in blocks], dtype=np.int64)
    rank = np.arange(opcodes_count, dtype=np.int64)
    for room in (0, 1, 3, 10, 40, 200):
        walked = _stretches_walked(blocks, part_rows, room, opcodes_count)
        for threads in range(1, 9):
            out = [np.full(room + 1, -7, dtype=np.int64) for _ in range(4)]
            ops = np.full(room + 1, 255, dtype=np.uint8)
            got = lib.qq_host_layer_stretches(where.ctypes.data, counts.ctypes.data, len(blocks), part_rows, 0,
                                              rank.ctypes.data, opcodes_count, opcodes_count + 1, room,
                                              *(a.ctypes.data for a in out), ops.ctypes.data, threads)
            if isinstance(walked, int):
                assert got == walked, (room, threads)
                continue
            assert got == len(walked), (room, threads)
            assert [[int(out[0][k]), int(out[1][k]), int(out[2][k]), int(ops[k])] for k in range(got)] == walked


@pytest.mark.parametrize("seed", range(24))
def test_rows_sorted_by_counting_equal_numpys(monkeypatch, seed):
    """`_sorted_rows` of every row by the compiled counting sort gives NumPy's argsort and gather:
    the same rows, runs and dtypes, for keys nearly in order (a schedule's) or in any order, few or
    many opcodes, one row, one key for all, and keys past the counts' bound or of int64 (NumPy's
    path on both sides then)."""
    from cirq_quasarq.core import opcodes
    from cirq_quasarq.core.program import NUM_FIELDS
    from cirq_quasarq.schedule import windows

    r = np.random.default_rng(seed)
    n = [1, 2, 7, 100, 1000, 70_000][seed % 6]
    table = r.integers(-5, 1000, (n, NUM_FIELDS)).astype(np.int32)
    kind = seed // 6
    if kind == 0:  # a schedule's: layers in order, a few ranks each
        key = np.sort(r.integers(0, max(1, n // 50), n)) * (opcodes.NUM_OPCODES + 1) + r.integers(0, 5, n)
    elif kind == 1:  # any order, up to the bound
        key = r.integers(0, 4 * n + (1 << 16), n)
    elif kind == 2:  # one key for every row, or two
        key = np.full(n, 7) + (r.random(n) < 0.5) * (seed % 2)
    else:  # one key past the counts' bound
        key = r.integers(0, 4 * n + (1 << 16), n)
        key[-1] = 4 * n + (1 << 16)
    op8 = r.integers(0, [2, opcodes.NUM_OPCODES][seed % 2], n).astype(np.uint8)
    for dtype in (np.int32, np.int64):
        k = key.astype(dtype)
        compiled, numpy_made = both(monkeypatch, lambda: windows._sorted_rows(table, k, op8))
        assert compiled[4] is None and numpy_made[4] is None
        for a, b in zip(compiled[:4], numpy_made[:4]):
            assert a.dtype == b.dtype and np.array_equal(a, b)


def test_the_counting_sort_is_taken_where_it_applies(monkeypatch):
    """The compiled sort runs for int32 keys within the bound (asserted: NumPy's argsort is not
    called), and NumPy's path for the rest (a table given as a view with a stride)."""
    from cirq_quasarq.core.program import NUM_FIELDS
    from cirq_quasarq.schedule import windows

    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "1")
    if native.library() is None:
        pytest.fail(f"the compiled path did not build: {native.why_not()}")
    r = np.random.default_rng(3)
    table = r.integers(0, 100, (500, NUM_FIELDS)).astype(np.int32)
    key = r.integers(0, 300, 500).astype(np.int32)
    op8 = r.integers(0, 5, 500).astype(np.uint8)
    sorts = []
    real = np.argsort
    monkeypatch.setattr(windows.np, "argsort", lambda *a, **k: (sorts.append(1), real(*a, **k))[1])
    windows._sorted_rows(table, key, op8)
    assert not sorts
    wide = np.repeat(table, 2, axis=1)[:, ::2]  # equal rows, not C-contiguous
    windows._sorted_rows(wide, key, op8)
    assert sorts


def _layered(ins, program, key_dtype, parts, as_blocks=False):
    """`Scheduler._layer` of `ins` added in `parts` consecutive runs (each a table, or with
    `as_blocks` a RowBlocks of three blocks): the keys, opcodes and the state each run leaves
    (every qubit's latest layer, the barrier's layer, the highest since)."""
    from cirq_quasarq.core.program import RowBlocks
    from cirq_quasarq.schedule import windows

    s = windows.Scheduler(program.num_qubits, program.ext_qubits, len(program.loops), key_dtype)
    keys, ops, states = [], [], []
    for part in np.array_split(np.arange(len(ins)), parts):
        rows = np.ascontiguousarray(ins[part])
        key, op8 = np.empty(len(rows), dtype=key_dtype), np.empty(len(rows), dtype=np.uint8)
        if as_blocks:
            rows = RowBlocks(np.array_split(rows, 3))
        s._layer(rows, key, op8)
        keys.append(key)
        ops.append(op8)
        states.append((s.last[:-1].copy(), s.base, s.top))  # last[-1]: the dummy of a one-qubit row's B
    return np.concatenate(keys), np.concatenate(ops), states


def _programs_to_layer():
    from cirq_quasarq.compiler import compile_stim
    from benchmarks.random_clifford import paper_random_circuit_stim

    from .programs import random_program, window_program
    from .test_stim_circuit import random_circuit

    programs = [compile_stim(random_circuit(s, n=4 + s % 9, noisy=s % 2 == 0)) for s in range(30)]
    programs += [random_program(5 + s, 6, s, collapse=0.8, noise=s % 3 == 0)[0] for s in range(12)]
    programs += [window_program(100, 3), compile_stim(paper_random_circuit_stim(300, 8, seed=2, ticks=True))]
    programs.append(compile_stim(stim.Circuit("""
        CX 0 1 2 3
        E(0.1) X0 Z2 Y5
        ELSE_CORRELATED_ERROR(0.2) Z1 Z4
        M 0 1
        CX rec[-1] 3
        REPEAT 3 {
            H 0
            DEPOLARIZE2(0.1) 0 1
            M(0.1) 1
            TICK
        }
        MPP X0*Z1*Y2
    """)))
    return programs


@pytest.mark.parametrize("key_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("parts, as_blocks", [(1, False), (3, False), (1, True), (3, True)])
def test_layers_walked_in_order_equal_numpys(monkeypatch, key_dtype, parts, as_blocks):
    """`qq_host_layer_rows` against the NumPy groups, the definition: the same keys, opcodes and state
    after each of several runs of rows, for compiled circuits (E over a range of qubits, barriers,
    loops, TICKs), programs whose STEP groups name a qubit twice, and rows whose STEP is any order."""
    from cirq_quasarq.core.program import STEP
    from cirq_quasarq.schedule import windows

    calls = []
    real = windows.Scheduler._layer_compiled
    monkeypatch.setattr(windows.Scheduler, "_layer_compiled",
                        lambda *a: (calls.append(1), real(*a))[1])
    r = np.random.default_rng(parts)
    for program in _programs_to_layer():
        tables = [program.instructions]
        shuffled = program.instructions.copy()
        shuffled[:, STEP] = r.integers(0, 3, len(shuffled))  # groups that reuse qubits, back and forth
        tables.append(shuffled)
        for ins in tables:
            compiled, numpy_made = both(monkeypatch, lambda: _layered(ins, program, key_dtype, parts, as_blocks))
            for a, b in zip(compiled[:2], numpy_made[:2]):
                assert a.dtype == b.dtype and np.array_equal(a, b)
            for (la, ba, ta), (lb, bb, tb) in zip(compiled[2], numpy_made[2]):
                assert np.array_equal(la, lb) and (ba, ta) == (bb, tb)
    assert calls and all(calls)


def test_layers_the_walk_refuses_are_numpys(monkeypatch):
    """Rows outside what the walk takes (a qubit past the last, B below -1, an empty range of E, an
    opcode out of range) leave the state as it was and go to the NumPy form."""
    from cirq_quasarq.core import opcodes
    from cirq_quasarq.core.program import NUM_FIELDS, OP, A, B, COND
    from cirq_quasarq.schedule import windows

    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "1")
    lib = native.library()
    if lib is None:
        pytest.fail(f"the compiled path did not build: {native.why_not()}")
    e = opcodes.CODE["E"]
    for op, a, b in ((opcodes.CODE["H"], 4, -1), (opcodes.CODE["CX"], 0, -2), (e, 0, 0), (e, 2, 2),
                     (opcodes.NUM_OPCODES, 0, 1), (opcodes.CODE["H"], -1, -1)):
        s = windows.Scheduler(4, np.array([0, 1, 3], dtype=np.int32), 0, np.int32)
        s.last[:] = [3, 1, 4, 1, 0]
        s.base, s.top = 2, 5
        ins = np.zeros((3, NUM_FIELDS), dtype=np.int32)
        ins[:, COND] = -1
        ins[:, OP], ins[:, A], ins[:, B] = opcodes.CODE["CZ"], [0, 1, 2], [1, 2, 3]
        ins[1, OP], ins[1, A], ins[1, B] = op, a, b
        key, op8 = np.zeros(3, dtype=np.int32), np.zeros(3, dtype=np.uint8)
        assert not s._layer_compiled(lib, ins, key, op8), (op, a, b)
        assert s.last.tolist() == [3, 1, 4, 1, 0] and (s.base, s.top) == (2, 5)
        assert not key.any() and not op8.any()


@pytest.mark.parametrize("seed", range(16))
def test_rows_sorted_by_counting_from_blocks_in_threads_equal_numpys(monkeypatch, seed):
    """The compiled counting sort reads the rows as a builder's blocks (none joined) and counts and
    moves them in 1 to 4 threads: NumPy's argsort and gather of the joined table, whatever the cut
    of the blocks and the threads."""
    from cirq_quasarq.core.program import NUM_FIELDS, RowBlocks
    from cirq_quasarq.schedule import windows

    r = np.random.default_rng(100 + seed)
    n = [1, 7, 1000, 70_000][seed % 4]
    table = r.integers(-5, 1000, (n, NUM_FIELDS)).astype(np.int32)
    spread = [3, 200][seed // 4 % 2]  # few keys (many rows a key) or more
    key = (np.sort(r.integers(0, spread, n)) if seed // 8 else r.integers(0, spread, n)).astype(np.int32)
    op8 = r.integers(0, 4, n).astype(np.uint8)
    cuts = np.sort(r.choice(np.arange(1, n), size=min(n - 1, r.integers(0, 20)), replace=False)) if n > 1 else []
    monkeypatch.setattr(native, "threads_for", lambda nbytes: 1 + seed % 4)
    made = []
    compiled, numpy_made = both(monkeypatch, lambda: windows._sorted_rows(
        made.append(RowBlocks(np.split(table, cuts))) or made[-1], key, op8))
    assert not made[0].is_joined  # the compiled sort read the blocks
    assert compiled[4] is None and numpy_made[4] is None
    for a, b in zip(compiled[:4], numpy_made[:4]):
        assert a.dtype == b.dtype and np.array_equal(a, b)


_READ_EDGES = ["", "\n", "\n\n", "H 0 1", "H 0 1\n", "TICK", "TICK\n", "TICK\nTICK", "H 0 1\nTICK\nM !0 1\n",
               "H 0  1", "H 0 1 ", "H 0 !!1", "H 0 1234567890", "H 0 123456789", "TICK 0", " H 0", "H\t0 1",
               "H 0\t1\r2", "H 0\nX 1 x\nH 2", "H 0\n\nH 1", "H 0 1\nM(0.1) 0", "H ", "H  ", "!", "H !", "H 0!"]


_GUARD = 64  # entries past each output's room, which no read may write


def _read(lib, text: str, room: int, threads):
    """Every output of the one-pass read of `text` with room for `room` lines, in `threads` parts
    (None: `qq_host_read_piece` itself): (its return, then what it wrote where it read the text).
    Nothing is written past an output's room."""
    address = native.address
    raw = text.encode()
    targets_room = len(raw) // 2 + 1
    qubits = np.full(targets_room + _GUARD, -7, dtype=np.int64)
    inverted = np.full(targets_room + _GUARD, 7, dtype=np.uint8)
    line_start, name_end, parsed = (np.full(room + _GUARD, -7, dtype=np.int64) for _ in range(3))
    starts, counts = np.full(room + 1 + _GUARD, -7, dtype=np.int64), np.empty(2, dtype=np.int64)
    args = [raw, len(raw), room, address(line_start), address(name_end), address(parsed), address(qubits),
            address(inverted), address(starts), address(counts)]
    lines = lib.qq_host_read_piece(*args) if threads is None else lib.qq_host_read_piece_parts(*args, threads)
    for out, at, mark in ((qubits, targets_room, -7), (inverted, targets_room, 7), (line_start, room, -7),
                          (name_end, room, -7), (parsed, room, -7), (starts, room + 1, -7)):
        assert (out[at:] == mark).all(), "written past its room"
    if lines < 0:
        return (lines,)
    plain = int(counts[0])
    targets = int(starts[plain])
    return (lines, line_start[:lines].tolist(), name_end[:lines].tolist(), parsed[:lines].tolist(), counts.tolist(),
            starts[:plain + 1].tolist(), qubits[:targets].tolist(), inverted[:targets].tolist())


def _texts_to_read(seed: int):
    """The paper's circuit as text (lines of tens of targets, collapses with '!'), and with a line
    the read refuses, an empty line or a line of one word put in at a random line."""
    from benchmarks.random_clifford import paper_random_circuit_stim

    r = random.Random(seed)
    text = str(paper_random_circuit_stim(40, 4, seed=seed, ticks=bool(seed % 2)) + stim.Circuit(_COLLAPSES))
    lines = text.split("\n")
    yield text
    yield text + "\n"
    for put in ("H 0 x1", "", "TICK", "M(0.2) 3", "H 0  1"):
        at = r.randrange(len(lines) + 1)
        yield "\n".join(lines[:at] + [put] + lines[at:])


@pytest.mark.parametrize("threads", [2, 3, 5, 8, 64])
def test_a_text_read_in_parts_is_read_as_in_one(threads):
    """`qq_host_read_piece_parts`: every output and return of `qq_host_read_piece` (-1: a line it
    does not read, -2: more lines than its room, whichever it meets first), for texts at the read's
    edges and the paper's circuit with a line the read refuses, an empty line or a line of one word
    anywhere, cut into 2 to 64 parts (more parts than lines: empty ones), with room for 1 line, one
    fewer than the text's, as many and more; none writes past an output's room."""
    lib = native.compiled()
    if lib is None:
        pytest.skip(f"the compiled path is not available here: {native.why_not()}")
    texts = _READ_EDGES + [text for seed in range(6) for text in _texts_to_read(seed)]
    read = 0
    for text in texts:
        count = text.count("\n") + 1
        for room in sorted({1, max(1, count - 1), count, count + 5}):
            want = _read(lib, text, room, None)
            assert _read(lib, text, room, threads) == want, (text[:80], room)
            read += want[0] >= 0
    assert read > 40  # (most texts read whole with room enough)
