"""Step 1 of the pipeline: `cirq.Circuit` -> `cirq_quasarq.core.program.Program`.

`compile_circuit(circuit, *, qubit_order, noise, resolver)` compiles (and caches) a circuit;
`compile_template(circuit, *, qubit_order, noise)` compiles it once for any parameter values,
`Template.resolve(resolver)` then gives the Program without walking the circuit again.

Inside: `registry.py` (the one table from Cirq operations to lowerings, and its lookup order),
`cliffords.py` / `channels.py` / `lowerings.py` (the lowerings it lists), `walker.py` (the walk
over moments, subcircuits and classical control, on the `emitter.Emitter` state), `template.py`
(parametrized slots), `keys.py` / `conditions.py` (measurement keys, classical conditions),
`cache.py`.
"""

from .compile import build_template, clear_cache, compile_circuit, compile_resolved, compile_template
from .stim_circuit import compile_stim
from .template import Template

__all__ = [
    "compile_circuit",
    "compile_template",
    "compile_resolved",
    "compile_stim",
    "build_template",
    "clear_cache",
    "Template",
]
