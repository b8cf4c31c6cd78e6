"""DETECTOR / OBSERVABLE_INCLUDE in runs (`_StimCompiler._annotation_run`, the builder's
`add_detectors` / `add_observable_includes`) give, table for table, the Programs of the one-by-one
path (`_StimCompiler(..., whole_annotations=False)`), and fail alike."""

from __future__ import annotations

import types

import numpy as np
import pytest

from cirq_quasarq.compiler import stim_circuit, stim_text
from cirq_quasarq.core import paulis

from . import annotation_oracle
from .test_builder_annotations import assert_annotation_tables_equal, key_table
from .test_stim_circuit import assert_programs_equal
from .test_stim_compile_golden import program_digest

stim = pytest.importorskip("stim")

KNOBS = dict(after_clifford_depolarization=1e-3, before_round_data_depolarization=2e-3,
             before_measure_flip_probability=3e-3, after_reset_flip_probability=4e-3)
CODES = ["surface_code:rotated_memory_x", "surface_code:rotated_memory_z", "surface_code:unrotated_memory_x",
         "surface_code:unrotated_memory_z", "repetition_code:memory", "color_code:memory_xyz"]


def compile_with(circuit, whole_instructions=True, whole_annotations=True):
    return stim_circuit._StimCompiler(stim, circuit.num_qubits, whole_instructions, whole_annotations).run(circuit)


def one_by_one(circuit):
    """The one-by-one path's Program, its keys and annotations checked against the builder's
    expansion as it was (tests/annotation_oracle.py)."""
    compiler = stim_circuit._StimCompiler(stim, circuit.num_qubits, whole_annotations=False)
    program = compiler.run(circuit)
    detectors, observables = annotation_oracle.expand_annotations(compiler.b)
    assert_annotation_tables_equal(program, types.SimpleNamespace(detectors=detectors, observables=observables))
    assert key_table(program) == key_table(types.SimpleNamespace(keys=annotation_oracle.expand_keys(compiler.b)))
    return program


@pytest.fixture(params=[1, stim_circuit._ANNOTATION_RUN_MIN], ids=["every run", "long runs"])
def run_min(request, monkeypatch):
    monkeypatch.setattr(stim_circuit, "_ANNOTATION_RUN_MIN", request.param)
    return request.param


def assert_runs_equal_one_by_one(circuit, monkeypatch, run_min, what=""):
    """Runs (text walk and object walk) against one by one; with runs of any length, no annotation
    goes one by one (none of these circuits fails)."""
    oracle = one_by_one(circuit)
    singles = []
    plain = stim_circuit._StimCompiler._annotation
    monkeypatch.setattr(stim_circuit._StimCompiler, "_annotation",
                        lambda self, *args: (singles.append(args[0]), plain(self, *args))[1])
    for whole_instructions in (True, False):
        got = compile_with(circuit, whole_instructions)
        assert_programs_equal(got, oracle, what)
        assert_annotation_tables_equal(got, oracle, what)
        assert program_digest(got) == program_digest(oracle), what
    if run_min == 1:
        assert not singles, singles[:3]


@pytest.mark.parametrize("distance, rounds", [(3, 1), (3, 2), (5, 2), (5, 6)])
@pytest.mark.parametrize("code", CODES)
def test_generated_codes(code, distance, rounds, monkeypatch, run_min):
    if code.startswith("color_code") and rounds < 2:
        pytest.skip("Stim generates color codes of 2 rounds or more")
    circuit = stim.Circuit.generated(code, distance=distance, rounds=rounds, **KNOBS)
    assert_runs_equal_one_by_one(circuit, monkeypatch, run_min, code)


@pytest.mark.parametrize("code", ["surface_code:rotated_memory_z", "color_code:memory_xyz"])
def test_flattened_and_noiseless_codes(code, monkeypatch, run_min):
    """Flattened: SHIFT_COORDS between runs at the top level, no loop."""
    circuit = stim.Circuit.generated(code, distance=3, rounds=4, **KNOBS)
    assert_runs_equal_one_by_one(circuit.flattened(), monkeypatch, run_min, code)
    assert_runs_equal_one_by_one(circuit.without_noise(), monkeypatch, run_min, code)


