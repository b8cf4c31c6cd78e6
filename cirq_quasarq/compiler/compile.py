"""The compiler's entry points (cached): circuits -> Programs and templates.

`compile_template` walks a circuit once for any parameter values (`template.py`); `compile_circuit`
gives the Program for one resolver. Both are cached by circuit identity and options (`cache.py`).
`non_pauli` says what a channel that is not a Pauli channel becomes: "error" (the default, an
`UnsupportedNoiseError`) or "twirl" (its Pauli twirl, an approximation: `channels.twirl`).
"""

from __future__ import annotations

import functools
from typing import List, Optional, Tuple

import cirq

from .. import errors
from ..core.program import Program
from . import cache
from .registry import NON_PAULI
from .stim_circuit import clear_stim_cache
from .template import Template
from .walker import Ops, Rewalk, Walker


def circuit_qubits(circuit) -> frozenset:
    """`circuit.all_qubits()`, made as one union of its moments' qubit sets (Cirq's own walks every
    qubit of every moment in a Python generator: 80 ms against 8 at 10k qubits and depth 100 on two
    CPU cores) and kept by circuit identity, as the compiled programs are."""
    if getattr(circuit, "moments", None) is None:
        return frozenset(circuit.all_qubits())
    return _kept(circuit, None, lambda: frozenset().union(*(moment.qubits for moment in circuit.moments)))


def ordered_qubits(circuit, qubit_order) -> Tuple:
    """The circuit's qubits in `qubit_order` (what the compiled Program's qubits are), kept by
    circuit identity and order: a repeat call's is a lookup, where sorting 10k qubits was 2 ms."""
    def make():
        return tuple(cirq.QubitOrder.as_qubit_order(qubit_order).order_for(circuit_qubits(circuit)))

    return make() if getattr(circuit, "moments", None) is None else _kept(circuit, qubit_order, make)


def _kept(circuit, option, make):
    """make()'s qubits for the circuit and `option`, kept in `cache.QUBITS` (the entry keeps the
    circuit, its moments and the option alive, so that their ids stay unique)."""
    key = (cache.circuit_key(circuit), cache.option_key(option))
    hit = cache.QUBITS.get(key)
    if hit is not None:
        return hit[0]
    qubits = make()
    cache.QUBITS.put(key, (qubits, circuit, tuple(circuit.moments), option), len(qubits))
    return qubits


def _top_moments(circuit, noise_model) -> Tuple[List, Optional[List[int]]]:
    """The moments to walk, and for each the index of the user's moment it came from."""
    if noise_model is None:
        return list(circuit), None
    out: List = []
    indices: List[int] = []
    system_qubits = sorted(circuit_qubits(circuit))
    for index, tree in enumerate(noise_model.noisy_moments(circuit, system_qubits)):
        start = len(out)
        _append_tree(out, tree)
        indices.extend([index] * (len(out) - start))
    return out, indices


def _append_tree(out: List, tree) -> None:
    """Moments of an OP_TREE; loose operations are grouped while their qubits are disjoint."""
    if isinstance(tree, cirq.Moment):
        out.append(tree)
        return
    pending: List = []
    used: set = set()
    for item in cirq.flatten_to_ops_or_moments(tree):
        if isinstance(item, cirq.Moment):
            if pending:
                out.append(Ops(pending))
                pending, used = [], set()
            out.append(item)
            continue
        qs = set(item.qubits)
        if qs & used:
            out.append(Ops(pending))
            pending, used = [], set()
        pending.append(item)
        used |= qs
    if pending:
        out.append(Ops(pending))


def _noise_model(noise):
    if noise is None:
        return None
    model = cirq.NoiseModel.from_noise_model_like(noise)
    return None if model is cirq.NO_NOISE or model == cirq.NO_NOISE else model


def _walker(circuit, qubit_order, noise, mode: str, resolver=None, non_pauli: str = "error"):
    if non_pauli not in NON_PAULI:
        raise errors.InvalidInputError(f"non_pauli must be one of {NON_PAULI}, not {non_pauli!r}")
    model = _noise_model(noise)
    walker = Walker(ordered_qubits(circuit, qubit_order), mode, resolver, non_pauli)
    walker.top_circuit, walker.noisy = circuit, model is not None
    return walker, _top_moments(circuit, model)


def compile_resolved(circuit, qubit_order=cirq.QubitOrder.DEFAULT, noise=None, resolver=None,
                     non_pauli: str = "error") -> Program:
    """Walk the circuit resolving parameters on the way (uncached)."""
    walker, moments = _walker(circuit, qubit_order, noise, "resolve", resolver, non_pauli)
    return walker.run(*moments, num_moments=len(circuit))


def build_template(circuit, qubit_order=cirq.QubitOrder.DEFAULT, noise=None, non_pauli: str = "error") -> Template:
    """Walk the circuit once (uncached); see `compile_template`."""
    rewalk = functools.partial(compile_resolved, circuit, qubit_order, noise, non_pauli=non_pauli)
    walker, moments = _walker(circuit, qubit_order, noise, "template", non_pauli=non_pauli)
    try:
        program = walker.run(*moments, num_moments=len(circuit))
    except Rewalk:
        return Template(None, [], rewalk, needs_rewalk=True, non_pauli=non_pauli)
    return Template(program, walker.slots, rewalk, non_pauli=non_pauli)


def compile_template(circuit, *, qubit_order=cirq.QubitOrder.DEFAULT, noise=None,
                     non_pauli: str = "error") -> Template:
    """Compile once for any parameter values: `Template.resolve(resolver)` -> Program (cached)."""
    key = (cache.circuit_key(circuit), cache.option_key(qubit_order), cache.option_key(noise), non_pauli)
    hit = cache.TEMPLATES.get(key)
    if hit is not None:
        return hit[0]
    template = build_template(circuit, qubit_order, noise, non_pauli)
    rows = template.program.num_instructions if template.program is not None else 0
    cache.TEMPLATES.put(key, (template, circuit, tuple(circuit.moments), qubit_order, noise), rows)
    return template


def compile_circuit(circuit, *, qubit_order=cirq.QubitOrder.DEFAULT, noise=None,
                    resolver=None, non_pauli: str = "error") -> Program:
    """The Program of a circuit (cached: an unmodified circuit compiles once per options).

    The returned Program is shared with the cache; treat it as read-only."""
    key = (cache.circuit_key(circuit), cache.option_key(qubit_order), cache.option_key(noise),
           cache.resolver_key(resolver), non_pauli)
    hit = cache.PROGRAMS.get(key)
    if hit is not None:
        return hit[0]
    program = compile_template(circuit, qubit_order=qubit_order, noise=noise, non_pauli=non_pauli).resolve(resolver)
    cache.PROGRAMS.put(key, (program, circuit, tuple(circuit.moments), qubit_order, noise, resolver),
                       program.num_instructions)
    return program


def clear_cache() -> None:
    """Forget every compiled circuit (Cirq and Stim)."""
    cache.TEMPLATES.clear()
    cache.PROGRAMS.clear()
    cache.QUBITS.clear()
    clear_stim_cache()
