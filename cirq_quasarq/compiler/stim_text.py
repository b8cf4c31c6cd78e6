"""Step 1 for Stim circuits, their text: a circuit's text, as Stim prints it, read into NumPy arrays.

`stim_circuit` walks a `stim.Circuit` from `str(circuit)` rather than from its instruction objects
(iterating a circuit copies every instruction's targets). The readers here know nothing of the
builder; each takes a whole block of text in a few vectorized passes:

- `_line_layout(text)`: per line of the circuit, its first byte, its end, its indent, the REPEAT
  blocks around it and its kind (DETECTOR / OBSERVABLE_INCLUDE, QUBIT_COORDS, a closing brace,
  anything else), as `_Layout`.
- `_parse_targets(text)`: lines of plain qubit targets ('0 !3 5') as one array of qubits, their
  inversions and each line's first target.
- `_parse_annotations(raw, indent)`: DETECTOR / OBSERVABLE_INCLUDE lines as `_Annotations`: their
  rec targets, Pauli targets and observable indices (not the detectors' coordinates: Stim's text
  rounds them).

Text in another form (a tag, a target of another kind, a number with more digits than they read)
makes `_parse_targets` and `_parse_annotations` return None, and the compiler takes those
instructions from their objects, which gives the same Program.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple

import numpy as np

from ..core import native, paulis

_POWERS = 10 ** np.arange(10, dtype=np.int32)


def _parse_targets(text: str):
    """(qubits int64 [k], inverted bool [k] or None, first target of each line int64 [lines + 1]) of
    lines of targets ('0 !3 5'), one space between targets, a newline between lines; None when the
    text is not in that form. Read by the compiled path (host_rows.cpp) where there is one, else
    by `_parse_targets_numpy`, its definition."""
    lib = native.compiled()
    if lib is None:
        return _parse_targets_numpy(text)
    raw = text.encode()
    room = len(raw) // 2 + 1
    qubits = np.empty(room, dtype=np.int64)
    inverted = np.empty(room, dtype=np.uint8)
    starts = np.empty(room + 1, dtype=np.int64)
    counts = np.empty(2, dtype=np.int64)
    address = native.address
    total = lib.qq_host_parse_targets(raw, len(raw), address(qubits), address(inverted), address(starts),
                                      address(counts))
    if total < 0:
        return None
    lines, bangs = counts.tolist()
    return qubits[:total], (inverted[:total].view(bool) if bangs else None), starts[:lines + 1]


def _parse_targets_numpy(text: str):
    """`_parse_targets` in NumPy. Vectorized: a target's digits are read back from its end, one
    digit place per NumPy pass (np.fromstring took twice as long)."""
    raw = np.frombuffer(text.encode(), dtype=np.uint8)
    gaps = np.flatnonzero(raw <= 32)  # target i ends at gap i
    total = len(gaps) + 1
    ends = np.empty(total, dtype=np.intp)
    ends[:-1], ends[-1] = gaps, len(raw)
    lengths = np.empty(total, dtype=np.intp)
    lengths[0] = ends[0]
    np.subtract(ends[1:], gaps + 1, out=lengths[1:])
    digits = raw - np.uint8(48)
    inverted = None
    if np.count_nonzero(digits <= 9) + total - 1 != len(raw):  # not all digits: '!' or not this form
        bangs = np.flatnonzero(raw == 33)
        inverted = np.zeros(total, dtype=bool)
        which = np.searchsorted(gaps, bangs)
        inverted[which] = True
        lengths[which] -= 1
        begins = ends[which] - lengths[which]  # a '!' must be its target's first character, alone
        if np.count_nonzero(digits <= 9) + total - 1 + len(bangs) != len(raw) or \
                not (raw[begins - 1] == 33).all() or len(np.unique(which)) != len(which):
            return None
    if not total or not 1 <= lengths.min() <= lengths.max() <= 9:
        return None
    short = lengths.astype(np.uint8)
    qubits = digits.take(ends - 1).astype(np.int32)
    at = ends - 1
    for place in range(1, int(lengths.max())):
        at -= 1
        value = digits.take(at, mode="clip")
        value *= short > place  # none from before the target
        qubits += value * _POWERS[place]
    qubits = qubits.astype(np.int64)
    lines = np.flatnonzero(raw[gaps] == 10)  # gap of each line's last target
    starts = np.empty(len(lines) + 2, dtype=np.int64)
    starts[0], starts[1:-1], starts[-1] = 0, lines + 1, total
    return qubits, inverted, starts


class _LineTargets(NamedTuple):
    """The plain targets of every line of a text that has them (`_read_lines`)."""

    qubits: np.ndarray  # int64: the targets of those lines, in order
    inverted: Optional[np.ndarray]  # bool, per target: written with '!' (None: no '!' anywhere)
    starts: np.ndarray  # int64 [parsed lines + 1]: each parsed line's first target
    line: np.ndarray  # int64 [lines of the text]: the line's index among the parsed ones, -1 if not one
    chars: np.ndarray  # int64 [parsed lines]: the characters of each parsed line's targets


def _targets_text(line: str) -> Optional[str]:
    """What follows a line's first word (its instruction), indent aside; None for a line of one word."""
    body = line.lstrip(" ")
    cut = body.find(" ")
    return body[cut + 1:] if cut > 0 else None


