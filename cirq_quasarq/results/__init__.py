"""Step 4 of the pipeline: engine output -> Cirq results.

- `records`: packed records -> Cirq's measurement arrays (sliced with the Program's key table).
- `state`: the inverse tableau -> `QuasarqState` (stabilizers, `cirq.CliffordTableau`, state vector).
"""

from .records import last_measurements, records_from_packed, shot_major, unpack_records
from .state import QuasarqState

__all__ = ["last_measurements", "records_from_packed", "shot_major", "unpack_records", "QuasarqState"]
