"""The `quasarq` command line against Stim: its formats read back by `stim.read_shot_data_file`
to the in-memory sampler's bits, byte for byte Stim's own output where the output is determined
(deterministic circuits; m2d), streaming in batches, and one-line errors."""

import argparse
import os
import pathlib
import subprocess
import sys

import cirq
import numpy as np
import pytest

from . import pythonpath_with

stim = pytest.importorskip("stim")
stimcirq = pytest.importorskip("stimcirq")

from cirq_quasarq import QuasarqSimulator, cli, formats

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOISY = stim.Circuit.generated("surface_code:rotated_memory_x", distance=3, rounds=3,
                               after_clifford_depolarization=0.02, before_measure_flip_probability=0.02,
                               after_reset_flip_probability=0.02)
# Deterministic, with records of both values, detectors and two observables (one never included)
DETERMINISTIC = stim.Circuit("""
    X 0 2 5
    M 0 1 2 3 4 5 6 7 8 9
    REPEAT 3 {
        CX 0 1
        M 1
        DETECTOR(1, 0) rec[-1] rec[-11]
    }
    X 3
    M 3
    OBSERVABLE_INCLUDE(2) rec[-1]
    DETECTOR rec[-1]
""")
# Deterministic with events: an observable and a detector fire in every shot (dets orders them as Stim)
FIRING = stim.Circuit("X_ERROR(1) 0 1\nM 0 1\nOBSERVABLE_INCLUDE(1) rec[-1]\nDETECTOR rec[-1]\nDETECTOR rec[-2]")
# Deterministic too: MPAD, heralds that always or never fire, Pauli observable targets on eigenstates
DETERMINISTIC_SCRATCH = stim.Circuit("""
    X 1
    MPAD 1 0 1
    HERALDED_PAULI_CHANNEL_1(0, 0, 1, 0) 0 1
    HERALDED_ERASE(0) 2
    M 0 1 2
    MPP X3*X3
    DETECTOR rec[-2] rec[-5]
    DETECTOR rec[-3] rec[-6]
    DETECTOR rec[-4] rec[-9]
    OBSERVABLE_INCLUDE(0) rec[-9] Z0
    OBSERVABLE_INCLUDE(1) Z2 Z1
""")


def _run(args, *, stdin=None, env_extra=None):
    env = dict(os.environ, PYTHONPATH=pythonpath_with(ROOT))
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "cirq_quasarq.cli", *args], input=stdin, capture_output=True,
                          env=env, timeout=300)


def _stim(args):
    stim.main(command_line_args=list(args))


@pytest.fixture
def small_batches(monkeypatch):
    """Batches of 64-128 shots, so every test crosses batch boundaries."""
    monkeypatch.setattr(cli, "BATCH_BITS", 1 << 14)


# ---------------------------------------------------------------------------------------------
# Every format: our bytes, read by Stim, are the in-memory sampler's bits for the same seed


@pytest.mark.parametrize("fmt", formats.FORMATS)
def test_sample_reads_back_as_the_simulators_records(tmp_path, small_batches, fmt):
    path, out = tmp_path / "c.stim", tmp_path / f"out.{fmt}"
    path.write_text(str(NOISY))
    shots = 640 if fmt == "ptb64" else 333
    assert cli.main(["sample", "--in", str(path), "--shots", str(shots), "--seed", "11", "--out", str(out),
                     "--out_format", fmt, "--device", "cpu"]) == 0
    ours = stim.read_shot_data_file(path=str(out), format=fmt, num_measurements=NOISY.num_measurements)
    expected = QuasarqSimulator(seed=11, device="cpu").sample_measurements(NOISY, shots)
    assert ours.shape == expected.shape and np.array_equal(ours, expected)


