"""stimcirq's gate and annotation types, when stimcirq is importable (else every test is False)."""

from __future__ import annotations

try:  # pragma: no branch
    import stimcirq as _stimcirq
except ImportError:  # pragma: no cover
    _stimcirq = None

AVAILABLE = _stimcirq is not None


def _type(name: str):
    return getattr(_stimcirq, name, None) if AVAILABLE else None


DetAnnotation = _type("DetAnnotation")
CumulativeObservableAnnotation = _type("CumulativeObservableAnnotation")
ShiftCoordsAnnotation = _type("ShiftCoordsAnnotation")
MeasureAndOrResetGate = _type("MeasureAndOrResetGate")
SweepPauli = _type("SweepPauli")
FeedbackPauli = _type("FeedbackPauli")
TwoQubitAsymmetricDepolarizingChannel = _type("TwoQubitAsymmetricDepolarizingChannel")
IErrorGate = _type("IErrorGate")
IIErrorGate = _type("IIErrorGate")

ANNOTATION_TYPES = tuple(t for t in (DetAnnotation, CumulativeObservableAnnotation,
                                     ShiftCoordsAnnotation) if t is not None)
_IDENTITY_ERRORS = tuple(t for t in (IErrorGate, IIErrorGate) if t is not None)
NOISE_TYPES = tuple(t for t in (TwoQubitAsymmetricDepolarizingChannel,) + _IDENTITY_ERRORS
                    if t is not None)


def is_stim_two_qubit_depolarize(gate) -> bool:
    return TwoQubitAsymmetricDepolarizingChannel is not None and type(gate) is TwoQubitAsymmetricDepolarizingChannel


def is_stim_identity_error(gate) -> bool:
    return bool(_IDENTITY_ERRORS) and type(gate) in _IDENTITY_ERRORS


def is_stim_noise(gate) -> bool:
    return type(gate) in NOISE_TYPES
