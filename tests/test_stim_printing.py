"""The text of a circuit's pieces printed by processes of their own (`compiler.stim_printing`),
each with its lines' targets read there and the lines cut that they stand for
(`stim_text._read_lines`): the texts and targets give Stim's text back, the targets are those the
compile reads from the text itself, whatever the printers do (fail, end early, are passed over); no
printer outlives its pieces; and a compile that takes its targets read, from the whole text or the
cut one, gives the Programs of one that reads them itself (the streamed compile: tests/test_pieces.py)."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

stim = pytest.importorskip("stim")

from cirq_quasarq.compiler import stim_circuit, stim_printing, stim_text
from cirq_quasarq.compiler.stim_printing import PrintedPieces

from benchmarks.random_clifford import paper_random_circuit_stim

needs_printers = pytest.mark.skipif(not stim_printing.printers_available(),
                                    reason="no fork and memfd here (or one processor): every piece prints here")


def cut(count: int, pieces: int):
    step = -(-count // pieces)
    return [(lo, min(count, lo + step)) for lo in range(0, count, step)]


def a_circuit():
    circuit = paper_random_circuit_stim(200, 12, seed=3, ticks=True)
    circuit.append("M", [0, 1, 2], 0)
    circuit += stim.Circuit("MX !4 5\nS[é] 3\nQUBIT_COORDS(1, 2) 7\nCX 1 2 3 4\nM !0\nTICK\nH 9")  # a tag not ASCII
    return circuit


def same_lines(got, want) -> bool:
    if got is None or want is None:
        return got is None and want is None
    return all(np.array_equal(getattr(got, f), getattr(want, f)) if getattr(want, f) is not None
               else getattr(got, f) is None for f in want._fields)


def restored(text: str, lines) -> str:
    """The text `_read_lines` cut (`text`), its lines' targets (`lines`) written back."""
    if lines is None:
        return text
    out = []
    for k, line in enumerate(text.split("\n")):
        g = lines.line[k]
        if g >= 0 and not stim_text._targets_text(line):
            at = slice(lines.starts[g], lines.starts[g + 1])
            bangs = lines.inverted[at] if lines.inverted is not None else np.zeros(at.stop - at.start, dtype=bool)
            line += " ".join(("!" if bang else "") + str(q) for q, bang in zip(lines.qubits[at].tolist(), bangs.tolist()))
        out.append(line)
    return "\n".join(out)


def assert_reaped(pids) -> None:
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def wait_until_ended(pid: int) -> None:
    """Until child `pid` has ended (a zombie: not reaped)."""

    deadline = time.monotonic() + 30
    while True:
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                return
        assert time.monotonic() < deadline
        time.sleep(0.005)


def assert_ended(texts: PrintedPieces, head) -> None:
    """No process of the printers is left: the head (this process's child) reaped, and its process
    group, the printers', empty (the head reaps them before it ends)."""
    assert texts._head is None
    if head is None:
        return
    stim_printing.reap_ended(wait=True)
    with pytest.raises(ChildProcessError):
        os.waitpid(head, os.WNOHANG)
    with pytest.raises(ProcessLookupError):
        os.killpg(head, 0)


@pytest.fixture
def processors(monkeypatch):
    """As if this machine had 9 processors where it forks at all (more printers than processors only
    share them)."""
    if stim_printing.printers_available():
        monkeypatch.setattr(stim_printing, "printers_available", lambda: 8)


@pytest.mark.parametrize("printers", [0, 1, 2, 3, 40])
def test_printed_pieces_are_stims_text_with_their_lines_read(printers, processors):
    circuit = a_circuit()
    bounds = cut(len(circuit), 7)
    texts = PrintedPieces(circuit, bounds, printers, stim_text._read_lines)
    assert texts.printers == min(printers, stim_printing.printers_available(), len(bounds) - 1)
    head = texts._head
    assert (head is not None) == bool(texts.printers) == (texts._notes >= 0)
    cut_lines = 0
    try:
        for i, (lo, hi) in enumerate(bounds):
            text, lines = texts.piece(i)
            stims = str(circuit[lo:hi])
            assert restored(text, lines) == stims
            if i == 0 or not texts.printers:
                assert text == stims and lines is None  # printed here: the compile reads its targets itself
            else:
                short, want = stim_text._read_lines(stims)
                assert text == short and same_lines(lines, want)
                cut_lines += sum(1 for line in text.split("\n") if line.endswith(" "))
        if texts.printers:
            assert cut_lines > 20
    finally:
        texts.close()
    assert_ended(texts, head)


