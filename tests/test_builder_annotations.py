"""The builder's detectors and observable includes given as arrays (`add_detectors`,
`add_observable_includes`) and its record keys (`add_record_keys`) expand, table for table, as one
annotation at a time and `add_key` do, and as the expansion did before it worked in blocks
(tests/annotation_oracle.py)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from cirq_quasarq.core.program import ProgramBuilder

from . import annotation_oracle


def key_table(program):
    return [(k.key, k.records.dtype, k.records.shape, k.records.tolist()) for k in program.keys]


def assert_annotation_tables_equal(p, q, what=""):
    """The detectors' and observables' arrays themselves, not only what each annotation reads."""
    for mine, theirs in ((p.detectors, q.detectors), (p.observables, q.observables)):
        assert mine.kind == theirs.kind, what
        for field in ("offsets", "records", "coords", "widths", "indexes"):
            a, b = getattr(mine, field), getattr(theirs, field)
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True), (field, what)
            if a.dtype == np.float64:  # -0.0 and 0.0 are equal, but read apart
                assert np.array_equal(np.signbit(a), np.signbit(b)), (field, what)


def _annotated_builder(in_bulk: bool) -> ProgramBuilder:
    """Detectors and includes of ragged records and coordinates, in and out of nested loops with
    coordinate shifts, given one at a time or as arrays."""
    rng = np.random.default_rng(5)
    b = ProgramBuilder(2)

    def annotate():
        m = int(rng.integers(1, 6))
        lengths = rng.integers(0, 4, m)
        widths = rng.integers(0, 4, m)
        records = rng.integers(0, b.num_records, int(lengths.sum())).astype(np.int64)
        values = rng.choice([0.0, -0.0, 0.5, 1.0000001, 3.0], int(widths.sum()))
        offset = b.coord_offset
        coords = [tuple(float(c) + (offset[i] if i < len(offset) else 0.0) for i, c in enumerate(row))
                  for row in np.split(values, np.cumsum(widths)[:-1])]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        index = rng.integers(0, 3, m)
        if in_bulk:
            rows = np.zeros((m, int(widths.max()) if m else 0))
            for i, row in enumerate(coords):
                rows[i, : len(row)] = row
            b.add_detectors(offsets, records, rows, widths.astype(np.int64))
            b.add_observable_includes(index.astype(np.int64), offsets, records)
        else:
            for i in range(m):
                b.add_annotation("detector", records[offsets[i]:offsets[i + 1]], coords[i])
            for i in range(m):
                b.add_annotation("observable", records[offsets[i]:offsets[i + 1]], (), int(index[i]))

    def measure(k):
        first = b.take_records(k)
        b.add_record_keys(first, k)

    measure(3)
    annotate()
    b.shift_coords((1.0, 0.5))
    b.begin_loop(3)
    measure(2)
    annotate()
    b.shift_coords((0.0, 1.0, 2.0))
    b.begin_loop(2)
    measure(1)
    annotate()
    b.shift_coords((0.25,))
    b.end_loop()
    annotate()
    b.end_loop()
    measure(2)
    annotate()
    return b


def test_builder_arrays_equal_one_at_a_time():
    builder = _annotated_builder(False)
    one, bulk = builder.build(), _annotated_builder(True).build()
    assert len(one.detectors) > 20 and len(one.observables) == 3
    detectors, observables = annotation_oracle.expand_annotations(builder)
    assert_annotation_tables_equal(one, types.SimpleNamespace(detectors=detectors, observables=observables))
    assert_annotation_tables_equal(bulk, one)


def test_record_keys_equal_add_key():
    def keys(by_record_keys, twice=False):
        b = ProgramBuilder(1)
        for loops in ((), (3,), (2, 2)):
            for count in loops:
                b.begin_loop(count)
            first = b.take_records(3)
            for _ in range(2 if twice else 1):
                if by_record_keys:
                    b.add_record_keys(first, 3)
                else:
                    for r in range(first, first + 3):
                        b.add_key(str(r), (r,))
            for _ in loops:
                b.end_loop()
        program = b.build()
        assert key_table(program) == key_table(types.SimpleNamespace(keys=annotation_oracle.expand_keys(b)))
        return key_table(program)

    assert keys(True) == keys(False)
    assert keys(True, twice=True) == keys(False, twice=True)  # a slot named twice: its key's instances merge


def _keyed_builder(seed: int, widths=(1,), loops: bool = False, names: bool = False, record_keys: bool = False):
    """Keys given by `add_key` and `add_keys`: a pool of names measured again and again (a key's
    instances from several entries, out of order among the keys), of the given widths; with
    `loops`, some inside a loop; with `names`, one entry naming each iteration; with
    `record_keys`, some records keyed by `add_record_keys`."""
    rng = np.random.default_rng(seed)
    b = ProgramBuilder(4)
    pool = [str(i) for i in range(7)] + ["a:b", "q", ""]
    width_of = {name: int(rng.choice(widths)) for name in pool}

    def some(k):
        # the records taken first, then keyed in another order: entries out of slot order
        chosen = [pool[i] for i in rng.integers(0, len(pool), k)]
        counts = [width_of[name] for name in chosen]
        first = b.take_records(sum(counts))
        rows = np.split(first + np.arange(sum(counts), dtype=np.int64), np.cumsum(counts)[:-1])
        order = rng.permutation(k)
        if rng.random() < 0.5:
            for i in order:
                b.add_key(chosen[i], rows[i])
        else:  # add_keys: the lowerings' bulk form
            b.add_keys([chosen[i] for i in order], [rows[i] for i in order])

    some(5)
    if record_keys:
        b.add_record_keys(b.take_records(3), 3)
    if loops:
        b.begin_loop(3)
        some(4)
        b.end_loop()
    if names:
        b.begin_loop(2)
        b.add_key("r", b.take_records(1) + np.zeros(1, dtype=np.int64), names=["r0", "r1"])
        b.end_loop()
    some(30)
    return b


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("shape", ["outside loops", "widths 1 to 3", "loops", "names", "record keys"])
def test_keys_outside_loops_equal_one_entry_at_a_time(seed, shape):
    """Named keys outside loops of one width are merged at once (`_keys_outside_loops`): the same
    keys, in the same order, their instances in the same order, as one entry at a time; every
    other shape takes the general path (asserted, so that each case tests the path it names)."""
    kwargs = {"outside loops": {}, "widths 1 to 3": {"widths": (1, 2, 3)}, "loops": {"loops": True},
              "names": {"names": True}, "record keys": {"record_keys": True}}[shape]
    b = _keyed_builder(seed, **kwargs)
    assert (b._keys_outside_loops() is not None) == (shape == "outside loops")
    program = b.build()
    want = annotation_oracle.expand_keys(b)
    assert key_table(program) == key_table(types.SimpleNamespace(keys=want))
    assert len(want) >= 8 and max(k.records.shape[0] for k in want) >= 4  # keys measured again and again
    assert all((np.diff(k.records[:, 0]) > 0).all() for k in program.keys)  # by slot, not by entry
