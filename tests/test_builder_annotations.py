"""The builder's detectors and observable includes given as arrays (`add_detectors`,
`add_observable_includes`) and its record keys (`add_record_keys`) expand, table for table, as one
annotation at a time and `add_key` do, and as the expansion did before it worked in blocks
(tests/annotation_oracle.py)."""

from __future__ import annotations

import types

import numpy as np

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
