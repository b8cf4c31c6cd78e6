"""The opcode list: the one home of every instruction the engines execute.

Each entry names its Stim gate, its arity and its kind; unitary entries carry the forward
conjugation images G·P·G† of X0, Z0 (and X1, Z1) as signed Pauli strings (qubit 0 first), which
is all an engine needs. Both engines and the CUDA sources derive their gate rules from this table
(every derived table is computed algebraically by `core.paulis`): the NumPy engine through
`FRAME_MAPS` / `INVERSE_TABLE`, the CUDA kernels through the header that `cuda_header()` writes,
the compiler's Clifford synthesis through `CONJUGATION`. The compiler lowers Cirq operations to
these opcodes only.

Basis-changed measurements and resets (MX, MY, RX, ...) are not engine opcodes: the compiler lowers
them to a basis change around M / R / MR (`LOWERED_BASIS`), exactly as Stim's tableau simulator does.

The FRAME_PARITY opcodes are no gate: the identity on the state (tableau mode skips them), and in
frame mode the map in `FRAME_MAPS` that XORs the frame's anticommutation with one Pauli on qubit A
into the X frame of qubit B, a qubit the compiler keeps for it (Stim's OBSERVABLE_INCLUDE of Pauli
targets, which reads the frame without collapsing anything).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from typing import Dict, Tuple

import numpy as np

from . import paulis


class Kind(enum.IntEnum):
    UNITARY = 0
    MEASURE = 1  # M: collapse in Z, write one record
    RESET = 2  # R: collapse in Z, then force |0>
    MEASURE_RESET = 3  # MR: M then R
    NOISE = 4  # a Pauli channel (Program.channels[aux]) on the instruction's targets
    RECORD_NOISE = 5  # a classical channel on records (Program.confusions[aux])
    LOOP = 6  # REPEAT block markers (Program.loops[aux])
    FRAME = 7  # frame mode only: its FRAME_MAPS entry (no Clifford has it); the identity on the state


@dataclasses.dataclass(frozen=True)
class Opcode:
    code: int
    name: str
    arity: int  # qubits per instruction; 0: targets are a range of Program.ext_qubits
    kind: Kind
    images: Tuple[str, ...] = ()  # forward images of X0, Z0, (X1, Z1)


# Forward images as Stim documents them: "X -> +Z" is written "+Z" (qubit 0 leftmost).
_UNITARIES = [
    ("I", 1, "+X +Z"),
    ("X", 1, "+X -Z"),
    ("Y", 1, "-X -Z"),
    ("Z", 1, "-X +Z"),
    ("H", 1, "+Z +X"),
    ("S", 1, "+Y +Z"),
    ("S_DAG", 1, "-Y +Z"),
    ("SQRT_X", 1, "+X -Y"),
    ("SQRT_X_DAG", 1, "+X +Y"),
    ("SQRT_Y", 1, "-Z +X"),
    ("SQRT_Y_DAG", 1, "+Z -X"),
    ("H_XY", 1, "+Y -Z"),
    ("H_YZ", 1, "-X +Y"),
    ("H_NXY", 1, "-Y -Z"),
    ("H_NXZ", 1, "-Z -X"),
    ("H_NYZ", 1, "-X -Y"),
    ("C_XYZ", 1, "+Y +X"),
    ("C_ZYX", 1, "+Z +Y"),
    ("C_NXYZ", 1, "-Y -X"),
    ("C_XNYZ", 1, "-Y +X"),
    ("C_XYNZ", 1, "+Y -X"),
    ("C_NZYX", 1, "-Z -Y"),
    ("C_ZNYX", 1, "+Z -Y"),
    ("C_ZYNX", 1, "-Z +Y"),
    ("CX", 2, "+XX +ZI +IX +ZZ"),
    ("CY", 2, "+XY +ZI +ZX +ZZ"),
    ("CZ", 2, "+XZ +ZI +ZX +IZ"),
    ("SWAP", 2, "+IX +IZ +XI +ZI"),
    ("ISWAP", 2, "+ZY +IZ +YZ +ZI"),
    ("ISWAP_DAG", 2, "-ZY +IZ -YZ +ZI"),
    ("XCX", 2, "+XI +ZX +IX +XZ"),
    ("XCY", 2, "+XI +ZY +XX +XZ"),
    ("XCZ", 2, "+XI +ZZ +XX +IZ"),
    ("YCX", 2, "+XX +ZX +IX +YZ"),
    ("YCY", 2, "+XY +ZY +YX +YZ"),
    ("YCZ", 2, "+XZ +ZZ +YX +IZ"),
    ("SQRT_XX", 2, "+XI -YX +IX -XY"),
    ("SQRT_XX_DAG", 2, "+XI +YX +IX +XY"),
    ("SQRT_YY", 2, "-ZY +XY -YZ +YX"),
    ("SQRT_YY_DAG", 2, "+ZY -XY +YZ -YX"),
    ("SQRT_ZZ", 2, "+YZ +ZI +ZY +IZ"),
    ("SQRT_ZZ_DAG", 2, "-YZ +ZI -ZY +IZ"),
    ("CXSWAP", 2, "+XX +IZ +XI +ZZ"),
    ("SWAPCX", 2, "+IX +ZZ +XX +ZI"),
    ("CZSWAP", 2, "+ZX +IZ +XZ +ZI"),
]

_OTHERS = [
    ("M", 1, Kind.MEASURE),
    ("R", 1, Kind.RESET),
    ("MR", 1, Kind.MEASURE_RESET),
    # Pauli channels; the probabilities and Paulis live in Program.channels[aux].
    ("X_ERROR", 1, Kind.NOISE),
    ("Y_ERROR", 1, Kind.NOISE),
    ("Z_ERROR", 1, Kind.NOISE),
    ("DEPOLARIZE1", 1, Kind.NOISE),
    ("DEPOLARIZE2", 2, Kind.NOISE),
    ("PAULI_CHANNEL_1", 1, Kind.NOISE),
    ("PAULI_CHANNEL_2", 2, Kind.NOISE),
    ("E", 0, Kind.NOISE),  # one Pauli product with probability p, any number of qubits
    ("CONFUSION", 0, Kind.RECORD_NOISE),
    ("REPEAT", 0, Kind.LOOP),
    ("END_REPEAT", 0, Kind.LOOP),
]

# The Pauli whose anticommutation with qubit A's frame each FRAME_PARITY opcode reads.
_FRAME_PARITIES = [("FRAME_PARITY_X", paulis.X), ("FRAME_PARITY_Y", paulis.Y), ("FRAME_PARITY_Z", paulis.Z)]


def _build():
    table = []
    for name, arity, images in _UNITARIES:
        table.append(Opcode(len(table), name, arity, Kind.UNITARY, tuple(images.split())))
    for name, arity, kind in _OTHERS:
        table.append(Opcode(len(table), name, arity, kind))
    for name, _ in _FRAME_PARITIES:
        table.append(Opcode(len(table), name, 2, Kind.FRAME))
    return tuple(table)


OPCODES: Tuple[Opcode, ...] = _build()
BY_NAME: Dict[str, Opcode] = {op.name: op for op in OPCODES}
CODE: Dict[str, int] = {op.name: op.code for op in OPCODES}
NUM_OPCODES = len(OPCODES)
KIND = np.array([int(op.kind) for op in OPCODES], dtype=np.int32)
ARITY = np.array([op.arity for op in OPCODES], dtype=np.int32)

# The compiler's lowering of basis-changed measurement/reset: (before, core, after).
LOWERED_BASIS = {
    "MX": ("H", "M", "H"),
    "MY": ("H_YZ", "M", "H_YZ"),
    "RX": ("H", "R", "H"),
    "RY": ("H_YZ", "R", "H_YZ"),
    "MRX": ("H", "MR", "H"),
    "MRY": ("H_YZ", "MR", "H_YZ"),
}

def unitary_of(name: str) -> np.ndarray:
    """A unitary (little-endian: qubit 0 least significant; up to global phase) with the table's
    conjugation images, for tests that compare against matrices: U maps |0…0> to the joint +1
    eigenvector of the Z generators' images, and X_q to X_q's image."""
    op = BY_NAME[name]
    n = op.arity
    dim = 2**n
    images = [paulis.parse(im) for im in op.images]
    matrix = [(-1) ** sign * paulis.pauli_matrix(letters, endian="little") for sign, letters in images]
    proj = np.eye(dim, dtype=complex)
    for g in matrix[1::2]:
        proj = proj @ (np.eye(dim) + g) / 2
    vals, vecs = np.linalg.eigh((proj + proj.conj().T) / 2)
    v0 = vecs[:, np.argmax(vals)]
    u = np.zeros((dim, dim), dtype=complex)
    for basis in range(dim):
        v = v0
        for q in range(n):
            if (basis >> q) & 1:
                v = matrix[2 * q] @ v
        u[:, basis] = v
    return u


_PAULI_MATRICES = {"I": np.eye(2, dtype=complex), "X": paulis.pauli_matrix([paulis.X]),
                   "Y": paulis.pauli_matrix([paulis.Y]), "Z": paulis.pauli_matrix([paulis.Z])}


@functools.lru_cache(maxsize=None)
def canonical_unitary(code: int) -> np.ndarray:
    """THE unitary of a unitary opcode, global phase included (little-endian, read-only): the
    Pauli matrices for I, X, Y, Z, else `unitary_of` scaled so that its first nonzero entry
    (row-major) is real and positive. Global phases are tracked against these matrices: the
    compiler gives each Cirq gate the phase that separates its unitary from the product of its
    opcodes' canonical unitaries (results/phase.py replays them)."""
    name = OPCODES[code].name
    if name in _PAULI_MATRICES:
        u = _PAULI_MATRICES[name].copy()
    else:
        u = unitary_of(name)
        first = u.reshape(-1)[np.flatnonzero(np.abs(u.reshape(-1)) > 1e-9)[0]]
        u = u * (abs(first) / first)
    u.setflags(write=False)
    return u


