"""The QEC workflow: detection events and observable flips against Stim, stim.Circuit inputs, the
sinter plug-in against stim + pymatching (the command line: tests/test_cli.py)."""

import os
import pathlib
import pickle
import subprocess
import sys

import numpy as np
import pytest

from . import pythonpath_with

import cirq_quasarq
from cirq_quasarq import QuasarqSimulator, cli

stim = pytest.importorskip("stim")
stimcirq = pytest.importorskip("stimcirq")

NOISE = dict(after_clifford_depolarization=0.01, before_round_data_depolarization=0.01,
             before_measure_flip_probability=0.01, after_reset_flip_probability=0.01)



def code(kind: str, d: int = 3, rounds: int = 3, p: float = 0.01) -> stim.Circuit:
    name = {"surface": "surface_code:rotated_memory_z", "surface_x": "surface_code:rotated_memory_x",
            "repetition": "repetition_code:memory", "color": "color_code:memory_xyz"}[kind]
    return stim.Circuit.generated(name, distance=d, rounds=rounds, **{k: p for k in NOISE})


def _rates_agree(ours: np.ndarray, theirs: np.ndarray, what: str) -> None:
    """Per column rates within 6σ of the two binomial estimates."""
    p_ours, p_theirs = ours.mean(axis=0), theirs.mean(axis=0)
    pooled = (p_ours + p_theirs) / 2
    sigma = np.sqrt(pooled * (1 - pooled) * (1 / len(ours) + 1 / len(theirs)))
    bad = np.flatnonzero(np.abs(p_ours - p_theirs) > 6 * sigma + 1e-9)
    assert len(bad) == 0, (what, bad[:5], p_ours[bad[:5]], p_theirs[bad[:5]])


@pytest.mark.parametrize("kind", ["surface", "surface_x", "repetition", "color"])
@pytest.mark.parametrize("source", ["stim", "cirq"])
def test_detector_and_observable_rates_match_stim(device, kind, source):
    circuit = code(kind)
    given = circuit if source == "stim" else stimcirq.stim_circuit_to_cirq_circuit(circuit)
    shots = 40000
    dets, obs = QuasarqSimulator(seed=1, device=device).sample_detectors(given, shots, separate_observables=True)
    ref_dets, ref_obs = circuit.compile_detector_sampler(seed=2).sample(shots, separate_observables=True)
    assert dets.shape == ref_dets.shape and obs.shape == ref_obs.shape and dets.dtype == ref_dets.dtype
    _rates_agree(dets, ref_dets, f"{kind} detectors from {source}")
    _rates_agree(obs, ref_obs, f"{kind} observables from {source}")


def test_shapes_and_bit_packing_are_stims():
    circuit = code("surface", 3, 2)
    sim = QuasarqSimulator(seed=3, device="cpu")
    ref = circuit.compile_detector_sampler()
    for kwargs in ({}, {"append_observables": True}, {"bit_packed": True},
                   {"append_observables": True, "bit_packed": True}):
        ours, theirs = sim.sample_detectors(circuit, 100, **kwargs), ref.sample(100, **kwargs)
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, kwargs
    plain = QuasarqSimulator(seed=4, device="cpu").sample_detectors(circuit, 100, append_observables=True)
    packed = QuasarqSimulator(seed=4, device="cpu").sample_detectors(circuit, 100, append_observables=True,
                                                                     bit_packed=True)
    assert np.array_equal(np.unpackbits(packed, axis=1, bitorder="little")[:, :plain.shape[1]], plain)
    with pytest.raises(ValueError):
        sim.sample_detectors(circuit, 10, separate_observables=True, append_observables=True)


def test_detector_coordinates_are_stims():
    circuit = code("surface", 5, 3)
    ours = QuasarqSimulator(device="cpu").detector_coordinates(circuit)
    assert ours == {k: list(v) for k, v in circuit.get_detector_coordinates().items()}