HAND_WRITTEN = {
    "every form": "M 0 1 2\nDETECTOR\nDETECTOR(1)\nDETECTOR(1, 2.5) rec[-1]\n"
                  "DETECTOR[a tag](3, 4, 5) rec[-1] rec[-3]\nOBSERVABLE_INCLUDE(3) rec[-2]\n"
                  "OBSERVABLE_INCLUDE[t](1) X0 !Z2 rec[-1] Y1\n"
                  "DETECTOR(0.30000000000000004, 1.0000001, -0.0, 1e-300, 123456789.125) rec[-2] rec[-2]\n"
                  "OBSERVABLE_INCLUDE(1) rec[-1] rec[-1] rec[-3]\nDETECTOR(-7) rec[-3] rec[-2] rec[-1]",
    "before any measurement": "DETECTOR(1, 2)\nOBSERVABLE_INCLUDE(2) X0\nOBSERVABLE_INCLUDE(0) Z1 Z1\nH 0\nM 0\n"
                              "DETECTOR rec[-1]",
    "tags with brackets and spaces": "M 0 1\nDETECTOR[a b\\C c](1) rec[-1]\nDETECTOR[](2) rec[-2]\n"
                                     "OBSERVABLE_INCLUDE[x y](0) rec[-1] X1\nDETECTOR[\\B](3) rec[-1]",
    "shift coords in and out of loops": "M 0 1\nSHIFT_COORDS(1, 2)\nDETECTOR(0, 0) rec[-1]\n"
                                        "DETECTOR(0, 0, 7) rec[-2]\nREPEAT 3 {\n  M 0 1\n"
                                        "  DETECTOR(1) rec[-1] rec[-3]\n  DETECTOR(1, 1, 1, 1) rec[-2]\n"
                                        "  SHIFT_COORDS(0, 0, 1)\n  DETECTOR rec[-1]\n  DETECTOR(5, 5) rec[-2]\n}\n"
                                        "SHIFT_COORDS(0.5)\nDETECTOR(1, 1, 1) rec[-1]\nOBSERVABLE_INCLUDE(0) rec[-1]",
    "nested repeats": "R 0 1 2\nM 0 1 2\nREPEAT 2 {\n  M 0\n  DETECTOR(1, 0) rec[-1] rec[-2]\n  SHIFT_COORDS(1)\n"
                      "  REPEAT 3 {\n    M 1 2\n    DETECTOR(0, 1) rec[-1] rec[-3]\n    DETECTOR(0, 2, 3) rec[-2]\n"
                      "    OBSERVABLE_INCLUDE(1) rec[-1] Z0\n    SHIFT_COORDS(0, 1)\n    REPEAT 1 {\n      M 0\n"
                      "      DETECTOR(9) rec[-1]\n    }\n  }\n  DETECTOR(2, 2) rec[-1]\n  TICK\n}\n"
                      "REPEAT 2 {\n}\nDETECTOR(3, 3) rec[-1] rec[-2]\nOBSERVABLE_INCLUDE(0) rec[-1]",
    "observables never included, cancelling": "M 0 1\nOBSERVABLE_INCLUDE(4) rec[-1]\nREPEAT 2 {\n  M 0\n"
                                              "  OBSERVABLE_INCLUDE(4) rec[-1] rec[-2]\n"
                                              "  OBSERVABLE_INCLUDE(2) rec[-2]\n}\nOBSERVABLE_INCLUDE(4) rec[-4]",
    "pauli terms among detectors": "H 0 1 2\nM 0\nDETECTOR(1) rec[-1]\nOBSERVABLE_INCLUDE(1) X0 Y1\n"
                                   "DETECTOR(2) rec[-1]\nOBSERVABLE_INCLUDE(0) Z2 rec[-1]\nOBSERVABLE_INCLUDE(1) !Z0\n"
                                   "CX 0 1\nOBSERVABLE_INCLUDE(0) X1\nREPEAT 2 {\n  OBSERVABLE_INCLUDE(2) Y2\n"
                                   "  DETECTOR\n}",
    "qubit coords between": "QUBIT_COORDS(0, 0) 0\nQUBIT_COORDS(1, 0) 1\nM 0 1\nDETECTOR(0) rec[-1]\n"
                            "QUBIT_COORDS(2, 0) 2\nDETECTOR(1) rec[-2]\nH 0 1\nQUBIT_COORDS(3, 3) 3\nM 0",
    "one annotation": "M 0\nDETECTOR rec[-1]",
    "non-ASCII tags, a bare last line": "M 0 1\nDETECTOR[\u00e9 \u00fc](1) rec[-1]\nH 0\nDETECTOR[x](2) rec[-2]\n"
                                        "OBSERVABLE_INCLUDE[\u00df](0) rec[-1]\nDETECTOR",
    "the last line in a run": "M 0 1\nDETECTOR(1) rec[-1]\nDETECTOR(2) rec[-2]\nDETECTOR",
}


