"""Step 2 of the pipeline: Program -> windows of instructions on disjoint qubits."""

from .windows import Schedule, schedule

__all__ = ["Schedule", "schedule"]