@pytest.mark.parametrize("fmt", formats.FORMATS)
def test_detect_reads_back_as_the_simulators_detection_events(tmp_path, small_batches, fmt):
    path, out, obs = tmp_path / "c.stim", tmp_path / f"d.{fmt}", tmp_path / f"o.{fmt}"
    path.write_text(str(NOISY))
    shots = 640 if fmt == "ptb64" else 333
    expected_d, expected_o = QuasarqSimulator(seed=5, device="cpu").sample_detectors(
        NOISY, shots, separate_observables=True)
    d, o = NOISY.num_detectors, NOISY.num_observables
    if fmt != "dets":  # Stim's detect writes the observables into dets itself (below)
        assert cli.main(["detect", "--in", str(path), "--shots", str(shots), "--seed", "5", "--out", str(out),
                         "--out_format", fmt, "--obs_out", str(obs), "--obs_out_format", fmt,
                         "--device", "cpu"]) == 0
        assert np.array_equal(stim.read_shot_data_file(path=str(out), format=fmt, num_detectors=d), expected_d)
        assert np.array_equal(stim.read_shot_data_file(path=str(obs), format=fmt, num_observables=o), expected_o)
    assert cli.main(["detect", "--in", str(path), "--shots", str(shots), "--seed", "5", "--out", str(out),
                     "--out_format", fmt, "--append_observables", "--device", "cpu"]) == 0
    both = stim.read_shot_data_file(path=str(out), format=fmt, num_detectors=d, num_observables=o)
    assert np.array_equal(both, np.concatenate([expected_d, expected_o], axis=1))


def test_the_earlier_spelling_is_the_same_command(tmp_path, small_batches):
    path, a, b = tmp_path / "c.stim", tmp_path / "a.b8", tmp_path / "b.b8"
    path.write_text(str(NOISY))
    assert cli.main([
        "sample", str(path), "--shots", "200", "--seed", "2", "--format", "b8", "--detectors",
        "--append-observables", "--out", str(a), "--quiet", "--device", "cpu"]) == 0
    assert cli.main(["detect", "--in", str(path), "--shots", "200", "--seed", "2", "--out_format", "b8",
                     "--append_observables", "--out", str(b), "--device", "cpu"]) == 0
    assert a.read_bytes() == b.read_bytes()


def test_batches_do_not_change_the_bits(tmp_path, monkeypatch):
    path = tmp_path / "c.stim"
    path.write_text(str(NOISY))
    outputs = []
    for batch_bits in (1 << 12, 1 << 26):
        monkeypatch.setattr(cli, "BATCH_BITS", batch_bits)
        out = tmp_path / f"{batch_bits}.01"
        assert cli.main(["sample", "--in", str(path), "--shots", "1000", "--seed", "9", "--out", str(out),
                         "--device", "cpu"]) == 0
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]


# ---------------------------------------------------------------------------------------------
# Where the output is determined, byte for byte Stim's


@pytest.mark.parametrize("fmt", formats.FORMATS)
@pytest.mark.parametrize("circuit", [DETERMINISTIC, FIRING, DETERMINISTIC_SCRATCH], ids=["plain", "firing", "scratch"])
def test_deterministic_circuits_are_byte_identical_to_stims(tmp_path, fmt, circuit):
    path = tmp_path / "c.stim"
    path.write_text(str(circuit))
    shots = "128" if fmt == "ptb64" else "70"
    runs = [["sample", "--shots", shots, "--out_format", fmt], ["detect", "--shots", shots, "--out_format", fmt]]
    if fmt != "dets":
        runs.append(["detect", "--shots", shots, "--out_format", fmt, "--append_observables"])
        runs.append(["detect", "--shots", shots, "--out_format", fmt, "--obs_out", "OBS", "--obs_out_format", fmt])
    for run in runs:
        ours = [a.replace("OBS", str(tmp_path / "ours.obs")) for a in run]
        theirs = [a.replace("OBS", str(tmp_path / "theirs.obs")) for a in run]
        assert cli.main([*ours, "--in", str(path), "--out", str(tmp_path / "ours"), "--device", "cpu",
                         "--quiet"]) == 0
        _stim([*theirs, "--in", str(path), "--out", str(tmp_path / "theirs")])
        assert (tmp_path / "ours").read_bytes() == (tmp_path / "theirs").read_bytes(), run
        if "--obs_out" in run:
            assert (tmp_path / "ours.obs").read_bytes() == (tmp_path / "theirs.obs").read_bytes(), run


