"""Step 1 of the pipeline: `cirq.Circuit` -> `cirq_quasarq.core.program.Program`.

`compile_circuit(circuit, *, qubit_order, noise, resolver)` compiles (and caches) a circuit;
`compile_template(circuit, *, qubit_order, noise)` compiles it once for any parameter values,
`Template.resolve(resolver)` then gives the Program without walking the circuit again.

Inside: `registry.py` (the one table from Cirq operations to lowerings, and its lookup order),
`cliffords.py` / `channels.py` / `lowerings.py` (the lowerings it lists), `walker.py` (the walk
over moments, subcircuits and classical control, on the `emitter.Emitter` state), `template.py`
(parametrized slots), `keys.py` / `conditions.py` (measurement keys, classical conditions),
`cache.py`. The names below are imported when first used, so that `compiler.stim_circuit` (the
Stim path, with `stim_instructions.py` and `stim_text.py`) loads without the Cirq compiler, and
without Cirq.
"""

import importlib

_WHERE = {"compile_circuit": ".compile", "compile_template": ".compile", "compile_resolved": ".compile",
          "build_template": ".compile", "clear_cache": ".compile", "compile_stim": ".stim_circuit",
          "Template": ".template"}


def __getattr__(name: str):
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(where, __name__), name)
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "compile_circuit",
    "compile_template",
    "compile_resolved",
    "compile_stim",
    "build_template",
    "clear_cache",
    "Template",
]
