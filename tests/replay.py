"""Replaying our tableau-mode outcomes in stim (postselection forces stim's collapses to ours).
Each helper skips the calling test without stim, so that importing this module needs no stim."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from cirq_quasarq.core import opcodes
from cirq_quasarq.core.draws import coin
from cirq_quasarq.core.program import FLAG_INVERT, FLAGS, OP, RAND, REC, A, B
from cirq_quasarq.schedule.walk import walk

if TYPE_CHECKING:
    import stim


def replay_in_stim(program, schedule, key, records, repetition=0) -> stim.TableauSimulator:
    """Run the scheduled program in stim, forcing each random collapse to the value we drew."""
    stim = pytest.importorskip("stim")
    sim = stim.TableauSimulator()
    sim.set_num_qubits(program.num_qubits)
    for step in walk(program, schedule):
        for row in schedule.instructions[step.start : step.end]:
            name = opcodes.OPCODES[row[OP]].name
            q = int(row[A])
            if name in ("M", "MR"):
                outcome = int(records[row[REC] + step.rec_shift]) ^ (int(row[FLAGS]) & FLAG_INVERT)  # record = outcome ^ invert
                sim.postselect_z(q, desired_value=bool(outcome))
                sim.measure(q)
                if name == "MR":
                    sim.reset(q)
            elif name == "R":
                if sim.peek_z(q) == 0:
                    sim.postselect_z(q, desired_value=bool(coin(key, int(row[RAND]) + step.rand_shift, repetition)))
                sim.reset(q)
            elif opcodes.KIND[row[OP]] == opcodes.Kind.UNITARY:
                targets = [q] + ([int(row[B])] if row[B] >= 0 else [])
                sim.do(stim.Circuit(f"{name} " + " ".join(map(str, targets))))
            else:
                raise NotImplementedError(name)
    return sim


def as_stim_inverse(tableau) -> stim.Tableau:
    stim = pytest.importorskip("stim")
    xx, xz, zx, zz = tableau.bits()
    return stim.Tableau.from_numpy(x2x=xx, x2z=xz, z2x=zx, z2z=zz,
                                   x_signs=tableau.xs.astype(bool), z_signs=tableau.zs.astype(bool))
