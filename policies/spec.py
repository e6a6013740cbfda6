"""Policy specs as written on command lines: ``name`` or ``name:key=value:key=value``, comma-separated.

Shared by the ``dcpsim`` CLI and ``python -m dcpsim.real_runtime.run``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dcpsim.policies.errors import PolicyError


@dataclass(frozen=True)
class PolicySpec:
    """A policy name with options, written ``name`` or ``name:key=value:key=value`` on the command line."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return ":".join([self.name] + [f"{k}={v}" for k, v in self.options.items()])


def _parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_policy_specs(text: str) -> list[PolicySpec]:
    """``"static-cp,mcore-dcp:cp_engine=hybrid"`` → two specs. Option names may use '-' or '_'."""
    specs = []
    for item in [t.strip() for t in text.split(",") if t.strip()]:
        name, *opts = item.split(":")
        options: dict[str, Any] = {}
        for o in opts:
            if "=" not in o:
                raise PolicyError(f"policy option {o!r} in {item!r} must be key=value")
            k, v = o.split("=", 1)
            options[k.strip().replace("-", "_")] = _parse_value(v.strip())
        specs.append(PolicySpec(name.strip(), options))
    if not specs:
        raise PolicyError("no policy given; e.g. --policies static-cp,mcore-dcp,hydra")
    return specs