def test_detector_bits_do_not_depend_on_the_engine_or_the_reference():
    circuit = code("surface", 3, 3)
    a = QuasarqSimulator(seed=8, device="cpu").sample_detectors(circuit, 3000, append_observables=True)
    b = QuasarqSimulator(seed=8, device="cpu").sample_detectors(stimcirq.stim_circuit_to_cirq_circuit(circuit),
                                                                3000, append_observables=True)
    assert np.array_equal(a, b)  # a stim.Circuit and its Cirq conversion compile to the same Program
    if cirq_quasarq.engines.cuda_available():
        g = QuasarqSimulator(seed=8, device="gpu").sample_detectors(circuit, 3000, append_observables=True)
        assert np.array_equal(a, g)


def test_noiseless_detectors_never_fire(device):
    circuit = code("color", 3, 2, p=0.0)
    dets = QuasarqSimulator(seed=1, device=device).sample_detectors(circuit, 2000, append_observables=True)
    assert not dets.any()


def test_measurement_records_in_stims_layout(device):
    circuit = stim.Circuit("X 0 2\nM 0 1 2\nH 3\nM 3\nMR 0")
    ours = QuasarqSimulator(seed=1, device=device).sample_measurements(circuit, 500)
    assert ours.shape == (500, 5) and ours.dtype == bool
    assert np.all(ours[:, [0, 1, 2, 4]] == [True, False, True, True])
    assert 0.4 < ours[:, 3].mean() < 0.6
    packed = QuasarqSimulator(seed=1, device=device).sample_measurements(circuit, 500, bit_packed=True)
    assert packed.shape == (500, 1) and np.array_equal(np.unpackbits(packed, axis=1, bitorder="little")[:, :5], ours)


def test_run_and_simulate_take_stim_circuits():
    circuit = stim.Circuit("H 0\nCX 0 1\nM 0 1")
    result = QuasarqSimulator(seed=2, device="cpu").run(circuit, repetitions=200)
    assert np.array_equal(result.measurements["0"], result.measurements["1"])
    trial = QuasarqSimulator(seed=2, device="cpu").simulate(stim.Circuit("H 0\nCX 0 1"))
    assert sorted(str(s) for s in trial.final_state.stabilizers()) == ["+XX", "+ZZ"]


# ---------------------------------------------------------------------------------------------
# sinter


def _sinter():
    """sinter, pymatching (the plug-in's default decoder) and the plug-in: the `qec` extra; the
    test skips without it."""
    sinter = pytest.importorskip("sinter")
    pytest.importorskip("pymatching")
    from cirq_quasarq.sinter import QuasarqSampler
    return sinter, QuasarqSampler


def test_sinter_plug_in_matches_stim_and_pymatching():
    sinter, QuasarqSampler = _sinter()
    tasks = [sinter.Task(circuit=code("surface", d, d, p=0.008), json_metadata={"d": d}) for d in (3, 5)]
    common = dict(num_workers=2, tasks=tasks, max_shots=30000, max_errors=3000)
    ours = sinter.collect(decoders=["quasarq"], custom_decoders={"quasarq": QuasarqSampler(device="cpu", seed=1)},
                          **common)
    theirs = sinter.collect(decoders=["pymatching"], **common)
    for d in (3, 5):
        a = next(s for s in ours if s.json_metadata["d"] == d)
        b = next(s for s in theirs if s.json_metadata["d"] == d)
        fa = sinter.fit_binomial(num_shots=a.shots, num_hits=a.errors, max_likelihood_factor=1e3)
        fb = sinter.fit_binomial(num_shots=b.shots, num_hits=b.errors, max_likelihood_factor=1e3)
        assert fa.low <= fb.high and fb.low <= fa.high, (d, a, b)  # overlapping 99.9% intervals


