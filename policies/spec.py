"""Policy specs as written on command lines: ``name`` or ``name:key=value:key=value``, comma-separated.

Shared by the ``dcpsim`` CLI and ``python -m dcpsim.real_runtime.run``. The policy and its options are checked
as the spec is parsed, each value by its option's declared type (:func:`policies.registry.parse_options`), so a
bad spec is one :class:`PolicyError` before anything is planned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dcpsim.policies.errors import PolicyError
from dcpsim.policies.registry import create_policy, parse_options


@dataclass(frozen=True)
class PolicySpec:
    """A policy name with options, written ``name`` or ``name:key=value:key=value`` on the command line."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``name:key=value:...`` with the typed values (``tolerance=1`` reads back as ``tolerance=1.0``)."""
        return ":".join([self.name] + [f"{k}={v}" for k, v in self.options.items()])


def parse_policy_specs(text: str) -> list[PolicySpec]:
    """``"static-cp,mcore-dcp:cp_engine=hybrid"`` → two specs. Option names may use '-' or '_'.

    Values are typed by the policy's options (``cp_degree=4`` is an int, ``none`` is None where an option
    may be None); an unknown policy or option, or a value its type rejects, is a :class:`PolicyError`."""
    specs: list[PolicySpec] = []
    for item in [t.strip() for t in text.split(",") if t.strip()]:
        name, *opts = item.split(":")
        raw: dict[str, str] = {}
        for o in opts:
            if "=" not in o:
                raise PolicyError(f"policy option {o!r} in {item!r} must be key=value")
            k, v = o.split("=", 1)
            raw[k.strip().replace("-", "_")] = v.strip()
        options = parse_options(name.strip(), raw, from_text=True)
        create_policy(name.strip(), **options)  # what only the whole set can say (e.g. legacy min_cp_size)
        spec = PolicySpec(name.strip(), options)
        if any(s.label == spec.label for s in specs):
            raise PolicyError(f"policy {spec.label!r} is given twice in {text!r}; name each policy (with its "
                              "options) once")
        specs.append(spec)
    if not specs:
        raise PolicyError("no policy given; e.g. --policies static-cp,mcore-dcp,hydra")
    return specs
