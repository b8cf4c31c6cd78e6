"""Parameter resolution through nested CircuitOperations (shared by the walk and templates)."""

from __future__ import annotations

import cirq


def resolve_chain(value, resolvers, final=None):
    """Resolve through enclosing CircuitOperations' resolvers (innermost first), then `final`."""
    for r in resolvers:
        value = cirq.resolve_parameters(value, r, recursive=False)
    if final is not None:
        value = cirq.resolve_parameters(value, final)
    return value