def _frame_map(op: Opcode) -> np.ndarray:
    """GF(2) matrix M[out_bit, in_bit] over bits (x0, z0, x1, z1) for Pauli-frame propagation."""
    m = np.zeros((4, 4), dtype=np.uint8)
    for i, image in enumerate(op.images):
        _, letters = paulis.parse(image)
        for q, letter in enumerate(letters):
            m[2 * q, i] = paulis.X_BIT[letter]
            m[2 * q + 1, i] = paulis.Z_BIT[letter]
    if op.arity == 1:
        m[2, 2] = m[3, 3] = 1
    return m


UNITARY_CODES = tuple(op.code for op in OPCODES if op.kind == Kind.UNITARY)


# Per unitary opcode: CONJUGATION, G·P·G† for every local Pauli P (paulis.conjugation_table), and
# INVERSE_IMAGES, the images G†·P·G of its generators, which the inverse-tableau rows need (as
# INVERSE_TABLE). Made on first use (`__getattr__`): a process that only samples frames (a sinter
# worker, the command on detection events) never needs them, and they took 6 ms of every import.
def _conjugation() -> Dict[int, Tuple[np.ndarray, np.ndarray]]:
    return {c: paulis.conjugation_table([paulis.parse(im) for im in OPCODES[c].images]) for c in UNITARY_CODES}


