"""compiler/stim_memory.py: a stim.Circuit's text printed from its instructions in memory is Stim's own
`str(circuit[lo:hi])`, byte for byte, over every gate Stim has, every kind of target, arguments,
tags, REPEAT blocks, slices and thread counts; a layout that does not check out is refused without a
crash, and every refusal prints with Stim."""

from __future__ import annotations

import random
from typing import Optional

import numpy as np
import pytest

stim = pytest.importorskip("stim")

from cirq_quasarq.compiler import stim_memory  # noqa: E402
from cirq_quasarq.core import native  # noqa: E402

needs_compiled = pytest.mark.skipif(native.compiled() is None, reason="no compiled path (no C++ compiler)")


@pytest.fixture
def reader():
    found = stim_memory._reader()
    assert found is not None, "the layout probe refused this Stim: every circuit is printed by Stim"
    return found


def printed(reader, circuit, lo=0, hi=None, threads=None):
    """The compiled printer's text of circuit[lo:hi] (None where it refuses), with `threads`."""
    hi = len(circuit) if hi is None else hi
    if threads is None:
        text = stim_memory._printed(reader, circuit, len(circuit), lo, hi)
        return None if text is None else text.decode()
    address = native.address
    sizes = np.empty(max(1, hi - lo), dtype=np.int64)
    lib = reader.lib
    total = lib.qq_stim_text_sizes(id(circuit), len(circuit), lo, hi, address(reader.layout), reader.blob,
                                   address(reader.name_at), reader.repeat, address(sizes), threads)
    if total < 0:
        return None
    out = np.empty(max(1, total), dtype=np.uint8)
    assert lib.qq_stim_text_write(id(circuit), lo, hi, address(reader.layout), reader.blob, address(reader.name_at),
                                  reader.repeat, address(sizes), address(out), total, threads) == total
    return out[:total].tobytes().decode()


ARGUMENTS = (0, 1, -1, 0.5, 0.001, 0.001000001, 1e-7, 1.25e-300, 123456789, 1e15, 1e16 + 2, 2.0 ** 62, 2.0 ** 63,
             -2.0 ** 63, 1e30, -0.0, 0.1 + 0.2, 3.14159265358979, 5e-324, 1e308, float("inf"), float("-inf"))
TAGS = ("", "t", "a tag", "x]y", "back\\slash", "new\nline", "carriage\rreturn", "ünï©ødé", "[]", "]]]\\\\")


def a_random_circuit(rng: random.Random, depth: int = 0) -> "stim.Circuit":
    """Instructions of every gate (canonical names and aliases), with random targets of each kind the
    gate takes, random arguments and tags, and REPEAT blocks nested up to three deep."""
    gates = sorted(stim.gate_data().items())
    forms = ("{q} {r}", "!{q} {r}", "X{q}*Y{r} !Z{s}", "X{q} !Y{r}", "rec[-{k}] {q}", "rec[-{k}] rec[-1]",
             "sweep[{k}] {q}", "rec[-{k}]", "{q}", "")
    c = stim.Circuit(f"M {' '.join(map(str, range(12)))}") if depth == 0 else stim.Circuit()
    for _ in range(rng.randrange(3, 25)):
        if depth < 3 and rng.random() < 0.08:
            body = a_random_circuit(rng, depth + 1)
            c.append(stim.CircuitRepeatBlock(rng.choice((1, 2, 7, 2 ** 32 + 5, 10 ** 15)), body, tag=rng.choice(TAGS)))
            continue
        name, data = rng.choice(gates)
        if name == "REPEAT":
            continue
        least, most = min(data.num_parens_arguments_range), max(data.num_parens_arguments_range)
        width = rng.randint(least, min(most, least + 4))
        q = rng.choice((0, 1, 5, 11, 999, 65535, 16777215))
        r, s = (q + 1) % 16777216, (q + 2) % 16777216
        for attempt in range(40):
            form = rng.choice(forms).format(q=q, r=r, s=s, k=rng.choice((1, 2, 9, 12)))
            tag = rng.choice(TAGS)
            args = [rng.choice(ARGUMENTS) if rng.random() < 0.5 else rng.random() / 64 for _ in range(width)]
            try:
                c.append(stim.CircuitInstruction(name, stim.Circuit(f"M 0\nH {form}")[1].targets_copy() if form else [],
                                                 args, tag=tag))
                break
            except (ValueError, IndexError):
                continue
    return c


