"""The core every layer shares; no Cirq inside.

- `paulis`: the one Pauli encoding and algebra (small strings and packed words).
- `opcodes`: the one opcode list (Stim names, arity, kind, conjugation images).
- `program`: the `Program` (struct of arrays) and `ProgramBuilder`, its only writer.
- `tableau`: `InverseTableau`, what engines return, and its forward (Cirq) form.
- `rng`: Philox4x32-10 streams and exact Bernoulli draws, mirrored by cuda_src/philox.cuh.
"""
