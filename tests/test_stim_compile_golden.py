"""compile_stim gives, table for table, the Programs it gave before its speed-ups (with the host's
compiled path and without).

tests/data/stim_program_digests.json holds, per case of `CASES`, a digest of the circuit's text and a
digest of every table of its Program (the default path and the per-target path, which must agree),
as the compiler made them before its segments of whole instructions (commit cb0d3ed). Regenerate
(``python -m tests.test_stim_compile_golden --write``) only when a Program changes on purpose, and say
so in the commit.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import sys

import pytest

from cirq_quasarq.compiler import stim_circuit, stim_memory, stim_printing, stim_rows, stim_text

from .test_grouped_lowering import digest as tables_digest
from .test_stim_circuit import random_circuit

stim = pytest.importorskip("stim")
# every test both ways: the NumPy rows (the definition) and the compiled ones (cuda_src/host_rows.cpp)
pytestmark = pytest.mark.usefixtures("native_path")

DIGESTS = pathlib.Path(__file__).parent / "data" / "stim_program_digests.json"

KNOBS = dict(after_clifford_depolarization=1e-3, before_round_data_depolarization=2e-3,
             before_measure_flip_probability=3e-3, after_reset_flip_probability=4e-3)

TEXTS = {
    "repeated qubit": "H 0 0 1\nCX 0 1 1 2\nS 2\nDEPOLARIZE1(0.1) 3 3\nM 0 1 0\nR 2 2\nMX 4 4",
    "bases and inverted": "M !0 1 !2\nMX 0 !1\nMRY !2 0\nRX 1 2\nR 0\nM 0\nMY !3 4\nMRX 5 !6\nRY 7\nMR !8 9\n"
                          "MZ 10\nMRZ !11\nRZ 12",
    "flip probabilities": "M(0.1) 0 1\nM(0) 2\nMX(0.2) !0\nMR(0.01) 3\nMRY(0.02) !4\nMY(0) 5",
    "channels that never fire": "X_ERROR(0) 0 1\nH 0\nDEPOLARIZE2(0) 0 1\nCX 0 1\nPAULI_CHANNEL_1(0, 0, 0) 2",
    "noise channels": "X_ERROR(0.1) 0 1\nY_ERROR(0.2) 2\nZ_ERROR(0.3) 3 4\nDEPOLARIZE1(0.01) 0 1 2 3\n"
                      "DEPOLARIZE2(0.02) 0 1 2 3\nPAULI_CHANNEL_1(0.1, 0.2, 0.05) 4 5\n"
                      "PAULI_CHANNEL_2(0.01, 0, 0, 0.02, 0, 0, 0, 0, 0, 0, 0.03, 0, 0, 0, 0.04) 0 5 1 4\n"
                      "I_ERROR(0.1) 0\nII_ERROR(0.1) 0 1\nX_ERROR(1) 6\nM 0 1 2 3 4 5 6",
    "one-outcome channel": "PAULI_CHANNEL_2(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.1, 0) 0 1\nH 0",
    "ticks and repeat": "H 0\nTICK\nH 0 1\nREPEAT 3 {\n  CX 0 1\n  M 1\n  TICK\n  DEPOLARIZE1(0.1) 0 1\n}\nM 0\n"
                        "REPEAT 1 {\n  H 2\n  TICK\n  M 2\n}\nREPEAT 2 {\n  REPEAT 3 {\n    CZ 0 2\n    MR 0\n"
                        "    DETECTOR(1, 2) rec[-1]\n    SHIFT_COORDS(0, 1)\n  }\n  TICK\n  X 1\n}\nTICK\nTICK",
    "tags and feedback": "H[tagged] 0 1\nM 0\nCX rec[-1] 1\nMPP X0*Z1\nE(0.1) X0 Y1\nCZ 2 rec[-1]\n"
                         "CY rec[-2] 3\nXCZ 3 rec[-1]\nYCZ 0 rec[-1]\nCX sweep[0] 2\nS[other tag] 2\n"
                         "M[t] 0 1\nDEPOLARIZE1[t](0.1) 0",
    "correlated chains": "X_ERROR(0.1) 0 1\nE(0.1) X0\nELSE_CORRELATED_ERROR(0.2) Z1 Z2\nX_ERROR(0.1) 3\nH 0 1\n"
                         "CORRELATED_ERROR(0.2) X0 Y1 Z2\nELSE_CORRELATED_ERROR(0.1) X0 X0\n"
                         "ELSE_CORRELATED_ERROR(0.3) Y3\nE(0.05) Z4",
    "pauli products": "MPP X0*Y1*Z2 !Z3 X0*X0 Y4*Z5\nMXX 0 1 !2 3\nMYY 0 2\nMZZ(0.1) 1 3\nSPP X0*Z1\n"
                      "SPP_DAG !Y2\nMPP(0.05) Z0*Z1*Z2*Z3\nM 0",
    "heralds and pads": "HERALDED_ERASE(0.1) 0 1 2\nHERALDED_PAULI_CHANNEL_1(0.01, 0.02, 0.03, 0.04) 3 !4\n"
                        "MPAD 0 1 1\nMPAD(0.1) 0\nM 0 1 2 3 4\nDETECTOR rec[-1] rec[-9]",
    "observables": "H 0 1\nM 0 1\nOBSERVABLE_INCLUDE(0) rec[-1]\nOBSERVABLE_INCLUDE(2) rec[-2] X0 Z1\n"
                   "OBSERVABLE_INCLUDE(1) Y1\nQUBIT_COORDS(1, 2) 0\nDETECTOR(0, 0, 1) rec[-1] rec[-2]",
    "unitaries": "I 0\nX 0\nY 1\nZ 2\nH 3\nS 4\nS_DAG 5\nSQRT_X 6\nSQRT_X_DAG 7\nSQRT_Y 0\nSQRT_Y_DAG 1\n"
                 "H_XY 2\nH_YZ 3\nC_XYZ 4\nC_ZYX 5\nSQRT_Z 6\nH_XZ 7\nCX 0 1\nCNOT 2 3\nZCX 4 5\nCY 6 7\n"
                 "CZ 0 2\nSWAP 1 3\nISWAP 4 6\nISWAP_DAG 5 7\nSQRT_XX 0 3\nSQRT_YY_DAG 1 2\nSQRT_ZZ 4 7\n"
                 "CXSWAP 5 6\nSWAPCZ 0 1\nXCX 2 3\nXCY 4 5\nXCZ 6 7\nYCX 0 4\nYCY 1 5\nYCZ 2 6\nII 3 7\nM 0 1 2 3 4 5 6 7",
    "wide and sparse qubits": "H 100000 3 70000\nCX 100000 5 70000 6\nM 5 100000\nR 70000",
    "empty": "",
    "ticks only": "TICK\nTICK\nQUBIT_COORDS(0, 0) 0",
}


def _cases():
    from benchmarks.random_clifford import paper_random_circuit_stim

    cases = {name: (lambda text=text: stim.Circuit(text)) for name, text in TEXTS.items()}
    for n, depth, seed in ((20, 5, 1), (300, 20, 2), (1000, 30, 3)):
        cases[f"paper n={n} depth={depth}"] = lambda n=n, depth=depth, seed=seed: paper_random_circuit_stim(n, depth, seed)
    for code in ("surface_code:rotated_memory_z", "surface_code:rotated_memory_x", "surface_code:unrotated_memory_z",
                 "repetition_code:memory", "color_code:memory_xyz"):
        for d in (3, 7):
            cases[f"{code} d={d}"] = lambda code=code, d=d: stim.Circuit.generated(code, distance=d, rounds=d, **KNOBS)
    cases["surface d=5 noiseless"] = lambda: stim.Circuit.generated("surface_code:rotated_memory_z", distance=5,
                                                                    rounds=5)
    cases["surface d=5 flattened"] = lambda: stim.Circuit.generated("surface_code:rotated_memory_z", distance=5,
                                                                    rounds=3, **KNOBS).flattened()
    for seed in range(12):
        cases[f"random {seed}"] = lambda seed=seed: random_circuit(900 + seed, n=8, noisy=seed % 2 == 0)
    return cases


CASES = _cases()


def text_digest(circuit) -> str:
    return hashlib.sha256(str(circuit).encode()).hexdigest()


def program_digest(program) -> str:
    return hashlib.sha256((tables_digest(program) + repr(program.pauli_observables)).encode()).hexdigest()


def compute(name):
    circuit = CASES[name]()
    whole = stim_circuit._StimCompiler(stim, circuit.num_qubits).run(circuit)
    per_target = stim_circuit._StimCompiler(stim, circuit.num_qubits, whole_instructions=False).run(circuit)
    return [text_digest(circuit), program_digest(whole), program_digest(per_target)]


@pytest.fixture(scope="module")
def digests():
    return json.loads(DIGESTS.read_text())


@pytest.mark.parametrize("name", sorted(CASES))
def test_stim_programs_are_as_before(name, digests):
    circuit_text, whole, per_target = compute(name)
    want_text, want = digests[name]
    assert circuit_text == want_text, "the case's circuit changed, not its Program: regenerate on purpose"
    assert per_target == want, "the per-target path's Program changed"
    assert whole == want, "the default path's Program changed"


if __name__ == "__main__":
    if "--write" in sys.argv:
        table = {}
        for case in sorted(CASES):
            text, whole, per_target = compute(case)
            assert whole == per_target, case
            table[case] = [text, whole]
        DIGESTS.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(table)} digests to {DIGESTS}")


SMALL = ["repeated qubit", "bases and inverted", "ticks and repeat", "noise channels", "paper n=300 depth=20",
         "surface_code:rotated_memory_x d=3", "random 0", "random 1"]


@pytest.mark.parametrize("chars", [1, 300])
@pytest.mark.parametrize("name", SMALL)
def test_segments_of_any_length_give_the_same_programs(monkeypatch, name, chars, digests):
    """A segment is written once its targets' text is long enough: where it is cut changes nothing."""
    monkeypatch.setattr(stim_circuit, "_SEGMENT_CHARS", chars)
    assert compute(name)[1] == digests[name][1]


