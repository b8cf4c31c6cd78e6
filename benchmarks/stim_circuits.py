"""Benchmark circuits from Stim alone (no Cirq import): what a script of Stim and sinter, and each
of sinter's worker processes, has. `benchmarks.circuits` re-exports them beside its Cirq circuits."""

from __future__ import annotations


def surface_code_stim(d: int, rounds: int, p: float, basis: str = "z"):
    """Stim's rotated surface-code memory experiment in `basis` with every noise knob set to `p`."""
    import stim

    return stim.Circuit.generated(
        f"surface_code:rotated_memory_{basis}",
        distance=d,
        rounds=rounds,
        after_clifford_depolarization=p,
        before_measure_flip_probability=p,
        after_reset_flip_probability=p,
        before_round_data_depolarization=p,
    )