def _read_lines(text: str) -> Tuple[str, Optional[_LineTargets]]:
    """What a printer of a circuit's pieces does beside printing (`stim_printing`): `_parse_targets`
    of every line of `text` (indented or not) whose words after its first are plain targets
    ('H 0 !3 5'), at once, and the text that stands for `text` once they are read: each such line
    whose first word is a bare name (no arguments, no tag) cut after that word ('H '), line for line
    the same otherwise (`text.split("\n")` numbers the lines, as `_line_layout` does). The compile
    walks that short text with the targets read (`chars` says how long each line's were) and never
    copies the long one. (text, None) where no line is read, or one is not in the form after all (a
    number of more than nine digits, '!!')."""
    short, targets = _read_split(text.split("\n"))
    return (text, None) if targets is None else ("\n".join(short), targets)


def _read_split(lines: List[str]) -> Tuple[List[str], Optional[_LineTargets]]:
    """`_read_lines` of a text split into its lines: (the short text's lines, the targets or None)."""
    line = np.full(len(lines), -1, dtype=np.int64)
    rests, chars, short = [], [], []
    for k, body in enumerate(lines):
        rest = _targets_text(body)
        if rest and not rest.encode().translate(None, b"0123456789 !"):
            line[k] = len(rests)
            rests.append(rest)
            chars.append(len(rest))
            head = body[:len(body) - len(rest)]
            short.append(head if "(" not in head and "[" not in head else body)
        else:
            short.append(body)
    parsed = _parse_targets("\n".join(rests)) if rests else None
    if parsed is None:
        return short, None
    return short, _LineTargets(*parsed, line, np.array(chars, dtype=np.int64))


def _encoded(text: str) -> np.ndarray:
    """A circuit's text as uint8, with a newline after its last line too."""
    return np.frombuffer((text + "\n").encode(), dtype=np.uint8)


def _spells(raw: np.ndarray, at: np.ndarray, word: bytes) -> np.ndarray:
    """Per position in `at`: whether `word` is written there (reads past the end clipped)."""
    found = np.ones(len(at), dtype=bool)
    for k, char in enumerate(word):
        found &= raw.take(at + k, mode="clip") == char
    return found


