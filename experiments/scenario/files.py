"""Scenario files: TOML with the fields of :class:`experiments.scenario.definition.Scenario`.

Named scenarios live in ``experiments/scenarios/<name>.toml``; any other path to a ``.toml`` file works too.
Unknown keys and wrong types are errors naming the file, the key and the valid choices: every scalar field is
parsed by its annotation in :class:`~experiments.scenario.definition.Scenario` (``int | None`` included) the way policy
options are (:class:`policies.registry.OptionType`), the ``policies`` and ``[policy_options]`` by the policy
registry.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

from dcpsim.cost_models.errors import SpecError
from dcpsim.cost_models.gpu_files import gpu_from_mapping
from dcpsim.cost_models.stragglers import Stragglers
from dcpsim.experiments.errors import ScenarioError
from dcpsim.experiments.scenario.definition import DEFAULT_SCENARIO, Scenario
from dcpsim.policies.errors import PolicyError
from dcpsim.policies.registry import OPTION_METADATA, OptionType, check_shared_options
from dcpsim.policies.spec import parse_policy_specs
from dcpsim.userfile import load_toml

SCENARIO_DIR = Path(__file__).parents[1] / "scenarios"  # experiments/scenarios/


# What is valid beyond a field's type, for the fields where it is known here (the rest is checked where it is
# used: JobSpec, the presets, the trace readers). Values come from the fields' meaning (scenario.py comments).
FIELD_BOUNDS: dict[str, dict[str, float]] = {
    "tp": {"ge": 1}, "pp": {"ge": 1}, "pool": {"ge": 1}, "context_len": {"ge": 1},
    "global_batch_tokens": {"ge": 1}, "iterations": {"ge": 1}, "seed": {"ge": 0}, "max_tokens_per_rank": {"ge": 1},
    "memory_reserve_gb": {"ge": 0.0}, "tp_comm_overlap": {"ge": 0.0, "le": 1.0}, "ep": {"ge": 1}, "etp": {"ge": 0},
    "global_batch_seqs": {"ge": 0}, "recompute_layers": {"ge": 0}, "num_layers_in_first_pipeline_stage": {"ge": 0},
    "num_layers_in_last_pipeline_stage": {"ge": 0},
}


def _field_types() -> dict[str, OptionType | None]:
    """Each Scenario field's type from its annotation (None: not a scalar — policies, tables — checked by name)."""
    hints = typing.get_type_hints(Scenario)
    out: dict[str, OptionType | None] = {}
    for f in dataclasses.fields(Scenario):
        try:
            out[f.name] = OptionType.of(hints[f.name], {OPTION_METADATA: FIELD_BOUNDS.get(f.name, {})})
        except TypeError:
            out[f.name] = None
    return out


FIELD_TYPES = _field_types()


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
        if k == "gpu" and isinstance(v, dict):  # a [gpu] table (cost_models.gpu_files), checked here
            changes["gpu_spec"] = v
            v = gpu_from_mapping(v, f"{origin} [gpu]").name
        elif k == "gpu_spec":
            if not isinstance(v, dict):
                raise ScenarioError(f"{origin}: 'gpu_spec' must be a table of GPU fields, got {v!r}")
            gpu_from_mapping(v, f"{origin} gpu_spec")
        elif k == "policies":
            if not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
                raise ScenarioError(f"{origin}: 'policies' must be a list of policy names, got {v!r}")
            v = tuple(v)
            try:
                parse_policy_specs(",".join(v))
            except PolicyError as e:
                raise ScenarioError(f"{origin}: policies: {e}") from None
        elif k == "policy_options":
            if not isinstance(v, dict):
                raise ScenarioError(f"{origin}: 'policy_options' must be a table, got {v!r}")
            try:
                check_shared_options(v)
            except PolicyError as e:
                raise ScenarioError(f"{origin}: [policy_options] {e}") from None
        elif (ot := FIELD_TYPES.get(k)) is not None:  # a scalar field, by its annotation (Optional included)
            try:
                v = ot.parse(v)
            except ValueError as e:
                raise ScenarioError(f"{origin}: {k} = {v!r} is invalid: {e}") from None
            if k in ("slow_ranks", "stragglers"):  # their syntax, checked here (ranges: by the job)
                try:
                    Stragglers.parse(**{k: v}, slow_what=k, random_what=k)
                except SpecError as e:
                    raise ScenarioError(f"{origin}: {e}") from None
        elif not isinstance(v, type(default)):
            raise ScenarioError(f"{origin}: {k} = {v!r} should be of type {type(default).__name__}")
        changes[k] = v
    return dataclasses.replace(DEFAULT_SCENARIO, **changes)


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """The TOML table in ``path``; unreadable or invalid files are a ScenarioError naming the file."""
    return load_toml(path, f"{what} file (TOML)", error=ScenarioError)


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
    for key in ("model", "trace", "calibration"):  # a relative file path is relative to the scenario file
        v = data.get(key)
        if isinstance(v, str) and Path(v).suffix and not Path(v).is_absolute() and not Path(v).exists() \
                and (path.parent / v).exists():
            data[key] = str(path.parent / v)

    gpu = data.get("gpu")  # a GPU file named relative to the scenario file
    if isinstance(gpu, str) and gpu.endswith(".toml") and not Path(gpu).is_absolute() \
            and not Path(gpu).exists() and (path.parent / gpu).exists():
        data["gpu"] = str(path.parent / gpu)
    return scenario_from_mapping(data, str(path))
