"""Host memory: each limit the package reads (MemAvailable, cgroup v2 and v1, RLIMIT_AS and
RLIMIT_DATA) from fake files, the tightest one chosen and named in the refusal, the calls' memory
estimates against what they really allocate, and a real RLIMIT_AS in a child process."""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import cirq
import pytest

import cirq_quasarq
from cirq_quasarq import QuasarqSimulator, contract, errors
from cirq_quasarq.core import memory
from cirq_quasarq.engines import NumpyEngine
from cirq_quasarq.results import records

GiB = 1 << 30


def _files(root: Path, files: dict) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_meminfo(tmp_path):
    _files(tmp_path, {"meminfo": "MemTotal:       24683656 kB\nMemFree:  100 kB\nMemAvailable:    2097152 kB\n"})
    assert memory.meminfo_headroom(tmp_path / "meminfo") == (2 * GiB, "MemAvailable", "")


def test_cgroup_v2_takes_the_tightest_ancestor_and_discounts_inactive_file_cache(tmp_path):
    _files(tmp_path, {
        "cgroup": "0::/batch.slice/job-7\n",
        "fs/batch.slice/job-7/memory.max": "max\n",  # the job itself: no limit of its own
        "fs/batch.slice/job-7/memory.current": f"{3 * GiB}\n",
        "fs/batch.slice/memory.max": f"{8 * GiB}\n",
        "fs/batch.slice/memory.current": f"{3 * GiB}\n",
        "fs/batch.slice/memory.stat": f"anon 100\nfile {2 * GiB}\ninactive_file {GiB}\nactive_file 5\n",
    })
    limits = memory.cgroup_headroom(tmp_path / "cgroup", tmp_path / "fs")
    assert [(h.bytes, h.limit) for h in limits] == [(6 * GiB, "cgroup memory.max")]  # 8 - (3 - 1)
    assert "batch.slice" in limits[0].detail


def test_cgroup_v2_on_a_hybrid_host_and_over_its_limit(tmp_path):
    _files(tmp_path, {"cgroup": "4:memory:/\n0::/app\n",
                      "fs/unified/app/memory.max": f"{GiB}\n", "fs/unified/app/memory.current": f"{2 * GiB}\n"})
    assert [h.bytes for h in memory.cgroup_headroom(tmp_path / "cgroup", tmp_path / "fs")] == [0]


