"""GPUs from presets, TOML files or tables: ``--gpu NAME|FILE.toml`` and a scenario's ``[gpu]`` table.

A GPU file (or table) holds the fields of :class:`~cost_models.specs.GPUSpec`, optionally on top of a preset
named by ``base``::

    # my_cluster.toml: H100 nodes with four 400 Gb/s NICs instead of eight
    base = "h100"
    name = "h100-4nic"
    nics_per_node = 4

Without ``base`` every required field must be given: ``peak_bf16_tflops``, ``hbm_gb``, ``hbm_bw_gbs``,
``nvlink_gbs``, ``network_gbs``, ``gpus_per_node`` (``nvlink_domain``, ``nics_per_node``, ``nic_gbs``,
``name`` and ``source`` are optional). Every bad key, type or value is one :class:`SpecError` line naming the
file, the field, the value and what is valid.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dcpsim.cost_models.errors import SpecError
from dcpsim.cost_models.presets import GPUS, get_gpu
from dcpsim.cost_models.specs import GPUSpec
from dcpsim.userfile import check_number, load_toml

_FIELDS = {f.name: f for f in dataclasses.fields(GPUSpec)}
_INT_FIELDS = ("gpus_per_node", "nvlink_domain", "nics_per_node")
_STR_FIELDS = ("name", "source")
DEFAULT_TO_NODE = ("nvlink_domain", "nics_per_node")  # default: one domain per node, one NIC per GPU
REQUIRED = tuple(n for n, f in _FIELDS.items()
                 if f.default is dataclasses.MISSING and n != "name" and n not in DEFAULT_TO_NODE)


def _check_type(origin: str, key: str, v: Any) -> None:
    if key not in _STR_FIELDS:  # type, finiteness and the int64 range here; the ranges: GPUSpec
        check_number(v, f"{origin}: gpu.{key}", integer=key in _INT_FIELDS, error=SpecError)
    elif not isinstance(v, str):
        raise SpecError(f"{origin}: gpu.{key} = {v!r} is invalid: expected a string")


def gpu_from_mapping(d: Mapping[str, Any], origin: str) -> GPUSpec:
    """A GPUSpec from a table of its fields, optionally on top of the preset named by ``base``."""
    if not isinstance(d, Mapping):
        raise SpecError(f"{origin}: a GPU must be a preset name, a .toml file or a table of GPU fields, "
                        f"got {d!r}")
    valid = ["base", *_FIELDS]
    bad = sorted(set(d) - set(valid))
    if bad:
        raise SpecError(f"{origin}: unknown GPU field {bad[0]!r}; valid: {', '.join(valid)}")
    fields = dict(d)
    base_name = fields.pop("base", None)
    if base_name is not None:
        if not isinstance(base_name, str) or base_name not in GPUS:
            raise SpecError(f"{origin}: gpu.base = {base_name!r} is invalid: expected a GPU preset, one of "
                            f"{', '.join(sorted(GPUS))}")
        base: dict[str, Any] = dataclasses.asdict(get_gpu(base_name))
    else:
        missing = [k for k in REQUIRED if k not in fields]
        if missing:
            raise SpecError(f"{origin}: GPU field {missing[0]!r} is missing (required without 'base': "
                            f"{', '.join(REQUIRED)}; or set base = a preset, one of {', '.join(sorted(GPUS))})")
        base = {"name": "custom", "source": origin}
    for k, v in fields.items():
        _check_type(origin, k, v)
    if base_name is not None:
        base["source"] = f"{origin} on top of preset {base_name!r}"
        if "name" not in fields:
            base["name"] = f"{base_name}-custom"
    node = fields.get("gpus_per_node", base.get("gpus_per_node"))
    for derived in DEFAULT_TO_NODE:  # unless given: one per GPU of a node, following a changed node size
        if derived not in fields and base.get(derived) in (None, base.get("gpus_per_node")):
            base[derived] = node
    try:
        return GPUSpec(**{**base, **fields})
    except SpecError as e:
        raise SpecError(f"{origin}: {e}") from None


def load_gpu_file(path: str | Path) -> GPUSpec:
    """The GPU described by the TOML file ``path``."""
    p = Path(path)
    return gpu_from_mapping(load_toml(p, "GPU file (TOML)", error=SpecError), str(p))


def resolve_gpu(gpu: str | Mapping[str, Any] | GPUSpec, origin: str = "gpu") -> GPUSpec:
    """A preset name, a ``.toml`` file, a table of GPU fields, or a GPUSpec as it is."""
    if isinstance(gpu, GPUSpec):
        return gpu
    if isinstance(gpu, Mapping):
        return gpu_from_mapping(gpu, origin)
    if isinstance(gpu, str) and gpu.endswith(".toml"):
        return load_gpu_file(gpu)
    if not isinstance(gpu, str):
        raise SpecError(f"{origin} = {gpu!r} is invalid: expected a GPU preset ({', '.join(sorted(GPUS))}), "
                        "a .toml file or a table of GPU fields")
    return get_gpu(gpu)
