"""Scenario files: TOML with the fields of :class:`experiments.scenario.Scenario`.

Named scenarios live in ``experiments/scenarios/<name>.toml``; any other path to a ``.toml`` file works too.
Unknown keys and wrong types are errors naming the file, the key and the valid choices.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from dcpsim.experiments.errors import ScenarioError
from dcpsim.experiments.scenario import DEFAULT_SCENARIO, Scenario

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SCENARIO_DIR = Path(__file__).parent / "scenarios"


def scenario_names() -> list[str]:
    return ["default"] + sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))


def scenario_from_mapping(d: dict[str, Any], origin: str) -> Scenario:
    types = {f.name: f.type for f in dataclasses.fields(Scenario)}
    bad = sorted(set(d) - set(types))
    if bad:
        raise ScenarioError(f"{origin}: unknown key {bad[0]!r}; valid keys: {', '.join(sorted(types))}")
    changes: dict[str, Any] = {}
    for k, v in d.items():
        default = getattr(DEFAULT_SCENARIO, k)
        if k == "policies":
            if not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
                raise ScenarioError(f"{origin}: 'policies' must be a list of policy names, got {v!r}")
            v = tuple(v)
        elif k == "policy_options":
            if not isinstance(v, dict):
                raise ScenarioError(f"{origin}: 'policy_options' must be a table, got {v!r}")
        elif isinstance(default, bool):
            if not isinstance(v, bool):
                raise ScenarioError(f"{origin}: {k} = {v!r} should be true or false")
        elif (default is not None and not isinstance(v, type(default))
              and not (isinstance(default, float) and isinstance(v, int))):
            raise ScenarioError(f"{origin}: {k} = {v!r} should be of type {type(default).__name__}")
        changes[k] = v
    return dataclasses.replace(DEFAULT_SCENARIO, **changes)


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """The TOML table in ``path``; unreadable or invalid files are a ScenarioError naming the file."""
    try:
        return tomllib.loads(path.read_text())
    except OSError as e:
        raise ScenarioError(f"cannot read {what} file {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"{path}: not valid TOML ({e})") from None


def load_scenario(name_or_path: str) -> Scenario:
    """A named scenario, or a TOML file."""
    if name_or_path == "default":
        return DEFAULT_SCENARIO
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = SCENARIO_DIR / f"{name_or_path}.toml"
        if not path.exists():
            raise ScenarioError(f"unknown scenario {name_or_path!r}; valid: {', '.join(scenario_names())} "
                                "(or a path to a .toml file)")
    data = read_toml(path, "scenario")
    data.setdefault("name", path.stem)
    for key in ("model", "trace"):  # a relative file path is relative to the scenario file
        v = data.get(key)
        if isinstance(v, str) and Path(v).suffix and not Path(v).is_absolute() and not Path(v).exists() \
                and (path.parent / v).exists():
            data[key] = str(path.parent / v)
    return scenario_from_mapping(data, str(path))