def _inverse_images() -> Dict[int, Tuple[str, ...]]:
    conjugation = __getattr__("CONJUGATION")
    return {c: tuple(paulis.format_signed(*im)
                     for im in paulis.inverse_images([paulis.parse(s) for s in OPCODES[c].images], conjugation[c]))
            for c in UNITARY_CODES}


def _parity_map(letter: int) -> np.ndarray:
    """x1 ^= the anticommutation of (x0, z0) with `letter`: z0 for an X part, x0 for a Z part."""
    m = np.eye(4, dtype=np.uint8)
    m[2, 1] = paulis.X_BIT[letter]
    m[2, 0] = paulis.Z_BIT[letter]
    return m


FRAME_MAPS: Dict[int, np.ndarray] = {c: _frame_map(OPCODES[c]) for c in UNITARY_CODES}
FRAME_MAPS.update({CODE[name]: _parity_map(letter) for name, letter in _FRAME_PARITIES})


def image_table(images_by_code: Dict[int, Tuple[str, ...]]) -> np.ndarray:
    """Pack images into int32 [NUM_OPCODES, 4, 5]: per generator (sign, x0, z0, x1, z1)."""
    table = np.zeros((NUM_OPCODES, 4, 5), dtype=np.int32)
    for code, images in images_by_code.items():
        for g, image in enumerate(images):
            sign, letters = paulis.parse(image)
            table[code, g, 0] = sign
            for q, letter in enumerate(letters):
                table[code, g, 1 + 2 * q] = paulis.X_BIT[letter]
                table[code, g, 2 + 2 * q] = paulis.Z_BIT[letter]
    return table


_MADE_ON_FIRST_USE = {"CONJUGATION": _conjugation, "INVERSE_IMAGES": _inverse_images,
                      "INVERSE_TABLE": lambda: image_table(__getattr__("INVERSE_IMAGES"))}


def __getattr__(name: str):
    """CONJUGATION, INVERSE_IMAGES and INVERSE_TABLE, made on first use and kept. Python calls this
    only for a name not made yet; the module's own calls get the kept value once it is made."""
    if name in _MADE_ON_FIRST_USE and name in globals():
        return globals()[name]
    make = _MADE_ON_FIRST_USE.get(name)
    if make is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = make()
    return value