def _numbers(raw: np.ndarray, begins: np.ndarray, ends: np.ndarray, longest: int) -> Optional[np.ndarray]:
    """int64 values of the decimal numbers raw[begins[i]:ends[i]]; None unless each is 1 to `longest`
    digits. Read back from their ends, one digit place per NumPy pass."""
    lengths = ends - begins
    values = np.zeros(len(lengths), dtype=np.int64)
    if not len(lengths):
        return values
    if lengths.min() < 1 or lengths.max() > longest:
        return None
    for place in range(int(lengths.max())):
        has = lengths > place
        digit = raw.take(ends - 1 - place, mode="clip").astype(np.int64) - 48
        if ((digit < 0) | (digit > 9))[has].any():
            return None
        values += np.where(has, digit, 0) * 10 ** place
    return values


class _Annotations(NamedTuple):
    """`_parse_annotations`' tables of a run of DETECTOR / OBSERVABLE_INCLUDE lines."""

    detector: np.ndarray  # bool [lines]: a DETECTOR line (else an OBSERVABLE_INCLUDE one)
    has_args: np.ndarray  # bool [lines]: with parens arguments
    index: np.ndarray  # int64 [lines]: an OBSERVABLE_INCLUDE's index (0 on DETECTOR lines)
    rec_line: np.ndarray  # int64 [rec targets]: per rec[-k] target, in text order, its line
    rec_back: np.ndarray  # int64 [rec targets]: its k
    pauli_line: np.ndarray  # int64 [Pauli targets]: per Pauli target, in text order, its line
    pauli_qubit: np.ndarray  # int64 [Pauli targets]
    pauli_letter: np.ndarray  # int64 [Pauli targets]: core.paulis letters


_DETECTOR = b"DETECTOR"
_OBSERVABLE = b"OBSERVABLE_INCLUDE"
_PAULI_BYTE = np.zeros(256, dtype=np.int64)  # byte -> core.paulis letter (0: none)
_PAULI_BYTE[[ord("X"), ord("Y"), ord("Z")]] = (paulis.X, paulis.Y, paulis.Z)


def _parse_annotations(raw: np.ndarray, indent: int = 0) -> Optional[_Annotations]:
    """The tables of DETECTOR / OBSERVABLE_INCLUDE lines as Stim prints them (uint8 text, a newline
    after each line, `indent` spaces before each): name, then perhaps parens arguments, then targets
    one space apart; None when the text is in another form (a tag, a target that is neither a rec[-k]
    nor an OBSERVABLE_INCLUDE's Pauli, an observable index that is not a plain integer). The
    arguments' other numbers are not read: Stim prints them rounded. Vectorized over the lines."""
    ends = np.flatnonzero(raw == 10)
    if not len(ends) or ends[-1] != len(raw) - 1:
        return None
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1] + 1
    starts += indent
    detector = raw.take(starts, mode="clip") == _DETECTOR[0]
    if not np.where(detector, _spells(raw, starts, _DETECTOR), _spells(raw, starts, _OBSERVABLE)).all():
        return None
    name_end = starts + np.where(detector, len(_DETECTOR), len(_OBSERVABLE))
    has_args = raw.take(name_end, mode="clip") == ord("(")
    closes = np.flatnonzero(raw == ord(")"))  # one per line with arguments (a tag is refused below)
    if len(closes) != np.count_nonzero(has_args) or \
            not (np.searchsorted(ends, closes) == np.flatnonzero(has_args)).all():
        return None
    head_end = name_end.copy()
    head_end[has_args] = closes + 1
    after = raw.take(head_end, mode="clip")
    if not ((after == 32) | (after == 10)).all():
        return None
    # targets: after each space past the line's head, up to the next space or the line's end
    spaces = np.flatnonzero(raw == 32)
    line = np.searchsorted(ends, spaces)
    past_head = spaces >= head_end[line]
    begin, line = spaces[past_head] + 1, line[past_head]
    end = ends[line]
    end[:-1] = np.minimum(end[:-1], begin[1:] - 1)
    if (end <= begin).any():
        return None
    rec = raw.take(begin) == ord("r")
    rec_begin, rec_end = begin[rec], end[rec]
    if not (_spells(raw, rec_begin, b"rec[-").all() and (raw.take(rec_end - 1) == ord("]")).all()):
        return None
    rec_back = _numbers(raw, rec_begin + 5, rec_end - 1, 9)
    pauli_begin, pauli_end, pauli_line = begin[~rec], end[~rec], line[~rec]
    letter_at = pauli_begin + (raw.take(pauli_begin) == ord("!"))  # the sign changes no flip (stim_instructions `_annotation`)
    letter = _PAULI_BYTE.take(raw.take(letter_at))
    qubit = _numbers(raw, letter_at + 1, pauli_end, 9)
    if rec_back is None or qubit is None or not letter.all() or detector[pauli_line].any():
        return None
    index = np.zeros(len(ends), dtype=np.int64)
    observable = np.flatnonzero(~detector)
    if len(observable):
        if not has_args[observable].all():
            return None
        found = _numbers(raw, name_end[observable] + 1, head_end[observable] - 1, 15)
        if found is None:
            return None
        index[observable] = found
    return _Annotations(detector, has_args, index, line[rec], rec_back, pauli_line, qubit, letter)


