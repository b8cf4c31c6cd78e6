"""The builder's expansion of keys, detectors and observables as it stood before annotations and
record keys were expanded in blocks (one entry at a time, one key per record): the oracle that
`ProgramBuilder._expand_keys` / `_expand_annotations` must equal exactly, for builders given
annotations one at a time (`add_annotation`) and keys by `add_key` / `add_record_keys`."""

from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np

from cirq_quasarq.core.program import Annotation, Annotations, MeasurementKey, ProgramBuilder


def expand_keys(b: ProgramBuilder) -> List[MeasurementKey]:
    grouped: Dict[str, List[np.ndarray]] = {}
    for index, (key, records, loop_ids) in enumerate(b._key_entries):
        shifts = b._shifts(loop_ids)[:, None]
        if key is None:
            for r in records.tolist():
                grouped.setdefault(str(r), []).append(shifts + r)
            continue
        block = shifts + records[None, :] if loop_ids else records[None, :]
        names = b._key_names.get(index)
        if names is None:
            grouped.setdefault(key, []).append(block)
        else:
            for name, row in zip(names, block):
                grouped.setdefault(name, []).append(row[None, :])
    keys = []
    for key, blocks in grouped.items():
        if len(blocks) == 1:
            keys.append(MeasurementKey(key, blocks[0]))
            continue
        recs = np.concatenate(blocks)
        keys.append(MeasurementKey(key, recs[np.argsort(recs[:, 0], kind="stable")]))
    return keys


def expand_annotations(b: ProgramBuilder) -> Tuple[Annotations, Annotations]:
    assert not b._detector_blocks and not b._observable_blocks, "the oracle reads add_annotation's entries"
    groups: Dict[Tuple, List[Tuple[np.ndarray, Tuple[float, ...], int]]] = {}
    included: Dict[int, List[np.ndarray]] = {}
    for kind, records, loop_ids, coords, index, event in b._annotation_entries:
        if kind == "observable":
            shifts = b._shifts(loop_ids)
            included.setdefault(index, []).append((shifts[:, None] + records[None, :]).reshape(-1))
        else:
            groups.setdefault((loop_ids, len(records), len(coords)), []).append((records, coords, event))
    events, lengths, blocks, coord_blocks, widths = [], [], [], [], []
    width = max((w for _, _, w in groups), default=0)
    for (loop_ids, k, w), entries in groups.items():
        shifts = b._shifts(loop_ids)
        recs = np.array([r for r, _, _ in entries], dtype=np.int64).reshape(len(entries), k)
        blocks.append((shifts[:, None, None] + recs[None, :, :]).reshape(-1))
        ev = np.array([e for _, _, e in entries], dtype=np.int64)
        events.append((b._shifts(loop_ids, b._event_strides)[:, None] + ev[None, :]).reshape(-1))
        count = len(shifts) * len(entries)
        lengths.append(np.full(count, k, dtype=np.int64))
        widths.append(np.full(count, w, dtype=np.int64))
        base = np.array([c for _, c, _ in entries], dtype=np.float64).reshape(len(entries), w)
        offsets = b._coord_offsets(loop_ids) if w else None
        block = np.zeros((len(shifts), len(entries), width))
        block[:, :, :w] = base[None, :, :]
        if offsets is not None:
            v = min(w, offsets.shape[1])
            block[:, :, :v] += offsets[:, None, :v]
        coord_blocks.append(block.reshape(count, width))
    if groups:
        grouped = Annotations("detector", np.concatenate([[0], np.cumsum(np.concatenate(lengths))]),
                              np.concatenate(blocks), np.concatenate(coord_blocks), np.concatenate(widths))
        detectors = grouped._take(np.argsort(np.concatenate(events), kind="stable"))
    else:
        detectors = Annotations("detector", [0], [])
    observables = []
    for k in range(max(included, default=-1) + 1):
        parts = included.get(k, [])
        records, counts = np.unique(np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64),
                                    return_counts=True)
        observables.append(Annotation("observable", records[counts % 2 == 1].astype(np.int64), (), k))
    return detectors, Annotations.of(observables) if observables else Annotations("observable", [0], [])
