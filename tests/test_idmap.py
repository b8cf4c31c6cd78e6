"""The compiler's bulk id lookups (`compiler/idmap.py`) against a dict, and a circuit's qubit set
(`compile.circuit_qubits`) against Cirq's `all_qubits()`."""

from __future__ import annotations

import cirq
import numpy as np
import pytest

from cirq_quasarq.compiler.compile import circuit_qubits, clear_cache
from cirq_quasarq.compiler.idmap import IdMap


def _check(ids: np.ndarray, values: np.ndarray, queries: np.ndarray) -> None:
    table = dict(zip(ids.tolist(), values.tolist()))
    got, every = IdMap(ids, values).lookup(queries)
    want = np.array([table.get(q, -1) for q in queries.tolist()], dtype=np.int64)
    np.testing.assert_array_equal(got, want)
    assert every == all(q in table for q in queries.tolist())


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 100, 4096, 20000])
def test_lookup_equals_a_dict(n):
    rng = np.random.default_rng(n)
    for _ in range(5):
        ids = np.unique(rng.integers(1, 2**44, size=n)) * 16  # CPython's objects: 16-byte aligned
        values = rng.permutation(len(ids)).astype(np.int64)
        absent = rng.integers(1, 2**44, size=40) * 16
        _check(ids, values, rng.permutation(np.concatenate([np.repeat(ids, 2), absent])))
        _check(ids, values, rng.permutation(ids))
        _check(ids, values, np.zeros(0, dtype=np.int64))


def test_collisions_and_long_probes():
    """Ids that share the top four bits of their hash: a map of twelve of them has 64 slots, so
    they fall on four neighbouring home slots and go several slots on; absent ids probe past
    them; the cluster at the table's end wraps around to its start."""
    rng = np.random.default_rng(7)
    candidates = np.unique(rng.integers(1, 2**40, size=200_000)) * 16
    with np.errstate(over="ignore"):
        top = ((candidates.view(np.uint64) >> np.uint64(4)) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(60)
    for bucket in (0, 15, 5):  # slots 0-3, 60-63 (wrapping) and 20-23 of 64
        same = candidates[top == bucket][:12]
        assert len(same) == 12
        values = np.arange(12, dtype=np.int64)
        table = IdMap(same, values)
        assert table._probes >= 2
        _check(same, values, np.concatenate([same, candidates[top == bucket][12:20], candidates[:50]]))


def test_ids_given_twice_are_refused():
    with pytest.raises(ValueError, match="twice"):
        IdMap(np.array([16, 32, 16]), np.array([0, 1, 2]))


def test_object_ids():
    objects = [object() for _ in range(3000)]
    ids = np.array([id(o) for o in objects], dtype=np.int64)
    _check(ids, np.arange(len(ids), dtype=np.int64), np.concatenate([ids[::-1], [id(object())]]))


def _circuits():
    q = cirq.LineQubit.range(6)
    g = cirq.GridQubit.rect(2, 3)
    sub = cirq.FrozenCircuit(cirq.H(q[4]), cirq.CX(q[4], q[5]))
    return [
        cirq.Circuit(),
        cirq.Circuit(cirq.Moment()),
        cirq.Circuit(cirq.H(q[0]), cirq.CZ(q[1], q[2]), cirq.measure(*q[:3], key="m")),
        cirq.Circuit(cirq.H.on_each(*g), cirq.Moment(), cirq.measure(g[0], key="a")),
        cirq.Circuit(cirq.CircuitOperation(sub), cirq.X(q[0]).with_classical_controls("a")),
        cirq.FrozenCircuit(cirq.H(q[3]), cirq.CX(q[3], q[1])),
        cirq.Circuit(cirq.H(cirq.NamedQubit("x")), cirq.depolarize(0.1).on(cirq.LineQid(7, 2))),
    ]


@pytest.mark.parametrize("index", range(len(_circuits())))
def test_circuit_qubits_are_all_qubits(index):
    clear_cache()
    circuit = _circuits()[index]
    assert circuit_qubits(circuit) == circuit.all_qubits()
    assert circuit_qubits(circuit) == circuit.all_qubits()  # from the cache


def test_circuit_qubits_follow_a_changed_circuit():
    clear_cache()
    a, b, c = cirq.LineQubit.range(3)
    circuit = cirq.Circuit(cirq.H(a))
    assert circuit_qubits(circuit) == {a}
    circuit.append(cirq.CX(b, c))
    assert circuit_qubits(circuit) == {a, b, c}
    circuit[0] = cirq.Moment(cirq.X(c))
    assert circuit_qubits(circuit) == circuit.all_qubits()
