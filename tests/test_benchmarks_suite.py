"""The benchmark suite (`python -m benchmarks`, benchmarks/harness.py, suites/, report.py).

- The README's benchmark block and docs/benchmarks.md's generated part are what `report` makes of
  the committed JSON (docs/benchmarks/results/).
- A smoke run of every suite at tiny sizes on the NumPy engine, in a temporary folder, with the GPU
  peers replaced by stand-ins that follow their Python API (backed by stim), so the code that calls
  quasarq and cuStabilizer runs here too; then the report on that run.
- The harness itself: time limits keep partial results, a crash or an exception is recorded, a
  simulator past its limit is not run on larger workloads, the run's budget, the energy meter.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

from benchmarks import figures, harness, report, runs
from benchmarks.measure import Context, EnergyMeter, integrate
from benchmarks.suites import SUITES, cases

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "benchmarks" / "results"

# Stand-ins for the GPU peers, with the signatures of quasarq 1.7.2 and cuquantum.stabilizer 0.5.
STUBS = {
    "quasarq.py": '''
        import numpy as np
        import stim

        def _stim(c):
            return c.copy() if isinstance(c, stim.Circuit) else stim.Circuit(str(c))

        class Simulation:
            def __init__(self, c):
                sim = stim.TableauSimulator()
                sim.do(c)
                self._m = np.array(sim.current_measurement_record(), dtype=bool)
            def measurements(self):
                return self._m

        def simulate(circuit):
            return Simulation(_stim(circuit))

        class _Sampler:
            def __init__(self, s):
                self._s = s
            def sample(self, shots, *, bit_packed=False, **kwargs):
                return self._s.sample(shots, bit_packed=bit_packed, **kwargs)

        def compile_sampler(circuit, *, seed=None):
            return _Sampler(_stim(circuit).compile_sampler(seed=seed))

        def compile_detector_sampler(circuit, *, seed=None):
            return _Sampler(_stim(circuit).compile_detector_sampler(seed=seed))

        def version():
            return "stand-in"
    ''',
    "cupy/__init__.py": '''
        from . import cuda

        class _Pool:
            def free_all_blocks(self):
                pass

        def get_default_memory_pool():
            return _Pool()
    ''',
    "cupy/cuda/__init__.py": '''
        class Device:
            def synchronize(self):
                pass
    ''',
    "cuquantum/__init__.py": "",
    "cuquantum/stabilizer/__init__.py": '''
        import numpy as np

        class _DeviceArray:
            def __init__(self, a):
                self.a = a
            def get(self):
                return self.a.copy()

        class Circuit:
            def __init__(self, circuit):
                self.num_qubits, self.num_measurements = circuit.num_qubits, circuit.num_measurements

        class FrameSimulator:
            def __init__(self, num_qubits, num_paulis, num_measurements=0, num_detectors=0, package="numpy",
                         seed=None, **kwargs):
                self.num_qubits, self.num_measurements = num_qubits, num_measurements
                self._m = np.zeros((num_measurements + num_detectors, (num_paulis + 31) // 32 * 4), np.uint8)
            def apply(self, circuit, seed=None, stream=None):
                assert circuit.num_qubits <= self.num_qubits and circuit.num_measurements <= self.num_measurements
                self._m[:] = np.random.default_rng(seed).integers(0, 256, self._m.shape, dtype=np.uint8)
            def get_measurement_bits(self, bit_packed=True):
                return _DeviceArray(self._m[: self.num_measurements])
    ''',
}


def _records(results_dir: Path):
    (path,) = sorted(results_dir.glob("*.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines()]


# ----------------------------------------------------------------------------- committed results
def test_readme_block_is_what_report_makes_of_the_committed_json():
    readme = (ROOT / "README.md").read_text()
    assert report.current_block(readme) == report.expected_readme_block(RESULTS), \
        "README's benchmark block is stale: run `python -m benchmarks report`"


def test_doc_block_and_figures_match_the_committed_json():
    selection = runs.select(runs.load_runs(RESULTS))
    names = figures.figure_names(selection)
    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    assert report.current_block(doc, report.DOC_START, report.DOC_END) == report.doc_block(selection, names)
    for name in (n for per_device in names.values() for n in per_device):
        assert (ROOT / "docs" / "benchmarks" / name).exists(), name


def test_committed_runs_carry_versions_and_revision():
    for run in runs.load_runs(RESULTS):
        assert run.header["git"].get("rev"), run.path
        assert {"stim", "cirq-core", "numpy"} <= set(run.header["packages"]), run.path
        assert run.header["device"]["label"] and run.header["host"]["cores"]
        assert all(c["run_id"] == run.header["run_id"] for c in run.cases)


# ----------------------------------------------------------------------------- smoke run
def test_smoke_run_of_every_suite(tmp_path):
    pytest.importorskip("stim")  # the peer stim, and the stand-ins' backing
    pytest.importorskip("stimcirq")
    stubs = tmp_path / "stubs"
    for name, source in STUBS.items():
        (stubs / name).parent.mkdir(parents=True, exist_ok=True)
        (stubs / name).write_text(textwrap.dedent(source))
    readme = tmp_path / "README.md"
    readme.write_text((ROOT / "README.md").read_text())
    results = tmp_path / "results"
    env = {**__import__("os").environ, "PYTHONPATH": f"{ROOT}:{stubs}"}
    cmd = [sys.executable, "-m", "benchmarks", "all", "--profile", "tiny", "--engine", "numpy", "--jobs", "2",
           "--results", str(results), "--cache-dir", str(tmp_path / "cache"), "--figures", str(tmp_path / "fig"),
           "--readme", str(readme), "--doc", str(tmp_path / "benchmarks.md")]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]

    header, *lines, end = _records(results)
    assert header["kind"] == "run" and end["kind"] == "run_end"
    assert header["device"]["label"].startswith("cpu, ") and header["engine"] == "numpy"
    assert "stim" in header["packages"] and "git" in header
    assert {c["suite"] for c in lines} == set(SUITES)
    progress = [ln for ln in proc.stderr.splitlines() if ln.startswith("[")]
    assert len(progress) == len(lines)  # one progress line per case
    bad = [(c["suite"], c["workload"], c["sim"], c["status"], c.get("reason")) for c in lines if c["status"] != "ok"]
    assert not bad, bad
    by = {(c["suite"], c["sim"]): c for c in lines}
    for suite in ("light", "heavy"):
        ours = by[(suite, "ours")]["results"]
        assert ours["single"]["first_s"] > 0 and ours["single"]["repeat"]["best_s"] > 0
        assert ours["sampling"]["repeat"]["best_s"] > 0 and ours["stages"]["compile_s"] > 0
        assert by[(suite, "quasarq")]["results"]["single"]["repeat"]["best_s"] > 0
        assert "quasarq" in by[(suite, "quasarq")]["results"]["versions"]
    qec = {sim: by[("qec", sim)]["results"]["shots"]["10000"] for sim in ("ours", "stim", "quasarq", "custabilizer")}
    for sim in ("ours", "stim", "quasarq"):
        assert qec[sim]["measurements"]["repeat"]["best_s"] > 0 and qec[sim]["detectors"]["repeat"]["best_s"] > 0
    assert qec["custabilizer"]["measurements"]["on_gpu"]["best_s"] > 0
    assert "no NVML" in by[("qec", "quasarq")]["results"]["energy_note"]  # GPU tools: energy, or why not
    assert by[("cirq", "stimcirq")]["results"]["run"]["compile_s"] > 0

    figures = sorted(p.name for p in (tmp_path / "fig").glob("*.png"))
    slug = header["device"]["slug"]
    assert {f"{slug}-{k}.png" for k in ("light-runtime", "light-cactus", "heavy-runtime", "qec-sampling", "stages",
                                        "speedup")} <= set(figures)
    block = report.current_block(readme.read_text())
    assert block == report.expected_readme_block(results) and "surface d=3" in block
    assert readme.read_text().replace(block, "") == \
        (ROOT / "README.md").read_text().replace(report.current_block((ROOT / "README.md").read_text()), "")
    assert report.check(results, report.Outputs(tmp_path / "fig", readme, tmp_path / "benchmarks.md")) == 0


# ----------------------------------------------------------------------------- the harness
def _selftest(sim: str, size: int, timeout: float = 30, **params) -> harness.Case:
    return harness.Case(suite="light", module="selftest", workload=f"n={size}", sim=sim, params=params,
                        timeout_s=timeout, size=(size,))


def test_harness_limits_crashes_and_skips(tmp_path):
    opts = harness.Options(engine="numpy", profile="tiny", peers=(), results_dir=tmp_path, cache_dir=tmp_path)
    plan = [_selftest("ok", 1), _selftest("sleep", 1, timeout=4, sleep_s=60), _selftest("sleep", 2, sleep_s=60),
            _selftest("crash", 1), _selftest("fail", 1), _selftest("stim", 1)]
    t0 = time.perf_counter()
    harness.run_cases(plan, opts, ["light"])
    assert time.perf_counter() - t0 < 25
    _, ok, slow, larger, crash, fail, peer, _ = _records(tmp_path)
    assert ok["status"] == "ok" and ok["results"]["single"]["repeat"]["calls"] == 2
    assert slow["status"] == "timeout" and slow["results"]["single"]["first_s"] == 0.5  # partial results kept
    assert larger["status"] == "skipped" and "limit" in larger["reason"]
    assert crash["status"] == "crashed" and "SIGABRT" in crash["reason"] and crash["results"]["single"]
    assert fail["status"] == "error" and "a runner that fails" in fail["reason"]
    assert peer["status"] == "skipped" and "--peers" in peer["reason"]


def test_harness_budget(tmp_path):
    opts = harness.Options(engine="numpy", profile="tiny", peers=(), results_dir=tmp_path, cache_dir=tmp_path,
                           budget_s=0.0)
    harness.run_cases([_selftest("ok", 1)], opts, ["light"])
    _, rec, _ = _records(tmp_path)
    assert rec["status"] == "skipped" and "budget" in rec["reason"]


class _FakeNvml:
    def power_w(self) -> float:
        return 100.0

    def energy_j(self):
        return None


def test_energy_meter_integrates_the_power_samples(capsys):
    assert integrate([(0.0, 50.0), (1.0, 150.0), (5.0, 1.0)], 0.0, 2.0) == pytest.approx(200.0)
    assert integrate([(10.0, 80.0)], 0.0, 0.5) == pytest.approx(40.0)  # no sample inside: the nearest
    ctx = Context({"case": {"params": {}}, "opts": {"engine": "numpy", **harness.TIMING["quick"]}})
    ctx.meter = EnergyMeter(_FakeNvml(), "fake")
    rep = ctx.repeat(lambda: time.sleep(0.05), calls=3)
    assert rep["calls"] == 3 and rep["power_w"] == pytest.approx(100.0)
    assert rep["energy_j"] == pytest.approx(100.0 * rep["median_s"], rel=0.5)
    assert ctx.first(lambda: time.sleep(0.03))["first_energy_j"] == pytest.approx(3.0, rel=0.5)
    capsys.readouterr()


def test_gpu_profile_is_bounded():
    plan = [c for suite in SUITES for c in cases(suite, "gpu", "cuda")]
    assert {c.suite for c in plan} == set(SUITES) and all(c.timeout_s <= 150 for c in plan)
    assert all(c.gpu_tool == (c.sim in ("ours", "quasarq", "custabilizer")) for c in plan)
    extra = [c for c in plan if c.min_budget_s]
    assert extra and all(c.min_budget_s > c.timeout_s and c.tier == max(p.tier for p in plan) for c in extra)
    assert {c.params["n"] for c in extra if c.sim == "ours"} >= {180000}
    assert max(c.params["d"] for c in plan if c.suite == "qec") == 51
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], cwd=ROOT, capture_output=True, text=True,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.returncode == 0 and "--quick-gpu" in proc.stdout


def test_runs_name_their_code_by_digest(tmp_path):
    """A run records the digest of the package's and kernels' sources: the same for the same files,
    another for one changed byte (what names the code where a copy's git metadata lags)."""
    from benchmarks.harness import ROOT, code_digest, git_info

    for folder in ("cirq_quasarq", "cuda_src"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    assert code_digest(tmp_path) == code_digest(ROOT) == git_info()["code_sha256"]
    kernel = next((tmp_path / "cuda_src").glob("*.cu"))
    kernel.write_bytes(kernel.read_bytes() + b" ")
    assert code_digest(tmp_path) != code_digest(ROOT)


def test_tableau_floor_is_one_read_and_write_a_layer():
    """The floor drawn on the GPU runtime figures: n = 100k, depth 100 moves 100 x 2 x 5 GB."""
    from benchmarks.figures import tableau_floor_s

    assert tableau_floor_s(100_000, 100, 3e12) == pytest.approx(100 * 2 * 5e9 / 3e12)
    assert tableau_floor_s(200_000, 100, 3e12) == pytest.approx(4 * tableau_floor_s(100_000, 100, 3e12))


def test_first_call_benchmark_runs_a_baseline_checkout_in_turn(tmp_path):
    """bench_first_call --baseline DIR --samples 2: each case in a process of its own, once with this
    checkout's cirq_quasarq and once with DIR's, in turn, DIR's first every other sample; rows say
    which package ran, and the first calls' calling-thread CPU seconds."""
    pytest.importorskip("stim")  # the case's circuit
    base = tmp_path / "base"
    shutil.copytree(ROOT / "cirq_quasarq", base / "cirq_quasarq", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "cuda_src", base / "cuda_src")
    out = tmp_path / "rows.jsonl"
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_first_call", "--device", "cpu", "--cases",
                           "surface-5-1024-det", "--samples", "2", "--baseline", str(base), "--json", str(out),
                           "--first-calls", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["sample"], "baseline" in r) for r in rows] == [(0, False), (0, True), (1, True), (1, False)]
    assert all("error" not in r and r["first_s"] > 0 for r in rows)
    assert all(len(r["first_calls_s"]) == 2 and min(r["first_calls_s"]) > 0 for r in rows)
    # the calling thread's CPU seconds of the same first calls (none past their wall seconds)
    assert all(0 < r["first_thread_cpu_s"] <= r["first_s"] + 1e-3 for r in rows)
    assert all(len(r["first_calls_thread_cpu_s"]) == 2 and all(0 < c <= w + 1e-3 for c, w in
               zip(r["first_calls_thread_cpu_s"], r["first_calls_s"])) for r in rows)
    assert {Path(r["package"]) for r in rows if "baseline" in r} == {base / "cirq_quasarq"}
    assert {Path(r["package"]) for r in rows if "baseline" not in r} == {ROOT / "cirq_quasarq"}