def test_sinter_takes_exactly_max_shots_and_a_seed_reproduces_the_collection():
    sinter, QuasarqSampler = _sinter()
    tasks = [sinter.Task(circuit=code("surface", 3, 3, p=0.01), json_metadata={"c": "surface"}),
             sinter.Task(circuit=code("repetition", 5, 3, p=0.03), json_metadata={"c": "repetition"})]

    def collect(seed):
        sampler = QuasarqSampler(device="cpu", seed=seed, count_detection_events=True)
        stats = sinter.collect(num_workers=2, tasks=tasks, decoders=["q"], custom_decoders={"q": sampler},
                               max_shots=3001)
        return {s.json_metadata["c"]: (s.shots, s.errors, s.custom_counts["detection_events"]) for s in stats}

    first, again, other = collect(4), collect(4), collect(5)
    assert {shots for shots, _, _ in first.values()} == {3001}  # not rounded up to a batch
    assert first == again  # whatever the workers and batches did
    assert first != other


def test_sinter_workers_take_consecutive_shots_of_one_stream():
    sinter, QuasarqSampler = _sinter()
    task = sinter.Task(circuit=code("surface", 3, 3, p=0.02), json_metadata={})
    sampler = QuasarqSampler(device="cpu", seed=7, count_detection_events=True)
    a, b = sampler.compiled_sampler_for_task(task), sampler.compiled_sampler_for_task(task)  # two workers
    batches = [a.sample(100), b.sample(157), a.sample(300)]  # shots [0, 100), [100, 257), [257, 557)
    one = QuasarqSampler(device="cpu", seed=7, count_detection_events=True).compiled_sampler_for_task(task).sample(557)
    assert sum(s.shots for s in batches) == one.shots == 557
    assert sum(s.errors for s in batches) == one.errors
    assert sum(s.custom_counts["detection_events"] for s in batches) == one.custom_counts["detection_events"]
    dets = a.shots.sample(a.key, 0, 557)[0]
    assert one.custom_counts["detection_events"] == int(np.bitwise_count(dets).sum())
    # a copy made other than by sinter starting a worker samples a stream of its own
    assert pickle.loads(pickle.dumps(sampler)).seed != sampler.seed


def test_sinter_cpu_batches_grow_past_sinters_cap_without_changing_the_shots(monkeypatch):
    """On the CPU the sampler sizes its own batches: from 1,024 shots, four times more after a short
    call, up to 16,384, never more than sinter asks, half after a long call; the shots are those
    of one stream whatever the batches (the detection events of all of them equal one draw's)."""
    sinter, QuasarqSampler = _sinter()
    from cirq_quasarq import sinter as plug

    task = sinter.Task(circuit=code("surface", 3, 3, p=0.02), json_metadata={})
    monkeypatch.setattr(plug, "CPU_BATCH_SECONDS", 1e9)  # every call short
    a = QuasarqSampler(device="cpu", seed=3, count_detection_events=True).compiled_sampler_for_task(task)
    assert a.handles_throttling()
    batches = [a.sample(10**6) for _ in range(4)] + [a.sample(5000), a.sample(10**6)]
    assert [s.shots for s in batches] == [1024, 4096, 16384, 16384, 5000, 16384]
    dets = a.shots.sample(a.key, 0, sum(s.shots for s in batches))[0]
    assert sum(s.custom_counts["detection_events"] for s in batches) == int(np.bitwise_count(dets).sum())
    monkeypatch.setattr(plug, "CPU_BATCH_SECONDS", 0.0)  # every call long
    b = QuasarqSampler(device="cpu", seed=3).compiled_sampler_for_task(task)
    assert [b.sample(10**6).shots for _ in range(3)] == [1024, 512, 256]


