"""The NumPy engine (tableau and frame modes): runs everywhere, the reference for the others."""

from .engine import NumpyEngine

__all__ = ["NumpyEngine"]
