"""The error families a user can cause; the CLI prints them as one line, without a traceback."""

from __future__ import annotations

from dcpsim.cost_models.errors import CalibrationError, InfeasibleError, SpecError
from dcpsim.policies.errors import PlanError, PolicyError


def user_errors() -> tuple[type[BaseException], ...]:
    from dcpsim.traces.errors import TraceError

    return (SpecError, InfeasibleError, CalibrationError, PlanError, PolicyError, TraceError, ScenarioError,
            OutputError)


class ScenarioError(ValueError):
    """An unknown scenario, a malformed scenario or sweep file, or a bad command-line value."""


class OutputError(ValueError):
    """An output the command cannot write: a missing or read-only directory, a directory or an input of the
    command in its place, two outputs on one file, an unknown image extension, a full disk, a non-finite
    number in a JSON document (:mod:`experiments.output.write`)."""