@needs_printers
@pytest.mark.parametrize("how", ["digest fails", "printer ends", "printer never forked"])
def test_pieces_passed_over_a_printer_that_fails_or_ends_early_leave_the_work_here(monkeypatch, processors, how):
    """A piece its printer cannot digest, a printer that ends after taking a piece and before telling
    of it, and a printer its head cannot fork: the piece not told is printed here once every printer
    has ended, the others are read as printed (the printers that run take every piece)."""
    circuit = a_circuit()
    bounds = cut(len(circuit), 9)
    digest = stim_text._read_lines
    if how == "digest fails":
        def digest(text):
            if "QUBIT_COORDS" in text:
                raise ValueError("no digest of this piece")
            return stim_text._read_lines(text)
    elif how == "printer ends":
        real_print = PrintedPieces._print

        def ending(self, j, queue, notes):
            if j == 0:  # takes piece 1 and ends
                stim_printing._read_exactly(queue, stim_printing._PIECE_NUMBER.itemsize)
                os._exit(0)
            time.sleep(0.2)  # (after printer 0 has taken its piece)
            real_print(self, j, queue, notes)

        monkeypatch.setattr(PrintedPieces, "_print", ending)
    else:
        here, real_fork, forks = os.getpid(), stim_printing._fork_child, []

        def refused(work, *args, **kwargs):
            if os.getpid() != here:  # the head: its second printer is not forked
                forks.append(1)
                if len(forks) == 2:
                    raise OSError("no more processes")
            return real_fork(work, *args, **kwargs)

        monkeypatch.setattr(stim_printing, "_fork_child", refused)
    texts = PrintedPieces(circuit, bounds, 2, digest)
    head = texts._head
    here_too = 0
    try:
        asked = range(len(bounds)) if how == "printer ends" else [0, 3, 6, len(bounds) - 1]  # others passed over
        assert "QUBIT_COORDS" in str(circuit[bounds[-1][0]:])
        for i in asked:
            lo, hi = bounds[i]
            text, lines = texts.piece(i)
            stims = str(circuit[lo:hi])
            assert restored(text, lines) == stims
            if lines is None:
                assert text == stims
                here_too += i > 0
            else:
                assert same_lines(lines, stim_text._read_lines(stims)[1])
            if how == "digest fails":
                assert (lines is None) == (i == 0 or "QUBIT_COORDS" in text)
    finally:
        texts.close()
    assert_ended(texts, head)
    assert here_too == {"digest fails": 1, "printer ends": 1, "printer never forked": 0}[how]


@needs_printers
def test_printers_closed_before_their_pieces_are_read_are_ended(processors):
    """Closed at once (the head perhaps still forking), or after piece 1: no process left."""
    circuit = paper_random_circuit_stim(2000, 40, seed=1)
    for read in (0, 1):
        texts = PrintedPieces(circuit, cut(len(circuit), 12), 3, stim_text._read_lines)
        head = texts._head
        if read:
            texts.piece(1)
        texts.close()
        assert_ended(texts, head)
        texts.close()  # twice: nothing left to do


