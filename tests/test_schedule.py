"""The window scheduler: windows act on disjoint qubits, each qubit keeps its order, barriers stay
put, and the scheduled program is equivalent to the original (property tests)."""

import contextlib

import numpy as np
import pytest

stim = pytest.importorskip("stim")
pytest.importorskip("hypothesis")
from hypothesis import given, settings
from hypothesis import strategies as st

from cirq_quasarq.core import opcodes, rng
from cirq_quasarq.engines import NumpyEngine
from cirq_quasarq.core.program import A, B, COND, OP, ProgramBuilder
from cirq_quasarq.schedule import schedule
from cirq_quasarq.schedule.windows import RUN_END, RUN_START, RUN_WINDOW

from .programs import UNITARY_1, UNITARY_2
from .replay import as_stim_inverse

SORT_PATHS = ("stretches", "rows")


@contextlib.contextmanager
def sort_path(path: str):
    """The scheduler's two ways of ordering the rows (`windows._sorted`): every program's stretches
    of one key and opcode moved as slices, or every program's rows one by one."""
    from cirq_quasarq.schedule import windows

    saved = windows._STRETCH_ROWS
    windows._STRETCH_ROWS = 1 if path == "stretches" else 2**62
    try:
        yield
    finally:
        windows._STRETCH_ROWS = saved


ops = st.lists(
    st.one_of(
        st.tuples(st.just(1), st.sampled_from(UNITARY_1), st.integers(0, 5), st.just(-1)),
        st.tuples(st.just(2), st.sampled_from(UNITARY_2), st.integers(0, 5), st.integers(0, 5)),
        st.tuples(st.just(0), st.sampled_from(["M", "MR"]), st.integers(0, 5), st.just(-1)),
    ),
    min_size=1, max_size=40)


def build(op_list, steps_per_op=True):
    """One op per STEP (the scheduler must find the parallelism itself)."""
    b = ProgramBuilder(6)
    sc = stim.Circuit()
    for arity, name, q0, q1 in op_list:
        if arity == 2 and q0 == q1:
            q1 = (q0 + 1) % 6
        b.next_step()
        if arity == 0:
            b.measure(q0, reset=(name == "MR"))
            sc.append(name, [q0])
        else:
            b.gate(name, q0, q1)
            sc.append(name, [q0] + ([q1] if arity == 2 else []))
    return b.build(), sc


@settings(max_examples=150, deadline=None)
@given(ops)
def test_windows_are_disjoint_and_per_qubit_order_is_kept(op_list):
    program, _ = build(op_list)
    sched = schedule(program)
    ins = program.instructions
    # Each original row appears once.
    assert sorted(map(tuple, sched.instructions.tolist())) == sorted(map(tuple, ins.tolist()))
    position = {tuple(row): i for i, row in enumerate(sched.instructions.tolist())}
    for q in range(6):
        touching = [tuple(r) for r in ins.tolist() if q in (r[A], r[B])]
        assert [position[t] for t in touching] == sorted(position[t] for t in touching)
    for w in np.unique(sched.runs[:, RUN_WINDOW]):
        runs = sched.runs[sched.runs[:, RUN_WINDOW] == w]
        rows = np.concatenate([sched.instructions[s:e] for s, e in runs[:, [RUN_START, RUN_END]]])
        qs = np.concatenate([rows[:, A], rows[rows[:, B] >= 0, B]])
        assert len(qs) == len(np.unique(qs))


@settings(max_examples=80, deadline=None)
@given(ops, st.integers(0, 2**32))
def test_scheduled_run_is_a_valid_run_of_the_original_order(op_list, seed):
    program, circuit = build(op_list)
    run = NumpyEngine().run_tableau(program, schedule(program), rng.make_key(seed))
    # Replaying our records in the ORIGINAL order must be possible, and lead to the same state.
    sim = stim.TableauSimulator()
    sim.set_num_qubits(6)
    k = 0
    for inst in circuit:
        if inst.name in ("M", "MR"):  # stim merges adjacent measurements into one instruction
            for target in inst.targets_copy():
                q = target.value
                sim.postselect_z(q, desired_value=bool(run.records[k]))  # raises if impossible
                sim.measure(q)
                if inst.name == "MR":
                    sim.reset(q)
                k += 1
        else:
            sim.do(stim.Circuit(str(inst)))
    assert k == program.num_records
    ours = as_stim_inverse(run.tableau)
    assert ours.inverse().to_stabilizers(canonicalize=True) == sim.canonical_stabilizers()


