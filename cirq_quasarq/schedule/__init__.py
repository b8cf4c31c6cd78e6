"""Step 2 of the pipeline: Program -> windows of instructions on disjoint qubits."""

from .windows import Schedule, Scheduler, joined, schedule

__all__ = ["Schedule", "Scheduler", "schedule", "joined"]