def test_cgroup_v1_inside_a_container_and_unlimited_v1(tmp_path):
    # A container without a cgroup namespace: /proc/self/cgroup names the host's path, the mount
    # shows the container's cgroup as its root.
    _files(tmp_path, {"cgroup": "9:pids:/docker/abc\n4:memory:/docker/abc\n0::/\n",
                      "fs/memory/memory.limit_in_bytes": f"{4 * GiB}\n",
                      "fs/memory/memory.usage_in_bytes": f"{GiB}\n",
                      "fs/memory/memory.stat": f"inactive_file 7\ntotal_inactive_file {GiB // 2}\n"})
    limits = memory.cgroup_headroom(tmp_path / "cgroup", tmp_path / "fs")
    assert [(h.bytes, h.limit) for h in limits] == [(3 * GiB + GiB // 2, "cgroup memory.limit_in_bytes")]
    (tmp_path / "fs/memory/memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    memory._cgroup_dirs.cache_clear()
    assert memory.cgroup_headroom(tmp_path / "cgroup", tmp_path / "fs") == []


def test_no_cgroup_files(tmp_path):
    assert memory.cgroup_headroom(tmp_path / "absent", tmp_path) == []
    _files(tmp_path, {"cgroup": "0::/\n"})
    assert memory.cgroup_headroom(tmp_path / "cgroup", tmp_path / "fs") == []


def test_rlimits_less_what_the_process_uses(tmp_path, monkeypatch):
    _files(tmp_path, {"status": "Name:\tpython\nVmPeak:\t 9999 kB\nVmSize:\t 1048576 kB\nVmRSS:\t 10 kB\n"
                                "VmData:\t  524288 kB\n"})
    limits = {resource.RLIMIT_AS: (16 * GiB, resource.RLIM_INFINITY),
              resource.RLIMIT_DATA: (4 * GiB, 4 * GiB)}
    monkeypatch.setattr(resource, "getrlimit", lambda which: limits.get(which, (resource.RLIM_INFINITY,) * 2))
    got = memory.rlimit_headroom(tmp_path / "status")
    assert [(h.bytes, h.limit) for h in got] == [(15 * GiB, "RLIMIT_AS"), (4 * GiB - GiB // 2, "RLIMIT_DATA")]
    limits.clear()
    assert memory.rlimit_headroom(tmp_path / "status") == []


def test_the_tightest_limit_is_taken_and_named(monkeypatch):
    monkeypatch.setattr(memory, "meminfo_headroom", lambda: memory.Headroom(20 * GiB, "MemAvailable"))
    monkeypatch.setattr(memory, "cgroup_headroom", lambda: [memory.Headroom(6 * GiB, "cgroup memory.max", "8 GiB")])
    monkeypatch.setattr(memory, "rlimit_headroom", lambda: [memory.Headroom(9 * GiB, "RLIMIT_AS")])
    assert memory.host_headroom().limit == "cgroup memory.max"
    with pytest.raises(errors.OutOfMemoryError, match=r"^the thing needs about 7.00 GiB of host memory; 6.00 GiB "
                                                      r"is available under cgroup memory.max \(8 GiB\)"):
        memory.require_host_memory("the thing", 7 * GiB)
    memory.require_host_memory("the thing", 6 * GiB)
    monkeypatch.setattr(memory, "rlimit_headroom", lambda: [memory.Headroom(GiB, "RLIMIT_DATA")])
    with pytest.raises(errors.OutOfMemoryError, match="under RLIMIT_DATA"):
        memory.require_host_memory("the thing", 2 * GiB)


def test_the_numpy_engine_plans_with_the_tightest_limit(monkeypatch):
    monkeypatch.setattr(memory, "host_headroom", lambda: memory.Headroom(1 << 20, "RLIMIT_AS"))
    # 6000 qubits: a tableau of 55 MB, past the requests small enough to pass unchecked
    program = QuasarqSimulator(device="cpu").compile(cirq.Circuit(cirq.H.on_each(cirq.LineQubit.range(6000))))
    with pytest.raises(errors.OutOfMemoryError, match="tableau mode on 6000 qubits.*RLIMIT_AS"):
        NumpyEngine().run_tableau(program, None, None)


def _peak(call) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("what", ["run", "measurements", "measurements_packed", "detectors", "detectors_packed",
                                  "detectors_separate", "controlled_detectors"])
def test_estimates_cover_what_the_calls_allocate(what, monkeypatch):
    stim = pytest.importorskip("stim")
    shots, q = 8_000_000, cirq.LineQubit.range(5)
    sim = QuasarqSimulator(device="cpu", seed=1)
    sim.engine = NumpyEngine(max_shot_words=1024)  # the engine's own working memory: under 1 MB
    measured = cirq.Circuit(cirq.H.on_each(q), cirq.measure(*q, key="m"), cirq.measure(q[0], key="k"))
    dets = stim.Circuit("H 0 1 2\nM 0 1 2\n" + "DETECTOR rec[-1]\n" * 11 + "OBSERVABLE_INCLUDE(0) rec[-2]")
    controlled = stim.Circuit("H 0\nM 0\nCX rec[-1] 1\nM 1\nDETECTOR rec[-1] rec[-2]\nOBSERVABLE_INCLUDE(0) rec[-1]")
    program = sim.compile(dets if "detectors" in what else measured)
    calls = {
        "run": (lambda n: sim.run(measured, repetitions=n), contract.run_bytes(program, shots)),
        "measurements": (lambda n: sim.sample_measurements(measured, n),
                         contract.measurements_bytes(program, shots, False)),
        "measurements_packed": (lambda n: sim.sample_measurements(measured, n, bit_packed=True),
                                contract.measurements_bytes(program, shots, True)),
        "detectors": (lambda n: sim.sample_detectors(dets, n), contract.detectors_bytes(program, 11, shots, 11)),
        "detectors_packed": (lambda n: sim.sample_detectors(dets, n, bit_packed=True),
                             contract.detectors_bytes(program, 11, shots)),
        "detectors_separate": (lambda n: sim.sample_detectors(dets, n, separate_observables=True),
                               contract.detectors_bytes(program, 17, shots, 12)),
        "controlled_detectors": (lambda n: sim.sample_detectors(controlled, n, append_observables=True),
                                 contract.detectors_bytes(sim.compile(controlled), 2, shots, 2)),
    }
    call, need = calls[what]
    call(1000)  # compiled programs and their tables made outside the measured call
    monkeypatch.setattr(records, "_kept", None)  # no unpacking buffer left by another test to reuse
    peak = _peak(lambda: call(shots))
    assert need >= peak - (2 << 20), (need, peak)
    assert need <= 2 * peak, (need, peak)  # and not a blanket overestimate


_RLIMIT_CHILD = textwrap.dedent("""
    import json, resource, sys, time
    shots = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (16 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
    import cirq, cirq_quasarq
    from cirq_quasarq.core import memory
    circuit = cirq.Circuit(cirq.measure(*cirq.LineQubit.range(4), key="m"))
    sim = cirq_quasarq.QuasarqSimulator(device="cpu")
    t0 = time.perf_counter()
    try:
        sim.run(circuit, repetitions=shots)
        out = {"error": None}
    except Exception as exc:
        out = {"error": type(exc).__name__, "message": str(exc)}
    out["seconds"] = time.perf_counter() - t0
    out["tightest"] = memory.host_headroom().limit
    out["rlimit_as"] = [h.bytes for h in memory.rlimit_headroom() if h.limit == "RLIMIT_AS"]
    print(json.dumps(out))
""")


def test_a_real_rlimit_as_refuses_a_run_it_cannot_hold():
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    if hard != resource.RLIM_INFINITY and hard < 16 * GiB:
        pytest.skip("the hard RLIMIT_AS is below 16 GiB here")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(cirq_quasarq.__file__).parents[1])]
                                        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    # 3e9 shots of 4 bits: 12 GB of Cirq's int8 arrays, 1.5 GB packed, and the rows being unpacked
    # (3 GB each, one per helper thread). With a single helper thread that fits under 16 GiB: 4e9 then.
    program = QuasarqSimulator(device="cpu").compile(cirq.Circuit(cirq.measure(*cirq.LineQubit.range(4), key="m")))
    shots = 3_000_000_000 if contract.run_bytes(program, 3_000_000_000) > 16 * GiB else 4_000_000_000
    proc = subprocess.run([sys.executable, "-c", _RLIMIT_CHILD, str(shots)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["error"] == "OutOfMemoryError", out
    assert out["seconds"] < 5, out
    assert 0 < out["rlimit_as"][0] <= 16 * GiB, out
    assert f"run() of {shots:,} repetitions" in out["message"] and f"under {out['tightest']}" in out["message"]
    if memory.meminfo_headroom().bytes > 16 * GiB and all(h.bytes > 16 * GiB for h in memory.cgroup_headroom()):
        assert out["tightest"] == "RLIMIT_AS" and "RLIMIT_AS (16.00 GiB, less the" in out["message"], out



def test_small_calls_read_no_limit_and_large_ones_do(monkeypatch):
    """Reading the limits costs more than a decoder's batch: calls of at most SMALL_REQUEST bytes
    skip it; a larger one still reads them and is refused."""
    def unread():
        raise AssertionError("a small call read the host's limits")

    circuit = cirq.Circuit(cirq.H(cirq.LineQubit(0)), cirq.measure(cirq.LineQubit(0), key="m"))
    monkeypatch.setattr(memory, "host_headroom", unread)
    assert QuasarqSimulator(device="cpu", seed=1).run(circuit, repetitions=1000).measurements["m"].shape == (1000, 1)
    monkeypatch.setattr(memory, "host_headroom", lambda: memory.Headroom(1 << 20, "RLIMIT_AS"))
    with pytest.raises(errors.OutOfMemoryError, match="RLIMIT_AS"):
        QuasarqSimulator(device="cpu", seed=1).run(circuit, repetitions=50_000_000)


def test_a_recent_reading_stands_for_requests_far_below_it(monkeypatch):
    """A loop of mid-sized calls reads the limits once in REUSE_S seconds: a request of at most
    1 / REUSE_FRACTION of what the last reading has left passes on it and is taken off it, so what
    passes on one reading never adds up to more than it found; a larger request, or one after
    REUSE_S, reads again, and a refused one leaves no reading behind."""
    reads, clock = [], [100.0]
    headroom = [GiB]

    def read():
        reads.append(clock[0])
        return memory.Headroom(headroom[0], "cgroup memory.max")

    monkeypatch.setattr(memory, "host_headroom", read)
    monkeypatch.setattr(memory.time, "monotonic", lambda: clock[0])
    mid = 32 << 20
    memory.require_host_memory("a call", mid)
    assert len(reads) == 1
    passed = mid
    for _ in range(200):  # the same instant: each passes on the reading until it has too little left
        before = len(reads)
        memory.require_host_memory("a call", mid)
        if len(reads) > before:
            break
        passed += mid
    assert len(reads) == 2 and passed <= GiB and passed > GiB // 2, passed
    memory.require_host_memory("a larger call", GiB // 8)  # over a sixteenth of what is left: read
    assert len(reads) == 3
    clock[0] += memory.REUSE_S  # too old to stand
    memory.require_host_memory("a call", mid)
    assert len(reads) == 4
    headroom[0] = 16 << 20
    clock[0] += memory.REUSE_S
    with pytest.raises(errors.OutOfMemoryError, match="a call needs"):
        memory.require_host_memory("a call", mid)
    with pytest.raises(errors.OutOfMemoryError, match="a call needs"):  # read again, refused again
        memory.require_host_memory("a call", mid)
    assert len(reads) == 6
    memory.require_host_memory("a small call", memory.SMALL_REQUEST)  # never read
    assert len(reads) == 6