def test_in_turn_benchmark_sets_each_configuration_and_refuses_an_unknown_setting(monkeypatch):
    """bench_in_turn: every configuration's first calls and compiles, each run under its own
    settings (seen set while the compile runs) and the settings found put back after each workload;
    a setting this version lacks, or a case that is not a Stim one, stops it before work."""
    pytest.importorskip("stim")
    from benchmarks import bench_in_turn
    from cirq_quasarq.compiler import stim_circuit

    seen = []
    compile_new = stim_circuit.compile_new_stim
    monkeypatch.setattr(stim_circuit, "compile_new_stim",
                        lambda circuit, *a: seen.append(stim_circuit.PRINTED_PIECES) or compile_new(circuit, *a))
    monkeypatch.setattr(stim_circuit, "PRINTED_PIECES", stim_circuit.PRINTED_PIECES)
    printed = []
    monkeypatch.setattr("builtins.print", lambda *a, **k: printed.append(" ".join(map(str, a))))
    bench_in_turn.main(["--device", "cpu", "--reps", "2", "--sizes", "60", "--depth", "4",
                        "--cases", "surface-5-1024-det",
                        "--config", "a", "compiler.stim_circuit.PRINTED_PIECES=5",
                        "--config", "b", "compiler.stim_circuit.PRINTED_PIECES=7"])
    # each workload: two warming calls under the setting found, then per repetition and configuration
    # a first call and a compile under the configuration's
    assert seen == [12, 12] + [5, 5, 7, 7, 7, 7, 5, 5] + [12, 12] + [5, 5, 7, 7, 7, 7, 5, 5]
    assert stim_circuit.PRINTED_PIECES == 12
    assert [line.split(":")[0] for line in printed] == ["surface-5-1024-det a", "surface-5-1024-det b",
                                                        "n=60 a", "n=60 b"]
    assert all("2 each" in line for line in printed)
    with pytest.raises(SystemExit, match="has no NOPE"):
        bench_in_turn.main(["--device", "cpu", "--config", "x", "compiler.stim_circuit.NOPE=1"])
    with pytest.raises(SystemExit, match="not one of bench_first_call's Stim cases"):
        bench_in_turn.main(["--device", "cpu", "--cases", "cirq-surface-11-10k", "--config", "x",
                            "compiler.stim_circuit.PRINTED_PIECES=5"])