def test_sinter_counts_match_sinters_default_sampler():
    sinter, QuasarqSampler = _sinter()
    circuit = several_observables(p=0.02)
    task = sinter.Task(circuit=circuit, json_metadata={})
    common = dict(num_workers=2, tasks=[task], max_shots=20000)
    ours = sinter.collect(decoders=["q"], custom_decoders={"q": QuasarqSampler(
        device="cpu", seed=3, count_detection_events=True, count_observable_error_combos=True)}, **common)[0]
    theirs = sinter.collect(decoders=["pymatching"], count_detection_events=True, count_observable_error_combos=True,
                            **common)[0]
    assert ours.shots == theirs.shots == 20000
    checked = ours.custom_counts["detectors_checked"]
    assert checked == theirs.custom_counts["detectors_checked"] == circuit.num_detectors * 20000
    a, b = ours.custom_counts["detection_events"], theirs.custom_counts["detection_events"]
    p = (a + b) / (2 * checked)
    assert abs(a - b) < 8 * np.sqrt(2 * checked * p * (1 - p)), (a, b)  # detection events pair up: 8 sigma
    keys = {k for k in (*ours.custom_counts, *theirs.custom_counts) if k.startswith("obs_mistake_mask=")}
    assert keys and all(len(k) == len("obs_mistake_mask=") + 3 for k in keys)
    for k in keys:
        fa = sinter.fit_binomial(num_shots=ours.shots, num_hits=ours.custom_counts[k], max_likelihood_factor=1e3)
        fb = sinter.fit_binomial(num_shots=theirs.shots, num_hits=theirs.custom_counts[k], max_likelihood_factor=1e3)
        assert fa.low <= fb.high and fb.low <= fa.high, (k, ours.custom_counts, theirs.custom_counts)
    assert sum(ours.custom_counts[k] for k in keys) == ours.errors


def heralded_repetition(d: int = 5, rounds: int = 4, erasure: float = 0.1, p: float = 0.04) -> stim.Circuit:
    """A repetition code memory with heralded erasures of its data qubits each round (the heralds
    are detectors), MPAD records, and its logical observable as the Pauli target Z0 at the start and
    the end."""
    data, ancillas = list(range(0, 2 * d, 2)), list(range(1, 2 * d - 1, 2))
    h, k = len(data), len(ancillas)
    qs = lambda q: " ".join(map(str, q))  # noqa: E731

    def round_(first: bool):
        lines = [f"HERALDED_ERASE({erasure}) {qs(data)}", f"DEPOLARIZE1({p}) {qs(data)}", "TICK",
                 "CX " + " ".join(f"{q} {q + 1}" for q in data[:-1]), "TICK",
                 "CX " + " ".join(f"{q + 2} {q + 1}" for q in data[:-1]), "TICK",
                 f"X_ERROR({p}) {qs(ancillas)}", f"MR {qs(ancillas)}"]
        lines += [f"DETECTOR rec[-{k + h - i}]" for i in range(h)]  # the heralds
        lines += [f"DETECTOR rec[-{k - i}]" + ("" if first else f" rec[-{2 * k + h - i}]") for i in range(k)]
        return lines

    lines = [f"R {qs(data)} {qs(ancillas)}", "OBSERVABLE_INCLUDE(0) Z0", "MPAD 0 1"] + round_(True)
    lines += [f"REPEAT {rounds - 1} {{"] + round_(False) + ["}", f"X_ERROR({p}) {qs(data)}",
                                                            "OBSERVABLE_INCLUDE(0) Z0", f"M {qs(data)}"]
    lines += [f"DETECTOR rec[-{h - i}] rec[-{h - i - 1}] rec[-{h + k - i}]" for i in range(k)]
    return stim.Circuit("\n".join(lines))