@needs_printers
@pytest.mark.parametrize("slow", [False, True])
def test_idle_work_runs_once_while_a_printer_is_awaited_or_when_asked(monkeypatch, processors, slow):
    """`idle` runs at the first wait for a printer that is not done (here: one that sleeps first),
    else at `idle()`; never twice."""
    circuit = a_circuit()
    bounds = cut(len(circuit), 5)
    if slow:
        real_print = PrintedPieces._print

        def sleepy(self, *args):
            time.sleep(0.3)
            real_print(self, *args)

        monkeypatch.setattr(PrintedPieces, "_print", sleepy)
    done = []
    texts = PrintedPieces(circuit, bounds, 2, stim_text._read_lines, idle=lambda: done.append(len(done)))
    try:
        texts.piece(0)
        assert done == []
        if not slow:  # every printer done: the head, which reaps them, has ended
            wait_until_ended(texts._head)
        texts.piece(1)
        assert done == ([0] if slow else [])
        texts.piece(2)
        texts.idle()
        texts.idle()
        assert done == [0]
    finally:
        texts.close()


@pytest.mark.parametrize("text, read", [
    ("H 0 1 2\nCX 3 4", {0: [0, 1, 2], 1: [3, 4]}),
    ("M !0 1\nREPEAT 3 {\n    H 5 6\n    TICK\n}\nX_ERROR(0.1) 2 3", {0: [0, 1], 2: [5, 6], 5: [2, 3]}),
    ("DETECTOR(1, 2) rec[-1]\nQUBIT_COORDS(0, 1) 4\nMPP X0*Z1\nCX rec[-1] 0\nS 12", {4: [12]}),
    ("TICK\n\nH 7", {2: [7]}),
    ("S[t] 1 2\nM(0.01) 3\nH 5", {0: [1, 2], 1: [3], 2: [5]}),  # read, but only a bare name's line cut
    ("H 1234567890", None), ("M !!1", None), ("H 1  2", None), ("TICK", None),
])
def test_read_lines_reads_the_lines_of_plain_targets(text, read):
    """`_read_lines` reads the lines of plain targets, and cuts those whose instruction is a bare
    name (no arguments, no tag) after the name."""
    short, got = stim_text._read_lines(text)
    if read is None:
        assert got is None and short == text
        return
    lines = text.split("\n")
    assert got.line.shape == (len(lines),)
    assert len(short.split("\n")) == len(lines)
    for k, cut_line in enumerate(short.split("\n")):
        if k not in read:
            assert got.line[k] == -1 and cut_line == lines[k]
            continue
        rest = stim_text._targets_text(lines[k])
        head = lines[k][:len(lines[k]) - len(rest)]
        assert got.chars[got.line[k]] == len(rest)
        assert cut_line == (lines[k] if "(" in head or "[" in head else head)
        g = got.line[k]
        at = slice(got.starts[g], got.starts[g + 1])
        assert got.qubits[at].tolist() == read[k]
        want = stim_text._parse_targets(lines[k].lstrip(" ").split(" ", 1)[1])
        assert got.qubits[at].tolist() == want[0].tolist()
        inverted = np.zeros(len(read[k]), dtype=bool) if want[1] is None else want[1]
        assert (got.inverted[at] if got.inverted is not None else np.zeros_like(inverted)).tolist() == inverted.tolist()


class ReadingCompiler(stim_circuit._StimCompiler):
    """The whole compile, its text's targets read first, as a printer reads a piece's (`short`: the
    text then cut where they were read, as a printer hands it over)."""

    short = False

    def _walk_text(self, circuit, text, line_targets=None):
        if self.short:
            super()._walk_text(circuit, *stim_text._read_lines(text))
        else:
            super()._walk_text(circuit, text, stim_text._read_lines(text)[1])


class CuttingCompiler(ReadingCompiler):
    short = True