@pytest.mark.parametrize("in_format", formats.FORMATS)
@pytest.mark.parametrize("out_format", ["01", "b8", "r8", "ptb64", "hits", "dets"])
def test_m2d_is_byte_identical_to_stims(tmp_path, monkeypatch, in_format, out_format):
    monkeypatch.setattr(cli, "BATCH_BITS", 1 << 14)  # the reader's batches too
    circuit = NOISY
    path, data = tmp_path / "c.stim", tmp_path / "m.data"
    path.write_text(str(circuit))
    records = QuasarqSimulator(seed=4, device="cpu").sample_measurements(circuit, 320)
    stim.write_shot_data_file(data=records, path=str(data), format=in_format,
                              num_measurements=circuit.num_measurements)
    for extra in ([], ["--append_observables"], ["--obs_out", "OBS", "--obs_out_format", out_format]):
        common = ["m2d", "--circuit", str(path), "--in", str(data), "--in_format", in_format,
                  "--out_format", out_format]
        ours = [a.replace("OBS", str(tmp_path / "ours.obs")) for a in extra]
        theirs = [a.replace("OBS", str(tmp_path / "theirs.obs")) for a in extra]
        assert cli.main([*common, *ours, "--out", str(tmp_path / "ours"), "--quiet"]) == 0
        if "ptb64" not in (in_format, out_format):
            _stim([*common, *theirs, "--out", str(tmp_path / "theirs")])
        else:  # Stim's m2d neither reads nor writes ptb64: its converter and writer are the oracle
            _stim_m2d(circuit, records, out_format, extra, tmp_path / "theirs", tmp_path / "theirs.obs")
        assert (tmp_path / "ours").read_bytes() == (tmp_path / "theirs").read_bytes(), extra
        if extra and extra[0] == "--obs_out":
            assert (tmp_path / "ours.obs").read_bytes() == (tmp_path / "theirs.obs").read_bytes()


def _stim_m2d(circuit, records, fmt, extra, out, obs_out):
    d, o = circuit.compile_m2d_converter().convert(measurements=records, separate_observables=True)
    counts = dict(num_detectors=circuit.num_detectors)
    if "--append_observables" in extra:
        d, counts = np.concatenate([d, o], axis=1), dict(counts, num_observables=circuit.num_observables)
    stim.write_shot_data_file(data=d, path=str(out), format=fmt, **counts)
    if "--obs_out" in extra:
        stim.write_shot_data_file(data=o, path=str(obs_out), format=fmt, num_observables=circuit.num_observables)


def test_m2d_of_heralds_and_pauli_targets_is_byte_identical_to_stims(tmp_path):
    """Heralds are records like any other; Pauli observable targets add nothing to m2d (as Stim)."""
    circuit = stim.Circuit("H 0\nREPEAT 3 {\n HERALDED_ERASE(0.3) 0 1\n MPAD(0.2) 1\n CX 0 1\n M 1\n"
                           " DETECTOR rec[-1] rec[-2]\n DETECTOR rec[-3]\n OBSERVABLE_INCLUDE(0) rec[-4] X0\n}\n"
                           "OBSERVABLE_INCLUDE(1) Z1")
    path, data = tmp_path / "c.stim", tmp_path / "m.01"
    path.write_text(str(circuit))
    records = QuasarqSimulator(seed=4, device="cpu").sample_measurements(circuit, 300)
    stim.write_shot_data_file(data=records, path=str(data), format="01", num_measurements=circuit.num_measurements)
    common = ["m2d", "--circuit", str(path), "--in", str(data), "--in_format", "01", "--out_format", "01",
              "--append_observables"]
    assert cli.main([*common, "--out", str(tmp_path / "ours"), "--quiet"]) == 0
    _stim([*common, "--out", str(tmp_path / "theirs")])
    assert (tmp_path / "ours").read_bytes() == (tmp_path / "theirs").read_bytes()


def test_m2d_of_our_samples_gives_our_detection_events(tmp_path):
    path, records, dets = tmp_path / "c.stim", tmp_path / "r.b8", tmp_path / "d.b8"
    path.write_text(str(NOISY))
    assert cli.main(["sample", str(path), "--shots", "500", "--seed", "3", "--out_format", "b8", "--out",
                     str(records), "--device", "cpu"]) == 0
    assert cli.main(["m2d", "--circuit", str(path), "--in", str(records), "--in_format", "b8", "--out_format",
                     "01", "--append_observables", "--out", str(dets)]) == 0
    ours = stim.read_shot_data_file(path=str(dets), format="01", num_detectors=NOISY.num_detectors,
                                    num_observables=NOISY.num_observables)
    measured = stim.read_shot_data_file(path=str(records), format="b8", num_measurements=NOISY.num_measurements)
    d, o = NOISY.compile_m2d_converter().convert(measurements=measured, separate_observables=True)
    assert np.array_equal(ours, np.concatenate([d, o], axis=1))


