"""Sweep cache keys: what a stored task result depends on, hashed.

A task's result is a function of (1) the point's scenario fields and the policy label, (2) the code that
computes it and (3) the contents of the files the point names. The key hashes all three, so that a stored
result is reused only when none of them changed:

- **scenario and policy**: the parsed fields (not the scenario file's text: a comment or a reordering in a
  scenario file recomputes nothing, a changed value recomputes exactly the points it reaches);
- **code**: :func:`code_version` — ``dcpsim.__version__``, the sha256 of the *content* of every file of the
  installed package (:func:`source_digest`: modules and the shipped data files a run reads — presets, the
  GPUs' default calibrations in ``cost_models/data``, measured tables), and the versions of numpy, scipy and
  simpy. Not the git commit: a commit, a checkout of the same tree elsewhere or a wheel of it reuses every
  result; tests, docs and other files outside the package do not count; an edit to any module or shipped
  data file recomputes every task, since which tasks a code change affects cannot be known;
- **files**: :func:`point_files` — the sha256 of the trace file, the calibration file and the GPU file when
  the point names them (presets and the shipped calibrations are code, covered above). A file that cannot
  be read hashes as ``missing``; its task then records the read error, and reruns once the file exists.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

SCHEMA = 2  # bump when a stored record's meaning changes: old files then no longer match any key
SUBPACKAGES = ("sim", "policies", "cost_models", "traces", "real_runtime", "experiments")
DEPENDENCIES = ("numpy", "scipy", "simpy")  # the libraries a result's numbers go through


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes (hex), or ``missing`` when it cannot be read."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return "missing"
    return h.hexdigest()


def named_files(scenario: dict[str, Any]) -> dict[str, str]:
    """The files a scenario's fields name, by field: ``trace`` (a trace file, not a preset nor a distribution
    spec; ``trace[i]`` for the file components of a ``mix:`` spec), ``calibration`` (a calibration JSON), ``gpu`` (a
    GPU ``.toml`` file, not a preset), ``model`` (a
    Hugging Face ``config.json`` or a model ``.toml``, not a preset)."""
    from dcpsim.traces.spec import is_distribution_spec, mix_files

    named = {}
    trace = scenario.get("trace")
    if isinstance(trace, str) and not is_distribution_spec(trace) and Path(trace).suffix:
        named["trace"] = trace
    elif isinstance(trace, str):  # a mixture's file components: trace[0], trace[1], … in the spec's order
        for i, path in enumerate(mix_files(trace)):
            named[f"trace[{i}]"] = path
    if isinstance(scenario.get("calibration"), str) and scenario["calibration"]:
        named["calibration"] = scenario["calibration"]
    gpu = scenario.get("gpu")
    if isinstance(gpu, str) and gpu.endswith(".toml"):
        named["gpu"] = gpu
    model = scenario.get("model")  # a config.json / model TOML (cost_models.model_files), or a model folder
    if isinstance(model, str) and Path(model).suffix.lower() in (".json", ".toml"):
        named["model"] = model
    elif isinstance(model, str) and (Path(model) / "config.json").is_file():
        named["model"] = str(Path(model) / "config.json")
    return named


def point_files(scenario: dict[str, Any], cache: dict[str, str] | None = None) -> dict[str, str]:
    """The files a point's scenario names (:func:`named_files`), by field, as sha256 digests.

    Paths resolve as the scenario resolves them (relative to the working directory). ``cache`` (path →
    digest) lets one sweep hash each file once.
    """
    out = {}
    for role, path in named_files(scenario).items():
        resolved = str(Path(path).resolve())
        if cache is None:
            out[role] = file_digest(resolved)
        else:
            if resolved not in cache:
                cache[resolved] = file_digest(resolved)
            out[role] = cache[resolved]
    return out


def source_folders() -> list[Path]:
    """The folders the installed ``dcpsim`` package's modules load from (found without importing them)."""
    import importlib.util

    import dcpsim

    dirs = [Path(dcpsim.__file__).resolve().parent]
    for name in SUBPACKAGES:
        spec = importlib.util.find_spec(f"dcpsim.{name}")
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(Path(p).resolve() for p in spec.submodule_search_locations)
    return dirs


def source_digest(folders: list[Path]) -> str:
    """sha256 (hex) of every file under ``folders`` (modules and shipped data files alike: presets, default
    calibrations, measured tables), by path relative to its folder and content; compiled caches
    (``__pycache__``, ``.pyc``) do not count. The same bytes give the same digest in a checkout, a wheel or
    another clone; a commit that changes no file under the folders changes nothing."""
    h = hashlib.sha256()
    for root in folders:
        files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                       and p.suffix != ".pyc")
        h.update(f"{root.name}\0{len(files)}\0".encode())
        for p in files:
            h.update(p.relative_to(root).as_posix().encode() + b"\0" + file_digest(p).encode() + b"\0")
    return h.hexdigest()


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:  # pragma: no cover - a dependency is always installed
        return "absent"


@functools.lru_cache(maxsize=1)
def dependency_versions() -> str:
    """``numpy X, scipy Y, simpy Z``: the libraries whose arithmetic and event order the results go through
    (numpy's reductions and random streams, scipy's fits of calibration tables, simpy's event queue)."""
    return ", ".join(f"{d} {_dist_version(d)}" for d in DEPENDENCIES)


def runtime_versions() -> str:
    """``dcpsim V, numpy X, scipy Y, simpy Z``: what a worker reports, compared with the driver's."""
    from dcpsim import __version__

    return f"dcpsim {__version__}, {dependency_versions()}"


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """The code computing results: ``dcpsim.__version__``, the content digest of the package's files
    (:func:`source_digest`), then the dependencies' versions:
    ``0.1.0+src1a2b3c4d5e6f (numpy 2.2.1, scipy 1.15.0, simpy 4.1.1)``.

    Computed once per process (the modules a process has imported do not change under it).
    """
    from dcpsim import __version__

    return f"{__version__}+src{source_digest(source_folders())[:12]} ({dependency_versions()})"


def task_key(scenario: dict[str, Any], policy: str, files: dict[str, str], code: str) -> str:
    """A stable 16-hex-digit key of a task: scenario content (not its name), policy, file digests, code."""
    content = {k: v for k, v in scenario.items() if k not in ("name", "description", "policies")}
    blob = json.dumps({"schema": SCHEMA, "scenario": content, "policy": policy, "files": files, "code": code},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