@pytest.mark.parametrize("name", SMALL)
def test_a_segment_whose_text_does_not_parse_goes_per_target(monkeypatch, name, digests):
    monkeypatch.setattr(stim_circuit, "_parse_targets", lambda text: None)
    assert compute(name)[1] == digests[name][1]


@pytest.mark.parametrize("first, most", [(1, 1), (7, 20)])
@pytest.mark.parametrize("name", sorted(CASES))
def test_rows_kept_in_blocks_of_any_size_give_the_same_programs(monkeypatch, name, first, most, digests):
    """The builder keeps its sorted rows as views of blocks of rows (`ProgramBuilder._kept`): blocks
    that run out at every row or every few rows, and rows of one sort larger than a block (which get
    a block of their own), give the same Programs."""
    from cirq_quasarq.core import program as core_program

    monkeypatch.setattr(core_program, "_POOL_FIRST", first)
    monkeypatch.setattr(core_program, "_POOL_MOST", most)
    kept, real = [], core_program.ProgramBuilder._kept
    monkeypatch.setattr(core_program.ProgramBuilder, "_kept", lambda self, k: kept.append(k) or real(self, k))
    assert compute(name)[1] == digests[name][1]
    if name == "random 11":  # ten sorts of up to 15 rows: blocks of 7 to 20 rows run out
        assert len(kept) >= 8 and sum(kept) > 2 * most
    if name == "surface_code:unrotated_memory_z d=7":  # one sort larger than any block
        assert max(kept) > most


