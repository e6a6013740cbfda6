"""Errors raised by cost models and specs.

One exception type per failure family; every message names the field, the value and what would be valid.
"""

from __future__ import annotations


class SpecError(ValueError):
    """An invalid or inconsistent model, GPU, cluster or job specification (or an unknown preset)."""


class InfeasibleError(ValueError):
    """A job that cannot run at all: e.g. the memory budget leaves no room for activations."""


class CalibrationError(ValueError):
    """A malformed profile table or calibration file."""


def require(cond: bool, what: str, value: object, valid: str) -> None:
    """A :class:`SpecError` naming ``what`` (a field), its value and what would be valid, unless ``cond``."""
    if not cond:
        raise SpecError(f"{what} = {value!r} is invalid: {valid}")
