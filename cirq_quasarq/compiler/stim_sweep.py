"""A noise sweep's next circuit: the Program of a `stim.Circuit` that differs from one compiled
before only in its Pauli channels' probabilities is that one's Program with the new channels.

A threshold sweep (sinter's tasks, a loop over p) compiles one circuit per probability. Their
rows, records, tables and annotations are the same; only `Program.channels` differ. Compiling each
in full took 1.8-2.6 ms at d = 3-7 on the 2-core machine (surface codes), against Stim's 0.1-0.3 ms
for its sampler; this takes 0.4-0.9 ms: a print of the circuit and a walk over its instructions'
arguments, no targets.

The variant is taken only where it is exactly what the full compile would give:
- the circuits' texts with every instruction's arguments blanked are equal (names, tags, targets
  and REPEAT blocks alike: a text prints its targets exactly) and every argument of anything but
  X_ERROR, Y_ERROR, Z_ERROR, DEPOLARIZE1/2 and PAULI_CHANNEL_1/2 is equal (a text prints arguments
  to 6 digits, so they are compared as Stim holds them);
- no instruction has a tag, and none makes channels otherwise (E / ELSE chains, heralds; MPAD, MPP
  and pair measurements with a flip probability): a channel they make could be one a swept channel
  shares;
- each swept instruction's channel keeps its opcode and Paulis (a probability that becomes 0 or
  stops being 0 changes the rows), the instructions that shared a channel before share one now,
  and channels that were distinct stay distinct: then the full compile numbers the new channels as
  it numbered the old ones.
Anything else compiles in full; so does a circuit whose compiled program is past
`_SWEEP_MAX_ROWS` (two prints of a large circuit cost about what its compile does). The full
compile is the definition, and tests/test_stim_sweep.py holds this path to it. The variant shares
its template's `Program.derived` (schedule, frame plan, linear map: `stim_circuit.remember_stim`).
"""

from __future__ import annotations

import dataclasses
import re
import weakref
from typing import Dict, List, Optional, Sequence, Tuple

from .. import errors
from ..core.program import Program, channel_entry
from .stim_instructions import _NOISE, noise_spec

_SWEEP_MAX_ROWS = 1 << 20
_MAKES_CHANNELS = frozenset(("E", "ELSE_CORRELATED_ERROR", "HERALDED_ERASE", "HERALDED_PAULI_CHANNEL_1"))
_FLIP_CHANNELS = frozenset(("MPAD", "MPP", "MXX", "MYY", "MZZ"))  # a channel of their flip probability, if any
_ARGUMENTS = re.compile(r"(?<=[A-Z0-9_])\([^)\n]*\)")  # an instruction's (arguments): targets have no parentheses
# A cached program's circuit's (outline,), made once; kept while the program lives (the cache's
# entries, not this, decide how long).
_OUTLINES: "weakref.WeakKeyDictionary[Program, tuple]" = weakref.WeakKeyDictionary()


class _RuledOut(Exception):
    pass


def _outline(circuit) -> Optional[Tuple[str, List[Tuple[str, Tuple[float, ...]]]]]:
    """(the circuit's text without arguments, every instruction's (name, arguments) in the text's
    order, a REPEAT block's body once), or None where a tag, an instruction of `_MAKES_CHANNELS` or
    one of `_FLIP_CHANNELS` with a flip probability rules the variant out."""
    import stim

    repeat = stim.CircuitRepeatBlock

    def walk(block, out):
        for inst in block:
            if type(inst) is repeat:
                walk(inst.body_copy(), out)
            else:
                args = tuple(inst.gate_args_copy())
                if inst.tag or inst.name in _MAKES_CHANNELS or (inst.name in _FLIP_CHANNELS and any(args)):
                    raise _RuledOut
                out.append((inst.name, args))
        return out

    try:
        arguments = walk(circuit, [])
    except _RuledOut:
        return None
    return _ARGUMENTS.sub("", str(circuit)), arguments


def _kept_outline(program: Program, kept):
    """`_outline` of `kept`, the circuit the compile cache keeps with `program` (never changed)."""
    found = _OUTLINES.get(program)
    if found is None:  # (its outline,): None too is kept (a circuit the variant rules out)
        found = _OUTLINES[program] = (_outline(kept),)
    return found[0]


def _channels(program: Program, old: Sequence[tuple], new: Sequence[tuple]) -> Optional[list]:
    """`program.channels` for the arguments `new` where `program` was compiled from `old`, or None."""
    ids = {}  # (a channel equal to an earlier one keeps the earlier's id: it is never made, below)
    for i, channel in enumerate(program.channels):
        ids.setdefault(channel_entry(channel.arity, channel.probs, channel.paulis)[0], i)
    made: Dict[int, tuple] = {}  # channel id -> (key, Channel) of its new probabilities
    seen: Dict[tuple, Optional[tuple]] = {}  # (name, arguments) -> (spec, (key, Channel)), or None: no channel

    def channel_of(name, args):
        if (name, args) not in seen:
            if any(not 0 <= p <= 1 for p in args):  # refused by the full compile (or by Stim), which says so
                raise errors.UnsupportedOperationError(name)
            spec = noise_spec(name, args)
            seen[name, args] = None if spec is None else (spec, channel_entry(spec.arity, spec.probs, spec.paulis))
        return seen[name, args]

    for (name, a), (other, b) in zip(old, new):
        if name != other:
            return None
        if name not in _NOISE:
            if a != b:  # a flip probability, coordinates, an observable's index...
                return None
            continue
        try:
            was, now = channel_of(name, a), channel_of(name, b)
        except errors.UnsupportedOperationError:  # the full compile says which, and where
            return None
        if was is None or now is None:
            if was is not now:  # a channel that never fires makes no rows
                return None
            continue
        (sa, (key_a, _)), (sb, entry) = was, now
        if (sa.opname, sa.arity, len(sa.probs), key_a[2]) != (sb.opname, sb.arity, len(sb.probs), entry[0][2]):
            return None  # another opcode or other Paulis: other rows
        channel = ids.get(key_a)
        if channel is None or made.setdefault(channel, entry)[0] != entry[0]:
            return None  # not this program's channel, or one channel split in two
    if len(made) != len(program.channels) or len({key for key, _ in made.values()}) != len(made):
        # two channels merged; or a channel no swept instruction made (a maker missing from
        # _MAKES_CHANNELS, or two equal channels: no circuit reaches this today)
        return None
    return [made[i][1] for i in range(len(program.channels))]


def swept_variant(circuit, entries: Sequence[tuple]) -> Optional[Program]:
    """The Program of `circuit` (a stim.Circuit) from a compiled circuit of `entries` ((Program,
    its circuit) pairs, the compile cache's bucket of circuits of equal counts) that it differs
    from only in its Pauli channels' probabilities, or None (compile it in full)."""
    candidates = [(p, kept) for p, kept in entries if p.channels and p.num_instructions <= _SWEEP_MAX_ROWS]
    if not candidates:
        return None
    outline = _outline(circuit)
    if outline is None:
        return None
    text, arguments = outline
    for program, kept in candidates:
        before = _kept_outline(program, kept)
        if before is None or before[0] != text or len(before[1]) != len(arguments):
            continue
        channels = _channels(program, before[1], arguments)
        if channels is not None:
            variant = dataclasses.replace(program, channels=channels)
            _OUTLINES[variant] = (outline,)  # the next point's candidate
            return variant
    return None