# ---------------------------------------------------------------------------------------------
# npz: bit-packed arrays, written as they are sampled


def test_npz_holds_bit_packed_records_or_detectors_and_observables(tmp_path, small_batches):
    path = tmp_path / "c.stim"
    path.write_text(str(NOISY))
    rec, det = tmp_path / "r.npz", tmp_path / "d.npz"
    assert cli.main(["sample", "--in", str(path), "--shots", "300", "--seed", "8", "--out_format", "npz",
                     "--out", str(rec), "--device", "cpu"]) == 0
    assert cli.main(["detect", "--in", str(path), "--shots", "300", "--seed", "8", "--out_format", "npz",
                     "--out", str(det), "--device", "cpu"]) == 0
    with np.load(rec) as z:
        assert z["records"].dtype == np.uint8 and int(z["num_records"]) == NOISY.num_measurements
        assert np.array_equal(z["records"], QuasarqSimulator(seed=8, device="cpu").sample_measurements(
            NOISY, 300, bit_packed=True))
    expected = QuasarqSimulator(seed=8, device="cpu").sample_detectors(NOISY, 300, separate_observables=True,
                                                                       bit_packed=True)
    with np.load(det) as z:
        assert np.array_equal(z["detectors"], expected[0]) and np.array_equal(z["observables"], expected[1])
        assert (int(z["num_detectors"]), int(z["num_observables"])) == (NOISY.num_detectors, NOISY.num_observables)


# ---------------------------------------------------------------------------------------------
# Inputs: stdin, Cirq JSON with stimcirq's objects, QASM


def test_circuit_from_stdin(tmp_path):
    proc = _run(["sample", "--shots", "3", "--out_format", "01"], stdin=b"X 1\nM 0 1\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"01\n01\n01\n"
    proc = _run(["detect", "-", "--append_observables"], stdin=str(DETERMINISTIC).encode())
    assert proc.returncode == 0 and proc.stdout == b"0" * (DETERMINISTIC.num_detectors + 3) + b"\n", proc.stderr


def test_cirq_json_with_stimcirq_objects(tmp_path):
    circuit = stimcirq.stim_circuit_to_cirq_circuit(DETERMINISTIC)
    kinds = {type(op.gate if op.gate is not None else op).__name__ for op in circuit.all_operations()}
    assert "DetAnnotation" in kinds and "CumulativeObservableAnnotation" in kinds
    circuit = circuit + cirq.Circuit(stimcirq.MeasureAndOrResetGate(
        measure=True, reset=True, basis="Z", invert_measure=False, key="mr").on(cirq.LineQubit(0)))
    path, out = tmp_path / "c.json", tmp_path / "o.01"
    path.write_text(cirq.to_json(circuit))
    assert cli.main(["detect", str(path), "--shots", "4", "--append_observables", "--out", str(out),
                     "--device", "cpu"]) == 0
    assert out.read_text() == ("0" * (DETERMINISTIC.num_detectors + 3) + "\n") * 4


def test_qasm_and_simulate(tmp_path, capsys):
    pytest.importorskip("ply")  # Cirq's OpenQASM importer: the qasm extra
    qasm = tmp_path / "bell.qasm"
    qasm.write_text('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[2];\ncreg c[2];\nh q[0];\ncx q[0],q[1];\n'
                    "measure q -> c;\n")
    out = tmp_path / "bell.01"
    assert cli.main(["sample", str(qasm), "--shots", "200", "--out", str(out), "--device", "cpu"]) == 0
    rows = out.read_text().splitlines()
    assert set(rows) <= {"00", "11"} and len(set(rows)) == 2
    js = tmp_path / "c.json"
    a = cirq.LineQubit(0)
    js.write_text(cirq.to_json(cirq.Circuit(cirq.X(a), cirq.measure(a, key="m"))))
    assert cli.main(["simulate", str(js), "--device", "cpu"]) == 0
    assert "m=1" in capsys.readouterr().out


def test_the_stim_path_imports_neither_cirq_nor_sympy(tmp_path):
    path = tmp_path / "c.stim"
    path.write_text(str(NOISY))
    program = (
        "import sys\n"
        "from cirq_quasarq.cli import main\n"
        f"p = {str(path)!r}\n"
        "assert main(['sample', '--in', p, '--shots', '5', '--out', p + '.01']) == 0\n"
        "assert main(['detect', '--in', p, '--shots', '5', '--out', p + '.d', '--obs_out', p + '.o']) == 0\n"
        "assert main(['m2d', '--circuit', p, '--in', p + '.01', '--out', p + '.m']) == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('cirq', 'sympy')))\n")
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=pythonpath_with(ROOT)), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# Errors: one line, exit code 2, before any work; a closed pipe is no error


