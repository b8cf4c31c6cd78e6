"""The NumPy engine as the CUDA engine's oracle at QEC shapes: the same seed gives the same bits
on both, for surface codes of distance 25 and 51 (Stim's generated circuits, every noise knob on)
with extra logical observables declared out of order, accumulated over rounds inside the REPEAT
block and over several includes: records, detection events and observable flips, bit-packed and
not, through `QuasarqSimulator`."""

from __future__ import annotations

import numpy as np
import pytest

from cirq_quasarq import QuasarqSimulator
from cirq_quasarq.engines import cuda_available

stim = pytest.importorskip("stim")

pytestmark = pytest.mark.gpu


def multi_observable_surface_code(distance: int) -> "stim.Circuit":
    """Stim's rotated memory-Z circuit with observables 3 and 1 besides 0: observable 1 takes a
    record of every round (an include inside the REPEAT block), observable 3 two includes at the end
    (one naming a record observable 0 names too); observable 2 is never included."""
    c = stim.Circuit.generated("surface_code:rotated_memory_z", distance=distance, rounds=distance,
                               after_clifford_depolarization=1e-3, before_round_data_depolarization=1e-3,
                               before_measure_flip_probability=1e-3, after_reset_flip_probability=1e-3)
    text = str(c).splitlines()
    close = max(i for i, line in enumerate(text) if line.strip() == "}")
    text.insert(close, "    OBSERVABLE_INCLUDE(1) rec[-1]")
    text += ["OBSERVABLE_INCLUDE(3) rec[-1] rec[-2]", "OBSERVABLE_INCLUDE(3) rec[-3]"]
    return stim.Circuit("\n".join(text))


@pytest.mark.parametrize("distance,shots", [(25, 1000), (51, 300)])
def test_cuda_engine_equals_numpy_engine_on_surface_codes(distance, shots):
    if not cuda_available():
        pytest.skip("no CUDA GPU / PyCUDA on this machine")
    circuit = multi_observable_surface_code(distance)
    assert circuit.num_observables == 4
    results = {}
    for device in ("gpu", "cpu"):
        sim = QuasarqSimulator(seed=distance, device=device)
        results[device] = (sim.sample_measurements(circuit, shots, bit_packed=True),
                           *sim.sample_detectors(circuit, shots, separate_observables=True),
                           sim.sample_detectors(circuit, shots, append_observables=True, bit_packed=True))
    for name, gpu, cpu in zip(("records", "detectors", "observables", "detectors+observables"),
                              results["gpu"], results["cpu"]):
        assert gpu.shape == cpu.shape and gpu.dtype == cpu.dtype, name
        assert np.array_equal(gpu, cpu), name
    obs = results["gpu"][2]
    assert obs.shape == (shots, 4) and not obs[:, 2].any()  # observable 2 never included
