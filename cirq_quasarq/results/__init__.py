"""Step 4 of the pipeline: engine output -> Cirq results.

- `records`: packed records -> Cirq's measurement arrays (sliced with the Program's key table).
- `state`: the inverse tableau -> `QuasarqState` (stabilizers, `cirq.CliffordTableau`, state vector);
  imported when first used, so that `records` loads without Cirq.
"""

from .records import last_measurements, records_from_packed, shot_major, unpack_records


def __getattr__(name: str):
    if name != "QuasarqState":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .state import QuasarqState

    return QuasarqState


__all__ = ["last_measurements", "records_from_packed", "shot_major", "unpack_records", "QuasarqState"]