@needs_compiled
def test_the_probe_names_every_gate_stim_has(reader):
    names = {reader.blob[a:b].decode() for a, b in zip(reader.name_at[:-1], reader.name_at[1:]) if b > a}
    assert names == {data.name for data in stim.gate_data().values()}
    probe = stim_memory._probe_circuit(stim)
    assert {inst.name for inst in probe} >= names - {"REPEAT"}
    assert printed(reader, probe) == str(probe)


@needs_compiled
@pytest.mark.parametrize("seed", range(40))
def test_random_circuits_print_as_stim_prints_them(reader, seed):
    rng = random.Random(seed)
    c = a_random_circuit(rng)
    assert printed(reader, c) == str(c)
    n = len(c)
    for lo, hi in ((0, 0), (0, 1), (n - 1, n), (1, n - 1), (rng.randrange(n), n), (0, rng.randrange(n + 1))):
        if lo <= hi:
            assert printed(reader, c, lo, hi) == str(c[lo:hi]), (lo, hi)
            assert stim_memory.circuit_text(c, lo, hi) == str(c[lo:hi])
            assert stim_memory.circuit_bytes(c, lo, hi) == str(c[lo:hi]).encode()


@needs_compiled
@pytest.mark.parametrize("threads", (1, 2, 3, 4, 7, 64))
def test_the_text_does_not_depend_on_the_threads(reader, threads):
    rng = random.Random(threads)
    c = stim.Circuit()
    for _ in range(300):  # instructions of very different lengths, so the threads' runs differ
        c += a_random_circuit(rng) if rng.random() < 0.1 else stim.Circuit(
            f"CX {' '.join(map(str, rng.sample(range(20000), 2 * rng.randrange(1, 400))))}")
    want = str(c)
    assert printed(reader, c, threads=threads) == want
    assert printed(reader, c, 7, len(c) - 3, threads=threads) == str(c[7:len(c) - 3])


@needs_compiled
def test_a_large_circuit_is_printed_here_and_matches(reader, monkeypatch):
    from benchmarks.random_clifford import paper_random_circuit_stim

    c = paper_random_circuit_stim(3000, 40, seed=5)
    calls = []
    real = stim_memory._printed
    monkeypatch.setattr(stim_memory, "_printed", lambda *a: calls.append(a[2:]) or real(*a))
    assert stim_memory.circuit_text(c) == str(c)
    assert stim_memory.circuit_text(c, 10, 200) == str(c[10:200])
    assert calls == [(len(c), 0, len(c)), (len(c), 10, 200)]


@needs_compiled
def test_a_gate_type_without_a_name_is_printed_by_stim(reader):
    c = stim.Circuit("H 0 1\nREPEAT 2 {\n    S 0\n    CX 0 1\n}\nM 1")
    name_at = reader.name_at.copy()
    gate = next(g for g in range(256) if reader.blob[name_at[g]:name_at[g + 1]] == b"CX")
    at = int(name_at[gate])
    name_at[gate + 1:] -= 2  # CX's name dropped (the names after it move up)
    blind = reader._replace(blob=reader.blob[:at] + reader.blob[at + 2:], name_at=name_at)
    assert printed(blind, c) is None
    assert printed(blind, c, 0, 1) == "H 0 1"


@needs_compiled
def test_a_count_or_sizes_that_do_not_add_up_are_refused(reader):
    c = stim.Circuit("H 0 1\nM 0 1\nCX 0 1")
    address = native.address
    sizes = np.empty(3, dtype=np.int64)
    args = (address(reader.layout), reader.blob, address(reader.name_at), reader.repeat)
    assert reader.lib.qq_stim_text_sizes(id(c), 4, 0, 3, *args, address(sizes), 1) == -1
    total = reader.lib.qq_stim_text_sizes(id(c), 3, 0, 3, *args, address(sizes), 2)
    assert total == len(str(c))
    out = np.empty(total + 8, dtype=np.uint8)
    sizes[1] += 1  # as if the circuit had changed between the count and the writing
    assert reader.lib.qq_stim_text_write(id(c), 0, 3, *args, address(sizes), address(out), total + 1, 2) == -1


