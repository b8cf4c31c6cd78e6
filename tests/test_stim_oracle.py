"""simulate() on Cirq circuits with mid-circuit X/Y/Z measurements, resets and classical control,
against stim: replaying our outcomes with postselect_x/y/z must be possible and must leave the
same stabilizer group (canonical stabilizers equal), up to a few hundred qubits."""

import random

import cirq
import pytest

from cirq_quasarq import QuasarqSimulator

from .replay import as_stim_inverse

stim = pytest.importorskip("stim")

ONE = {"H": cirq.H, "S": cirq.S, "S_DAG": cirq.S**-1, "X": cirq.X, "Y": cirq.Y, "Z": cirq.Z,
       "SQRT_X": cirq.X**0.5, "SQRT_Y_DAG": cirq.Y**-0.5}
TWO = {"CX": cirq.CNOT, "CZ": cirq.CZ, "SWAP": cirq.SWAP, "ISWAP": cirq.ISWAP}
BASIS = {"Z": "M", "X": "MX", "Y": "MY"}


def random_case(n, layers, seed):
    r = random.Random(seed)
    q = cirq.LineQubit.range(n)
    circuit = cirq.Circuit()
    text = []
    k = 0
    for _ in range(layers):
        order = list(range(n))
        r.shuffle(order)
        moment = []
        while order:
            if len(order) > 1 and r.random() < 0.4:
                a, b = order.pop(), order.pop()
                g = r.choice(list(TWO))
                moment.append(TWO[g](q[a], q[b]))
                text.append(f"{g} {a} {b}")
            else:
                a = order.pop()
                g = r.choice(list(ONE))
                moment.append(ONE[g](q[a]))
                text.append(f"{g} {a}")
        circuit.append(cirq.Moment(moment))
        for a in r.sample(range(n), max(1, n // 10)):
            basis = r.choice("ZXY")
            key = f"k{k}"
            k += 1
            gate = cirq.PauliMeasurementGate(cirq.DensePauliString(basis), key=key)
            circuit.append(cirq.Moment(gate.on(q[a])))
            text.append(f"{BASIS[basis]} {a}")
            roll = r.random()
            if roll < 0.3:  # measure-then-reset: the reset is deterministic to replay
                circuit.append(cirq.Moment(cirq.reset(q[a])))
                text.append(f"R {a}")
            elif roll < 0.6:  # a classically controlled Pauli on another qubit
                b = (a + 1 + r.randrange(n - 1)) % n
                pauli = r.choice("XYZ")
                circuit.append(cirq.Moment(getattr(cirq, pauli)(q[b]).with_classical_controls(key)))
                text.append(f"C{pauli} rec[-1] {b}")
    return circuit, stim.Circuit("\n".join(text))


@pytest.mark.parametrize("n,seed", [(5, 0), (12, 1), (40, 2), (120, 3), (250, 4)])
def test_replayed_outcomes_give_the_same_stabilizer_group(device, n, seed):
    circuit, stim_circuit = random_case(n, 6, seed)
    trial = QuasarqSimulator(seed=seed, device=device).simulate(circuit)
    sim = stim.TableauSimulator()
    sim.set_num_qubits(n)
    k = 0
    for inst in stim_circuit:
        if inst.name in ("M", "MX", "MY"):  # stim merges adjacent measurements into one
            for target in inst.targets_copy():
                value = bool(trial.measurements[f"k{k}"][0])
                {"M": sim.postselect_z, "MX": sim.postselect_x, "MY": sim.postselect_y}[inst.name](
                    target.value, desired_value=value)  # raises if our outcome was impossible
                sim.do(stim.Circuit(f"{inst.name} {target.value}"))
                k += 1
        else:
            sim.do(stim.Circuit(str(inst)))
    ours = as_stim_inverse(trial.final_state.inverse_tableau).inverse()
    assert ours.to_stabilizers(canonicalize=True) == sim.canonical_stabilizers(), f"n={n} seed={seed}"