def test_a_closed_pipe_ends_quietly_with_exit_code_0(tmp_path):
    path = tmp_path / "c.stim"
    path.write_text(str(NOISY))
    env = dict(os.environ, PYTHONPATH=pythonpath_with(ROOT))
    proc = subprocess.run(f"{sys.executable} -m cirq_quasarq.cli sample --in {path} --shots 100000000 "
                          f"--device cpu | head -c 100 > /dev/null; echo ${{PIPESTATUS[0]}}",
                          shell=True, executable="/bin/bash", capture_output=True, text=True, env=env, timeout=300)
    assert proc.stdout.strip() == "0" and proc.stderr == "", proc.stderr


BAD = [
    (["sample", "--in", "{c}", "--out", "{tmp}/missing/x.01"], "does not exist"),
    (["sample", "--in", "{c}", "--seed", "-1"], "non-negative"),
    (["sample", "--in", "{c}", "--shots", "-5"], "between 0 and"),
    (["sample", "--in", "{c}", "--append_observables"], "applies to detection events"),
    (["sample", "--in", "{c}", "--obs_out", "{tmp}/o"], "applies to detection events"),
    (["detect", "--in", "{c}", "--obs_out", "{tmp}/o", "--append_observables"], "exclude each other"),
    (["detect", "--in", "{c}", "--obs_out", "{tmp}/o", "--out_format", "dets"], "already lists"),
    (["detect", "--in", "{c}", "--out_format", "npz", "--append_observables"], "npz"),
    (["sample", "--in", "{c}", "--shots", "100", "--out_format", "ptb64"], "multiple of 64"),
    (["sample", "{c}", "--in", "{c}"], "give the circuit once"),
    (["sample", "--in", "{tmp}/none.stim"], "no such file"),
    (["sample", "--in", "{tmp}/c.txt"], "unknown circuit format"),
    (["detect", "--in", "{plain}"], "no detectors or observables"),
    (["m2d", "--circuit", "{c}", "--in", "{tmp}/none.01"], "no such file"),
    (["m2d", "--circuit", "{c}", "--in", "{bad01}"], "01 data"),
    (["m2d", "--circuit", "{c}", "--out_format", "npz", "--in", "{bad01}"], "invalid choice: 'npz'"),
    (["sample", "--in", "{c}", "--bogus"], "unrecognized arguments"),
    (["sample", "{tmp}/t.qasm"], "Clifford"),
    (["sample", "{tmp}/bad.json"], "not a Cirq JSON circuit"),
]


@pytest.mark.parametrize("args, expected", BAD)
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, args, expected):
    if any(a.endswith(".qasm") for a in args):
        pytest.importorskip("ply")  # else the error is the missing qasm extra, not the T gate
    (tmp_path / "c.stim").write_text(str(NOISY))
    (tmp_path / "c.txt").write_text("H 0\n")
    (tmp_path / "plain.stim").write_text("H 0\nM 0\n")
    (tmp_path / "bad.01").write_text("0101\n")
    (tmp_path / "t.qasm").write_text('OPENQASM 2.0;\ninclude "qelib1.inc";\nqreg q[1];\nt q[0];\n')
    (tmp_path / "bad.json").write_text("{not json")
    fill = dict(c=tmp_path / "c.stim", tmp=tmp_path, plain=tmp_path / "plain.stim", bad01=tmp_path / "bad.01")
    proc = _run([a.format(**fill) for a in args] + ["--device", "cpu"] * (args[0] != "m2d"))
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and expected in err, err
    assert proc.stdout == b""