@needs_compiled
@pytest.mark.parametrize("field, shift", [(f, s) for f in range(len(stim_memory.LAYOUT)) for s in (-8, 8, 64)
                                          if stim_memory.LAYOUT[f] + s >= 0])
def test_a_layout_that_is_not_stims_is_refused_without_a_crash(monkeypatch, field, shift):
    """Each offset moved: the probe refuses it (no reader), or it holds the same thing there too (the
    Python object keeps the circuit's pointer twice: its value and its holder) and prints as Stim."""
    layout = list(stim_memory.LAYOUT)
    layout[field] += shift
    monkeypatch.setattr(stim_memory, "LAYOUT", tuple(layout))
    stim_memory._reader.cache_clear()
    try:
        found = stim_memory._reader()
        if found is not None:
            assert (field, shift) == (0, 8)
            c = a_random_circuit(random.Random(field))
            assert printed(found, c) == str(c)
    finally:
        stim_memory._reader.cache_clear()


def test_a_small_circuit_before_any_check_is_printed_by_stim(monkeypatch):
    """Below PROBE_SIZE (qubits x top-level instructions, where the caller says its qubits) a process
    that has not checked the layout yet leaves the circuit to Stim and checks nothing; once checked,
    every circuit is read here; a caller that does not say its qubits has it checked."""
    c = stim.Circuit("\n".join(f"X_ERROR(0.{k % 9 + 1}) {k}\nH {k}" for k in range(40)))
    stim_memory._reader.cache_clear()
    monkeypatch.setattr(stim_memory, "_probe", lambda *a: pytest.fail("checked"))
    try:
        assert stim_memory.circuit_text(c, num_qubits=40) == str(c)
        assert stim_memory.plain_instructions(c, 40) == (False, None)
    finally:
        stim_memory._reader.cache_clear()
    monkeypatch.undo()
    big = int(stim_memory.PROBE_SIZE // len(c)) + 1
    assert stim_memory.circuit_text(c, 1, 30, num_qubits=big) == str(c[1:30])
    assert stim_memory._reader.cache_info().currsize and stim_memory.plain_instructions(c, 40)[0]
    stim_memory._reader.cache_clear()
    assert stim_memory.plain_instructions(c)[0]  # (no qubits said: checked)


def _checks():
    import threading

    return [t for t in threading.enumerate() if t.name == "cirq_quasarq: Stim layout check"]


@needs_compiled
def test_an_engine_that_works_ahead_checks_the_layout_on_a_thread(monkeypatch):
    """`check_soon`: the check on a thread of its own, once a process (not again once started, nor
    where it is made already, nor where circuits are not read here); `shots.compiled_with_reference`
    asks for it where the engine works ahead, and its compile of a small circuit meanwhile is Stim's
    text, as before any check."""
    from cirq_quasarq import shots
    from cirq_quasarq.engines.numpy.engine import NumpyEngine

    for thread in _checks():
        thread.join()
    monkeypatch.setattr(stim_memory, "_CHECK_STARTED", [])
    stim_memory._reader.cache_clear()
    monkeypatch.setattr(stim_memory, "PRINT_HERE", False)
    stim_memory.check_soon()
    assert not _checks() and not stim_memory._CHECK_STARTED
    monkeypatch.setattr(stim_memory, "PRINT_HERE", True)
    engine = NumpyEngine()
    c = stim.Circuit("H 0\nCX 0 1\nM 0 1")
    shots.compiled_with_reference(engine, c)  # (the NumPy engine's host does the work: no check)
    assert not stim_memory._CHECK_STARTED
    monkeypatch.setattr(engine, "works_ahead", True)
    program = shots.compiled_with_reference(engine, stim.Circuit("H 0\nCX 0 1\nM 0 1\nX 1"))
    assert stim_memory._CHECK_STARTED == [True] and program.num_records == 2
    for thread in _checks():
        thread.join()
    assert stim_memory._reader.cache_info().currsize == 1 and stim_memory._reader() is not None
    shots.compiled_with_reference(engine, stim.Circuit("H 0\nM 0"))
    assert stim_memory._CHECK_STARTED == [True] and not _checks()  # once a process
    monkeypatch.setattr(stim_memory, "_CHECK_STARTED", [])
    stim_memory.check_soon()  # (made already)
    assert not stim_memory._CHECK_STARTED and not _checks()


def test_off_or_without_the_compiled_path_stim_prints(monkeypatch):
    c = stim.Circuit("\n".join(f"X_ERROR(0.{k % 9 + 1}) {k}\nH {k}" for k in range(40)))
    monkeypatch.setattr(stim_memory, "_printed", lambda *a: pytest.fail("printed here"))
    monkeypatch.setenv("CIRQ_QUASARQ_STIM_MEMORY", "0")
    assert stim_memory.circuit_text(c) == str(c)
    monkeypatch.setenv("CIRQ_QUASARQ_STIM_MEMORY", "1")
    monkeypatch.setattr(stim_memory, "PRINT_HERE", False)
    assert stim_memory.circuit_text(c, 3) == str(c[3:])
    monkeypatch.setattr(stim_memory, "PRINT_HERE", True)
    monkeypatch.setenv("CIRQ_QUASARQ_STIM_MEMORY", "1")
    monkeypatch.setenv("CIRQ_QUASARQ_NATIVE", "0")
    assert stim_memory.circuit_text(c, 2, 9) == str(c[2:9])
    assert stim_memory.plain_instructions(c) == (False, None) and not stim_memory.reads_in_place()


PLAIN_GATES = ("H", "S", "S_DAG", "X", "Y", "Z", "SQRT_X", "C_XYZ", "CX", "CY", "CZ", "SWAP", "ISWAP", "XCZ", "M", "MX",
               "MY", "MR", "MRX", "R", "RX", "RY")


def a_plain_circuit(rng: random.Random, n: int = 40, lines: int = 200, odd: Optional[int] = None) -> "stim.Circuit":
    """Whole instructions of plain targets (measurements inverted at times) and TICKs; with `odd`, one
    line of another form at a random place: 0 a noise channel's arguments, 1 a tag, 2 a record or sweep
    bit whose number is not a qubit of the instruction, 3 a REPEAT block, 4 a qubit named twice in
    one instruction, 5 a measurement's flip probability (its name alone would be whole). A line's
    gate is never the line before's: Stim would join them into one instruction, which may name a
    qubit twice."""
    text, last = [], None
    for _ in range(lines):
        if rng.random() < 0.1:
            text.append("TICK")
            last = None
            continue
        gate = rng.choice([g for g in PLAIN_GATES if g != last])
        last = gate
        two = gate in ("CX", "CY", "CZ", "SWAP", "ISWAP", "XCZ")
        qubits = rng.sample(range(n), 2 * rng.randrange(1, n // 2) if two else rng.randrange(1, n))
        targets = [f"!{q}" if gate.startswith("M") and rng.random() < 0.3 else str(q) for q in qubits]
        text.append(f"{gate} {' '.join(targets)}")
    if odd is not None:
        q = rng.randrange(4, n)
        line = ("X_ERROR(0.125) 0 5", "H[t] 1 2", f"CX {rng.choice(('rec[-3]', 'sweep[3]'))} {q}",
                f"REPEAT 2 {{\n    H {q}\n}}", f"CX 1 {q} {q} 2", f"M(0.125) 3 !{q}")[odd]
        text.insert(rng.randrange(len(text) + 1), f"TICK\n{line}\nTICK")  # (joined to no other line)
        if odd == 2:
            text.insert(0, "M 0 1 2")
    return stim.Circuit("\n".join(text))


def same_runs(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if len(a.runs) != len(b.runs):
        return False
    for x, y in zip(a.runs, b.runs):
        if (x is None) != (y is None):
            return False
        for u, v in zip(x or (), y or ()):
            if (u is None) != (v is None) or (u is not None and not np.array_equal(u, v)):
                return False
    return True


def walked_runs(c, n: int):
    """The runs of a circuit read in place, an instruction at a time (the walk the array passes of
    `stim_rows._runs` replaced, kept here as their definition): a TICK of no targets closes the open
    run; every other instruction is a whole one of targets, its parsed line the next; a run is kept
    where the check passes it."""
    from cirq_quasarq.compiler import stim_rows
    from cirq_quasarq.compiler.stim_instructions import _plain

    plain = stim_memory.plain_instructions(c, n)[1]
    table, lib, address = _plain(stim), native.compiled(), native.address
    stamp = np.full(max(1, n), -1, dtype=np.int64)
    runs, entries, first = [], [], 0

    def close_run() -> bool:
        nonlocal first
        if entries:
            lo, hi = int(plain.starts[first]), int(plain.starts[first + len(entries)])
            bounds = plain.starts[first:first + len(entries) + 1] - lo
            qubits = plain.qubits[lo:hi]
            flags = plain.inverted[lo:hi] if plain.bangs and plain.inverted[lo:hi].any() else None
            run = np.array(entries, dtype=np.int32).reshape(-1, 8)
            if lib.qq_host_check_segment(address(run), len(run), address(qubits),
                                         None if flags is None else address(flags), address(bounds), n,
                                         address(stamp), first):
                return False
            runs.append((run, qubits, flags, bounds))
            first += len(entries)
            entries.clear()
        return True

    for gate, read in zip(plain.gates.tolist(), plain.parsed.tolist()):
        name = plain.gate_names[gate]
        if read < 0 and name == "TICK":
            if not close_run():
                return None
            runs.append(None)
            continue
        entry = stim_rows._whole_line(table, name, read, first + len(entries))
        if entry is None:
            return None
        entries.append(stim_rows.native_entry(entry, entry[1], -1))
    return stim_rows.CompiledPiece(runs) if close_run() else None


@needs_compiled
@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("odd", (None, 0, 1, 2, 3, 4, 5))
def test_plain_instructions_read_in_place_are_their_texts_runs(reader, seed, odd):
    """`stim_rows.circuit_runs` (no text) against `compiled_runs` of Stim's text and the walk of its
    instructions: the same runs, array for array, for whole instructions, and None all where one
    line is of another form."""
    from cirq_quasarq.compiler import stim_rows

    c = a_plain_circuit(random.Random(seed), odd=odd)
    read, runs = stim_rows.circuit_runs(c, c.num_qubits)
    assert read
    want = stim_rows.compiled_runs(str(c), c.num_qubits)
    assert same_runs(runs, want)
    assert (runs is None) == (odd is not None)
    if odd in (None, 4):  # (the other forms are no plain instructions: nothing read to walk)
        assert same_runs(runs, walked_runs(c, c.num_qubits))


@needs_compiled
@pytest.mark.parametrize("text", ["", "TICK", "TICK\nTICK", "TICK\nH 0\nTICK\nTICK\nCX 0 1\nTICK",
                                  "H 0 1\nTICK\nM !0 1\nMR 1\nTICK\nR 0\nX 1", "H\nM 0", "M 0\nH",
                                  "TICK\nH\nTICK", "H 0\nH 0 1\nTICK\nM 1 !0"])
def test_plain_runs_at_their_edges_are_the_texts(reader, text):
    """The array passes of `circuit_runs` against the walk of its instructions and the reader of
    Stim's text: TICKs first, last, in a row and alone, no instructions, instructions of no targets (not whole: None), a qubit twice."""
    from cirq_quasarq.compiler import stim_rows

    c = stim.Circuit(text)
    n = max(2, c.num_qubits)
    read, runs = stim_rows.circuit_runs(c, n)
    assert read
    assert same_runs(runs, walked_runs(c, n))  # (the walk, an instruction at a time)
    if text:  # (an empty text is no piece to the text's reader)
        assert same_runs(runs, stim_rows.compiled_runs(str(c), n))


@needs_compiled
@pytest.mark.parametrize("threads, thread_targets, room", [(1, 1, 1 << 20), (2, 1, 1 << 20), (3, 7, 1 << 20),
                                                           (8, 1, 1 << 20), (4, 1000, 5), (4, 1, 0)])
def test_plain_instructions_do_not_depend_on_threads_or_room(reader, monkeypatch, threads, thread_targets, room):
    from cirq_quasarq.compiler import stim_rows

    c = a_plain_circuit(random.Random(threads), n=300, lines=400)
    want = stim_rows.compiled_runs(str(c), c.num_qubits)
    assert want is not None
    monkeypatch.setattr(stim_memory, "_THREADS", threads)
    monkeypatch.setattr(stim_memory, "_THREAD_TARGETS", thread_targets)
    monkeypatch.setattr(stim_memory, "_PLAIN_ROOM", room)
    monkeypatch.setattr(native, "processors", lambda: 64)
    read, runs = stim_rows.circuit_runs(c, c.num_qubits)
    assert read and same_runs(runs, want)


@needs_compiled
def test_plain_instructions_refuse_a_count_that_does_not_add_up(reader):
    c = stim.Circuit("H 0 1\nM 0 1")
    address = native.address
    arrays = [np.empty(8, dtype=np.int64) for _ in range(3)]
    qubits, inverted, counts = np.empty(8, dtype=np.int64), np.empty(8, dtype=np.uint8), np.empty(2, dtype=np.int64)
    args = (address(reader.layout), reader.repeat, 8, address(arrays[0]), address(arrays[1]), address(qubits),
            address(inverted), address(arrays[2]), address(counts), 2, 1)
    assert reader.lib.qq_stim_read_plain(id(c), 3, 0, 3, *args) == -3
    assert reader.lib.qq_stim_read_plain(id(c), 2, 0, 2, *args) == 4
    assert qubits[:4].tolist() == [0, 1, 0, 1] and counts.tolist() == [2, 0]


@needs_compiled
def test_a_whole_compile_is_the_same_read_in_place_or_from_stims_text(reader, monkeypatch):
    """The compile's Program with the circuit read in place, printed here and printed by Stim (the
    layout checked first: these circuits are below PROBE_SIZE)."""
    from cirq_quasarq.compiler import stim_circuit

    from .test_stim_compile_golden import program_digest

    for seed in range(6):
        c = a_plain_circuit(random.Random(seed), odd=(None, 1, 4)[seed % 3])
        digests = []
        for here, runs in ((True, True), (True, False), (False, True)):
            monkeypatch.setattr(stim_memory, "PRINT_HERE", here)
            if not runs:
                monkeypatch.setattr(stim_circuit, "circuit_runs", lambda circuit, n: (False, None))
            digests.append(program_digest(stim_circuit._StimCompiler(stim, c.num_qubits).run(c)))
            monkeypatch.undo()
        assert digests[0] == digests[1] == digests[2]


@needs_compiled
def test_a_compile_read_in_place_forks_no_printers(reader, monkeypatch):
    """Printers print what Stim would (`PRINTED_MIN`): where the circuit is read here, none is forked,
    at any size; where Stim prints it, they are (printed here in this test)."""
    from cirq_quasarq.compiler import stim_circuit, stim_printing

    made = []
    monkeypatch.setattr(stim_circuit, "PrintedPieces", lambda circuit, bounds, wanted, digest, idle=None:
                        made.append(wanted) or stim_printing.PrintedPieces(circuit, bounds, 0, digest, idle))
    monkeypatch.setattr(stim_circuit, "PRINTED_MIN", 0)
    monkeypatch.setattr(stim_circuit, "printers_available", lambda: 4)
    c = a_plain_circuit(random.Random(3))
    want = stim_circuit._StimCompiler(stim, c.num_qubits).run(c)
    from .test_stim_compile_golden import program_digest

    for here in (True, False):
        monkeypatch.setattr(stim_memory, "PRINT_HERE", here)
        stim_circuit.clear_stim_cache()
        assert program_digest(stim_circuit.compile_new_stim(c)) == program_digest(want)
        assert bool(made) == (not here)