def test_sinter_plug_in_on_heralded_erasures_matches_sinters_default_sampler():
    """Heralds as detectors and a Pauli-target observable, decoded by pymatching from the same
    detector error model: error rates and detection events as sinter's own sampler gives them."""
    sinter, QuasarqSampler = _sinter()
    task = sinter.Task(circuit=heralded_repetition(), json_metadata={})
    common = dict(num_workers=2, tasks=[task], max_shots=20000)
    ours = sinter.collect(decoders=["q"], custom_decoders={"q": QuasarqSampler(
        device="cpu", seed=5, count_detection_events=True)}, **common)[0]
    theirs = sinter.collect(decoders=["pymatching"], count_detection_events=True, **common)[0]
    assert ours.shots == theirs.shots == 20000 and theirs.errors > 50
    fa = sinter.fit_binomial(num_shots=ours.shots, num_hits=ours.errors, max_likelihood_factor=1e3)
    fb = sinter.fit_binomial(num_shots=theirs.shots, num_hits=theirs.errors, max_likelihood_factor=1e3)
    assert fa.low <= fb.high and fb.low <= fa.high, (ours, theirs)
    a, b = ours.custom_counts["detection_events"], theirs.custom_counts["detection_events"]
    checked = ours.custom_counts["detectors_checked"]
    rate = (a + b) / (2 * checked)
    assert abs(a - b) < 8 * np.sqrt(2 * checked * rate * (1 - rate)), (a, b)
    # a task not from sinter.collect: the plug-in makes the detector error model itself
    compiled = QuasarqSampler(device="cpu", seed=5).compiled_sampler_for_task(sinter.Task(circuit=task.circuit))
    assert compiled.sample(100).shots == 100


def test_a_sinter_worker_never_imports_cirq_over_a_noise_sweep():
    """What a sinter worker does with the plug-in (import it, then compile and sample task after
    task: a sweep's circuits differ only in their probabilities, so the second takes the first's
    schedule and linear map) imports neither Cirq nor sympy: Cirq's import alone takes 1-1.5 s,
    more than a small task's whole collection. Comparing two compiled programs' qubits once made
    their `cirq.LineQubit`s."""
    _sinter()
    program = (
        "import sys, sinter, stim\n"
        "from cirq_quasarq.sinter import QuasarqSampler\n"
        "sampler = QuasarqSampler(device='cpu', seed=1)\n"
        "for d, p in ((3, 0.01), (3, 0.02), (5, 0.01), (5, 0.02), (3, 0.03)):\n"
        "    c = stim.Circuit.generated('surface_code:rotated_memory_z', distance=d, rounds=d,\n"
        "                               after_clifford_depolarization=p, before_measure_flip_probability=p)\n"
        "    assert sampler.compiled_sampler_for_task(sinter.Task(circuit=c)).sample(300).shots == 300\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'cirq', 'sympy'}))\n")
    root = pathlib.Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=pythonpath_with(root)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_sinter_collect_command_takes_the_module_function(tmp_path):
    sinter, _ = _sinter()
    command = pathlib.Path(sys.executable).parent / "sinter"
    if not command.exists():
        pytest.skip("no `sinter` command next to this Python")
    circuit, csv = tmp_path / "c.stim", tmp_path / "out.csv"
    stim_circuit = code("repetition", 3, 3, p=0.05)
    circuit.write_text(str(stim_circuit))
    root = pathlib.Path(__file__).resolve().parents[1]
    proc = subprocess.run([str(command), "collect", "--circuits", str(circuit), "--decoders", "quasarq",
                           "quasarq-pymatching", "--custom_decoders_module_function",
                           "cirq_quasarq.sinter:sinter_samplers_counting", "--max_shots", "1000", "--processes",
                           "2", "--save_resume_filepath", str(csv), "--quiet"],
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=pythonpath_with(root)))
    assert proc.returncode == 0, proc.stderr
    stats = sinter.read_stats_from_csv_files(csv)
    assert sorted(s.decoder for s in stats) == ["quasarq", "quasarq-pymatching"]
    for s in stats:
        assert s.shots == 1000 and 0 < s.errors < 1000 and s.custom_counts["detectors_checked"] == 1000 * stim_circuit.num_detectors


def test_sinter_postselection_discards(tmp_path):
    sinter, QuasarqSampler = _sinter()
    task = sinter.Task(circuit=code("repetition", 3, 2, p=0.05), json_metadata={},
                       postselection_mask=np.array([0b1], dtype=np.uint8))
    stats = QuasarqSampler(device="cpu", seed=2).compiled_sampler_for_task(task).sample(5000)
    assert 0 < stats.discards < stats.shots


