"""Errors raised by policies and the plan validator."""

from __future__ import annotations


class PlanError(ValueError):
    """A plan that breaks an invariant of docs/architecture.md, "Plans and their invariants" (the message
    names the microbatch, group and value)."""


class PolicyError(ValueError):
    """An unknown policy, a bad policy option, or a batch the policy cannot schedule."""
