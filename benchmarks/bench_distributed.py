"""Scale-out: rotated surface-code sampling and detector counting from 1 to 2 GPUs through Dask.

    PYTHONPATH=. python3 benchmarks/bench_distributed.py --out results/
    PYTHONPATH=. python3 benchmarks/bench_distributed.py --quick --out /tmp/bench   # a tiny CPU run

One local cluster, one worker process per GPU (cirq_quasarq.distributed.local_gpu_cluster:
CUDA_VISIBLE_DEVICES set per worker, one thread each); with --quick, two CPU worker processes and
the NumPy engine. Circuits: Stim's rotated memory-Z surface code through stimcirq
(benchmarks/circuits.py), rounds = d, every noise knob p = 1e-3, d = 25 and d = 51.

Per (d, kind), with kind
  sample    every measurement record, bit-packed, into the worker's host memory; each shard is
            reduced there to an XOR checksum per record (distributed.xor_rows), so nothing large
            travels and no host ever holds all the shots;
  checksum  the same XOR checksum computed by the engine where it samples
            (iter_shards(reduce="xor"): on a GPU only one word per record leaves the device); its
            digest must equal sample's;
  count     detection events of every detector and observable, counted by the engine where it
            samples (distributed.count_detection_events);
the program is shipped and warmed on every worker (kernels, reference sample, upload), then a short
1-GPU run calibrates the shot count so that the 1-GPU run takes --target-seconds (or --shots
fixes it), and the same call (same seed, same shots) runs on 1 then 2 GPUs. Reported: wall time of
the call, shots/s, scaling efficiency t1 / (n * tn), and whether the 1- and n-GPU results are
identical (they must be: the sharding contract). Writes bench_distributed.jsonl (one JSON object
per run) and bench_distributed.txt (the table) to --out (default: $OUT, else ./bench-distributed).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import time
import zlib

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import cirq_quasarq  # noqa: E402
from cirq_quasarq import distributed as qd  # noqa: E402


def _xor_checksum(shard):
    """Worker side: a shard's records (in the worker's host memory) reduced to one XOR word per record."""
    return qd.xor_rows(shard.data, shard.shots)


def _parse_map(entries, kinds=False):
    out = {}
    for entry in entries or []:
        for item in entry.split(","):
            parts = item.split(":")
            if kinds:
                out[(int(parts[0]), parts[1])] = int(float(parts[2]))
            else:
                out[int(parts[0])] = int(float(parts[1]))
    return out


def _gpu_names():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return []


def _run_kind(sampler, kind, circuit, shots):
    """(digest, detail) of one call: identical digests mean identical bits."""
    if kind in ("sample", "checksum"):
        acc = None
        reduce = _xor_checksum if kind == "sample" else "xor"
        for shard in sampler.iter_shards(circuit, shots, what="records", reduce=reduce):
            acc = shard.data if acc is None else acc ^ shard.data
        return f"{zlib.crc32(acc.tobytes()):08x}", {}
    counts = sampler.count_detection_events(circuit, shots)
    both = np.concatenate([counts.detectors, counts.observables])
    return f"{zlib.crc32(both.tobytes()):08x}", {"detection_events": int(counts.detectors.sum()),
                                                 "observable_flips": [int(v) for v in counts.observables]}


def _timed(sampler, kind, circuit, shots, seed):
    sampler.simulator = cirq_quasarq.QuasarqSimulator(seed=seed, device="cpu")  # the same key every run
    t0 = time.perf_counter()
    digest, detail = _run_kind(sampler, kind, circuit, shots)
    return time.perf_counter() - t0, digest, detail


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "bench-distributed")
    ap.add_argument("--quick", action="store_true", help="a tiny CPU run (d=3, 5; NumPy engine)")
    ap.add_argument("--distances", type=int, nargs="+")
    ap.add_argument("--kinds", nargs="+", default=["sample", "checksum", "count"],
                    choices=["sample", "checksum", "count"])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker (GPU) counts to time")
    ap.add_argument("--device", choices=["gpu", "cpu", "auto"])
    ap.add_argument("--p", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--shard-shots", nargs="*", help="D:SHOTS per shard, e.g. 25:131072,51:16384")
    ap.add_argument("--shots", nargs="*", help="D:KIND:SHOTS fixed shot counts (no calibration), e.g. 25:count:4e7")
    ap.add_argument("--target-seconds", type=float, help="calibrated duration of the 1-worker run")
    ap.add_argument("--max-shots", type=float, default=1e11)
    ap.add_argument("--budget-seconds", type=float, default=420.0,
                    help="skip the cases left once this much wall time has passed")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()

    quick = args.quick
    device = args.device or ("cpu" if quick else "gpu")
    distances = args.distances or ([3, 5] if quick else [25, 51])
    target = args.target_seconds or (1.0 if quick else 12.0)
    shard_shots = {3: 2048, 5: 2048, 25: 1 << 17, 51: 1 << 14}
    shard_shots.update(_parse_map(args.shard_shots))
    fixed = _parse_map(args.shots, kinds=True)
    n_max = max(args.workers)
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    jsonl = out_dir / "bench_distributed.jsonl"
    txt = out_dir / "bench_distributed.txt"

    import dask
    import distributed

    from benchmarks.circuits import surface_code_cirq

    env = {"python": platform.python_version(), "dask": dask.__version__, "distributed": distributed.__version__,
           "cirq_quasarq": cirq_quasarq.__version__, "host_cpus": os.cpu_count(), "device": device,
           "gpus": _gpu_names() if device != "cpu" else [], "argv": sys.argv[1:]}
    print(json.dumps(env), flush=True)

    t0 = time.perf_counter()
    if device == "cpu":
        cluster = distributed.LocalCluster(n_workers=n_max, threads_per_worker=1, processes=True,
                                           dashboard_address=":0", silence_logs=40)
    else:
        gpus = qd.visible_gpus()
        if len(gpus) < n_max:
            raise SystemExit(f"{n_max} GPUs wanted, {len(gpus)} visible ({gpus})")
        cluster = qd.local_gpu_cluster(gpus[:n_max], silence_logs=40)
    client = distributed.Client(cluster)
    client.wait_for_workers(n_max, timeout=300)
    info = qd._workers_info(client)
    addresses = sorted(info, key=lambda a: str(info[a].get("name")))
    cluster_s = time.perf_counter() - t0
    print(f"cluster of {n_max} workers up in {cluster_s:.1f} s: "
          f"{[info[a].get('name') for a in addresses]}", flush=True)

    rows = []
    with open(jsonl, "w") as log:
        log.write(json.dumps({"environment": env, "cluster_start_s": cluster_s}) + "\n")
        for d in distances:
            if time.perf_counter() - t_start > args.budget_seconds:
                print(f"budget spent: skipping d={d}", flush=True)
                break
            t0 = time.perf_counter()
            circuit, _ = surface_code_cirq(d, d, args.p)
            program = cirq_quasarq.QuasarqSimulator(device="cpu").compile(circuit)
            build_s = time.perf_counter() - t0
            per_shard = shard_shots.get(d, 1 << 14)
            sampler = qd.DistributedSampler(args.seed, client=client, device=device, shard_words=per_shard // 64)
            for kind in args.kinds:
                if time.perf_counter() - t_start > args.budget_seconds:
                    print(f"budget spent: skipping d={d} {kind}", flush=True)
                    break
                # Warm every worker: the program shipped, kernels compiled, reference, upload.
                t0 = time.perf_counter()
                for address in addresses:
                    sampler.workers = [address]
                    _run_kind(sampler, kind, circuit, per_shard)
                warm_s = time.perf_counter() - t0
                sampler.workers = addresses[:1]
                shots = fixed.get((d, kind))
                calibration = None
                if shots is None:  # a short 1-worker run sets the shot count for --target-seconds
                    probe = 4 * per_shard
                    t_probe, _, _ = _timed(sampler, kind, circuit, probe, args.seed)
                    calibration = probe / t_probe
                    shards = max(8 * n_max, int(np.ceil(calibration * target / per_shard)))
                    shots = int(min(args.max_shots, shards * per_shard))
                results = {}
                for n in args.workers:
                    sampler.workers = addresses[:n]
                    seconds, digest, detail = _timed(sampler, kind, circuit, shots, args.seed)
                    results[n] = (seconds, digest)
                    row = {"d": d, "kind": kind, "workers": n, "shots": shots, "seconds": seconds,
                           "shots_per_s": shots / seconds, "shard_shots": per_shard, "digest": digest,
                           "qubits": program.num_qubits, "records": program.num_records,
                           "detectors": len(program.detectors), "build_s": build_s, "warm_s": warm_s,
                           "calibrated_shots_per_s": calibration, **detail}
                    if n != args.workers[0] and args.workers[0] in results:
                        t1, d1 = results[args.workers[0]]
                        row["efficiency"] = (t1 * args.workers[0]) / (n * seconds)
                        row["identical_to_first"] = digest == d1
                    rows.append(row)
                    log.write(json.dumps(row) + "\n")
                    log.flush()
                    print(json.dumps(row), flush=True)

    client.close()
    cluster.close()

    lines = [f"cirq_quasarq.distributed: rotated surface code, rounds = d, p = {args.p}, device = {device}, "
             f"workers = one per {'GPU' if device != 'cpu' else 'CPU process'}",
             f"{'d':>3} {'kind':>8} {'workers':>7} {'shots':>13} {'seconds':>8} {'shots/s':>12} "
             f"{'efficiency':>10} {'identical':>9}"]
    for r in rows:
        eff = f"{r['efficiency']:.3f}" if "efficiency" in r else "-"
        same = str(r["identical_to_first"]) if "identical_to_first" in r else "-"
        lines.append(f"{r['d']:>3} {r['kind']:>8} {r['workers']:>7} {r['shots']:>13,} {r['seconds']:>8.2f} "
                     f"{r['shots_per_s']:>12.4g} {eff:>10} {same:>9}")
    lines.append(f"efficiency = t1 / (n * tn); cluster start {cluster_s:.1f} s; "
                 f"total wall {time.perf_counter() - t_start:.1f} s")
    table = "\n".join(lines)
    txt.write_text(table + "\n")
    print(table, flush=True)


if __name__ == "__main__":
    main()
