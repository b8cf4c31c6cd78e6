"""cirq-quasarq: a GPU (and NumPy) stabilizer simulator for Cirq."""
