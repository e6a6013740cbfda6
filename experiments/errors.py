"""The error families a user can cause; the CLI prints them as one line, without a traceback."""

from __future__ import annotations

from dcpsim.cost_models.errors import CalibrationError, InfeasibleError, SpecError
from dcpsim.policies.errors import PlanError, PolicyError


def user_errors() -> tuple[type[BaseException], ...]:
    from dcpsim.traces.errors import TraceError

    return (SpecError, InfeasibleError, CalibrationError, PlanError, PolicyError, TraceError, ScenarioError)


class ScenarioError(ValueError):
    """An unknown scenario, a malformed scenario or sweep file, or a bad command-line value."""