def test_surface_code_threshold_example_runs_tiny(tmp_path):
    _sinter()
    pytest.importorskip("matplotlib")
    root = pathlib.Path(__file__).resolve().parents[1]
    figure = root / "docs" / "figures" / "surface_code_threshold.png"
    tracked = figure.read_bytes()
    proc = subprocess.run([sys.executable, str(root / "examples" / "surface_code_threshold.py"), "--tiny",
                           "--device", "cpu"], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=pythonpath_with(root)))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "surface_code_threshold.png").stat().st_size > 1000  # by default, here
    assert figure.read_bytes() == tracked


# ---------------------------------------------------------------------------------------------
# Several logical observables (Stim's numbering: observable k is the XOR of every include of k)


def several_observables(d: int = 3, p: float = 0.02) -> stim.Circuit:
    """A surface code with observable 0 as generated and observable 2 (1 is never included), still
    deterministic as decoders want: a detector's records included every round (inside the REPEAT
    block), then the logical's records and a final detector's, by two more includes."""
    text = str(code("surface", d, d, p=p)).splitlines()
    targets = lambda line: line.split(")", 1)[1].strip()  # noqa: E731
    start = next(i for i, line in enumerate(text) if line.startswith("REPEAT"))
    first = next(i for i in range(start, len(text)) if text[i].strip().startswith("DETECTOR"))
    text.insert(first + 1, "    OBSERVABLE_INCLUDE(2) " + targets(text[first]))
    logical = next(line for line in text if line.startswith("OBSERVABLE_INCLUDE(0)"))
    last = [line for line in text if line.startswith("DETECTOR")][-1]
    text += ["OBSERVABLE_INCLUDE(2) " + targets(logical), "OBSERVABLE_INCLUDE(2) " + targets(last)]
    return stim.Circuit("\n".join(text))


def test_several_observables_in_the_plug_in_the_command_line_and_the_simulator(tmp_path):
    circuit = several_observables()
    assert circuit.num_observables == 3
    shots = 20000
    obs = QuasarqSimulator(seed=3, device="cpu").sample_detectors(circuit, shots, separate_observables=True)[1]
    assert obs.shape == (shots, 3) and not obs[:, 1].any()
    _rates_agree(obs, circuit.compile_detector_sampler(seed=3).sample(shots, separate_observables=True)[1],
                 "three observables")
    # the command line writes Stim's columns
    path, out = tmp_path / "c.stim", tmp_path / "d.01"
    path.write_text(str(circuit))
    assert cli.main(["sample", str(path), "--shots", "500", "--detectors", "--append-observables", "--out", str(out),
                     "--quiet", "--device", "cpu"]) == 0
    rows = np.array([[c == "1" for c in line] for line in out.read_text().splitlines()])
    assert rows.shape == (500, circuit.num_detectors + 3) and not rows[:, -2].any()
    # sinter: the same logical error rate as Stim's sampler with the same decoder
    sinter, QuasarqSampler = _sinter()
    task = sinter.Task(circuit=circuit, json_metadata={})
    common = dict(num_workers=1, tasks=[task], max_shots=20000, max_errors=20000)
    ours = sinter.collect(decoders=["q"], custom_decoders={"q": QuasarqSampler(device="cpu", seed=5)}, **common)[0]
    theirs = sinter.collect(decoders=["pymatching"], **common)[0]
    fa = sinter.fit_binomial(num_shots=ours.shots, num_hits=ours.errors, max_likelihood_factor=1e3)
    fb = sinter.fit_binomial(num_shots=theirs.shots, num_hits=theirs.errors, max_likelihood_factor=1e3)
    assert fa.low <= fb.high and fb.low <= fa.high, (ours, theirs)