def test_first_call_benchmark_runs_a_cirq_case_and_its_peer(tmp_path):
    """A `cirq-random-*` case samples a cirq.Circuit through `run()` (its stages: the Cirq compile
    and the rest), and its peer is stimcirq's sampler."""
    pytest.importorskip("stimcirq")
    out = tmp_path / "rows.jsonl"
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_first_call", "--device", "cpu", "--cases",
                           "cirq-random-2k-1", "--peers", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    ours, peer = [json.loads(line) for line in out.read_text().splitlines()]
    assert (ours["peer"], peer["peer"]) == ("cirq-quasarq", "stimcirq")
    assert "error" not in ours and "error" not in peer
    from benchmarks.random_clifford import measured_a_layer

    assert ours["records"] == 100 * measured_a_layer(2000) and ours["instructions"] > 2000 * 100 // 2
    assert all(ours[k] > 0 for k in ("first_s", "repeat_s", "compile_s", "schedule_s", "reference_s"))
    assert peer["first_s"] > 0 and peer["repeat_s"] > 0


def test_first_call_benchmark_runs_a_cirq_surface_code_written_out_in_moments(tmp_path):
    """A `cirq-surface-*` case: Stim's surface code through stimcirq with its loops unrolled (every
    round's measurements and detectors in moments of their own), sampled through `run()`; with
    `--compiles 2`, two compiles alone."""
    pytest.importorskip("stimcirq")
    out = tmp_path / "rows.jsonl"
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_first_call", "--device", "cpu", "--cases",
                           "cirq-surface-11-10k", "--json", str(out), "--compiles", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (ours,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert "error" not in ours
    assert len(ours["compiles_s"]) == 2 and min(ours["compiles_s"]) > 0  # compiles alone, of new copies
    import cirq

    from benchmarks.bench_first_call import build

    circuit = build("cirq-surface-11-10k")
    assert not any(isinstance(op, cirq.CircuitOperation) for op in circuit.all_operations())
    assert ours["records"] == (11 * 11 - 1) * 11 + 11 * 11  # every round's ancillas, then the data qubits
    assert all(ours[k] > 0 for k in ("first_s", "repeat_s", "compile_s", "schedule_s", "reference_s"))


def test_first_call_timeline_reports_each_stage_of_the_call():
    """first_call_timeline (in a process of its own: it wraps the package's stages for the rest of
    its process): each wrapped stage once at least, its thread, and the repeat call."""
    pytest.importorskip("stim")
    done = subprocess.run([sys.executable, "-m", "benchmarks.first_call_timeline", "random-2k-1", "--device", "cpu"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert out.startswith("== random-2k-1: first call ")
    for stage in ("compile: read in place", "compile: read runs placed", "compile: segments",
                  "ProgramBuilder.build", "Scheduler.add"):
        assert re.search(rf"  {re.escape(stage)} +MainThread +x +[1-9]", out), stage
    assert re.search(r"  repeat \d+\.\d+ s", out)


def test_gpu_tableau_kernel_times_sum_each_kernel_a_run():
    """bench_gpu_tableau --kernels: profiled runs, the launcher's per-kernel totals divided by the
    runs, largest first; profiling is off again and the totals cleared afterwards."""
    from benchmarks import bench_gpu_tableau

    class Engine:
        def __init__(self):
            self.profile = False
            self.launcher = types.SimpleNamespace(kernel_totals={"stale": [1, 9.0]})

        def run_tableau(self, program, sched, key):
            assert self.profile
            for name, seconds in (("a", 0.001), ("b", 0.003), ("a", 0.001)):
                total = self.launcher.kernel_totals.setdefault(name, [0, 0.0])
                total[0] += 1
                total[1] += seconds

    engine = Engine()
    got = bench_gpu_tableau.kernel_times(engine, None, None, repeat=2)
    assert [(k, (c, round(ms, 9))) for k, (c, ms) in got] == [("b", (1, 3.0)), ("a", (2, 2.0))]
    assert not engine.profile and engine.launcher.kernel_totals == {}


def test_launcher_collect_sums_per_stage_and_per_kernel():
    """Launcher.collect: device seconds per stage, and the same launches added to kernel_totals
    per kernel (launches, seconds), which later collects keep adding to."""
    from cirq_quasarq.engines.cuda import loader

    class Event:
        def __init__(self, ms):
            self.ms = ms

        def time_since(self, other):
            return self.ms - other.ms

    launcher = loader.Launcher.__new__(loader.Launcher)
    launcher._cuda = types.SimpleNamespace(Context=types.SimpleNamespace(synchronize=lambda: None),
                                           Error=RuntimeError)
    launcher.kernel_totals = {}
    launcher._events = [("gates", "g", Event(0), Event(2)), ("plan", "p", Event(2), Event(3)),
                        ("gates", "g", Event(3), Event(7))]
    assert launcher.collect() == {"gates": 0.006, "plan": 0.001}
    launcher._events = [("plan", "p", Event(0), Event(1))]
    assert launcher.collect() == {"plan": 0.001}
    assert launcher.kernel_totals == {"g": [2, 0.006], "p": [2, 0.002]}


@pytest.mark.parametrize("n,depth,seed,measured", [(5, 3, 2, None), (200, 5, 0, None), (1401, 4, 3, None),
                                                   (3000, 4, 1, 264), (64, 2, 0, 64)])
def test_random_clifford_program_is_the_layers_op_for_op(n, depth, seed, measured):
    """The paper's circuit built with NumPy a layer at a time (what the GPU benchmarks and the
    stress run time) is `layers()` gate for gate and measurement for measurement, the two-qubit
    anchors that find no partner left falling back to their one-qubit gate (n = 5, 200, 1401)."""
    import numpy as np

    from benchmarks.random_clifford import layers, random_clifford_program
    from cirq_quasarq.core import opcodes
    from cirq_quasarq.core.program import ProgramBuilder

    b = ProgramBuilder(n)
    for ops, measured_qubits in layers(n, depth, seed, measured):
        b.gate_layer(np.array([opcodes.CODE[g] for g, _ in ops]), np.array([qs[0] for _, qs in ops]),
                     np.array([qs[1] if len(qs) == 2 else -1 for _, qs in ops]))
        b.next_step()
        for q in measured_qubits:
            b.measure(q)
    want = b.build()
    got = random_clifford_program(n, depth, seed, measured)
    np.testing.assert_array_equal(got.instructions, want.instructions)
    assert got.num_records == want.num_records == depth * (max(1, n // 1400) if measured is None else measured)


@pytest.mark.parametrize("n,depth,seed", [(300, 30, 2), (64, 40, 5), (1401, 8, 1)])
def test_replay_finds_the_outcomes_stim_postselection_finds_impossible(n, depth, seed):
    """benchmarks/replay.py: our tableau mode forced to another run's random outcomes (each
    measurement's coin slot chosen so that its coin is the outcome) contradicts exactly the
    records stim's postselection finds impossible, for random records (about half of the
    deterministic measurements), our own records (none), and with inverted M and MR among them."""
    stim = pytest.importorskip("stim")
    import numpy as np

    from benchmarks.random_clifford import paper_random_circuit_stim
    from benchmarks.replay import contradicted, postselected, replaying
    from cirq_quasarq.compiler.stim_circuit import compile_stim
    from cirq_quasarq.core import rng
    from cirq_quasarq.engines.numpy.engine import NumpyEngine
    from cirq_quasarq.schedule import schedule

    circuit = paper_random_circuit_stim(n, depth, seed=seed)
    r = np.random.default_rng(seed)
    tail = stim.Circuit()  # inverted M and MR on qubits measured before, and on fresh ones
    for q in r.choice(n, size=6, replace=False).tolist():
        tail.append("M" if q % 2 else "MR", [stim.target_inv(q) if q % 3 else q])
    circuit += tail + circuit[-3:] + tail
    program = compile_stim(circuit)
    engine, key = NumpyEngine(), rng.make_key(seed)
    ours = engine.run_tableau(program, schedule(program), rng.make_key(seed + 1)).records
    assert len(contradicted(engine, program, key, ours)) == 0
    assert postselected(circuit, ours) == []
    noise = r.integers(0, 2, program.num_records).astype(np.uint8)
    bad = contradicted(engine, program, key, noise)
    assert bad.tolist() == postselected(circuit, noise)
    assert len(bad) > 0  # the circuit has deterministic measurements for the check to find
    with pytest.raises(ValueError, match="records for a program"):
        replaying(program, key, noise[:-1])
    for refused in ("R 0", "X_ERROR(0.1) 0"):  # an outcome, or a draw, that no record holds
        with pytest.raises(ValueError, match="noise or resets"):
            replaying(compile_stim(circuit + stim.Circuit(refused)), key, noise)


def test_cpu_frames_benchmark_reports_both_ways_with_the_same_bits(capsys):
    """bench_cpu_frames at a tiny size: a line a size, the compiled and NumPy gate runs giving the
    same bits."""
    pytest.importorskip("stim")
    from benchmarks import bench_cpu_frames

    bench_cpu_frames.main(["--n", "60", "--shots", "100", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "n = 60, depth 100, 100 shots" in out and "same bits: True" in out


def test_sinter_worker_benchmarks_time_each_share_in_new_processes(capsys):
    """bench_small_calls --worker-imports and --worker-tasks (qec extra): the plug-in's import in new
    processes, and one worker's share of each sampler, a figure for every part, positive."""
    pytest.importorskip("sinter")
    pytest.importorskip("pymatching")
    from benchmarks import bench_small_calls

    bench_small_calls.main(["--worker-imports", "2"])
    bench_small_calls.main(["--worker-tasks", "1"])
    out = capsys.readouterr().out
    imports = re.search(r"stim \(a sinter worker's share\), 2 processes: median ([0-9.]+) ms", out)
    assert imports and float(imports.group(1)) > 0, out
    for name in ("ours", "sinter's default"):
        line = re.search(rf"one worker's share, {re.escape(name)} \(1 processes, medians\): (.*); in all ([0-9.]+) ms",
                         out)
        assert line, out
        parts = {k.strip(): v for k, v in re.findall(r"([a-z0-9 =]+?) ([0-9.]+) ms", line.group(1))}
        assert set(parts) == {"import", "d = 3 compiled sampler", "d = 3 shots", "d = 5 compiled sampler",
                              "d = 5 shots"}, parts
        assert all(float(v) > 0 for k, v in parts.items() if not (name != "ours" and k == "import")), parts
    assert "ours / sinter's default, process by process: median" in out