@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
def test_hand_written(name, monkeypatch, run_min):
    assert_runs_equal_one_by_one(stim.Circuit(HAND_WRITTEN[name]), monkeypatch, run_min, name)


def _random_block(rng, depth, available, lines, indent):
    """Lines of a random annotated block (instructions of a random kind); returns its records."""
    floats = [0.0, -0.0, 1.0, 2.5, 0.1 + 0.2, 1.0000001, -3.0, 1e-7, 12345.678]
    recs = 0
    for _ in range(int(rng.integers(2, 9))):
        r = rng.random()
        here = available + recs
        if r < 0.25:
            qubits = rng.integers(0, 4, int(rng.integers(1, 4)))
            lines.append(indent + "M " + " ".join(map(str, qubits)))
            recs += len(qubits)
        elif r < 0.6:
            for _ in range(int(rng.integers(1, 14))):
                back = [f"rec[-{int(k)}]" for k in rng.integers(1, here + 1, int(rng.integers(0, 4)))] if here else []
                tag = "[t]" if rng.random() < 0.1 else ""
                if rng.random() < 0.8:
                    args = [repr(float(rng.choice(floats))) for _ in range(int(rng.integers(0, 5)))]
                    head = f"DETECTOR{tag}" + (f"({', '.join(args)})" if args else "")
                else:
                    paulis_ = [f"{'!' if rng.random() < 0.3 else ''}{'XYZ'[int(rng.integers(3))]}{int(rng.integers(4))}"
                               for _ in range(int(rng.integers(0, 3)) if rng.random() < 0.3 else 0)]
                    head = f"OBSERVABLE_INCLUDE{tag}({int(rng.integers(0, 4))})"
                    back += paulis_
                lines.append(indent + " ".join([head] + back))
        elif r < 0.7:
            args = [repr(float(rng.choice(floats))) for _ in range(int(rng.integers(1, 4)))]
            lines.append(indent + f"SHIFT_COORDS({', '.join(args)})")
        elif r < 0.82 and depth < 2:
            count = int(rng.integers(1, 4))
            lines.append(indent + f"REPEAT {count} {{")
            body = _random_block(rng, depth + 1, here, lines, indent + "  ")
            lines.append(indent + "}")
            recs += count * body
        else:
            lines.append(indent + str(rng.choice(["H 0 1", "TICK", "X_ERROR(0.125) 2", "CX 0 1 2 3",
                                                  "QUBIT_COORDS(1, 2) 3"])))
    return recs


def random_annotated_circuit(seed: int):
    rng = np.random.default_rng(seed)
    lines = ["R 0 1 2 3"]
    _random_block(rng, 0, 0, lines, "")
    return stim.Circuit("\n".join(lines))


@pytest.mark.parametrize("seed", range(40))
def test_random_annotated_circuits(seed, monkeypatch, run_min):
    circuit = random_annotated_circuit(seed)
    assert_runs_equal_one_by_one(circuit, monkeypatch, run_min, str(circuit))


# -- errors ----------------------------------------------------------------------------------------


def outcome(circuit, **flags):
    try:
        compile_with(circuit, **flags)
    except Exception as error:  # noqa: BLE001 - both paths must fail alike
        return type(error), str(error), getattr(error, "instruction_path", None)
    return None


TOO_FAR = [
    "M 0\nDETECTOR rec[-2]",
    "DETECTOR(1) rec[-1]",
    "M 0 1\n" + "DETECTOR(1) rec[-1]\n" * 9 + "DETECTOR[tag](2) rec[-1] rec[-3]\n" + "DETECTOR rec[-2]\n" * 3,
    "M 0\nOBSERVABLE_INCLUDE(0) X0 rec[-1]\nOBSERVABLE_INCLUDE(1) rec[-2]",
    "M 0\nREPEAT 3 {\n  M 0\n  DETECTOR rec[-1] rec[-2]\n  REPEAT 2 {\n    DETECTOR(1) rec[-1]\n"
    "    DETECTOR(2) rec[-4]\n  }\n}",
    "M 0 1\nREPEAT 2 {\n  " + "DETECTOR(3) rec[-2]\n  " * 10 + "OBSERVABLE_INCLUDE(0) rec[-3]\n}",
]