def test_gpu_without_a_gpu_is_one_line(tmp_path):
    from cirq_quasarq.engines import cuda_available

    if cuda_available():
        pytest.skip("a GPU is usable here")
    (tmp_path / "c.stim").write_text("M 0\n")
    proc = _run(["sample", "--in", str(tmp_path / "c.stim"), "--device", "gpu"])
    assert proc.returncode == 2 and len(proc.stderr.decode().strip().splitlines()) == 1
    assert b"GPU" in proc.stderr and b"Traceback" not in proc.stderr


def test_observables_left_out_are_named_on_stderr(tmp_path):
    (tmp_path / "c.stim").write_text(str(NOISY))
    proc = _run(["detect", "--in", str(tmp_path / "c.stim"), "--device", "cpu"])
    assert proc.returncode == 0 and b"observable(s) are not written" in proc.stderr
    proc = _run(["detect", "--in", str(tmp_path / "c.stim"), "--device", "cpu", "--quiet"])
    assert proc.returncode == 0 and proc.stderr == b""


# Compile errors name the line (Stim fuses lines of one gate: such an instruction names its lines)
PREFIX = "\n".join(["H 0"] * 45 + ["CX 0 1"] * 45)


@pytest.mark.parametrize("text, line", [
    ("ELSE_CORRELATED_ERROR(0.25) X1\nM 0\n", "line 1:"),
    ("R 0 1 2\nX_ERROR(0.1) 0\nE(0.2) X0\nTICK\nELSE_CORRELATED_ERROR(0.25) X1\nM 0 1 2\n", "line 5:"),
    (PREFIX + "\nMPP X0*Z0\n", "line 91:"),  # an anti-Hermitian product (Stim's samplers refuse it too)
    ("H 0\n# a comment\n\nREPEAT 3 {\n  H 1\n  TICK\n  REPEAT 2 {\n    M 0\n    MPP X0*Z0\n  }\n}\nM 1\n",
     "line 9:"),
    ("M 0\nREPEAT 2 {\n  H 0\n}\nREPEAT 1 {\n  X 0\n  MPP X0*Z0\n}\n", "line 7:"),
    ("MPP X0*Z0\nMPP X1*Z1\nM 0\n", "lines 1-2:"),
    ("H 0\nT 0\nM 0\n", "line 2:"),
    ("H 0\nREPEAT 3 {\n  H 0\n", "line 2:"),
])
def test_compile_errors_name_the_line(tmp_path, text, line):
    path = tmp_path / "bad.stim"
    path.write_text(text)
    proc = _run(["sample", "--in", str(path), "--device", "cpu"])
    err = proc.stderr.decode()
    assert proc.returncode == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"quasarq: {path}: {line}"), err


def test_every_option_has_help_in_sentences():
    def check(p: argparse.ArgumentParser):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    check(sub)
                continue
            assert action.help and action.help[0].isupper() and action.help.rstrip().endswith("."), \
                (p.prog, action.option_strings, action.help)

    check(cli.parser())


@pytest.mark.gpu
@pytest.mark.parametrize("command,extra", [("sample", []), ("detect", ["--obs_out", "{obs}"])])
def test_gpu_and_cpu_write_the_same_bytes_over_several_batches(tmp_path, command, extra):
    """The command's batches on the CUDA engine: the same bytes as the NumPy engine's for a seed,
    over more shots than one batch holds."""
    from cirq_quasarq.engines import cuda_available

    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    (tmp_path / "c.stim").write_text(str(NOISY))
    outs = {}
    for device in ("cpu", "gpu"):
        obs = tmp_path / f"obs-{device}.b8"
        out = tmp_path / f"out-{device}.b8"
        proc = _run([command, "--in", str(tmp_path / "c.stim"), "--out", str(out), "--out_format", "b8",
                     "--shots", str((1 << 18) + 4133), "--seed", "11", "--device", device, "--quiet"]
                    + [a.format(obs=obs) for a in extra])
        assert proc.returncode == 0, proc.stderr.decode()
        outs[device] = out.read_bytes() + (obs.read_bytes() if extra else b"")
    assert outs["cpu"] == outs["gpu"]
