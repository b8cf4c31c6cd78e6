"""cirq_quasarq.distributed: sharded == unsharded, bit for bit, for the same seed.

Local CPU clusters of 1, 2, 3 and 7 threaded workers (cheap to start) check run, run_sweep,
sample_measurements, sample_detectors, the reductions on the workers and sinter-style collection
against the single-process QuasarqSimulator; a cluster of two worker processes (built by
local_gpu_cluster with stand-in device names, the NumPy engine on each) checks that a worker
killed while its shards are in flight leaves the result unchanged.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import cirq
import numpy as np
import pytest
import sympy

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")
stim = pytest.importorskip("stim")
stimcirq = pytest.importorskip("stimcirq")

import cirq_quasarq  # noqa: E402
from cirq_quasarq import distributed as qd  # noqa: E402
from cirq_quasarq.errors import DeviceUnavailableError, InvalidInputError  # noqa: E402

WORKERS = [1, 2, 3, 7]


def _sim(seed, **kwargs):
    return cirq_quasarq.QuasarqSimulator(seed=seed, device="cpu", **kwargs)


@pytest.fixture(scope="module", params=WORKERS, ids=lambda n: f"{n}w")
def client(request):
    cluster = distributed.LocalCluster(n_workers=request.param, threads_per_worker=1, processes=False,
                                       dashboard_address=None)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.fixture(scope="module")
def surface():
    sc = stim.Circuit.generated("surface_code:rotated_memory_z", distance=3, rounds=3,
                                after_clifford_depolarization=0.02, before_measure_flip_probability=0.02,
                                after_reset_flip_probability=0.02, before_round_data_depolarization=0.02)
    return sc, stimcirq.stim_circuit_to_cirq_circuit(sc)


def _feedback_circuit():
    """Measurement keys, noise, confusion, a classically controlled Pauli and a repeated block."""
    a, b, c = cirq.LineQubit.range(3)
    body = cirq.Circuit(cirq.H(a), cirq.CX(a, b), cirq.depolarize(0.1).on(b), cirq.measure(b, key="loop"),
                        cirq.reset(b))
    return cirq.Circuit(
        cirq.H(a), cirq.CX(a, c), cirq.measure(a, key="m"),
        cirq.X(c).with_classical_controls("m"),
        cirq.CircuitOperation(body.freeze(), repetitions=3, use_repetition_ids=True),
        cirq.bit_flip(0.2).on(c),
        cirq.measure(a, b, c, key="end", confusion_map={(0,): np.array([[0.8, 0.2], [0.1, 0.9]])}),
    )


# --------------------------------------------------------------------------- a worker dies mid-run
def test_a_killed_worker_leaves_the_result_unchanged(surface, tmp_path):
    """Two worker processes (local_gpu_cluster's recipe, stand-in device names, NumPy engine);
    one is killed while shards are in flight: its shards are re-run elsewhere, same bits."""
    sc, _ = surface
    shots = 64 * 24
    sim = _sim(31)
    want = sim.sample_packed(sim.compile(sc), shots)

    log = str(tmp_path / "started")
    held = 5  # this shard's first run waits until its worker is killed: surely in flight then

    def slow(shard):  # a reduction that logs each start
        with open(log, "a") as f:
            f.write(f"{shard.index}:{os.getpid()}\n")
        first = [line.split(":")[0] for line in open(log).read().split()].count(str(shard.index)) == 1
        time.sleep(120 if shard.index == held and first else 0.05)
        return shard.data

    # Workers forked from this process start in well under a second (spawned ones import Cirq).
    with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}), \
            qd.local_gpu_cluster(["stand-in-0", "stand-in-1"], silence_logs=50) as cluster, \
            distributed.Client(cluster) as client:
        client.wait_for_workers(2, timeout=60)
        assert sorted(client.run(lambda: os.environ["CUDA_VISIBLE_DEVICES"]).values()) == ["stand-in-0",
                                                                                          "stand-in-1"]
        seen = np.zeros_like(want)
        received, killed = set(), None
        for shard in qd.iter_shards(_sim(31), sc, shots, client=client, shard_words=1, reduce=slow):
            seen[:, shard.first_word] = shard.data[:, 0]
            received.add(shard.index)
            started = [line.split(":") for line in open(log).read().split()]
            if killed is None and any(index == str(held) for index, _ in started):
                killed = next(entry for entry in started if entry[0] == str(held))  # held: in flight
                os.kill(int(killed[1]), signal.SIGKILL)
        assert killed is not None and received == set(range(24))
    assert np.array_equal(seen, want)
    started = [line.split(":")[0] for line in open(log).read().split()]
    assert started.count(killed[0]) >= 2 and set(started) == {str(i) for i in range(24)}  # ran again


# --------------------------------------------------------------------------- sharded == unsharded
@pytest.mark.parametrize("shard_words", [1, None])
def test_run_equals_unsharded(client, surface, shard_words):
    _, cc = surface
    for circuit, reps in ((cc, 64 * 9 + 7), (_feedback_circuit(), 500)):
        want = _sim(11).run(circuit, repetitions=reps)
        got = qd.run(_sim(11), circuit, repetitions=reps, client=client, shard_words=shard_words)
        assert got == want
    # A noise model, and the simulator's random state advanced as its own call advances it.
    local, remote = _sim(5, noise=cirq.depolarize(0.05)), _sim(5, noise=cirq.depolarize(0.05))
    circuit = _feedback_circuit()
    for _ in range(2):
        assert qd.run(remote, circuit, repetitions=300, client=client, shard_words=shard_words) == \
            local.run(circuit, repetitions=300)


def test_run_sweep_equals_unsharded(client):
    q0, q1 = cirq.LineQubit.range(2)
    t = sympy.Symbol("t")
    circuit = cirq.Circuit(cirq.X(q0) ** t, cirq.CX(q0, q1), cirq.depolarize(0.1).on_each(q0, q1),
                           cirq.measure(q0, q1, key="m"))
    sweep = cirq.Points("t", [0.0, 0.5, 1.0])
    want = _sim(21).run_sweep(circuit, sweep, repetitions=700)
    got = qd.run_sweep(_sim(21), circuit, sweep, repetitions=700, client=client, shard_words=2)
    assert list(got) == list(want)
    sampler = qd.DistributedSampler(_sim(21), client=client, shard_words=4)
    assert isinstance(sampler, cirq.Sampler)
    assert sampler.run_sweep(circuit, sweep, repetitions=700) == list(want)
    assert [r.params for r in sampler.run_sweep(circuit, sweep, repetitions=0)] == [r.params for r in want]


def test_sample_detectors_and_measurements_equal_unsharded(client, surface):
    sc, cc = surface
    shots = 64 * 20 + 3
    cases = [(sc, {}), (sc, {"append_observables": True}), (sc, {"separate_observables": True}),
             (sc, {"separate_observables": True, "bit_packed": True}), (cc, {"bit_packed": True})]
    several = stim.Circuit(str(sc) + "\nOBSERVABLE_INCLUDE(3) rec[-1]\nOBSERVABLE_INCLUDE(2) rec[-2] rec[-1]")
    cases.append((several, {"separate_observables": True}))
    # heralds, MPAD and a Pauli-target observable: records through scratch qubits, a readout for detectors
    heralded = stim.Circuit(str(sc) + "\nHERALDED_ERASE(0.2) 0 1\nMPAD(0.1) 1\nOBSERVABLE_INCLUDE(1) X0 Z2 rec[-1]"
                                      "\nDETECTOR rec[-2]")
    cases += [(heralded, {"separate_observables": True}), (heralded, {"append_observables": True, "bit_packed": True})]
    for circuit, kwargs in cases:
        want = _sim(7).sample_detectors(circuit, shots, **kwargs)
        got = qd.sample_detectors(_sim(7), circuit, shots, client=client, shard_words=3, **kwargs)
        for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            assert w.dtype == g.dtype and np.array_equal(w, g), kwargs
        if circuit is several:
            assert got[1].shape == (shots, 4)  # Stim's numbering: observables 0..3
    for circuit in (sc, heralded):
        for bit_packed in (False, True):
            want = _sim(8).sample_measurements(circuit, shots, bit_packed=bit_packed)
            got = qd.sample_measurements(_sim(8), circuit, shots, client=client, shard_words=2, bit_packed=bit_packed)
            assert want.dtype == got.dtype and np.array_equal(want, got)


def test_reductions_on_the_workers(client, surface):
    sc, _ = surface
    shots = 64 * 31 + 9
    dets, obs = _sim(3).sample_detectors(sc, shots, separate_observables=True)
    counts = qd.count_detection_events(_sim(3), sc, shots, client=client, shard_words=4)
    assert counts.shots == shots
    assert np.array_equal(counts.detectors, dets.sum(axis=0)) and np.array_equal(counts.observables, obs.sum(axis=0))

    import sinter

    from cirq_quasarq.sinter import count_errors

    dets, obs = _sim(4).sample_detectors(sc, shots, separate_observables=True, bit_packed=True)
    decoder = sinter.BUILT_IN_DECODERS["pymatching"].compile_decoder_for_dem(
        dem=sc.detector_error_model(decompose_errors=True))
    errors, discards = count_errors(decoder, dets, obs)
    got = qd.count_logical_errors(_sim(4), sc, shots, client=client, shard_words=5)
    assert (got.shots, got.errors, got.discards) == (shots, errors, discards) and errors > 0


def test_iter_shards_stream_and_custom_reduce(client, surface):
    sc, _ = surface
    shots = 64 * 12 + 40
    sim = _sim(9)
    program = sim.compile(sc)
    want = sim.sample_packed(program, shots)
    seen = np.zeros_like(want)
    shards = list(qd.iter_shards(_sim(9), sc, shots, client=client, shard_words=5))
    assert sorted(s.index for s in shards) == list(range(len(shards))) == list(range(3))
    assert sum(s.shots for s in shards) == shots
    for s in shards:
        seen[:, s.first_word : s.first_word + s.data.shape[1]] = s.data
    mask = np.uint64((1 << (shots % 64)) - 1)
    seen[:, -1] &= mask
    want[:, -1] &= mask
    assert np.array_equal(seen, want)
    # Any reduction runs on the workers; only its value comes back.
    ones = sum(s.data for s in qd.iter_shards(_sim(9), sc, shots, client=client, shard_words=5,
                                              reduce=lambda s: int(qd.popcount_rows(s.data, s.shots).sum())))
    assert ones == int(np.unpackbits(want.view(np.uint8), bitorder="little").sum())


def test_engine_reductions_combine_across_shards(client, surface):
    """reduce="xor" / "popcount": the engine folds each row over the shard's shots; XORs and sums
    of the shards equal the same fold of one unsharded call."""
    sc, _ = surface
    shots = 64 * 13 + 21
    sim = _sim(12)
    program = sim.compile(sc)
    want = qd.xor_rows(sim.sample_packed(program, shots), shots)
    got = np.zeros_like(want)
    for shard in qd.iter_shards(_sim(12), sc, shots, client=client, shard_words=3, reduce="xor"):
        got ^= shard.data
    assert np.array_equal(got, want) and want.any()
    dets, obs = _sim(14).sample_detectors(sc, shots, separate_observables=True)
    total = sum(s.data.astype(np.int64) for s in qd.iter_shards(_sim(14), sc, shots, what="parities",
                                                                  client=client, shard_words=2, reduce="popcount"))
    assert np.array_equal(total, np.concatenate([dets.sum(axis=0), obs.sum(axis=0)]))


def test_classically_controlled_gates(client):
    """Shot branching: split where it splits exactly (decisions inside loops), else one shard."""
    q0, q1 = cirq.LineQubit.range(2)
    plain = cirq.Circuit(cirq.H(q0), cirq.measure(q0, key="m"), cirq.H(q1).with_classical_controls("m"),
                         cirq.S(q1).with_classical_controls("m"), cirq.measure(q1, key="r"))
    body = cirq.Circuit(cirq.H(q0), cirq.measure(q0, key="m"), cirq.H(q1).with_classical_controls("m"),
                        cirq.measure(q1, key="r"))
    looped = cirq.Circuit(cirq.CircuitOperation(body.freeze(), repetitions=2, use_repetition_ids=True))
    for circuit, shots in ((plain, 64 * 5 + 1), (looped, 150)):
        want = _sim(13).run(circuit, repetitions=shots)
        assert qd.run(_sim(13), circuit, repetitions=shots, client=client, shard_words=1) == want


def test_no_client_is_todays_behaviour(surface):
    sc, cc = surface
    assert qd.run(_sim(1), cc, repetitions=333) == _sim(1).run(cc, repetitions=333)
    assert qd.run(_sim(1), cc, repetitions=333, shard_words=2) == _sim(1).run(cc, repetitions=333)
    want = _sim(2).sample_detectors(sc, 999)
    assert np.array_equal(qd.sample_detectors(_sim(2), sc, 999, shard_words=1), want)
    assert np.array_equal(qd.sample_detectors(2, sc, 999, device="cpu"), want)  # a seed is a simulator's seed


def test_collect_is_deterministic_whatever_the_workers(client, surface):
    import sinter

    sc, _ = surface
    tasks = [sinter.Task(circuit=sc, json_metadata={"d": 3}),
             sinter.Task(circuit=sc, decoder="pymatching", json_metadata={"d": 3, "again": 1})]
    common = dict(max_shots=64 * 40, seed=17, device="cpu", shard_words=4)
    want = qd.collect(tasks, **common)
    got = qd.collect(tasks, client=client, **common)
    assert [(s.shots, s.errors, s.discards, s.strong_id) for s in got] == \
        [(s.shots, s.errors, s.discards, s.strong_id) for s in want]
    assert all(s.shots == 64 * 40 and s.decoder == "pymatching" for s in got)
    # With max_errors: the shortest prefix of shards reaching it, the same on any cluster.
    want = qd.collect(tasks[:1], max_errors=5, **common)
    got = qd.collect(tasks[:1], max_errors=5, client=client, **common)
    assert (got[0].shots, got[0].errors) == (want[0].shots, want[0].errors)
    assert want[0].errors >= 5 and want[0].shots < 64 * 40 and want[0].shots % 256 == 0


def test_a_sampler_restricted_to_some_workers(client, surface):
    sc, _ = surface
    first = sorted(client.scheduler_info(n_workers=-1)["workers"])[0]
    sampler = qd.DistributedSampler(_sim(41), client=client, workers=[first], shard_words=2)
    assert sampler._threads() == 1
    want = _sim(41).sample_detectors(sc, 1000, bit_packed=True)
    assert np.array_equal(sampler.sample_detectors(sc, 1000, bit_packed=True), want)


# --------------------------------------------------------------------------- GPU workers
def _need_gpu():
    from cirq_quasarq.engines import cuda_available

    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")


@pytest.mark.gpu
def test_gpu_workers_in_this_process(surface):
    """Threaded workers share this process's CUDA engine through one device thread, even when the
    engine was made on the main thread; GPU shards equal the NumPy engine's single call."""
    _need_gpu()
    sc, cc = surface
    gpu = cirq_quasarq.QuasarqSimulator(seed=3, device="gpu")
    assert gpu.run(cc, repetitions=100) == _sim(3).run(cc, repetitions=100)  # the engine, on this thread
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        for shard_words in (1, 7):
            sim = cirq_quasarq.QuasarqSimulator(seed=5, device="gpu")
            assert qd.run(sim, cc, repetitions=64 * 30 + 3, client=c, shard_words=shard_words) == \
                _sim(5).run(cc, repetitions=64 * 30 + 3)
            got = qd.sample_detectors(6, sc, 5000, client=c, device="gpu", shard_words=shard_words,
                                      separate_observables=True, bit_packed=True)
            want = _sim(6).sample_detectors(sc, 5000, separate_observables=True, bit_packed=True)
            assert all(np.array_equal(g, w) for g, w in zip(got, want))
            counts = qd.count_detection_events(7, sc, 5000, client=c, device="gpu", shard_words=shard_words)
            dets = _sim(7).sample_detectors(sc, 5000)
            assert np.array_equal(counts.detectors, dets.sum(axis=0))


@pytest.mark.gpu
def test_one_worker_process_per_gpu(surface):
    """local_gpu_cluster on the GPUs of this machine (spawned workers): same bits as one call."""
    _need_gpu()
    sc, cc = surface
    gpus = qd.visible_gpus()[:2]
    with qd.local_gpu_cluster(gpus, silence_logs=50) as cluster, distributed.Client(cluster) as c:
        c.wait_for_workers(len(gpus), timeout=300)
        got = qd.run(9, cc, repetitions=64 * 50, client=c, device="gpu", shard_words=4)
        assert got == _sim(9).run(cc, repetitions=64 * 50)
        counts = qd.count_detection_events(10, sc, 64 * 50, client=c, device="gpu", shard_words=3)
        assert np.array_equal(counts.detectors, _sim(10).sample_detectors(sc, 64 * 50).sum(axis=0))


# --------------------------------------------------------------------------- packaging
def test_nothing_of_dask_is_imported_unless_used():
    code = ("import sys, cirq_quasarq, cirq_quasarq.distributed; "
            "bad = [m for m in ('dask', 'distributed') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_local_gpu_cluster_needs_a_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert qd.visible_gpus() == []
    with pytest.raises(DeviceUnavailableError):
        qd.local_gpu_cluster()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 5")
    assert qd.visible_gpus() == ["2", "5"]


def test_runs_past_the_counter_period_warn(surface):
    sc, _ = surface
    with pytest.warns(UserWarning, match="2\\*\\*62"):
        shards = qd.iter_shards(1, sc, qd.SHOTS_PER_KEY + 1, device="cpu", what="parities")
    shards.close()  # nothing was sampled: the shards are made as they are consumed


def test_bad_arguments():
    with pytest.raises(ValueError):
        qd.DistributedSampler(1, device="tpu")
    q = cirq.LineQubit(0)
    with pytest.raises(ValueError):
        qd.iter_shards(1, cirq.Circuit(cirq.measure(q)), 10, what="everything", device="cpu")
    with pytest.raises(InvalidInputError, match="reduce='popcount'.*what='detectors'"):
        qd.iter_shards(1, cirq.Circuit(cirq.measure(q)), 10, what="detectors", reduce="popcount", device="cpu")
    with pytest.raises(InvalidInputError, match="reduce='sum'"):
        qd.iter_shards(1, cirq.Circuit(cirq.measure(q)), 10, reduce="sum", device="cpu")
    with pytest.raises(ValueError, match="no measurements"):
        qd.run(1, cirq.Circuit(cirq.H(q)), repetitions=3, device="cpu")