def test_barriers_are_not_crossed():
    b = ProgramBuilder(3)
    b.gate("H", 0)
    b.next_step()
    r = b.measure(0)
    b.next_step()
    cond = b.condition([(r, 0)], [False, True])
    b.gate("X", 1, cond=cond)
    b.next_step()
    b.gate("H", 2)  # independent, but after the barrier it stays after it
    program = b.build()
    sched = schedule(program)
    names = [opcodes.OPCODES[op].name for op in sched.instructions[:, OP]]
    barrier = int(np.flatnonzero(sched.instructions[:, COND] >= 0)[0])
    assert names.index("M") < barrier < len(names) - 1
    assert names[-1] == "H"



def _reference_schedule(program):
    """The schedule's definition, one row at a time: each row in the layer after the last row on any
    of its qubits (a barrier alone after everything before it, nothing crossing it); within a layer
    non-collapse rows by opcode, then collapses, each in program order; runs of one opcode."""
    ins = program.instructions
    collapse = {opcodes.CODE[n] for n in ("M", "R", "MR")}
    last = {}
    base, layers = 0, []
    for row in ins:
        op = int(row[OP])
        kind = opcodes.KIND[op]
        if row[COND] >= 0 or kind in (opcodes.Kind.LOOP, opcodes.Kind.RECORD_NOISE):
            layer = max([base] + list(last.values())) + 1
            base = layer
            last = {}
        else:
            if opcodes.ARITY[op] > 0:
                qs = [int(row[A])] + ([int(row[B])] if row[B] >= 0 else [])
            else:
                qs = [int(q) for q in program.ext_qubits[row[A]:row[A] + row[B]]]
            layer = max([base] + [last.get(q, base) for q in qs]) + 1
            for q in qs:
                last[q] = layer
        layers.append(layer)
    key = [(layer, opcodes.NUM_OPCODES if int(row[OP]) in collapse else int(row[OP]), i)
           for i, (layer, row) in enumerate(zip(layers, ins))]
    order = [i for _, _, i in sorted(key)]
    return ins[order], [layers[i] for i in order]


@pytest.mark.parametrize("path", SORT_PATHS)
def test_the_vectorised_schedule_equals_its_definition(path):
    from cirq_quasarq.compiler import compile_stim

    from .programs import random_program, window_program
    from .test_stim_circuit import random_circuit

    programs = [compile_stim(random_circuit(s, n=6, noisy=s % 2 == 0)) for s in range(40)]
    programs += [random_program(20, 8, s, noise=True)[0] for s in range(10)] + [window_program(100, 3)]
    for p in programs:
        want, layers = _reference_schedule(p)
        with sort_path(path):
            got = schedule(p)
        assert np.array_equal(got.instructions, want)
        starts = got.runs[:, RUN_START]
        assert np.array_equal(np.unique(np.asarray(layers), return_inverse=True)[1][starts], got.runs[:, RUN_WINDOW])


def assert_same_schedule(program):
    from .schedule_oracle import schedule_reference

    got, want = schedule(program), schedule_reference(program)
    for field in ("instructions", "runs", "loop_runs"):
        mine, theirs = getattr(got, field), getattr(want, field)
        assert mine.dtype == theirs.dtype and mine.shape == theirs.shape and np.array_equal(mine, theirs), field