@pytest.mark.parametrize("short", [False, True])
@pytest.mark.parametrize("chars", [1, 300, 1 << 17])
@pytest.mark.parametrize("name", sorted(CASES))
def test_targets_read_already_give_the_same_programs(monkeypatch, name, chars, short, digests):
    """A text whose lines' targets were read already (as a printer of the streamed compile's pieces
    reads them: `stim_text._read_lines`), the text whole or cut where they were read (as the printer
    hands it over), gives the Program of the compile that reads them segment by segment, however the
    segments are cut (lines of other kinds between a segment's lines too)."""
    walk = stim_circuit._StimCompiler._walk_text
    read = stim_text._read_lines if short else (lambda text: (text, stim_text._read_lines(text)[1]))
    monkeypatch.setattr(stim_circuit._StimCompiler, "_walk_text",
                        lambda self, circuit, text, targets=None: walk(self, circuit, *read(text)))
    monkeypatch.setattr(stim_circuit, "_SEGMENT_CHARS", chars)
    assert compute(name)[1] == digests[name][1]


@pytest.mark.skipif(not stim_printing.printers_available(), reason="no fork and memfd here (or one processor)")
@pytest.mark.parametrize("pieces", [1, 2, 5])
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_whole_compile_from_printed_pieces_gives_the_same_programs(monkeypatch, name, pieces, digests):
    """A large circuit without detectors or observables is walked from its text printed in pieces by
    printers, the lines' targets read there (`compile_new_stim`): the same Program (correlated
    chains not cut between pieces); others are walked whole."""
    monkeypatch.setattr(stim_circuit, "PRINTED_MIN", 0)
    monkeypatch.setattr(stim_memory, "PRINT_HERE", False)  # (printers print what Stim prints)
    monkeypatch.setattr(stim_circuit, "PRINTED_PIECES", pieces)
    made = []
    monkeypatch.setattr(stim_circuit, "PrintedPieces",
                        lambda *args, **kw: made.append(stim_printing.PrintedPieces(*args, **kw)) or made[-1])
    circuit = CASES[name]()
    assert program_digest(stim_circuit.compile_new_stim(circuit)) == digests[name][1]
    assert bool(made) == (len(circuit) >= 2 * pieces and not (circuit.num_detectors or circuit.num_observables))


