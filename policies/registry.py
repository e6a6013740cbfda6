"""The ``Policy`` protocol and the registry of policies by name.

A policy is a class (usually a frozen dataclass whose fields are its options) decorated with
``@register_policy("name")``. Every module in the ``policies`` package is imported on first lookup, so adding
a policy is one new module and nothing else.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from dcpsim.cost_models.base import CostModel
from dcpsim.cost_models.specs import JobSpec
from dcpsim.policies.errors import PolicyError
from dcpsim.policies.plan import BatchLike, Plan


@runtime_checkable
class Policy(Protocol):
    """Decides CP groups, degrees, engines and microbatches for one global batch; deterministic."""

    name: str

    def plan(self, batch: BatchLike, job: JobSpec, cost_model: CostModel) -> Plan: ...


_REGISTRY: dict[str, type] = {}
T = TypeVar("T", bound=type)


def register_policy(name: str) -> Callable[[T], T]:
    def deco(cls: T) -> T:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise PolicyError(f"policy name {name!r} is registered twice ({_REGISTRY[name].__name__}, "
                              f"{cls.__name__})")
        _REGISTRY[name] = cls
        return cls
    return deco


def _discover() -> None:
    from dcpsim import policies
    for mod in pkgutil.iter_modules(policies.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"dcpsim.policies.{mod.name}")


def available_policies() -> list[str]:
    _discover()
    return sorted(_REGISTRY)


def policy_options(name: str) -> dict[str, Any]:
    """Option names of a policy with their defaults."""
    cls = _lookup(name)
    if dataclasses.is_dataclass(cls):
        return {f.name: f.default for f in dataclasses.fields(cls) if f.init and f.name != "name"}
    return {}


def _lookup(name: str) -> type:
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise PolicyError(f"unknown policy {name!r}; valid: {', '.join(sorted(_REGISTRY))}") from None


def create_policy(name: str, **options: Any) -> Policy:
    """Instantiate policy ``name`` with ``options``; options it does not take are an error.

    Options set to None are dropped, so a CLI can pass every flag it has.
    """
    cls = _lookup(name)
    valid = policy_options(name)
    options = {k: v for k, v in options.items() if v is not None}
    bad = sorted(set(options) - set(valid))
    if bad:
        raise PolicyError(f"policy {name!r} has no option {bad[0]!r}; valid: {', '.join(sorted(valid)) or 'none'}")
    return cls(**options)