def _restep(program, steps):
    import dataclasses

    from cirq_quasarq.core.program import STEP

    ins = program.instructions.copy()
    ins[:, STEP] = steps
    return dataclasses.replace(program, instructions=ins)


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(1, 6), st.booleans(), st.sampled_from(SORT_PATHS))
def test_the_schedule_equals_the_previous_scheduler(op_list, group, steps_per_op, path):
    """Against the scheduler before its rewrite, bit for bit, also where STEP groups reuse a qubit."""
    program, _ = build(op_list)
    with sort_path(path):
        assert_same_schedule(program)
        rows = len(program.instructions)
        assert_same_schedule(_restep(program, np.arange(rows) // group if steps_per_op else np.zeros(rows)))


@pytest.mark.parametrize("path", SORT_PATHS)
@pytest.mark.parametrize("seed", range(30))
def test_compiled_circuits_schedule_as_the_previous_scheduler(seed, path):
    from cirq_quasarq.compiler import compile_stim

    from .programs import random_program
    from .test_stim_circuit import random_circuit

    program = compile_stim(random_circuit(seed, n=4 + seed % 9, noisy=seed % 2 == 0))
    rng_ = np.random.default_rng(seed)
    rows = len(program.instructions)
    with sort_path(path):
        assert_same_schedule(program)
        assert_same_schedule(_restep(program, np.sort(rng_.integers(0, max(1, rows // 3), rows))))
        assert_same_schedule(_restep(program, rng_.integers(0, 3, rows)))  # STEP going back and forth
        assert_same_schedule(random_program(5 + seed, 6, seed, collapse=0.8, noise=seed % 3 == 0)[0])


@pytest.mark.parametrize("path", SORT_PATHS)
def test_int64_keys_schedule_alike(path, monkeypatch):
    """Programs of over 2**31 / 63 rows sort an int64 key: the same schedule."""
    from cirq_quasarq.compiler import compile_stim
    from cirq_quasarq.schedule import windows

    from .test_stim_circuit import random_circuit

    monkeypatch.setattr(windows, "_INT32_ROWS", 0)
    for seed in range(6):
        with sort_path(path):
            assert_same_schedule(compile_stim(random_circuit(seed, n=8, noisy=True)))


@pytest.mark.parametrize("seed", range(6))
def test_window_rows_count_each_window_between_two_barriers_of_the_frame_walk(seed):
    """`window_rows` (which picks frame mode's kernel) against a walk over the runs as the frame
    kernels take them: a barrier where the window changes, loop markers not counted; and the count
    of the runs walked. Programs with nested loops, conditions, confusions and noise."""
    from cirq_quasarq.schedule.windows import RUN_OP, window_rows

    from .test_cuda_engine import rich_program

    sched = schedule(rich_program([5, 30, 200][seed % 3], 12, 40 + seed))
    want, previous = [], None
    for start, end, op, window in sched.runs.tolist():
        if opcodes.KIND[op] == opcodes.Kind.LOOP:
            continue
        if window != previous:
            want.append(0)
            previous = window
        want[-1] += end - start
    got, runs = window_rows(sched)
    assert got.dtype == np.int64 and got.tolist() == want
    assert got.sum() == len(sched.instructions) - np.count_nonzero(opcodes.KIND[sched.instructions[:, OP]]
                                                                    == opcodes.Kind.LOOP)
    assert runs == sum(opcodes.KIND[op] != opcodes.Kind.LOOP for op in sched.runs[:, RUN_OP].tolist())


def _tick_free_circuit(seed: int, n: int = 12, lines: int = 40):
    """Lines the compile places as soon as possible: gates of one and two qubits (some naming a
    qubit twice: the per-target path), collapses in every basis (inverted too), Pauli channels, and
    annotations between them; no TICK, and no line of the name before it (Stim would join the two,
    and a collapse naming a qubit twice is compiled target by target)."""
    r = np.random.default_rng(seed)
    one, two = ["H", "S", "X", "SQRT_Y", "C_XYZ", "H_YZ"], ["CX", "CZ", "SWAP", "ISWAP", "XCY", "SQRT_XX"]
    out = []
    while len(out) < lines:
        qs = r.permutation(n)[: r.integers(1, n + 1)].tolist()
        roll = r.random()
        if roll < 0.3:
            out.append(f"{r.choice(one)} " + " ".join(map(str, qs)))
        elif roll < 0.6 and len(qs) >= 2:
            pairs = qs[: len(qs) // 2 * 2]
            if r.random() < 0.2 and len(pairs) >= 4:
                pairs[2] = pairs[1]  # a qubit named twice
            out.append(f"{r.choice(two)} " + " ".join(map(str, pairs)))
        elif roll < 0.8:
            name = str(r.choice(["M", "MX", "MY", "MR", "MRY", "R", "RX"]))
            out.append(f"{name} " + " ".join(("!" if r.random() < 0.3 and name[0] == "M" else "") + str(q)
                                             for q in qs[:4]))
        elif roll < 0.9:
            out.append(f"{r.choice(['X_ERROR', 'Z_ERROR', 'DEPOLARIZE1'])}(0.1) " + " ".join(map(str, qs[:3])))
        else:
            out.append("M 0\nDETECTOR rec[-1]\nOBSERVABLE_INCLUDE(0) rec[-1]")
        if len(out) > 1 and out[-1].split()[0].split("(")[0] == out[-2].split("\n")[-1].split()[0].split("(")[0]:
            out.pop()
    return stim.Circuit("\n".join(out))


def _without_layers(program):
    import dataclasses

    return dataclasses.replace(program)


@pytest.mark.parametrize("seed", range(24))
def test_layers_the_compile_vouches_for_are_the_schedulers(seed):
    """Where the compile says its STEP column is the as-soon-as-possible layering (LAYERED_FROM),
    the schedule made from it is the scheduler's own, row for row, and the oracle's."""
    from cirq_quasarq.compiler import compile_stim
    from cirq_quasarq.core.program import LAYERED_FROM

    from .schedule_oracle import schedule_reference

    from benchmarks.random_clifford import paper_random_circuit_stim

    circuits = [_tick_free_circuit(seed, n=3 + seed % 14), paper_random_circuit_stim(40 + 37 * seed, 1 + seed % 9, seed)]
    for circuit in circuits:
        program = compile_stim(circuit)
        assert LAYERED_FROM in program.derived, circuit  # every line here is placed as soon as possible
        got, theirs, oracle = schedule(program), schedule(_without_layers(program)), schedule_reference(program)
        for field in ("instructions", "runs", "loop_runs"):
            for want in (theirs, oracle):
                mine, other = getattr(got, field), getattr(want, field)
                assert mine.dtype == other.dtype and np.array_equal(mine, other), field


def test_a_compiled_programs_blocks_are_scheduled_without_joining_them():
    """The builder hands its rows over as blocks (RowBlocks) and the layered schedule reads them block
    by block: neither the compile nor the schedule joins the program's rows, and the first read of
    `instructions` joins them once, into the rows the schedule was made from."""
    from cirq_quasarq.compiler import compile_stim
    from cirq_quasarq.core.program import RowBlocks

    from benchmarks.random_clifford import paper_random_circuit_stim

    program = compile_stim(paper_random_circuit_stim(5000, 20, seed=5))  # stretches long enough to move as slices
    rows = program.rows
    assert isinstance(rows, RowBlocks) and len(rows.blocks) > 10 and not rows.is_joined
    assert program.num_instructions == len(rows)
    got = schedule(program)
    assert not rows.is_joined
    table = program.instructions
    assert rows.is_joined and program.instructions is table and program.rows is rows
    assert np.array_equal(table, np.concatenate([table[:0]] + [table]))
    want = schedule(_without_layers(program))
    for field in ("instructions", "runs", "loop_runs"):
        assert np.array_equal(getattr(got, field), getattr(want, field)), field


@pytest.mark.parametrize("seed", range(30))
def test_stretches_sorted_from_blocks_are_the_tables(seed):
    """`_sorted` of rows given as blocks (cut anywhere: inside a stretch, at its edges, blocks of one
    row) moves the same rows into the same runs, and leaves the same rest past a limit, as of the
    table they join into; by stretches and row by row."""
    from cirq_quasarq.core.program import NUM_FIELDS, RowBlocks
    from cirq_quasarq.schedule import windows

    r = np.random.default_rng(seed)
    stretches = int(r.integers(1, 40))
    lengths = r.integers(1, 200, stretches)
    key = np.repeat(r.integers(0, 12, stretches), lengths).astype(np.int64)
    op8 = np.repeat(r.integers(0, 4, stretches), lengths).astype(np.uint8)
    table = r.integers(-5, 1000, (len(key), NUM_FIELDS)).astype(np.int32)
    cuts = np.unique(r.integers(0, len(key) + 1, int(r.integers(0, 30))))
    blocks = RowBlocks(np.split(table, cuts))
    for stretch_rows in (1, 2**62):
        limit = None if seed % 3 == 0 else int(r.integers(0, 13))
        old = windows._STRETCH_ROWS
        windows._STRETCH_ROWS = stretch_rows
        try:
            got, want = windows._sorted(blocks, key, op8, limit), windows._sorted(table, key, op8, limit)
        finally:
            windows._STRETCH_ROWS = old
        for mine, theirs in zip(got[:4], want[:4]):
            assert np.array_equal(mine, theirs)
        assert (got[4] is None) == (want[4] is None)
        if got[4] is not None:
            assert all(np.array_equal(a, b) for a, b in zip(got[4], want[4]))
    assert not blocks.is_joined or len(blocks.blocks) == 1


@pytest.mark.parametrize("seed", range(30))
def test_layered_stretches_from_steps_are_the_keyed_sorts(seed, native_path):
    """`_sorted_from_steps` (a layered program's stretches found from STEP and OP, a key made for each
    stretch's first row only) moves the rows into the runs that `_sorted` of each row's key gives,
    for rows in layer order given as blocks cut anywhere (inside a stretch too, blocks of one row,
    groups of blocks past 64k rows), every opcode and collapses of one rank; None only where the
    stretches are short. In NumPy and by the host's compiled path (host_rows.cpp), which say None
    alike."""
    from cirq_quasarq.core.program import NUM_FIELDS, STEP, RowBlocks
    from cirq_quasarq.schedule import windows

    r = np.random.default_rng(seed)
    stretches = int(r.integers(1, 60))
    lengths = r.integers(1, 400 if seed % 5 else 9000, stretches)
    table = r.integers(-5, 1000, (int(lengths.sum()), NUM_FIELDS)).astype(np.int32)
    table[:, STEP] = np.repeat(np.cumsum(r.integers(0, 2, stretches)) + 7, lengths)  # layer order
    table[:, OP] = np.repeat(r.integers(0, opcodes.NUM_OPCODES, stretches), lengths)
    cuts = np.unique(r.integers(0, len(table) + 1, int(r.integers(0, 30))))
    blocks = RowBlocks(np.split(table, cuts))
    key = np.empty(len(table), dtype=np.int64)
    op8 = np.empty(len(table), dtype=np.uint8)
    windows._keys_from_steps(table, key, op8, 7)
    want = windows._sorted(table, key, op8)
    for stretch_rows in (1, 64, 400):
        old = windows._STRETCH_ROWS
        windows._STRETCH_ROWS = stretch_rows
        try:
            got = windows._sorted_from_steps(blocks, 7)
        finally:
            windows._STRETCH_ROWS = old
        if got is None:
            assert stretch_rows > 1
            continue
        for mine, theirs in zip(got, want[:4]):
            assert np.array_equal(mine, theirs) and mine.dtype == theirs.dtype


def test_every_instruction_the_compile_vouches_for_schedules_alike():
    """Each name of stim.gate_data() in differential circuits (flat): where the compile vouches
    for its layers, the scheduler agrees; where it does not, it had a reason (a TICK, a REPEAT, a
    classically controlled Pauli, an instruction compiled target by target through `_other`)."""
    from cirq_quasarq.compiler import compile_stim
    from cirq_quasarq.core.program import LAYERED_FROM

    from .test_stim_differential import _canonical_names, differential_circuit

    vouched = set()
    for name in _canonical_names():
        for seed in range(4):
            program = compile_stim(differential_circuit(name, seed, "flat"))
            if LAYERED_FROM in program.derived:
                vouched.add(name)
                got, theirs = schedule(program), schedule(_without_layers(program))
                for field in ("instructions", "runs", "loop_runs"):
                    assert np.array_equal(getattr(got, field), getattr(theirs, field)), (name, seed, field)
    assert {"H", "CX", "ISWAP", "M", "R", "X_ERROR", "DEPOLARIZE2", "DETECTOR"} <= vouched
    assert not {"TICK", "REPEAT", "MPP", "E", "HERALDED_ERASE"} & vouched


@pytest.mark.parametrize("text", ["H 0\nTICK\nH 1", "REPEAT 3 {\n    CX 0 1\n    M 1\n}", "M 0\nCX rec[-1] 1",
                                  "M(0.1) 0 1", "E(0.1) X0 Z1", "MPP X0*Z1", "H 0\nREPEAT 2 {\n    H 0\n}\nH 1"])
def test_the_compile_vouches_for_no_layers_past_a_barrier_or_a_closed_step(text):
    from cirq_quasarq.compiler import compile_stim
    from cirq_quasarq.core.program import LAYERED_FROM

    assert LAYERED_FROM not in compile_stim(stim.Circuit(text)).derived


def test_programs_with_other_rows_do_not_take_the_layers_of_the_original():
    """The compile's word holds for its own rows only: a dataclasses.replace copy starts with an empty
    `derived` (it cannot be given one), and rows set anew on the program itself, which keeps its
    `derived`, are not the rows the word speaks of."""
    import dataclasses

    from cirq_quasarq.compiler import compile_stim
    from cirq_quasarq.core.program import LAYERED_FROM, STEP

    from benchmarks.random_clifford import paper_random_circuit_stim

    from .schedule_oracle import schedule_reference

    program = compile_stim(paper_random_circuit_stim(60, 8, seed=2))  # the cache's: not changed here
    first_step = program.derived[LAYERED_FROM][0]
    ins = program.instructions.copy()
    ins[:, STEP] = np.arange(len(ins)) // 7  # groups that reuse qubits: other layers
    restepped = dataclasses.replace(program, instructions=ins)
    assert restepped.derived == {} and restepped.derived is not program.derived
    with pytest.raises(ValueError):
        dataclasses.replace(program, derived=program.derived)
    in_place = dataclasses.replace(program)  # a program of its own, with the compile's word on its rows
    in_place.derived[LAYERED_FROM] = (first_step, in_place.rows)
    in_place.instructions = ins
    for other in (restepped, in_place):
        got, want = schedule(other), schedule_reference(other)
        assert np.array_equal(got.instructions, want.instructions) and np.array_equal(got.runs, want.runs)