@functools.lru_cache(maxsize=None)
def pullback_map(code: int) -> Tuple[int, Tuple[int, ...], Tuple[int, ...]]:
    """(arity, output masks, sign monomials) of G† P G for a unitary opcode G, on the bits
    (x0, z0, x1, z1) of the Pauli P on the gate's qubits (bit 0 = x0, bit 1 = z0, ...): output bit
    j is the parity of the input bits in mask j, and the sign flips by the parity of the monomials
    (each a mask of input bits, all set), its algebraic normal form."""
    arity = int(ARITY[code])
    inverse = [paulis.parse(s) for s in __getattr__("INVERSE_IMAGES")[code]]
    signs, letters = paulis.conjugation_table(inverse)
    bits = 2 * arity
    outs, truth = np.zeros(1 << bits, dtype=np.int64), np.zeros(1 << bits, dtype=np.uint8)
    for u in range(1 << bits):
        index = sum(int(paulis.letter_of((u >> 2 * j) & 1, (u >> 2 * j + 1) & 1)) << 2 * j for j in range(arity))
        out = 0
        for j in range(arity):
            letter = int(letters[index, j])
            out |= int(paulis.X_BIT[letter]) << 2 * j | int(paulis.Z_BIT[letter]) << 2 * j + 1
        outs[u], truth[u] = out, signs[index]
    masks = tuple(sum(((int(outs[1 << i]) >> j) & 1) << i for i in range(bits)) for j in range(bits))
    for u in range(1 << bits):  # conjugation is linear on the bits: the masks say all of it
        assert all(bin(u & masks[j]).count("1") % 2 == (int(outs[u]) >> j) & 1 for j in range(bits)), code
    anf = truth.copy()
    for i in range(bits):  # the Möbius transform: truth table -> monomials
        for u in range(1 << bits):
            if u >> i & 1:
                anf[u] ^= anf[u ^ (1 << i)]
    return arity, masks, tuple(u for u in range(1 << bits) if anf[u])


@functools.lru_cache(maxsize=None)
def pullback_tables() -> Tuple[np.ndarray, np.ndarray]:
    """Every unitary opcode's `pullback_map` as the compiled sweeps read it (cuda_src's generated
    header, host_tableau.cpp): the output masks uint8 [NUM_OPCODES, 4], and the sign's monomials
    int32 [NUM_OPCODES] as a set over the 16 masks (bit u: monomial u); zero for other opcodes.
    Read-only."""
    masks, signs = np.zeros((NUM_OPCODES, 4), dtype=np.uint8), np.zeros(NUM_OPCODES, dtype=np.int32)
    for code in UNITARY_CODES:
        _, outs, monomials = pullback_map(code)
        masks[code, : len(outs)] = outs
        signs[code] = sum(1 << u for u in monomials)
    masks.setflags(write=False)
    signs.setflags(write=False)
    return masks, signs


def cuda_header() -> str:
    """The opcode list for `cuda_src`, generated so the kernels never keep a second list."""
    lines = [
        "// Generated from cirq_quasarq/core/opcodes.py by cuda_header(); do not edit.",
        "#pragma once",
        f"#define QQ_NUM_OPCODES {NUM_OPCODES}",
    ]
    for kind in Kind:
        lines.append(f"#define QQ_KIND_{kind.name} {int(kind)}")
    for op in OPCODES:
        lines.append(f"#define QQ_OP_{op.name} {op.code}")
    kinds = ", ".join(str(int(op.kind)) for op in OPCODES)
    lines.append(f"__constant__ int qq_kind[{NUM_OPCODES}] = {{{kinds}}};")
    arity = ", ".join(str(op.arity) for op in OPCODES)
    lines.append(f"__constant__ int qq_arity[{NUM_OPCODES}] = {{{arity}}};")
    # Inverse images for the tableau rows: [op][generator][sign, x0, z0, x1, z1].
    flat = ", ".join(str(v) for v in __getattr__("INVERSE_TABLE").reshape(-1))
    lines.append(f"__constant__ unsigned char qq_inverse_images[{NUM_OPCODES}][4][5] = {{{flat}}};")
    maps = np.zeros((NUM_OPCODES, 4), dtype=np.int32)  # per output bit: mask over input bits
    for code, m in FRAME_MAPS.items():
        for out_bit in range(4):
            maps[code, out_bit] = int(sum(int(m[out_bit, i]) << i for i in range(4)))
    flat = ", ".join(str(v) for v in maps.reshape(-1))
    lines.append(f"__constant__ unsigned char qq_frame_maps[{NUM_OPCODES}][4] = {{{flat}}};")
    # The backward sweep's G† P G on bits (x0, z0, x1, z1) (`pullback_tables`).
    masks, anf = pullback_tables()
    flat = ", ".join(str(v) for v in masks.reshape(-1))
    lines.append(f"__constant__ unsigned char qq_pullback_masks[{NUM_OPCODES}][4] = {{{flat}}};")
    flat = ", ".join(str(v) for v in anf)
    lines.append(f"__constant__ unsigned short qq_pullback_signs[{NUM_OPCODES}] = {{{flat}}};")
    return "\n".join(lines) + "\n"