@pytest.mark.parametrize("printers, size, printed", [(1, 500, False), (1, 5000, True), (4, 3000, False),
                                                     (4, 5000, True), (8, 4000, True), (0, 5000, False)])
def test_a_compile_prints_in_pieces_from_a_size_with_printers(monkeypatch, printers, size, printed):
    """`compile_new_stim` prints in pieces from PRINTED_MIN (qubits times top-level instructions) where
    a printer may run; never without printers."""
    monkeypatch.setattr(stim_circuit, "PRINTED_MIN", 4000)
    monkeypatch.setattr(stim_memory, "PRINT_HERE", False)  # (printers print what Stim prints)
    monkeypatch.setattr(stim_circuit, "PRINTERS", 4)
    monkeypatch.setattr(stim_circuit, "printers_available", lambda: printers)
    _, made = whole_compile_of_size(monkeypatch, size)
    assert bool(made) == printed


def whole_compile_of_size(monkeypatch, size: int):
    """`compile_new_stim` of a 10-qubit circuit of `size` qubits x instructions, any printed pieces
    printed here (no printer forked), its Program checked against the walk of the whole: (the
    circuit, the PrintedPieces it asked for as (bounds, printers, whether it gave idle work)). The
    compile cache holds the circuit afterwards, with idle work or without."""
    made = []
    monkeypatch.setattr(stim_circuit, "PrintedPieces",
                        lambda circuit, bounds, wanted, digest, idle=None: made.append((bounds, wanted, idle is not None))
                        or stim_printing.PrintedPieces(circuit, bounds, 0, digest, idle))
    circuit = stim.Circuit("\n".join(f"{'HS'[k % 2]} {k % 10}" for k in range(size // 10)))
    assert circuit.num_qubits * len(circuit) == size
    expected = program_digest(stim_circuit._StimCompiler(stim, 10).run(circuit))
    stim_circuit.clear_stim_cache()
    program = stim_circuit.compile_new_stim(circuit)
    assert program_digest(program) == expected
    assert stim_circuit.cached_stim(circuit.copy()) is program
    return circuit, made


@pytest.mark.parametrize("available, size, printers", [(3, 4000, 3), (8, 4000, 4), (8, 40000, 8), (15, 39990, 4),
                                                        (5, 40000, 5), (15, 400000, 9), (7, 400000, 7)])
@pytest.mark.parametrize("halves", [True, False])
def test_a_whole_compile_asks_for_its_printers_each_first_on_a_quarter_piece(monkeypatch, available, size, printers,
                                                                            halves):
    """A whole compile printed in pieces asks for PRINTERS printers, PRINTERS_MANY from PRINTED_MANY
    (at most those that may run), gives them the cache's copy as idle work, and cuts pieces so that
    each printer's first is a quarter of the later ones, as piece 0 is, and its second (with
    PRINTED_HALVES) a half: the same Program."""
    monkeypatch.setattr(stim_circuit, "PRINTED_HALVES", halves)
    monkeypatch.setattr(stim_circuit, "PRINTED_MIN", 400)
    monkeypatch.setattr(stim_memory, "PRINT_HERE", False)  # (printers print what Stim prints)
    monkeypatch.setattr(stim_circuit, "PRINTED_MANY", 40000)
    monkeypatch.setattr(stim_circuit, "PRINTED_PIECES", 5)
    monkeypatch.setattr(stim_circuit, "PRINTERS_MANY", 9)
    monkeypatch.setattr(stim_circuit, "printers_available", lambda: available)
    circuit, made = whole_compile_of_size(monkeypatch, size)
    (bounds, wanted, idle), = made
    step = -(-len(circuit) // 5)
    sizes = [hi - lo for lo, hi in bounds]
    assert wanted == printers and idle
    cut = [-(-step // 4)] * (1 + printers) + [-(-step // 2)] * (printers if halves else 0) + [step] * len(sizes)
    assert sizes[:-1] == cut[:len(sizes) - 1] and 0 < sizes[-1] <= cut[len(sizes) - 1]


@pytest.mark.skipif(not stim_printing.printers_available(), reason="no fork and memfd here (or one processor)")
@pytest.mark.parametrize("bad", ["H 0 1\nX_ERROR(0.1) 0\nELSE_CORRELATED_ERROR(0.25) X1", "MPP X0*Z0",
                                 "MXX 0 1\nSPP_DAG Z2*Y2", "CX rec[-400] 0"])
def test_a_whole_compile_from_printed_pieces_fails_as_the_whole_walk(monkeypatch, bad):
    """An instruction the compile refuses, in a later piece: the error of the walk of the whole
    circuit, which names the instruction's index in it."""
    monkeypatch.setattr(stim_circuit, "PRINTED_MIN", 0)
    monkeypatch.setattr(stim_memory, "PRINT_HERE", False)  # (printers print what Stim prints)
    circuit = CASES["paper n=300 depth=20"]() + stim.Circuit(bad) + CASES["paper n=20 depth=5"]()
    errors = []
    for walk in ("printed", "whole"):
        if walk == "whole":
            monkeypatch.setattr(stim_circuit, "PRINTED_MIN", 1 << 62)
            monkeypatch.setattr(stim_memory, "PRINT_HERE", False)  # (printers print what Stim prints)
        with pytest.raises(Exception) as raised:
            stim_circuit.compile_new_stim(circuit)
        errors.append((type(raised.value), str(raised.value), getattr(raised.value, "instruction_path", None)))
    assert errors[0] == errors[1] and errors[0][2] is not None and errors[0][2][0] >= 240


@pytest.mark.parametrize("text, want", [
    ("0 1 2", ([0, 1, 2], None, [0, 3])),
    ("12 !3 45\n6", ([12, 3, 45, 6], [False, True, False, False], [0, 3, 4])),
    ("0\n!1 2 3\n44", ([0, 1, 2, 3, 44], [False, True, False, False, False], [0, 1, 4, 5])),
    ("123456789 7", ([123456789, 7], None, [0, 2])),
    ("1!2", None), ("!!1", None), ("1  2", None), ("1 a", None), ("", None), ("1 ", None), ("rec[-1] 0", None),
    ("1234567890", None), ("1 -2", None), ("!", None),
])
def test_parse_targets(text, want):
    got = stim_text._parse_targets(text)
    if want is None:
        assert got is None
        return
    qubits, inverted, starts = got
    assert qubits.tolist() == want[0] and starts.tolist() == want[2]
    assert (inverted is None and want[1] is None) or inverted.tolist() == want[1]


@pytest.mark.parametrize("name", SMALL + ["tags and feedback", "correlated chains", "heralds and pads", "empty"])
def test_the_object_walk_gives_the_same_programs(monkeypatch, name, digests):
    """A circuit with few annotations is walked from its text; walking its instruction objects (as
    an annotation-heavy circuit is) gives the same Program."""
    monkeypatch.setattr(stim_circuit._StimCompiler, "_walk_text",
                        lambda self, circuit, text: self._walk(circuit, top=True))
    assert compute(name)[1] == digests[name][1]


TEXT_WALK_CASES = [
    "H 0\nREPEAT[tag] 2 {\n  H 0\n  M 0\n}\nMR\nH\nE(0.1) X0\nELSE_CORRELATED_ERROR(0.2) Z1\nH 1 2\nREPEAT 2 {\n}\nCX 0 1",
    "M 0\nREPEAT 3 {\n  REPEAT 2 {\n    CX 0 1\n  }\n  }\nCX rec[-1] 1 2 3\nH[a b] 0 1\nM(0) 0 !1\nTICK\nMX 0 !1 2",
    "R 0 1 2\nX_ERROR(0.1) 0 1 2\nM 0 1 2\nDETECTOR rec[-1]\nOBSERVABLE_INCLUDE(0) rec[-2]\nH 0 0\nS 1",
]


@pytest.mark.parametrize("text", TEXT_WALK_CASES)
def test_the_text_walk_equals_the_object_walk_and_the_per_target_path(text):
    circuit = stim.Circuit(text)
    from_text = stim_circuit._StimCompiler(stim, circuit.num_qubits).run(circuit)
    compiler = stim_circuit._StimCompiler(stim, circuit.num_qubits)
    compiler._walk_text = lambda circuit, text: compiler._walk(circuit, top=True)
    from_objects = compiler.run(circuit)
    per_target = stim_circuit._StimCompiler(stim, circuit.num_qubits, whole_instructions=False).run(circuit)
    assert program_digest(from_text) == program_digest(from_objects) == program_digest(per_target)


class DigestedHere(stim_printing.PrintedPieces):
    """Printed pieces digested in this process, as a printer digests them (no fork needed)."""

    def __init__(self, circuit, bounds, printers=None, digest=None, idle=None):
        super().__init__(circuit, bounds, 0, digest, idle)

    def piece(self, i):
        lo, hi = self.bounds[i]
        text = str(self.circuit[lo:hi])
        return self.digest(text) if i else (text, None)


@pytest.mark.parametrize("sorted_rows, compiled_group", [(1, 1), (7, 5), (1 << 14, 1 << 16)])
@pytest.mark.parametrize("pieces", [1, 2, 5])
@pytest.mark.parametrize("name", sorted(CASES))
def test_pieces_whose_rows_a_printer_made_give_the_same_programs(monkeypatch, name, pieces, sorted_rows,
                                                                compiled_group, digests, native_path):
    """A piece of whole instructions and TICKs is prepared by its printer (`stim_rows.digest_piece`):
    without the compiled path its rows made there, the compile placing and sorting them, however
    many rows are sorted at once; with it, its runs read and checked there, the compile placing
    them unchecked in groups of any size (`_walk_compiled`). The same Program either way; pieces
    of anything else are walked from their text as before. Every case whose pieces can be prepared
    is (the paper's circuits, the collapses in every basis, the unitaries)."""
    monkeypatch.setattr(stim_circuit, "PRINTED_MIN", 0)
    monkeypatch.setattr(stim_memory, "PRINT_HERE", False)  # (printers print what Stim prints)
    monkeypatch.setattr(stim_circuit, "PRINTED_PIECES", pieces)
    texts = []
    monkeypatch.setattr(stim_circuit, "PrintedPieces", lambda *args, **kw: texts.append(DigestedHere(*args, **kw))
                        or texts[-1])
    monkeypatch.setattr(stim_circuit, "_SORTED_ROWS", sorted_rows)
    made = []
    for walked in ("_walk_prepared", "_walk_compiled"):
        walk = getattr(stim_circuit._StimCompiler, walked)
        monkeypatch.setattr(stim_circuit._StimCompiler, walked,
                            lambda self, piece, walk=walk: made.append(piece) or walk(self, piece))
    monkeypatch.setattr(stim_circuit, "_COMPILED_GROUP", compiled_group)
    circuit = CASES[name]()
    assert program_digest(stim_circuit.compile_new_stim(circuit)) == digests[name][1]
    printed = len(circuit) >= 2 * pieces and not (circuit.num_detectors or circuit.num_observables)
    kind = stim_rows.CompiledPiece if native_path == "native" else stim_rows.PreparedPiece
    assert all(isinstance(piece, kind) for piece in made)
    if printed and (name.startswith("paper") or name in ("bases and inverted", "wide and sparse qubits")):
        assert len(made) == len(texts[0].bounds) - 1  # all but the first, printed here
    if name in ("repeated qubit", "ticks and repeat", "tags and feedback", "correlated chains", "empty"):
        # a qubit named twice, a REPEAT, a tag, a channel: walked here (a piece of none of them is made)
        assert not made or len(made) < len(texts[0].bounds) - 1