def interleaved(seed: int):
    """Plain lines of distinct targets with QUBIT_COORDS, DETECTOR and SHIFT_COORDS lines between
    them (lines a segment passes over), REPEAT blocks and '!' here and there, and lines of plain
    targets the walk takes from their instruction objects (arguments, a tag: a segment of targets
    read and targets in text)."""
    r = np.random.default_rng(seed)
    out = []
    for k in range(60):
        roll = r.random()
        qs = r.permutation(12)[: r.integers(1, 7)].tolist()
        if k % 9 == 4:
            out.append(f"M(0) {qs[0]} {(qs[0] + 1) % 12}")
        if k % 13 == 6:
            out.append(f"S[t] {qs[-1]}")
        if roll < 0.3:
            out.append(f"{r.choice(['H', 'S', 'X', 'SQRT_Y'])} " + " ".join(map(str, qs)))
        elif roll < 0.5 and len(qs) >= 2:
            out.append(f"{r.choice(['CX', 'CZ', 'SWAP'])} " + " ".join(map(str, qs[: len(qs) // 2 * 2])))
        elif roll < 0.65:
            out.append("M " + " ".join(("!" if r.random() < 0.3 else "") + str(q) for q in qs))
        elif roll < 0.75:
            out.append(f"QUBIT_COORDS({k}, 1) {qs[0]}")
        elif roll < 0.82:
            out.append("SHIFT_COORDS(0, 1)")
        elif roll < 0.9:
            out.append("DETECTOR(1, 2) rec[-1]" if any(line.startswith("M ") for line in out) else "TICK")
        elif roll < 0.95:
            out.append(f"REPEAT 2 {{\n  H {qs[0]}\n  QUBIT_COORDS(3) {qs[0]}\n  M {qs[0]}\n  CX {qs[0]} 12\n}}")
        else:
            out.append("TICK")
    return stim.Circuit("\n".join(out))


@pytest.mark.parametrize("compiler", [ReadingCompiler, CuttingCompiler])
@pytest.mark.parametrize("chars", [1, 40, 1 << 17])
@pytest.mark.parametrize("seed", range(8))
def test_a_compile_given_its_lines_targets_makes_the_same_program(monkeypatch, seed, chars, compiler):
    monkeypatch.setattr(stim_circuit, "_SEGMENT_CHARS", chars)
    circuit = interleaved(seed)
    got = compiler(stim, circuit.num_qubits).run(circuit)
    want = stim_circuit._StimCompiler(stim, circuit.num_qubits).run(circuit)
    assert np.array_equal(got.instructions, want.instructions)
    assert got.num_records == want.num_records and len(got.detectors) == len(want.detectors)


@pytest.mark.skipif(not stim_printing.printers_available(), reason="no fork and memfd here (or one processor)")
def test_a_forked_compile_hands_over_errors_and_a_process_that_ended():
    """What the compile's process raises arrives as itself, or as NotStreamable where it does not
    pickle; a process that ends before its Program is NotStreamable (the call then compiles whole);
    every later `next` ends the same way, and the process is reaped."""

    from cirq_quasarq.core.program import NUM_FIELDS
    from cirq_quasarq.errors import NotStreamable

    class Unpicklable(Exception):
        def __reduce__(self):
            raise TypeError("not here")

    def raising(error):
        def pieces():
            yield np.arange(2 * NUM_FIELDS, dtype=np.int32).reshape(2, NUM_FIELDS), 3
            raise error
        return pieces

    def stalling():
        yield np.zeros((0, NUM_FIELDS), dtype=np.int32), None
        time.sleep(60)
        yield np.zeros((0, NUM_FIELDS), dtype=np.int32), None

    for pieces, raised, match in ((raising(ValueError("bad piece")), ValueError, "bad piece"),
                                  (raising(Unpicklable("x")), NotStreamable, "the compile's process"),
                                  (stalling, NotStreamable, "ended early")):
        forked = stim_printing.ForkedCompile(pieces)
        pid = forked._pid
        rows, word = next(forked)
        if pieces is stalling:
            assert rows.shape == (0, NUM_FIELDS) and word is None
            os.kill(pid, signal.SIGKILL)
        else:
            assert rows.tolist() == np.arange(2 * NUM_FIELDS).reshape(2, NUM_FIELDS).tolist() and word == 3
            rows[0, 0] = 7  # the rows are this process's to change
        for _ in range(2):
            with pytest.raises(raised, match=match):
                next(forked)
        forked.close()
        stim_printing.reap_ended(wait=True)  # (one that handed over its error ends by itself)
        assert_reaped([pid])


def test_no_fork_where_the_environment_says_so(monkeypatch):
    """$CIRQ_QUASARQ_FORK=0: no printer and no compile in a process of its own (the same texts and
    Programs, made here); a value other than 0 or 1 is refused, naming the variable."""
    from cirq_quasarq import shots
    from cirq_quasarq.errors import InvalidInputError

    monkeypatch.setenv("CIRQ_QUASARQ_FORK", "0")
    assert stim_printing.printers_available() == 0 and not stim_printing.forked_compile_available()
    circuit = a_circuit()
    texts = PrintedPieces(circuit, cut(len(circuit), 5), 3, stim_text._read_lines)
    assert texts.printers == 0 and texts._head is None and texts._notes < 0
    assert texts.piece(2) == (str(circuit[slice(*cut(len(circuit), 5)[2])]), None)
    compiling = shots.StreamedCompile(paper_random_circuit_stim(300, 20, seed=2), 5)
    assert not isinstance(compiling._compiling, stim_printing.ForkedCompile)
    list(compiling)
    monkeypatch.setenv("CIRQ_QUASARQ_FORK", "yes")
    with pytest.raises(InvalidInputError, match="CIRQ_QUASARQ_FORK"):
        stim_printing.printers_available()


@needs_printers
def test_a_head_that_has_not_ended_at_close_is_reaped_by_the_next_start(processors):
    """`close` does not wait for the printers' head: where it has not ended, the next printers'
    start (or `reap_ended`, or the interpreter's exit) reaps it once it has."""

    circuit = paper_random_circuit_stim(2000, 40, seed=1)
    texts = PrintedPieces(circuit, cut(len(circuit), 12), 3, stim_text._read_lines)
    head = texts._head
    texts.close()
    if (head, True) in stim_printing._ENDING:
        wait_until_ended(head)
    again = PrintedPieces(circuit, cut(len(circuit), 12), 3, stim_text._read_lines)
    again_head = again._head
    try:
        assert (head, True) not in stim_printing._ENDING
        with pytest.raises(ChildProcessError):
            os.waitpid(head, os.WNOHANG)
    finally:
        again.close()
    assert_ended(again, again_head)


@needs_printers
def test_close_ends_printers_that_would_print_on(monkeypatch, processors):
    """Printers in the middle of their work (here: asleep for a minute) end at `close`, SIGTERM to
    their group, and their head with them."""

    real_print = PrintedPieces._print

    def asleep(self, *args):
        time.sleep(60)
        real_print(self, *args)

    monkeypatch.setattr(PrintedPieces, "_print", asleep)
    circuit = a_circuit()
    texts = PrintedPieces(circuit, cut(len(circuit), 5), 3, stim_text._read_lines)
    head = texts._head
    time.sleep(0.2)  # (the printers forked and asleep)
    started = time.monotonic()
    texts.close()
    assert_ended(texts, head)
    assert time.monotonic() - started < 30


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
@pytest.mark.parametrize("kind", ["head", "forked compile", "printer", "off"])
def test_a_child_that_forks_or_compiles_gives_back_its_free_heap_first(monkeypatch, kind):
    """A printers' head and a forked compile call the C library's malloc_trim(0) before their work
    (its parent's writes then copy no page the child shared and never needed); a printer, forked by
    a head that did, does not; nor does any child with TRIM_IN_CHILD off."""
    import platform

    if platform.libc_ver()[0] == "glibc":
        assert stim_printing._free_heap_trim() is not None
    read, write = os.pipe()

    def trim(pad):  # the child's: says that it trimmed, and before its work
        os.write(write, b"t%d" % pad)

    monkeypatch.setattr(stim_printing, "_free_heap_trim", lambda: trim)
    monkeypatch.setattr(stim_printing, "TRIM_IN_CHILD", kind != "off")
    pid = stim_printing._fork_child(lambda: os.write(write, b"w"), head=kind == "head", terminate=kind == "printer")
    stim_printing._wait(pid)
    os.close(write)
    told = b""
    while True:
        more = os.read(read, 64)
        if not more:
            break
        told += more
    os.close(read)
    assert told == (b"t0w" if kind in ("head", "forked compile") else b"w")
