"""Replay a single shot's records in our tableau mode: which outcomes could no run have given?

Stim's `TableauSimulator.postselect_z` answers this for one tool's outcomes by forcing each
measurement in turn (`postselected`, which `bench_peers`' `validity` case runs), at a cost that
grows as n^3 and ends a few thousand qubits in. Here any engine answers it at any size it runs, with
no change to the engine: a random measurement's outcome is its coin, and a coin is a fixed function
of (key, slot, repetition), so giving each measurement a coin slot whose coin is the outcome wanted
makes every random measurement come out as wanted. A deterministic one comes out as the state makes
it. So a run of `replaying(program, key, records)` with `key` gives the records a run could give on
the way `records` went, and where the two differ, `records` holds an outcome no run could have given
(`contradicted`). Up to the count, this is the postselection replay measurement by measurement: both
go on from a contradicted outcome with the one the state makes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cirq_quasarq.core import opcodes
from cirq_quasarq.core.draws import coin
from cirq_quasarq.core.program import FLAG_INVERT, FLAGS, OP, RAND, REC, Program

_RECORDED = (opcodes.CODE["M"], opcodes.CODE["MR"])
_UNRECORDED = (opcodes.CODE["R"],)


def replaying(program: Program, key, records: np.ndarray, repetition: int = 0) -> Program:
    """`program` with the coin slot of each M and MR chosen so that, in a tableau run with `key` and
    `repetition`, its outcome is `records[its record]` wherever that outcome is random. For programs
    of unitaries, M and MR alone: a loop's slots move each iteration, a reset's outcome (which
    decides the state of what it is entangled with) and a noise channel's draws are not recorded."""
    ins = program.instructions
    if program.loops:
        raise ValueError("replaying: a program with loops (its slots move each iteration)")
    if program.channels or program.confusions or np.isin(ins[:, OP], _UNRECORDED).any():
        raise ValueError("replaying: a program with noise or resets (outcomes no record holds)")
    measured = np.isin(ins[:, OP], _RECORDED)
    slots: dict = {}
    slot = 0
    while len(slots) < 2:  # the first slot whose coin is 0 and the first whose coin is 1
        slots.setdefault(coin(key, slot, repetition), slot)
        slot += 1
    records = np.asarray(records, dtype=np.uint8).reshape(-1)
    if len(records) != program.num_records:
        raise ValueError(f"replaying: {len(records)} records for a program of {program.num_records}")
    want = records[ins[measured, REC]] ^ ((ins[measured, FLAGS] & FLAG_INVERT) != 0)
    rows = ins.copy()
    rows[measured, RAND] = np.where(want != 0, slots[1], slots[0])
    return dataclasses.replace(program, instructions=rows, num_rand_slots=max(program.num_rand_slots, slot))


def contradicted(engine, program: Program, key, records: np.ndarray) -> np.ndarray:
    """The record indices where `records` holds an outcome that no run could give, the earlier
    outcomes being those of `records` (a tableau run of `replaying` on `engine`)."""
    from cirq_quasarq.schedule import schedule

    forced = replaying(program, key, records)
    got = engine.run_tableau(forced, schedule(forced), key).records
    return np.flatnonzero(got != np.asarray(records, dtype=np.uint8).reshape(-1))


def postselected(circuit, records) -> list:
    """The record indices where stim's TableauSimulator finds `records` impossible for `circuit`
    (M and MR, inverted or not, among any other instructions): each measurement forced in turn with
    postselect_z, going on with the outcome the state gives where that fails."""
    import stim

    sim = stim.TableauSimulator()
    sim.set_num_qubits(circuit.num_qubits)
    k, bad = 0, []
    for inst in circuit.flattened():
        if inst.name not in ("M", "MR"):
            sim.do(inst)
            continue
        for t in inst.targets_copy():
            try:
                sim.postselect_z(t.value, desired_value=bool(records[k]) ^ t.is_inverted_result_target)
            except ValueError:
                bad.append(k)
            sim.measure(t.value)
            if inst.name == "MR":
                sim.reset(t.value)
            k += 1
    return bad