# Kinds of a circuit text's lines (`_line_layout`).
_LINE_OTHER, _LINE_ANNOTATION, _LINE_COORDS, _LINE_CLOSE = range(4)
_LINE_WORDS = ((_DETECTOR, _LINE_ANNOTATION), (_OBSERVABLE, _LINE_ANNOTATION), (b"QUBIT_COORDS", _LINE_COORDS))


class _Layout(NamedTuple):
    """A circuit's text, line by line: what `stim_circuit._StimCompiler._walk_lines` walks."""

    lines: List[str]
    raw: np.ndarray  # the text as uint8
    starts: np.ndarray  # int64 [lines]: first byte of each line
    ends: np.ndarray  # int64 [lines]: its newline (past the text for the last line)
    indent: np.ndarray  # int64 [lines]: its leading spaces
    depth: np.ndarray  # int64 [lines]: REPEAT blocks around it (a closing brace: those around its block; -1: empty)
    kind: np.ndarray  # int8 [lines]: _LINE_*


def _line_layout(text: str) -> _Layout:
    lines = text.split("\n")
    raw = np.frombuffer(text.encode(), dtype=np.uint8)
    # the lines' ends from their lengths when characters are bytes: a scan of the whole text (and its
    # temporaries, as large) cost more
    if len(raw) == len(text):
        ends = np.cumsum(np.fromiter(map(len, lines), dtype=np.int64, count=len(lines)) + 1) - 1
    else:
        ends = np.append(np.flatnonzero(raw == 10), len(raw))
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1] + 1
    at = starts.copy()
    while True:
        space = raw.take(at, mode="clip") == 32
        if not space.any():
            break
        at += space
    lead = raw.take(at, mode="clip")
    kind = np.full(len(ends), _LINE_OTHER, dtype=np.int8)
    closes = lead == ord("}")
    kind[closes] = _LINE_CLOSE
    opens = raw.take(ends - 1, mode="clip") == ord("{")  # a REPEAT line
    depth = np.cumsum(opens) - opens - np.cumsum(closes)
    depth[lead == 10] = -1  # an empty line (an empty REPEAT body's): no instruction
    for word, line_kind in _LINE_WORDS:
        maybe = np.flatnonzero(lead == word[0])
        if len(maybe):
            name_end = at[maybe] + len(word)
            after = raw.take(name_end, mode="clip")  # the name ends: a space, arguments, a tag, the line
            after[name_end >= len(raw)] = 10
            named = _spells(raw, at[maybe], word) & ((after == 32) | (after == 40) | (after == 91) | (after == 10))
            kind[maybe[named]] = line_kind
    return _Layout(lines, raw, starts, ends, at - starts, depth, kind)