@pytest.mark.parametrize("text", TOO_FAR)
def test_a_record_before_the_first_measurement_fails_alike(text, run_min):
    circuit = stim.Circuit(text)
    want = outcome(circuit, whole_annotations=False)
    assert want is not None and want[0].__name__ == "MeasurementKeyError" and "looks back before" in want[1]
    for whole_instructions in (True, False):
        assert outcome(circuit, whole_instructions=whole_instructions) == want


# -- the text's tables -------------------------------------------------------------------------


def parse(text, indent=0):
    return stim_text._parse_annotations(stim_text._encoded(text), indent)


def test_parse_annotations_reads_records_paulis_and_indexes():
    got = parse("DETECTOR(1, 2) rec[-1] rec[-12]\nOBSERVABLE_INCLUDE(7) X3 rec[-2] !Y10 Z0\nDETECTOR\n"
                "DETECTOR rec[-16777215]\nOBSERVABLE_INCLUDE(123456789012345)")
    assert got.detector.tolist() == [True, False, True, True, False]
    assert got.has_args.tolist() == [True, True, False, False, True]
    assert got.index.tolist() == [0, 7, 0, 0, 123456789012345]
    assert got.rec_line.tolist() == [0, 0, 1, 3] and got.rec_back.tolist() == [1, 12, 2, 16777215]
    assert got.pauli_line.tolist() == [1, 1, 1] and got.pauli_qubit.tolist() == [3, 10, 0]
    assert got.pauli_letter.tolist() == [paulis.X, paulis.Y, paulis.Z]
    indented = parse("    DETECTOR(1) rec[-1]\n    OBSERVABLE_INCLUDE(0) Z1", indent=4)
    assert indented.rec_back.tolist() == [1] and indented.pauli_qubit.tolist() == [1]


@pytest.mark.parametrize("text", [
    "DETECTOR[tag](1) rec[-1]",  # tags: read from the run without them
    "DETECTOR[tag] rec[-1]",
    "DETECTOR X0",  # Stim refuses it; the one-by-one path names it
    "DETECTOR rec[-1]  rec[-2]",
    "DETECTOR rec[-1] ",
    "DETECTOR rec[-a]",
    "DETECTOR rec[-]",
    "DETECTOR sweep[0]",
    "OBSERVABLE_INCLUDE rec[-1]",  # no index
    "OBSERVABLE_INCLUDE(1e+20) rec[-1]",
    "OBSERVABLE_INCLUDE(1.5) rec[-1]",
    "OBSERVABLE_INCLUDE(0) W1",
    "OBSERVABLE_INCLUDE(0) X",
    "OBSERVABLE_INCLUDE(0) X0*Y1",
    "DETECTORS rec[-1]",
    "H 0",
    "",
    "DETECTOR(1 rec[-1]",
])
def test_parse_annotations_refuses_other_forms(text):
    assert parse(text) is None


def test_line_layout_finds_depths_and_kinds():
    text = str(stim.Circuit("QUBIT_COORDS(0) 0\nM 0\nREPEAT 2 {\n  DETECTOR rec[-1]\n  REPEAT 3 {\n    H 0\n  }\n"
                            "  OBSERVABLE_INCLUDE(0) rec[-1]\n}\nREPEAT 2 {\n}\nDETECTOR[x](1)"))
    layout = stim_text._line_layout(text)
    kinds = {stim_text._LINE_OTHER: "other", stim_text._LINE_ANNOTATION: "annotation",
             stim_text._LINE_COORDS: "coords", stim_text._LINE_CLOSE: "close"}
    got = [(line.strip(), int(d), kinds[int(k)]) for line, d, k in zip(layout.lines, layout.depth, layout.kind)]
    assert got == [("QUBIT_COORDS(0) 0", 0, "coords"), ("M 0", 0, "other"), ("REPEAT 2 {", 0, "other"),
                   ("DETECTOR rec[-1]", 1, "annotation"), ("REPEAT 3 {", 1, "other"), ("H 0", 2, "other"),
                   ("}", 1, "close"), ("OBSERVABLE_INCLUDE(0) rec[-1]", 1, "annotation"), ("}", 0, "close"),
                   ("REPEAT 2 {", 0, "other"), ("", -1, "other"), ("}", 0, "close"),
                   ("DETECTOR[x](1)", 0, "annotation")]
    for last in ("DETECTOR", "DETECTOR[\u00e9]"):  # the text's last line, with no newline after it
        layout = stim_text._line_layout(f"M 0\n{last}")
        assert layout.kind.tolist() == [stim_text._LINE_OTHER, stim_text._LINE_ANNOTATION]
        assert layout.ends.tolist() == [3, len(layout.raw)]
