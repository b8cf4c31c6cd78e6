"""The compiler: `cirq.Circuit` -> `cirq_quasarq.program.Program`.

`compile_circuit(circuit, *, qubit_order, noise, resolver)` compiles (and caches) a circuit;
`compile_template(circuit, *, qubit_order, noise)` compiles it once for any parameter values,
`Template.resolve(resolver)` then gives the Program without walking the circuit again.
"""

from .compile import build_template, clear_cache, compile_circuit, compile_resolved, compile_template
from .template import Template

__all__ = [
    "compile_circuit",
    "compile_template",
    "compile_resolved",
    "build_template",
    "clear_cache",
    "Template",
]
